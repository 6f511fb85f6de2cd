/* alloc.c - the alloc_* entry points: fast paths here, everything else
 * one call down.
 *
 * malloc fast path: TLS heap -> the class's current page -> pop its free
 * list.  No atomics, no locks, no NULL test (an empty queue holds a static
 * empty page whose free list is NULL).
 * free fast path: one byte from the chunk map says the pointer is in a
 * pool superpage; mask to the superpage, index the slot descriptor, and
 * if this thread owns the page push onto its local list.  A block of
 * another heap waits in this thread's outbox (no atomic operation; see
 * thread/remote.h).
 */
#include "shoal.h"

#include <errno.h>
#include <string.h>
#include "core/chunk_map.h"
#include "core/huge.h"
#include "core/purge.h"
#include "core/message.h"
#include "core/options.h"
#include "stats.h"
#include "thread/heap.h"
#include "thread/large_cache.h"

static void *alloc_generic(size_t n, size_t align, bool zero);

/* The head of a free list is not a free block of its page
 * (shoal_block_is_free): a link was overwritten.  Say so, naming the page
 * (what a wrong link decodes to says nothing); with
 * ON_ERROR=warn, take the page's lists out of service (their blocks are
 * lost to it: it keeps them counted as in use) and serve the call,
 * zeroed, from elsewhere. */
static __attribute__((noinline, cold)) void *broken_free_list(shoal_page_t *pg)
{
    shoal_fault("malloc", pg->start, "free list corrupted in the page at this address: a "
                                     "free block's link or freed mark was overwritten (an "
                                     "overflow of the block before it, or a write after free)");
    pg->free = pg->local_free = NULL;
    return alloc_generic(pg->block_size, SHOAL_ALIGN, true);
}

/* Hand out b, the head of pg's free list, which passed shoal_block_is_free. */
static inline void *page_take(shoal_heap_t *h, shoal_page_t *pg, shoal_block_t *b)
{
    pg->free = shoal_decode(pg, b->link);
    b->freed = 0;               /* no longer free: a free of it is not a double free */
    pg->used++;
    shoal_count(&h->stats.allocs[pg->size_class], 1);
    return b;
}

static inline void *page_pop(shoal_heap_t *h, shoal_page_t *pg, shoal_block_t *b)
{
    if (shoal_unlikely(!shoal_block_is_free(pg, b)))
        return broken_free_list(pg);
    return page_take(h, pg, b);
}

/* A zero block of n bytes from fresh memory, whose first bytes the carve
 * wrote: write a zero into each further OS page it reaches.  A program
 * that reads its calloc'd block before it writes it would otherwise
 * fault twice on each of them (the kernel's zero page, then a copy on
 * write); this costs one fault each, as the memset that other
 * allocators do would, and nothing where the block is used anyway. */
static void touch_pages(shoal_block_t *b, size_t n)
{
    char *end = (char *)b + n;
    for (char *q = (char *)shoal_align_up((uintptr_t)b + 1, SHOAL_OS_PAGE); q < end;
         q += SHOAL_OS_PAGE)
        *q = 0;
}

/* Pop from a page that has a free block, zeroing n bytes, or only the
 * link where the page's free blocks read as zero (fresh memory: the link
 * and the mark were the only writes, and page_take clears the mark).
 * Every call out is a tail call, so the fast path needs no frame. */
static inline void *page_pop_zero(shoal_heap_t *h, shoal_page_t *pg, size_t n)
{
    shoal_block_t *b = pg->free;
    if (shoal_unlikely(!shoal_block_is_free(pg, b)))
        return broken_free_list(pg);            /* zeroed */
    bool zero = pg->free_is_zero;
    page_take(h, pg, b);
    if (!zero)
        return memset(b, 0, n);
    b->link = 0;
    if (shoal_unlikely(n > SHOAL_OS_PAGE / 2))
        touch_pages(b, n);
    return b;
}

/* A size no block can have: ENOMEM. */
static __attribute__((noinline, cold)) void *too_big(void)
{
    errno = ENOMEM;
    return NULL;
}

/* The page a request of n bytes (0 < n <= SHOAL_MEDIUM_MAX, or 0 through
 * the direct table) pops from: the heap's direct entry up to 1 KiB, its
 * class's queue head above. */
static inline shoal_page_t *page_for(shoal_heap_t *h, size_t n)
{
    if (shoal_likely(n <= SHOAL_DIRECT_MAX))
        return h->direct[shoal_direct_index(n)];
    return h->pages[shoal_size_to_class_nz(n)];
}

static void *alloc_tier(size_t n, size_t align, bool zero)
{
    if (align <= SHOAL_ALIGN && shoal_opt(ALLOC_OPTION_CACHELINE_ALIGN))
        align = SHOAL_CACHE_LINE;
    unsigned cls = align <= SHOAL_ALIGN
                       ? (n <= SHOAL_MEDIUM_MAX ? shoal_size_to_class(n) : SHOAL_CLASSES)
                       : shoal_class_for_aligned(n, align);
    if (cls < SHOAL_CLASSES) {
        shoal_page_t *pg = shoal_heap_find_page(cls);
        if (pg == NULL)
            return NULL;
        shoal_heap_t *h = shoal_tl_heap;        /* made by find_page on first use */
        return zero ? page_pop_zero(h, pg, n) : page_pop(h, pg, pg->free);
    }
    if (n <= SHOAL_LARGE_MAX && align <= SHOAL_LARGE_MAX)
        return shoal_heap_large_alloc(n, align, zero);
    void *p = align <= SHOAL_ALIGN
                  ? shoal_huge_slot_take(&shoal_heap_of_thread()->huge_slot, n, zero)
                  : NULL;
    if (p != NULL)
        return p;
    p = shoal_huge_alloc(n, align, zero);
    shoal_stats_tick();         /* allocated jumps: sample the peaks */
    return p;
}

/* Everything that is not a fast path: first use, empty page, aligned,
 * large and huge requests, the size check, and the purger's start.
 * With CACHELINE_ALIGN set, pages of classes that are not multiples of
 * 64 bytes are never made, so such requests always come here. */
static __attribute__((noinline, cold)) void *alloc_generic(size_t n, size_t align, bool zero)
{
    if (shoal_unlikely(n > SHOAL_MAX_REQUEST))
        return too_big();
    shoal_process_init();               /* options before the first block */
    void *p = alloc_tier(n, align, zero);
    if (shoal_unlikely(p == NULL)) {
        /* At a limit (MAX_MEMORY, or the kernel's), free memory that
         * this thread's caches, the pool or the huge cache hold may be
         * what is in the way: give it all back to the OS and try once
         * more.  The retry is unconditional: another thread may have
         * purged a moment ago, and its room is ours to find (see
         * huge.c). */
        shoal_heap_drain_caches();
        shoal_purge_now(true);
        p = alloc_tier(n, align, zero);
    }
    shoal_heap_end_call();
    shoal_purger_start();
    return p;
}

/* malloc above 2 MiB: this thread's huge slot, or the slow way (a tail
 * call from malloc, which so keeps no frame). */
static __attribute__((noinline)) void *alloc_huge(shoal_heap_t *h, size_t n)
{
    void *p = shoal_huge_slot_take(&h->huge_slot, n, false);
    return p != NULL ? p : alloc_generic(n, SHOAL_ALIGN, false);
}

void *alloc_malloc(size_t n)
{
    shoal_heap_t *h = shoal_tl_heap;
    shoal_page_t *pg;
    if (shoal_likely(n <= SHOAL_DIRECT_MAX)) {
        pg = h->direct[shoal_direct_index(n)];
    } else if (n <= SHOAL_MEDIUM_MAX) {
        pg = h->pages[shoal_size_to_class_nz(n)];
    } else if (n <= SHOAL_LARGE_MAX) {
        void *p = shoal_large_cache_pop(h, n);
        return p != NULL ? p : alloc_generic(n, SHOAL_ALIGN, false);
    } else {
        return alloc_huge(h, n);
    }
    shoal_block_t *b = pg->free;
    if (shoal_likely(b != NULL))
        return page_pop(h, pg, b);
    if (pg->local_free != NULL)         /* ran dry: refill from this thread's frees */
        return page_pop(h, pg, shoal_page_take_local(pg));
    return alloc_generic(n, SHOAL_ALIGN, false);
}

void *alloc_calloc(size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n))
        return too_big();
    if (shoal_likely(n <= SHOAL_MEDIUM_MAX)) {
        shoal_heap_t *h = shoal_tl_heap;
        shoal_page_t *pg = page_for(h, n);
        if (shoal_likely(pg->free != NULL) ||
            (pg->local_free != NULL && shoal_page_take_local(pg) != NULL))
            return page_pop_zero(h, pg, n);
    }
    return alloc_generic(n, SHOAL_ALIGN, true);
}

void *alloc_aligned(size_t align, size_t n)
{
    if (shoal_unlikely(!shoal_is_pow2(align))) {
        errno = EINVAL;
        return NULL;
    }
    return align <= SHOAL_ALIGN ? alloc_malloc(n) : alloc_generic(n, align, false);
}

/* ---- free ------------------------------------------------------------- */

/* A pointer into a page that is not a live block's start: say which. */
static __attribute__((noinline, cold)) void bad_block(const shoal_page_t *pg,
                                                      const shoal_block_t *b, const char *fn)
{
    uintptr_t off = (uintptr_t)b - (uintptr_t)pg->start;
    const char *what = "pointer inside a block, not at its start (interior or misaligned)";
    /* Every call that gets here frees the block, but usable_size: of a
     * freed block that is a use after free, not a second free. */
    bool frees = strcmp(fn, "usable_size") != 0;
    if (off % pg->block_size == 0)
        what = off / pg->block_size >= atomic_load_explicit(&pg->capacity, memory_order_relaxed)
                   ? "pointer to a block that was never allocated"
               : frees ? "double free (the block is already free)"
                       : "pointer to a block that is already free (used after free)";
    shoal_fault(fn, b, what);
}

/* What a pointer into a pool superpage is when it is neither in a page
 * nor the start of a large block: inside a large block (its head may be
 * a few slots before p's), or in slots nobody holds. */
static __attribute__((noinline, cold)) void bad_pool_pointer(const void *p, const char *fn)
{
    shoal_superpage_t *sp = shoal_superpage_of(p);
    unsigned slot = (unsigned)(((uintptr_t)p - (uintptr_t)sp) >> SHOAL_SLOT_SHIFT);
    const char *what = slot == 0 ? "pointer to memory that is not allocated (shoal's own "
                                   "metadata)"
                                 : "pointer to memory that is not allocated: freed "
                                   "already (a double free) or never handed out";
    /* A large block of order k starts at a multiple of 2^k slots. */
    for (unsigned k = 0; slot != 0 && k <= SHOAL_MAX_ORDER; k++) {
        const shoal_page_t *head = &sp->pages[slot & ~((1u << k) - 1)];
        if (head->kind == SHOAL_SLOT_LARGE && head->order >= k &&
            (unsigned)(head - sp->pages) + (1u << head->order) > slot) {
            what = "pointer inside a large block, not its start";
            break;
        }
    }
    shoal_fault(fn, p, what);
}

/* The owner's free emptied a page behind its queue's head. */
static __attribute__((noinline)) void free_page_event(shoal_heap_t *h, shoal_page_t *pg)
{
    shoal_heap_page_freed(h, pg);
    shoal_purger_start();
}

/* Free b, which passed the block-start test of its page pg. */
static inline void page_free(shoal_page_t *pg, shoal_block_t *b)
{
    /* Read before the stores to b, which may alias pg as far as the
     * compiler knows (mark and key are one load: the mark is the key). */
    uintptr_t key = pg->key, mark = shoal_freed_mark(pg);
    if (shoal_unlikely(b->freed == mark)) {
        bad_block(pg, b, "free");
        return;
    }
    b->freed = mark;
    shoal_heap_t *h = shoal_tl_heap;
    /* Only this thread moves a page away from its own heap, so seeing our
     * heap here is a stable answer.  Acquire (a plain load on x86-64):
     * another heap found here was set up before its thread adopted the
     * page (take_orphan's release), and the remote path reads it.  One
     * of our pages on the full list fails the test too (page.h). */
    uintptr_t owner = shoal_page_owner(pg);
    if (shoal_likely(owner == (uintptr_t)h)) {
        b->link = shoal_encode_key(key, pg->local_free);
        pg->local_free = b;
        shoal_count(&h->stats.frees[pg->size_class], 1);
        /* An empty page at the head of its queue stays: the next malloc
         * of its class takes from it. */
        if (shoal_unlikely(--pg->used == 0) && h->pages[pg->size_class] != pg)
            free_page_event(h, pg);
        return;
    }
    shoal_heap_remote_free(pg, b, h, owner);
}

/* The rest of free: blocks in a later slot of a multi-slot page, large
 * and huge blocks the thread's caches have no room for, NULL and bad
 * pointers. */
static __attribute__((noinline, cold)) void free_rare(void *p, enum shoal_chunk_kind k)
{
    if (k == SHOAL_CHUNK_SUPERPAGE) {
        shoal_page_t *pg = shoal_span_of(p);
        if (pg->kind == SHOAL_SLOT_LARGE && p == pg->start) {
            shoal_heap_large_free(pg);
            return;
        }
        if (pg->kind == SHOAL_SLOT_PAGE) {
            if (shoal_block_is_start(pg, p))
                page_free(pg, p);
            else
                bad_block(pg, p, "free");
            return;
        }
        bad_pool_pointer(p, "free");
        return;
    }
    if (p == NULL)
        return;
    if (k == SHOAL_CHUNK_HUGE || k == SHOAL_CHUNK_HUGE_BEHIND) {
        shoal_huge_t *h = shoal_huge_of(p, k);
        if (h != NULL) {
            if (!shoal_huge_slot_put(&shoal_heap_of_thread()->huge_slot, h))
                shoal_huge_free(h);
            shoal_purger_start();
            return;
        }
    }
    bool freed = shoal_huge_was_freed(p) || shoal_huge_slot_holds(&shoal_tl_heap->huge_slot, p);
    shoal_fault("free", p, freed ? "double free (the huge block is already free)"
                                 : "pointer not allocated by shoal");
}

/* A huge block goes into this thread's huge slot. */
static __attribute__((noinline)) void free_huge(void *p, enum shoal_chunk_kind k)
{
    shoal_huge_t *h = shoal_huge_of(p, k);
    if (h != NULL && shoal_huge_slot_put(&shoal_tl_heap->huge_slot, h)) {
        shoal_purger_start();           /* a load when it runs: it will come for it */
        return;
    }
    free_rare(p, k);
}

/* What the block-start test sends on: a large block goes to this
 * thread's cache with a push, a huge one into its huge slot; everything
 * else is rare.  (Every call here is a tail call: no frame.) */
static __attribute__((noinline)) void free_generic(void *p, enum shoal_chunk_kind k)
{
    if (shoal_likely(k == SHOAL_CHUNK_SUPERPAGE)) {
        shoal_page_t *pg = shoal_span_of(p);
        if (pg->kind == SHOAL_SLOT_LARGE && p == pg->start &&
            shoal_large_cache_push(shoal_tl_heap, pg))
            return;
    } else if (k == SHOAL_CHUNK_HUGE) {
        free_huge(p, k);
        return;
    }
    free_rare(p, k);
}

void alloc_free(void *p)
{
    enum shoal_chunk_kind k = shoal_chunk_of(p);
    if (shoal_likely(k == SHOAL_CHUNK_SUPERPAGE)) {
        /* The slot's own descriptor: only a page's head has a nonzero
         * start limit, so one test says both "a page's head slot" and "a
         * carved block's start".  Blocks in later slots of multi-slot
         * pages (above 8 KiB) and large blocks go the generic way. */
        shoal_page_t *pg = shoal_slot_desc(p);
        if (shoal_likely(shoal_block_is_start(pg, p))) {
            page_free(pg, p);
            return;
        }
    }
    free_generic(p, k);
}

/* ---- sizes ------------------------------------------------------------ */

/* Usable size of a live block, or 0 (after reporting) if p is not one. */
static size_t usable_or_fault(const void *p, const char *fn)
{
    enum shoal_chunk_kind k = shoal_chunk_of(p);
    if (k == SHOAL_CHUNK_SUPERPAGE) {
        shoal_page_t *pg = shoal_span_of(p);
        if (pg->kind == SHOAL_SLOT_PAGE) {
            if (shoal_block_is_live(pg, p))
                return pg->block_size;
            bad_block(pg, p, fn);
            return 0;
        }
        if (pg->kind == SHOAL_SLOT_LARGE && p == pg->start)
            return shoal_large_usable(pg);
        bad_pool_pointer(p, fn);
        return 0;
    } else if (k == SHOAL_CHUNK_HUGE || k == SHOAL_CHUNK_HUGE_BEHIND) {
        shoal_huge_t *h = shoal_huge_of(p, k);
        if (h != NULL)
            return h->usable;
    }
    shoal_fault(fn, p, "pointer not allocated by shoal");
    return 0;
}

size_t alloc_usable_size(const void *p)
{
    return p == NULL ? 0 : usable_or_fault(p, "usable_size");
}

/* Could a request of n bytes at this alignment have made a block of
 * `usable` bytes? */
static bool size_matches(size_t usable, size_t n, size_t align)
{
    if (n > usable)
        return false;
    if (align <= SHOAL_ALIGN && shoal_opt(ALLOC_OPTION_CACHELINE_ALIGN))
        align = SHOAL_CACHE_LINE;
    if (align <= SHOAL_ALIGN) {
        /* A page block has the class of its size, or kept a larger one
         * when realloc shrank it in place (which it does while n > half). */
        if (usable <= SHOAL_MEDIUM_MAX)
            return shoal_class_size(shoal_size_to_class(n)) == usable || n > usable / 2;
        return n > SHOAL_MEDIUM_MAX;
    }
    unsigned cls = shoal_class_for_aligned(n, align);
    if (cls < SHOAL_CLASSES)
        return shoal_class_size(cls) == usable;
    if (n <= SHOAL_LARGE_MAX && align <= SHOAL_LARGE_MAX)
        return (SHOAL_SLOT_SIZE << shoal_large_order(n > align ? n : align)) == usable;
    return true;                /* huge: its own mapping, sized to fit */
}

static void free_checked(void *p, size_t n, size_t align, const char *fn)
{
    if (p == NULL)
        return;
    size_t usable = usable_or_fault(p, fn);
    if (usable == 0)
        return;
    if (!shoal_is_pow2(align) || !size_matches(usable, n, align)) {
        shoal_fault(fn, p, "size does not match the block");
        return;
    }
    alloc_free(p);
}

void alloc_free_sized(void *p, size_t n)
{
    free_checked(p, n, SHOAL_ALIGN, "free_sized");
}

void alloc_free_aligned_sized(void *p, size_t align, size_t n)
{
    free_checked(p, n, align, "free_aligned_sized");
}

/* ---- realloc ---------------------------------------------------------- */

/* In place if the block allows: same page class, or a large or huge
 * block that can shrink or grow where it is.  NULL if it must move. */
static void *resize_in_place(void *p, size_t old, size_t n)
{
    enum shoal_chunk_kind k = shoal_chunk_of(p);
    if (k == SHOAL_CHUNK_SUPERPAGE) {
        shoal_page_t *pg = shoal_span_of(p);
        if (pg->kind == SHOAL_SLOT_PAGE)        /* keep unless it wastes half (free_sized knows) */
            return n <= old && n > old / 2 ? p : NULL;
        return n > SHOAL_MEDIUM_MAX && n <= SHOAL_LARGE_MAX ? shoal_heap_large_resize(pg, n) : NULL;
    }
    if (n > SHOAL_LARGE_MAX)
        return shoal_huge_realloc(shoal_huge_of(p, k), n);
    return NULL;
}

void *alloc_realloc(void *p, size_t n)
{
    if (p == NULL)
        return alloc_malloc(n);
    if (n > SHOAL_MAX_REQUEST)
        return too_big();
    size_t old = usable_or_fault(p, "realloc");
    if (old == 0)
        return NULL;
    int saved = errno;
    void *q = resize_in_place(p, old, n);
    errno = saved;
    if (q != NULL)
        return q;
    q = alloc_malloc(n);
    if (q == NULL)
        return NULL;            /* p is untouched */
    memcpy(q, p, n < old ? n : old);
    alloc_free(p);
    return q;
}

void *alloc_reallocarray(void *p, size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n))
        return too_big();
    return alloc_realloc(p, n);
}

void alloc_collect(bool force)
{
    shoal_heap_collect();
    shoal_purge_now(force);
}
