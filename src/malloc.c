/* malloc.c - malloc, calloc and aligned_alloc: the fast paths, and the
 * slow paths behind them.
 *
 * malloc's fast path: TLS heap -> the page of the request's size (one
 * load from the heap's direct table, up to 64 KiB) -> pop its free
 * list.  No atomics, no locks, no stack frame; an empty queue
 * holds a static empty page whose lists are empty.  Large
 * blocks pop the heap's stack of their order, huge ones take the
 * thread's huge slot.  A page that ran dry goes on to the next page of
 * its class (alloc_page_dry); everything else is alloc_generic.
 */
#include "shoal.h"

#include <errno.h>
#include <string.h>
#include "alloc_fast.h"
#include "block.h"
#include "override.h"
#include "profile.h"
#include "core/purge.h"
#include "stats.h"
#include "thread/heap.h"
#include "thread/large_cache.h"
#include "thread/sampled.h"
#include "thread/stash.h"

static void *alloc_generic(size_t n, size_t align, bool zero);
static void *free_list_stop(shoal_heap_t *h, shoal_page_t *pg, size_t n, bool zero);
static void *alloc_page_dry(size_t n, shoal_page_t *pg);
static void *calloc_page_dry(size_t n, shoal_page_t *pg);

/* What heads pg's free list: a block that passes shoal_block_is_free
 * (then *b is it); the end trap of an armed page (core/page.h) with no
 * block on either list, where the page is dry as one whose list ends in
 * NULL (alloc_page_dry); or what free_list_stop takes from there.  The
 * end trap with local frees behind it is taken here where it needs no
 * more than malloc's own refill does - local_free becomes the list and
 * the sample's gap shrinks by its length - in the branch that only a
 * block failing the test reaches: with profiling off the fast path is
 * unchanged, and with it on, the common end of a list costs no call. */
enum page_head { HEAD_BLOCK, HEAD_DRY, HEAD_STOP };

static inline __attribute__((always_inline)) enum page_head page_head(shoal_page_t *pg,
                                                                      shoal_block_t **b)
{
    while (shoal_unlikely(!shoal_block_is_free(pg, *b = pg->free))) {
        if (*b != &shoal_trap_end)
            return HEAD_STOP;
        if (pg->local_free == &shoal_trap_end)  /* armed: its lists end there, never in NULL */
            return HEAD_DRY;
        if (!shoal_page_take_local_untrapped(pg))
            return HEAD_STOP;
    }
    return HEAD_BLOCK;
}

/* Pop the head of pg's free list for a request of n bytes. */
static inline __attribute__((always_inline)) void *page_pop(shoal_heap_t *h, shoal_page_t *pg, size_t n)
{
    shoal_block_t *b;
    switch (page_head(pg, &b)) {
    case HEAD_BLOCK:
        return shoal_page_take_counted(h, pg, b);
    case HEAD_DRY:
        return alloc_page_dry(n, pg);
    case HEAD_STOP:
        break;
    }
    return free_list_stop(h, pg, n, false);
}

/* A zero block of n bytes from fresh memory, whose first bytes the carve
 * wrote: write a zero into each further OS page it reaches.  A program
 * that reads its calloc'd block before it writes it would otherwise
 * fault twice on each of them (the kernel's zero page, then a copy on
 * write); this costs one fault each, as the memset that other
 * allocators do would, and nothing where the block is used anyway. */
static void touch_pages(shoal_block_t *b, size_t n)
{
    char *end = (char *)b + n;
    for (char *q = (char *)shoal_align_up((uintptr_t)b + 1, SHOAL_OS_PAGE); q < end;
         q += SHOAL_OS_PAGE)
        *q = 0;
}

/* Pop from a page that has a free block, zeroing n bytes, or only the
 * link where the page's free blocks read as zero (fresh memory: the link
 * and the mark were the only writes, and page_take clears the mark).
 * Every call out is a tail call, so the fast path needs no frame. */
static inline __attribute__((always_inline)) void *page_pop_zero(shoal_heap_t *h, shoal_page_t *pg, size_t n)
{
    shoal_block_t *b;
    switch (page_head(pg, &b)) {
    case HEAD_BLOCK:
        break;
    case HEAD_DRY:
        return calloc_page_dry(n, pg);
    case HEAD_STOP:
        return free_list_stop(h, pg, n, true);
    }
    bool zero = pg->free_is_zero;
    shoal_page_take_counted(h, pg, b);
    if (!zero)
        return memset(b, 0, n);
    b->link = 0;
    if (shoal_unlikely(n > SHOAL_OS_PAGE / 2))
        touch_pages(b, n);
    return b;
}

/* The head of pg's free list failed shoal_block_is_free, and page_head
 * did not take it (core/page.h): the end trap of a list whose local
 * frees need the sample trap placed among them; the sample trap itself,
 * which samples the allocation at hand (from the sampled heap:
 * thread/sampled.h); or a link or freed mark that was overwritten -
 * reported, and the call served, zeroed, from elsewhere
 * (ON_ERROR=warn). */
static __attribute__((noinline, cold)) SHOAL_ALLOC_PATH void *free_list_stop(shoal_heap_t *h,
                                                                             shoal_page_t *pg,
                                                                             size_t n, bool zero)
{
    if (pg->free == &shoal_trap_end) {
        shoal_page_take_local_trapped(pg);
    } else if (pg->free == &shoal_trap_sample) {
        shoal_page_trap_sample(pg);
        void *p = shoal_prof_sample_block(pg->size_class, zero, __builtin_frame_address(0));
        if (p != NULL)
            return p;
        /* No stack to be had, or profiling just went off: the block the
         * trap stands before, unsampled. */
        shoal_block_t *b = shoal_page_take_trapped(pg);
        if (b != NULL) {
            shoal_count(&h->stats.allocs[pg->size_class], 1);
            return zero ? memset(b, 0, pg->block_size) : b;
        }
    } else {
        shoal_page_broken(pg);
        return alloc_generic(n, SHOAL_ALIGN, true);
    }
    return zero ? page_pop_zero(h, pg, n) : page_pop(h, pg, n);
}

static void *alloc_tier(size_t n, size_t align, bool zero)
{
    unsigned cls;
    switch (shoal_tier_of(n, align, &cls)) {
    case SHOAL_TIER_PAGE: {
        shoal_page_t *pg = shoal_heap_find_page(cls);
        if (pg == NULL)
            return NULL;
        shoal_heap_t *h = shoal_tl_heap;        /* made by find_page on first use */
        return zero ? page_pop_zero(h, pg, n) : page_pop(h, pg, n);
    }
    case SHOAL_TIER_LARGE:
        return shoal_prof_after_big(shoal_heap_large_alloc(n, align, zero, false));
    case SHOAL_TIER_HUGE:
        break;
    }
    void *p = align <= SHOAL_ALIGN
                  ? shoal_huge_slot_take(&shoal_heap_of_thread()->huge_slot, n, zero)
                  : NULL;
    if (p == NULL) {
        p = shoal_huge_alloc(n, align, zero);
        shoal_stats_tick();     /* allocated jumps: sample the peaks */
    }
    return shoal_prof_after_big(p);
}

/* Everything that is not a fast path: first use, empty page, aligned,
 * large and huge requests, the size check, and the purger's start.
 * With CACHELINE_ALIGN set, pages of classes that are not multiples of
 * 64 bytes are never made, so such requests always come here. */
static __attribute__((noinline, cold)) SHOAL_ALLOC_PATH void *alloc_generic(size_t n,
                                                                            size_t align,
                                                                            bool zero)
{
    if (shoal_unlikely(n > SHOAL_MAX_REQUEST))
        return shoal_too_big();
    shoal_process_init();               /* options before the first block */
    shoal_heap_prof_check();
    void *p = alloc_tier(n, align, zero);
    if (shoal_unlikely(p == NULL)) {
        /* At a limit (MAX_MEMORY, or the kernel's), free memory that
         * this thread's caches, the pool or the huge cache hold may be
         * what is in the way: give it all back to the OS and try once
         * more.  The retry is unconditional: another thread may have
         * purged a moment ago, and its room is ours to find (see
         * huge.c). */
        shoal_heap_drain_caches();
        shoal_purge_now(true);
        p = alloc_tier(n, align, zero);
    }
    shoal_heap_end_call();
    shoal_purger_slow_path();
    return p;
}

/* The page malloc or calloc found for n bytes, pg, the head of its
 * class's queue, has no block left, nor has the stash (thread/stash.h):
 * the next page of the class, found as alloc_generic would - without
 * the size check, the set-up and the class lookup, which a heap that
 * has a page of the class has passed (pg's class is the one that serves
 * n, CACHELINE_ALIGN or not).  A call that finds no memory (whose retry
 * is alloc_generic's) goes the generic way. */
static __attribute__((noinline)) SHOAL_ALLOC_PATH void *alloc_page_walk(size_t n, shoal_page_t *pg,
                                                                       bool zero)
{
    shoal_heap_prof_check();
    pg = shoal_heap_find_page(pg->size_class);
    if (shoal_unlikely(pg == NULL))
        return alloc_generic(n, SHOAL_ALIGN, zero);
    shoal_heap_t *h = shoal_tl_heap;
    void *p = zero ? page_pop_zero(h, pg, n) : page_pop(h, pg, n);
    shoal_purger_slow_path();
    return p;
}

/* A block from the stash whose freed mark is gone: reported, left out,
 * and the dry page's way taken again. */
static __attribute__((noinline, cold)) SHOAL_ALLOC_PATH void *alloc_stash_broken(
    size_t n, shoal_page_t *pg, bool zero, shoal_block_t *b)
{
    shoal_stash_broken(b);
    return zero ? calloc_page_dry(n, pg) : alloc_page_dry(n, pg);
}

/* The block of pg's class that h's stash holds, handed out for n bytes. */
static inline __attribute__((always_inline)) void *stash_take(shoal_heap_t *h, size_t n,
                                                              shoal_page_t *pg, bool zero)
{
    unsigned c = pg->size_class;
    shoal_stashed_t s = shoal_stash_pop(h, c);
    if (shoal_unlikely(!shoal_stash_hand_out(h, s, c)))
        return alloc_stash_broken(n, pg, zero, s.block);
    return zero ? memset(s.block, 0, n) : s.block;
}

/* A profiled heap's stashed block, which passes no trap, did not pass
 * the thread's count of such bytes (profile.h): where a sample point
 * falls in it, the allocation is sampled (from the sampled heap) and the
 * block stays stashed; otherwise, or with no stack to be had, it goes
 * out. */
static __attribute__((noinline, cold)) SHOAL_ALLOC_PATH void *alloc_stash_counted(
    size_t n, shoal_page_t *pg, bool zero)
{
    if (shoal_prof_point_falls(pg->block_size)) {
        void *p = shoal_prof_sample_block(pg->size_class, zero, __builtin_frame_address(0));
        if (p != NULL)
            return p;
    }
    return stash_take(shoal_tl_heap, n, pg, zero);
}

/* pg, the head of its class's queue, has no block left: the block the
 * stash holds for the class, else the walk above.  The empty page heads
 * every queue of a thread without a heap, and an empty queue: those go
 * the generic way.  A heap whose profiling rate is not the process's
 * walks, whose check arms it or disarms it; in a profiled heap the
 * stashed block goes out if the thread's count lets it pass, else the
 * count's cold way above.  Every call on the stash's way is a jump, so
 * it needs no frame: malloc and calloc each have a copy for their
 * `zero` (below), because with `zero` an argument the compiler keeps two
 * copies of it and of the class, and takes two callee-saved registers
 * for the profiled count - a push and a pop each, on every way through. */
static inline __attribute__((always_inline)) void *page_dry(size_t n, shoal_page_t *pg, bool zero)
{
    if (shoal_unlikely(pg == &shoal_empty_page))
        return alloc_generic(n, SHOAL_ALIGN, zero);
    shoal_heap_t *h = shoal_tl_heap;
    if (shoal_likely(h->prof_rate == shoal_prof_rate()) && shoal_stash_holds(h, pg->size_class)) {
        if (shoal_unlikely(h->prof_rate != 0) && !shoal_prof_pass(pg->block_size))
            return alloc_stash_counted(n, pg, zero);
        return stash_take(h, n, pg, zero);
    }
    return alloc_page_walk(n, pg, zero);
}

static __attribute__((noinline)) SHOAL_ALLOC_PATH void *alloc_page_dry(size_t n, shoal_page_t *pg)
{
    return page_dry(n, pg, false);
}

static __attribute__((noinline)) SHOAL_ALLOC_PATH void *calloc_page_dry(size_t n, shoal_page_t *pg)
{
    return page_dry(n, pg, true);
}

/* malloc above 2 MiB: this thread's huge slot, or the slow way (a tail
 * call from malloc, which so keeps no frame). */
static __attribute__((noinline)) SHOAL_ALLOC_PATH void *alloc_huge(shoal_heap_t *h, size_t n)
{
    void *p = shoal_huge_slot_take(&h->huge_slot, n, false);
    return p != NULL ? p : alloc_generic(n, SHOAL_ALIGN, false);
}

SHOAL_ALLOC_PATH void *alloc_malloc(size_t n)
{
    shoal_heap_t *h = shoal_tl_heap;
    shoal_page_t *pg;
    /* page_for's loads, tested from the small end: through page_for, the
     * compiler tests SHOAL_MEDIUM_MAX first, two instructions more on
     * every request up to 1 KiB; and 1-8 KiB, tested before 8-64 KiB,
     * takes one compare less than they do, for one more on each large or
     * huge request. */
    if (shoal_likely(n <= SHOAL_DIRECT_MAX)) {
        pg = atomic_load_explicit(&h->direct[shoal_direct_index(n)], memory_order_relaxed);
    } else if (shoal_likely(n <= SHOAL_DIRECT_MED_MAX)) {
        pg = atomic_load_explicit(&h->direct[shoal_direct_mid_index(n)], memory_order_relaxed);
    } else if (n <= SHOAL_MEDIUM_MAX) {
        pg = atomic_load_explicit(&h->direct[shoal_direct_big_index(n)], memory_order_relaxed);
    } else if (n <= SHOAL_LARGE_MAX) {
        void *p = shoal_large_cache_pop(h, n);
        return p != NULL ? p : alloc_generic(n, SHOAL_ALIGN, false);
    } else {
        return alloc_huge(h, n);
    }
    if (shoal_likely(pg->free != NULL))
        return page_pop(h, pg, n);
    if (pg->local_free != NULL) {       /* ran dry: refill from local_free */
        shoal_page_take_local(pg);
        return page_pop(h, pg, n);
    }
    return alloc_page_dry(n, pg);
}
SHOAL_ALSO_NAMED(malloc, alloc_malloc)
SHOAL_ALSO_NAMED(__libc_malloc, alloc_malloc)

SHOAL_ALLOC_PATH void *alloc_calloc(size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n))
        return shoal_too_big();
    if (shoal_likely(n <= SHOAL_MEDIUM_MAX)) {
        shoal_heap_t *h = shoal_tl_heap;
        shoal_page_t *pg = shoal_page_for(h, n);
        if (shoal_likely(pg->free != NULL) ||
            (pg->local_free != NULL && shoal_page_take_local(pg) != NULL))
            return page_pop_zero(h, pg, n);
        return calloc_page_dry(n, pg);
    }
    return alloc_generic(n, SHOAL_ALIGN, true);
}
SHOAL_ALSO_NAMED(calloc, alloc_calloc)
SHOAL_ALSO_NAMED(__libc_calloc, alloc_calloc)

/* An alignment above 16 bytes: the class of n rounded up to it holds
 * blocks that are all aligned (shoal_class_for_aligned), and the heap's
 * direct entry of the rounded size leads to that class's queue (with
 * CACHELINE_ALIGN, to a class of 64-byte multiples: aligned as well), so
 * the pop is malloc's.  Anything the head's first free block cannot
 * serve - an empty list, a trap, a broken link - goes the generic way
 * with the alignment. */
SHOAL_ALLOC_PATH void *alloc_aligned(size_t align, size_t n)
{
    if (shoal_unlikely(!shoal_is_pow2(align))) {
        errno = EINVAL;
        return NULL;
    }
    if (align <= SHOAL_ALIGN)
        return alloc_malloc(n);
    /* n bounded first: rounding SIZE_MAX up would wrap to 0. */
    size_t r = n <= SHOAL_MEDIUM_MAX ? shoal_align_up(n ? n : 1, align) : SIZE_MAX;
    if (shoal_likely(r <= SHOAL_MEDIUM_MAX)) {
        shoal_heap_t *h = shoal_tl_heap;
        void *p = shoal_page_pop_or_null(h, shoal_page_for(h, r));
        if (shoal_likely(p != NULL))
            return p;
    }
    return alloc_generic(n, align, false);
}
SHOAL_ALSO_NAMED(aligned_alloc, alloc_aligned)

void alloc_collect(bool force)
{
    shoal_heap_collect();
    shoal_purge_now(force);
    /* The pass drains the inboxes of the orphanage and of the heaps that
     * exited threads parked; a block there of a page this heap adopted
     * since it was sent is sent on, here.  Take those home too, and give
     * back what they emptied. */
    if (shoal_heap_collect())
        shoal_purge_now(force);
}
