/* large_cache.c - a heap's cache of freed large blocks (large_cache.h). */
#include "large_cache.h"

#include <string.h>

/* Relaxed: statistics, nothing is published through them. */
_Atomic uint64_t shoal_large_orphan_allocs;
_Atomic uint64_t shoal_large_orphan_live[SHOAL_LARGE_SLOTS + 1];

/* Add n to a large-block counter: h's, or the heapless threads'. */
static void count_add(shoal_heap_t *h, shoal_counter_t *mine, _Atomic uint64_t *orphan,
                      uint64_t n)
{
    if (h != &shoal_empty_heap)
        shoal_count(mine, n);
    else if (SHOAL_STATS_ENABLED)
        atomic_fetch_add_explicit(orphan, n, memory_order_relaxed);
}

/* A large block of `held` slots starts (+1) or stops (-1) being live;
 * a start that is not a resize is a request. */
static void count_live(shoal_heap_t *h, unsigned held, int dir, bool request)
{
    count_add(h, &h->stats.large_live[held], &shoal_large_orphan_live[held],
              (uint64_t)(int64_t)dir);
    if (request)
        count_add(h, &h->stats.large_allocs, &shoal_large_orphan_allocs, 1);
}

static void release(shoal_page_t *head, unsigned slots)
{
    shoal_superpage_t *sp = shoal_superpage_of(head);
    shoal_large_release(sp, (unsigned)(head - sp->pages), slots);
}

/* The stacks the slow paths use, and their count of slots: NULL for a
 * heap that keeps nothing (the empty heap, the sampled heap). */
static shoal_page_t **slow_stacks(shoal_heap_t *h, unsigned **slots)
{
    if (h->large_cached_slots != SHOAL_LARGE_CACHE_CLOSED) {
        *slots = &h->large_cached_slots;
        return h->large_free;
    }
    *slots = &h->large_held_slots;
    return h->prof_rate != 0 ? h->large_held : NULL;
}

static void drain_stacks(shoal_page_t **stacks, unsigned *slots)
{
    for (unsigned held = 1; held <= SHOAL_LARGE_SLOTS; held++)
        while (stacks[held] != NULL)
            release(shoal_large_stack_take(stacks, slots, held), held);
}

void shoal_large_cache_share(shoal_heap_t *h, size_t live)
{
    size_t cap = SHOAL_LARGE_CACHE_SHARED / (live != 0 ? live : 1);
    h->large_cap = cap > SHOAL_LARGE_CACHE_SLOTS ? SHOAL_LARGE_CACHE_SLOTS
                   : cap < SHOAL_LARGE_CACHE_MIN ? SHOAL_LARGE_CACHE_MIN
                                                 : (unsigned)cap;
}

void shoal_large_cache_drain(shoal_heap_t *h)
{
    unsigned *slots;
    shoal_page_t **stacks = slow_stacks(h, &slots);
    if (stacks != NULL)
        drain_stacks(stacks, slots);
}

void shoal_large_cache_close(shoal_heap_t *h, bool closed)
{
    shoal_page_t **from = closed ? h->large_free : h->large_held;
    shoal_page_t **to = closed ? h->large_held : h->large_free;
    memcpy(to, from, sizeof h->large_free);
    memset(from, 0, sizeof h->large_free);
    unsigned slots = closed ? h->large_cached_slots : h->large_held_slots;
    h->large_held_slots = closed ? slots : 0;
    h->large_cached_slots = closed ? SHOAL_LARGE_CACHE_CLOSED : slots;
}

void *shoal_heap_large_alloc(size_t n, size_t align, bool zero, bool grow)
{
    shoal_heap_t *h = shoal_heap_of_thread();
    unsigned want = shoal_large_slots(n);
    if (h != &shoal_empty_heap)
        shoal_large_cache_share(h, shoal_heaps_live());    /* threads come and go */
    /* The smallest cached block that holds it, at the alignment asked
     * (the top of each stack is looked at): a block grown by realloc
     * and freed serves the next, smaller start of the same cycle from
     * the same slots, rather than the cache filling with big blocks and
     * every cycle touching new memory.  Its slots past the new block's
     * go back to the pool (shoal_large_make).  A block to grow into
     * must hold the whole aligned run: a cached block of just its size
     * has no room after it, the next doubling would leave it again, and
     * the cycle would repeat from the cache at every start (once a page
     * claim had taken a run's tail, bench/ footprint's buffer moved at
     * each step). */
    unsigned *slots;
    shoal_page_t **stacks = slow_stacks(h, &slots);
    unsigned have = grow ? (unsigned)(align >> SHOAL_SLOT_SHIFT) : want;
    while (stacks != NULL && have <= SHOAL_LARGE_SLOTS &&
           (stacks[have] == NULL || ((uintptr_t)stacks[have]->start & (align - 1)) != 0))
        have++;
    shoal_superpage_t *sp;
    unsigned slot;
    bool known_zero = false;
    if (stacks != NULL && have <= SHOAL_LARGE_SLOTS) {
        shoal_page_t *head = shoal_large_stack_take(stacks, slots, have);
        h->large_cache_used = true;
        sp = shoal_superpage_of(head);
        slot = (unsigned)(head - sp->pages);
    } else {
        /* At the alignment every slot has, any run of free slots will do
         * (they pack: a block of more than 1 MiB placed at its power of
         * two could only take a superpage's upper half); above it, the
         * buddy block of the power of two that holds the alignment. */
        shoal_span_t s;
        bool run = align <= SHOAL_SLOT_SIZE;
        if (run ? !shoal_pool_claim_run(want, &s)
                : !shoal_pool_claim(shoal_large_order(n > align ? n : align), &s))
            return NULL;
        shoal_heap_grew();      /* the footprint grows */
        sp = s.sp;
        slot = s.slot;
        have = run ? want : 1u << s.order;
        known_zero = s.zero;
    }
    count_live(h, want, 1, true);
    return shoal_large_make(sp, slot, have, n, zero, known_zero);
}

/* Push head onto a cache, making room from the largest blocks cached
 * (one eviction frees the most); false if it is larger than a cache. */
static bool stack_push(shoal_page_t **stacks, unsigned *slots, unsigned cap,
                       shoal_page_t *head)
{
    unsigned held = shoal_large_held(head);
    if (held > cap)
        return false;
    for (unsigned o = SHOAL_LARGE_SLOTS; *slots + held > cap;) {
        if (stacks[o] == NULL) {
            o--;
            continue;
        }
        release(shoal_large_stack_take(stacks, slots, o), o);
        shoal_purger_start();
    }
    shoal_large_unmake(head);
    head->next = stacks[held];
    stacks[held] = head;
    *slots += held;
    return true;
}

void shoal_heap_large_free(shoal_page_t *head)
{
    shoal_heap_t *h = shoal_heap_of_thread();
    unsigned *slots;
    shoal_page_t **stacks = slow_stacks(h, &slots);
    count_live(h, shoal_large_held(head), -1, false);
    if (stacks != NULL && stack_push(stacks, slots, h->large_cap, head))
        return;
    shoal_large_unmake(head);
    release(head, shoal_large_held(head));
    shoal_purger_start();
}

void *shoal_heap_large_resize(shoal_page_t *head, size_t n)
{
    shoal_heap_t *h = shoal_tl_heap;
    unsigned old = shoal_large_held(head);
    void *p = shoal_large_resize(head, n);
    if (p != NULL && shoal_large_held(head) != old) {
        count_live(h, old, -1, false);
        count_live(h, shoal_large_held(head), 1, false);
    }
    return p;
}
