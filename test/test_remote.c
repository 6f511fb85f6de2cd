/* Remote frees as messages (src/thread/remote.c): the queue hand-off on
 * its own (heaps and pages set up by the test, which plays their
 * holders), then through the alloc_* API: the interleaving that once
 * lost a notification, thread exit and fork with batches in flight, and
 * how many atomic operations a remote free costs. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shoal.h"
#include "core/huge.h"
#include "os/os.h"
#include "core/page.h"
#include "core/pool.h"
#include "core/size_class.h"
#include "thread/heap.h"
#include "thread/remote.h"

#include "test_util.h"

#ifdef UNDER_TSAN
#define PAGES 4
#else
#define PAGES 24
#endif
#define SENDERS 3
#define MAX_BLOCKS (PAGES * 4096)

static alloc_stats_t take(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st;
}

/* ---- the hand-off on its own ------------------------------------------ */

/* Heaps the test holds itself: only their inboxes, outboxes and counters
 * are used. */
static shoal_heap_t owner, other, senders[SENDERS];

static void heap_open(shoal_heap_t *h)
{
    memset(h, 0, sizeof *h);
    shoal_inbox_init(&h->inbox);
    atomic_store(&h->live, 1);
}

/* Pages of one class owned by `h`, every block carved and handed out. */
typedef struct pages_s {
    shoal_page_t *pg[PAGES];
    shoal_block_t *blocks[MAX_BLOCKS];
    size_t n, bsize;
} pages_t;

static pages_t pages;

static void pages_open(pages_t *p, size_t bsize, shoal_heap_t *h)
{
    unsigned cls = shoal_size_to_class(bsize);
    p->bsize = shoal_class_size(cls);
    p->n = 0;
    for (unsigned i = 0; i < PAGES; i++) {
        shoal_span_t s;
        assert_true(shoal_pool_claim(0, &s));
        shoal_page_t *pg = p->pg[i] = shoal_span_head(&s);
        shoal_page_init(pg, cls, 0, s.zero);
        shoal_page_set_owner(pg, h, false);
        while (atomic_load(&pg->capacity) < pg->reserved)
            shoal_page_extend(pg);
        for (shoal_block_t *b = pg->free; b != NULL; b = shoal_decode(pg, b->link))
            p->blocks[p->n++] = b;
        for (size_t k = p->n - pg->reserved; k < p->n; k++)
            p->blocks[k]->freed = 0;            /* handed out, as malloc does */
        pg->free = NULL;
        pg->used = pg->reserved;
    }
}

static void pages_close(pages_t *p)
{
    for (unsigned i = 0; i < PAGES; i++) {
        shoal_page_t *pg = p->pg[i];
        shoal_superpage_t *sp = shoal_superpage_of(pg);
        shoal_page_fini(pg);
        shoal_pool_release(sp, (unsigned)(pg - sp->pages), 1);
    }
}

static unsigned char pattern(size_t index, size_t byte)
{
    return (unsigned char)(index * 7 + byte * 13 + 1);
}

/* Where the receiving side records what came home. */
static unsigned char seen[MAX_BLOCKS];
static _Atomic long failures;

static size_t index_of(const void *b)
{
    for (unsigned i = 0; i < PAGES; i++) {
        shoal_page_t *pg = pages.pg[i];
        const char *c = b;
        if (c >= pg->start && c < pg->start + (size_t)pg->reserved * pages.bsize)
            return i * (size_t)pg->reserved + (size_t)(c - pg->start) / pages.bsize;
    }
    return SIZE_MAX;
}

/* Pages that reported having no block out (the heap layer's event). */
static _Atomic unsigned emptied;

static void note_event(shoal_heap_t *h, shoal_page_t *pg)
{
    if (h != &owner || pg->used != 0)
        atomic_fetch_add(&failures, 1);
    else
        atomic_fetch_add(&emptied, 1);
}

/* What came home to the owner's pages since the last call, checked and
 * taken off their local lists: each block is one of ours, marked free,
 * with its sender's pattern, and seen once. */
static size_t take_home(void)
{
    size_t got = 0;
    for (unsigned p = 0; p < PAGES; p++) {
        shoal_page_t *pg = pages.pg[p];
        for (shoal_block_t *b = pg->local_free; b != NULL; b = shoal_decode(pg, b->link)) {
            size_t i = index_of(b);
            if (i == SIZE_MAX || b->freed != shoal_freed_mark(pg)) {
                atomic_fetch_add(&failures, 1);
                break;
            }
            const unsigned char *c = (const unsigned char *)b;
            for (size_t k = sizeof(shoal_block_t); k < pages.bsize; k++)
                if (c[k] != pattern(i, k)) {
                    atomic_fetch_add(&failures, 1);
                    break;
                }
            seen[i]++;
            got++;
        }
        pg->local_free = NULL;
    }
    return got;
}

static size_t receive_home(shoal_heap_t *h)
{
    size_t n = shoal_remote_receive(h, note_event);
    size_t got = take_home();
    if (got != n)
        atomic_fetch_add(&failures, 1);
    return got;
}

/* What free does before it sends: the pattern is the user's data. */
static void prepare_free(shoal_block_t *b)
{
    size_t i = index_of(b);
    unsigned char *c = (unsigned char *)b;
    for (size_t k = sizeof(shoal_block_t); k < pages.bsize; k++)
        c[k] = pattern(i, k);
    shoal_page_t *pg = shoal_slot_desc(b);
    b->freed = shoal_freed_mark(pg);
}

typedef struct sender_arg_s {
    unsigned id;
    bool one_by_one;
} sender_arg_t;

static void *sender(void *arg)
{
    sender_arg_t *a = arg;
    shoal_heap_t *me = &senders[a->id];
    for (size_t i = a->id; i < pages.n; i += SENDERS) {
        shoal_block_t *b = pages.blocks[i];
        prepare_free(b);
        if (a->one_by_one)
            shoal_remote_send_one(me, &owner, b);
        else
            shoal_remote_hold(me, &owner, b, pages.bsize);
        if (i % 509 == 0)
            sched_yield();
    }
    shoal_remote_send_all(me);
    return NULL;
}

/* SENDERS threads free every block of the owner's pages while the owner
 * takes its inbox in a loop: every block comes home exactly once, with
 * the sender's writes visible; batches of one block, and batches of a
 * whole outbox (256 blocks of 64 bytes, 1024 of 16). */
static void handoff(size_t bsize, bool one_by_one)
{
    heap_open(&owner);
    for (unsigned s = 0; s < SENDERS; s++)
        heap_open(&senders[s]);
    pages_open(&pages, bsize, &owner);
    memset(seen, 0, sizeof seen);
    atomic_store(&failures, 0);
    atomic_store(&emptied, 0);
    pthread_t t[SENDERS];
    sender_arg_t args[SENDERS];
    for (unsigned s = 0; s < SENDERS; s++) {
        args[s] = (sender_arg_t){ s, one_by_one };
        assert_int_equal(pthread_create(&t[s], NULL, sender, &args[s]), 0);
    }
    size_t got = 0;
    for (long spins = 0; got < pages.n && spins < 200000000; spins++) {
        size_t n = receive_home(&owner);
        got += n;
        if (n == 0)
            sched_yield();
    }
    for (unsigned s = 0; s < SENDERS; s++)
        pthread_join(t[s], NULL);
    got += receive_home(&owner);
    assert_int_equal(atomic_load(&failures), 0);
    assert_int_equal(got, pages.n);
    assert_int_equal(atomic_load(&emptied), PAGES);        /* once each */
    for (size_t i = 0; i < pages.n; i++)
        assert_int_equal(seen[i], 1);
    for (unsigned i = 0; i < PAGES; i++)
        assert_int_equal(pages.pg[i]->used, 0);
    assert_int_equal(shoal_counter_read(&owner.stats.remote_received), pages.n);
    /* One atomic operation a batch sent; the owner's on top, at most one
     * a take. */
    uint64_t sent = 0;
    for (unsigned s = 0; s < SENDERS; s++) {
        assert_int_equal(senders[s].outbox.bytes, 0);
        sent += shoal_counter_read(&senders[s].stats.remote_atomics);
    }
    size_t per_batch = SHOAL_OUTBOX_BYTES / pages.bsize;
    if (one_by_one)
        assert_int_equal(sent, pages.n);
    else        /* full batches, and each sender's last, smaller one */
        assert_true(sent <= pages.n / per_batch + 2 * SENDERS);
    pages_close(&pages);
}

static void test_handoff_one_by_one(void **state)
{
    (void)state;
    handoff(64, true);
}

static void test_handoff_batches_64(void **state)
{
    (void)state;
    handoff(64, false);
}

static void test_handoff_batches_16(void **state)
{
    (void)state;
    handoff(16, false);
}

/* A take that empties the inbox costs one atomic operation, however
 * many batches wait there, and a look at an empty inbox none.  A take
 * that meets a sender between its exchange and its link (made here by
 * hand) stops before that sender's batch and goes on from there the next
 * time: nothing is taken twice or lost. */
static void test_take_costs_one_atomic(void **state)
{
    (void)state;
    heap_open(&owner);
    heap_open(&senders[0]);
    heap_open(&senders[1]);
    pages_open(&pages, 64, &owner);
    memset(seen, 0, sizeof seen);
    atomic_store(&failures, 0);
    size_t sent = 0;
    for (unsigned batch = 0; batch < 3; batch++) {
        shoal_heap_t *me = &senders[batch % 2];
        for (unsigned k = 0; k < 10; k++) {
            prepare_free(pages.blocks[sent]);
            shoal_remote_hold(me, &owner, pages.blocks[sent++], pages.bsize);
        }
        shoal_remote_send_all(me);
    }
    prepare_free(pages.blocks[sent]);
    shoal_remote_send_one(&senders[0], &owner, pages.blocks[sent++]);
    assert_int_equal(receive_home(&owner), sent);
    assert_int_equal(shoal_counter_read(&owner.stats.remote_atomics), 1);
    assert_int_equal(receive_home(&owner), 0);
    assert_int_equal(shoal_counter_read(&owner.stats.remote_atomics), 1);

    /* Two blocks, then a third sender that has exchanged the tail (from
     * the second block to its own) and not yet linked. */
    shoal_block_t *b1 = pages.blocks[sent], *b2 = pages.blocks[sent + 1];
    shoal_block_t *late = pages.blocks[sent + 2];
    prepare_free(b1);
    prepare_free(b2);
    prepare_free(late);
    shoal_remote_send_one(NULL, &owner, b1);
    shoal_remote_send_one(NULL, &owner, b2);
    ((struct cds_wfcq_node *)late)->next = NULL;
    owner.inbox.tail.p = (struct cds_wfcq_node *)late;
    assert_int_equal(receive_home(&owner), 1);             /* b1; b2 waits for its link */
    assert_int_equal(seen[index_of(b1)], 1);
    assert_int_equal(seen[index_of(b2)], 0);
    assert_int_equal(receive_home(&owner), 0);             /* still waiting */
    ((struct cds_wfcq_node *)b2)->next = (struct cds_wfcq_node *)late;     /* the link lands */
    assert_int_equal(receive_home(&owner), 2);
    assert_int_equal(seen[index_of(b2)], 1);
    assert_int_equal(seen[index_of(late)], 1);
    assert_int_equal(receive_home(&owner), 0);
    assert_int_equal(atomic_load(&failures), 0);
    pages_close(&pages);
}

/* A block sent to a heap its page has left is forwarded to the page's
 * heap now by whoever takes the old heap's inbox. */
static void test_forwarded_when_page_moved(void **state)
{
    (void)state;
    heap_open(&owner);
    heap_open(&other);
    pages_open(&pages, 64, &owner);
    memset(seen, 0, sizeof seen);
    atomic_store(&failures, 0);
    shoal_block_t *b = pages.blocks[5];
    prepare_free(b);
    shoal_remote_send_one(NULL, &other, b);     /* sent while the page was other's */
    assert_int_equal(receive_home(&other), 0);
    assert_int_equal(seen[index_of(b)], 0);               /* not applied there ... */
    assert_int_equal(receive_home(&owner), 1);
    assert_int_equal(seen[index_of(b)], 1);               /* ... but here, once */
    assert_int_equal(atomic_load(&failures), 0);
    pages_close(&pages);
}

/* The owner's heap and pages of 64 B blocks, every block out, for the
 * fork cases below. */
static void fork_case_open(void)
{
    heap_open(&owner);
    pages_open(&pages, 64, &owner);
    memset(seen, 0, sizeof seen);
    atomic_store(&failures, 0);
}

/* A fork child whose parent had a sender between its exchange on the
 * tail and its link (made here by hand): without the cut, every later
 * block would queue behind a link nobody will write. */
static void test_fork_child_cuts_unlinked_tail(void **state)
{
    (void)state;
    fork_case_open();
    shoal_block_t *lost = pages.blocks[1], *b = pages.blocks[2];
    prepare_free(lost);
    ((struct cds_wfcq_node *)lost)->next = NULL;
    owner.inbox.tail.p = (struct cds_wfcq_node *)lost;     /* exchanged, never linked */
    assert_int_equal(receive_home(&owner), 0);
    shoal_remote_fork_child(&owner, true);
    prepare_free(b);
    shoal_remote_send_one(NULL, &owner, b);
    assert_int_equal(receive_home(&owner), 1);
    assert_int_equal(seen[index_of(b)], 1);
    assert_int_equal(seen[index_of(lost)], 0);
    assert_int_equal(atomic_load(&failures), 0);
    pages_close(&pages);
}

/* A fork from a signal handler that interrupted this thread's own append
 * between its exchange and its link (made here by hand): cut at the old
 * tail, the child would take that block home while the append, resumed
 * when the handler returns, is still to store its link into it - a
 * block handed out and then written.  The child gives the inbox up. */
static void test_fork_child_leaves_own_unfinished_append(void **state)
{
    (void)state;
    fork_case_open();
    shoal_block_t *tail = pages.blocks[1], *b = pages.blocks[2];
    prepare_free(tail);
    shoal_remote_send_one(NULL, &owner, tail);
    prepare_free(b);
    ((struct cds_wfcq_node *)b)->next = NULL;
    shoal_remote_appending = &owner.inbox;                  /* in the append of b: */
    owner.inbox.tail.p = (struct cds_wfcq_node *)b;        /* exchanged, not linked */
    shoal_remote_fork_child(&owner, false);                 /* the handler forks */
    ((struct cds_wfcq_node *)tail)->next = (struct cds_wfcq_node *)b;     /* it returns */
    shoal_remote_appending = NULL;
    assert_int_equal(receive_home(&owner), 0);
    assert_int_equal(seen[index_of(tail)], 0);
    assert_int_equal(seen[index_of(b)], 0);
    assert_int_equal(atomic_load(&failures), 0);
    pages_close(&pages);
}

/* ---- through the API -------------------------------------------------- */

#define BSIZE 1024                  /* 64 blocks to a 64 KiB page */
#define PER_PAGE (SHOAL_SLOT_SIZE / BSIZE)

static pthread_barrier_t step, step2;

static void wait_step(void)
{
    pthread_barrier_wait(&step);
}

static void fill(void *p, size_t n, unsigned seed)
{
    memset(p, (int)(seed * 29 + 3) & 0xff, n);
}

static bool filled(const void *p, size_t n, unsigned seed)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != ((seed * 29 + 3) & 0xff))
            return false;
    return true;
}

/* A test through the API starts from an allocator with nothing waiting
 * and from no failures; what it ends with is compared with this. */
static alloc_stats_t settled_start(void)
{
    alloc_collect(true);
    atomic_store(&failures, 0);
    return take();
}

/* Everything has come home: nothing in flight, nothing live of the
 * class, no page held for it, nothing orphaned, relative to `base`. */
static void assert_all_home(const alloc_stats_t *base, size_t bsize)
{
    alloc_collect(true);
    alloc_stats_t st = take();
    unsigned c = shoal_size_to_class(bsize);
    assert_int_equal(st.remote_in_flight, base->remote_in_flight);
    assert_int_equal(st.classes[c].live_blocks, base->classes[c].live_blocks);
    assert_int_equal(st.classes[c].pages, base->classes[c].pages);
    assert_int_equal(st.heaps_abandoned_pages, 0);
}

/* The interleaving that made the old notify protocol lose a page (issue
 * of a three-state in_notify word): A frees into H's full page P and is
 * held up before its free reaches H; H uses P up and marks it full again;
 * B frees into P and exits; H's thread exits; then A goes on.  With
 * messages there is no notification to lose: A's block waits in A's
 * outbox, B's in H's inbox, and both come home when H's parked heap is
 * taken by a purge pass. */
static shoal_block_t *aba_p[PER_PAGE];

static void *aba_h(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < PER_PAGE; i++) {
        aba_p[i] = alloc_malloc(BSIZE);
        fill(aba_p[i], BSIZE, i);
    }
    wait_step();                /* 1: A and B hold blocks 0 and 1 */
    wait_step();                /* 2: A freed block 0 (held) */
    /* P is full again: free one of ours and take it back. */
    alloc_free(aba_p[5]);
    aba_p[5] = alloc_malloc(BSIZE);
    fill(aba_p[5], BSIZE, 5);
    void *next = alloc_malloc(BSIZE);    /* P has nothing free: a new page */
    alloc_free(next);
    wait_step();                /* 3: B frees and exits */
    pthread_barrier_wait(&step2);       /* 4: B is gone */
    return NULL;                /* H exits; its heap is parked */
}

static void *aba_b(void *arg)
{
    (void)arg;
    wait_step();                /* 1 */
    wait_step();                /* 2 */
    wait_step();                /* 3 */
    if (!filled(aba_p[1], BSIZE, 1))
        atomic_fetch_add(&failures, 1);
    alloc_free(aba_p[1]);
    return NULL;                /* exit sends it to H's inbox */
}

static void test_aba_interleaving_loses_nothing(void **state)
{
    (void)state;
    alloc_stats_t base = settled_start();
    pthread_barrier_init(&step, NULL, 3);
    pthread_barrier_init(&step2, NULL, 2);
    pthread_t h, b;
    pthread_create(&h, NULL, aba_h, NULL);
    pthread_create(&b, NULL, aba_b, NULL);
    /* This thread is A. */
    wait_step();                /* 1 */
    assert_true(filled(aba_p[0], BSIZE, 0));
    alloc_free(aba_p[0]);       /* held in A's outbox */
    wait_step();                /* 2 */
    wait_step();                /* 3 */
    pthread_join(b, NULL);
    pthread_barrier_wait(&step2);       /* 4 */
    pthread_join(h, NULL);
    /* A's block is in A's outbox (unless the purger has sent it: an
     * outbox idle for a whole scan), B's in H's inbox, unless a purge
     * pass has taken that already. */
    size_t in_flight = take().remote_in_flight - base.remote_in_flight;
    assert_true(in_flight <= 2);
    for (unsigned i = 2; i < PER_PAGE; i++) {
        assert_true(filled(aba_p[i], BSIZE, i));
        alloc_free(aba_p[i]);
    }
    assert_int_equal(atomic_load(&failures), 0);
    assert_all_home(&base, BSIZE);
    pthread_barrier_destroy(&step);
    pthread_barrier_destroy(&step2);
}

/* Two threads free each other's blocks and exit at once, each with its
 * batches for the other still in its outbox, and the other's in its
 * inbox. */
#define SWAP 3000
static void *swap_blocks[2][SWAP];

static size_t swap_size(unsigned i)
{
    return 16 + (i * 53) % 3000;
}

static void *swapper(void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < SWAP; i++) {
        swap_blocks[me][i] = alloc_malloc(swap_size(i));
        fill(swap_blocks[me][i], swap_size(i), i + me);
    }
    wait_step();
    for (unsigned i = 0; i < SWAP; i++) {
        if (!filled(swap_blocks[!me][i], swap_size(i), i + !me))
            atomic_fetch_add(&failures, 1);
        alloc_free(swap_blocks[!me][i]);
    }
    wait_step();
    return NULL;
}

static void test_exit_with_batches_both_ways(void **state)
{
    (void)state;
    alloc_stats_t base = settled_start();
    pthread_barrier_init(&step, NULL, 2);
    pthread_t t[2];
    for (uintptr_t i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, swapper, (void *)i);
    for (unsigned i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&failures), 0);
    alloc_stats_t st = take();
    assert_int_equal(st.remote_frees - base.remote_frees, 2 * SWAP);
    assert_all_home(&base, 16);
    alloc_stats_t end = take();
    for (unsigned c = 0; c < SHOAL_CLASSES; c++)
        assert_int_equal(end.classes[c].live_blocks, base.classes[c].live_blocks);
    pthread_barrier_destroy(&step);
}

/* Producer and consumer: the consumer frees every block remotely.  The
 * atomic operations that costs, sending and taking: at most one per 16
 * remote frees (one per batch sent, one per take, against one or more
 * per free when each free was a compare-and-swap on its page). */
#ifdef UNDER_TSAN
#define ITEMS 20000
#else
#define ITEMS 200000
#endif
#define RING 256
static void *_Atomic ring[RING];

static void *consumer(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < ITEMS; i++) {
        void *p;
        while ((p = atomic_exchange(&ring[i % RING], NULL)) == NULL)
            sched_yield();
        if (!filled(p, 48 + i % 200, i))
            atomic_fetch_add(&failures, 1);
        alloc_free(p);
    }
    return NULL;
}

static void test_prodcons_atomics_amortized(void **state)
{
    (void)state;
    alloc_stats_t base = settled_start();
    pthread_t t;
    pthread_create(&t, NULL, consumer, NULL);
    for (unsigned i = 0; i < ITEMS; i++) {
        size_t n = 48 + i % 200;
        void *p = alloc_malloc(n);
        assert_non_null(p);
        fill(p, n, i);
        while (atomic_load(&ring[i % RING]) != NULL)
            sched_yield();
        atomic_store(&ring[i % RING], p);
    }
    pthread_join(t, NULL);
    alloc_collect(false);       /* the consumer's last batch comes home */
    alloc_stats_t st = take();
    uint64_t frees = st.remote_frees - base.remote_frees;
    uint64_t atomics = st.remote_atomics - base.remote_atomics;
    print_message("%lu remote frees, %lu atomic operations (1 per %.0f)\n",
                  (unsigned long)frees, (unsigned long)atomics,
                  atomics ? (double)frees / (double)atomics : 0.0);
    assert_int_equal(atomic_load(&failures), 0);
    assert_int_equal(frees, ITEMS);
    assert_true(atomics * 16 <= frees);
    assert_int_equal(st.remote_in_flight, base.remote_in_flight);
}

/* fork while another thread sends batches to this one: the child's
 * allocator works, its inbox takes blocks, and nothing hangs. */
static _Atomic bool sending;
static void *fork_sender(void *arg)
{
    void **blocks = arg;
    for (unsigned i = 0; atomic_load(&sending); i = (i + 1) % 4096) {
        if (blocks[i] != NULL) {
            alloc_free(blocks[i]);
            blocks[i] = NULL;
        }
        if (i % 64 == 0)
            alloc_collect(false);       /* send what is held */
    }
    return NULL;
}

static void *child_free(void *arg)
{
    void **b = arg;
    for (unsigned i = 0; i < 500; i++)
        alloc_free(b[i]);
    return NULL;
}

static int child_works(void)
{
    static void *b[500];
    alloc_collect(false);
    alloc_stats_t base = take();
    for (unsigned i = 0; i < 500; i++) {
        if ((b[i] = alloc_malloc(100 + i)) == NULL)
            return 1;
        fill(b[i], 100 + i, i);
    }
#ifdef UNDER_TSAN
    child_free(b);      /* TSan does not start threads after a threaded fork */
#else
    pthread_t t;
    if (pthread_create(&t, NULL, child_free, b) != 0)
        return 2;
    pthread_join(t, NULL);
#endif
    alloc_collect(false);
    alloc_stats_t st = take();
    if (st.remote_in_flight != base.remote_in_flight)
        return 3;
    return 0;
}

static void test_fork_with_batches_in_flight(void **state)
{
    (void)state;
    static void *blocks[4096];
#ifdef UNDER_TSAN
    const int forks = 4;
#else
    const int forks = 40;
#endif
    for (unsigned i = 0; i < 4096; i++)
        blocks[i] = alloc_malloc(64 + i % 512);
    atomic_store(&sending, true);
    pthread_t t;
    pthread_create(&t, NULL, fork_sender, blocks);
    for (int f = 0; f < forks; f++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(60);          /* a hang fails the test, it does not stall it */
            _exit(child_works());
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        alloc_collect(false);
    }
    atomic_store(&sending, false);
    pthread_join(t, NULL);
    for (unsigned i = 0; i < 4096; i++)
        alloc_free(blocks[i]);
}

/* ---- idle outboxes ---------------------------------------------------
 * A thread frees blocks of another heap, fewer than its outbox sends on
 * its own, and then makes no allocator call: the purger sends them, and
 * they come home.  Before, they waited in the outbox until the thread's
 * next slow path or its exit, each keeping its page from the pool; and
 * each free into a heap no thread held was an atomic operation of its
 * own.  Both are polled against a generous deadline (the purger scans
 * the outboxes each time it wakes), failing only if they never come. */
#define IDLE_BLOCKS 12              /* 12 KiB: below the outbox's bound */
#define IDLE_DELAY_MS 200
#define IDLE_DEADLINE_MS 20000
static void *idle_blocks[IDLE_BLOCKS];
static _Atomic bool idle_made, idle_owner_collect;

static void *idle_make(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < IDLE_BLOCKS; i++) {
        idle_blocks[i] = alloc_malloc(BSIZE);
        fill(idle_blocks[i], BSIZE, 300 + i);
    }
    atomic_store(&idle_made, true);
    return NULL;
}

/* Has a heap of its own before the blocks are made (a thread without one
 * would take over a parked heap, and the frees would be its own); frees
 * every block, then waits for the test to end without a call. */
static void *idle_freer(void *arg)
{
    (void)arg;
    void *own = alloc_malloc(64);
    wait_step();                /* 1: it has a heap */
    wait_step();                /* 2: the blocks are made */
    for (unsigned i = 0; i < IDLE_BLOCKS; i++) {
        if (!filled(idle_blocks[i], BSIZE, 300 + i))
            atomic_fetch_add(&failures, 1);
        alloc_free(idle_blocks[i]);
    }
    wait_step();                /* 3: freed */
    wait_step();                /* 4: the test is done */
    alloc_free(own);
    return NULL;
}

/* Set in the program's own threads (main, and the one that starts the
 * purger below): registrations for membarrier(2) are counted by thread;
 * the test's own probe is not. */
static __thread bool tl_program_thread, tl_probe;
static _Atomic int registrations, registrations_by_program;

/* shoal's calls of syscall(2) come here first (this definition takes
 * the place of libc's in the test's link) and go on to libc's.  It reads
 * six arguments whatever the call passed, as libc's does (registers on
 * x86-64, the stack beyond): not an access for AddressSanitizer to
 * check. */
__attribute__((no_sanitize_address)) long syscall(long n, ...)
{
    static _Atomic(long (*)(long, ...)) libc_syscall;
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_membarrier && a[0] == MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED && !tl_probe) {
        atomic_fetch_add(&registrations, 1);
        if (tl_program_thread)
            atomic_fetch_add(&registrations_by_program, 1);
    }
    long (*f)(long, ...) = atomic_load_explicit(&libc_syscall, memory_order_relaxed);
    if (f == NULL) {
        f = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
        atomic_store_explicit(&libc_syscall, f, memory_order_relaxed);
    }
    return f(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static void *thread_allocates(void *arg)
{
    (void)arg;
    tl_program_thread = true;
    alloc_free(alloc_malloc(64));
    return NULL;
}

/* The purger runs, and sends idle outboxes; false where membarrier(2)
 * is not to be had (the test is skipped).  A thread that exits starts
 * it (its heap parked is work for it); the purger turns the sending on
 * from its own thread, polled for against a generous deadline. */
static bool purger_with_stealer(void)
{
    tl_probe = true;            /* a registration of ours fails where shoal's would */
    bool offered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0, 0,
                           0, 0) == 0;
    tl_probe = false;
    if (!offered)
        return false;
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, IDLE_DELAY_MS);
    alloc_option_set(ALLOC_OPTION_PURGE_THREAD, 1);
    pthread_t t;
    pthread_create(&t, NULL, thread_allocates, NULL);
    pthread_join(t, NULL);
    for (int ms = 0; ms < IDLE_DEADLINE_MS && !shoal_remote_stealer_runs(); ms += 10)
        usleep(10 * 1000);
    assert_true(shoal_remote_stealer_runs());
    return true;
}

static void purger_default(void)
{
    alloc_option_set(ALLOC_OPTION_PURGE_THREAD, -1);
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000);
}

/* Polls, with no allocator call, until the blocks are home again: none
 * in flight, and none of the class's pages more than at `base` (with
 * `pages_too`: a parked heap's page goes back to the pool). */
static bool idle_home(const alloc_stats_t *base, bool pages_too)
{
    unsigned c = shoal_size_to_class(BSIZE);
    for (int ms = 0; ms < IDLE_DEADLINE_MS; ms += 10) {
        alloc_stats_t st = take();
        if (st.remote_in_flight == base->remote_in_flight &&
            (!pages_too || st.classes[c].pages <= base->classes[c].pages))
            return true;
        usleep(10 * 1000);
    }
    return false;
}

/* The owner is alive and takes its inbox: only the purger can bring the
 * freer's blocks to it. */
static void *idle_live_owner(void *arg)
{
    idle_make(arg);
    while (!atomic_load(&idle_owner_collect))
        alloc_collect(false);   /* sends nothing of the freer's: only takes */
    return NULL;
}

/* Runs the freer against an owner that `owner` makes the blocks in;
 * `parked`: the owner exits first.  Returns the statistics when the
 * blocks were made, and when they were freed, in *made and *freed, and
 * whether they came home. */
static bool idle_run(void *(*owner)(void *), bool parked, alloc_stats_t *made,
                     alloc_stats_t *freed)
{
    if (!purger_with_stealer()) {
        purger_default();
        skip();
    }
    alloc_stats_t base = settled_start();
    pthread_barrier_init(&step, NULL, 2);
    atomic_store(&idle_made, false);
    atomic_store(&idle_owner_collect, false);
    pthread_t owner_t, freer_t;
    pthread_create(&freer_t, NULL, idle_freer, NULL);
    wait_step();                /* 1 */
    pthread_create(&owner_t, NULL, owner, NULL);
    if (parked)
        pthread_join(owner_t, NULL);
    while (!atomic_load(&idle_made))
        usleep(1000);
    *made = take();
    wait_step();                /* 2 */
    wait_step();                /* 3 */
    *freed = take();
    bool home = idle_home(&base, parked);
    atomic_store(&idle_owner_collect, true);
    if (!parked)
        pthread_join(owner_t, NULL);
    wait_step();                /* 4 */
    pthread_join(freer_t, NULL);
    pthread_barrier_destroy(&step);
    purger_default();
    assert_int_equal(atomic_load(&failures), 0);
    assert_int_equal(freed->remote_frees - made->remote_frees, IDLE_BLOCKS);
    return home;
}

static void test_idle_outbox_to_live_owner(void **state)
{
    (void)state;
    alloc_stats_t made, freed;
    assert_true(idle_run(idle_live_owner, false, &made, &freed));
}

/* The owner has exited: its heap is parked.  The freer's twelve frees
 * wait in its outbox as one batch (no atomic operation; one each
 * before), the purger sends them, a purge pass takes them, and the page
 * goes back to the pool. */
static void test_idle_outbox_to_parked_heap(void **state)
{
    (void)state;
    alloc_stats_t made, freed;
    bool home = idle_run(idle_make, true, &made, &freed);
    /* One by one, the frees would have cost twelve; batched, none, or
     * a send and a take where a scan came between them and the look (or
     * split the batch). */
    assert_true(freed.remote_atomics - made.remote_atomics <= 3);
    assert_true(home);
}

/* A purge pass claims an idle thread's huge slot the way it claims an
 * outbox (sync.h): it takes the mapping only where, after its barrier,
 * the holder is not in its turn.  The test plays the holder: its slot
 * holds a mapping and it stays in its turn while another thread forces
 * a pass, which must leave the mapping (taken, the holder's next malloc
 * would get a mapping that is gone); once the holder is out of its
 * turn, the next pass takes it. */
#define SLOT_HUGE ((size_t)6 << 20)

static void *force_pass(void *arg)
{
    (void)arg;
    alloc_collect(true);
    return NULL;
}

static void run_force_pass(void)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, force_pass, NULL), 0);
    pthread_join(t, NULL);
}

static void test_huge_slot_claim_waits_for_holder(void **state)
{
    (void)state;
    if (!shoal_os_barrier_offered())
        skip();                 /* no turns: the holder exchanges (huge.c) */
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);  /* ours only */
    alloc_collect(true);
    unsigned char *p = alloc_malloc(SLOT_HUGE);
    assert_non_null(p);
    memset(p, 0x3c, SLOT_HUGE);
    alloc_free(p);                              /* into this thread's slot */
    alloc_stats_t held = { .size = sizeof held }, st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&held), 0);
    assert_true(held.huge_cached >= 1);
    shoal_huge_slot_t *slot = &shoal_tl_heap->huge_slot;
    assert_true(shoal_holder_enter(&slot->turn));
    run_force_pass();
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.huge_cached, held.huge_cached);     /* left to the holder */
    assert_int_equal(st.mapped, held.mapped);
    shoal_holder_leave(&slot->turn);
    run_force_pass();
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.huge_cached, 0);
    assert_true(st.mapped + SLOT_HUGE <= held.mapped);
    p = alloc_malloc(SLOT_HUGE);                /* a new mapping, whole */
    assert_non_null(p);
    memset(p, 0x3d, SLOT_HUGE);
    assert_int_equal(p[SLOT_HUGE - 1], 0x3d);
    alloc_free(p);
    alloc_collect(true);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

/* A thread in its huge slot's turn when another thread forks: the child
 * has no such thread, and its forced pass takes that slot's mapping (a
 * turn left raised would keep it, and every pass after, for good). */
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond = PTHREAD_COND_INITIALIZER;
static int turn_stage;          /* 1: in its turn, 2: may leave */

static void *hold_turn(void *arg)
{
    (void)arg;
    unsigned char *p = alloc_malloc(SLOT_HUGE);
    assert_non_null(p);
    memset(p, 0x3e, SLOT_HUGE);
    alloc_free(p);                              /* into this thread's slot */
    shoal_huge_slot_t *slot = &shoal_tl_heap->huge_slot;
    assert_true(shoal_holder_enter(&slot->turn));
    pthread_mutex_lock(&turn_lock);
    turn_stage = 1;
    pthread_cond_broadcast(&turn_cond);
    while (turn_stage != 2)
        pthread_cond_wait(&turn_cond, &turn_lock);
    pthread_mutex_unlock(&turn_lock);
    shoal_holder_leave(&slot->turn);
    return NULL;
}

static void test_fork_in_a_slot_turn(void **state)
{
    (void)state;
    if (!shoal_os_barrier_offered())
        skip();
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    alloc_collect(true);
    turn_stage = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_turn, NULL), 0);
    pthread_mutex_lock(&turn_lock);
    while (turn_stage != 1)
        pthread_cond_wait(&turn_cond, &turn_lock);
    pthread_mutex_unlock(&turn_lock);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alloc_collect(true);
        alloc_stats_t st = { .size = sizeof st };
        _exit(alloc_stats_get(&st) == 0 && st.huge_cached == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    pthread_mutex_lock(&turn_lock);
    turn_stage = 2;
    pthread_cond_broadcast(&turn_cond);
    pthread_mutex_unlock(&turn_lock);
    pthread_join(t, NULL);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    alloc_collect(true);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

/* The purger registers for membarrier(2) on its own thread.  A
 * process's first registration waits out an RCU grace period in the
 * kernel (7 ms under strace here), and the thread whose malloc started
 * the purger used to pay it: a server's request stalled.  First in the
 * list, so that this test starts the process's first purger. */
static void test_purger_registers_on_its_own_thread(void **state)
{
    (void)state;
    if (!purger_with_stealer()) {
        purger_default();
        skip();
    }
    purger_default();
    assert_true(atomic_load(&registrations) > 0);
    assert_int_equal(atomic_load(&registrations_by_program), 0);
}

int main(void)
{
    tl_program_thread = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purger_registers_on_its_own_thread),
        cmocka_unit_test(test_handoff_one_by_one),
        cmocka_unit_test(test_handoff_batches_64),
        cmocka_unit_test(test_handoff_batches_16),
        cmocka_unit_test(test_take_costs_one_atomic),
        cmocka_unit_test(test_forwarded_when_page_moved),
        cmocka_unit_test(test_fork_child_cuts_unlinked_tail),
        cmocka_unit_test(test_fork_child_leaves_own_unfinished_append),
        cmocka_unit_test(test_aba_interleaving_loses_nothing),
        cmocka_unit_test(test_exit_with_batches_both_ways),
        cmocka_unit_test(test_prodcons_atomics_amortized),
        cmocka_unit_test(test_fork_with_batches_in_flight),
        cmocka_unit_test(test_idle_outbox_to_live_owner),
        cmocka_unit_test(test_idle_outbox_to_parked_heap),
        cmocka_unit_test(test_huge_slot_claim_waits_for_holder),
        cmocka_unit_test(test_fork_in_a_slot_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
