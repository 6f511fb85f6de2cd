/* large.h - blocks above SHOAL_MEDIUM_MAX up to SHOAL_LARGE_MAX: one pool
 * block each, of the smallest order that holds them.  The block's head
 * slot descriptor says LARGE and its order; nothing is written into the
 * block itself.  A block is aligned to its own size, so alignments up to
 * 2 MiB cost nothing.  Only the bytes a program touches become resident,
 * so rounding up to a power of two costs address space, not RSS. */
#ifndef SHOAL_LARGE_H
#define SHOAL_LARGE_H

#include "pool.h"

void *shoal_large_alloc(size_t size, size_t align, bool zero);
void shoal_large_free(shoal_page_t *head);

/* Resize in place: shrink by releasing the upper slots, grow by claiming
 * the free slots after the block.  NULL if it cannot be done in place. */
void *shoal_large_resize(shoal_page_t *head, size_t size);

typedef struct shoal_large_stats_s {
    uint64_t requests;
    size_t live, live_bytes;    /* usable bytes */
} shoal_large_stats_t;
void shoal_large_stats(shoal_large_stats_t *st);

static inline size_t shoal_large_usable(const shoal_page_t *head)
{
    return SHOAL_SLOT_SIZE << head->order;
}

#endif
