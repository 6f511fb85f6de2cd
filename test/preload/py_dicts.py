"""JSON- and dict-heavy work, deterministic: prints digests and counts.

Argument: "shoal" or "glibc", which allocator the process must have
(checked through the C symbol alloc_stats_get; reported on stderr only,
so stdout stays the same either way)."""
import collections
import ctypes
import hashlib
import json
import random
import sys


def check_allocator(expect):
    libc = ctypes.CDLL(None)
    has = hasattr(libc, "alloc_stats_get")
    if has != (expect == "shoal"):
        sys.exit("allocator check: alloc_stats_get %s, expected %s"
                 % ("present" if has else "absent", expect))
    if has:
        # alloc_stats_t starts with its size (in): room to spare.
        buf = (ctypes.c_uint64 * 8192)()
        buf[0] = ctypes.sizeof(buf)
        if libc.alloc_stats_get(buf) != 0:
            sys.exit("alloc_stats_get failed")
    print("allocator:", expect, file=sys.stderr)


def digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
         "iota", "kappa", "lambda", "mu", "\u00fcber", "na\u00efve", "\u6f22\u5b57", "emoji\U0001f600"]


def make_doc(rng, i, depth=0):
    doc = {
        "id": i,
        "name": "-".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))),
        "score": rng.randint(-10**6, 10**6) / 1000,
        "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 8))],
        "flags": {w: rng.random() < 0.5 for w in rng.sample(WORDS, 4)},
        "blob": "x" * rng.choice([0, 1, 15, 16, 17, 100, 1000, 5000]),
    }
    if depth < 3 and rng.random() < 0.3:
        doc["children"] = [make_doc(rng, i * 10 + k, depth + 1) for k in range(rng.randint(1, 4))]
    return doc


def main():
    check_allocator(sys.argv[1] if len(sys.argv) > 1 else "glibc")
    rng = random.Random(20240601)

    docs = [make_doc(rng, i) for i in range(8000)]
    text = json.dumps(docs, sort_keys=True, ensure_ascii=False)
    print("documents", len(docs), "json bytes", len(text.encode()))
    back = json.loads(text)
    assert back == docs, "json round trip changed the documents"
    print("round trip digest", digest(back))
    pretty = json.dumps(back, indent=2, sort_keys=True)
    print("pretty lines", pretty.count("\n") + 1)
    del pretty, text

    # Dicts growing, shrinking, rebuilt.
    d = {}
    for i in range(200000):
        d["k%d" % i] = [i, str(i)]
    for i in range(0, 200000, 3):
        del d["k%d" % i]
    d2 = {k: v[0] * 2 for k, v in d.items() if v[0] % 5}
    print("dict sizes", len(d), len(d2), "sum", sum(d2.values()))
    del d

    # Word counts and grouping.
    counts = collections.Counter()
    groups = collections.defaultdict(list)
    for doc in back:
        for t in doc["tags"]:
            counts[t] += 1
        groups[len(doc["name"]) % 13].append(doc["id"])
    print("top tags", counts.most_common(5))
    print("groups", sorted((k, len(v), sum(v)) for k, v in groups.items()))

    # Many small objects: tuples, sets, strings, bytes.
    s = set()
    for i in range(200000):
        s.add((i % 1000, str(i % 7777)))
    print("set size", len(s), "digest",
          hashlib.sha256(repr(sorted(s)).encode()).hexdigest()[:16])
    chunks = [bytes([i % 256]) * (i % 3000) for i in range(20000)]
    print("bytes digest", hashlib.sha256(b"".join(chunks)).hexdigest()[:16])

    # Sorting big lists of dicts, then dropping everything.
    back.sort(key=lambda x: (x["score"], x["id"]))
    print("sorted first/last", back[0]["id"], back[-1]["id"])
    print("final digest", digest([doc["id"] for doc in back]))


main()
