/* large_cache.c - a heap's cache of freed large blocks (large_cache.h). */
#include "large_cache.h"

#include "../core/purge.h"

_Atomic uint64_t shoal_large_orphan_allocs;
_Atomic uint64_t shoal_large_orphan_live[SHOAL_MAX_ORDER + 1];

/* Add n to a large-block counter: h's, or the heapless threads'. */
static void count_add(shoal_heap_t *h, shoal_counter_t *mine, _Atomic uint64_t *orphan,
                      uint64_t n)
{
    if (h != &shoal_empty_heap)
        shoal_count(mine, n);
    else if (SHOAL_STATS_ENABLED)
        atomic_fetch_add_explicit(orphan, n, memory_order_relaxed);
}

/* A large block of order `order` starts (+1) or stops (-1) being live;
 * a start that is not a resize is a request. */
static void count_live(shoal_heap_t *h, unsigned order, int dir, bool request)
{
    count_add(h, &h->stats.large_live[order], &shoal_large_orphan_live[order],
              (uint64_t)(int64_t)dir);
    if (request)
        count_add(h, &h->stats.large_allocs, &shoal_large_orphan_allocs, 1);
}

static void release(shoal_page_t *head, unsigned slots)
{
    shoal_superpage_t *sp = shoal_superpage_of(head);
    shoal_pool_release(sp, (unsigned)(head - sp->pages), slots);
    shoal_purge_note_free();
}

void shoal_large_cache_drain(shoal_heap_t *h)
{
    for (unsigned o = 0; o <= SHOAL_MAX_ORDER; o++)
        while (h->large_free[o] != NULL)
            release(shoal_large_cache_take(h, o), 1u << o);
}

void shoal_large_cache_close(shoal_heap_t *h, bool closed)
{
    shoal_large_cache_drain(h);
    h->large_cached_slots = closed ? SHOAL_LARGE_CACHE_CLOSED : 0;
}

void *shoal_heap_large_alloc(size_t n, size_t align, bool zero)
{
    shoal_heap_t *h = shoal_heap_of_thread();
    unsigned order = shoal_large_order(n > align ? n : align);
    shoal_span_t s;
    /* The smallest cached block that holds it: a block grown by realloc
     * and freed serves the next, smaller start of the same cycle from
     * the same slots, rather than the cache filling with big blocks and
     * every cycle touching new memory. */
    unsigned have = order;
    while (have <= SHOAL_MAX_ORDER && h->large_free[have] == NULL)
        have++;
    if (have <= SHOAL_MAX_ORDER) {
        shoal_page_t *head = shoal_large_cache_take(h, have);
        h->large_cache_used = true;
        if (have > order)               /* the tail goes back, resident */
            release(head + (1u << order), (1u << have) - (1u << order));
        shoal_superpage_t *sp = shoal_superpage_of(head);
        s = (shoal_span_t){ sp, (unsigned)(head - sp->pages), order, false };
    } else if (!shoal_pool_claim(order, &s)) {
        return NULL;
    } else {
        shoal_heap_grew();      /* the footprint grows */
    }
    count_live(h, order, 1, true);
    return shoal_large_make(&s, n, zero);
}

void shoal_heap_large_free(shoal_page_t *head)
{
    shoal_heap_t *h = shoal_heap_of_thread();
    unsigned order = head->order, slots = 1u << order;
    if (h->large_cached_slots <= SHOAL_LARGE_CACHE_SLOTS && slots <= SHOAL_LARGE_CACHE_SLOTS) {
        /* Room is made from the largest blocks cached: one eviction
         * frees the most. */
        for (unsigned o = SHOAL_MAX_ORDER; !shoal_large_cache_push(h, head);) {
            if (h->large_free[o] == NULL) {
                o--;
                continue;
            }
            release(shoal_large_cache_take(h, o), 1u << o);
            shoal_purger_start();
        }
        return;
    }
    count_live(h, order, -1, false);
    shoal_large_unmake(head);
    release(head, slots);
    shoal_purger_start();
}

void *shoal_heap_large_resize(shoal_page_t *head, size_t n)
{
    shoal_heap_t *h = shoal_tl_heap;
    unsigned old = head->order;
    void *p = shoal_large_resize(head, n);
    if (p != NULL && head->order != old) {
        count_live(h, old, -1, false);
        count_live(h, head->order, 1, false);
    }
    return p;
}
