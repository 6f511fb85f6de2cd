/* large.c - large blocks straight from the pool. */
#include "large.h"

#include <string.h>
#include "purge.h"

static _Atomic uint64_t requests;
static _Atomic size_t live, live_bytes;

static unsigned order_for(size_t n)
{
    unsigned order = 0;
    while ((SHOAL_SLOT_SIZE << order) < n)
        order++;
    return order;
}

void *shoal_large_alloc(size_t n, size_t align, bool zero)
{
    shoal_span_t s;
    if (!shoal_pool_claim(order_for(n > align ? n : align), &s))
        return NULL;
    shoal_page_t *head = shoal_span_head(&s);
    head->order = (uint8_t)s.order;
    head->kind = SHOAL_SLOT_LARGE;
    atomic_fetch_add_explicit(&requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&live, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&live_bytes, shoal_large_usable(head), memory_order_relaxed);
    void *p = shoal_slot_addr(s.sp, s.slot);
    if (zero && !s.zero)
        memset(p, 0, n);
    return p;
}

void shoal_large_free(shoal_page_t *head)
{
    shoal_superpage_t *sp = shoal_superpage_of(head);
    head->kind = SHOAL_SLOT_FREE;
    atomic_fetch_sub_explicit(&live, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&live_bytes, shoal_large_usable(head), memory_order_relaxed);
    shoal_pool_release(sp, (unsigned)(head - sp->pages), 1u << head->order);
    shoal_purge_note_free();
}

void *shoal_large_resize(shoal_page_t *head, size_t n)
{
    shoal_superpage_t *sp = shoal_superpage_of(head);
    unsigned slot = (unsigned)(head - sp->pages);
    unsigned order = head->order, want = order_for(n);
    if (want > order && !shoal_pool_grow(sp, slot, order, want))
        return NULL;
    if (want < order)
        shoal_pool_release(sp, slot + (1u << want), (1u << order) - (1u << want));
    atomic_fetch_add_explicit(&live_bytes, (SHOAL_SLOT_SIZE << want) - shoal_large_usable(head),
                              memory_order_relaxed);
    head->order = (uint8_t)want;
    return shoal_slot_addr(sp, slot);
}

void shoal_large_stats(shoal_large_stats_t *st)
{
    st->requests = atomic_load_explicit(&requests, memory_order_relaxed);
    st->live = atomic_load_explicit(&live, memory_order_relaxed);
    st->live_bytes = atomic_load_explicit(&live_bytes, memory_order_relaxed);
}
