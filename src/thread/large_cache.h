/* large_cache.h - large blocks (src/core/large.h) through a heap's cache
 * of recently freed ones.
 *
 * A freed large block stays with the heap of the thread that freed it,
 * on a stack per number of slots linked through its head descriptor's
 * `next`, up to `large_cap` slots in all: a free and a malloc of the
 * same number of slots meet there as a push and a pop, with no atomic
 * operation, no lock and no clock.  The cap is SHOAL_LARGE_CACHE_SLOTS
 * (2 MiB) while few threads live, and the live heaps' share of
 * SHOAL_LARGE_CACHE_SHARED (8 MiB), down to SHOAL_LARGE_CACHE_MIN, when
 * many do: 26 threads of CPython's test_asyncio.test_ssl, each keeping
 * 2 MiB of the 256 KiB-1 MiB buffers it freed, had a peak RSS of 291
 * MB, 226 with 256 KiB each (glibc 188).  A heap takes its share when
 * its thread takes it, at each large malloc the cache does not serve,
 * and at its idle sweep.  The idle sweep gives the cache back to the
 * pool when no large block was taken from it since the sweep before.
 *
 * While heap profiling is on the cache is closed to the fast paths, whose
 * large blocks must go by the slow ones to be counted for sampling: its
 * blocks move to the heap's `large_held` stacks, which only the slow
 * paths use, so a block freed serves the next malloc of its size there
 * as it would here (and a buffer that realloc grows finds the same
 * slots).  The empty heap's cache (threads without a heap) and the
 * sampled heap's are closed for good and hold nothing.
 *
 * Counting: a heap counts the large blocks it hands out (cumulative) and
 * those live by slots held (out minus back, possibly in different heaps);
 * frees and bytes are derived from them (shoal_heap_stats).
 */
#ifndef SHOAL_LARGE_CACHE_H
#define SHOAL_LARGE_CACHE_H

#include "../core/large.h"
#include "heap.h"

/* Large-block counters of threads that have no heap (their exit handler
 * ran): atomic, on slow paths only. */
extern _Atomic uint64_t shoal_large_orphan_allocs;
extern _Atomic uint64_t shoal_large_orphan_live[SHOAL_LARGE_SLOTS + 1];

/* Take the top block off the stack of blocks of `held` slots of a cache
 * (its stacks and its count of slots; the stack must hold one). */
static inline shoal_page_t *shoal_large_stack_take(shoal_page_t **stacks, unsigned *slots,
                                                   unsigned held)
{
    shoal_page_t *head = stacks[held];
    stacks[held] = head->next;
    *slots -= held;
    return head;
}

/* The malloc fast path for n bytes, SHOAL_MEDIUM_MAX < n <= SHOAL_LARGE_MAX:
 * a cached block of exactly its number of slots, or NULL (the empty heap
 * caches nothing, so a thread without a heap gets NULL too). */
static inline void *shoal_large_cache_pop(shoal_heap_t *h, size_t n)
{
    unsigned held = shoal_large_slots(n);
    if (h->large_free[held] == NULL)
        return NULL;
    shoal_page_t *head = shoal_large_stack_take(h->large_free, &h->large_cached_slots, held);
    h->large_cache_used = true;
    head->kind = SHOAL_SLOT_LARGE;
    shoal_count(&h->stats.large_live[held], 1);
    shoal_count(&h->stats.large_allocs, 1);
    return head->start;
}

/* The free fast path: push the block whose head is `head` onto h's
 * stack of its number of slots; false, and nothing done, when that would
 * take the cache over its cap (the empty heap's cache counts as over
 * it, so a thread without a heap keeps nothing). */
static inline bool shoal_large_cache_push(shoal_heap_t *h, shoal_page_t *head)
{
    unsigned held = shoal_large_held(head);
    if (h->large_cached_slots + held > h->large_cap)
        return false;
    shoal_count(&h->stats.large_live[held], (uint64_t)-1);
    shoal_large_unmake(head);
    head->next = h->large_free[held];
    h->large_free[held] = head;
    h->large_cached_slots += held;
    return true;
}

/* The rest of malloc's way to a large block: the smallest cached block
 * that holds it (its tail going back to the pool), else the pool.  With
 * `grow` (realloc's block to grow into), align is the run it is to start
 * (a slot's size << the order it may reach), and a cached block must hold all
 * of it.  NULL with errno ENOMEM. */
void *shoal_heap_large_alloc(size_t size, size_t align, bool zero, bool grow);

/* The rest of free's way: into the calling thread's cache, making room by
 * giving the largest cached blocks back to the pool (to the pool
 * straight away for a thread without a heap). */
void shoal_heap_large_free(shoal_page_t *head);

/* realloc in place (src/core/large.h), counted. */
void *shoal_heap_large_resize(shoal_page_t *head, size_t size);

/* h's share of the large-block caches of `live` heaps (h's holder). */
void shoal_large_cache_share(shoal_heap_t *h, size_t live);

/* Give h's cached large blocks back to the pool (h's holder). */
void shoal_large_cache_drain(shoal_heap_t *h);

/* Close h's cache to the fast paths, or open it again (h's holder):
 * its blocks move between large_free and large_held. */
void shoal_large_cache_close(shoal_heap_t *h, bool closed);

#endif
