/* large.c - large blocks straight from the pool. */
#include "large.h"

#include <string.h>
#include "purge.h"

void shoal_large_release(shoal_superpage_t *sp, unsigned from, unsigned count)
{
    shoal_pool_release(sp, from, count);
    shoal_purge_note_free();
}

void *shoal_large_make(shoal_superpage_t *sp, unsigned slot, unsigned have, size_t n, bool zero,
                       bool known_zero)
{
    unsigned slots = shoal_large_slots(n);
    shoal_page_t *head = &sp->pages[slot];
    head->block_size = slots << SHOAL_SLOT_SHIFT;
    head->kind = SHOAL_SLOT_LARGE;
    void *p = shoal_slot_addr(sp, slot);
    head->start = p;
    if (have > slots)
        shoal_large_release(sp, slot + slots, have - slots);
    if (zero && !known_zero)
        memset(p, 0, n);
    return p;
}

void *shoal_large_resize(shoal_page_t *head, size_t n)
{
    shoal_superpage_t *sp = shoal_superpage_of(head);
    unsigned slot = (unsigned)(head - sp->pages);
    unsigned have = shoal_large_held(head), want = shoal_large_slots(n);
    if (want > have && !shoal_pool_grow(sp, slot, have, want))
        return NULL;
    if (want < have)
        shoal_large_release(sp, slot + want, have - want);
    head->block_size = want << SHOAL_SLOT_SHIFT;
    return shoal_slot_addr(sp, slot);
}
