/* realloc_grow.c - arrays grown by realloc one element at a time.
 *
 *   stress_realloc [--long] [--threads N] [--seed N] [--scale X]
 *
 * Each of N threads (2 by default) grows an array from one element to its
 * target size by realloc (every fourth step by reallocarray), one element
 * at a time, through every tier: small pages, medium pages, large pool
 * blocks grown in place or moved, huge mappings grown by mremap.  Thread 0
 * uses 8-byte elements up to 64 MiB (256 MiB in --long); the others use
 * 24-byte elements up to a quarter of that and keep making and freeing
 * small blocks in between, so in-place growth is sometimes blocked and the
 * array has to move.  (Under ThreadSanitizer the other threads stop at
 * 2 MiB: see stress_huge_realloc_ok in stress.h.)
 *
 * Contents are the array's pattern.  Each step writes the new element and
 * checks the element before it and the first one; whenever the array
 * moved, every byte is checked (up to 4 MiB; beyond that the first and
 * last 4 KiB and a sample every 64 KiB); and every time the size crosses a
 * power of two, every byte is checked.  Then the array shrinks by halves
 * to one element (every byte checked each time), grows back by doubling,
 * and is freed with alloc_free_sized and its current size.  --long repeats
 * the whole cycle 60 times.
 */
#include "stress.h"

static stress_opts_t opt;
static size_t target_main;
static uint64_t rounds;
static _Atomic uint64_t total_steps, total_moves;

typedef struct grower_s {
    unsigned index;
    pthread_t tid;
} grower_t;

static void check_all_or_sample(const unsigned char *p, size_t n, uint64_t key, const char *where)
{
    if (n <= 4 * MiB) {
        pattern_verify(p, 0, n, key, where);
        return;
    }
    pattern_verify(p, 0, 4 * KiB, key, where);
    for (size_t j = 64 * KiB; j + 64 <= n; j += 64 * KiB)
        pattern_verify(p, j, j + 64, key, where);
    pattern_verify(p, n - 4 * KiB, n, key, where);
}

static void grow_once(grower_t *gr, uint64_t round)
{
    const size_t elem = gr->index == 0 ? 8 : 24;
    size_t target = gr->index == 0 ? target_main : target_main / 4;
    if (gr->index != 0 && !stress_huge_realloc_ok(target, target))
        target = STRESS_POOL_MAX;       /* huge arrays on thread 0 only (TSan) */
    const bool interleave = gr->index != 0;
    rng_t g = rng_make(opt.seed, ((uint64_t)round << 16) | gr->index);
    uint64_t key = rng_next(&g);
    enum { SMALLS = 256 };
    void *smalls[SMALLS] = { 0 };

    unsigned char *p = NULL;
    size_t n = 0, next_pow2 = 1;
    uint64_t steps = 0, moves = 0;
    while (n + elem <= target) {
        size_t m = n + elem;
        unsigned char *q;
        errno = 0;
        if ((steps & 3) == 3)
            q = alloc_reallocarray(p, m / elem, elem);
        else
            q = alloc_realloc(p, m);
        stress_check(q != NULL, "thread %u: realloc to %zu bytes failed: %s", gr->index, m,
                     strerror(errno));
        if (q != p && p != NULL) {
            moves++;
            check_all_or_sample(q, n, key, "array after realloc moved it");
        }
        /* The element before, the first, and the new one. */
        if (n >= elem) {
            pattern_verify(q, n - elem, n, key, "last element after realloc");
            pattern_verify(q, 0, elem, key, "first element after realloc");
        }
        pattern_fill(q, n, m, key);
        p = q;
        n = m;
        steps++;
        if (n >= next_pow2) {
            stress_check(((uintptr_t)p & 15) == 0, "array %p not 16-byte aligned", (void *)p);
            stress_check(alloc_usable_size(p) >= n, "usable size %zu < %zu",
                         alloc_usable_size(p), n);
            pattern_verify(p, 0, n, key, "array at a power of two");
            while (next_pow2 <= n)
                next_pow2 *= 2;
        }
        if (interleave && (steps & 63) == 0) {
            unsigned i = (unsigned)rng_below(&g, SMALLS);
            alloc_free(smalls[i]);
            smalls[i] = alloc_malloc(rng_range(&g, 1, 4096));
            stress_check(smalls[i] != NULL, "malloc failed");
        }
    }
    /* Shrink by halves, every byte checked. */
    while (n > elem) {
        size_t m = (n / elem / 2) * elem;
        unsigned char *q = alloc_realloc(p, m);
        stress_check(q != NULL, "shrinking realloc to %zu failed: %s", m, strerror(errno));
        if (q != p)
            moves++;
        pattern_verify(q, 0, m, key, "array after a shrinking realloc");
        p = q;
        n = m;
        steps++;
    }
    /* Grow back by doubling. */
    while (n * 2 <= target) {
        size_t m = n * 2;
        unsigned char *q = alloc_realloc(p, m);
        stress_check(q != NULL, "doubling realloc to %zu failed: %s", m, strerror(errno));
        if (q != p)
            moves++;
        pattern_verify(q, 0, n, key, "array after a doubling realloc");
        pattern_fill(q, n, m, key);
        p = q;
        n = m;
        steps++;
    }
    alloc_free_sized(p, n);
    for (unsigned i = 0; i < SMALLS; i++)
        alloc_free(smalls[i]);
    atomic_fetch_add(&total_steps, steps);
    atomic_fetch_add(&total_moves, moves);
}

static void *grower(void *arg)
{
    grower_t *gr = arg;
    for (uint64_t r = 0; r < rounds; r++)
        grow_once(gr, r);
    return NULL;
}

int main(int argc, char **argv)
{
    if (stress_init("stress_realloc", argc, argv, &opt) != argc) {
        stress_usage(NULL);
        return 2;
    }
    unsigned nthreads = opt.threads ? opt.threads : 2;
    target_main = (size_t)stress_amount(&opt, 64, 256, 4) * MiB;
    rounds = opt.long_mode ? stress_amount(&opt, 1, 60, 1) : 1;
    grower_t *gr = alloc_calloc(nthreads, sizeof *gr);
    stress_check(gr != NULL, "calloc failed");
    for (unsigned i = 0; i < nthreads; i++) {
        gr[i].index = i;
        stress_thread_start(&gr[i].tid, grower, &gr[i]);
    }
    for (unsigned i = 0; i < nthreads; i++)
        stress_thread_join(gr[i].tid);
    alloc_free(gr);
    stress_check_quiescent();
    stress_done("%u threads x %" PRIu64 " rounds, arrays up to %zu MiB, %" PRIu64
                " reallocs, %" PRIu64 " moves",
                nthreads, rounds, target_main >> 20, atomic_load(&total_steps),
                atomic_load(&total_moves));
    return 0;
}
