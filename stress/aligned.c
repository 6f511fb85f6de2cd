/* aligned.c - every power-of-two alignment crossed with sizes around it.
 *
 *   stress_aligned [--long] [--threads N] [--seed N] [--scale X]
 *
 * For every alignment 2^k from 1 byte to 64 MiB (1 GiB in --long), and for
 * sizes below, at and above it (1, 16, a/2, a-1, a, a+1, 3a/2, 2a+1) and
 * at the tier boundaries (8 KiB, 64 KiB, 2 MiB, 4 MiB, each -1, exact and
 * +1), alloc_aligned must return a block aligned to 2^k with at least the
 * size usable; the block is written with a pattern (every byte up to
 * 64 KiB, then the first and last 4 KiB and 8 bytes at 64 evenly spread
 * places, so a GiB block touches a few MiB) and checked before it is
 * freed.  Blocks are freed alternately with alloc_free and with
 * alloc_free_aligned_sized and the alignment and size that were requested
 * (what C23's free_aligned_sized passes on).  N threads (2 by default) run
 * the sweep at once, in different orders, each keeping its last four
 * blocks live.  Zero-size requests at every alignment must give distinct
 * aligned pointers (or NULL) that disturb no other block.
 *
 * Then the failures: an alignment that is not a power of two (0, 3, 24,
 * 2^k+1, SIZE_MAX) gives NULL with EINVAL whatever the size; a size beyond
 * PTRDIFF_MAX gives NULL with ENOMEM; and alignments past the address
 * space (2^48 and up) give NULL with ENOMEM.
 */
#include "stress.h"

static stress_opts_t opt;
static unsigned max_shift;
static _Atomic uint64_t n_blocks;
static _Atomic size_t biggest;

typedef struct live_s {
    unsigned char *p;
    size_t n, align;
    uint64_t key;
} live_t;

static void drop(live_t *l, uint64_t count)
{
    if (l->p == NULL)
        return;
    sparse_verify(l->p, l->n, l->key, "aligned block before free");
    if (count & 1)
        alloc_free_aligned_sized(l->p, l->align, l->n);
    else
        alloc_free(l->p);
    l->p = NULL;
}

static size_t cap_size(void)
{
    /* The largest block the sweep makes: 1.5 GiB in --long, 96 MiB quick. */
    return ((size_t)3 << max_shift) / 2 + 1;
}

static void one(live_t *ring, unsigned *at, uint64_t *count, size_t align, size_t n)
{
    if (n == 0 || n > cap_size())
        return;
    errno = 0;
    unsigned char *p = alloc_aligned(align, n);
    stress_check(p != NULL, "alloc_aligned(%zu, %zu) failed: %s", align, n, strerror(errno));
    stress_check(((uintptr_t)p & (align - 1)) == 0, "alloc_aligned(%zu, %zu) gave %p, not aligned",
                 align, n, (void *)p);
    check_new_block(p, n, align, "alloc_aligned");
    live_t *l = &ring[*at];
    drop(l, (*count)++);
    l->p = p;
    l->n = n;
    l->align = align;
    l->key = block_key(p, n, opt.seed);
    sparse_fill(p, n, l->key);
    *at = (*at + 1) % 4;
    atomic_fetch_add_explicit(&n_blocks, 1, memory_order_relaxed);
    size_t b = atomic_load_explicit(&biggest, memory_order_relaxed);
    while (n > b && !atomic_compare_exchange_weak(&biggest, &b, n)) {
    }
}

static void *sweeper(void *arg)
{
    unsigned index = (unsigned)(uintptr_t)arg;
    static const size_t bounds[] = { 8 * KiB, 64 * KiB, 2 * MiB, 4 * MiB };
    live_t ring[4] = { { 0 } };
    unsigned at = 0;
    uint64_t count = index;
    for (unsigned i = 0; i <= max_shift; i++) {
        /* Thread 0 goes up, thread 1 down, the others from the middle. */
        unsigned k = index == 0 ? i : index == 1 ? max_shift - i : (i + index * 7) % (max_shift + 1);
        size_t a = (size_t)1 << k;
        const size_t sizes[] = { 1, 16, a / 2, a - 1, a, a + 1, a + a / 2, 2 * a + 1 };
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            one(ring, &at, &count, a, sizes[s]);
        for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
            for (size_t d = 0; d < 3; d++)
                one(ring, &at, &count, a, bounds[b] - 1 + d);
    }
    for (unsigned i = 0; i < 4; i++)
        drop(&ring[i], count++);
    return NULL;
}

static void expect_null(size_t align, size_t n, int err)
{
    errno = 0;
    void *p = alloc_aligned(align, n);
    stress_check(p == NULL, "alloc_aligned(%zu, %zu) gave %p, expected NULL", align, n, p);
    stress_check(errno == err, "alloc_aligned(%zu, %zu): errno %d, expected %d (%s)", align, n,
                 errno, err, err == EINVAL ? "EINVAL" : "ENOMEM");
}

/* Zero-size requests at every alignment: each gives NULL or a distinct,
 * aligned pointer that frees cleanly - and that leaves the blocks around
 * it alone.  (A zero-size block aligned to 4 MiB or more once pointed
 * one past its own mapping, and shoal's chunk map then took the chunk
 * there - often a pool superpage mapped just above - for a huge block:
 * freeing the pool's blocks aborted.)  Pool blocks are made first, so
 * superpages sit next to where the huge mappings go. */
static void zero_sizes(void)
{
    enum { BIG = 48 };
    unsigned char *big[BIG];
    for (unsigned i = 0; i < BIG; i++) {
        big[i] = alloc_malloc(MiB);
        stress_check(big[i] != NULL, "malloc(1 MiB) failed");
        pattern_fill(big[i], 0, MiB, block_key(big[i], MiB, opt.seed));
    }
    void *zero[31] = { 0 };
    for (unsigned k = 0; k <= 30 && k <= max_shift; k++) {
        size_t a = (size_t)1 << k;
        errno = 0;
        void *p = alloc_aligned(a, 0);
        if (p == NULL) {
            stress_check(errno == ENOMEM, "alloc_aligned(%zu, 0): NULL with errno %d", a, errno);
            continue;
        }
        stress_check(((uintptr_t)p & (a - 1)) == 0, "alloc_aligned(%zu, 0) gave %p", a, p);
        for (unsigned j = 0; j < k; j++)
            stress_check(zero[j] != p, "alloc_aligned(%zu, 0) gave %p twice", a, p);
        (void)alloc_usable_size(p);             /* must not fault */
        zero[k] = p;
    }
    for (unsigned i = 0; i < BIG; i++) {
        pattern_verify(big[i], 0, MiB, block_key(big[i], MiB, opt.seed),
                       "1 MiB block beside zero-size aligned blocks");
        alloc_free(big[i]);
    }
    for (unsigned k = 0; k <= 30; k++)
        if (zero[k] != NULL)
            alloc_free_aligned_sized(zero[k], (size_t)1 << k, 0);
}

static void failures(void)
{
    static const size_t bad_aligns[] = { 0, 3, 5, 6, 7, 12, 24, 48, 96, 1000, 4097, 65535,
                                         (size_t)1 << 63 | 1, SIZE_MAX, SIZE_MAX - 1 };
    static const size_t sizes[] = { 0, 1, 100, 64 * KiB, 3 * MiB };
    for (size_t i = 0; i < sizeof bad_aligns / sizeof bad_aligns[0]; i++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            expect_null(bad_aligns[i], sizes[s], EINVAL);
    for (unsigned k = 1; k < 63; k++)
        expect_null(((size_t)1 << k) + 1, 64, EINVAL);
    /* Sizes C forbids. */
    for (unsigned k = 0; k <= 30; k += 6) {
        expect_null((size_t)1 << k, SIZE_MAX, ENOMEM);
        expect_null((size_t)1 << k, (size_t)PTRDIFF_MAX + 1, ENOMEM);
        expect_null((size_t)1 << k, SIZE_MAX - ((size_t)1 << k) + 1, ENOMEM);
    }
    /* No address in a 48-bit space is aligned to 2^48 or more (but 0). */
    for (unsigned k = 48; k < 64; k++)
        expect_null((size_t)1 << k, 1, ENOMEM);
}

int main(int argc, char **argv)
{
    if (stress_init("stress_aligned", argc, argv, &opt) != argc) {
        stress_usage(NULL);
        return 2;
    }
    unsigned nthreads = opt.threads ? opt.threads : 2;
    max_shift = opt.long_mode ? 30 : 26;
    failures();
    zero_sizes();
    pthread_t *t = alloc_calloc(nthreads, sizeof *t);
    stress_check(t != NULL, "calloc failed");
    uint64_t rounds = stress_amount(&opt, 20, 2000, 1);
    for (uint64_t r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < nthreads; i++)
            stress_thread_start(&t[i], sweeper, (void *)(uintptr_t)(i + r * nthreads));
        for (unsigned i = 0; i < nthreads; i++)
            stress_thread_join(t[i]);
    }
    alloc_free(t);
    failures();
    stress_check_quiescent();
    stress_done("%u threads x %" PRIu64 " rounds, alignments 1 B to %zu MiB, %" PRIu64
                " blocks, the largest %zu MiB",
                nthreads, rounds, ((size_t)1 << max_shift) >> 20, atomic_load(&n_blocks),
                atomic_load(&biggest) >> 20);
    return 0;
}
