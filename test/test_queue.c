/* A heap's queue of pages (src/thread/heap.c, search_queue): when the
 * page in use runs dry, a page at least a quarter used with a freed
 * block serves before a sparse one, which serves before a page is begun,
 * and a sparse page left alone empties and goes back.  And within a page
 * (core/page.h, shoal_page_settle_push): the block freed last goes out
 * first, but for a page whose free list reads as zero, which calloc
 * hands out without a memset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "shoal.h"
#include "core/pool.h"
#include "core/size_class.h"
#include "test_util.h"

enum { SIZE = 4000, PER_PAGE = 16, N = 3 * PER_PAGE + 2 };

static char *start_of_page(const void *p)
{
    return shoal_span_of(p)->start;
}

static void fill(char *p, int i)
{
    pattern_fill(p, SIZE, i);
}

static void check(const char *p, int i)
{
    assert_true(pattern_ok(p, SIZE, i));
}

static size_t class_pages(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st.classes[shoal_size_to_class_nz(SIZE)].pages;
}

/* Three pages of the class filled, in order: b[16k .. 16k + 15] on page
 * k (the class holds no page before), and b[48], b[49] begin page 3,
 * which heads the queue from then on; b[49] is freed, so that it has a
 * block to give (a page that comes back goes behind such a head).  Then
 * page 0 keeps 2 blocks (sparse), page 1 keeps 12 (4 free), and
 * alloc_collect takes the frees that the stash held to their pages.
 * Page 0 went back to the queue first, so a walk in queue order would
 * find it first. */
static void make(char **b)
{
    assert_int_equal(class_pages(), 0);
    for (int i = 0; i < N; i++) {
        b[i] = alloc_malloc(SIZE);
        assert_non_null(b[i]);
        fill(b[i], i);
    }
    for (int k = 0; k < 3; k++)
        for (int i = 1; i < PER_PAGE; i++)
            assert_ptr_equal(start_of_page(b[k * PER_PAGE + i]), start_of_page(b[k * PER_PAGE]));
    assert_ptr_not_equal(start_of_page(b[N - 2]), start_of_page(b[N - 3]));
    assert_ptr_equal(start_of_page(b[N - 1]), start_of_page(b[N - 2]));
    assert_int_equal(class_pages(), 4);
    alloc_free(b[N - 1]);
    b[N - 1] = NULL;
    for (int i = 2; i < PER_PAGE; i++) {
        alloc_free(b[i]);
        b[i] = NULL;
    }
    for (int i = PER_PAGE; i < PER_PAGE + 4; i++) {
        alloc_free(b[i]);
        b[i] = NULL;
    }
    alloc_collect(false);
}

static void free_all(char **b)
{
    for (int i = 0; i < N; i++) {
        if (b[i] != NULL) {
            check(b[i], i);
            alloc_free(b[i]);
        }
    }
    alloc_collect(false);
    assert_int_equal(class_pages(), 0);
}

/* What page 3 has carved goes out first (it heads the queue); then the
 * four blocks free in page 1, before any of page 0's; then page 0
 * serves, before page 3 is carved further or a page begun. */
static void test_fuller_page_serves_first(void **state)
{
    (void)state;
    char *b[N], *more[PER_PAGE];
    make(b);
    const char *page0 = start_of_page(b[0]), *page1 = start_of_page(b[PER_PAGE + 4]),
               *page3 = start_of_page(b[N - 2]);
    int n = 0;
    char *p;
    while ((p = alloc_malloc(SIZE)) != NULL && start_of_page(p) == page3) {
        assert_true(n < PER_PAGE - 1);
        more[n++] = p;
    }
    assert_non_null(p);
    alloc_free(p);                      /* the head's next: taken again below */
    for (int i = PER_PAGE; i < PER_PAGE + 4; i++) {
        b[i] = alloc_malloc(SIZE);
        assert_non_null(b[i]);
        assert_ptr_equal(start_of_page(b[i]), page1);
        fill(b[i], i);
    }
    b[2] = alloc_malloc(SIZE);
    assert_non_null(b[2]);
    assert_ptr_equal(start_of_page(b[2]), page0);
    fill(b[2], 2);
    assert_int_equal(class_pages(), 4);
    while (n > 0)
        alloc_free(more[--n]);
    free_all(b);
}

/* Page 0, passed over while page 1 had room, empties when its last two
 * blocks are freed, and goes back: the class holds one page fewer. */
static void test_sparse_page_empties(void **state)
{
    (void)state;
    char *b[N];
    make(b);
    for (int i = PER_PAGE; i < PER_PAGE + 4; i++) {
        b[i] = alloc_malloc(SIZE);
        assert_non_null(b[i]);
        fill(b[i], i);
    }
    for (int i = 0; i < 2; i++) {
        check(b[i], i);
        alloc_free(b[i]);
        b[i] = NULL;
    }
    assert_int_equal(class_pages(), 3);
    free_all(b);
}

/* Two blocks live, one freed: the next malloc hands that one out again
 * (it is in cache), not another block of the page's free list - once
 * the page's fresh blocks are used up, which the first rounds do. */
static void test_freed_block_goes_out_first(void **state)
{
    (void)state;
    enum { S = 256, ROUNDS = 300, WARM = 100 };
    for (int r = 0; r < ROUNDS; r++) {
        char *x = alloc_malloc(S), *y = alloc_malloc(S);
        assert_non_null(x);
        assert_non_null(y);
        pattern_fill(x, S, r);
        pattern_fill(y, S, r + 1);
        alloc_free(x);
        char *z = alloc_malloc(S);
        assert_non_null(z);
        if (r >= WARM)
            assert_ptr_equal(z, x);
        assert_true(pattern_ok(y, S, r + 1));
        alloc_free(z);
        alloc_free(y);
    }
}

/* A block freed into a page whose free list is fresh (it reads as zero,
 * and calloc takes it without a memset) waits apart from that list:
 * every calloc reads zero, while blocks of the class are freed with data
 * in them all along. */
static void test_calloc_after_frees_into_fresh_page(void **state)
{
    (void)state;
    enum { S = 3000, ROUNDS = 200 };
    char *keep[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        char *p = alloc_malloc(S);
        assert_non_null(p);
        memset(p, 0xa5, S);
        alloc_free(p);
        char *q = alloc_calloc(1, S);
        assert_non_null(q);
        for (int k = 0; k < S; k++)
            if (q[k] != 0)
                fail_msg("round %d: calloc'd byte %d is %#x", r, k, (unsigned char)q[k]);
        memset(q, 0x5a, S);
        keep[r] = q;
    }
    for (int r = 0; r < ROUNDS; r++)
        alloc_free(keep[r]);
}

int main(void)
{
    /* No trims (core/page.c): alloc_collect would take page 0's free
     * blocks off its lists, and the order tested here is the lists'. */
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuller_page_serves_first),
        cmocka_unit_test(test_sparse_page_empties),
        cmocka_unit_test(test_freed_block_goes_out_first),
        cmocka_unit_test(test_calloc_after_frees_into_fresh_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
