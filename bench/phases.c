/* phases.c - workload 13: a query backend's big blocks, phase after phase.
 *
 * A database backend runs one query step after another, each with its
 * own working memory, all given back when the step ends (PostgreSQL's
 * memory contexts): a sort keeps its tuples in blocks that double from
 * 1 MiB to 8 MiB and their pointers in an array that realloc doubles
 * from 1.5 MiB to 24 MiB; a hash join builds its table in 8 MiB chunks
 * and a bucket array that doubles too, from a different start; an
 * aggregate uses blocks of yet other sizes.  Each step's blocks have
 * sizes the step before did not use, so memory that an allocator keeps
 * for reuse by size serves the next step only in part; what it keeps
 * beside the next step's own is what this workload measures, as peak
 * RSS (glibc unmaps each block at free, and sets the floor).
 *
 * --rounds times the three steps, each writing every byte it allocates.
 * Checks: every block holds its pattern when its step ends.
 *
 *   phases [--rounds 4] [--mb 64]
 */
#include "bench.h"

#define MAX_BLOCKS 256

typedef struct {
    unsigned char *p[MAX_BLOCKS];
    size_t n[MAX_BLOCKS];
    unsigned count;
    size_t bytes;
} step_t;

static void add_block(step_t *s, size_t n, uint64_t tag)
{
    BENCH_CHECK(s->count < MAX_BLOCKS, "too many blocks in a step");
    unsigned char *p = malloc(n);
    BENCH_CHECK(p != NULL, "malloc(%zu) returned NULL", n);
    bench_fill(p, n, tag + s->count);
    s->p[s->count] = p;
    s->n[s->count++] = n;
    s->bytes += n;
}

/* An array that realloc doubles from `first` while it grows to `last`:
 * each growth keeps what was there and fills the new part. */
static unsigned char *grown_array(size_t first, size_t last, uint64_t tag, size_t *len)
{
    unsigned char *a = NULL;
    size_t have = 0;
    for (size_t n = first; n <= last; n *= 2) {
        a = realloc(a, n);
        BENCH_CHECK(a != NULL, "realloc(%zu) returned NULL", n);
        BENCH_CHECK(bench_verify(a, have, tag) == 0, "realloc to %zu lost the array's contents", n);
        for (size_t i = have; i < n; i++)
            a[i] = bench_pat(tag, i);
        have = n;
    }
    *len = have;
    return a;
}

/* A step: blocks that double from `first` to `cap` and then stay at
 * `cap`, up to `bytes` in all, beside an array grown from `arr_first` to
 * `arr_last`; all verified and freed at its end. */
static void step(size_t first, size_t cap, size_t bytes, size_t arr_first, size_t arr_last,
                 uint64_t tag)
{
    static step_t s;
    memset(&s, 0, sizeof s);
    size_t n = first;
    size_t arr_len = 0;             /* set with arr, on the pass that crosses half */
    unsigned char *arr = NULL;
    while (s.bytes < bytes) {
        add_block(&s, n, tag);
        if (n < cap)
            n *= 2;
        if (arr == NULL && s.bytes >= bytes / 2)
            arr = grown_array(arr_first, arr_last, tag ^ 0xa11, &arr_len);
    }
    BENCH_CHECK(bench_verify(arr, arr_len, tag ^ 0xa11) == 0, "the step's array was overwritten");
    free(arr);
    for (unsigned i = 0; i < s.count; i++) {
        BENCH_CHECK(bench_verify(s.p[i], s.n[i], tag + i) == 0, "block %u of a step was overwritten",
                    i);
        free(s.p[i]);
    }
}

int main(int argc, char **argv)
{
    long rounds = bench_arg_long(argc, argv, "--rounds", 4);
    size_t mb = (size_t)bench_arg_long(argc, argv, "--mb", 64);
    BENCH_CHECK(rounds > 0 && mb >= 16 && mb <= 4096, "bad --rounds or --mb");
    size_t bytes = mb << 20;
    double t0 = bench_now();
    for (long r = 0; r < rounds; r++) {
        uint64_t tag = (uint64_t)r * 1000;
        /* sort: blocks of 1 to 8 MiB, tuple pointers 1.5 to 24 MiB */
        step((size_t)1 << 20, (size_t)8 << 20, bytes, (size_t)3 << 19, (size_t)24 << 20, tag + 1);
        /* hash join: 8 MiB chunks, buckets 1 to 16 MiB */
        step((size_t)8 << 20, (size_t)8 << 20, bytes, (size_t)1 << 20, (size_t)16 << 20, tag + 2);
        /* aggregate: blocks of 3 to 12 MiB, a table of 5 to 20 MiB */
        step((size_t)3 << 20, (size_t)12 << 20, bytes, (size_t)5 << 20, (size_t)20 << 20, tag + 3);
    }
    double t = bench_now() - t0;
    bench_metric("round_ms", t * 1e3 / (double)rounds, "ms");
    bench_info("%ld rounds of three steps of %zu MiB", rounds, mb);
    bench_ok();
    return 0;
}
