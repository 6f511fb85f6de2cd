/* sampled.c - the sampled heap, and arming a heap (sampled.h). */
#include "sampled.h"
#include "large_cache.h"
#include "page_queue.h"

#include <errno.h>
#include <string.h>

/* Set up at the first sample (its 9 KiB are zero until then, and take
 * no memory in a process that never profiles); the profiling lock
 * guards `set_up`. */
shoal_heap_t shoal_sampled_heap SHOAL_SELDOM_BSS;
static bool set_up;

void *shoal_sampled_alloc(unsigned cls, bool zero, size_t rate, void *const *pcs,
                          unsigned depth)
{
    shoal_heap_t *h = &shoal_sampled_heap;
    shoal_block_t *b = NULL;
    shoal_prof_lock();
    if (!set_up) {
        h->large_cached_slots = SHOAL_LARGE_CACHE_CLOSED;
        atomic_store_explicit(&h->huge_slot.map, SHOAL_HUGE_SLOT_CLOSED, memory_order_relaxed);
        h->uncached = true;     /* a sample now and then needs no page cache */
        shoal_heap_setup(h);
        set_up = true;
    }
    shoal_page_t *pg = shoal_heap_page_for(h, cls);
    if (pg != NULL) {
        b = pg->free;
        if (shoal_block_is_free(pg, b)) {
            shoal_page_take(pg, b);
            shoal_count(&h->stats.allocs[cls], 1);
            shoal_prof_record(b, pg->block_size, rate, pcs, depth);
        } else {
            shoal_page_broken(pg);
            b = NULL;
            errno = ENOMEM;
        }
    }
    shoal_prof_unlock();
    if (b != NULL && zero)
        memset(b, 0, pg->block_size);
    return b;
}

void shoal_sampled_free(shoal_page_t *pg, shoal_block_t *b)
{
    shoal_heap_t *h = &shoal_sampled_heap;
    shoal_prof_lock();
    shoal_prof_forget(b);
    shoal_count(&h->stats.frees[pg->size_class], 1);
    shoal_remote_come_home(h, pg, b, shoal_page_owner(pg), shoal_heap_page_freed);
    shoal_prof_unlock();
}

void shoal_heap_prof_sync(shoal_heap_t *h)
{
    size_t rate = shoal_prof_rate();
    bool on = rate != 0;
    if ((h->prof_rate != 0) != on) {
        shoal_large_cache_close(h, on);
        shoal_huge_slot_close(&h->huge_slot, on);
    }
    h->prof_rate = rate;
    if (!on)
        return;         /* armed pages stay armed, and place no trap */
    for (unsigned c = 0; c < SHOAL_CLASSES; c++)
        if (h->pages[c] != &shoal_empty_page)
            shoal_page_arm(h->pages[c]);
}
