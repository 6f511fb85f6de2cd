/* heap.h - per-thread heaps.
 *
 * A heap owns pages: a queue of them per size class, and full pages
 * (page_queue.h), the queue heads being what the malloc fast path pops
 * from.  Blocks come back from a local free or through the heap's inbox
 * (remote.h).
 *
 * A heap has one holder at a time: the thread that owns it, or whoever
 * popped it from the stack of parked heaps (the next thread, or a purge
 * pass); only the holder touches its pages' lists, its queues, its
 * outbox and the taking end of its inbox.
 *
 * A thread's heap is created at its first allocation (or its first free
 * of another heap's block: the outbox is the heap's) and parked whole
 * when the thread exits, for the next thread to take over.  One parked
 * for a purge delay is dismantled: pages with live blocks go to the
 * orphanage, a heap no thread owns, from which live threads adopt them,
 * empty ones go back to the pool, and the struct waits for the next
 * thread.  Heap structs are never unmapped.
 */
#ifndef SHOAL_HEAP_H
#define SHOAL_HEAP_H

#include <ck_stack.h>
#include "../core/counter.h"
#include "../core/huge.h"
#include "../core/pool.h"
#include "../core/size_class.h"
#include "purger.h"
#include "remote.h"

#define SHOAL_PAGE_REFILL 4     /* slots a heap claims at once */
#define SHOAL_PAGE_KEEP 2       /* pages it emptied that a heap keeps (heap.c) */
/* A heap's cache of claimed, unused 64 KiB slots: what its last refill
 * left (a refill comes only when the cache is empty, and one of its
 * slots goes at once), and on top the pages it emptied. */
#define SHOAL_PAGE_CACHE (SHOAL_PAGE_REFILL - 1 + SHOAL_PAGE_KEEP)
#define SHOAL_LARGE_CACHE_SLOTS 32      /* freed large blocks a heap keeps at most: 2 MiB */
#define SHOAL_LARGE_CACHE_SHARED 128    /* ... all live heaps together: 8 MiB, ... */
#define SHOAL_LARGE_CACHE_MIN 4         /* ... but 256 KiB each at least */
#define SHOAL_LARGE_CACHE_CLOSED (SHOAL_LARGE_CACHE_SLOTS + 1)  /* its cached slots: closed */
/* Blocks a class keeps in the stash (stash.h): SHOAL_STASH_MIN, and one
 * more for each 2^SHOAL_STASH_SHIFT of the heap's full pages, up to
 * SHOAL_STASH_MAX (from 384 full pages, 24 MiB, on). */
#define SHOAL_STASH_MIN 4
#define SHOAL_STASH_MAX 16
#define SHOAL_STASH_SHIFT 5
/* Pages emptied with no malloc searching for a block in between: a
 * program freeing what it held, for which the stash closes (stash.h). */
#define SHOAL_STASH_EMPTIED 16

/* A stashed block, and its page's freed mark, which malloc tests the
 * block against when it takes it back (stash.h): kept here, the page's
 * descriptor - a random page's, out of cache - is not read for it. */
typedef struct shoal_stashed_s {
    shoal_block_t *block;
    uintptr_t mark;
} shoal_stashed_t;

/* Per-heap statistics; only the owning thread writes them.  Pages are
 * counted up where they are set up and down where they are released,
 * possibly in another heap, so only the sum over heaps means anything. */
typedef struct shoal_heap_counters_s {
    shoal_counter_t allocs[SHOAL_CLASSES];      /* blocks handed out */
    shoal_counter_t frees[SHOAL_CLASSES];       /* blocks freed by this thread */
    shoal_counter_t pages[SHOAL_CLASSES];       /* pages set up minus released */
    shoal_counter_t remote_frees;               /* frees into other heaps' pages */
    shoal_counter_t remote_received;            /* blocks the inbox gave back */
    shoal_counter_t remote_atomics;             /* atomic operations sending and taking */
    shoal_counter_t pages_adopted;
    shoal_counter_t large_allocs;               /* large blocks handed out */
    shoal_counter_t large_live[SHOAL_LARGE_SLOTS + 1];  /* by slots held, out minus back */
} shoal_heap_counters_t;

typedef struct shoal_heap_s {
    /* The fast path's pages by size (size_class.h): the holder's, but
     * for a thread that asks for a sweep (heap.c, ask_sweep). */
    _Atomic(shoal_page_t *) direct[SHOAL_DIRECT_ENTRIES];
    shoal_page_t *pages[SHOAL_CLASSES];         /* queue heads: the fast path above */
    shoal_page_t *last[SHOAL_CLASSES];          /* queue tails */
    size_t full_pages;                          /* pages with no free block: page_queue.h */
    shoal_outbox_t outbox;                      /* blocks of other heaps, to send */
    shoal_span_t cache[SHOAL_PAGE_CACHE];       /* claimed, unused 64 KiB slots */
    unsigned cached;
    unsigned cached_emptied;                    /* the top ones: pages it emptied */
    /* Freed large blocks by slots held (large_cache.h), and the same
     * while closed to the fast paths. */
    shoal_page_t *large_free[SHOAL_LARGE_SLOTS + 1];
    unsigned large_cached_slots;
    unsigned large_cap;                         /* the slots they may take now: large_cache.h */
    shoal_page_t *large_held[SHOAL_LARGE_SLOTS + 1];
    unsigned large_held_slots;
    shoal_huge_slot_t huge_slot;                /* the last huge mapping freed (huge.h) */
    uint8_t stashed[SHOAL_CLASSES];
    uint8_t stash_cap;                          /* blocks a class may stash now (stash.h) */
    uint8_t emptied;                            /* pages emptied since a malloc searched */
    bool large_cache_used, page_cache_used, stash_used;  /* taken from since the last sweep */
    unsigned slow_calls;                        /* paces the idle sweep */
    _Atomic uint64_t swept_ms;                  /* when it last ran (a pass reads it) */
    uint64_t trimmed_ms;                        /* when a sweep (a pass, for the orphanage) last looked to trim */
    uint64_t parked_ms;                         /* when its thread gave it up */
    size_t prof_rate;                           /* armed for heap profiling at this rate */
    bool uncached;                              /* pages from the pool and back (sampled.h) */
    shoal_heap_counters_t stats;
    /* Read by every thread that frees into this heap's pages, written
     * when the heap is parked or taken: a line away from what the owner
     * writes all the time. */
    _Atomic int live __attribute__((aligned(SHOAL_CACHE_LINE)));  /* owned by a thread now */
    _Atomic bool sweep_asked;                   /* by a pass or the purger (heap.c, ask_sweep) */
    /* In a fork child: its thread did not come with the fork (set by the
     * child's fork handler, before the child has a second thread). */
    bool vanished;
    uint8_t outbox_slot;                        /* senders keep its batch there */
    struct shoal_heap_s *next_all;              /* every heap ever made */
    ck_stack_entry_t free_link;                 /* on the stack of parked or spare heaps */
    struct shoal_heap_s *next_parked;           /* a purge pass's list of them */
    shoal_inbox_t inbox;                        /* blocks other heaps sent back */
    /* Blocks freed into full pages, for the class's next dry malloc (the
     * owner's; a line away from the inbox's senders), a row of
     * SHOAL_STASH_MAX a class - four lines, of which a heap that keeps
     * SHOAL_STASH_MIN touches the first.  (By place, then class, a
     * class's blocks lay a line apart, and kv_cache ran 3% slower.)  Rows
     * in the heaps threads hold (heap.c, heap_new); none in the library's
     * own (the empty heap, the orphanage, the sampled heap), which never
     * stash, so that every process's data does not carry them. */
    shoal_stashed_t stash[][SHOAL_STASH_MAX] __attribute__((aligned(SHOAL_CACHE_LINE)));
} shoal_heap_t;

extern shoal_heap_t shoal_empty_heap;
extern shoal_page_t shoal_empty_page;
extern __thread shoal_heap_t *shoal_tl_heap __attribute__((tls_model("initial-exec")));

/* The calling thread's heap, made for it if it has none yet (not after
 * its exit handler ran: then, or without memory, the empty heap), for a
 * path that would rather use a heap's caches.  errno is kept.  A thread
 * that has its heap pays one load and one compare. */
shoal_heap_t *shoal_heap_acquire_for_thread(void);

static inline shoal_heap_t *shoal_heap_of_thread(void)
{
    shoal_heap_t *h = shoal_tl_heap;
    return shoal_likely(h != &shoal_empty_heap) ? h : shoal_heap_acquire_for_thread();
}

/* Set up a heap struct that reads as zero (fresh memory, or a heap in
 * static storage that no thread owns, set up at its first use): empty
 * queues and inbox; then it joins the list of every heap, which
 * statistics and fork walk.  Its other fields are its maker's. */
void shoal_heap_setup(shoal_heap_t *h);

/* A page of class `cls` with a free block, at the head of the calling
 * thread's queue; creates the thread's heap on first use.  NULL with
 * errno ENOMEM. */
shoal_page_t *shoal_heap_find_page(unsigned cls);

/* A page of class cls with a free block, at the head of h's queue (h's
 * holder): one of the queue's, or a fresh one.  NULL with errno ENOMEM. */
shoal_page_t *shoal_heap_page_for(shoal_heap_t *h, unsigned cls);

/* Take what h's inbox holds (h's holder only); returns the blocks that
 * came home. */
size_t shoal_heap_receive(shoal_heap_t *h);

/* Where a page that stops being one goes. */
enum shoal_release_to {
    SHOAL_TO_CACHE,             /* the heap's page cache if it has room, else the pool */
    SHOAL_TO_POOL,
    SHOAL_TO_POOL_IDLE,         /* the pool, unused for a purge delay already */
    SHOAL_TO_POOL_IN_PASS,      /* the pool, from a purge pass (which sees the slots) */
};

/* pg, which h holds and has no block out, stops being a page (h's holder). */
void shoal_heap_release_page(shoal_heap_t *h, shoal_page_t *pg, enum shoal_release_to to);

/* The owner freed the last block of pg, or freed into a full page. */
void shoal_heap_page_freed(shoal_heap_t *h, shoal_page_t *pg);

/* Trims (core/page.c) a sweep or a purge pass makes at most, the pages
 * of the biggest blocks first (a trim walks the page's blocks, and makes
 * a call to the kernel for each run of OS pages it gives back: about
 * 10 ms for 1,024 pages of the smallest blocks, a few for bigger ones).
 * Too few leave what matters waiting: redis, values of ever other sizes
 * set and deleted, had 3,000 pages of 2-3 KiB blocks worth a trim at
 * its last sweep, with 256 a sweep taken by smaller classes first. */
#define SHOAL_TRIMS_PER_SWEEP 1024

/* Trims look at most once a second (or once a delay, if longer), and
 * take a page whose `used` has not grown since the look before
 * (core/page.h, shoal_page_trim_due).  With every sweep trimming every
 * such page it found, PURGE_DELAY_MS=10 and a workload whose sizes
 * drift every 100 ms (four threads) ran 2.7 times slower than with no
 * trim, faulting back what the trims had given back. */
#define SHOAL_TRIM_EVERY_MS 1000

/* The trims a sweep or pass may make now, that last looked at *last_ms
 * (then set to now): none where the process gives no memory back
 * (PURGE_DELAY_MS=-1) or uses HUGE_PAGES (a purge inside a huge page
 * would split it), or too soon after the last look. */
unsigned shoal_heap_trims_allowed(uint64_t now, uint64_t *last_ms);

/* A look for a sweep or a pass at pg, a page with blocks out: trimmed
 * where it is worth it and due (core/page.h), while *trims, the look's
 * allowance, lasts (the page's holder). */
void shoal_heap_trim_if_due(shoal_page_t *pg, unsigned *trims);

/* A thread whose heap is `me` (the empty heap if it has none) freed b
 * (its freed mark set), of page pg, whose owner word (page.h) was not
 * `me` as it is: on its way to the owner, through me's outbox, or, for
 * one of me's full pages, back onto it. */
void shoal_heap_remote_free(shoal_page_t *pg, shoal_block_t *b, shoal_heap_t *me,
                            uintptr_t owner);

/* The end of an allocation slow path: a thread whose exit handler has
 * run gives up the heap it borrowed for the call (heap.c says why). */
void shoal_heap_end_call(void);

/* Give the calling thread's cached pages and large spans back to the
 * pool, where they can merge with their free neighbours. */
void shoal_heap_drain_caches(void);

/* Return the calling thread's empty pages and cached slots to the pool,
 * with the blocks its inbox held; true if it held any.  (What exited
 * threads left goes back at the start of every purge pass:
 * shoal_heap_reclaim.) */
bool shoal_heap_collect(void);

/* The statistics' hooks, which the layer above registers at start-up (so
 * calls go down only): `grew` when a heap takes new memory - a fresh page,
 * a large block from the pool - the moments a thread's live memory is at
 * a high, to sample the peaks; `fork_child` in the child of a fork. */
void shoal_heap_set_hooks(void (*grew)(void), void (*fork_child)(void));

/* A heap took new memory: the `grew` hook, if one is registered. */
void shoal_heap_grew(void);

/* Read the options and register the thread-exit and fork handlers, once;
 * the first allocation does it, and so may anything else that needs it. */
void shoal_process_init(void);

/* Heaps ever taken by threads of this process (a fork child counts from
 * its one thread). */
size_t shoal_heap_created(void);

/* Heaps that threads hold now (relaxed: a count of the moment). */
size_t shoal_heaps_live(void);

/* fork(): hold the heap layer's lock across it; in the child, also
 * undo what threads that do not exist there left half done (`locked`:
 * the prepare handler took the locks, which a single-threaded process
 * does not, see fork.c). */
void shoal_heap_fork_prepare(void);
void shoal_heap_fork_parent(void);
void shoal_heap_fork_child(bool locked);

/* The purge clock calls this at the start of every pass (no heap
 * needed): heaps parked by exited threads for a purge delay (all of them
 * with `force`) give their pages up, and pages of exited threads whose
 * blocks have all been freed go back to the pool.  Returns how many
 * parked heaps a later pass must come back for. */
size_t shoal_heap_reclaim(bool force);

/* The purger, each time it wakes: ask the live heaps that have not
 * swept for two purge delays to sweep (heap.c, ask_sweep); and where
 * the stealer runs, send what the outboxes of idle threads have held
 * since its scan before (remote.c, "Idle outboxes"). */
void shoal_heap_scan_idle(void);

/* Whether any heap's outbox holds blocks (a hint, relaxed). */
bool shoal_heap_outboxes_hold(void);

/* Where p lies in the freed huge mapping some thread's huge slot holds
 * (core/huge.h), for naming a bad pointer: a huge block freed into one
 * thread's slot and freed again by another is a double free too. */
enum shoal_huge_freed shoal_heap_huge_slots_hold(const void *p);

/* Figures over all heaps. */
typedef struct shoal_heap_stats_s {
    size_t live, live_peak, created, exited, abandoned_pages;
    size_t structs, struct_bytes;       /* heap structs made, and their size each */
    uint64_t adopted, remote_frees, remote_received, remote_atomics;
    uint64_t large_allocs, large_frees, large_bytes;
    /* By order of size (the statistics' bins): blocks live, their bytes. */
    uint64_t large_live[SHOAL_MAX_ORDER + 1], large_bin_bytes[SHOAL_MAX_ORDER + 1];
    uint64_t allocs[SHOAL_CLASSES], frees[SHOAL_CLASSES], pages[SHOAL_CLASSES];
} shoal_heap_stats_t;
void shoal_heap_stats(shoal_heap_stats_t *st);

/* Count every heap's huge slot into figures from shoal_huge_stats. */
void shoal_heap_huge_stats(shoal_huge_stats_t *st);

#endif
