#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_api (test/fuzz/corpus/): small programs
in the harness's input format (see the comment at the top of fuzz_api.c).
Run it from anywhere; it rewrites the files in place."""
import os

MiB = 1 << 20
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

# Operations (opcode % 16) and size encodings, as fuzz_api.c reads them.
MALLOC, CALLOC, REALLOC, REALLOCARRAY, ALIGNED, FREE, FREE_SIZED, USABLE, \
    COLLECT, REMOTE_FREE, REMOTE_MALLOC, CHECK, PURGE_DELAY, MALLOC_REALLOC = \
    0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14


def size(n):
    if n <= 1024:
        return bytes([0]) + n.to_bytes(2, "big")
    if n <= 4 * MiB:
        return bytes([11]) + n.to_bytes(3, "big")
    assert n <= 64 * MiB
    return bytes([13]) + n.to_bytes(4, "big")


def bound(i):           # 0, 1, 15, 16, 17, 127, 128, 129, 8191, 8192, ...
    return bytes([14, i])


def absurd(i):          # PTRDIFF_MAX, PTRDIFF_MAX + 1, SIZE_MAX, ...
    return bytes([15, i])


def align_pow2(k):
    return bytes([k])


def align_bad(i):       # EINVAL: 0, 3, 6, 12, 24, ...
    return bytes([0xc0 + i])


def align_past(k):      # ENOMEM: 2^(48 + k)
    return bytes([0xf0 + k])


def op(code, slot, *operands):
    return bytes([code, slot]) + b"".join(operands)


def count(n):
    return n.to_bytes(2, "big")


seeds = {
    "basic": b"".join([
        op(MALLOC, 0, size(1)), op(MALLOC, 1, size(16)), op(MALLOC, 2, size(100)),
        op(MALLOC, 3, size(1000)), op(MALLOC, 4, size(5000)), op(MALLOC, 5, size(70000)),
        op(MALLOC, 6, size(3 * MiB)), op(MALLOC, 7, size(0)),
        op(USABLE, 2), op(USABLE, 5), op(CHECK, 6),
        op(FREE, 0), op(FREE_SIZED, 1), op(FREE, 2), op(FREE_SIZED, 3),
        op(MALLOC, 0, size(24)), op(FREE_SIZED, 6), op(MALLOC, 6, size(40 * MiB)),
    ]),
    "calloc-realloc": b"".join([
        op(CALLOC, 0, count(3), size(100)), op(CALLOC, 1, count(1000), size(70)),
        op(CALLOC, 2, count(1), size(3 * MiB)), op(CALLOC, 3, count(0), size(10)),
        op(REALLOC, 0, size(600)), op(REALLOC, 0, size(9000)), op(REALLOC, 0, size(200000)),
        op(REALLOC, 0, size(1500000)), op(REALLOCARRAY, 1, count(16), size(1000)),
        op(REALLOC, 4, size(64)), op(MALLOC_REALLOC, 5, size(100), size(90)),
        op(CHECK, 0), op(CHECK, 1), op(FREE, 0), op(FREE, 5),
    ]),
    "aligned": b"".join(
        [op(ALIGNED, k % 8, align_pow2(k), size(s))
         for k in (0, 4, 5, 6, 7, 12, 16, 17, 21, 22, 23, 26)
         for s in (1, 100, 4096, 70000)]
        + [op(ALIGNED, 9, align_bad(i), size(64)) for i in range(6)]
        + [op(ALIGNED, 10, align_past(k), size(1)) for k in (0, 1, 15)]
        + [op(FREE, k) for k in range(8)]),
    "absurd": b"".join(
        [op(MALLOC, 0, absurd(i)) for i in range(10)]
        + [op(MALLOC, 1, size(500)), op(REALLOC, 1, absurd(2)), op(CHECK, 1),
           op(REALLOCARRAY, 1, count(65535), absurd(1)), op(CHECK, 1),
           op(CALLOC, 2, count(65535), absurd(3)), op(ALIGNED, 3, align_pow2(12), absurd(2))]),
    "remote": b"".join(
        [op(REMOTE_MALLOC, k, size(16 * (k + 1))) for k in range(16)]
        + [op(FREE, k) for k in range(0, 16, 2)]
        + [op(MALLOC, 16 + k, size(48)) for k in range(8)]
        + [op(REMOTE_FREE, 16 + k) for k in range(8)]
        + [op(REMOTE_MALLOC, 30, size(200000)), op(REMOTE_FREE, 30),
           op(REMOTE_MALLOC, 31, size(5 * MiB)), op(REALLOC, 31, size(100))]),
    "purge": b"".join([
        op(PURGE_DELAY, 0), op(MALLOC, 0, size(6 * MiB)), op(FREE, 0),
        op(MALLOC, 0, size(6 * MiB)), op(PURGE_DELAY, 3), op(FREE, 0),
        op(MALLOC, 1, size(6 * MiB)), op(COLLECT, 1), op(CALLOC, 2, count(1), size(6 * MiB)),
        op(PURGE_DELAY, 1), op(MALLOC, 3, size(300000)), op(FREE, 3), op(COLLECT, 0),
        op(CALLOC, 3, count(3), size(100000)),
    ]),
    # Heap profiling on at a 1 KiB mean (the slot byte's bit 5, rate
    # 1 KiB << (slot / 4 % 8)), so that most blocks are sampled: blocks
    # of every tier made, checked, grown, freed here and on the other
    # thread, and freed again after profiling went off.
    "profiled": b"".join(
        [op(PURGE_DELAY, 32)]
        + [op(MALLOC, k, size(s)) for k, s in enumerate((1, 40, 300, 1000, 5000, 70000))]
        + [op(CALLOC, 6, count(10), size(100)), op(REMOTE_MALLOC, 7, size(200)),
           op(MALLOC, 8, size(3 * MiB)), op(REALLOC, 1, size(900)), op(REALLOC, 8, size(100)),
           op(CHECK, 0), op(CHECK, 4), op(FREE, 0), op(REMOTE_FREE, 2), op(FREE_SIZED, 3),
           op(FREE, 7), op(PURGE_DELAY, 60)]
        + [op(MALLOC, 10 + k, size(48)) for k in range(8)]
        + [op(FREE, k) for k in (1, 4, 5, 6, 8)]),
    # Regressions: each was a crash or a false fault once.
    "regress-free-sized-after-shrink": b"".join([
        op(MALLOC, 0, size(250)), op(REALLOC, 0, size(200)), op(FREE_SIZED, 0)]),
    "regress-free-sized-aligned": b"".join([
        op(ALIGNED, 0, align_pow2(6), size(100)), op(FREE_SIZED, 0),
        op(ALIGNED, 1, align_pow2(20), size(100)), op(FREE_SIZED, 1)]),
    # alloc_aligned(4 MiB, 0) once pointed one past its mapping and took
    # over the chunk map entry of whatever lay there (a pool superpage).
    "regress-aligned-zero-size": b"".join(
        [op(MALLOC, k, size(1 * MiB)) for k in range(40)]
        + [op(ALIGNED, 50, align_pow2(22), size(0)), op(ALIGNED, 51, align_pow2(23), size(0))]
        + [op(FREE, k) for k in range(40)]),
    # free_aligned_sized(p, 4 MiB, 0) of aligned_alloc(4 MiB, 0) in a
    # reused 8 MiB mapping was refused: the size check took 0 for 0 where
    # the allocation serves 0 as 1.
    "regress-free-sized-huge-zero": b"".join([
        op(PURGE_DELAY, 3), op(COLLECT, 1), op(MALLOC, 0, size(8 * MiB - 100)),
        op(MALLOC, 1, size(20 * MiB)), op(FREE, 0), op(FREE, 1),
        op(ALIGNED, 2, align_pow2(22), size(0)), op(FREE_SIZED, 2)]),
    # A realloc that could not grow a block cut from a cached mapping
    # kept the mapping's rest, and free_sized then called the size wrong.
    "regress-failed-growth-of-cut-block": b"".join([
        op(PURGE_DELAY, 3), op(COLLECT, 1), op(MALLOC, 0, size(30 * MiB)), op(FREE, 0),
        op(MALLOC, 1, size(10 * MiB)), op(REALLOC, 1, absurd(9)), op(FREE_SIZED, 1)]),
    "regress-huge-realloc-move": b"".join(
        [op(MALLOC, k, size(3 * MiB)) for k in range(8)]
        + [op(REALLOC, k, size(5 * MiB)) for k in range(8)]),
}

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
