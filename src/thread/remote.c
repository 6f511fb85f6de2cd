/* remote.c - outboxes and inboxes of remote frees (see remote.h).
 *
 * Only liburcu's lock-free entry points are used (the `___cds_wfcq`
 * family, inline with _LGPL_SOURCE): the append of a batch, and the
 * dequeue of the one consumer; never the blocking forms,
 * which wait for a sender in poll(): a sender that a fork left behind
 * would make them wait forever.  Nothing here allocates or takes a lock.
 */
#define _LGPL_SOURCE
#include "remote.h"

#include <urcu/wfcqueue.h>
#include <sched.h>
#include "../core/chunk_map.h"
#include "../core/message.h"
#include "../core/pool.h"
#include "../core/purge.h"
#include "../core/sync.h"
#include "heap.h"
#include "purger.h"

void shoal_inbox_init(shoal_inbox_t *in)
{
    ___cds_wfcq_init(&in->head, &in->tail);
    in->broken = in->closed = false;
}

/* Atomic operations of heapless senders (see shoal_heap_stats). */
_Atomic uint64_t shoal_remote_orphan_atomics;

/* One atomic read-modify-write on the remote-free path, counted in the
 * heap `by` (held by the caller), or globally for a caller with none. */
static void count_atomic(shoal_heap_t *by)
{
    if (by != NULL && by != &shoal_empty_heap)
        shoal_count(&by->stats.remote_atomics, 1);
    else if (SHOAL_STATS_ENABLED)
        atomic_fetch_add_explicit(&shoal_remote_orphan_atomics, 1, memory_order_relaxed);
}

__thread shoal_inbox_t *shoal_remote_appending __attribute__((tls_model("initial-exec")));

/* Put first..last on dest's inbox. */
static void send(shoal_heap_t *by, shoal_heap_t *dest, struct cds_wfcq_node *first,
                 struct cds_wfcq_node *last)
{
    shoal_inbox_t *in = &dest->inbox;
    /* Not a store to a block of a batch for a closed inbox: the page it
     * belongs to may have been rebuilt since, the block handed out. */
    if (shoal_unlikely(in->closed))
        return;
    last->next = NULL;
    shoal_tsan_release(in);
    /* For this thread's own fork child (shoal_remote_fork_child): only
     * a signal handler on this thread can read it, so compiler barriers
     * order it (the append's exchange is one, on the way in). */
    shoal_remote_appending = in;
    /* The exchange on the tail is a full barrier (liburcu's uatomic_xchg):
     * every store to the batch before it - the user's data, the freed
     * marks, the links - is visible before the store after it that links
     * the batch on, which is how the holder reaches the batch; the
     * holder's loads depend on that link (see shoal_remote_receive).
     * After the exchange the sender touches only the node before its
 * batch (the link), never the batch. */
    ___cds_wfcq_append(&in->head, &in->tail, first, last);
    cmm_barrier();
    shoal_remote_appending = NULL;
    count_atomic(by);
    /* Nobody may take a parked heap's inbox soon: a purge pass will. */
    if (!atomic_load_explicit(&dest->live, memory_order_relaxed))
        shoal_purge_note_free();
}

void shoal_remote_send_one(shoal_heap_t *by, shoal_heap_t *dest, shoal_block_t *b)
{
    struct cds_wfcq_node *node = (struct cds_wfcq_node *)b;
    send(by, dest, node, node);
}

/* ---- idle outboxes ------------------------------------------------------
 * An outbox is sent when it fills, on its holder's slow paths and at its
 * exit.  A thread that stops calling the allocator would keep what its
 * outbox holds for ever, and each block there its page from the pool;
 * so the purger thread sends what an outbox has held for a whole scan
 * (a scan runs each time the purger wakes: every purge delay while work
 * is pending, every second otherwise), while the holder is away from it.
 * Blocks held are not work pending: that would make the purger run a
 * pass every delay in every process that frees remotely, and a pass
 * dismantles the heaps parked for a delay, which a thread that comes
 * next would have taken over warm (larson's peak RSS 9.0 -> 11.4 MiB).
 *
 * The exclusion is a holder's turn against a claimer's (sync.h): the
 * holder's costs it no atomic read-modify-write.  The take copies the
 * batches out and empties the outbox, and lets it go before it sends
 * them: a holder that finds its outbox claimed sends the block at hand
 * alone, or waits a few stores.  Where membarrier fails, the purger
 * takes nothing, and stops claiming.
 *
 * A scan takes the outboxes that have held blocks since before the scan
 * before it: `since` is the scan number current when the outbox last
 * went from empty to holding; the purger moves the number on after its
 * claims, so a batch started during them waits for the next scan. */
static _Atomic uint32_t scan_now = 1;
static _Atomic bool stealer_on;

bool shoal_remote_stealer_runs(void)
{
    return atomic_load_explicit(&stealer_on, memory_order_relaxed);
}

void shoal_remote_stealer_set(bool on)
{
    atomic_store_explicit(&stealer_on, on, memory_order_relaxed);
}

/* Empty the outbox (its holder in its turn, or the purger on its
 * claim): its batches into got[], how many returned. */
static unsigned outbox_empty(shoal_outbox_t *out, shoal_outbox_slot_t got[SHOAL_OUTBOX_SLOTS])
{
    unsigned n = 0;
    for (unsigned i = 0; out->bytes != 0 && i < SHOAL_OUTBOX_SLOTS; i++) {
        shoal_outbox_slot_t *s = &out->slot[i];
        if (s->first != NULL) {
            got[n++] = *s;
            s->first = s->last = NULL;
        }
    }
    out->bytes = 0;
    atomic_store_explicit(&out->since, 0, memory_order_relaxed);
    return n;
}

static void send_batches(shoal_heap_t *by, const shoal_outbox_slot_t *got, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        send(by, got[i].dest, got[i].first, got[i].last);
}

/* Send every batch of me's outbox (its holder, in its turn). */
static void send_held(shoal_heap_t *me, shoal_outbox_t *out)
{
    shoal_outbox_slot_t got[SHOAL_OUTBOX_SLOTS];
    send_batches(me, got, outbox_empty(out, got));
}

void shoal_remote_send_all(shoal_heap_t *me)
{
    shoal_outbox_t *out = &me->outbox;
    while (!shoal_holder_enter(&out->turn))
        while (shoal_claimer_raised(&out->turn))
            sched_yield();
    send_held(me, out);
    shoal_holder_leave(&out->turn);
}

uint32_t shoal_remote_scan_begin(void)
{
    return atomic_load_explicit(&scan_now, memory_order_relaxed);
}

void shoal_remote_scan_end(uint32_t scan)
{
    atomic_store_explicit(&scan_now, scan + 1 != 0 ? scan + 1 : 1, memory_order_relaxed);
}

bool shoal_remote_claim_idle(shoal_heap_t *h, uint32_t scan)
{
    uint32_t since = atomic_load_explicit(&h->outbox.since, memory_order_relaxed);
    if (since == 0 || since == scan)
        return false;
    shoal_claimer_raise(&h->outbox.turn);
    return true;
}

void shoal_remote_take_claimed(shoal_heap_t *h, bool fenced)
{
    shoal_outbox_t *out = &h->outbox;
    if (!shoal_claimer_raised(&out->turn))
        return;
    shoal_outbox_slot_t got[SHOAL_OUTBOX_SLOTS];
    unsigned n = shoal_claimer_may_take(&out->turn, fenced) ? outbox_empty(out, got) : 0;
    shoal_claimer_release(&out->turn);
    send_batches(NULL, got, n);
}

bool shoal_remote_outbox_holds(const shoal_heap_t *h)
{
    return atomic_load_explicit(&h->outbox.since, memory_order_relaxed) != 0;
}

/* A batch starts: the slot is empty, or holds another owner's batch,
 * which goes first, and the rest with it: so `bytes` counts exactly what
 * is held.  The end of the holder's turn (the rare ends of
 * shoal_remote_hold are tail calls, which keeps it without a frame). */
static __attribute__((noinline)) void start_batch(shoal_heap_t *me, shoal_outbox_slot_t *s,
                                                  shoal_heap_t *dest, shoal_block_t *b,
                                                  size_t size)
{
    shoal_outbox_t *out = &me->outbox;
    if (s->first != NULL)
        send_held(me, out);
    struct cds_wfcq_node *node = (struct cds_wfcq_node *)b;
    node->next = NULL;
    s->dest = dest;
    s->first = s->last = node;
    if (out->bytes == 0)
        atomic_store_explicit(&out->since, atomic_load_explicit(&scan_now, memory_order_relaxed),
                              memory_order_relaxed);
    out->bytes += size;
    shoal_holder_leave(&out->turn);
}

/* The outbox is full: everything goes, and the holder's turn ends.  A
 * live owner takes its inbox on its slow paths, and one that takes none
 * for long when the purger asks it to (heap.c, ask_sweep): the purger
 * starts here where none runs - at the end of a free, where no lock is
 * held and no heap is half edited, as the start's pthread_create may
 * allocate. */
static __attribute__((noinline)) void send_full(shoal_heap_t *me)
{
    send_held(me, &me->outbox);
    shoal_holder_leave(&me->outbox.turn);
    shoal_purger_start_for_inbox();
}

void shoal_remote_hold(shoal_heap_t *me, shoal_heap_t *dest, shoal_block_t *b, size_t size)
{
    shoal_outbox_t *out = &me->outbox;
    if (shoal_unlikely(!shoal_holder_enter(&out->turn))) {
        shoal_remote_send_one(me, dest, b);     /* the purger is at it */
        return;
    }
    shoal_outbox_slot_t *s = &out->slot[dest->outbox_slot];
    struct cds_wfcq_node *node = (struct cds_wfcq_node *)b;
    if (shoal_unlikely(s->dest != dest || s->first == NULL)) {
        start_batch(me, s, dest, b, size);
        return;
    }
    node->next = s->first;
    s->first = node;
    out->bytes += size;
    if (shoal_unlikely(out->bytes >= SHOAL_OUTBOX_BYTES)) {
        send_full(me);
        return;
    }
    shoal_holder_leave(&out->turn);
}

/* The page of b, if b is a freed block of a page; `near` is a block known
 * to lie in a pool superpage, or NULL.  Checked before b's link is read:
 * a write after free may have put anything there.  b in near's superpage
 * can be read (superpages stay mapped); elsewhere the chunk map says. */
static shoal_page_t *page_of_sent(const shoal_block_t *b, const void *near)
{
    if ((((uintptr_t)b ^ (uintptr_t)near) >> SHOAL_SP_SHIFT) != 0 &&
        shoal_chunk_of(b) != SHOAL_CHUNK_SUPERPAGE)
        return NULL;
    shoal_page_t *pg = shoal_span_of(b);
    /* The freed mark, as malloc checks a block it pops: only free blocks
     * of pg carry it (and user data, with probability 2^-64). */
    if (pg->kind != SHOAL_SLOT_PAGE || b->freed != shoal_freed_mark(pg))
        return NULL;
    return pg;
}

/* The inbox cannot be followed past b: its link was overwritten. */
static __attribute__((noinline, cold)) void broken(shoal_inbox_t *in, const shoal_block_t *b)
{
    /* b and what is queued after it are lost (counted in flight for
     * good); nothing is corrupted: b stays off every free list, and
     * nothing more is taken from the inbox. */
    in->broken = true;
    shoal_fault("free", b, "remote free queue corrupted: the link in this block, freed by "
                           "another thread, was overwritten (a write after free)");
}

__attribute__((noinline, cold)) void shoal_remote_trimmed(const shoal_block_t *b)
{
    shoal_fault("free", b, "double free (the block is already free)");
}

/* The page of `next`, the block that b's link leads to, b being of pg:
 * as page_of_sent, with the common case first - the two in one slot,
 * so in one page (a batch is one freer's frees, often of one page in
 * a row), where only the freed mark is left to check. */
static inline shoal_page_t *page_of_next(const shoal_block_t *next, const shoal_block_t *b,
                                         shoal_page_t *pg)
{
    if (shoal_likely((((uintptr_t)next ^ (uintptr_t)b) >> SHOAL_SLOT_SHIFT) == 0))
        return next->freed == shoal_freed_mark(pg) ? pg : NULL;
    return page_of_sent(next, b);
}

size_t shoal_remote_receive(shoal_heap_t *h, shoal_remote_event_fn *event)
{
    shoal_inbox_t *in = &h->inbox;
    size_t n = 0;
    /* Blocks come off the inbox's head one by one, as liburcu's dequeue
     * (nonblocking) takes them.  A block with a link is not the queue's
     * last, and no sender writes to it again (only the one whose exchange
     * of the tail returned it wrote its link): the head moves on past it
     * with a plain store, the dequeue's, made here because the link is
     * already read (no sender reads the head of a queue that is not
     * empty, and the tail stays off the head node while the holder walks).
     * A block without a link may be the last: liburcu's dequeue takes it,
     * and its compare-and-swap of the tail, from the block to the empty
     * queue, is the walk's only atomic operation.  The swap is a full
     * barrier, after the dequeue's store of an empty head: a sender whose
     * exchange of the tail comes after it gets the empty queue and links
     * its batch onto the head, seen by the next call; one whose exchange
     * came first makes the swap fail and will link onto the block, and
     * the dequeue stops there (nonblocking: it does not wait) with the
     * block kept at the head for the next call.  A batch linked on
     * during the walk is taken in the same walk, which stays bounded:
     * every block sent here is of a page this heap holds, out of it
     * before the walk began (the holder hands none out while it walks).
     * An empty head is empty enough: the tail is not looked at, and the
     * senders' line stays theirs.
     *
     * Each link is checked before anything reads through it: the first
     * block here, put on by a sender (or kept from a call that stopped),
     * and every block after it, reached by the link of the one before,
     * which is held back until its link has passed: a block whose link
     * was overwritten never goes home. */
    struct cds_wfcq_node *node = CMM_LOAD_SHARED(in->head.node.next);
    if (node == NULL || in->broken)
        return 0;
    cmm_smp_read_barrier_depends();
    shoal_tsan_acquire(in);     /* (see below) */
    shoal_page_t *pg = page_of_sent((shoal_block_t *)node, NULL);
    if (shoal_unlikely(pg == NULL)) {
        broken(in, (shoal_block_t *)node);
        return 0;
    }
    for (;;) {
        struct cds_wfcq_node *next = CMM_LOAD_SHARED(node->next);
        if (shoal_likely(next != NULL)) {
            CMM_STORE_SHARED(in->head.node.next, next);
        } else {
            int state;
            /* Counted as the swap it is to be; a link that lands before
             * the dequeue reads it makes the count one too many, never
             * one too few. */
            count_atomic(h);
            if (___cds_wfcq_dequeue_with_state_nonblocking(&in->head, &in->tail, &state) ==
                CDS_WFCQ_WOULDBLOCK)
                break;          /* node stays at the head */
            if (!(state & CDS_WFCQ_STATE_LAST))
                next = in->head.node.next;      /* a link landed: the dequeue moved on */
        }
        /* The loads of a block depend on the load of the link that
         * found it (ordered by cmm_smp_read_barrier_depends, as in
         * liburcu's dequeue), so its sender's stores before the exchange
         * - the user's data, the freed mark, the links - are visible.  TSan: each sender
         * released the inbox before its exchange, and linked its batch
         * on after; the link that leads on from here was read. */
        cmm_smp_read_barrier_depends();
        shoal_tsan_acquire(in);
        shoal_block_t *b = (shoal_block_t *)node;
        shoal_page_t *next_pg = NULL;
        if (next != NULL &&
            shoal_unlikely((next_pg = page_of_next((shoal_block_t *)next, b, pg)) == NULL)) {
            broken(in, b);      /* b stays out: nothing reads past it */
            break;
        }
        /* Acquire, as free's: a heap this block is forwarded to is seen
         * set up. */
        uintptr_t owner = shoal_page_owner(pg);
        if (shoal_likely(shoal_owner_heap(owner) == h)) {
            shoal_remote_come_home(h, pg, b, owner, event);
            n++;
        } else {
            shoal_remote_send_one(h, shoal_owner_heap(owner), b);   /* the page moved: on */
        }
        if (next == NULL)
            break;              /* the last: the inbox is empty */
        node = next;
        pg = next_pg;
    }
    shoal_count(&h->stats.remote_received, n);
    return n;
}

void shoal_remote_fork_child(shoal_heap_t *h, bool ours)
{
    /* The outbox of a thread the child does not have is not the purger's
     * to send: that thread may have been in its turn, and the child's
     * memory need not show its stores in their order.  Its blocks stay
     * there (a leak in the child, no more). */
    if (!ours)
        atomic_store_explicit(&h->outbox.since, 0, memory_order_relaxed);
    shoal_inbox_t *in = &h->inbox;
    struct cds_wfcq_node *last = &in->head.node, *next;
    if (in->broken)
        return;
    if (in == shoal_remote_appending) {
        /* A signal handler forked while this thread was inside its own
         * append to this inbox, perhaps between the exchange and the
         * link.  That append goes on when the handler returns, and its
         * link is a store into the block that was the tail: cut there,
         * the inbox would let that block go home and be handed out
         * before the store lands in it.  So the inbox is given up, as a
         * broken one is: what it holds and is sent stays there, lost to
         * the child, and the store lands in a block nobody reads. */
        in->broken = true;
        return;
    }
    while (last != in->tail.p && (next = last->next) != NULL &&
           page_of_sent((shoal_block_t *)next, NULL) != NULL)
        last = next;
    last->next = NULL;
    in->tail.p = last;
}

void shoal_remote_close(shoal_heap_t *h)
{
    h->inbox.broken = h->inbox.closed = true;
}
