/* Trims (core/page.c, "trimming"): a page of a heap's queue with a block
 * or two live gives back the OS pages that hold free blocks only; its
 * live blocks stay as they were, the blocks trimmed come back when the
 * page's lists run dry, and a free of a trimmed block, by its own thread
 * or another, is a double free. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "shoal.h"
#include "core/pool.h"
#include "core/size_class.h"
#include "test_util.h"

/* 28 blocks a 64 KiB page, most of them across two OS pages. */
enum { SIZE = 2304, PER_PAGE = 65536 / SIZE, PAGES = 8, N = PAGES * PER_PAGE, KEEP = 10 };

static char *start_of_page(const void *p)
{
    return shoal_span_of(p)->start;
}

static size_t class_pages(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st.classes[shoal_size_to_class_nz(SIZE)].pages;
}

static uint64_t purged_bytes(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st.purged;
}

/* OS pages of the 64 KiB page at `start` that are resident. */
static unsigned resident_os_pages(const char *start)
{
    unsigned char vec[16];
    assert_int_equal(mincore((void *)start, 65536, vec), 0);
    unsigned n = 0;
    for (int i = 0; i < 16; i++)
        n += vec[i] & 1;
    return n;
}

/* PAGES pages of the class, filled; all blocks but the KEEP-th of each
 * page freed (by this thread); b[] keeps the survivors, one a page. */
static void make_sparse(char **keep)
{
    static char *b[N];
    assert_int_equal(class_pages(), 0);
    for (int i = 0; i < N; i++) {
        b[i] = alloc_malloc(SIZE);
        assert_non_null(b[i]);
        pattern_fill(b[i], SIZE, i);
    }
    for (int k = 0; k < PAGES; k++) {
        for (int i = 1; i < PER_PAGE; i++)
            assert_ptr_equal(start_of_page(b[k * PER_PAGE + i]), start_of_page(b[k * PER_PAGE]));
        assert_int_equal(resident_os_pages(start_of_page(b[k * PER_PAGE])), 16);
    }
    for (int i = 0; i < N; i++) {
        if (i % PER_PAGE == KEEP) {
            keep[i / PER_PAGE] = b[i];
            continue;
        }
        assert_true(pattern_ok(b[i], SIZE, i));
        alloc_free(b[i]);
    }
}

static void free_kept(char **keep)
{
    for (int k = 0; k < PAGES; k++) {
        assert_true(pattern_ok(keep[k], SIZE, k * PER_PAGE + KEEP));
        alloc_free(keep[k]);
    }
    alloc_collect(false);
    assert_int_equal(class_pages(), 0);
}

/* Each page keeps the one or two OS pages its live block lies on (a
 * third where the page's current one is), and the live blocks their
 * data. */
static void test_sparse_pages_give_back(void **state)
{
    (void)state;
    char *keep[PAGES];
    make_sparse(keep);
    uint64_t before = purged_bytes();
    alloc_collect(false);
    unsigned resident = 0;
    for (int k = 0; k < PAGES; k++) {
        unsigned r = resident_os_pages(start_of_page(keep[k]));
        assert_true(r <= 3);
        resident += r;
        assert_true(pattern_ok(keep[k], SIZE, k * PER_PAGE + KEEP));
    }
    assert_true(resident <= 2 * PAGES + 1);
    assert_true(purged_bytes() - before >= (uint64_t)(16 * PAGES - resident) * 4096);
    free_kept(keep);
}

/* After the trim, the class's next blocks come from the trimmed pages
 * (no page is begun), each block once, none over a live one; all of
 * them hold their data; and once everything is freed the pages go
 * back (the trimmed blocks count as free). */
static void test_trimmed_blocks_come_back(void **state)
{
    (void)state;
    char *keep[PAGES];
    static char *again[N];
    make_sparse(keep);
    alloc_collect(false);
    size_t pages = class_pages();
    assert_int_equal(pages, PAGES);
    int n = N - PAGES;
    for (int i = 0; i < n; i++) {
        again[i] = alloc_malloc(SIZE);
        assert_non_null(again[i]);
        pattern_fill(again[i], SIZE, 1000 + i);
        for (int k = 0; k < PAGES; k++)
            assert_true(again[i] + SIZE <= keep[k] || keep[k] + SIZE <= again[i]);
    }
    assert_int_equal(class_pages(), pages);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            assert_ptr_not_equal(again[i], again[j]);
    for (int i = 0; i < n; i++) {
        assert_true(pattern_ok(again[i], SIZE, 1000 + i));
        alloc_free(again[i]);
    }
    free_kept(keep);
}

static char *remote_victim;

static void *free_remote(void *arg)
{
    (void)arg;
    alloc_free(remote_victim);
    alloc_collect(false);       /* the outbox goes to the owner's inbox */
    return NULL;
}

/* A block freed before the trim and freed again - by its own thread,
 * then by another - is reported as a double free, and never handed out
 * twice. */
static void test_double_free_of_trimmed_block(void **state)
{
    (void)state;
    char *keep[PAGES], msg[512];
    make_sparse(keep);
    alloc_collect(false);
    /* Block 0 of a page starts in its first OS page, which (the live
     * block being the 10th) the trim gave back. */
    char *victim = start_of_page(keep[1]);
    alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN);
    capture_begin();
    alloc_free(victim);
    assert_true(capture_end(msg, sizeof msg));
    assert_non_null(strstr(msg, "double free"));

    remote_victim = start_of_page(keep[2]);
    pthread_t t;
    capture_begin();
    assert_int_equal(pthread_create(&t, NULL, free_remote, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    alloc_collect(false);       /* the owner takes its inbox */
    assert_true(capture_end(msg, sizeof msg));
    assert_non_null(strstr(msg, "double free"));
    alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_ABORT);

    /* Every block of the class once: the two above among them once. */
    static char *all[N];
    int n = N - PAGES, seen = 0;
    for (int i = 0; i < n; i++) {
        all[i] = alloc_malloc(SIZE);
        assert_non_null(all[i]);
        pattern_fill(all[i], SIZE, i);
        seen += all[i] == victim || all[i] == remote_victim;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            assert_ptr_not_equal(all[i], all[j]);
    assert_int_equal(seen, 2);
    for (int i = 0; i < n; i++) {
        assert_true(pattern_ok(all[i], SIZE, i));
        alloc_free(all[i]);
    }
    free_kept(keep);
}

/* Keep the purge passes coming (memory freed to the pool), a delay's
 * worth. */
static void churn_and_wait(void)
{
    char *big[4];
    for (int i = 0; i < 4; i++) {
        big[i] = alloc_malloc(1 << 20);
        assert_non_null(big[i]);
        memset(big[i], i, 1 << 20);
    }
    for (int i = 0; i < 4; i++)
        alloc_free(big[i]);
    struct timespec t = { 0, 10 * 1000000L };
    nanosleep(&t, NULL);
}

/* A thread whose mallocs find freed blocks without a search sweeps
 * seldom on its own: a purge pass asks it to, after two delays, and its
 * next malloc of a page's block sweeps - and, at the sweep a second or
 * more after the one that first saw them so, trims every page but the
 * heads of the queues - with no alloc_collect.  Polled against a generous deadline; large blocks
 * freed to the pool meanwhile keep the passes coming. */
static void test_pass_asks_for_a_sweep(void **state)
{
    (void)state;
    char *keep[PAGES];
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 20), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_THREAD, 1), 0);
    make_sparse(keep);
    bool trimmed = false;
    for (int round = 0; round < 1000 && !trimmed; round++) {
        churn_and_wait();
        char *p = alloc_malloc(SIZE);   /* a fast path's size: only an ask sweeps */
        assert_non_null(p);
        alloc_free(p);
        /* All but the queue's head, which a sweep leaves to malloc. */
        int given_back = 0;
        for (int k = 0; k < PAGES; k++)
            given_back += resident_os_pages(start_of_page(keep[k])) <= 3;
        trimmed = given_back >= PAGES - 1;
    }
    assert_true(trimmed);
    free_kept(keep);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
}

static char *orphan_keep[PAGES];

static void *make_sparse_and_exit(void *arg)
{
    (void)arg;
    make_sparse(orphan_keep);
    return NULL;
}

/* A thread leaves sparse pages and exits: a pass dismantles its parked
 * heap, the pages go to the orphanage, and a pass trims them there. */
static void test_orphaned_pages_trimmed(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 20), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_THREAD, 1), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, make_sparse_and_exit, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    bool trimmed = false;
    for (int round = 0; round < 1000 && !trimmed; round++) {
        churn_and_wait();
        int given_back = 0;
        for (int k = 0; k < PAGES; k++)
            given_back += resident_os_pages(start_of_page(orphan_keep[k])) <= 3;
        trimmed = given_back == PAGES;
    }
    assert_true(trimmed);
    for (int k = 0; k < PAGES; k++) {
        assert_true(pattern_ok(orphan_keep[k], SIZE, k * PER_PAGE + KEEP));
        alloc_free(orphan_keep[k]);
    }
    for (int round = 0; round < 500 && class_pages() != 0; round++) {
        alloc_collect(false);
        churn_and_wait();
    }
    assert_int_equal(class_pages(), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_pages_give_back),
        cmocka_unit_test(test_trimmed_blocks_come_back),
        cmocka_unit_test(test_double_free_of_trimmed_block),
        cmocka_unit_test(test_pass_asks_for_a_sweep),
        cmocka_unit_test(test_orphaned_pages_trimmed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
