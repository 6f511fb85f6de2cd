/* large.h - blocks above SHOAL_MEDIUM_MAX up to SHOAL_LARGE_MAX: the
 * slots they reach, at any run of free slots (a block of the natural
 * alignment) or at the start of a pool block of the power of two that
 * holds its alignment (up to 2 MiB, so alignments cost nothing), whose
 * other slots go back to the pool at once.  The block's head slot
 * descriptor says LARGE, its size in bytes (a whole number of slots:
 * block_size) and where it starts; nothing is written into the block
 * itself.  Holding only its own slots, a block that reuses slots a
 * larger one wrote keeps none of them resident past its end: what the
 * last one wrote there is free in the pool, for any claim, and purged
 * after the delay like any free slot.
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

/* The slots a large block of n bytes holds (at least one). */
static inline unsigned shoal_large_slots(size_t n)
{
    return n <= SHOAL_SLOT_SIZE ? 1 : (unsigned)((n + SHOAL_SLOT_SIZE - 1) >> SHOAL_SLOT_SHIFT);
}

/* The slots the large block whose head is `head` holds. */
static inline unsigned shoal_large_held(const shoal_page_t *head)
{
    return head->block_size >> SHOAL_SLOT_SHIFT;
}

static inline size_t shoal_large_usable(const shoal_page_t *head)
{
    return head->block_size;
}

/* Give slots [from, from + count) of sp back to the pool: dirty, so the
 * purge clock is told, or with PURGE_DELAY_MS 0 they would wait for the
 * next free of another kind to be purged.  Every release of a large
 * block's slots goes this way. */
void shoal_large_release(shoal_superpage_t *sp, unsigned from, unsigned count);

/* Make `have` claimed slots from slot `slot` of sp a large block holding
 * n bytes: the slots past the block's go back to the pool; zeroed if
 * asked and not `known_zero`. */
void *shoal_large_make(shoal_superpage_t *sp, unsigned slot, unsigned have, size_t n, bool zero,
                       bool known_zero);

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
 * the free slots after the block (within its superpage).  NULL if it
 * cannot be done in place. */
void *shoal_large_resize(shoal_page_t *head, size_t size);

#endif
