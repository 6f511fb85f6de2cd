/* A thread allocates blocks, another frees them all, and the first goes
 * on from its fast paths alone (a malloc and a free of a class whose
 * page has room, again and again): the freed blocks wait in its inbox,
 * which only it can take, and their pages with them.  The purger asks
 * such a heap to sweep (thread/heap.c, ask_sweep) and its next malloc
 * takes them home: the pages go back, with no slow path of its own and
 * nothing else waiting for a purge pass.  Polled against a generous
 * deadline: the test fails only if the pages never go. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "shoal.h"
#include "core/size_class.h"
#include "test_util.h"

enum { SIZE = 400, N = 4000, SMALL = 32 };

static char *blocks[N];
static _Atomic int phase;       /* 1: blocks made, 2: blocks freed, 3: done */
static _Atomic int owner_errors;        /* the owner's failed checks (not cmocka's: a thread) */

static size_t class_pages(size_t size)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st.classes[shoal_size_to_class_nz(size)].pages;
}

static void pause_ms(long ms)
{
    struct timespec t = { 0, ms * 1000000L };
    nanosleep(&t, NULL);
}

static void *owner(void *arg)
{
    (void)arg;
    char *first = alloc_malloc(SMALL);  /* a page of the small class, with room */
    for (int i = 0; i < N; i++) {
        blocks[i] = alloc_malloc(SIZE);
        if (first == NULL || blocks[i] == NULL) {
            atomic_fetch_add(&owner_errors, 1);
            atomic_store(&phase, 3);
            return NULL;
        }
        pattern_fill(blocks[i], SIZE, i);
    }
    atomic_store(&phase, 1);
    while (atomic_load(&phase) < 3) {
        /* The fast path: a block of the small class's page, and back. */
        char *p = alloc_malloc(SMALL);
        if (p == NULL) {
            atomic_fetch_add(&owner_errors, 1);
            break;
        }
        pattern_fill(p, SMALL, 7);
        atomic_fetch_add(&owner_errors, !pattern_ok(p, SMALL, 7));
        alloc_free(p);
        pause_ms(5);
    }
    alloc_free(first);
    return NULL;
}

static void test_fast_path_owner_takes_its_inbox(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 50), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, owner, NULL), 0);
    while (atomic_load(&phase) < 1)
        pause_ms(1);
    assert_int_equal(atomic_load(&owner_errors), 0);
    size_t made = class_pages(SIZE);
    assert_true(made >= N * SIZE / 65536);
    /* This thread frees them all: every one a remote free, sent to the
     * owner's inbox as its outbox fills; the last few wait here. */
    for (int i = 0; i < N; i++) {
        assert_true(pattern_ok(blocks[i], SIZE, i));
        alloc_free(blocks[i]);
    }
    atomic_store(&phase, 2);
    size_t left = made;
    for (int round = 0; round < 2000 && left > 2; round++) {
        pause_ms(10);
        left = class_pages(SIZE);
    }
    atomic_store(&phase, 3);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(atomic_load(&owner_errors), 0);
    /* What this thread's outbox still holds keeps a page or two. */
    assert_true(left <= 2);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_path_owner_takes_its_inbox),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
