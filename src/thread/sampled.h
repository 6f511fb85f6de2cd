/* sampled.h - heap profiling in the thread layer: the heap that holds
 * the small blocks sampled, and a heap armed for sampling
 * (docs/profiling.md).
 *
 * A sampled allocation of a page class is not served from the thread's
 * page but from a page of the sampled heap, a heap no thread owns (its
 * `live` is 0).  So the free of a sampled block, from any thread, fails
 * the owner test of free's fast path like any block of another heap, and
 * the remote path, which finds the owner not live, brings it here
 * (shoal_sampled_free) to be forgotten: free's fast path pays nothing
 * for telling sampled blocks apart.  Whoever holds the profiling lock
 * (core/samples.h) holds the sampled heap.
 *
 * A heap is armed for sampling on its slow paths while profiling is on:
 * the page heading each of its queues is armed (core/page.h: its
 * traps), and its large and huge caches are closed, so that large and
 * huge mallocs come to the slow path, where they are sampled.
 */
#ifndef SHOAL_SAMPLED_H
#define SHOAL_SAMPLED_H

#include "heap.h"
#include "../core/samples.h"

extern shoal_heap_t shoal_sampled_heap;

/* A block of class cls from the sampled heap, recorded as allocated at
 * pcs[0..depth) at `rate`, zeroed if asked; NULL with errno ENOMEM. */
void *shoal_sampled_alloc(unsigned cls, bool zero, size_t rate, void *const *pcs,
                          unsigned depth);

/* b, of the sampled heap's page pg, was freed (its freed mark is set). */
void shoal_sampled_free(shoal_page_t *pg, shoal_block_t *b);

/* Arm h for the rate in effect, or disarm it (h's holder). */
void shoal_heap_prof_sync(shoal_heap_t *h);

/* The calling thread's heap, armed or disarmed if profiling changed:
 * one load and one compare on the slow paths. */
static inline void shoal_heap_prof_check(void)
{
    shoal_heap_t *h = shoal_tl_heap;
    if (shoal_unlikely(h->prof_rate != shoal_prof_rate()) && h != &shoal_empty_heap)
        shoal_heap_prof_sync(h);
}

#endif
