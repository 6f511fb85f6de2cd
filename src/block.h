/* block.h - what a pointer handed to free, realloc or usable_size is,
 * and which tier serves a request: one answer each, which malloc.c,
 * free.c and realloc.c share.  (free's fast path tests the one case it
 * handles itself - the start of a block in a page's first slot - and
 * asks here for everything else; realloc and usable_size test the same
 * case first, with shoal_live_page_block.)
 */
#ifndef SHOAL_BLOCK_H
#define SHOAL_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include "core/chunk_map.h"
#include "core/huge.h"
#include "core/large.h"
#include "core/options.h"
#include "core/pool.h"
#include "core/size_class.h"

/* The tier of a request of n bytes at alignment `align`, and in *cls its
 * class (PAGE) or order (LARGE).  With CACHELINE_ALIGN every request is
 * aligned to 64 bytes at least. */
enum shoal_tier { SHOAL_TIER_PAGE, SHOAL_TIER_LARGE, SHOAL_TIER_HUGE };

static inline enum shoal_tier shoal_tier_of(size_t n, size_t align, unsigned *cls)
{
    /* Below a cache line, CACHELINE_ALIGN rounds every request up to one
     * (the direct table's entries lead there: the fast paths agree). */
    if (align < SHOAL_CACHE_LINE && shoal_opt(ALLOC_OPTION_CACHELINE_ALIGN))
        align = SHOAL_CACHE_LINE;
    unsigned c = align <= SHOAL_ALIGN
                     ? (n <= SHOAL_MEDIUM_MAX ? shoal_size_to_class(n) : SHOAL_CLASSES)
                     : shoal_class_for_aligned(n, align);
    if (c < SHOAL_CLASSES) {
        *cls = c;
        return SHOAL_TIER_PAGE;
    }
    if (n <= SHOAL_LARGE_MAX && align <= SHOAL_LARGE_MAX) {
        *cls = shoal_large_order(n > align ? n : align);
        return SHOAL_TIER_LARGE;
    }
    return SHOAL_TIER_HUGE;
}

enum shoal_ptr_kind {
    SHOAL_PTR_NULL,
    SHOAL_PTR_BLOCK,            /* the start of a carved block of page pg (live or free) */
    SHOAL_PTR_LARGE,            /* the start of a large block, head pg */
    SHOAL_PTR_HUGE,             /* the start of a live huge block, header huge */
    SHOAL_PTR_BAD,              /* anything else: shoal_ptr_fault says what */
};

typedef struct shoal_ptr_s {
    enum shoal_ptr_kind kind;
    shoal_page_t *pg;
    shoal_huge_t *huge;
    bool sampled;               /* a large or huge block heap profiling sampled */
} shoal_ptr_t;

/* The page of p, if p is a live block at the start of its page's first
 * slot (free's tests: the chunk map, the block-start test, no freed
 * mark); NULL for anything else, which shoal_classify answers. */
static inline shoal_page_t *shoal_live_page_block(const void *p)
{
    if (shoal_chunk_of(p) != SHOAL_CHUNK_SUPERPAGE)
        return NULL;
    shoal_page_t *pg = shoal_slot_desc(p);
    if (!shoal_block_is_start_in_slot(pg, p) ||
        ((const shoal_block_t *)p)->freed == shoal_freed_mark(pg))
        return NULL;
    return pg;
}

/* What p is.  Reads the chunk map before any metadata, so a pointer
 * shoal never handed out is never dereferenced. */
shoal_ptr_t shoal_classify(const void *p);

/* Report p, which the call `fn` cannot take (not a block's start, freed
 * already, not shoal's): one line saying which. */
void shoal_ptr_fault(const void *p, const shoal_ptr_t *c, const char *fn);

/* The usable size of a live block, or 0 after reporting p if it is not
 * one; shoal_usable for a p already classified as c. */
size_t shoal_usable_or_fault(const void *p, const char *fn);
size_t shoal_usable(const void *p, const shoal_ptr_t *c, const char *fn);

/* Could a request of n bytes at this alignment have made a block of
 * `usable` bytes (free_sized's check)?  `huge` is the block's header
 * if it is a huge block (NULL otherwise): its mapping says. */
bool shoal_size_matches(const shoal_huge_t *huge, size_t usable, size_t n, size_t align);

/* NULL with errno ENOMEM: for a size no block can have. */
void *shoal_too_big(void);

#endif
