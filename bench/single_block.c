/* single_block.c - workload 1: one block live at a time.
 *
 * For every power of two from 1 B to --max-log2 (default 32: 4 GiB), time
 * malloc(size), a write to its first byte, free(), in a loop: ns per
 * alloc+free pair.  Each size runs a calibrated batch (doubling until it
 * lasts --budget/6 seconds), then 5 timed batches of that length: the
 * fastest is reported (on a shared machine noise only ever adds time;
 * the runner takes the median over repeated runs).
 * Checks: every pointer is non-NULL and 16-byte aligned (for sizes >= 16),
 * and a block's first and last bytes hold what was written.
 *
 *   single_block [--max-log2 32] [--min-log2 0] [--budget 0.05]
 */
#include "bench.h"

static uint64_t pairs(size_t size, uint64_t n, uint64_t tag)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
        p[0] = (unsigned char)(tag + i);
        bench_escape(p);
        sum += p[0];
        free(p);
    }
    return sum;
}

/* Seconds for n pairs, and the check that each first byte read back. */
static double timed(size_t size, uint64_t n, uint64_t tag)
{
    uint64_t expect = 0;
    for (uint64_t i = 0; i < n; i++)
        expect += (unsigned char)(tag + i);
    double t0 = bench_now();
    uint64_t sum = pairs(size, n, tag);
    double t = bench_now() - t0;
    BENCH_CHECK(sum == expect, "size %zu: first bytes read back wrong", size);
    return t;
}

int main(int argc, char **argv)
{
    int min_log2 = (int)bench_arg_long(argc, argv, "--min-log2", 0);
    int max_log2 = (int)bench_arg_long(argc, argv, "--max-log2", 32);
    double budget = bench_arg_double(argc, argv, "--budget", 0.05);
    if (min_log2 < 0 || max_log2 > 40 || min_log2 > max_log2)
        bench_fail("bad size range 2^%d..2^%d", min_log2, max_log2);

    for (int k = min_log2; k <= max_log2; k++) {
        size_t size = (size_t)1 << k;

        /* Correctness once per size: alignment, both ends writable. */
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
        if (size >= 16 && ((uintptr_t)p & 15) != 0)
            bench_fail("malloc(%zu) = %p is not 16-byte aligned", size, (void *)p);
        p[0] = 0xA5;
        p[size - 1] = 0x5A;
        bench_escape(p);
        BENCH_CHECK(p[0] == (size == 1 ? 0x5A : 0xA5) && p[size - 1] == 0x5A,
                    "size %zu: block ends do not hold what was written", size);
        free(p);

        /* Calibrate: double until one batch lasts budget/6. */
        uint64_t n = 1;
        pairs(size, 4, 1);                          /* warm up */
        for (;;) {
            double t = timed(size, n, (uint64_t)k);
            if (t >= budget / 6 || n >= (1ull << 32))
                break;
            n *= 2;
        }
        double ns[5];
        for (int r = 0; r < 5; r++)
            ns[r] = timed(size, n, (uint64_t)(k + r)) * 1e9 / (double)n;
        char name[64];
        snprintf(name, sizeof name, "pair_ns.%zu", size);
        bench_metric(name, bench_min(ns, 5), "ns");
    }
    bench_ok();
    return 0;
}
