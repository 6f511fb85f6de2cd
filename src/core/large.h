/* large.h - blocks above SHOAL_MEDIUM_MAX up to SHOAL_LARGE_MAX: one pool
 * block each, of the smallest order that holds them.  The block's head
 * slot descriptor says LARGE, its order and where the block starts;
 * nothing is written into the block itself.  A block is aligned to its own size, so alignments up to
 * 2 MiB cost nothing.  Only the bytes a program touches become resident,
 * so rounding up to a power of two costs address space, not RSS.
 *
 * This file turns claimed spans into large blocks and back; which span to
 * use (a heap's cache of recently freed ones, or the pool) and the
 * counting are the heap's business (src/thread/heap.c). */
#ifndef SHOAL_LARGE_H
#define SHOAL_LARGE_H

#include "pool.h"

/* The order of the block for n bytes (n <= SHOAL_LARGE_MAX). */
static inline unsigned shoal_large_order(size_t n)
{
    return n <= SHOAL_SLOT_SIZE ? 0
                                : 64u - (unsigned)__builtin_clzl(n - 1) - SHOAL_SLOT_SHIFT;
}

static inline size_t shoal_large_usable(const shoal_page_t *head)
{
    return SHOAL_SLOT_SIZE << head->order;
}

/* Make the claimed span s a large block holding n bytes (zeroed if asked
 * and not known to be zero). */
void *shoal_large_make(const shoal_span_t *s, size_t n, bool zero);

/* A freed large block's head goes back to being a plain claimed span. */
static inline void shoal_large_unmake(shoal_page_t *head)
{
    head->kind = SHOAL_SLOT_FREE;
}

/* Heap profiling sampled the live block, or forgets it before its free:
 * free's fast path takes only SHOAL_SLOT_LARGE (the block's holder). */
static inline void shoal_large_mark_sampled(shoal_page_t *head, bool sampled)
{
    head->kind = sampled ? SHOAL_SLOT_LARGE_SAMPLED : SHOAL_SLOT_LARGE;
}

/* Resize in place: shrink by releasing the upper slots, grow by claiming
 * the free slots after the block.  NULL if it cannot be done in place. */
void *shoal_large_resize(shoal_page_t *head, size_t size);

#endif
