/* realloc.c - realloc and reallocarray: in place where the block allows
 * (block.h says what it is), else a new block, a copy and a free. */
#include "shoal.h"

#include <errno.h>
#include <string.h>
#include "block.h"
#include "override.h"
#include "profile.h"
#include "thread/large_cache.h"

/* Whether a page block of `have` bytes serves n in place: it holds them,
 * and free_sized(p, n) takes it back - it wastes less than half, or it is
 * of n's own class (a 16-byte block grown from 1 byte to 8 stays).  Never
 * for n = 0 (n - 1 wraps), which frees: realloc_slow. */
static inline bool page_block_keeps(size_t have, size_t n)
{
    return n - 1 < have && (n > have / 2 || shoal_size_matches(NULL, have, n, SHOAL_ALIGN));
}

/* In place if the block allows: a page block page_block_keeps, a large
 * or huge block that can shrink or
 * grow where it is.  NULL if it must move.  A large or huge block
 * resized in place is, to heap profiling, a free and a malloc of the new
 * size: its sample, if it had one, goes, and the new size is drawn (a
 * page block kept keeps its usable size, and its sample). */
static void *resize_in_place(void *p, const shoal_ptr_t *c, size_t old, size_t n)
{
    if (c->kind == SHOAL_PTR_BLOCK)
        return page_block_keeps(old, n) ? p : NULL;
    unsigned order;
    enum shoal_tier t = shoal_tier_of(n, SHOAL_ALIGN, &order);
    bool large = c->kind == SHOAL_PTR_LARGE && t == SHOAL_TIER_LARGE;
    if (!large && !(c->kind == SHOAL_PTR_HUGE && t == SHOAL_TIER_HUGE))
        return NULL;
    if (c->sampled)
        shoal_prof_unsample(p, c);
    void *q = large ? shoal_heap_large_resize(c->pg, n) : shoal_huge_realloc(c->huge, n);
    return shoal_prof_after_big(q);
}

/* A block that must move to grow: a large one starts a block of four
 * times its size (where the largest order allows) whose rest goes
 * straight back, so that a buffer grown by doubling grows in place the
 * next two times, rather than finding wherever the pool has a block of
 * its order, which is seldom aligned for a doubling.  The rest is free
 * in the pool for anyone meanwhile: no memory is kept for the growth. */
static void *alloc_to_grow(size_t n)
{
    unsigned cls;
    if (shoal_tier_of(n, SHOAL_ALIGN, &cls) != SHOAL_TIER_LARGE)
        return alloc_malloc(n);
    unsigned room = shoal_large_order(n) + 2;
    if (room > SHOAL_MAX_ORDER)
        room = SHOAL_MAX_ORDER;
    int saved = errno;
    void *q = shoal_heap_large_alloc(n, SHOAL_SLOT_SIZE << room, false, true);
    if (q == NULL) {
        errno = saved;          /* no room is no failure: the plain way next */
        return alloc_malloc(n);
    }
    return shoal_prof_after_big(q);     /* (the rest went back: shoal_large_make) */
}

/* realloc of p (not NULL) that does not keep it in place by the test in
 * alloc_realloc (out of line: that test needs no frame). */
static __attribute__((noinline)) void *realloc_slow(void *p, size_t n)
{
    if (n > SHOAL_MAX_REQUEST)
        return shoal_too_big();
    shoal_ptr_t c = shoal_classify(p);
    size_t old = shoal_usable(p, &c, "realloc");
    if (old == 0)
        return NULL;
    if (n == 0) {
        /* glibc's answer, and jemalloc's and tcmalloc's: the block is
         * freed and the result is NULL.  Programs written against glibc
         * call realloc(p, 0) as a free and drop the result; a block kept
         * or returned would be a leak in each of them. */
        alloc_free(p);
        return NULL;
    }
    int saved = errno;
    void *q = resize_in_place(p, &c, old, n);
    errno = saved;
    if (q != NULL)
        return q;
    q = n > old ? alloc_to_grow(n) : alloc_malloc(n);
    if (q == NULL) {
        /* Refused at MAX_MEMORY, the new block gave back what could go
         * (caches, free slots, the huge cache) before it failed: growing
         * in place needs only the difference, and may fit now. */
        q = resize_in_place(p, &c, old, n);
        if (q != NULL)
            errno = saved;
        return q;               /* NULL: p is untouched */
    }
    memcpy(q, p, n < old ? n : old);
    alloc_free(p);
    return q;
}

SHOAL_ALLOC_PATH void *alloc_realloc(void *p, size_t n)
{
    if (p == NULL)
        return alloc_malloc(n);
    /* The common case first: a live page block that keeps, returned
     * without classifying it. */
    const shoal_page_t *pg = shoal_live_page_block(p);
    if (shoal_likely(pg != NULL) && page_block_keeps(pg->block_size, n))
        return p;
    return realloc_slow(p, n);
}
SHOAL_ALSO_NAMED(realloc, alloc_realloc)
SHOAL_ALSO_NAMED(__libc_realloc, alloc_realloc)

SHOAL_ALLOC_PATH void *alloc_reallocarray(void *p, size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n))
        return shoal_too_big();
    return alloc_realloc(p, n);
}
SHOAL_ALSO_NAMED(reallocarray, alloc_reallocarray)

