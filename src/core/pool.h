/* pool.h - the global, lock-free buddy pool of superpages.
 *
 * Each superpage has one 64-bit occupancy word, bit i for slot i.  A block
 * of order k is 2^k slots starting at a multiple of 2^k.  Claiming a block
 * is one CAS that sets its run of bits; releasing is one atomic AND that
 * clears them.  There is no free list and no split or merge step: the
 * bits are the buddy tree, so two free buddies are a free parent as soon
 * as the second is released (coalescing is implicit), and a claimed block
 * may be released slot by slot.  Values never repeat in a way that
 * matters (the CAS compares the whole word), so there is no ABA.
 *
 * A second word, `dirty`, marks slots that may hold data: set when a
 * block is claimed, cleared when the purger has given the slot back to
 * the OS.  A block all of whose slots are clean reads as zero.
 */
#ifndef SHOAL_POOL_H
#define SHOAL_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "page.h"

/* The header of a superpage, in its slot 0, at the superpage's color
 * (below).  A shoal_superpage_t pointer is the header's address, not the
 * superpage's: shoal_slot_addr masks it down.
 *
 * The header is the 64 slot descriptors and nothing more, so that it is
 * 8 KiB and eight colors fit in slot 0.  The superpage's own words live
 * in the second line of descriptor 0, the descriptor of the header's
 * slot, which no page ever uses: what reads descriptor 0 - free and
 * shoal_classify given a pointer into slot 0 - reads its first line
 * only (kind SHOAL_SLOT_META, start limit 0, so that such a pointer is
 * refused), and every walk over a superpage's descriptors starts at
 * slot 1. */
typedef struct shoal_superpage_s {
    union {
        /* First, so that a descriptor's address is the header's with the
         * slot's number in the bits above SHOAL_DESC_SHIFT
         * (shoal_slot_desc). */
        shoal_page_t pages[SHOAL_SP_SLOTS];
        struct {
            char slot0_first_line[SHOAL_CACHE_LINE];
            _Atomic uint64_t occupied;          /* bit i: slot i claimed */
            _Atomic uint64_t dirty;             /* bit i: slot i may be resident */
            _Atomic uint64_t purge_mark;        /* free dirty slots seen last pass */
            uint32_t index;                     /* position in the registry */
        };
    };
} shoal_superpage_t;

_Static_assert(offsetof(shoal_superpage_t, index) + sizeof(uint32_t) <= sizeof(shoal_page_t),
               "the superpage's words fit in descriptor 0's second line");
_Static_assert(offsetof(shoal_page_t, free) == SHOAL_CACHE_LINE,
               "descriptor 0's first line, which free reads, is the descriptor's first");

/* A claimed block. */
typedef struct shoal_span_s {
    shoal_superpage_t *sp;
    unsigned slot;              /* first slot */
    unsigned order;
    bool zero;                  /* every byte reads as zero */
} shoal_span_t;

/* Claim a block of 2^order slots; grows the pool when no superpage has
 * room.  Takes memory that is resident already (dirty, free) before
 * clean memory.  false with errno ENOMEM when the OS or MAX_MEMORY
 * refuses. */
bool shoal_pool_claim(unsigned order, shoal_span_t *out);

/* Claim `count` slots in a row (1..SHOAL_SP_SLOTS - 1), wherever they lie
 * in a superpage (dirty ones first), as shoal_pool_claim does: out->order
 * says nothing. */
bool shoal_pool_claim_run(unsigned count, shoal_span_t *out);

/* Claim up to `max` single slots of one superpage in one CAS, wherever
 * they lie in it (dirty ones first); at least one unless it returns 0
 * with errno ENOMEM.  The pool grows only when no superpage has a free
 * slot. */
unsigned shoal_pool_claim_slots(unsigned max, shoal_span_t *out);

/* Release `count` slots from `slot` on (any run inside one claim: a
 * block, or the tail of one being shrunk). */
void shoal_pool_release(shoal_superpage_t *sp, unsigned slot, unsigned count);

/* The same for slots nobody has used for a purge delay already (the pages
 * of a heap parked that long): the next purge pass gives them back. */
void shoal_pool_release_idle(shoal_superpage_t *sp, unsigned slot, unsigned count);

/* Grow the block of `count` slots at `slot` to `new_count` slots in
 * place: possible when the slots after the block are free and in the
 * superpage.  One CAS. */
bool shoal_pool_grow(shoal_superpage_t *sp, unsigned slot, unsigned count, unsigned new_count);

/* Give back to the OS `size` bytes at `addr` inside an occupied slot,
 * which its page's holder no longer needs (a trim, page.h), lazily as
 * the purge mode says; counted with the bytes purged.  Returns them, or
 * 0 where the kernel refused. */
size_t shoal_pool_trim(void *addr, size_t size);

/* Purge free dirty slots: with `force` all of them now, otherwise those
 * that were already free at the previous pass.  Runs only if no other
 * purge is under way.  Returns the bytes purged, and adds to *waiting the
 * slots it left for the next pass. */
size_t shoal_pool_purge(bool force, size_t *waiting);

/* Superpage i of the registry, i < shoal_pool_count(). */
size_t shoal_pool_count(void);
shoal_superpage_t *shoal_pool_superpage(size_t i);

/* fork(): hold the pool's locks across it, release them on both sides;
 * in the child of a threaded process, also let go a purge pass another
 * thread had under way (only fork's handlers, with the locks taken). */
void shoal_pool_fork_prepare(void);
void shoal_pool_fork_release(void);
void shoal_pool_fork_child(void);

/* Pool figures for statistics. */
typedef struct shoal_pool_stats_s {
    size_t superpages;
    size_t slots_claimed, slots_claimed_peak;   /* headers (slot 0) excluded */
    size_t slots_dirty_free;    /* free but resident, waiting for the purger */
    uint64_t claims, releases, purged_bytes;
} shoal_pool_stats_t;
void shoal_pool_stats(shoal_pool_stats_t *st);

/* Colors.  Superpages are aligned to 4 MiB, so a header at the start of
 * each would put every superpage's descriptors in the same sets of every
 * cache whose sets repeat at a power of two up to 4 MiB (a 2 MiB 16-way
 * L2 repeats every 128 KiB): a large heap's descriptors, 8 KiB each 4
 * MiB, would compete for a few hundred lines while the rest of the cache
 * stood idle for them.  (Found on a cache of values overwritten at
 * random, bench/kv_cache: with 200 MiB live, the block-start test's load
 * of the descriptor missed the last level at four frees in five.)  So
 * the header lies at one of SHOAL_SP_COLORS places in slot 0, chosen by
 * the superpage's address bits just above the superpage shift (bits 22
 * to 24): 8 KiB apart, in consecutive superpages, eight of them filling
 * the slot.  Those bits come down next to the slot's in shoal_slot_desc,
 * which so stays two masks, a shift and an or. */
#define SHOAL_SP_COLORS 8
#define SHOAL_SP_HEADER_STEP (sizeof(shoal_page_t) * SHOAL_SP_SLOTS)   /* 8 KiB */
_Static_assert(SHOAL_SP_HEADER_STEP ==
                   (size_t)1 << (SHOAL_SP_SHIFT - (SHOAL_SLOT_SHIFT - SHOAL_DESC_SHIFT)),
               "a color's step is the descriptors' size, so its bits follow the slot's");
_Static_assert((SHOAL_SP_COLORS & (SHOAL_SP_COLORS - 1)) == 0,
               "the colors are address bits: a power of two of them");
_Static_assert(sizeof(shoal_superpage_t) == SHOAL_SP_HEADER_STEP &&
                   SHOAL_SP_COLORS * SHOAL_SP_HEADER_STEP <= SHOAL_SLOT_SIZE,
               "the header fits in slot 0 at every color");

/* The header of the superpage at `base` (4 MiB aligned). */
static inline shoal_superpage_t *shoal_superpage_at(void *base)
{
    uintptr_t color = ((uintptr_t)base >> SHOAL_SP_SHIFT) & (SHOAL_SP_COLORS - 1);
    return (shoal_superpage_t *)((char *)base + color * SHOAL_SP_HEADER_STEP);
}

static inline void *shoal_superpage_base(const shoal_superpage_t *sp)
{
    return (void *)((uintptr_t)sp & ~(uintptr_t)(SHOAL_SP_SIZE - 1));
}

static inline shoal_superpage_t *shoal_superpage_of(const void *p)
{
    return shoal_superpage_at(
        (void *)((uintptr_t)p & ~(uintptr_t)(SHOAL_SP_SIZE - 1)));
}

static inline void *shoal_slot_addr(const shoal_superpage_t *sp, unsigned slot)
{
    return (char *)shoal_superpage_base(sp) + ((size_t)slot << SHOAL_SLOT_SHIFT);
}

static inline shoal_page_t *shoal_span_head(const shoal_span_t *s)
{
    return &s->sp->pages[s->slot];
}

/* The descriptor of the slot holding p (p inside a pool superpage). */
static inline shoal_page_t *shoal_slot_desc(const void *p)
{
    /* &shoal_superpage_of(p)->pages[slot], spelt so the compiler makes
     * it two masks, a shift and an or: the slot's byte offset in pages[]
     * is its number times the descriptor size, which is the address bits
     * above the slot shift moved down by SHOAL_SLOT_SHIFT -
     * SHOAL_DESC_SHIFT; the same shift brings the color bits, just above
     * the superpage shift, to the header's offset in slot 0. */
    _Static_assert(offsetof(shoal_superpage_t, pages) == 0, "descriptors first");
    uintptr_t a = (uintptr_t)p;
    uintptr_t at = (a >> (SHOAL_SLOT_SHIFT - SHOAL_DESC_SHIFT)) &
                   ((SHOAL_SP_SLOTS * SHOAL_SP_COLORS - 1) << SHOAL_DESC_SHIFT);
    return (shoal_page_t *)((a & ~(SHOAL_SP_SIZE - 1)) | at);
}

/* The head descriptor of the span holding p (p inside a pool superpage):
 * a tail slot leads back to it. */
static inline shoal_page_t *shoal_span_of(const void *p)
{
    shoal_page_t *pg = shoal_slot_desc(p);
    return pg - pg->slot_offset;
}

#endif
