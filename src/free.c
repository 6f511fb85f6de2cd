/* free.c - free, free_sized and free_aligned_sized.
 *
 * free's fast path: one byte from the chunk map says the pointer is in a
 * pool superpage; mask to the superpage, index the slot descriptor, test
 * that the pointer starts a block of that slot's page and is not marked
 * free, and if this thread owns the page (and it is not full: one
 * compare of the owner word) push onto the page's free list, where the
 * next malloc of the class takes it (core/page.h).  A
 * block of another heap waits in this thread's outbox (no atomic
 * operation; see thread/remote.h).  Large blocks go to the heap's
 * stack of their order, huge ones to its huge slot; anything else is
 * block.c's to classify.
 */
#include "shoal.h"

#include "block.h"
#include "override.h"
#include "profile.h"
#include "core/chunk_map.h"
#include "core/message.h"
#include "thread/heap.h"
#include "thread/large_cache.h"

/* The owner's free emptied a page behind its queue's head. */
static __attribute__((noinline)) void free_page_event(shoal_heap_t *h, shoal_page_t *pg)
{
    shoal_heap_page_freed(h, pg);
    shoal_purger_slow_path();
}

/* b, a block of pg, is free already: its freed mark, or a trim took it
 * off the lists (core/page.c). */
static __attribute__((noinline, cold)) void double_free(shoal_page_t *pg, shoal_block_t *b)
{
    shoal_ptr_t c = { SHOAL_PTR_BLOCK, pg, NULL, false };
    shoal_ptr_fault(b, &c, "free");
}

/* Free b, which passed the block-start test of its page pg. */
static inline __attribute__((always_inline)) void page_free(shoal_page_t *pg, shoal_block_t *b)
{
    /* Read before the stores to b, which may alias pg as far as the
     * compiler knows. */
    uintptr_t key = pg->key, mark = shoal_freed_mark(pg);
    if (shoal_unlikely(b->freed == mark)) {
        double_free(pg, b);
        return;
    }
    b->freed = mark;
    shoal_heap_t *h = shoal_tl_heap;
    /* Only this thread moves a page away from its own heap, so seeing our
     * heap here is a stable answer.  Acquire (a plain load on x86-64):
     * another heap found here was set up before its thread adopted the
     * page (take_orphan's release), and the remote path reads it.  One
     * of our full pages fails the test too (page.h). */
    uintptr_t owner = shoal_page_owner(pg);
    if (shoal_likely(owner == (uintptr_t)h)) {
        if (shoal_unlikely(!shoal_page_push(pg, b, key))) {
            double_free(pg, b);     /* a trimmed block */
            return;
        }
        shoal_count(&h->stats.frees[pg->size_class], 1);
        /* An empty page at the head of its queue stays: the next malloc
         * of its class takes from it. */
        if (shoal_unlikely(--pg->used == 0) && h->pages[pg->size_class] != pg)
            free_page_event(h, pg);
        return;
    }
    shoal_heap_remote_free(pg, b, h, owner);
}

/* A huge block the thread's slot refused: to the shared cache. */
static __attribute__((noinline)) void huge_free_shared(shoal_huge_t *h)
{
    shoal_huge_free(h);
    shoal_purger_slow_path();
}

/* A huge block goes into this thread's huge slot, the mapping there
 * before it to the shared cache, or (the slot refuses) to the cache.
 * Both ends are tail calls: no frame. */
static void huge_free(shoal_huge_t *h)
{
    if (!shoal_huge_slot_put(&shoal_heap_of_thread()->huge_slot, h)) {
        huge_free_shared(h);
        return;
    }
    shoal_purger_start();               /* a load when it runs: it will come for it */
}

/* The rest of free: large and huge blocks the thread's caches have no
 * room for or that heap profiling sampled, NULL and bad pointers, all
 * told apart by shoal_classify (whose answer for a page's block, which
 * the tests before this one take, is handled the same way here). */
static __attribute__((noinline, cold)) void free_rare(void *p)
{
    shoal_ptr_t c = shoal_classify(p);
    if (c.sampled)
        shoal_prof_unsample(p, &c);
    switch (c.kind) {
    case SHOAL_PTR_NULL:
        return;
    case SHOAL_PTR_BLOCK:
        page_free(c.pg, p);
        return;
    case SHOAL_PTR_LARGE:
        shoal_heap_large_free(c.pg);
        return;
    case SHOAL_PTR_HUGE:
        huge_free(c.huge);
        return;
    case SHOAL_PTR_BAD:
        break;
    }
    shoal_ptr_fault(p, &c, "free");
}

/* A pointer in a chunk where a huge block starts: that block, or rare. */
static __attribute__((noinline)) void free_huge(void *p, enum shoal_chunk_kind k)
{
    shoal_huge_t *h = shoal_huge_of(p, k);
    if (h != NULL) {
        huge_free(h);
        return;
    }
    free_rare(p);
}

/* What the block-start test sends on, in a superpage: a large block
 * goes to this thread's cache with a push, a block in a later slot of a
 * multi-slot page (8-64 KiB blocks: three in four of a 256 KiB page's)
 * to its page; everything else is rare.  `slot` is p's slot descriptor,
 * which free has computed.  A large block starts at its head slot, so
 * `slot` is its head.  Any other slot leads by its slot_offset to the
 * head of a page, or of a span that is no page: only a live page's head
 * has a nonzero start limit, and its block-start test holds only for a
 * block of that page, so a stale offset (a slot freed, or taken by a
 * large block) sends nothing astray. */
static __attribute__((noinline)) void free_in_superpage(void *p, shoal_page_t *slot)
{
    if (slot->kind == SHOAL_SLOT_LARGE) {
        if (p == slot->start && shoal_large_cache_push(shoal_tl_heap, slot))
            return;
    } else {
        shoal_page_t *pg = slot - slot->slot_offset;
        if (shoal_block_is_start(pg, p)) {
            page_free(pg, p);
            return;
        }
    }
    free_rare(p);
}

/* A pointer outside the superpages: a huge block goes into its huge
 * slot, free(NULL) returns (C code calls it often: a parser's tree freed
 * node by node, half of whose nodes have no key, made a free in nine go
 * to shoal_classify); everything else is rare.  (Every call in these
 * two is a tail call: no frame.) */
static __attribute__((noinline)) void free_elsewhere(void *p, enum shoal_chunk_kind k)
{
    if (k == SHOAL_CHUNK_HUGE) {
        free_huge(p, k);
        return;
    }
    if (p == NULL)
        return;
    free_rare(p);
}

void alloc_free(void *p)
{
    enum shoal_chunk_kind k = shoal_chunk_of(p);
    if (shoal_likely(k == SHOAL_CHUNK_SUPERPAGE)) {
        /* The slot's own descriptor: only a page's head has a nonzero
         * start limit, so one test says both "a page's head slot" and "a
         * carved block's start".  Blocks in later slots of multi-slot
         * pages (above 8 KiB) and large blocks go on, with it. */
        shoal_page_t *pg = shoal_slot_desc(p);
        if (shoal_likely(shoal_block_is_start_in_slot(pg, p))) {
            page_free(pg, p);
            return;
        }
        free_in_superpage(p, pg);
        return;
    }
    free_elsewhere(p, k);
}
SHOAL_ALSO_NAMED(free, alloc_free)
SHOAL_ALSO_NAMED(cfree, alloc_free)
SHOAL_ALSO_NAMED(__libc_free, alloc_free)

static void free_checked(void *p, size_t n, size_t align, const char *fn)
{
    if (p == NULL)
        return;
    shoal_ptr_t c = shoal_classify(p);
    size_t usable = shoal_usable(p, &c, fn);
    if (usable == 0)
        return;
    if (!shoal_is_pow2(align) || !shoal_size_matches(c.huge, usable, n, align)) {
        shoal_fault(fn, p, "size does not match the block");
        return;
    }
    alloc_free(p);
}

void alloc_free_sized(void *p, size_t n)
{
    free_checked(p, n, SHOAL_ALIGN, "free_sized");
}
SHOAL_ALSO_NAMED(free_sized, alloc_free_sized)

void alloc_free_aligned_sized(void *p, size_t align, size_t n)
{
    free_checked(p, n, align, "free_aligned_sized");
}
SHOAL_ALSO_NAMED(free_aligned_sized, alloc_free_aligned_sized)

