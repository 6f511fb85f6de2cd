/* remote.h - frees of blocks that another heap owns, sent as batched
 * messages (docs/design.md, "Remote frees").
 *
 * A thread that frees a block of a page another heap owns does not touch
 * the page: it keeps the block in its own heap's outbox, in a batch per
 * owner, with plain stores.  When the outbox holds SHOAL_OUTBOX_BYTES,
 * and on the idle sweep, alloc_collect and thread exit, each batch goes
 * to its owner's inbox as one list: one exchange on the inbox's tail
 * (liburcu's wait-free concurrent queue, wfcqueue).  The owner's holder
 * takes its inbox empty on its slow paths, one compare-and-swap for all
 * of it, and gives each block back to its page with plain stores.
 *
 * Ownership.  Every block is held by exactly one party at a time: a
 * user; the freeing heap's outbox (only that heap's holder touches it);
 * an inbox (from the exchange that links it on, after which the sender
 * touches only the node before its batch, to the dequeue that takes it,
 * which only the inbox heap's holder does); the freeing heap's stash
 * (stash.h, foreign blocks: that heap's holder hands it out again or
 * sends it home); or its page's lists (the page's heap's holder).  A
 * block in an outbox, an inbox or a stash still counts in its page's
 * `used`, so the page stays a page, of the same class, the whole time.
 *
 * A page may change heaps while blocks are on their way to the old one
 * (a parked heap is dismantled, an orphaned page is adopted): whoever
 * takes an inbox forwards a block whose page is no longer that heap's to
 * the page's heap now.  Only the holder of a heap moves pages away from
 * it, so that test is stable while the holder looks.
 */
#ifndef SHOAL_REMOTE_H
#define SHOAL_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <urcu/system.h>
#include <urcu/wfcqueue.h>
#include "../core/layout.h"
#include "../core/page.h"
#include "../core/sync.h"

#define SHOAL_OUTBOX_SLOTS 16           /* owners an outbox batches for at once */
#define SHOAL_OUTBOX_BYTES (16 << 10)   /* what it holds before it sends */

/* A batch for one owner: a list of blocks linked through their first
 * word (a wfcqueue node), `last` the one whose link is NULL. */
typedef struct shoal_outbox_slot_s {
    struct shoal_heap_s *dest;
    struct cds_wfcq_node *first, *last;
} shoal_outbox_slot_t;

/* The purger's claim on an idle outbox (remote.c, "Idle outboxes"): the
 * holder's turn against the purger's (sync.h); `since` is written by the
 * holder and by the purger when it empties the outbox. */
typedef struct shoal_outbox_s {
    size_t bytes;                       /* held in all batches */
    shoal_turn_flags_t turn;
    _Atomic uint32_t since;             /* the scan it last filled in, 0: empty */
    shoal_outbox_slot_t slot[SHOAL_OUTBOX_SLOTS];
} shoal_outbox_t;

/* The queue head is the holder's and the tail the senders': a line each.
 * The holder takes blocks off the head one by one. */
typedef struct shoal_inbox_s {
    struct __cds_wfcq_head head __attribute__((aligned(SHOAL_CACHE_LINE)));
    bool broken;                        /* a corrupted link stopped it (see remote.c) */
    struct cds_wfcq_tail tail __attribute__((aligned(SHOAL_CACHE_LINE)));
    bool closed;                        /* sends are dropped (shoal_remote_close) */
} shoal_inbox_t;

/* An empty inbox. */
void shoal_inbox_init(shoal_inbox_t *in);

/* Keep b (of size `size`, its freed mark already set) in me's outbox for
 * dest, the heap of its page; sends everything when the outbox is full.
 * me's holder only. */
void shoal_remote_hold(struct shoal_heap_s *me, struct shoal_heap_s *dest, shoal_block_t *b,
                       size_t size);

/* Send every batch of me's outbox (me's holder only). */
void shoal_remote_send_all(struct shoal_heap_s *me);

/* Idle outboxes (remote.c).  Whether the purger sends what waits in an
 * idle thread's outbox: only then may a block for a heap no thread
 * holds wait in one.  The purger turns it on where membarrier(2) is to
 * be had, and off when it leaves. */
bool shoal_remote_stealer_runs(void);
void shoal_remote_stealer_set(bool on);
/* A scan over all heaps (the purger only, one at a time): _scan_begin
 * gives its number; _claim_idle claims h's outbox if it has held blocks
 * since before the scan before this one; _scan_end after the claims;
 * then, after a barrier on every thread (shoal_os_barrier_all; `fenced`
 * false if it failed), _take_claimed sends what a claimed outbox holds,
 * unless its holder was at work in it, and lets it go.  _holds: whether
 * h's outbox holds blocks (a hint, relaxed). */
uint32_t shoal_remote_scan_begin(void);
void shoal_remote_scan_end(uint32_t scan);
bool shoal_remote_claim_idle(struct shoal_heap_s *h, uint32_t scan);
void shoal_remote_take_claimed(struct shoal_heap_s *h, bool fenced);
bool shoal_remote_outbox_holds(const struct shoal_heap_s *h);

/* Send b alone (`by`: the caller's heap, for the statistics, or NULL). */
void shoal_remote_send_one(struct shoal_heap_s *by, struct shoal_heap_s *dest, shoal_block_t *b);

/* Atomic operations of senders that have no heap. */
extern _Atomic uint64_t shoal_remote_orphan_atomics;

/* A block came home to pg, which now has no block out (used == 0), or
 * was full: the heap layer's turn (h's holder). */
typedef void shoal_remote_event_fn(struct shoal_heap_s *h, shoal_page_t *pg);

/* b came home, but it starts in an OS page its page's trim gave back:
 * it was free already, freed a second time by another thread.  Said,
 * and left off the page's lists. */
void shoal_remote_trimmed(const shoal_block_t *b);

/* b came home to pg, one of h's pages, whose owner word (read by the
 * caller, naming h) is `owner`: onto its local free list, as a free by
 * the owner would put it (h's holder only). */
static inline void shoal_remote_come_home(struct shoal_heap_s *h, shoal_page_t *pg,
                                          shoal_block_t *b, uintptr_t owner,
                                          shoal_remote_event_fn *event)
{
    if (shoal_unlikely(shoal_page_in_trimmed(pg, b))) {
        shoal_remote_trimmed(b);
        return;
    }
    b->link = shoal_encode(pg, pg->local_free);
    pg->local_free = b;
    if (shoal_unlikely(--pg->used == 0 || (owner & SHOAL_PAGE_FULL) != 0))
        event(h, pg);
}

/* Take h's inbox empty (h's holder only): each block of one of h's pages
 * goes on its page's local free list, as a free by the owner would put
 * it, calling `event` where one is due; blocks of other heaps' pages go
 * on to their page's heap.  Stops early, keeping the rest for next time,
 * where a sender has not finished linking.  Returns the blocks that came
 * home. */
size_t shoal_remote_receive(struct shoal_heap_s *h, shoal_remote_event_fn *event);

/* Whether nothing waits in the inbox, as its holder sees it (a batch a
 * sender is linking on meanwhile is seen next time): the test before a
 * receive on a path that runs at every page gone dry, where the call of
 * an empty receive cost a fifth of a random replacement's slow path. */
static inline bool shoal_remote_inbox_empty(shoal_inbox_t *in)
{
    return CMM_LOAD_SHARED(in->head.node.next) == NULL;
}

/* In a fork child (one thread, the others gone mid-operation): cut h's
 * inbox at the first link a vanished sender left unwritten, so that it
 * takes blocks again, and unless h is the child's own heap (`ours`),
 * keep the purger from its outbox.  The blocks of that batch, and of
 * that outbox, are lost to the child.  An inbox the forking thread
 * itself was appending to (a fork from a signal handler) is given up
 * instead: see remote.c. */
void shoal_remote_fork_child(struct shoal_heap_s *h, bool ours);

/* In a fork child: h's inbox is never taken again, for its heap's
 * thread did not come with the fork (heap.c, "vanished heaps"): what it
 * holds stays there, and a batch sent to it later is dropped, untouched
 * (those blocks are found by their freed marks). */
void shoal_remote_close(struct shoal_heap_s *h);

/* The inbox this thread is appending a batch to, NULL outside an append
 * (set by the sender, read by its own fork child). */
extern __thread shoal_inbox_t *shoal_remote_appending __attribute__((tls_model("initial-exec")));

#endif
