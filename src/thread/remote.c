/* remote.c - outboxes and inboxes of remote frees (see remote.h).
 *
 * Only liburcu's lock-free entry points are used (the `___cds_wfcq`
 * family, inline with _LGPL_SOURCE): the append of a batch, and the
 * first and dequeue of a single consumer, never the blocking forms,
 * which wait for a sender in poll(): a sender that a fork left behind
 * would make them wait forever.  Nothing here allocates or takes a lock.
 */
#define _LGPL_SOURCE
#include "remote.h"

#include <urcu/wfcqueue.h>
#include "../core/chunk_map.h"
#include "../core/message.h"
#include "../core/pool.h"
#include "../core/purge.h"
#include "../core/sync.h"
#include "heap.h"

void shoal_inbox_init(shoal_inbox_t *in)
{
    ___cds_wfcq_init(&in->head, &in->tail);
    in->broken = false;
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

/* Put first..last on dest's inbox. */
static void send(shoal_heap_t *by, shoal_heap_t *dest, struct cds_wfcq_node *first,
                 struct cds_wfcq_node *last)
{
    shoal_inbox_t *in = &dest->inbox;
    last->next = NULL;
    shoal_tsan_release(in);
    /* The exchange on the tail is a full barrier (liburcu's uatomic_xchg):
     * every store to the batch before it - the user's data, the freed
     * marks, the links - is visible before the store after it that links
     * the batch on, which is how the holder reaches the batch; the
     * holder's loads depend on that link (see shoal_remote_receive).
     * The exchange is the sender's last touch of the batch. */
    ___cds_wfcq_append(&in->head, &in->tail, first, last);
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

static void send_slot(shoal_heap_t *me, shoal_outbox_slot_t *s)
{
    shoal_outbox_t *out = &me->outbox;
    send(me, s->dest, s->first, s->last);
    out->bytes -= s->bytes;
    s->first = s->last = NULL;
    s->bytes = 0;
}

void shoal_remote_send_all(shoal_heap_t *me)
{
    shoal_outbox_t *out = &me->outbox;
    for (unsigned i = 0; out->bytes != 0 && i < SHOAL_OUTBOX_SLOTS; i++)
        if (out->slot[i].first != NULL)
            send_slot(me, &out->slot[i]);
}

/* Heaps are cache-line aligned and over a kilobyte apart: the bits above
 * the line pick a slot. */
static unsigned slot_of(const shoal_heap_t *dest)
{
    return (unsigned)(((uintptr_t)dest >> 6) * 0x9e3779b97f4a7c15u >> 60);
}

void shoal_remote_hold(shoal_heap_t *me, shoal_heap_t *dest, shoal_block_t *b, size_t size)
{
    _Static_assert(SHOAL_OUTBOX_SLOTS == 16, "slot_of keeps 4 bits");
    shoal_outbox_t *out = &me->outbox;
    shoal_outbox_slot_t *s = &out->slot[slot_of(dest)];
    struct cds_wfcq_node *node = (struct cds_wfcq_node *)b;
    if (s->dest != dest) {
        if (s->first != NULL)
            send_slot(me, s);       /* another owner had the slot */
        s->dest = dest;
    }
    node->next = s->first;
    if (s->first == NULL)
        s->last = node;
    s->first = node;
    s->bytes += size;
    out->bytes += size;
    if (out->bytes >= SHOAL_OUTBOX_BYTES)
        shoal_remote_send_all(me);
}

/* The page of b, if b is a freed block of a page (checked before its
 * link is read: a write after free may have replaced it). */
static shoal_page_t *page_of_sent(const shoal_block_t *b)
{
    if (shoal_chunk_of(b) != SHOAL_CHUNK_SUPERPAGE)
        return NULL;            /* reading b could fault */
    shoal_page_t *pg = shoal_slot_desc(b);
    pg -= pg->slot_offset;
    if (pg->kind != SHOAL_SLOT_PAGE || !shoal_block_is_start(pg, b) ||
        b->freed != shoal_freed_mark(pg))
        return NULL;
    return pg;
}

/* The inbox cannot be followed past b: its link was overwritten. */
static __attribute__((noinline, cold)) void broken(shoal_inbox_t *in, const shoal_block_t *b)
{
    /* What is on the queue from here on is lost (counted in flight for
     * good); nothing is corrupted, because nothing past b is touched, b
     * included: the tail may still point at it. */
    in->broken = true;
    shoal_fault("free", b, "remote free queue corrupted: the link in this block, freed by "
                           "another thread, was overwritten (a write after free)");
}

size_t shoal_remote_receive(shoal_heap_t *h, shoal_remote_apply_fn *apply)
{
    shoal_inbox_t *in = &h->inbox;
    size_t n = 0;
    struct cds_wfcq_node *node;
    if (in->broken)
        return 0;
    /* One consumer: only h's holder calls this.  The first node was
     * linked on by a sender, or checked as the link of the node before
     * it; each node's link is checked before the dequeue follows it. */
    while ((node = ___cds_wfcq_first_nonblocking(&in->head, &in->tail)) != NULL &&
           node != CDS_WFCQ_WOULDBLOCK) {
        /* TSan: the batch's sender released before its exchange, and we
         * see the batch only after it. */
        shoal_tsan_acquire(in);
        shoal_block_t *b = (shoal_block_t *)node;
        shoal_page_t *pg = page_of_sent(b);
        struct cds_wfcq_node *next = node->next;
        if (shoal_unlikely(pg == NULL)) {
            broken(in, b);
            break;
        }
        if (next == NULL) {
            /* The last node (or its sender's link is on its way): the
             * dequeue tries to move the tail back to the head, one
             * atomic operation. */
            count_atomic(h);
        } else if (shoal_unlikely(page_of_sent((shoal_block_t *)next) == NULL)) {
            broken(in, b);
            break;
        }
        /* The dequeue reads b's link again, and the holder's loads of the
         * next batch depend on it (liburcu orders them with
         * cmm_smp_read_barrier_depends), so the sender's stores before
         * its exchange are visible.  It fails only when the next sender
         * has exchanged the tail but not yet linked its batch on: the
         * rest waits for the next call. */
        if (___cds_wfcq_dequeue_nonblocking(&in->head, &in->tail) == CDS_WFCQ_WOULDBLOCK)
            break;
        shoal_heap_t *owner = atomic_load_explicit(&pg->heap, memory_order_relaxed);
        if (owner == h) {
            apply(h, pg, b);
            n++;
        } else {
            shoal_remote_send_one(h, owner, b);     /* the page moved: on to its heap now */
        }
    }
    shoal_count(&h->stats.remote_received, n);
    return n;
}

void shoal_remote_fork_child(shoal_heap_t *h)
{
    shoal_inbox_t *in = &h->inbox;
    struct cds_wfcq_node *last = &in->head.node, *next;
    if (in->broken)
        return;
    while (last != in->tail.p && (next = last->next) != NULL &&
           page_of_sent((shoal_block_t *)next) != NULL)
        last = next;
    last->next = NULL;
    in->tail.p = last;
}
