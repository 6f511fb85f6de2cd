/* large.c - large blocks straight from the pool. */
#include "large.h"

#include <string.h>

void *shoal_large_make(const shoal_span_t *s, size_t n, bool zero)
{
    shoal_page_t *head = shoal_span_head(s);
    head->order = (uint8_t)s->order;
    head->kind = SHOAL_SLOT_LARGE;
    void *p = shoal_slot_addr(s->sp, s->slot);
    head->start = p;
    if (zero && !s->zero)
        memset(p, 0, n);
    return p;
}

void *shoal_large_resize(shoal_page_t *head, size_t n)
{
    shoal_superpage_t *sp = shoal_superpage_of(head);
    unsigned slot = (unsigned)(head - sp->pages);
    unsigned order = head->order, want = shoal_large_order(n);
    if (want > order && !shoal_pool_grow(sp, slot, order, want))
        return NULL;
    if (want < order)
        shoal_pool_release(sp, slot + (1u << want), (1u << order) - (1u << want));
    head->order = (uint8_t)want;
    return shoal_slot_addr(sp, slot);
}
