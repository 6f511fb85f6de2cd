/* Many threads allocate pattern-filled blocks and hand most of them to
 * other threads through a shared transfer array, so most frees are
 * remote; some threads exit while their blocks are still live elsewhere.
 * Every block's pattern is verified before it is freed, so a corrupted
 * free list or a block handed out twice shows up as a content mismatch,
 * and a lost remote free shows up as memory that never comes back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "shoal.h"
#include "test_util.h"

#define THREADS    4
#define ROUNDS     3
#define SLOTS      4096
#ifdef UNDER_TSAN
#define OPS        20000
#else
#define OPS        60000
#endif

static _Atomic(uintptr_t) transfer[SLOTS];
static _Atomic long corrupt;

typedef struct hdr_s {
    size_t size;
    uint32_t seed;
} hdr_t;

static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static size_t pick_size(uint32_t *s)
{
    uint32_t r = next_rand(s);
    switch (r % 16) {
    case 0: return 16 + r % 70000;                  /* medium and large */
    case 1: return 16 + r % 9000;
    default: return 16 + r % 600;                   /* small */
    }
}

static void *make(uint32_t *s)
{
    size_t n = pick_size(s);
    unsigned char *p = alloc_malloc(n);
    if (p == NULL)
        return NULL;
    hdr_t h = { n, next_rand(s) };
    memcpy(p, &h, sizeof h);
    for (size_t i = sizeof h; i < n; i++)
        p[i] = (unsigned char)(h.seed + i * 7);
    return p;
}

static void check_and_free(unsigned char *p)
{
    hdr_t h;
    memcpy(&h, p, sizeof h);
    if (h.size < sizeof h || h.size > 70016 || alloc_usable_size(p) < h.size) {
        atomic_fetch_add(&corrupt, 1);
        return;
    }
    for (size_t i = sizeof h; i < h.size; i++) {
        if (p[i] != (unsigned char)(h.seed + i * 7)) {
            atomic_fetch_add(&corrupt, 1);
            return;
        }
    }
    alloc_free(p);
}

static void *worker(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
    for (int op = 0; op < OPS; op++) {
        unsigned slot = next_rand(&s) % SLOTS;
        void *p = make(&s);
        if (p == NULL) {
            atomic_fetch_add(&corrupt, 1);
            continue;
        }
        /* Swap our block into the shared array; whatever was there was
         * most likely made by another thread. */
        uintptr_t old = atomic_exchange(&transfer[slot], (uintptr_t)p);
        if (old != 0)
            check_and_free((unsigned char *)old);
    }
    return NULL;
}

static void test_cross_thread_frees(void **state)
{
    (void)state;
    alloc_stats_t before = { .size = sizeof before }, after = { .size = sizeof after };
    for (int round = 0; round < ROUNDS; round++) {
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++)
            assert_int_equal(pthread_create(&t[i], NULL, worker,
                                            (void *)(uintptr_t)(round * THREADS + i + 1)), 0);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
        /* Blocks of exited threads are still live in the array: the next
         * round frees them from new threads. */
        if (round == 0)
            assert_int_equal(alloc_stats_get(&before), 0);
    }
    for (unsigned i = 0; i < SLOTS; i++) {
        uintptr_t p = atomic_exchange(&transfer[i], 0);
        if (p != 0)
            check_and_free((unsigned char *)p);
    }
    assert_int_equal(atomic_load(&corrupt), 0);
    /* Nothing is live: after adopting every abandoned page and purging,
     * the pool holds no more than this thread's pages. */
    alloc_collect(true);
    assert_int_equal(alloc_stats_get(&after), 0);
    assert_int_equal(after.heaps_abandoned_pages, 0);
    assert_true(after.pool_slots_used <= 2);
}

/* ---- alloc_collect and blocks forwarded by its pass --------------------
 * A thread leaves live blocks on its page and exits; a collection gives
 * its heap up, and the page, its blocks still live, waits in the
 * orphanage for a heap to adopt it.  Another thread frees some of them:
 * they wait in its outbox, bound for the orphanage.  This thread adopts
 * the page; then the other thread exits, and its outbox goes to the
 * orphanage.  The next collection's pass sends those blocks on to the
 * page's new heap, this one: alloc_collect must take them home too, not
 * leave them in flight in its inbox. */
enum { LEFT = 200, LEFT_SIZE = 176, FREED = 40 };
static unsigned char *left[LEFT];
static _Atomic int freer_may_exit;

/* n blocks of `size` into b[], block i filled with the byte i. */
static void make_filled(unsigned char **b, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        b[i] = alloc_malloc(size);
        if (b[i] != NULL)
            memset(b[i], i, size);
    }
}

/* Check every byte of the n blocks make_filled made (a mismatch counts in
 * `corrupt`), and free them. */
static void check_free_filled(unsigned char **b, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < size; k++)
            if (b[i][k] != (unsigned char)i)
                atomic_fetch_add(&corrupt, 1);
        alloc_free(b[i]);
    }
}

/* No purge pass but the test's own from now (the delay it had is
 * returned), the parked heaps emptied, and *base taken then. */
static long quiet_base(alloc_stats_t *base)
{
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    alloc_collect(true);
    assert_int_equal(alloc_stats_get(base), 0);
    return delay;
}

/* quiet_base, then a thread runs fn, which leaves n blocks in b[], and
 * exits. */
static long blocks_of_exited_thread(void *(*fn)(void *), unsigned char **b, int n,
                                    alloc_stats_t *base)
{
    long delay = quiet_base(base);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fn, NULL), 0);
    pthread_join(t, NULL);
    for (int i = 0; i < n; i++)
        assert_non_null(b[i]);
    return delay;
}

static void *leave_blocks(void *arg)
{
    (void)arg;
    make_filled(left, LEFT, LEFT_SIZE);
    return NULL;
}

static _Atomic int freer_done;

static void *free_some(void *arg)
{
    (void)arg;
    for (int i = 0; i < FREED; i++) {
        if (left[i][LEFT_SIZE - 1] != (unsigned char)i)
            atomic_fetch_add(&corrupt, 1);
        alloc_free(left[i]);
    }
    atomic_store(&freer_done, 1);
    while (!atomic_load(&freer_may_exit))
        sched_yield();
    return NULL;
}

static void test_collect_takes_forwarded_blocks(void **state)
{
    (void)state;
    alloc_stats_t base = { .size = sizeof base }, st = { .size = sizeof st };
    long delay = blocks_of_exited_thread(leave_blocks, left, LEFT, &base);
    pthread_t t;
    alloc_collect(true);                        /* the exited thread's heap goes */
    assert_int_equal(pthread_create(&t, NULL, free_some, NULL), 0);
    while (!atomic_load(&freer_done))
        sched_yield();
    /* Take blocks of the class until one comes from the left page. */
    static void *mine[4 * LEFT];
    int n = 0;
    uintptr_t page = (uintptr_t)left[LEFT - 1] >> 16;
    bool adopted = false;
    while (n < 4 * LEFT && !adopted) {
        mine[n] = alloc_malloc(LEFT_SIZE);
        assert_non_null(mine[n]);
        adopted = (uintptr_t)mine[n++] >> 16 == page;
    }
    assert_true(adopted);
    atomic_store(&freer_may_exit, 1);
    pthread_join(t, NULL);
    alloc_collect(true);
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.remote_in_flight, base.remote_in_flight);
    for (int i = FREED; i < LEFT; i++) {
        assert_int_equal(left[i][LEFT_SIZE - 1], (unsigned char)i);
        alloc_free(left[i]);
    }
    for (int i = 0; i < n; i++)
        alloc_free(mine[i]);
    assert_int_equal(atomic_load(&corrupt), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

/* ---- the full pages of an exited thread ---------------------------------
 * A page with no free block is in no list (page_queue.h): when a parked
 * heap is dismantled, its full pages are found by their owner words and
 * go to the orphanage with the rest, where the blocks freed later come
 * home and the empty pages go back to the pool. */
enum { FULL_SIZE = 1024, FULL_PER_PAGE = 64, FULL_PAGES = 4,
       FULL_BLOCKS = FULL_PER_PAGE * FULL_PAGES + 1 };
static unsigned char *full_blocks[FULL_BLOCKS];

static void *fill_pages(void *arg)
{
    (void)arg;
    make_filled(full_blocks, FULL_BLOCKS, FULL_SIZE);
    return NULL;
}

static void test_full_pages_of_exited_thread(void **state)
{
    (void)state;
    alloc_stats_t base = { .size = sizeof base }, st = { .size = sizeof st };
    long delay = blocks_of_exited_thread(fill_pages, full_blocks, FULL_BLOCKS, &base);
    /* Its first FULL_PAGES pages are full (the next block took a fresh
     * page); all of them, and the fresh one, go to the orphanage. */
    alloc_collect(true);
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.heaps_abandoned_pages - base.heaps_abandoned_pages, FULL_PAGES + 1);
    check_free_filled(full_blocks, FULL_BLOCKS, FULL_SIZE);
    alloc_collect(true);                        /* they come home, the pages go */
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.heaps_abandoned_pages, base.heaps_abandoned_pages);
    assert_int_equal(atomic_load(&corrupt), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

/* ---- a young parked heap stays where a starting thread finds it --------
 * A purge pass takes no parked heap that has waited less than a purge
 * delay.  While a pass held one to take its inbox, a thread that started
 * meanwhile found no heap to take over and made one, then new pages beside
 * the parked heap's: a generation of workers kept twice its pages for a
 * delay (test/drop_in/generations, on a loaded machine).  Here the parked
 * heap's inbox holds YOUNG blocks when the pass runs; they are still on
 * their way after it, and the next thread takes that heap over, warm: no
 * heap struct is made, and its first block lies in the exited thread's
 * page. */
enum { YOUNG = 512, YOUNG_SIZE = 64 };
static unsigned char *young[YOUNG];

static void *leave_young(void *arg)
{
    (void)arg;
    make_filled(young, YOUNG, YOUNG_SIZE);
    return NULL;
}

static void *take_over(void *arg)
{
    *(void **)arg = alloc_malloc(YOUNG_SIZE);
    return NULL;
}

static void test_pass_leaves_young_parked_heap(void **state)
{
    (void)state;
    alloc_stats_t base = { .size = sizeof base }, parked = { .size = sizeof parked },
                  st = { .size = sizeof st };
    long delay = blocks_of_exited_thread(leave_young, young, YOUNG, &base);
    assert_int_equal(alloc_stats_get(&parked), 0);
    check_free_filled(young, YOUNG, YOUNG_SIZE);        /* remote: to the parked heap */
    alloc_collect(false);               /* sends them; the heap is not due (no delay) */
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.remote_in_flight - base.remote_in_flight, YOUNG);
    void *first = NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, take_over, &first), 0);
    pthread_join(t, NULL);
    assert_non_null(first);
    assert_int_equal((uintptr_t)first >> 16, (uintptr_t)young[0] >> 16);
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.metadata, parked.metadata);     /* no heap struct made */
    alloc_free(first);
    alloc_collect(true);
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.remote_in_flight, base.remote_in_flight);
    assert_int_equal(atomic_load(&corrupt), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

/* ---- large-block caches shared out among many threads ------------------
 * Each thread frees four 512 KiB blocks while SHARE_THREADS heaps live:
 * its cache's share of SHOAL_LARGE_CACHE_SHARED is then below a block,
 * so the blocks go back to the pool, where with 2 MiB a heap they would
 * stay, 64 MiB in all (large_cache.h). */
enum { SHARE_THREADS = 40, SHARE_BLOCKS = 4, SHARE_SIZE = 512 << 10 };
static pthread_barrier_t share_bar;

static void *share_worker(void *arg)
{
    (void)arg;
    unsigned char *own = alloc_malloc(64);      /* a heap of its own ... */
    pthread_barrier_wait(&share_bar);           /* ... and every other thread's too */
    unsigned char *b[SHARE_BLOCKS];
    for (int i = 0; i < SHARE_BLOCKS; i++) {
        b[i] = alloc_malloc(SHARE_SIZE);
        if (b[i] == NULL || own == NULL) {
            atomic_fetch_add(&corrupt, 1);
            continue;
        }
        memset(b[i], i, SHARE_SIZE);
    }
    for (int i = 0; i < SHARE_BLOCKS; i++) {
        if (b[i] != NULL && b[i][SHARE_SIZE - 1] != (unsigned char)i)
            atomic_fetch_add(&corrupt, 1);
        alloc_free(b[i]);
    }
    pthread_barrier_wait(&share_bar);           /* all freed: the main thread counts */
    pthread_barrier_wait(&share_bar);
    alloc_free(own);
    return NULL;
}

static void test_large_caches_shared_out(void **state)
{
    (void)state;
    alloc_stats_t base = { .size = sizeof base }, st = { .size = sizeof st };
    long delay = quiet_base(&base);
    assert_int_equal(pthread_barrier_init(&share_bar, NULL, SHARE_THREADS + 1), 0);
    pthread_t t[SHARE_THREADS];
    for (int i = 0; i < SHARE_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, share_worker, NULL), 0);
    pthread_barrier_wait(&share_bar);
    pthread_barrier_wait(&share_bar);
    assert_int_equal(alloc_stats_get(&st), 0);
    /* A page of 64 B blocks and a few cached ones each, no large block. */
    assert_true(st.pool_slots_used <= base.pool_slots_used + SHARE_THREADS * 4);
    pthread_barrier_wait(&share_bar);
    for (int i = 0; i < SHARE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&share_bar);
    assert_int_equal(atomic_load(&corrupt), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

/* A thread cycles huge blocks through its huge slot (each free puts the
 * mapping there, each malloc takes it back, in the holder's turn with
 * plain loads and stores) while another forces purge passes, which claim
 * the slot and take its mapping whenever the holder is away from it
 * (huge.c, sync.h).  Were both ever to take the same mapping, the pass
 * would unmap a live block, or the holder hand out a mapping that is
 * gone: each block is written at both ends and checked before its free,
 * and the purger runs its own passes too (a delay of 1 ms). */
#define CYCLE_HUGE ((size_t)6 << 20)
#ifdef UNDER_TSAN
#define CYCLES 300
#else
#define CYCLES 3000
#endif
static _Atomic int cycler_done;

static void *cycle_huge(void *arg)
{
    (void)arg;
    for (int i = 0; i < CYCLES; i++) {
        unsigned char *p = alloc_malloc(CYCLE_HUGE - (size_t)(i % 4) * 4096);
        if (p == NULL) {
            atomic_fetch_add(&corrupt, 1);
            break;
        }
        size_t n = CYCLE_HUGE - (size_t)(i % 4) * 4096;
        p[0] = (unsigned char)i;
        p[n - 1] = (unsigned char)(i + 1);
        sched_yield();
        if (p[0] != (unsigned char)i || p[n - 1] != (unsigned char)(i + 1))
            atomic_fetch_add(&corrupt, 1);
        alloc_free(p);
    }
    atomic_store(&cycler_done, 1);
    return NULL;
}

static void test_huge_slot_against_passes(void **state)
{
    (void)state;
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1), 0);
    alloc_collect(true);
    alloc_stats_t base = { .size = sizeof base }, st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&base), 0);
    atomic_store(&cycler_done, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cycle_huge, NULL), 0);
    long passes = 0;
    while (!atomic_load(&cycler_done)) {
        alloc_collect(true);
        passes++;
    }
    pthread_join(t, NULL);
    alloc_collect(true);
    assert_int_equal(alloc_stats_get(&st), 0);
    print_message("huge slot: %d cycles against %ld forced passes\n", CYCLES, passes);
    assert_int_equal(atomic_load(&corrupt), 0);
    assert_int_equal(st.huge_live, base.huge_live);
    assert_int_equal(st.huge_cached, 0);
    assert_true(st.mapped <= base.mapped);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_thread_frees),
        cmocka_unit_test(test_collect_takes_forwarded_blocks),
        cmocka_unit_test(test_full_pages_of_exited_thread),
        cmocka_unit_test(test_pass_leaves_young_parked_heap),
        cmocka_unit_test(test_large_caches_shared_out),
        cmocka_unit_test(test_huge_slot_against_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
