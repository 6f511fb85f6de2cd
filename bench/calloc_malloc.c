/* calloc_malloc.c - workload 2: malloc vs calloc of small and medium blocks.
 *
 * For each size (5, 20, 100, 500, 2000, 8000 bytes), a loop keeps a ring of
 * 64 live blocks: each step frees the oldest, allocates a new one with
 * malloc(size) or calloc(1, size), and writes every byte of it once
 * (memset with a step-dependent byte).  Reports ns per step for each
 * call, the fastest of 5 batches (malloc and calloc batches alternate;
 * noise only adds time, the runner takes medians over runs), and the
 * ratio calloc/malloc.
 *
 * "fresh" variant: the blocks stay live (about --fresh-mb MiB per size,
 * never freed until the end), so every block is carved from memory the
 * process never used: calloc may skip the memset there (fresh pages are
 * zero).  Chunks of 251 malloc calls alternate with chunks of 251 calloc
 * calls, each block written once, and both pay the same first-touch page
 * faults.  Reports fresh_malloc_ns, fresh_calloc_ns and their ratio.
 *
 * Checks: before the timed loops, blocks are dirtied with malloc and then
 * calloc must hand back all-zero memory (every byte checked); in the
 * timed loops each calloc block's first and last bytes must be zero, and
 * every block must still hold its byte when it is freed; an overflowing
 * calloc must fail.
 *
 *   calloc_malloc [--iters 400000] [--fresh-mb 32]
 *                 [--sizes 5,20,100,500,2000,8000]
 */
#include "bench.h"

#define RING 64

static void check_zeroing(size_t size)
{
    unsigned char *b[RING];
    for (int i = 0; i < RING; i++) {
        b[i] = malloc(size);
        BENCH_CHECK(b[i], "malloc(%zu) returned NULL", size);
        memset(b[i], 0xAB, size);
    }
    for (int i = 0; i < RING; i++)
        free(b[i]);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < RING; i++) {
            b[i] = calloc(1, size);
            BENCH_CHECK(b[i], "calloc(1, %zu) returned NULL", size);
            for (size_t j = 0; j < size; j++)
                if (b[i][j] != 0)
                    bench_fail("calloc(1, %zu) byte %zu is 0x%02x, not zero", size, j, b[i][j]);
            memset(b[i], 0xCD, size);
        }
        for (int i = 0; i < RING; i++)
            free(b[i]);
    }
}

/* One batch; returns seconds. */
static double batch(size_t size, long iters, int use_calloc)
{
    unsigned char *ring[RING] = { 0 };
    unsigned char byte[RING] = { 0 };
    double t0 = bench_now();
    for (long i = 0; i < iters; i++) {
        int s = (int)(i & (RING - 1));
        unsigned char *old = ring[s];
        if (old != NULL) {
            if (old[0] != byte[s] || old[size - 1] != byte[s])
                bench_fail("block of %zu bytes changed while live", size);
            free(old);
        }
        unsigned char *p = use_calloc ? calloc(1, size) : malloc(size);
        if (p == NULL)
            bench_fail("%s(%zu) returned NULL", use_calloc ? "calloc" : "malloc", size);
        if (use_calloc && (p[0] != 0 || p[size - 1] != 0))
            bench_fail("calloc(1, %zu) gave a block that is not zero", size);
        unsigned char v = (unsigned char)(i * 13 + 1);
        memset(p, v, size);
        bench_escape(p);
        ring[s] = p;
        byte[s] = v;
    }
    double t = bench_now() - t0;
    for (int s = 0; s < RING; s++)
        free(ring[s]);
    return t;
}

/* Fresh memory: chunks of malloc and calloc calls alternate; nothing is
 * freed until the end of the program.  The chunk is a prime number of
 * calls: an allocator refills in batches (4 KiB of 16-byte blocks is
 * 256), and a chunk of the same length would put every refill, with its
 * page fault, into the same kind of call. */
#define CHUNK 251

typedef struct {
    unsigned char **blocks;
    size_t n, size;
} keep_t;

static void fresh(size_t size, size_t mb, double *malloc_ns, double *calloc_ns, keep_t *keep)
{
    size_t per_kind = (mb << 20) / 2 / (size < 16 ? 16 : size);
    per_kind = (per_kind + CHUNK - 1) / CHUNK * CHUNK;
    keep->blocks = malloc(2 * per_kind * sizeof *keep->blocks);
    BENCH_CHECK(keep->blocks, "out of memory");
    keep->n = 0;
    keep->size = size;
    double tm = 0, tc = 0;
    for (size_t done = 0; done < per_kind; done += CHUNK) {
        for (int kind = 0; kind < 2; kind++) {
            unsigned char **out = keep->blocks + keep->n;
            double t0 = bench_now();
            for (int i = 0; i < CHUNK; i++) {
                unsigned char *p = kind ? calloc(1, size) : malloc(size);
                if (p == NULL)
                    bench_fail("%s(%zu) returned NULL", kind ? "calloc" : "malloc", size);
                if (kind && (p[0] != 0 || p[size - 1] != 0))
                    bench_fail("calloc(1, %zu) gave a block that is not zero", size);
                memset(p, (unsigned char)(i + 1), size);
                bench_escape(p);
                out[i] = p;
            }
            double t = bench_now() - t0;
            if (kind)
                tc += t;
            else
                tm += t;
            keep->n += CHUNK;
        }
    }
    for (size_t i = 0; i < keep->n; i++) {
        unsigned char v = (unsigned char)(i % CHUNK + 1);
        if (keep->blocks[i][0] != v || keep->blocks[i][size - 1] != v)
            bench_fail("fresh block of %zu bytes changed while live", size);
    }
    *malloc_ns = tm * 1e9 / (double)per_kind;
    *calloc_ns = tc * 1e9 / (double)per_kind;
}

/* One size's three figures: malloc and calloc ns per call, and their
 * ratio; `kind` is "" (recycled blocks) or "fresh_". */
static void report(const char *kind, size_t size, double malloc_ns, double calloc_ns)
{
    char name[64];
    snprintf(name, sizeof name, "%smalloc_ns.%zu", kind, size);
    bench_metric(name, malloc_ns, "ns");
    snprintf(name, sizeof name, "%scalloc_ns.%zu", kind, size);
    bench_metric(name, calloc_ns, "ns");
    snprintf(name, sizeof name, "%scalloc_over_malloc.%zu", kind, size);
    bench_metric(name, calloc_ns / malloc_ns, "x");
}

int main(int argc, char **argv)
{
    long iters = bench_arg_long(argc, argv, "--iters", 400000);
    const char *list = bench_arg_str(argc, argv, "--sizes", "5,20,100,500,2000,8000");
    size_t fresh_mb = (size_t)bench_arg_long(argc, argv, "--fresh-mb", 32);
    keep_t kept[64];
    int nkept = 0;

    /* Overflow must fail, not wrap. */
    errno = 0;
    volatile size_t huge_count = SIZE_MAX / 2;
    void *big = calloc(huge_count, 4);
    BENCH_CHECK(big == NULL, "calloc(SIZE_MAX/2, 4) did not fail");
    bench_escape(big);

    char *copy = strdup(list);
    BENCH_CHECK(copy, "out of memory");
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        size_t size = (size_t)strtoul(tok, NULL, 10);
        BENCH_CHECK(size > 0, "bad size %s", tok);
        check_zeroing(size);
        batch(size, iters / 10 + 1, 0);                 /* warm up */
        batch(size, iters / 10 + 1, 1);
        double m[5], c[5];
        for (int r = 0; r < 5; r++) {
            m[r] = batch(size, iters, 0) * 1e9 / (double)iters;
            c[r] = batch(size, iters, 1) * 1e9 / (double)iters;
        }
        report("", size, bench_min(m, 5), bench_min(c, 5));
        if (fresh_mb > 0 && nkept < 64) {
            double fm, fc;
            fresh(size, fresh_mb, &fm, &fc, &kept[nkept]);
            nkept++;
            report("fresh_", size, fm, fc);
        }
    }
    for (int k = 0; k < nkept; k++) {
        for (size_t i = 0; i < kept[k].n; i++)
            free(kept[k].blocks[i]);
        free(kept[k].blocks);
    }
    free(copy);
    bench_ok();
    return 0;
}
