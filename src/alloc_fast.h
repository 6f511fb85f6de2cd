/* alloc_fast.h - the pop every allocation fast path ends in, shared by
 * the entry points that have one: malloc, calloc and aligned_alloc
 * (malloc.c) and C++'s operator new (override_new.c), which so pops
 * without a call into malloc. */
#ifndef SHOAL_ALLOC_FAST_H
#define SHOAL_ALLOC_FAST_H

#include "core/page.h"
#include "core/size_class.h"
#include "thread/heap.h"

/* Hand out b, the head of pg's free list, which passed shoal_block_is_free. */
static inline void *shoal_page_take_counted(shoal_heap_t *h, shoal_page_t *pg, shoal_block_t *b)
{
    shoal_page_take(pg, b);
    shoal_count(&h->stats.allocs[pg->size_class], 1);
    return b;
}

/* The page a request of n bytes (n <= SHOAL_MEDIUM_MAX) pops from: the
 * heap's direct entry of its size. */
static inline shoal_page_t *shoal_page_for(shoal_heap_t *h, size_t n)
{
    if (shoal_likely(n <= SHOAL_DIRECT_MAX))
        return atomic_load_explicit(&h->direct[shoal_direct_index(n)], memory_order_relaxed);
    return atomic_load_explicit(&h->direct[shoal_direct_med_index(n)], memory_order_relaxed);
}

/* A block of pg, the calling thread's (h its heap), refilled from
 * local_free where `free` ran dry as malloc refills; NULL for all
 * that a slow path sorts out - an empty page, a trap, a broken list. */
static inline void *shoal_page_pop_or_null(shoal_heap_t *h, shoal_page_t *pg)
{
    if (pg->free == NULL && pg->local_free != NULL)
        shoal_page_take_local(pg);
    shoal_block_t *b = pg->free;
    if (shoal_likely(shoal_block_is_free(pg, b)))
        return shoal_page_take_counted(h, pg, b);
    return NULL;
}

#endif
