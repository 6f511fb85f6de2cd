/* The alloc_* API: every semantic shoal.h promises, with block contents
 * checked by patterns.  Sizes cover every tier: small (page blocks up to
 * 8 KiB), medium (page blocks up to 64 KiB), large (pool blocks up to
 * 2 MiB) and huge (own mappings). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shoal.h"
#include "core/chunk_map.h"
#include "core/huge.h"
#include "core/layout.h"
#include "core/pool.h"
#include "core/size_class.h"

#include "test_util.h"

#ifdef UNDER_TSAN
#define CALLOC_ROUNDS 3
#define REMOTE_ROUNDS 3
#else
#define CALLOC_ROUNDS 8
#define REMOTE_ROUNDS 10
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define TOO_BIG ((size_t)PTRDIFF_MAX + 1)

/* One size or more from each tier, and the edges between them. */
static const size_t tier_sizes[] = {
    1, 8, 15, 16, 17, 100, 128, 129, 1000, 4096, 8191, 8192,        /* small  */
    8193, 10000, 32768, 65535, 65536,                               /* medium */
    65537, 100000, 131072, 500000, 1 * MiB, 2 * MiB - 1, 2 * MiB,   /* large  */
    2 * MiB + 1, 3 * MiB, 4 * MiB, 4 * MiB + 1, 10 * MiB, 33 * MiB, /* huge   */
};
#define N_TIER_SIZES (sizeof tier_sizes / sizeof tier_sizes[0])

/* ---- patterns --------------------------------------------------------- */

static uint64_t mix(uint64_t i, uint64_t seed)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15u ^ seed;
    x ^= x >> 29;
    return x * 0xbf58476d1ce4e5b9u;
}

static void fill_pat(void *p, size_t n, uint64_t seed)
{
    unsigned char *c = p;
    size_t w = n / 8;
    for (size_t i = 0; i < w; i++) {
        uint64_t v = mix(i, seed);
        memcpy(c + 8 * i, &v, 8);
    }
    if (n % 8 != 0) {
        uint64_t v = mix(w, seed);
        memcpy(c + 8 * w, &v, n % 8);
    }
}

/* Offset of the first byte of [p, p+n) that differs, or n. */
static size_t pat_mismatch(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *c = p;
    size_t w = n / 8;
    for (size_t i = 0; i < w; i++) {
        uint64_t v = mix(i, seed), got;
        memcpy(&got, c + 8 * i, 8);
        if (got != v)
            return 8 * i;
    }
    if (n % 8 != 0) {
        uint64_t v = mix(w, seed);
        if (memcmp(c + 8 * w, &v, n % 8) != 0)
            return 8 * w;
    }
    return n;
}

#define assert_pattern(p, n, seed)                                            \
    do {                                                                      \
        size_t n_ = (n);                                                      \
        size_t at_ = pat_mismatch((p), n_, (seed));                           \
        if (at_ != n_)                                                        \
            fail_msg("pattern broken at byte %zu of %zu", at_, n_);           \
    } while (0)

static size_t zero_mismatch(const void *p, size_t n)
{
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        if (w != 0)
            break;
    }
    for (; i < n; i++)
        if (c[i] != 0)
            return i;
    return n;
}

#define assert_zeroed(p, n)                                                   \
    do {                                                                      \
        size_t n_ = (n);                                                      \
        size_t at_ = zero_mismatch((p), n_);                                  \
        if (at_ != n_)                                                        \
            fail_msg("byte %zu of %zu is not zero", at_, n_);                 \
    } while (0)

/* No purge passes for the test's span (what it checks would move under
 * one); the delay it had, for purge_restore. */
static long purge_off(void)
{
    long saved = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    return saved;
}

static void purge_restore(long saved)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, saved), 0);
}

static alloc_stats_t stats(void)
{
    alloc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    assert_int_equal(alloc_stats_get(&st), 0);
    return st;
}

/* The page descriptor a small or medium block lives on. */
static shoal_page_t *page_of(const void *p)
{
    shoal_page_t *d = shoal_slot_desc(p);
    return d - d->slot_offset;
}

/* ---- malloc(0), free(NULL), too big ------------------------------------ */

static void test_malloc_zero_unique(void **state)
{
    (void)state;
    enum { N = 64 };
    void *p[N + 5];
    for (int i = 0; i < N; i++) {
        p[i] = alloc_malloc(0);
        assert_non_null(p[i]);
    }
    p[N] = alloc_calloc(0, 1);
    p[N + 1] = alloc_calloc(1, 0);
    p[N + 2] = alloc_calloc(0, SIZE_MAX);               /* 0 bytes, no overflow */
    p[N + 3] = alloc_realloc(NULL, 0);
    p[N + 4] = alloc_aligned(64, 0);
    for (int i = 0; i < N + 5; i++) {
        assert_non_null(p[i]);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(p[i], p[j]);
        /* Whatever usable size it has is ours alone. */
        size_t u = alloc_usable_size(p[i]);
        fill_pat(p[i], u, (uint64_t)i);
    }
    assert_int_equal((uintptr_t)p[N + 4] % 64, 0);
    for (int i = 0; i < N + 5; i++)
        assert_pattern(p[i], alloc_usable_size(p[i]), (uint64_t)i);
    for (int i = 0; i < N + 5; i++)
        alloc_free(p[i]);
}

static void test_free_null_is_noop(void **state)
{
    (void)state;
    void *keep = alloc_malloc(100);                     /* a heap exists */
    alloc_stats_t a = stats();
    alloc_free(NULL);
    alloc_free_sized(NULL, 0);
    alloc_free_sized(NULL, 12345);
    alloc_stats_t b = stats();
    assert_int_equal(a.pool_claims, b.pool_claims);
    assert_int_equal(a.pool_releases, b.pool_releases);
    assert_int_equal(a.pool_slots_used, b.pool_slots_used);
    assert_int_equal(a.huge_live, b.huge_live);
    assert_int_equal(alloc_usable_size(NULL), 0);
    /* realloc(NULL, n) is malloc(n). */
    unsigned char *p = alloc_realloc(NULL, 300);
    assert_non_null(p);
    assert_true(alloc_usable_size(p) >= 300);
    fill_pat(p, 300, 3);
    unsigned char *q = alloc_reallocarray(NULL, 30, 10);
    assert_non_null(q);
    assert_true(alloc_usable_size(q) >= 300);
    fill_pat(q, 300, 4);
    assert_pattern(p, 300, 3);
    alloc_free(p);
    alloc_free(q);
    alloc_free(keep);
}

#define assert_enomem(expr)                                                   \
    do {                                                                      \
        errno = 0;                                                            \
        void *r_ = (expr);                                                    \
        if (r_ != NULL)                                                       \
            fail_msg("%s gave %p, not NULL", #expr, r_);                      \
        if (errno != ENOMEM)                                                  \
            fail_msg("%s: errno %d, not ENOMEM", #expr, errno);               \
    } while (0)

static void test_too_big_is_enomem(void **state)
{
    (void)state;
    size_t huge_live = stats().huge_live;
    assert_enomem(alloc_malloc(TOO_BIG));
    assert_enomem(alloc_malloc(SIZE_MAX));
    assert_enomem(alloc_malloc(SIZE_MAX - 4095));
    assert_enomem(alloc_malloc((size_t)PTRDIFF_MAX));   /* allowed, but no such memory */
    assert_enomem(alloc_malloc((size_t)PTRDIFF_MAX - 3 * 65536));
    assert_enomem(alloc_calloc(1, TOO_BIG));
    assert_enomem(alloc_calloc(TOO_BIG, 1));
    assert_enomem(alloc_calloc(SIZE_MAX, 2));           /* overflows */
    assert_enomem(alloc_calloc(2, SIZE_MAX / 2 + 1));
    assert_enomem(alloc_calloc((size_t)1 << 32, (size_t)1 << 32));
    assert_enomem(alloc_calloc(SIZE_MAX, SIZE_MAX));
    assert_enomem(alloc_reallocarray(NULL, SIZE_MAX, 2));
    assert_enomem(alloc_reallocarray(NULL, (size_t)1 << 40, (size_t)1 << 24));
    assert_enomem(alloc_aligned(64, SIZE_MAX));
    assert_enomem(alloc_aligned(4096, TOO_BIG));
    assert_enomem(alloc_aligned(2 * MiB, SIZE_MAX - 100));
    assert_enomem(alloc_aligned(64 * MiB, TOO_BIG));
    /* A power of two, so not EINVAL, but not a block anyone can have. */
    assert_enomem(alloc_aligned((size_t)1 << 63, 1));
    assert_enomem(alloc_aligned((size_t)1 << 62, 1));
    /* Nothing leaked from the failures. */
    assert_int_equal(stats().huge_live, huge_live);
}

/* A block no machine of this size could back: the kernel's overcommit
 * heuristic (the default, vm.overcommit_memory 0, or 2) refuses its
 * mapping, as it refuses the C library's, and the program gets NULL
 * rather than being killed when it touches the block.  Skipped where
 * the kernel is told to grant everything (1). */
static void test_beyond_the_machine_is_enomem(void **state)
{
    (void)state;
    char mode = '0';
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    if (f != NULL) {
        mode = (char)fgetc(f);
        fclose(f);
    }
    if (mode == '1')
        skip();
    const size_t vast = (size_t)1 << 46;        /* 64 TiB */
    size_t huge_live = stats().huge_live;
    assert_enomem(alloc_malloc(vast));
    assert_enomem(alloc_calloc(1, vast));
    assert_enomem(alloc_aligned((size_t)1 << 40, 1));
    /* Grown by realloc, in place or moved: refused, the block kept. */
    char *p = alloc_malloc(8 * MiB);
    assert_non_null(p);
    fill_pat(p, 8 * MiB, 46);
    assert_enomem(alloc_realloc(p, vast));
    assert_pattern(p, 8 * MiB, 46);
    alloc_free(p);
    assert_int_equal(stats().huge_live, huge_live);
}

/* ---- alignment ------------------------------------------------------- */

static void check_aligned_block(void *p, size_t align, size_t n, uint64_t seed)
{
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % align, 0);
    assert_int_equal((uintptr_t)p % SHOAL_ALIGN, 0);
    size_t u = alloc_usable_size(p);
    assert_true(u >= n);
    if (u <= 4 * MiB) {
        fill_pat(p, u, seed);
    } else {
        /* Big: the first and last pages of the request and the last usable
         * byte (a reused mapping can be big for a small request). */
        fill_pat(p, 4096, seed);
        if (n >= 8192)
            fill_pat((char *)p + n - 4096, 4096, seed + 1);
        if (u > n)
            ((volatile char *)p)[u - 1] = (char)seed;
    }
}

static void recheck_aligned_block(void *p, size_t n, uint64_t seed)
{
    size_t u = alloc_usable_size(p);
    if (u <= 4 * MiB) {
        assert_pattern(p, u, seed);
    } else {
        assert_pattern(p, 4096, seed);
        if (n >= 8192)
            assert_pattern((char *)p + n - 4096, 4096, seed + 1);
        if (u > n)
            assert_int_equal(((volatile char *)p)[u - 1], (char)seed);
    }
}

/* Every power of two from 1 to 1 GiB, with sizes below, at and above it;
 * blocks of one alignment are live together, so overlaps show. */
static void test_aligned_every_power_of_two(void **state)
{
    (void)state;
    for (unsigned shift = 0; shift <= 30; shift++) {
        size_t a = (size_t)1 << shift;
        size_t sizes[5] = { 1, a / 2 + 1, a, a + 1, 3 * a };
        unsigned nsizes = a <= 64 * MiB ? 5 : 3;        /* up to a for the largest */
        void *p[5];
        for (unsigned i = 0; i < nsizes; i++) {
            p[i] = alloc_aligned(a, sizes[i]);
            if (p[i] == NULL)
                fail_msg("alloc_aligned(%zu, %zu) failed, errno %d", a, sizes[i], errno);
            check_aligned_block(p[i], a, sizes[i], shift * 8 + i);
        }
        for (unsigned i = 0; i < nsizes; i++)
            recheck_aligned_block(p[i], sizes[i], shift * 8 + i);
        for (unsigned i = 0; i < nsizes; i++)
            alloc_free(p[i]);
    }
    alloc_collect(true);
}

/* Small aligned requests, many live at once from shared pages. */
static void test_aligned_many_small(void **state)
{
    (void)state;
    enum { N = 200 };
    void *p[N];
    for (size_t a = 32; a <= 64 * KiB; a *= 2) {
        for (int i = 0; i < N; i++) {
            size_t n = 1 + (size_t)(i * 37) % (a < 4096 ? 3 * a : a);
            p[i] = alloc_aligned(a, n);
            check_aligned_block(p[i], a, n, a + (size_t)i);
        }
        for (int i = 0; i < N; i++) {
            recheck_aligned_block(p[i], 0, a + (size_t)i);
            alloc_free(p[i]);
        }
    }
}

/* Aligned requests and plain ones of the same classes, freed and made
 * again in turn: the aligned pops take recycled blocks from pages that
 * plain mallocs share (and refill from the blocks freed into them). */
static void test_aligned_reuse_mixed(void **state)
{
    (void)state;
    enum { RING = 64, STEPS = 4000 };
    static const size_t aligns[] = { 32, 64, 256, 4096 };
    void *ring[RING] = { 0 };
    size_t size[RING] = { 0 };
    uint64_t seed[RING] = { 0 };
    for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++) {
        size_t a = aligns[k];
        for (unsigned i = 0; i < STEPS; i++) {
            unsigned s = i % RING;
            if (ring[s] != NULL) {
                recheck_aligned_block(ring[s], size[s], seed[s]);
                alloc_free(ring[s]);
            }
            size[s] = 1 + (size_t)(i * 2654435761u) % (2 * a);
            seed[s] = a * STEPS + i;
            bool aligned = (i & 1) == 0;
            ring[s] = aligned ? alloc_aligned(a, size[s]) : alloc_malloc(shoal_align_up(size[s], a));
            check_aligned_block(ring[s], aligned ? a : SHOAL_ALIGN, size[s], seed[s]);
        }
        for (unsigned s = 0; s < RING; s++) {
            recheck_aligned_block(ring[s], size[s], seed[s]);
            alloc_free(ring[s]);
            ring[s] = NULL;
        }
    }
}

static void test_aligned_bad_alignment_is_einval(void **state)
{
    (void)state;
    static const size_t bad[] = {
        0, 3, 5, 6, 7, 9, 12, 24, 48, 96, 100, 1000, 4095, 4097,
        ((size_t)1 << 20) + 1, (size_t)3 << 20, ((size_t)1 << 63) + 1, SIZE_MAX,
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        void *p = alloc_aligned(bad[i], 64);
        if (p != NULL)
            fail_msg("alignment %zu gave %p", bad[i], p);
        assert_int_equal(errno, EINVAL);
        errno = 0;
        assert_null(alloc_aligned(bad[i], 0));
        assert_int_equal(errno, EINVAL);
    }
}

/* ---- usable size ------------------------------------------------------ */

static void test_usable_size_is_writable(void **state)
{
    (void)state;
    void *p[N_TIER_SIZES];
    for (size_t i = 0; i < N_TIER_SIZES; i++) {
        size_t n = tier_sizes[i];
        p[i] = alloc_malloc(n);
        assert_non_null(p[i]);
        size_t u = alloc_usable_size(p[i]);
        if (u < n)
            fail_msg("usable %zu < requested %zu", u, n);
        if (n <= SHOAL_MEDIUM_MAX)          /* no padding beyond the size class */
            assert_int_equal(u, shoal_class_size(shoal_size_to_class(n)));
        else if (n <= SHOAL_LARGE_MAX)      /* one power-of-two pool block */
            assert_true(u < 2 * n);
        fill_pat(p[i], u, 1000 + i);
    }
    for (size_t i = 0; i < N_TIER_SIZES; i++) {
        assert_pattern(p[i], alloc_usable_size(p[i]), 1000 + i);
        alloc_free(p[i]);
    }
    /* calloc and aligned blocks, too. */
    for (size_t i = 0; i < N_TIER_SIZES; i++) {
        size_t n = tier_sizes[i];
        void *c = alloc_calloc(1, n);
        assert_non_null(c);
        size_t u = alloc_usable_size(c);
        assert_true(u >= n);
        fill_pat(c, u, i);
        assert_pattern(c, u, i);
        alloc_free(c);
    }
}

/* ---- realloc ---------------------------------------------------------- */

static void *realloc_checked(void *p, size_t old, size_t n, uint64_t *seed)
{
    void *q = alloc_realloc(p, n);
    if (q == NULL)
        fail_msg("realloc %zu -> %zu failed, errno %d", old, n, errno);
    size_t keep = old < n ? old : n;
    size_t at = pat_mismatch(q, keep, *seed);
    if (at != keep)
        fail_msg("realloc %zu -> %zu lost byte %zu", old, n, at);
    assert_true(alloc_usable_size(q) >= n);
    *seed += 1;
    fill_pat(q, n, *seed);
    return q;
}

/* Up through every tier and back down, then jumps across several tiers at
 * once: the bytes common to both sizes survive every move. */
static void test_realloc_keeps_contents(void **state)
{
    (void)state;
    /* Huge blocks growing into bigger huge blocks are left to
     * test_realloc_huge_grows; every other transition is here. */
    static const size_t seq[] = {
        1, 24, 200, 5000, 8192, 8193, 40000, 65536, 65537, 300000, 2 * MiB,
        2 * MiB + 1,                                                /* up */
        2 * MiB, 1 * MiB, 70000, 65536, 9000, 8000, 300, 16, 1,     /* down */
        40 * MiB, 30 * MiB, 12 * MiB, 3 * MiB, 1, 2 * MiB, 100, 8193, 3 * MiB, 65537,
        5 * MiB, 2 * MiB - 1, 20 * MiB, 64 * KiB, 1 * MiB, 7,       /* jumps */
    };
    uint64_t seed = 77;
    void *p = NULL;
    size_t cur = 0;
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        p = realloc_checked(p, cur, seq[i], &seed);
        cur = seq[i];
        /* The same size again changes nothing. */
        p = realloc_checked(p, cur, cur, &seed);
    }
    alloc_free(p);

    /* Aligned blocks of every tier move and resize with their contents
     * (realloc need not keep the alignment). */
    static const size_t aligned[][2] = {
        { 256, 3000 }, { 64 * KiB, 40000 }, { 1 * MiB, 700 * KiB }, { 8 * MiB, 5 * MiB },
    };
    for (size_t i = 0; i < sizeof aligned / sizeof aligned[0]; i++) {
        size_t n = aligned[i][1];
        p = alloc_aligned(aligned[i][0], n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % aligned[i][0], 0);
        fill_pat(p, n, ++seed);
        p = realloc_checked(p, n, n / 2, &seed);
        p = realloc_checked(p, n / 2, n < 4 * MiB ? 40 * MiB : 1000, &seed);
        p = realloc_checked(p, n < 4 * MiB ? 40 * MiB : 1000, 3 * n, &seed);
        alloc_free(p);
    }

    /* Many small blocks resized in turn, interleaved. */
    enum { N = 64 };
    void *b[N];
    size_t sz[N];
    uint64_t sd[N];
    for (int i = 0; i < N; i++) {
        sz[i] = 16 + (size_t)i * 40;
        sd[i] = 5000 + (uint64_t)i * 1000;
        b[i] = alloc_malloc(sz[i]);
        fill_pat(b[i], sz[i], sd[i]);
    }
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < N; i++) {
            size_t n = round % 2 == 0 ? sz[i] * 3 + 7 : sz[i] / 2 + 1;
            b[i] = realloc_checked(b[i], sz[i], n, &sd[i]);
            sz[i] = n;
        }
        for (int i = 0; i < N; i++)
            assert_pattern(b[i], sz[i], sd[i]);
    }
    for (int i = 0; i < N; i++)
        alloc_free(b[i]);
}

/* A small block grown and shrunk within its class stays where it is
 * (free_sized takes it back at the size it ended with); one shrunk to
 * less than half moves to a smaller class. */
static void test_realloc_small_in_place(void **state)
{
    (void)state;
    char *p = alloc_malloc(1);
    assert_non_null(p);
    p[0] = 1;
    for (size_t k = 2; k <= 16; k++) {
        char *q = alloc_realloc(p, k);
        assert_ptr_equal(q, p);
        for (size_t i = 0; i + 1 < k; i++)
            assert_int_equal(p[i], (char)(i + 1));
        p[k - 1] = (char)k;
    }
    assert_ptr_equal(alloc_realloc(p, 3), p);
    assert_int_equal(p[2], 3);
    alloc_free_sized(p, 3);

    char *big = alloc_malloc(1000);
    fill_pat(big, 1000, 41);
    assert_ptr_equal(alloc_realloc(big, 600), big);     /* wastes less than half */
    char *small = alloc_realloc(big, 100);
    assert_ptr_not_equal(small, big);
    assert_true(alloc_usable_size(small) < 200);
    assert_pattern(small, 100, 41);
    alloc_free_sized(small, 100);
}

/* realloc(p, 0) frees p and returns NULL, as glibc's does, at every
 * tier; reallocarray(p, 0, n) too; realloc(NULL, 0) is malloc(0). */
static void test_realloc_zero_frees(void **state)
{
    (void)state;
    static const size_t sizes[] = { 1, 16, 1000, 20 * KiB, 100 * KiB, 1 * MiB, 8 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int array = 0; array < 2; array++) {
            size_t before = stats().allocated;
            char *p = alloc_malloc(sizes[i]);
            assert_non_null(p);
            fill_pat(p, sizes[i], (unsigned)i);
            assert_true(stats().allocated >= before + sizes[i]);
            errno = 0;
            void *q = array ? alloc_reallocarray(p, 0, 8) : alloc_realloc(p, 0);
            assert_null(q);
            assert_int_equal(errno, 0);
            assert_int_equal(stats().allocated, before);
        }
    }
    char *a = alloc_realloc(NULL, 0), *b = alloc_realloc(NULL, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    alloc_free(a);
    alloc_free(b);
}

/* A huge block grows into a bigger one: in place when the address space
 * after its mapping is free, else by moving the pages to a new mapping.
 * A page mapped right after the block forces the move. */
static void test_realloc_huge_grows(void **state)
{
    (void)state;
    uint64_t seed = 300;
    static const size_t aligns[] = { 0, 8 * MiB };
    for (int a = 0; a < 2; a++) {
        size_t n = 3 * MiB;
        char *p = aligns[a] ? alloc_aligned(aligns[a], n) : alloc_malloc(n);
        assert_non_null(p);
        fill_pat(p, n, ++seed);
        for (size_t m = 6 * MiB; m <= 96 * MiB; m *= 4) {
            /* Block the address space after the mapping. */
            shoal_huge_t *h = shoal_huge_of(p, shoal_chunk_of(p));
            assert_non_null(h);
            char *end = h->base + h->map_size;
            void *guard = mmap(end, 4096, PROT_NONE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            p = realloc_checked(p, n, m, &seed);
            if (guard != MAP_FAILED) {
                assert_ptr_equal(guard, end);
                assert_int_equal(munmap(guard, 4096), 0);
            }
            n = m;
            if (aligns[a])
                assert_int_equal((uintptr_t)p % aligns[a], 0);
        }
        /* Freed normally, and the old address is not a block any more. */
        alloc_free(p);
    }
    /* Growth with no guard (in place when the kernel allows). */
    char *p = alloc_malloc(4 * MiB);
    size_t n = 4 * MiB;
    fill_pat(p, n, ++seed);
    for (size_t m = 5 * MiB; m <= 40 * MiB; m += 7 * MiB) {
        p = realloc_checked(p, n, m, &seed);
        n = m;
    }
    alloc_free(p);
}

/* A large block shrinks where it is, and grows where it is when the slots
 * after it are free.  Purging is off meanwhile: a purge pass borrows free
 * slots for the length of an madvise, and a pass of the background purger
 * already under way may still run once, so the cycle is tried again if
 * the one grow that must be in place was not (a real failure fails every
 * time). */
static bool large_in_place_cycle(void)
{
    char *p = alloc_malloc(2 * MiB);
    assert_non_null(p);
    assert_int_equal(alloc_usable_size(p), 2 * MiB);
    fill_pat(p, 2 * MiB, 1);
    char *q = alloc_realloc(p, 100 * KiB);
    assert_ptr_equal(q, p);
    assert_int_equal(alloc_usable_size(p), 128 * KiB);
    assert_pattern(p, 100 * KiB, 1);
    /* The upper slots were just given back: growing takes them again. */
    q = alloc_realloc(p, 2 * MiB);
    assert_non_null(q);
    assert_pattern(q, 100 * KiB, 1);
    if (q != p) {
        alloc_free(q);
        return false;
    }
    assert_int_equal(alloc_usable_size(p), 2 * MiB);
    fill_pat(p, 2 * MiB, 2);
    q = alloc_realloc(p, 300 * KiB);
    assert_ptr_equal(q, p);
    assert_pattern(p, 300 * KiB, 2);
    q = alloc_realloc(p, 500 * KiB);                    /* same block */
    assert_ptr_equal(q, p);
    assert_pattern(p, 300 * KiB, 2);
    fill_pat(p, 500 * KiB, 3);
    q = alloc_realloc(p, 1 * MiB + 1);                  /* grows to 2 MiB */
    assert_non_null(q);
    assert_pattern(q, 500 * KiB, 3);
    if (q != p) {
        alloc_free(q);
        return false;
    }
    fill_pat(p, 1 * MiB + 1, 4);
    assert_pattern(p, 1 * MiB + 1, 4);
    alloc_free(p);
    return true;
}

static void test_realloc_large_in_place(void **state)
{
    (void)state;
    long saved = purge_off();
    int tries = 0;
    while (!large_in_place_cycle())
        assert_true(++tries < 3);
    purge_restore(saved);
}

/* A buffer grown by doubling through the large tier moves into it once,
 * and then at most once more on its way to 2 MiB (a block that must move
 * to grow starts four times its size, the rest given back), with blocks
 * of every order live around it; its contents survive every step. */
static void test_realloc_doubling_grows_in_place(void **state)
{
    (void)state;
    enum { AROUND = 12 };
    void *around[AROUND];
    for (int i = 0; i < AROUND; i++) {
        around[i] = alloc_malloc((size_t)(70 + 97 * i) * KiB);
        assert_non_null(around[i]);
    }
    uint64_t seed = 4000;
    for (int cycle = 0; cycle < 20; cycle++) {
        size_t n = 4096;
        void *p = alloc_malloc(n);
        fill_pat(p, n, seed);
        int large_moves = 0;
        while (n * 2 <= 2 * MiB) {
            void *q = realloc_checked(p, n, n * 2, &seed);
            if (q != p && n > SHOAL_MEDIUM_MAX)
                large_moves++;
            p = q;
            n *= 2;
        }
        assert_true(large_moves <= 1);
        alloc_free(p);
    }
    for (int i = 0; i < AROUND; i++)
        alloc_free(around[i]);
}

/* A block a growing buffer moves into has room after it: not a cached
 * block of just its size (which the next doubling would leave again),
 * even one at the boundary the room asks for.  A 128 KiB block at a
 * 512 KiB boundary, with a block right after it, is freed into the
 * cache; a buffer grown from 60 KiB then moves once, into the large
 * tier, and grows in place from there. */
static void test_realloc_growth_skips_cached_fit(void **state)
{
    (void)state;
    alloc_collect(true);
    long saved = purge_off();
    char *fit = alloc_aligned(512 * KiB, 128 * KiB);
    char *after = alloc_malloc(6 * 64 * KiB);
    assert_ptr_equal(after, fit + 128 * KiB);   /* the slots it left, snug after it */
    alloc_free(fit);                            /* cached: 2 slots, at 512 KiB */
    uint64_t seed = 88;
    char *p = alloc_malloc(60 * KiB);
    fill_pat(p, 60 * KiB, seed);
    p = realloc_checked(p, 60 * KiB, 120 * KiB, &seed);
    char *q = realloc_checked(p, 120 * KiB, 250 * KiB, &seed);
    assert_ptr_equal(q, p);
    q = realloc_checked(q, 250 * KiB, 500 * KiB, &seed);
    assert_ptr_equal(q, p);
    alloc_free(q);
    alloc_free(after);
    purge_restore(saved);
}

/* A freed large block stays with the thread that freed it, on a stack of
 * its number of 64 KiB slots: the next malloc of that many gets it back
 * (contents of the new owner checked), the stacks hold at most 2 MiB in
 * all, and a block too big for what is left makes room by giving the
 * largest back.  A block holds only the slots it reaches (the rest of
 * the power of two it was placed in goes back to the pool), and one cut
 * from a larger cached block gives the slots past its end back.  The
 * counters add up: requests count every malloc, live and live bytes come
 * back to where they were. */
static void test_large_cache(void **state)
{
    (void)state;
    alloc_collect(true);                /* an empty cache to start from */
    alloc_stats_t before = stats();
    char *p = alloc_malloc(200 * KiB);  /* 4 slots, placed in a block of 4 */
    assert_non_null(p);
    assert_int_equal(alloc_usable_size(p), 256 * KiB);
    fill_pat(p, 200 * KiB, 1);
    alloc_free(p);
    char *q = alloc_malloc(250 * KiB);  /* the same number of slots */
    assert_ptr_equal(q, p);
    assert_int_equal(alloc_usable_size(q), 256 * KiB);
    fill_pat(q, 256 * KiB, 2);
    assert_pattern(q, 256 * KiB, 2);
    alloc_stats_t mid = stats();
    assert_int_equal(mid.large_requests - before.large_requests, 2);
    assert_int_equal(mid.large_live - before.large_live, 1);
    assert_int_equal(mid.large_live_bytes - before.large_live_bytes, 256 * KiB);
    assert_int_equal(mid.large_bins[2].live - before.large_bins[2].live, 1);
    assert_int_equal(mid.large_bins[2].live_bytes - before.large_bins[2].live_bytes, 256 * KiB);
    alloc_free(q);

    /* 1100 KiB: 18 slots, not the 32 of its power of two. */
    size_t used = stats().pool_slots_used;
    char *odd = alloc_malloc(1100 * KiB);
    assert_non_null(odd);
    assert_int_equal(alloc_usable_size(odd), 18 * 64 * KiB);
    fill_pat(odd, 18 * 64 * KiB, 6);
    assert_true(stats().pool_slots_used <= used + 18);
    alloc_stats_t st = stats();
    assert_int_equal(st.large_live_bytes - before.large_live_bytes, 18 * 64 * KiB);
    assert_int_equal(st.large_bins[5].live_bytes - before.large_bins[5].live_bytes,
                     18 * 64 * KiB);
    assert_pattern(odd, 18 * 64 * KiB, 6);
    alloc_free(odd);
    alloc_collect(true);

    /* Twenty 256 KiB blocks, freed: at most eight (2 MiB) stay cached. */
    enum { N = 20 };
    char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = alloc_malloc(256 * KiB);
        assert_non_null(b[i]);
        fill_pat(b[i], 256 * KiB, (uint64_t)i + 10);
    }
    size_t peak_slots = stats().pool_slots_used;
    for (int i = 0; i < N; i++) {
        assert_pattern(b[i], 256 * KiB, (uint64_t)i + 10);
        alloc_free(b[i]);
    }
    alloc_stats_t after = stats();
    assert_int_equal(after.large_live, before.large_live);
    assert_int_equal(after.large_live_bytes, before.large_live_bytes);
    assert_int_equal(after.large_requests - before.large_requests, 3 + N);
    assert_true(peak_slots - after.pool_slots_used >= (size_t)N * 4 - 32);
    /* The last freed is on top: LIFO keeps the warmest block in use. */
    q = alloc_malloc(256 * KiB);
    assert_ptr_equal(q, b[N - 1]);
    /* A 2 MiB block's free pushes out all the rest; it comes back next. */
    char *big = alloc_malloc(2 * MiB);
    assert_non_null(big);
    fill_pat(big, 2 * MiB, 3);
    alloc_free(q);
    alloc_free(big);
    char *again = alloc_malloc(2 * MiB);
    assert_ptr_equal(again, big);
    fill_pat(again, 2 * MiB, 4);
    assert_pattern(again, 2 * MiB, 4);
    /* A smaller request is cut from a larger cached block, whose slots
     * past its end go back to the pool. */
    alloc_free(again);
    used = stats().pool_slots_used;
    q = alloc_malloc(100 * KiB);
    assert_ptr_equal(q, big);
    assert_int_equal(alloc_usable_size(q), 128 * KiB);
    assert_true(stats().pool_slots_used <= used - 30);
    fill_pat(q, 128 * KiB, 5);
    assert_pattern(q, 128 * KiB, 5);
    alloc_free(q);
    alloc_collect(true);
    assert_int_equal(stats().large_live, before.large_live);
}

/* With PURGE_DELAY_MS 0 the slots a large block gives back when it is
 * cut smaller are purged at once, as every other free slot is: a cut
 * from a cached block (malloc), and an in-place shrink (realloc). */
static void test_large_cut_purged_at_once(void **state)
{
    (void)state;
    long saved = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 0), 0);
    for (int by_realloc = 0; by_realloc < 2; by_realloc++) {
        alloc_collect(true);
        char *big = alloc_malloc(2 * MiB);
        assert_non_null(big);
        fill_pat(big, 2 * MiB, 7);
        char *q;
        if (by_realloc) {
            q = alloc_realloc(big, 100 * KiB);  /* in place: 30 slots go back */
            assert_pattern(q, 100 * KiB, 7);
        } else {
            alloc_free(big);                    /* cached, whole */
            q = alloc_malloc(100 * KiB);        /* cut from it: 30 slots go back */
        }
        assert_ptr_equal(q, big);
        assert_int_equal(stats().pool_slots_dirty, 0);
        alloc_free(q);
    }
    purge_restore(saved);
}

/* A failed realloc returns NULL and leaves the block as it was: too big a
 * size, an overflowing reallocarray, or MAX_MEMORY in the way. */
static void test_realloc_failure_leaves_block(void **state)
{
    (void)state;
    static const size_t sizes[] = { 100, 20000, 300 * KiB, 5 * MiB };
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = alloc_malloc(sizes[i]);
        assert_non_null(p[i]);
        fill_pat(p[i], sizes[i], 900 + i);
    }
    for (int i = 0; i < 4; i++) {
        size_t u = alloc_usable_size(p[i]);
        assert_enomem(alloc_realloc(p[i], TOO_BIG));
        assert_enomem(alloc_realloc(p[i], SIZE_MAX));
        assert_enomem(alloc_reallocarray(p[i], SIZE_MAX / 2, 3));
        assert_enomem(alloc_reallocarray(p[i], TOO_BIG, 1));
        assert_int_equal(alloc_usable_size(p[i]), u);
        assert_pattern(p[i], sizes[i], 900 + i);
    }

    /* MAX_MEMORY: room for nothing big (1 MiB beyond what is committed). */
    long saved = alloc_option_get(ALLOC_OPTION_MAX_MEMORY);
    alloc_collect(true);        /* no cached mapping to unmap and make room */
    alloc_stats_t st = stats();
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, (long)(st.committed + 1 * MiB)), 0);
    assert_enomem(alloc_malloc(64 * MiB));
    for (int i = 0; i < 4; i++) {
        size_t u = alloc_usable_size(p[i]);
        assert_enomem(alloc_realloc(p[i], 64 * MiB));
        assert_enomem(alloc_reallocarray(p[i], 64, MiB));
        assert_int_equal(alloc_usable_size(p[i]), u);
        assert_pattern(p[i], sizes[i], 900 + i);
    }
    assert_true(stats().mapped <= st.mapped);          /* nothing new was mapped */
    assert_true(stats().committed <= st.committed + 1 * MiB);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    /* Lifted: the same requests work and keep the contents (a huge block
     * growing is test_realloc_huge_grows' business). */
    for (int i = 0; i < 4; i++) {
        void *q = i < 3 ? alloc_realloc(p[i], 64 * MiB) : p[i];
        assert_non_null(q);
        assert_pattern(q, sizes[i], 900 + i);
        alloc_free(q);
    }
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, saved), 0);
}

/* Under MAX_MEMORY every tier fails with ENOMEM once the limit is
 * reached, committed memory never passes the limit, and freeing a block
 * or lifting the limit helps. */
static void test_max_memory_enomem(void **state)
{
    (void)state;
    long saved = alloc_option_get(ALLOC_OPTION_MAX_MEMORY);
    void *first = alloc_malloc(100);                /* something is committed */
    assert_non_null(first);
    alloc_collect(true);
    alloc_stats_t st = stats();
    size_t limit = st.committed + 16 * MiB;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, (long)limit), 0);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_MAX_MEMORY), (long)limit);
    size_t cap = 1 << 20, n = 0;
    void **live = malloc(cap * sizeof *live);
    assert_non_null(live);
    /* Largest first, so the small ones only fill the gaps. */
    static const size_t sizes[] = { 1 * MiB, 60000, 100 };
    for (int s = 0; s < 3; s++) {
        for (;;) {
            assert_true(n < cap);
            errno = 0;
            void *p = alloc_malloc(sizes[s]);
            if (p == NULL) {
                assert_int_equal(errno, ENOMEM);
                break;
            }
            *(volatile char *)p = 1;
            live[n++] = p;
            if (n % 256 == 0)
                assert_true(stats().committed <= limit);        /* fail fast, not at the cap */
        }
    }
    assert_enomem(alloc_malloc(8 * MiB));
    assert_enomem(alloc_calloc(1, 300 * KiB));
    assert_enomem(alloc_aligned(4 * MiB, 1));
    assert_true(stats().committed <= limit);
    /* Room again once a block is back, or the limit lifted. */
    alloc_free(live[0]);                            /* a 1 MiB block */
    void *p = alloc_malloc(1 * MiB);
    assert_non_null(p);
    alloc_free(p);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    p = alloc_malloc(8 * MiB);
    assert_non_null(p);
    alloc_free(p);
    for (size_t i = 1; i < n; i++)
        alloc_free(live[i]);
    free(live);
    alloc_free(first);
    alloc_collect(true);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, saved), 0);
}

static void test_reallocarray(void **state)
{
    (void)state;
    unsigned char *p = alloc_reallocarray(NULL, 10, 100);
    assert_non_null(p);
    fill_pat(p, 1000, 11);
    p = alloc_reallocarray(p, 100, 100);
    assert_non_null(p);
    assert_true(alloc_usable_size(p) >= 10000);
    assert_pattern(p, 1000, 11);
    fill_pat(p, 10000, 12);
    p = alloc_reallocarray(p, 3, 1000);
    assert_non_null(p);
    assert_pattern(p, 3000, 12);
    assert_enomem(alloc_reallocarray(p, (size_t)1 << 33, (size_t)1 << 33));
    assert_pattern(p, 3000, 12);
    alloc_free(p);
}

/* ---- calloc ----------------------------------------------------------- */

/* Dirty a block of n bytes, free it, and calloc the same size: zero, for
 * a block reused at once and for several freed together. */
static void calloc_after_dirty(size_t n, int rounds)
{
    enum { BATCH = 12 };
    int batch = n > 1 * MiB ? 3 : BATCH;
    for (int r = 0; r < rounds; r++) {
        void *p = alloc_malloc(n);
        assert_non_null(p);
        memset(p, 0xaa, alloc_usable_size(p));
        alloc_free(p);
        void *q;
        switch (r % 3) {
        case 0: q = alloc_calloc(1, n); break;
        case 1: q = alloc_calloc(n, 1); break;
        default: q = n % 8 == 0 ? alloc_calloc(n / 8, 8) : alloc_calloc(1, n); break;
        }
        assert_non_null(q);
        assert_zeroed(q, n);
        memset(q, 0xaa, alloc_usable_size(q));
        alloc_free(q);

        void *b[BATCH];
        for (int i = 0; i < batch; i++) {
            b[i] = alloc_malloc(n);
            assert_non_null(b[i]);
            memset(b[i], 0xaa, alloc_usable_size(b[i]));
        }
        for (int i = 0; i < batch; i++)
            alloc_free(b[i]);
        for (int i = 0; i < batch; i++) {
            b[i] = alloc_calloc(1, n);
            assert_non_null(b[i]);
            assert_zeroed(b[i], n);
            memset(b[i], 0xaa, alloc_usable_size(b[i]));
        }
        for (int i = 0; i < batch; i++)
            alloc_free(b[i]);
    }
}

static void test_calloc_zero_after_dirty_free(void **state)
{
    (void)state;
    long saved = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    /* Never purged (dirty memory is reused), purged at once (fresh memory
     * and cache misses), and the default. */
    static const long delays[] = { -1, 0, 10 };
    for (int d = 0; d < 3; d++) {
        assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delays[d]), 0);
        for (size_t i = 0; i < N_TIER_SIZES; i++)
            calloc_after_dirty(tier_sizes[i], tier_sizes[i] > 8 * MiB   ? 1
                                              : tier_sizes[i] > 1 * MiB ? 2
                                                                        : CALLOC_ROUNDS);
    }
    purge_restore(saved);
}

/* Blocks freed by other threads (remote frees, and a page left behind by
 * an exited thread) come back zeroed from calloc. */
typedef struct handoff_s {
    void **blocks;
    size_t n, size;
    bool allocate;          /* the thread allocates (and dirties) instead */
} handoff_t;

static void *free_them(void *arg)
{
    handoff_t *h = arg;
    if (h->allocate) {
        /* Make them, dirty them, free every other one here; the rest stay
         * live when this thread exits. */
        for (size_t i = 0; i < h->n; i++) {
            h->blocks[i] = alloc_malloc(h->size);
            if (h->blocks[i] != NULL)
                memset(h->blocks[i], 0xaa, h->size);
        }
        for (size_t i = 0; i < h->n; i += 2) {
            alloc_free(h->blocks[i]);
            h->blocks[i] = NULL;
        }
        return NULL;
    }
    for (size_t i = 0; i < h->n; i++)
        alloc_free(h->blocks[i]);
    return NULL;
}

static void test_calloc_zero_after_remote_free(void **state)
{
    (void)state;
    enum { N = 1500 };
    static void *blocks[N];
    static const size_t sizes[] = { 16, 48, 1000, 8192, 20000, 65536 };
    for (int r = 0; r < REMOTE_ROUNDS; r++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s], count = n > 8192 ? 60 : N;
            /* We allocate and dirty, another thread frees. */
            for (size_t i = 0; i < count; i++) {
                blocks[i] = alloc_malloc(n);
                assert_non_null(blocks[i]);
                memset(blocks[i], 0xaa, n);
            }
            handoff_t h = { blocks, count, n, false };
            pthread_t t;
            assert_int_equal(pthread_create(&t, NULL, free_them, &h), 0);
            pthread_join(t, NULL);
            for (size_t i = 0; i < count; i++) {
                blocks[i] = alloc_calloc(1, n);
                assert_non_null(blocks[i]);
                assert_zeroed(blocks[i], n);
                memset(blocks[i], 0xaa, n);
            }
            for (size_t i = 0; i < count; i++)
                alloc_free(blocks[i]);

            /* Another thread allocates, dirties and exits; we free what it
             * left and calloc from its abandoned pages. */
            handoff_t g = { blocks, count, n, true };
            assert_int_equal(pthread_create(&t, NULL, free_them, &g), 0);
            pthread_join(t, NULL);
            for (size_t i = 1; i < count; i += 2) {
                assert_non_null(blocks[i]);
                alloc_free(blocks[i]);
            }
            for (size_t i = 0; i < count; i++) {
                blocks[i] = n % 16 == 0 ? alloc_calloc(n / 16, 16) : alloc_calloc(n, 1);
                assert_non_null(blocks[i]);
                assert_zeroed(blocks[i], n);
                memset(blocks[i], 0xaa, n);
            }
            for (size_t i = 0; i < count; i++)
                alloc_free(blocks[i]);
        }
    }
}

/* ---- huge blocks -------------------------------------------------------- */

/* A thread keeps the last huge mapping it freed in its own slot: the next
 * malloc of a similar size takes it back (the same address), a free of
 * another size takes its place and sends the old one to the shared
 * cache, the statistics count the slot's mapping as cached, not live,
 * and alloc_collect(true) empties it. */
static void test_huge_slot(void **state)
{
    (void)state;
    long saved = purge_off();  /* no passes */
    alloc_collect(true);
    alloc_stats_t a = stats();
    assert_int_equal(a.huge_cached, 0);
    char *p = alloc_malloc(8 * MiB);
    assert_non_null(p);
    fill_pat(p, 4096, 1);
    fill_pat(p + 8 * MiB - 4096, 4096, 2);
    alloc_free(p);
    alloc_stats_t st = stats();
    assert_int_equal(st.huge_cached, 1);
    assert_int_equal(st.huge_live, a.huge_live);
    assert_int_equal(st.huge_live_bytes, a.huge_live_bytes);
    /* Fits the same mapping, leaving less than an eighth of it unused
     * (more would be shed to the shared cache: test_huge_reuse_sheds_tail). */
    char *q = alloc_malloc(7 * MiB + 512 * KiB);
    assert_ptr_equal(q, p);
    fill_pat(q + 7 * MiB + 512 * KiB - 4096, 4096, 3);
    assert_pattern(q + 7 * MiB + 512 * KiB - 4096, 4096, 3);
    st = stats();
    assert_int_equal(st.huge_cached, 0);
    assert_int_equal(st.huge_live, a.huge_live + 1);
    assert_int_equal(st.huge_requests, a.huge_requests + 2);
    char *r = alloc_malloc(20 * MiB);                   /* too big for it: new */
    assert_non_null(r);
    assert_true(r != q);
    fill_pat(r, 4096, 4);
    alloc_free(q);
    alloc_free(r);                                      /* takes q's place */
    st = stats();
    assert_int_equal(st.huge_cached, 2);
    assert_int_equal(st.huge_live, a.huge_live);
    char *s = alloc_malloc(20 * MiB);
    assert_ptr_equal(s, r);
    char *t = alloc_calloc(1, 8 * MiB);                 /* from the shared cache, zeroed */
    assert_ptr_equal(t, p);
    assert_zeroed(t, 4096);
    assert_zeroed(t + 8 * MiB - 4096, 4096);
    alloc_free(s);
    alloc_free(t);
    alloc_collect(true);
    st = stats();
    assert_int_equal(st.huge_cached, 0);
    assert_int_equal(st.huge_live, a.huge_live);
    assert_true(st.mapped <= a.mapped);
    purge_restore(saved);
}

/* A thread that never allocated frees huge, large and small blocks
 * another thread made: its first call into shoal, with no heap (so no
 * huge slot or large cache of its own yet).  Each block's contents are
 * checked before the free, and every block leaves the live figures. */
static char *heapless_blocks[3];
static const size_t heapless_sizes[3] = { 8 * MiB, 300 * KiB, 100 };

static void *free_without_heap(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++) {
        assert_pattern(heapless_blocks[i], heapless_sizes[i], (uint64_t)i + 40);
        alloc_free(heapless_blocks[i]);
    }
    return NULL;
}

static void test_free_by_thread_without_heap(void **state)
{
    (void)state;
    alloc_stats_t a = stats();
    for (int i = 0; i < 3; i++) {
        heapless_blocks[i] = alloc_malloc(heapless_sizes[i]);
        assert_non_null(heapless_blocks[i]);
        fill_pat(heapless_blocks[i], heapless_sizes[i], (uint64_t)i + 40);
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_without_heap, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    alloc_stats_t b = stats();
    assert_int_equal(b.huge_live, a.huge_live);
    assert_int_equal(b.large_live, a.large_live);
}

/* The same huge size allocated and freed again and again reuses the one
 * cached mapping: no new mappings, the same address. */
static void test_huge_cache_reuse(void **state)
{
    (void)state;
    long saved = purge_off();
    static const size_t sizes[] = { 3 * MiB, 8 * MiB, 64 * MiB };
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        alloc_collect(true);                            /* empty cache */
        assert_int_equal(stats().huge_cached, 0);
        char *first = alloc_malloc(n);
        assert_non_null(first);
        fill_pat(first, 4096, 1);
        fill_pat(first + n - 4096, 4096, 2);
        alloc_free(first);
        alloc_stats_t base = stats();
        assert_int_equal(base.huge_cached, 1);
        for (int i = 0; i < 40; i++) {
            size_t m = i % 4 == 3 ? n - n / 4 : n;      /* a bit smaller fits too */
            char *p = i % 2 ? alloc_calloc(1, m) : alloc_malloc(m);
            assert_ptr_equal(p, first);
            if (i % 2) {
                assert_zeroed(p, 4096);
                assert_zeroed(p + m - 4096, 4096);
            }
            fill_pat(p, 4096, 1);
            fill_pat(p + m - 4096, 4096, 2);
            alloc_stats_t st = stats();
            assert_int_equal(st.huge_live, base.huge_live + 1);
            /* The smaller block sheds its mapping's tail to the cache. */
            assert_int_equal(st.huge_cached, m < n ? 1 : 0);
            assert_int_equal(st.mapped, base.mapped);
            alloc_free(p);
            st = stats();
            assert_int_equal(st.huge_cached, 1);
            assert_int_equal(st.mapped, base.mapped);
        }
    }
    alloc_collect(true);
    assert_int_equal(stats().huge_cached, 0);
    purge_restore(saved);
}

/* Whether any OS page of [p, p + n) is resident. */
static bool any_resident(const char *p, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const char *start = (const char *)((uintptr_t)p & ~(uintptr_t)(page - 1));
    size_t pages = (size_t)(p + n - start + page - 1) / page;
    unsigned char *vec = malloc(pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)start, pages * page, vec), 0);
    bool any = false;
    for (size_t i = 0; i < pages; i++)
        any |= (vec[i] & 1) != 0;
    free(vec);
    return any;
}

/* Whether every OS page of [p, p + n) is resident. */
static bool all_resident(const char *p, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < n; off += 64 * page)
        if (!any_resident(p + off, 1))
            return false;
    return true;
}

/* Whether the process runs under no seccomp filter: where one is, shoal
 * purges instead of asking mincore(2) (os.c). */
static bool no_seccomp(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    bool none = false;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "Seccomp:", 8) == 0)
            none = strtol(line + 8, NULL, 10) == 0;
    if (f != NULL)
        fclose(f);
    return none;
}

/* A miss that no cached mapping serves grows the largest one too small
 * for it (a whole mapping, never cut) instead of mapping anew: only the
 * bytes it lacks are new, the rest stays resident (a calloc zeroes it),
 * and the program's address space grows by the difference.  The
 * mapping may be the one in the thread's slot, where it is the largest:
 * `free(buf); buf = malloc(bigger)` grows the mapping it just freed. */
static void test_huge_miss_grows_cached_mapping(void **state)
{
    (void)state;
    long saved = purge_off();
    for (int run = 0; run < 4; run++) {
        bool zero = run & 1, in_slot = run & 2;
        alloc_collect(true);
        char *p = alloc_malloc(8 * MiB);
        char *q = in_slot ? NULL : alloc_malloc(5 * MiB);
        assert_non_null(p);
        memset(p, 0x6b, 8 * MiB);
        alloc_free(p);                          /* into the slot */
        if (q != NULL) {
            fill_pat(q, 5 * MiB, 11);
            alloc_free(q);                      /* into the slot: p to the shared cache */
        }
        alloc_stats_t before = stats();
        assert_int_equal(before.huge_cached, in_slot ? 1 : 2);
        size_t n = 12 * MiB;
        char *r = zero ? alloc_calloc(1, n) : alloc_malloc(n);
        assert_non_null(r);
        alloc_stats_t after = stats();
        assert_int_equal(after.huge_cached, in_slot ? 0 : 1);   /* p grew; q stays */
        assert_int_equal(after.huge_live, before.huge_live + 1);
        assert_true(after.mapped <= before.mapped + 4 * MiB + 64 * KiB);
        if (!zero || no_seccomp())
            assert_true(all_resident(r + 4096, 8 * MiB - 8192));   /* p's pages */
        if (zero)
            assert_zeroed(r, n);
        else
            assert_int_equal((unsigned char)r[8 * MiB - 4096], 0x6b);
        fill_pat(r, n, 12);
        assert_pattern(r, n, 12);
        alloc_free(r);
    }
    alloc_collect(true);
    purge_restore(saved);
}

/* A calloc from a reused mapping stores zeros into the pages that are
 * resident and purges the rest: the block reads as zero everywhere, what
 * the mapping's last block wrote stays resident (purged, each page would
 * fault again, and twice where it is read before it is written), and what
 * that block never touched is not made resident.  Through the thread's
 * slot and through the shared cache. */
static void test_huge_calloc_zeroes_in_place(void **state)
{
    (void)state;
    long saved = purge_off();
    size_t n = 8 * MiB, page = (size_t)sysconf(_SC_PAGESIZE);
    for (int shared = 0; shared < 2; shared++) {
        alloc_collect(true);
        /* Freed after p, other takes the slot and p goes on to the
         * shared cache (a bigger malloc after p's free would grow p). */
        char *other = shared ? alloc_malloc(20 * MiB) : NULL;
        char *p = alloc_malloc(n);
        assert_non_null(p);
        /* Written whole, then the second half given back by the program
         * itself (it may hold pages from an earlier block otherwise). */
        memset(p, 0xa5, n);
        char *half = (char *)(((uintptr_t)p + n / 2 + page - 1) & ~(uintptr_t)(page - 1));
        assert_int_equal(madvise(half, (size_t)(p + n - half) & ~(page - 1), MADV_DONTNEED), 0);
        alloc_free(p);
        if (other != NULL)
            alloc_free(other);
        char *q = alloc_calloc(1, n);
        assert_ptr_equal(q, p);
        for (char *at = q; no_seccomp() && at + page <= half; at += page)
            assert_true(any_resident(at, 1));
        assert_false(any_resident(half, (size_t)(q + n - half) & ~(page - 1)));
        assert_zeroed(q, n);
        fill_pat(q, n, 9);
        assert_pattern(q, n, 9);
        alloc_free(q);
    }
    alloc_collect(true);
    purge_restore(saved);
}

/* A mapping taken back for a smaller block sheds the dirty bytes past
 * the block's end into the cache, through the thread's slot and through
 * the shared cache, malloc and calloc alike: they stay resident there,
 * and join the block again when it is freed, so the mapping serves its
 * own size next with no page to fault (a program alternating 6 and 3 MiB
 * blocks faulted 50 times as often as under glibc when they were purged
 * at once); a purge while the block lives gives them back and leaves the
 * block whole.  The block's own bytes keep what was written (malloc) or
 * read as zero (calloc). */
static void test_huge_reuse_sheds_tail(void **state)
{
    (void)state;
    long saved = purge_off();
    for (int zero = 0; zero < 2; zero++) {
        for (int shared = 0; shared < 2; shared++) {
            alloc_collect(true);
            char *other = shared ? alloc_malloc(20 * MiB) : NULL;  /* freed after p: */
            char *p = alloc_malloc(8 * MiB);                        /* p goes on */
            assert_non_null(p);
            memset(p, 0x5a, 8 * MiB);
            alloc_free(p);
            if (other != NULL)
                alloc_free(other);
            size_t cached = stats().huge_cached, mapped = stats().mapped;
            size_t n = 5 * MiB;
            char *q = zero ? alloc_calloc(1, n) : alloc_malloc(n);
            assert_ptr_equal(q, p);
            assert_int_equal(stats().huge_cached, cached);     /* p out, its tail in */
            assert_true(alloc_usable_size(q) < 5 * MiB + 128 * KiB);
            assert_true(all_resident(q + n + 128 * KiB, 2 * MiB));
            if (zero) {
                assert_zeroed(q, 4096);
                assert_zeroed(q + n - 4096, 4096);
            } else {
                assert_int_equal((unsigned char)q[n - 1], 0x5a);
            }
            fill_pat(q, n, 7);
            alloc_free(q);                              /* joins its tail */
            char *again = alloc_malloc(8 * MiB);
            assert_ptr_equal(again, p);
            assert_true(all_resident(again, 8 * MiB));
            assert_int_equal(stats().mapped, mapped);
            alloc_free(again);
            /* Shed again, then purged while the block lives. */
            q = alloc_malloc(n);
            assert_ptr_equal(q, p);
            fill_pat(q, n, 8);
            alloc_collect(true);
            assert_true(stats().mapped <= mapped - 2 * MiB);
            assert_pattern(q, n, 8);
            /* A shed block grows past its end (its tail is no longer
             * its own: the block moves) and shrinks, keeping its bytes. */
            q = alloc_realloc(q, 7 * MiB);
            assert_non_null(q);
            assert_pattern(q, n, 8);
            q = alloc_realloc(q, 3 * MiB);
            assert_non_null(q);
            assert_pattern(q, 3 * MiB, 8);
            alloc_free(q);
        }
    }
    alloc_collect(true);
    purge_restore(saved);
}

/* A shed tail belongs with its block.  realloc grows the block back
 * into it, in place (a move left it cached and joined to nothing for
 * good: 200 rounds of 8 MiB freed, 5 MiB made and grown to 7 piled up 69
 * pieces and 215 MiB mapped), and on into the cut's rest after it; a
 * shrink gives the tail back with the rest.
 * It does not join a freed piece above it
 * while its block lives (the piece, starting mid-chunk, could hold no
 * block: the next 17 MiB malloc mapped anew).  A free of an address in
 * it, where no block ever started, is a pointer inside a freed block,
 * not a double free. */
static void test_huge_shed_tail_belongs_to_its_block(void **state)
{
    (void)state;
    long saved = purge_off();
    alloc_collect(true);
    for (int i = 0; i < 20; i++) {
        char *p = alloc_malloc(8 * MiB);
        assert_non_null(p);
        fill_pat(p, 4096, 1);
        alloc_free(p);
        size_t mapped = stats().mapped;
        char *q = alloc_malloc(5 * MiB);
        assert_ptr_equal(q, p);
        fill_pat(q, 5 * MiB, (uint64_t)i);
        char *r = alloc_realloc(q, 7 * MiB);
        assert_ptr_equal(r, q);                         /* into its tail */
        assert_true(alloc_usable_size(r) >= 7 * MiB);
        assert_pattern(r, 5 * MiB, (uint64_t)i);
        fill_pat(r + 5 * MiB, 2 * MiB, 3);
        assert_int_equal(stats().mapped, mapped);
        alloc_free(r);
    }
    assert_true(stats().huge_cached <= 1);
    /* Grown past its tail, a block cut from a cached mapping takes the
     * cut's rest too, in place (it moved, and faulted in all it grew
     * by). */
    alloc_collect(true);
    char *m = alloc_malloc(18 * MiB);
    assert_non_null(m);
    memset(m, 1, 18 * MiB);
    alloc_free(m);
    size_t mapped_m = stats().mapped;
    char *g = alloc_malloc(5 * MiB);                    /* cut from m's, its tail shed */
    assert_ptr_equal(g, m);
    fill_pat(g, 5 * MiB, 9);
    g = alloc_realloc(g, 17 * MiB);
    assert_ptr_equal(g, m);
    assert_pattern(g, 5 * MiB, 9);
    assert_int_equal(stats().mapped, mapped_m);
    fill_pat(g + 5 * MiB, 12 * MiB, 10);
    alloc_free(g);
    /* Shrunk by more than half, a shed block gives its tail back with
     * the rest (cut off from it, the tail stayed cached for good: 200
     * rounds filled the cache's 128 entries, 1 GiB mapped). */
    alloc_collect(true);
    size_t mapped0 = stats().mapped;
    for (int i = 0; i < 20; i++) {
        char *p = alloc_malloc(24 * MiB);
        assert_non_null(p);
        fill_pat(p, 4096, 1);
        alloc_free(p);
        char *q = alloc_malloc(16 * MiB);               /* sheds 8 MiB */
        assert_ptr_equal(q, p);
        fill_pat(q, 6 * MiB, (uint64_t)i);
        q = alloc_realloc(q, 6 * MiB);
        assert_non_null(q);
        assert_pattern(q, 6 * MiB, (uint64_t)i);
        alloc_free(q);
        assert_true(stats().huge_cached <= 1);
        assert_true(stats().mapped <= mapped0 + 24 * MiB + 128 * KiB);
    }

    alloc_collect(true);
    char *big = alloc_malloc(30 * MiB), *pad = alloc_malloc(3 * MiB);
    assert_non_null(big);
    assert_non_null(pad);
    memset(big, 1, 30 * MiB);
    alloc_free(big);
    alloc_free(pad);                                    /* big on to the shared cache */
    char *a = alloc_malloc(8 * MiB + 200 * KiB);        /* big's front, cut, its tail shed */
    assert_ptr_equal(a, big);
    char *b = alloc_malloc(11 * MiB + 512 * KiB);       /* the chunks after */
    assert_non_null(b);
    alloc_free(b);
    size_t mapped = stats().mapped;
    char *c = alloc_malloc(17 * MiB);
    assert_ptr_equal(c, b);
    assert_int_equal(stats().mapped, mapped);
    fill_pat(c, 17 * MiB, 4);

    char msg[512];
    char *tail = a + alloc_usable_size(a);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN), 0);
    capture_begin();
    alloc_free(tail + 64);
    assert_true(capture_end(msg, sizeof msg));
    assert_non_null(strstr(msg, "inside a huge block that is already free"));
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_ABORT), 0);
    assert_pattern(c, 17 * MiB, 4);
    alloc_free(c);
    alloc_free(a);
    alloc_collect(true);
    purge_restore(saved);
}

/* n huge blocks of `size`, the first page of each pattern-filled. */
static void make_burst(char **blocks, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        blocks[i] = alloc_malloc(size);
        assert_non_null(blocks[i]);
        fill_pat(blocks[i], 4096, (uint64_t)i);
    }
}

/* The shared cache keeps up to 128 mappings: a burst of 64 huge blocks
 * freed and allocated again maps nothing new.  A request that no cached
 * mapping fits sends cached mappings of at least its size back to the
 * OS before it maps its own, oldest first: the process does not hold
 * both. */
static void test_huge_cache_burst(void **state)
{
    (void)state;
    enum { BURST = 64 };
    long saved = purge_off();
    alloc_collect(true);
    static char *blocks[BURST];
    for (int round = 0; round < 2; round++) {
        alloc_stats_t before = stats();
        make_burst(blocks, BURST, 3 * MiB);
        if (round == 1)
            assert_int_equal(stats().mapped, before.mapped);    /* all from the cache */
        for (int i = 0; i < BURST; i++) {
            assert_pattern(blocks[i], 4096, (uint64_t)i);
            alloc_free(blocks[i]);
        }
        assert_int_equal(stats().huge_cached, BURST);
    }
    alloc_stats_t full = stats();
    char *big = alloc_malloc(32 * MiB);                 /* fits none of them */
    assert_non_null(big);
    alloc_stats_t st = stats();
    assert_true(st.huge_cached <= BURST - 10);          /* 10 x 3 MiB >= 32 MiB */
    assert_true(st.huge_cached >= BURST - 12);
    assert_true(st.mapped <= full.mapped + 2 * MiB);
    alloc_free(big);
    alloc_collect(true);
    assert_int_equal(stats().huge_cached, 0);
    purge_restore(saved);
}

/* Mappings above 8 MiB: the shared cache keeps as many bytes of them as
 * huge blocks are live, and at least 32 MiB.  Twelve blocks of 9 MiB
 * freed one by one: the first half stay (as many bytes as the other
 * half, still live), then the newest as the rest go; once all are
 * freed, the newest 32 MiB of them (beside the one in this thread's
 * slot), and the next burst maps only the others anew. */
static void test_huge_cache_keeps_big_by_live(void **state)
{
    (void)state;
    enum { BURST = 12, KEPT = 3 };      /* 3 x 9 MiB and a header each: 32 MiB */
    long saved = purge_off();
    alloc_collect(true);
    static char *blocks[BURST];
    for (int round = 0; round < 2; round++) {
        alloc_stats_t before = stats();
        make_burst(blocks, BURST, 9 * MiB);
        alloc_stats_t st = stats();
        if (round == 1)
            assert_true(st.mapped >= before.mapped + (BURST - KEPT - 1) * 9 * MiB);
        for (int i = 0; i < BURST; i++) {
            assert_pattern(blocks[i], 4096, (uint64_t)i);
            alloc_free(blocks[i]);
            st = stats();
            if (i < BURST / 2 - 1)
                assert_int_equal(st.huge_cached, i + 1);
        }
        assert_int_equal(st.huge_cached, KEPT + 1);             /* and this thread's slot */
    }
    alloc_collect(true);
    assert_int_equal(stats().huge_cached, 0);
    purge_restore(saved);
}

/* ---- free_sized --------------------------------------------------------- */

/* Two blocks of size n on the same page (small and medium). */
static void pair_on_one_page(size_t n, void **a, void **b)
{
    void *spare[64];
    int nspare = 0;
    *a = alloc_malloc(n);
    *b = alloc_malloc(n);
    while (page_of(*a) != page_of(*b)) {
        assert_true(nspare < 64);
        spare[nspare++] = *a;
        *a = *b;
        *b = alloc_malloc(n);
    }
    while (nspare > 0)
        alloc_free(spare[--nspare]);
}

static void test_free_sized(void **state)
{
    (void)state;
    char msg[512];
    /* Faults warn instead of aborting, so a refused free shows up here. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN), 0);
    for (size_t i = 0; i < N_TIER_SIZES; i++) {
        size_t n = tier_sizes[i];
        if (n <= SHOAL_MEDIUM_MAX) {
            void *a, *b;
            pair_on_one_page(n, &a, &b);
            shoal_page_t *pg = page_of(a);
            uint32_t used = pg->used;
            fill_pat(b, n, i);
            capture_begin();
            alloc_free_sized(a, n);
            if (capture_end(msg, sizeof msg))
                fail_msg("free_sized(%zu): %s", n, msg);
            assert_int_equal(pg->used, used - 1);
            assert_pattern(b, n, i);
            alloc_free_sized(b, n);
            /* calloc'd: the product is the size. */
            void *c = alloc_calloc(n, 1);
            capture_begin();
            alloc_free_sized(c, n);
            if (capture_end(msg, sizeof msg))
                fail_msg("free_sized(calloc %zu): %s", n, msg);
        } else {
            void *p = alloc_malloc(n);
            assert_non_null(p);
            alloc_stats_t before = stats();
            capture_begin();
            alloc_free_sized(p, n);
            if (capture_end(msg, sizeof msg))
                fail_msg("free_sized(%zu): %s", n, msg);
            alloc_stats_t after = stats();
            if (n <= SHOAL_LARGE_MAX)       /* the heap may keep its slots for reuse */
                assert_int_equal(after.large_live, before.large_live - 1);
            else
                assert_int_equal(after.huge_live, before.huge_live - 1);
        }
    }
    /* malloc(0) is freed with size 0. */
    void *z0 = alloc_malloc(0), *z1 = alloc_malloc(0);
    capture_begin();
    alloc_free_sized(z0, 0);
    alloc_free_sized(z1, 0);
    if (capture_end(msg, sizeof msg))
        fail_msg("free_sized(malloc(0), 0): %s", msg);
    /* A wrong size is refused (with a message) and the block stays. */
    void *a, *b;
    pair_on_one_page(100, &a, &b);
    fill_pat(a, 100, 55);
    uint32_t used = page_of(a)->used;
    capture_begin();
    alloc_free_sized(a, 5000);
    assert_true(capture_end(msg, sizeof msg));
    assert_non_null(strstr(msg, "free_sized"));
    assert_int_equal(page_of(a)->used, used);
    assert_pattern(a, 100, 55);
    alloc_free(a);
    alloc_free(b);
    /* Large and huge blocks too: a size whose malloc would not have held
     * this block is refused, and the block stays live. */
    static const size_t wrong[][2] = {
        { 300 * KiB, 100 * KiB }, { 300 * KiB, 600 * KiB }, { 12 * MiB, 3 * MiB },
        { 12 * MiB, 1 * MiB }, { 12 * MiB, 30 * MiB },
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        char *p = alloc_malloc(wrong[i][0]);
        assert_non_null(p);
        fill_pat(p, wrong[i][0], i);
        capture_begin();
        alloc_free_sized(p, wrong[i][1]);
        if (!capture_end(msg, sizeof msg))
            fail_msg("free_sized(malloc(%zu), %zu) was taken", wrong[i][0], wrong[i][1]);
        assert_non_null(strstr(msg, "size does not match"));
        assert_pattern(p, wrong[i][0], i);
        alloc_free_sized(p, wrong[i][0]);
    }
    /* A block of 0 bytes at 4 MiB alignment in a reused mapping of 8 MiB
     * (a natural block's), half of it past the alignment: taken back at
     * size 0, as it was asked for (malloc serves 0 as 1). */
    long saved = purge_off();
    alloc_collect(true);            /* no mapping cached but the one below */
    void *m = alloc_malloc(8 * MiB - 100), *other = alloc_malloc(20 * MiB);
    alloc_free(m);
    alloc_free(other);              /* into the thread's slot: m's to the shared cache */
    void *z = alloc_aligned(4 * MiB, 0);
    assert_non_null(z);
    assert_true((char *)z > (char *)m && (char *)z < (char *)m + 8 * MiB);   /* in m's mapping */
    capture_begin();
    alloc_free_aligned_sized(z, 4 * MiB, 0);
    if (capture_end(msg, sizeof msg))
        fail_msg("free_aligned_sized(aligned_alloc(4 MiB, 0), 4 MiB, 0): %s", msg);
    purge_restore(saved);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_ABORT), 0);
}

/* C23: free_sized(p, n) is valid for p = realloc(q, n).  A realloc that
 * shrinks a block in place keeps its old class (or order); the size the
 * block was last requested with must still be accepted. */
static void test_free_sized_after_realloc(void **state)
{
    (void)state;
    char msg[512];
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN), 0);
    static const size_t pairs[][2] = {
        { 1000, 600 }, { 8192, 5000 }, { 60000, 40000 }, { 2 * MiB, 100 * KiB },
        { 10 * MiB, 6 * MiB },
    };
    int refused = 0;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        void *keep = alloc_malloc(pairs[i][0]);         /* keeps the page alive */
        void *p = alloc_malloc(pairs[i][0]);
        assert_non_null(p);
        fill_pat(p, pairs[i][1], i);
        p = alloc_realloc(p, pairs[i][1]);
        assert_non_null(p);
        assert_pattern(p, pairs[i][1], i);
        capture_begin();
        alloc_free_sized(p, pairs[i][1]);
        if (capture_end(msg, sizeof msg)) {
            print_error("free_sized(realloc(malloc(%zu), %zu), %zu) refused: %s", pairs[i][0],
                        pairs[i][1], pairs[i][1], msg);
            refused++;
        }
        alloc_free(keep);
    }
    /* An aligned huge block stays where its alignment put it in its
     * mapping, moved or resized in place: realloc's result is freed at
     * its new size, with the natural alignment. */
    static const size_t aligns[] = { 128, 4096, 64 * KiB, 4 * MiB, 8 * MiB };
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        for (size_t grow = 0; grow < 2; grow++) {
            size_t n = grow ? 5 * MiB : 3 * MiB + 100;
            void *p = alloc_aligned(aligns[i], 3 * MiB);
            assert_non_null(p);
            fill_pat(p, 3 * MiB, i);
            p = alloc_realloc(p, n);
            assert_non_null(p);
            assert_pattern(p, 3 * MiB, i);
            capture_begin();
            alloc_free_sized(p, n);
            if (capture_end(msg, sizeof msg)) {
                print_error("free_sized(realloc(aligned_alloc(%zu, 3 MiB), %zu), %zu) refused: %s",
                            aligns[i], n, n, msg);
                refused++;
            }
        }
    }
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_ABORT), 0);
    assert_int_equal(refused, 0);
}

/* ---- collect ------------------------------------------------------------ */

static void test_collect_returns_memory(void **state)
{
    (void)state;
    long saved = purge_off();
    enum { NS = 3000, NM = 100, NL = 16, NH = 2 };
    static void *s[NS], *m[NM], *l[NL], *h[NH];
    for (int i = 0; i < NS; i++) {
        s[i] = alloc_malloc(700);
        fill_pat(s[i], 700, (uint64_t)i);
    }
    for (int i = 0; i < NM; i++) {
        m[i] = alloc_malloc(30000);
        fill_pat(m[i], 30000, (uint64_t)i);
    }
    for (int i = 0; i < NL; i++) {
        l[i] = alloc_malloc(300 * KiB);
        fill_pat(l[i], 300 * KiB, (uint64_t)i);
    }
    for (int i = 0; i < NH; i++) {
        h[i] = alloc_malloc(12 * MiB);
        fill_pat(h[i], 12 * MiB, (uint64_t)i);
    }
    for (int i = 0; i < NS; i++) {
        assert_pattern(s[i], 700, (uint64_t)i);
        alloc_free(s[i]);
    }
    for (int i = 0; i < NM; i++) {
        assert_pattern(m[i], 30000, (uint64_t)i);
        alloc_free(m[i]);
    }
    for (int i = 0; i < NL; i++) {
        assert_pattern(l[i], 300 * KiB, (uint64_t)i);
        alloc_free(l[i]);
    }
    for (int i = 0; i < NH; i++) {
        assert_pattern(h[i], 12 * MiB, (uint64_t)i);
        alloc_free(h[i]);
    }
    alloc_stats_t before = stats();
    alloc_collect(true);
    alloc_stats_t after = stats();
    /* Freed: 24 MiB of huge mappings, 8 MiB of large blocks and ~5 MiB of
     * pages, all still committed before the collect. */
    if (after.committed + 16 * MiB > before.committed)
        fail_msg("committed %zu -> %zu", before.committed, after.committed);
    /* Heaps may already have given pages back as they emptied; whatever
     * they still kept (empty pages, cached slots) goes now. */
    assert_true(after.pool_slots_used <= before.pool_slots_used);
    assert_int_equal(after.huge_cached, 0);
    assert_true(after.mapped < before.mapped);
    assert_true(after.purged > before.purged);
    /* And everything still works. */
    void *p = alloc_calloc(1, 700), *q = alloc_calloc(1, 300 * KiB);
    assert_zeroed(p, 700);
    assert_zeroed(q, 300 * KiB);
    alloc_free(p);
    alloc_free(q);
    purge_restore(saved);
}

/* The running library says its version, the header's. */
static void test_version(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR,
             SHOAL_VERSION_PATCH);
    assert_string_equal(alloc_version(), want);
    assert_string_equal(alloc_version(), SHOAL_VERSION);
}

static void test_stats_get_arguments(void **state)
{
    (void)state;
    alloc_stats_t st;
    memset(&st, 0, sizeof st);
    assert_int_equal(alloc_stats_get(NULL), EINVAL);
    st.size = ALLOC_STATS_SIZE_V2 - 1;        /* below the oldest layout */
    assert_int_equal(alloc_stats_get(&st), EINVAL);
    st.size = sizeof st;
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.version, ALLOC_STATS_VERSION);
    void *p = alloc_malloc(5 * MiB);
    alloc_stats_t a = stats();
    assert_int_equal(a.huge_live, st.huge_live + 1);
    assert_true(a.mapped >= 5 * MiB);
    alloc_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malloc_zero_unique),
        cmocka_unit_test(test_free_null_is_noop),
        cmocka_unit_test(test_too_big_is_enomem),
        cmocka_unit_test(test_beyond_the_machine_is_enomem),
        cmocka_unit_test(test_aligned_every_power_of_two),
        cmocka_unit_test(test_aligned_many_small),
        cmocka_unit_test(test_aligned_reuse_mixed),
        cmocka_unit_test(test_aligned_bad_alignment_is_einval),
        cmocka_unit_test(test_usable_size_is_writable),
        cmocka_unit_test(test_realloc_keeps_contents),
        cmocka_unit_test(test_realloc_small_in_place),
        cmocka_unit_test(test_realloc_zero_frees),
        cmocka_unit_test(test_realloc_huge_grows),
        cmocka_unit_test(test_realloc_large_in_place),
        cmocka_unit_test(test_realloc_doubling_grows_in_place),
        cmocka_unit_test(test_realloc_growth_skips_cached_fit),
        cmocka_unit_test(test_large_cache),
        cmocka_unit_test(test_large_cut_purged_at_once),
        cmocka_unit_test(test_realloc_failure_leaves_block),
        cmocka_unit_test(test_max_memory_enomem),
        cmocka_unit_test(test_reallocarray),
        cmocka_unit_test(test_calloc_zero_after_dirty_free),
        cmocka_unit_test(test_calloc_zero_after_remote_free),
        cmocka_unit_test(test_huge_cache_reuse),
        cmocka_unit_test(test_huge_slot),
        cmocka_unit_test(test_huge_miss_grows_cached_mapping),
        cmocka_unit_test(test_huge_calloc_zeroes_in_place),
        cmocka_unit_test(test_huge_reuse_sheds_tail),
        cmocka_unit_test(test_huge_shed_tail_belongs_to_its_block),
        cmocka_unit_test(test_huge_cache_burst),
        cmocka_unit_test(test_huge_cache_keeps_big_by_live),
        cmocka_unit_test(test_free_by_thread_without_heap),
        cmocka_unit_test(test_free_sized),
        cmocka_unit_test(test_free_sized_after_realloc),
        cmocka_unit_test(test_collect_returns_memory),
        cmocka_unit_test(test_stats_get_arguments),
        cmocka_unit_test(test_version),
    };
    /* TEST_FILTER=name runs the tests whose names match (a glob). */
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
