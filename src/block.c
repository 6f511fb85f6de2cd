/* block.c - what a pointer is (block.h), what is wrong with a bad one,
 * and the sizes: malloc_usable_size and free_sized's check. */
#include "block.h"

#include <errno.h>
#include <string.h>
#include "shoal.h"
#include "core/chunk_map.h"
#include "core/message.h"
#include "core/pool.h"
#include "thread/heap.h"

shoal_ptr_t shoal_classify(const void *p)
{
    shoal_ptr_t c = { SHOAL_PTR_BAD, NULL, NULL, false };
    enum shoal_chunk_kind k = shoal_chunk_of(p);
    if (k == SHOAL_CHUNK_SUPERPAGE) {
        shoal_page_t *pg = shoal_span_of(p);
        c.pg = pg;
        if (pg->kind == SHOAL_SLOT_PAGE && shoal_block_is_start(pg, p))
            c.kind = SHOAL_PTR_BLOCK;
        else if (shoal_slot_is_large(pg->kind) && p == pg->start) {
            c.kind = SHOAL_PTR_LARGE;
            c.sampled = pg->kind == SHOAL_SLOT_LARGE_SAMPLED;
        }
    } else if (shoal_chunk_base_kind(k) == SHOAL_CHUNK_HUGE ||
               shoal_chunk_base_kind(k) == SHOAL_CHUNK_HUGE_BEHIND) {
        c.huge = shoal_huge_of(p, k);
        if (c.huge != NULL) {
            c.kind = SHOAL_PTR_HUGE;
            c.sampled = (k & SHOAL_CHUNK_SAMPLED) != 0;
        }
    } else if (p == NULL) {
        c.kind = SHOAL_PTR_NULL;
    }
    return c;
}

/* Every call that reports a bad pointer frees the block, but
 * usable_size: of a freed block that is a use after free, not a second
 * free. */
static bool frees(const char *fn)
{
    return strcmp(fn, "usable_size") != 0;
}

/* A pointer into a page that is not a live block's start: say which. */
static void bad_block(const shoal_page_t *pg, const shoal_block_t *b, const char *fn)
{
    uintptr_t off = (uintptr_t)b - (uintptr_t)pg->start;
    const char *what = "pointer inside a block, not at its start (interior or misaligned)";
    if (off % pg->block_size == 0)
        what = off / pg->block_size >= atomic_load_explicit(&pg->capacity, memory_order_relaxed)
                   ? "pointer to a block that was never allocated"
               : frees(fn) ? "double free (the block is already free)"
                       : "pointer to a block that is already free (used after free)";
    shoal_fault(fn, b, what);
}

/* What a pointer into a pool superpage is when it is neither in a page
 * nor the start of a large block: inside a large block (its head may be
 * a few slots before p's), or in slots nobody holds. */
static void bad_pool_pointer(const void *p, const char *fn)
{
    shoal_superpage_t *sp = shoal_superpage_of(p);
    unsigned slot = (unsigned)(((uintptr_t)p >> SHOAL_SLOT_SHIFT) & (SHOAL_SP_SLOTS - 1));
    const char *what = slot == 0   ? "pointer to memory that is not allocated (shoal's own "
                                     "metadata)"
                       : frees(fn) ? "pointer to memory that is not allocated: freed "
                                     "already (a double free) or never handed out"
                                   : "pointer to memory that is not allocated: freed "
                                     "already (used after free) or never handed out";
    /* The nearest large block's head at or below p's slot, if it holds
     * p's slot (a large block holds at most SHOAL_LARGE_SLOTS). */
    for (unsigned h = slot; h != 0 && slot - h < SHOAL_LARGE_SLOTS; h--) {
        const shoal_page_t *head = &sp->pages[h];
        if (shoal_slot_is_large(head->kind)) {
            if (h + shoal_large_held(head) > slot)
                what = "pointer inside a large block, not its start";
            break;
        }
    }
    shoal_fault(fn, p, what);
}

/* What a pointer outside the pool that starts no live huge block is:
 * inside a live huge block, in the mapping of a freed one that shoal
 * still holds (the shared cache, or a thread's slot), or not shoal's. */
static const char *bad_outside_pool(const void *p, const char *fn)
{
    if (shoal_huge_containing(p) != NULL)
        return "pointer inside a huge block, not its start";
    enum shoal_huge_freed place = shoal_huge_was_freed(p);
    if (place == SHOAL_HUGE_NOT_FREED)
        place = shoal_heap_huge_slots_hold(p);
    switch (place) {
    case SHOAL_HUGE_FREED_START:
        return frees(fn) ? "double free (the huge block is already free)"
                         : "pointer to a huge block that is already free (used after free)";
    case SHOAL_HUGE_FREED_INSIDE:
        return "pointer inside a huge block that is already free";
    case SHOAL_HUGE_NOT_FREED:
        break;
    }
    return "pointer not allocated by shoal";
}

__attribute__((noinline, cold)) void shoal_ptr_fault(const void *p, const shoal_ptr_t *c,
                                                     const char *fn)
{
    if (c->pg != NULL && c->pg->kind == SHOAL_SLOT_PAGE) {
        bad_block(c->pg, p, fn);
    } else if (c->pg != NULL) {
        bad_pool_pointer(p, fn);
    } else {
        shoal_fault(fn, p, bad_outside_pool(p, fn));
    }
}

size_t shoal_usable(const void *p, const shoal_ptr_t *c, const char *fn)
{
    switch (c->kind) {
    case SHOAL_PTR_BLOCK:
        if (shoal_block_is_live(c->pg, p))
            return c->pg->block_size;
        break;
    case SHOAL_PTR_LARGE:
        return shoal_large_usable(c->pg);
    case SHOAL_PTR_HUGE:
        return c->huge->usable;
    case SHOAL_PTR_NULL:
    case SHOAL_PTR_BAD:
        break;
    }
    shoal_ptr_fault(p, c, fn);
    return 0;
}

size_t shoal_usable_or_fault(const void *p, const char *fn)
{
    shoal_ptr_t c = shoal_classify(p);
    return shoal_usable(p, &c, fn);
}

size_t alloc_usable_size(const void *p)
{
    /* The common case without classifying p: Redis asks at every
     * zmalloc and zfree. */
    const shoal_page_t *pg = shoal_live_page_block(p);
    if (shoal_likely(pg != NULL))
        return pg->block_size;
    return p == NULL ? 0 : shoal_usable_or_fault(p, "usable_size");
}

bool shoal_size_matches(const shoal_huge_t *huge, size_t usable, size_t n, size_t align)
{
    unsigned c;
    bool natural = align <= SHOAL_ALIGN;
    if (n > usable)
        return false;
    switch (shoal_tier_of(n, align, &c)) {
    case SHOAL_TIER_PAGE:
        /* The class of the size, or a larger one that realloc kept when
         * it shrank the block in place (only a block of the natural
         * alignment is ever realloc'd). */
        return usable <= SHOAL_MEDIUM_MAX &&
               (shoal_class_size(c) == usable ||
                (natural && shoal_fits_without_waste(usable, n)));
    case SHOAL_TIER_LARGE:
        /* A block holds the slots it reaches, whatever its alignment,
         * and realloc resizes one in place to the slots its new size
         * reaches. */
        return (size_t)shoal_large_slots(n) << SHOAL_SLOT_SHIFT == usable;
    case SHOAL_TIER_HUGE:
        break;
    }
    return huge != NULL && shoal_huge_size_matches(huge, n);
}

__attribute__((noinline, cold)) void *shoal_too_big(void)
{
    errno = ENOMEM;
    return NULL;
}
