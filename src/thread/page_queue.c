/* page_queue.c - a heap's queues of pages, one per size class, its full
 * pages, and the direct table that leads malloc to each queue's head
 * (page_queue.h). */
#include "page_queue.h"
#include "stash.h"

#include "../core/options.h"

/* The direct entries [lo, hi] of each class, for CACHELINE_ALIGN off
 * and on (an empty range is 1..0): shoal_direct_range's, once. */
static uint8_t direct_lo[2][SHOAL_CLASSES], direct_hi[2][SHOAL_CLASSES];

void shoal_queue_init(void)
{
    for (unsigned m = 0; m < 2; m++) {
        for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
            size_t lo, hi;
            shoal_direct_range(c, m != 0, &lo, &hi);
            direct_lo[m][c] = (uint8_t)(lo < hi + 1 ? lo : 1);
            direct_hi[m][c] = (uint8_t)(lo < hi + 1 ? hi : 0);
        }
    }
}

/* The direct entries of class c, and the fast path's other needs of a
 * head, follow pages[c]. */
static inline void publish(shoal_heap_t *h, unsigned c, shoal_page_t *pg)
{
    /* The option cannot change once a page exists (EBUSY). */
    unsigned m = shoal_opt(ALLOC_OPTION_CACHELINE_ALIGN) != 0;
    /* The bounds read once: a byte array may alias the entries stored,
     * and would be read again after each store.  A class has 1-8 entries
     * (one for most): the empty asm keeps the loop a store and a compare
     * an entry, where gcc would vectorize it behind a set-up of 20
     * instructions. */
    unsigned lo = direct_lo[m][c], hi = direct_hi[m][c];
    for (_Atomic(shoal_page_t *) *d = &h->direct[lo], *end = &h->direct[hi]; d <= end; d++) {
        __asm__("" : "+r"(d));
        atomic_store_explicit(d, pg, memory_order_relaxed);
    }
    /* The fast path pops only from a queue's head: arming it there arms
     * every page before malloc takes a block from it (sampled.h). */
    if (shoal_unlikely(h->prof_rate != 0) && pg != &shoal_empty_page && !pg->armed)
        shoal_page_arm(pg);
}

void shoal_queue_set_head(shoal_heap_t *h, unsigned c, shoal_page_t *pg)
{
    h->pages[c] = pg;
    publish(h, c, pg);
}

void shoal_queue_publish(shoal_heap_t *h, unsigned c)
{
    publish(h, c, h->pages[c]);
}

/* pg off its queue; a new head is published, or (`quiet`) only stored
 * in pages[c], for a walk that publishes once at its end. */
static void unlink_page(shoal_heap_t *h, shoal_page_t *pg, bool quiet)
{
    unsigned c = pg->size_class;
    if (pg->prev != NULL) {
        pg->prev->next = pg->next;
    } else {
        shoal_page_t *head = pg->next != NULL ? pg->next : &shoal_empty_page;
        if (quiet)
            h->pages[c] = head;
        else
            shoal_queue_set_head(h, c, head);
    }
    if (pg->next != NULL)
        pg->next->prev = pg->prev;
    else
        h->last[c] = pg->prev;
    pg->next = pg->prev = NULL;
}

/* pg in front of its queue, published or (`quiet`) not, as above. */
static void link_front(shoal_heap_t *h, shoal_page_t *pg, bool quiet)
{
    unsigned c = pg->size_class;
    shoal_page_t *first = h->pages[c];
    pg->prev = NULL;
    if (first == &shoal_empty_page) {
        pg->next = NULL;
        h->last[c] = pg;
    } else {
        pg->next = first;
        first->prev = pg;
    }
    if (quiet)
        h->pages[c] = pg;
    else
        shoal_queue_set_head(h, c, pg);
}

/* pg at the back of its queue, published or (`quiet`) not where it
 * becomes the head, as above. */
static void link_back(shoal_heap_t *h, shoal_page_t *pg, bool quiet)
{
    unsigned c = pg->size_class;
    shoal_page_t *last = h->last[c];
    pg->next = NULL;
    pg->prev = last;
    if (last != NULL)
        last->next = pg;
    else if (quiet)
        h->pages[c] = pg;
    else
        shoal_queue_set_head(h, c, pg);
    h->last[c] = pg;
}

void shoal_queue_remove(shoal_heap_t *h, shoal_page_t *pg)
{
    unlink_page(h, pg, false);
}

void shoal_queue_push_front(shoal_heap_t *h, shoal_page_t *pg)
{
    link_front(h, pg, false);
}

void shoal_queue_push_back(shoal_heap_t *h, shoal_page_t *pg)
{
    link_back(h, pg, false);
}

void shoal_full_push(shoal_heap_t *h, shoal_page_t *pg)
{
    h->full_pages++;
    shoal_stash_fit(h);
    shoal_page_set_owner(pg, h, true);
}

void shoal_full_remove(shoal_heap_t *h, shoal_page_t *pg)
{
    h->full_pages--;
    shoal_stash_fit(h);
    shoal_page_set_owner(pg, h, false);
}

void shoal_queue_unfull(shoal_heap_t *h, shoal_page_t *pg)
{
    shoal_page_t *head = h->pages[pg->size_class];
    shoal_full_remove(h, pg);
    if (!shoal_page_has_free(head) && shoal_page_local_empty(head))
        shoal_queue_push_front(h, pg);
    else
        shoal_queue_push_back(h, pg);
}

void shoal_queue_walk_full(shoal_heap_t *h, shoal_page_t *pg)
{
    unlink_page(h, pg, true);
    shoal_full_push(h, pg);
}

void shoal_queue_walk_front(shoal_heap_t *h, shoal_page_t *pg)
{
    unlink_page(h, pg, true);
    link_front(h, pg, true);
}

void shoal_queue_walk_back(shoal_heap_t *h, shoal_page_t *pg)
{
    unlink_page(h, pg, true);
    link_back(h, pg, true);
}
