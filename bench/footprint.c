/* footprint.c - workload 11: the memory a small single-threaded program
 * costs.
 *
 * A few hundred live blocks, each replaced --steps times by a new block
 * of a random size, every one stamped and checked: first with sizes
 * spread evenly over 1..8000 B (most small size classes hold one to a
 * few blocks at a time, the case where a page per class costs the
 * most), then with sizes as a typical program's (seven in ten up to
 * 128 B, most of the rest up to 1 KiB, a few up to 8 KiB), and a buffer
 * grown by realloc to 256 KiB and dropped now and then.  At most about
 * half a megabyte is live at once; the figure to read is the peak RSS
 * beside the peers.  Also reports ns per replacement.
 *
 *   footprint [--live 200] [--steps 200000]
 */
#include "bench.h"

static size_t spread_size(bench_rng_t *r)
{
    return (size_t)bench_rng_range(r, 1, 8000);
}

static size_t typical_size(bench_rng_t *r)
{
    uint64_t x = bench_rng_range(r, 0, 99);
    if (x < 70)
        return (size_t)bench_rng_range(r, 1, 128);
    if (x < 95)
        return (size_t)bench_rng_range(r, 129, 1024);
    return (size_t)bench_rng_range(r, 1025, 8192);
}

int main(int argc, char **argv)
{
    long live = bench_arg_long(argc, argv, "--live", 200);
    long steps = bench_arg_long(argc, argv, "--steps", 200000);
    if (live < 1 || steps < 1)
        bench_fail("bad arguments");
    unsigned char **p = calloc((size_t)live, sizeof *p);
    size_t *size = calloc((size_t)live, sizeof *size);
    uint64_t *tag = calloc((size_t)live, sizeof *tag);
    BENCH_CHECK(p && size && tag, "out of memory");
    bench_rng_t rng;
    bench_rng_seed(&rng, 11);
    size_t (*mix[2])(bench_rng_t *) = { spread_size, typical_size };
    unsigned char *buf = NULL;
    size_t buf_len = 0;
    double t0 = bench_now();
    for (int phase = 0; phase < 2; phase++) {
        for (long i = 0; i < steps; i++) {
            long k = (long)bench_rng_range(&rng, 0, (uint64_t)live - 1);
            if (p[k] != NULL) {
                if (!bench_stamp_ok(p[k], size[k], tag[k]))
                    bench_fail("a block was overwritten");
                free(p[k]);
            }
            size[k] = mix[phase](&rng);
            tag[k] = (uint64_t)phase << 40 ^ (uint64_t)i;
            if ((p[k] = malloc(size[k])) == NULL)
                bench_fail("malloc(%zu) returned NULL", size[k]);
            bench_stamp(p[k], size[k], tag[k]);
            if (phase == 1 && i % 64 == 0) {
                /* An output buffer that grows, and is dropped when full. */
                size_t n = buf_len < (256u << 10) ? buf_len * 2 + 4096 : 0;
                if (n == 0) {
                    free(buf);
                    buf = NULL;
                } else {
                    unsigned char *q = realloc(buf, n);
                    if (q == NULL)
                        bench_fail("realloc(%zu) returned NULL", n);
                    memset(q + buf_len, 0x2b, n - buf_len);
                    BENCH_CHECK(buf_len == 0 || q[buf_len - 1] == 0x2b, "realloc lost data");
                    buf = q;
                }
                buf_len = n;
            }
        }
    }
    double t = bench_now() - t0;
    for (long k = 0; k < live; k++) {
        if (p[k] != NULL && !bench_stamp_ok(p[k], size[k], tag[k]))
            bench_fail("a block was overwritten");
        free(p[k]);
    }
    free(buf);
    free(p);
    free(size);
    free(tag);
    bench_metric("step_ns", t * 1e9 / (double)(2 * steps), "ns");
    bench_ok();
    return 0;
}
