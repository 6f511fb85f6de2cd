/* page.h - slot descriptors and the free lists of a page.
 *
 * Every 64 KiB slot of a superpage has a descriptor in the superpage
 * header.  A "page" is a span of 2^order slots handed to one heap and cut
 * into blocks of one size class; its head slot's descriptor carries the
 * free lists, the other slots (TAIL) point back to it.  A LARGE span is
 * one block; it has only a head descriptor.
 *
 * Free lists of a page:
 *   free         blocks ready to hand out (the malloc fast path pops here)
 *   local_free   blocks the owner freed, or got back from other threads
 *                (they send them to the owner heap: src/thread/remote.h)
 * `used` counts blocks that are neither on `free` nor on `local_free`: out
 * with a user, or on their way back from another thread.  So used == 0
 * means no block of the page is anywhere but with the owner, and the
 * page can go back to the pool.  Only the holder of the page's heap
 * touches the lists and `used`: no field of a page is written by a
 * thread that frees into it from outside.
 */
#ifndef SHOAL_PAGE_H
#define SHOAL_PAGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "layout.h"

struct shoal_heap_s;

/* A free block.  Its first word links it to the next free block, encoded
 * with the page's key (see shoal_encode); its second word holds the
 * page's "freed" mark for its address, which is how a second free of the
 * same block is recognised.  malloc clears the mark when it hands the
 * block out.  Every block is at least 16 bytes, so both words fit. */
typedef struct shoal_block_s {
    uintptr_t link;
    uintptr_t freed;
} shoal_block_t;

#ifndef SHOAL_HARDEN_ENABLED
#define SHOAL_HARDEN_ENABLED 1
#endif

enum shoal_slot_kind {
    SHOAL_SLOT_FREE = 0,  /* not in use (or a tail of a LARGE block) */
    SHOAL_SLOT_PAGE,      /* head of a page of small or medium blocks */
    SHOAL_SLOT_LARGE,     /* head of a large block */
    SHOAL_SLOT_TAIL,      /* inner slot of a page; slot_offset leads to the head */
    SHOAL_SLOT_META,      /* slot 0: the superpage header */
    SHOAL_SLOT_LARGE_SAMPLED,   /* head of a large block heap profiling sampled:
                                   free's fast path leaves it to the slow one */
};

static inline bool shoal_slot_is_large(unsigned kind)
{
    return kind == SHOAL_SLOT_LARGE || kind == SHOAL_SLOT_LARGE_SAMPLED;
}

typedef struct shoal_page_s {
    /* The first line is what a thread that frees into the page reads -
     * free's tests (start_mul, start_limit, mark), the owner word, the
     * class and block size - with the link key; the owner writes it when
     * the page is set up, carved, or goes full or comes back (and where
     * heap profiling places a sample trap in a list, while profiling is
     * on).  What the owner writes on its every malloc and free is the
     * second line: a thread that frees from outside keeps its copy of
     * the first, and the owner's malloc and free do not take it back
     * from that thread's cache each time. */
    uintptr_t key;              /* encodes links (owner-only) */
    uintptr_t mark;             /* the freed mark: see shoal_freed_mark */
    uint64_t start_mul;         /* see shoal_block_is_start */
    /* The heap that owns it (the orphanage when its heap was dismantled),
     * with SHOAL_PAGE_FULL set while the page is full (in no list):
     * written by that heap's holder, read by any thread that frees
     * into it, to know where to send the block (shoal_page_heap). */
    _Atomic uintptr_t owner;
    /* capacity * (start_mul * block_size mod 2^64) in a page's head
     * descriptor, 0 in every other descriptor (init zeroes the tails',
     * fini the head's), so the block-start test fails for any slot that
     * is not a page's head. */
    _Atomic uint32_t start_limit;
    uint32_t block_size;
    char *start;                /* the first block */
    uint8_t size_class;
    /* Set when the span is set up, read by any thread that frees into it. */
    uint8_t kind;               /* enum shoal_slot_kind */
    uint8_t slot_offset;        /* TAIL: slots back to the head */
    uint8_t order;              /* buddy order of the span */
    _Atomic uint16_t capacity;  /* blocks carved out so far; free checks it */
    uint16_t reserved;          /* blocks that fit */
    /* Heap profiling's sample trap (below; owner-only): the block whose
     * link it is, or NULL. */
    struct shoal_block_s *trap_after;
    /* The second line: the owner's, written on its every malloc and free
     * (free, local_free, used), and its slow paths' fields. */
    shoal_block_t *free __attribute__((aligned(64)));
    shoal_block_t *local_free;
    uint32_t used;              /* owner-only */
    uint8_t free_is_zero;       /* every block on `free` reads as zero (owner-only) */
    uint8_t fresh_zero;         /* blocks not yet carved read as zero */
    uint8_t idle_sweeps;        /* sweeps that found it empty at its queue's head */
    uint8_t armed;              /* both lists end in shoal_trap_end */
    uint16_t trap_rest;         /* blocks from trap_next to the end of `free` (traps) */
    uint8_t push;               /* where the owner's free pushes: enum shoal_push */
    uint8_t push_dry;           /* `push` once `free` ran dry: FREE, or TRIMMED */
    /* OS pages of the page given back by a trim (shoal_page_trim): the
     * free blocks that start in them are on no list, and wait to be
     * carved again (owner-only). */
    uint16_t trimmed;
    uint16_t trim_used;         /* `used` at a trim's last look, | SHOAL_TRIM_DONE once trimmed */
    struct shoal_page_s *next, *prev;         /* owner's queue (none while full) */
    /* Heap profiling's traps (below; owner-only). */
    struct shoal_block_s *trap_next;          /* the block the sample trap stands before */
    /* Blocks to hand out after the last one on `free` before the next
     * sampled one: negative while the sample trap stands in `free`
     * (gap_rest + the blocks on `free` is then the trap's place),
     * SHOAL_GAP_UNDRAWN while none is drawn.  Here, not in the first
     * line: the refill of an armed list and the owner's frees into an
     * armed page write it. */
    int64_t gap_rest;
} __attribute__((aligned(128))) shoal_page_t;

/* A power of two, so finding a descriptor is a shift (shoal_slot_desc),
 * and no two pages share a cache line. */
#define SHOAL_DESC_SHIFT 7
_Static_assert(sizeof(shoal_page_t) == 1 << SHOAL_DESC_SHIFT, "slot descriptors are 128 bytes");
_Static_assert(offsetof(shoal_page_t, free) == 64, "what the owner writes is a line of its own");

/* Which list the owner's free pushes a block onto: `free`, so that the
 * next malloc of the class hands out the block just freed, still in
 * cache, as a thread cache does; local_free while `free` must stay as
 * it is: a list of blocks that read as zero (free_is_zero: calloc skips
 * its memset); in an armed page, block by block (heap profiling's
 * sample trap stands a drawn number of allocations into it:
 * shoal_page_push_armed). */
enum shoal_push { SHOAL_PUSH_FREE, SHOAL_PUSH_LOCAL, SHOAL_PUSH_ARMED, SHOAL_PUSH_TRIMMED };

/* `push` as `armed`, `trimmed` and free_is_zero say, after one changed.
 * A trimmed page (never armed: arming carves it whole again) pushes
 * onto local_free after a test that the block does not start in a
 * trimmed OS page (shoal_page_push). */
static inline void shoal_page_settle_push(shoal_page_t *pg)
{
    pg->push_dry = pg->trimmed ? SHOAL_PUSH_TRIMMED : SHOAL_PUSH_FREE;
    pg->push = pg->trimmed        ? SHOAL_PUSH_TRIMMED
               : pg->free_is_zero ? SHOAL_PUSH_LOCAL
               : pg->armed        ? SHOAL_PUSH_ARMED
                                  : SHOAL_PUSH_FREE;
}

/* Whether b, a block of pg, starts in an OS page that a trim gave back:
 * it is free, on no list, and a free of it is a double free.  (Only a
 * page of one slot is trimmed: a bigger one's offsets would shift the
 * 16 bits too far.) */
static inline bool shoal_page_in_trimmed(const shoal_page_t *pg, const void *b)
{
    return pg->trimmed != 0 &&
           (pg->trimmed >> (((uintptr_t)b - (uintptr_t)pg->start) >> SHOAL_OS_PAGE_SHIFT)) & 1;
}

/* The owner word: free compares it whole with the freeing thread's heap,
 * so one test says "this thread's page, and not full"; a
 * free into a full page fails it and takes the remote path, which finds
 * its own heap there (as mimalloc folds its full flag into the thread id
 * free compares).  Every store is a release (a plain store on x86-64):
 * a thread that frees a block of the page and reads the word sees the
 * heap it names set up (the heap's outbox slot, its inbox), whichever
 * store it reads. */
#define SHOAL_PAGE_FULL ((uintptr_t)1)

static inline uintptr_t shoal_page_owner(const shoal_page_t *pg)
{
    return atomic_load_explicit(&pg->owner, memory_order_acquire);
}

static inline struct shoal_heap_s *shoal_owner_heap(uintptr_t owner)
{
    return (struct shoal_heap_s *)(owner & ~SHOAL_PAGE_FULL);
}

static inline struct shoal_heap_s *shoal_page_heap(const shoal_page_t *pg)
{
    return shoal_owner_heap(shoal_page_owner(pg));
}

/* Relaxed: the full bit is read by the owner, which wrote it. */
static inline bool shoal_page_is_full(const shoal_page_t *pg)
{
    return (atomic_load_explicit(&pg->owner, memory_order_relaxed) & SHOAL_PAGE_FULL) != 0;
}

/* Release, paired with free's acquire load of the owner word: a thread
 * that frees into pg and finds h there sees h set up (its inbox, its
 * outbox slot). */
static inline void shoal_page_set_owner(shoal_page_t *pg, struct shoal_heap_s *h, bool full)
{
    atomic_store_explicit(&pg->owner, (uintptr_t)h | (full ? SHOAL_PAGE_FULL : 0),
                          memory_order_release);
}

/* Free-list hardening: links inside blocks are stored rotated and xored
 * with a per-page secret key, so a use-after-free write of an address
 * cannot make malloc hand out that address: it decodes to garbage. */
static inline uintptr_t shoal_encode_key(uintptr_t key, const shoal_block_t *next)
{
#if SHOAL_HARDEN_ENABLED
    uintptr_t x = (uintptr_t)next ^ key;
    return (x << 17) | (x >> 47);
#else
    (void)key;
    return (uintptr_t)next;
#endif
}

static inline uintptr_t shoal_encode(const shoal_page_t *pg, const shoal_block_t *next)
{
    return shoal_encode_key(pg->key, next);
}

static inline shoal_block_t *shoal_decode(const shoal_page_t *pg, uintptr_t link)
{
#if SHOAL_HARDEN_ENABLED
    return (shoal_block_t *)(((link >> 17) | (link << 47)) ^ pg->key);
#else
    (void)pg;
    return (shoal_block_t *)link;
#endif
}

/* b onto `free` in an armed page whose `free` holds no zero blocks,
 * where the sample trap stands beyond the list: the block's next malloc
 * is one more allocation before the sampled one, which gap_rest (the
 * allocations after the list's last before it) gives up for it, so the
 * sampled allocation stays where it was drawn.  False where the trap
 * stands in the list (gap_rest is negative then) or right after its end
 * (0), or none is drawn (SHOAL_GAP_UNDRAWN, negative); b then goes to
 * local_free, behind the trap. */
static inline bool shoal_page_push_armed(shoal_page_t *pg, shoal_block_t *b, uintptr_t key)
{
    if (pg->gap_rest < 1)
        return false;
    b->link = shoal_encode_key(key, pg->free);
    pg->free = b;
    pg->gap_rest--;
    return true;
}

/* Push b onto the list `push` names, its link encoded with `key`
 * (owner).  A branch, well predicted (a page changes lists rarely), and
 * not the list's address computed from the byte: a store to an address
 * that waits on a load holds back the loads after it, the next malloc's
 * pop of this very block among them (a malloc and free of one 256 B
 * block in a loop: 4.8 -> 5.2 ns).  An armed page takes it onto `free`
 * where its trap allows. */
static inline bool shoal_page_push(shoal_page_t *pg, shoal_block_t *b, uintptr_t key)
{
    if (shoal_likely(pg->push == SHOAL_PUSH_FREE)) {
        b->link = shoal_encode_key(key, pg->free);
        pg->free = b;
        return true;
    }
    /* Read again here, so that the test above stays one compare with
     * memory, where the compiler would load the byte to keep it. */
    __asm__("" ::: "memory");
    if (pg->push == SHOAL_PUSH_TRIMMED && shoal_page_in_trimmed(pg, b))
        return false;           /* free already, on no list: a double free */
    if (pg->push != SHOAL_PUSH_ARMED || !shoal_page_push_armed(pg, b, key)) {
        b->link = shoal_encode_key(key, pg->local_free);
        pg->local_free = b;
    }
    return true;
}

/* The freed mark, in the second word of every free block of the page
 * (carved and not yet handed out, or freed).  User data holds it by
 * chance with probability 2^-64.  A per-page value of its own, not the
 * link key: it lies in the clear in every freed block, and a program
 * that reads a freed block must not learn from it how to forge a link.
 * (Mixing in the block's address would cost instructions on each free
 * and keep nothing secret: whoever reads a freed block knows its
 * address.) */
static inline uintptr_t shoal_freed_mark(const shoal_page_t *pg)
{
    return pg->mark;
}

/* Is b the start of a block of pg that has been carved (so maybe handed
 * out)?  And, for is_live, is it not marked free?
 *
 * One multiply and one compare answer "is off = b - start a multiple of
 * the block size d, below capacity * d".  Let c = start_mul be
 * ceil(2^64 / d), plus one when d is a power of two, so that
 * c * d = 2^64 + e with 1 <= e <= d.  Write off = q * d + r, 0 <= r < d.
 * Then off * c = q * 2^64 + q * e + r * c, so modulo 2^64 it is
 * q * e + r * c, and that sum does not wrap: q * e <= off < 2^19 (b lies
 * in the page's span, at most 512 KiB), and r * c <= (d - 1) * c =
 * 2^64 + e - c, with c > 2^48 (d <= 64 KiB).  So:
 *   r = 0:  off * c = q * e, below capacity * e exactly when q < capacity;
 *   r > 0:  off * c >= c > 2^48, above any capacity * e (at most the
 *           span's bytes, 2^19: the limit fits in 32 bits).
 * Interior, misaligned and never-carved pointers all fail, and so does
 * every pointer whose slot descriptor is not a page's head (its limit is
 * 0): free can skip looking at the slot's kind.  (Lemire,
 * Kaser and Kurz, "Faster remainder by direct computation", 2019, use
 * the same c for the divisibility test alone.) */
static inline bool shoal_block_is_start_at(const shoal_page_t *pg, uint64_t off)
{
    return off * pg->start_mul < atomic_load_explicit(&pg->start_limit, memory_order_relaxed);
}

static inline bool shoal_block_is_start(const shoal_page_t *pg, const void *b)
{
    return shoal_block_is_start_at(pg, (uintptr_t)b - (uintptr_t)pg->start);
}

/* The same for the descriptor of b's own slot, free's fast path: if that
 * slot is a page's first, the page starts at the slot's start, so the
 * offset is b's bits below the slot size (no load); if it is not, the
 * limit is 0 and the test fails whatever the offset. */
static inline bool shoal_block_is_start_in_slot(const shoal_page_t *slot_desc, const void *b)
{
    return shoal_block_is_start_at(slot_desc, (uintptr_t)b & (SHOAL_SLOT_SIZE - 1));
}

static inline bool shoal_block_is_live(const shoal_page_t *pg, const shoal_block_t *b)
{
    return shoal_block_is_start(pg, b) && b->freed != shoal_freed_mark(pg);
}

/* May malloc hand b out, the block a free list of pg leads to?  A link
 * that an overflow of the block before it, or a write after free, has
 * overwritten decodes to an address that fails this before malloc reads
 * through it.  First, b must lie in pg's superpage, which stays mapped,
 * so reading b is safe (one xor and a shift, pg is in a register).  Then
 * b must carry pg's freed mark, which every free block of pg holds and
 * nothing else does: a block of another page holds that page's mark, a
 * block handed out had its mark cleared, and any other address reads
 * user data, which holds the mark with probability 2^-64.  So a list can
 * neither lead out of its page nor back to a block it has handed out. */
static inline bool shoal_block_is_free(const shoal_page_t *pg, const shoal_block_t *b)
{
    return (((uintptr_t)b ^ (uintptr_t)pg) >> SHOAL_SP_SHIFT) == 0 &&
           b->freed == shoal_freed_mark(pg);
}

/* start_mul for block size d (see above). */
static inline uint64_t shoal_start_mul(uint64_t d)
{
    return UINT64_MAX / d + 1 + ((d & (d - 1)) == 0);
}

/* Seed the page keys from the kernel's random numbers (once). */
void shoal_page_secret_init(void);

/* Set up a fresh page of class `cls` on a span; `zero` says the span's
 * memory reads as zero. */
void shoal_page_init(shoal_page_t *pg, unsigned cls, unsigned order, bool zero);

/* The span stops being a page: its descriptors go back to FREE. */
void shoal_page_fini(shoal_page_t *pg);

/* Carve more blocks from the untouched part of the page onto `free`.
 * Only those that reach one more OS page, so memory is touched (and
 * costs RSS) as it is used.  Blocks a trim took off the lists come
 * first, those of one trimmed OS page. */
void shoal_page_extend(shoal_page_t *pg);

/* The page ran dry (`free` is NULL) and local_free becomes the free
 * list: the cheapest refill, done on malloc's own path. */
static inline shoal_block_t *shoal_page_take_local(shoal_page_t *pg)
{
    pg->free = pg->local_free;
    pg->local_free = NULL;
    pg->free_is_zero = 0;       /* freed blocks hold old data */
    pg->push = pg->push_dry;    /* not armed: an armed page's `free` never ends in NULL */
    return pg->free;
}

/* Hand out b, the head of `free`, which passed shoal_block_is_free. */
static inline void shoal_page_take(shoal_page_t *pg, shoal_block_t *b)
{
    pg->free = shoal_decode(pg, b->link);
    b->freed = 0;               /* no longer free: a free of it is not a double free */
    pg->used++;
}

/* A list of the page leads to a block that is not a free block of the
 * page and no trap (malloc's pop, or a walk along it on a slow path): a
 * link or a freed mark was overwritten.  Say so, naming the page (what a
 * wrong link decodes to says nothing); with ON_ERROR=warn, take the
 * page's lists out of service (their blocks are lost to it: it keeps
 * them counted as in use, so it never goes back to the pool). */
void shoal_page_broken(shoal_page_t *pg);

/* Whether a page has no block out, so it can stop being a page.  `used`
 * says so first; then every block carved must carry the freed mark (a
 * scan of the page's blocks in address order, a slow path's, once a
 * page).  A page whose `used` fell to 0 while a block is still out - one
 * freed twice, the second time after a write wiped its freed mark - is
 * reported, and kept out of use (shoal_page_broken's state) rather than
 * given back to the pool under that block. */
bool shoal_page_all_home(shoal_page_t *pg);

/* Whether every block carved carries the freed mark (reads only). */
bool shoal_page_none_live(const shoal_page_t *pg);

/* In a fork child, a page of a heap whose thread did not come with the
 * fork: that thread may have stopped anywhere in an edit of the page's
 * lists, so they are made again from the blocks themselves.  A carved
 * block carrying the freed mark is free (on a list, on its way back, or
 * on its way out of a malloc that never returned it), and goes on
 * `free` in address order; every other one is out with a user and
 * counts in `used`.  The caller is the process's only thread. */
void shoal_page_rebuild(shoal_page_t *pg);

/* Give back the OS pages of pg, an unarmed page of one slot, that hold
 * free blocks only; the blocks that start in them leave its lists until
 * they are carved again (page.c, "trimming").  Returns the bytes given
 * back (owner). */
size_t shoal_page_trim(shoal_page_t *pg);

/* Whether a trim of pg, a page with blocks out, may give back two OS
 * pages or more: of one slot, unarmed, not trimmed since its `used`
 * last changed (a trim that found nothing looks again only then), and
 * its carved OS pages not yet trimmed more than its blocks out can
 * touch (a block of b bytes lies on at most b / 4096 + 2 of them: a
 * page of small blocks with a few dozen out is not looked at). */
#define SHOAL_TRIM_DONE 0x8000u   /* above any `used` */

static inline bool shoal_page_trim_worth(const shoal_page_t *pg)
{
    if (pg->order != 0 || pg->armed || pg->trim_used == (pg->used | SHOAL_TRIM_DONE))
        return false;
    size_t carved = (size_t)atomic_load_explicit(&pg->capacity, memory_order_relaxed) *
                    pg->block_size;
    size_t os_pages = (carved + SHOAL_OS_PAGE - 1) / SHOAL_OS_PAGE -
                      (size_t)__builtin_popcount(pg->trimmed);
    size_t touched = (size_t)pg->used * (pg->block_size / SHOAL_OS_PAGE + 2);
    return touched + 2 <= os_pages;
}

/* For a sweep, of a page worth a trim: whether its `used` has not
 * grown since the look before - no block of it went out, or no more
 * than came back: a page that malloc takes blocks from again would
 * only fault back what a trim gave.  Records what it sees. */
static inline bool shoal_page_trim_due(shoal_page_t *pg)
{
    if (pg->used <= (pg->trim_used & ~SHOAL_TRIM_DONE))
        return true;
    pg->trim_used = (uint16_t)pg->used;
    return false;
}

/* Whether pg can make a free block without a freed one: carve one anew,
 * or again after a trim. */
static inline bool shoal_page_carvable(const shoal_page_t *pg)
{
    return atomic_load_explicit(&pg->capacity, memory_order_relaxed) < pg->reserved ||
           pg->trimmed != 0;
}

/* ---- heap profiling's traps ---------------------------------------------
 * malloc's fast path pops without looking where a list ends, and every
 * block it pops passes shoal_block_is_free.  Heap profiling uses that
 * test as its hook, so that it costs the fast path nothing while it is
 * off: in an *armed* page neither list ends in NULL, both end in
 * shoal_trap_end, a static block in no superpage, so the pop after a
 * list's last block fails the test and comes to the trap handler
 * (malloc.c: page_head, and free_list_stop); and where the next sampled
 * allocation of the page falls, shoal_trap_sample stands in the list in
 * place of a block (the link before it leads there; the block it stands
 * for is trap_next).
 *
 * Where the sample falls: each allocation from a page of block size s is
 * sampled with probability p = 1 - exp(-s / rate), independently
 * (samples.h), so the next one sampled is the one after a geometric gap
 * (shoal_prof_gap), counted from the head of `free`.  A gap as long as
 * the list places nothing: what is left of it, gap_rest, goes on into
 * the next list, and when the end trap comes, every block of the list
 * was handed out: local_free becomes the list if its length (capacity -
 * used, known without a walk) is within gap_rest, which shrinks by it
 * (a compare and a subtraction: the common end trap costs little more
 * than the refill malloc makes inline).  Where `free` changes on a slow
 * path (new blocks carved, a collect), the gap goes on too, counted from
 * the new head.  Only a sample draws a new gap, for the allocations
 * after it (the process has no memory).  The walk to place a trap goes
 * only as far as the gap, once a sample.  A page armed, or sampled from
 * while profiling was off, draws anew.
 *
 * A heap arms the page it makes the head of a queue while profiling is
 * on (thread/page_queue.c); a page stays armed until it stops being a
 * page.  With profiling off its end traps still come, once a list, and
 * place nothing. */
extern shoal_block_t shoal_trap_end, shoal_trap_sample;

#define SHOAL_GAP_UNDRAWN INT64_MIN

static inline bool shoal_list_ended(const shoal_block_t *b)
{
    return b == NULL || b == &shoal_trap_end;
}

/* Whether `free` holds a block (the sample trap stands before one). */
static inline bool shoal_page_has_free(const shoal_page_t *pg)
{
    return !shoal_list_ended(pg->free);
}

static inline bool shoal_page_local_empty(const shoal_page_t *pg)
{
    return shoal_list_ended(pg->local_free);
}

/* Whether the block malloc found at the head of `free` is a trap. */
static inline bool shoal_page_trapped(const shoal_page_t *pg)
{
    return pg->free == &shoal_trap_end || pg->free == &shoal_trap_sample;
}

/* End both lists in the end trap and place the sample trap (owner). */
void shoal_page_arm(shoal_page_t *pg);

/* The sample trap came: the allocation at hand is the one sampled, and
 * the block the trap stood for heads `free` again, with a new trap a
 * new gap on (owner). */
void shoal_page_trap_sample(shoal_page_t *pg);

/* Place the sample trap `gap` blocks into `free`, which holds `len`
 * blocks (UINT64_MAX: a fresh gap). */
void shoal_page_trap_place(shoal_page_t *pg, unsigned len, uint64_t gap);

/* local_free becomes `free` in an armed page (owner). */
static inline void shoal_page_local_to_free(shoal_page_t *pg)
{
    pg->free = pg->local_free;
    pg->local_free = &shoal_trap_end;
    pg->free_is_zero = 0;       /* freed blocks hold old data */
    pg->push = SHOAL_PUSH_ARMED;
}

/* `free` of an armed page came to the end trap, and local_free holds
 * blocks: if the gap goes past them too (mostly: the list that ran out
 * placed no trap, so all its blocks went out unsampled), they become
 * `free`, and nothing else happens; true if so (owner).  Inline, for it
 * comes once a list. */
static inline bool shoal_page_take_local_untrapped(shoal_page_t *pg)
{
    int64_t len = atomic_load_explicit(&pg->capacity, memory_order_relaxed) - pg->used;
    if (pg->gap_rest < len)
        return false;           /* (SHOAL_GAP_UNDRAWN is below every length) */
    shoal_page_local_to_free(pg);
    pg->gap_rest -= len;
    return true;
}

/* The same where shoal_page_take_local_untrapped said no: the gap may
 * end among local_free's blocks, or none was drawn, and the sample trap
 * is placed (local_free holds blocks). */
static inline void shoal_page_take_local_trapped(shoal_page_t *pg)
{
    uint64_t gap = pg->gap_rest != SHOAL_GAP_UNDRAWN ? (uint64_t)pg->gap_rest : UINT64_MAX;
    shoal_page_local_to_free(pg);
    shoal_page_trap_place(pg, atomic_load_explicit(&pg->capacity, memory_order_relaxed) - pg->used,
                          gap);
}

/* For an allocation the sample trap at the head of `free` would sample
 * but cannot (no stack to be had): hand out the block it stands before
 * and keep it before the next one.  NULL if the trap is not at the head
 * (pop as usual). */
shoal_block_t *shoal_page_take_trapped(shoal_page_t *pg);

/* The head descriptor and the memory of a span. */
void *shoal_page_start(const shoal_page_t *pg);

/* shoal_page_collect in an armed page. */
void shoal_page_collect_onto(shoal_page_t *pg);

/* Give malloc the blocks on local_free (owner only), where it would not
 * find them: a page whose `free` ran dry takes them as its list (inline:
 * the usual case, no walk), and an armed page joins its two lists (the
 * sample trap's place counts them).  An unarmed page whose `free` holds
 * blocks keeps local_free for when `free` runs dry, which malloc's own
 * refill then takes with two stores, where joining the lists now would
 * walk one of them to its end.  The searches of a queue do it for each
 * page they pass. */
static inline void shoal_page_collect(shoal_page_t *pg)
{
    if (shoal_list_ended(pg->local_free))
        return;
    if (pg->free == NULL)
        shoal_page_take_local(pg);
    else if (pg->armed)
        shoal_page_collect_onto(pg);
}

#endif
