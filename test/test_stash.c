/* The heap's stash (src/thread/stash.h): a block freed into a full page
 * waits there for the next malloc of its class that finds its page dry,
 * the last one freed first, and the stash is emptied into the pages
 * where the heap's caches are (alloc_collect here).  So does a block of
 * another thread's page, freed here while this heap's page of its class
 * is dry; it goes home as a remote free when the stash is emptied, and
 * a fork child does not hand it out twice. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shoal.h"
#include "core/pool.h"
#include "core/size_class.h"
#include "thread/heap.h"
#include "test_util.h"

enum { SIZE = 20000, N = 48 };

static char *start_of_page(void *p)
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

/* N blocks of SIZE, each filled with its pattern.  Pages of a class are
 * used one after the other (nothing is freed yet), so a block that
 * starts a new page closes the page before it: full. */
static void make(char **b)
{
    for (int i = 0; i < N; i++) {
        b[i] = alloc_malloc(SIZE);
        assert_non_null(b[i]);
        fill(b[i], i);
    }
}

/* The index of the first block of the k-th page begun among b (k from 0). */
static int page_begins(char **b, int k)
{
    for (int i = 1; i < N; i++)
        if (start_of_page(b[i]) != start_of_page(b[i - 1]) && k-- == 0)
            return i;
    fail();
    return -1;
}

/* Two blocks freed into two full pages come back, the last freed first,
 * when the page in use runs dry - before any other block of the pages
 * and before a page is begun.  (Without the stash, each free puts its
 * page back at the end of the queue, and the walk finds the first one
 * first.) */
static void test_last_freed_comes_back_first(void **state)
{
    (void)state;
    char *b[N];
    make(b);
    int p1 = page_begins(b, 0), p2 = page_begins(b, 1), p3 = page_begins(b, 2);
    assert_true(p1 > 4 && p2 > p1 + 4 && p3 < N - 1);   /* pages 0 and 1 full, a page after */
    char *x = b[3], *y = b[p1 + 3];
    alloc_free(x);
    alloc_free(y);
    char *head = start_of_page(b[N - 1]);
    char *got[N];
    int n = 0;
    while (n < N) {
        got[n] = alloc_malloc(SIZE);
        assert_non_null(got[n]);
        if (got[n] == y || got[n] == x)
            break;
        assert_ptr_equal(start_of_page(got[n]), head);  /* the page in use, till dry */
        n++;
    }
    assert_ptr_equal(got[n], y);
    char *next = alloc_malloc(SIZE);
    assert_ptr_equal(next, x);
    fill(y, p1 + 3);
    fill(x, 3);
    for (int i = 0; i < N; i++)
        check(b[i], i);                 /* x and y again, and every other block */
    for (int i = 0; i <= n; i++)
        if (got[i] != y)
            alloc_free(got[i]);
    for (int i = 0; i < N; i++)
        alloc_free(b[i]);
}

/* Blocks the stash holds keep their pages in use until it is emptied:
 * every block of N freed (the first frees into each full page go to the
 * stash), alloc_collect gives every page of the class back. */
static void test_collect_empties_the_stash(void **state)
{
    (void)state;
    unsigned c = shoal_size_to_class_nz(SIZE);
    alloc_collect(false);               /* what the test before left in the stash */
    char *b[N];
    make(b);
    for (int i = 0; i < N; i++)
        alloc_free(b[i]);
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_true(st.classes[c].pages >= 1);              /* a stashed block holds its page */
    alloc_collect(false);
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.classes[c].pages, 0);
    assert_int_equal(st.classes[c].live_blocks, 0);
}

static bool all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

/* calloc takes the stashed blocks back as malloc does, the last freed
 * first, and zeroes what the program wrote into them; the same in a
 * profiled heap, whose stashed blocks pass the thread's byte count
 * (the rate is so large that no sample falls in these few blocks). */
static void calloc_takes_stashed(bool profiled)
{
    alloc_collect(false);
    if (profiled) {
        assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF_SAMPLE, 1L << 40), 0);
        assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF, 1), 0);
    }
    char *b[N];
    make(b);
    int p1 = page_begins(b, 0), p3 = page_begins(b, 2);
    assert_true(p1 > 4 && p3 < N - 1);
    char *x = b[3], *y = b[p1 + 3];
    alloc_free(x);
    alloc_free(y);
    char *got[N];
    int n = 0;
    while (n < N) {
        got[n] = alloc_calloc(1, SIZE);
        assert_non_null(got[n]);
        assert_true(all_zero(got[n], SIZE));
        if (got[n] == y || got[n] == x)
            break;
        n++;
    }
    assert_ptr_equal(got[n], y);
    char *next = alloc_calloc(SIZE, 1);
    assert_ptr_equal(next, x);
    assert_true(all_zero(x, SIZE));
    fill(y, p1 + 3);
    fill(x, 3);
    for (int i = 0; i < N; i++)
        check(b[i], i);
    for (int i = 0; i <= n; i++)
        if (got[i] != y)
            alloc_free(got[i]);
    for (int i = 0; i < N; i++)
        alloc_free(b[i]);
    if (profiled) {
        assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF, 0), 0);
        assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF_SAMPLE, 512 << 10), 0);
    }
}

static void test_calloc_takes_stashed(void **state)
{
    (void)state;
    calloc_takes_stashed(false);
}

static void test_calloc_takes_stashed_profiled(void **state)
{
    (void)state;
    calloc_takes_stashed(true);
}

/* Blocks of BIG (16 a 64 KiB page), patterned, until `pages` pages are
 * begun: b[first[k]] is the first block of the k-th page, and every page
 * but the last is full (see make). */
enum { BIG = 4096 };

static int make_pages(char **b, int cap, int *first, int pages)
{
    int n = 0, k = 0;
    while (k < pages) {
        assert_true(n < cap);
        b[n] = alloc_malloc(BIG);
        assert_non_null(b[n]);
        pattern_fill(b[n], BIG, n);
        if (n == 0 || start_of_page(b[n]) != start_of_page(b[n - 1]))
            first[k++] = n;
        n++;
    }
    return n;
}

/* Every block of b[0..n) not freed yet (NULL) checked and freed. */
static void free_all_checked(char **b, int n)
{
    for (int i = 0; i < n; i++) {
        if (b[i] != NULL) {
            assert_true(pattern_ok(b[i], BIG, i));
            alloc_free(b[i]);
        }
    }
}

/* One block freed into each of `freed` full pages (pages 1..freed of
 * those make_pages began): the stash keeps `kept` of them, and their
 * pages stay full; the others' pages go back to the queue.  Then every
 * freed block comes back to the mallocs that follow, and every block
 * keeps its pattern. */
static void stash_keeps(int pages, int freed, int kept)
{
    alloc_collect(false);               /* what the tests before left in the stash */
    shoal_heap_t *h = shoal_tl_heap;
    unsigned c = shoal_size_to_class_nz(BIG);
    int cap = pages * 16 + 64;
    char **b = calloc((size_t)cap, sizeof *b);
    int *first = calloc((size_t)pages, sizeof *first);
    assert_true(b != NULL && first != NULL);
    int n = make_pages(b, cap, first, pages);
    size_t full = h->full_pages;
    assert_int_equal(h->stashed[c], 0);
    for (int k = 1; k <= freed; k++)
        alloc_free(b[first[k]]);
    assert_int_equal(h->stashed[c], kept);
    assert_int_equal(h->full_pages, full - (size_t)(freed - kept));
    int back = 0;
    while (back < freed) {              /* the page in use, the stash, the queue */
        char *p = alloc_malloc(BIG);
        assert_true(p != NULL && n < cap);
        for (int k = 1; k <= freed; k++)
            back += p == b[first[k]];
        pattern_fill(p, BIG, n);
        b[n++] = p;
    }
    assert_int_equal(h->stashed[c], 0);
    for (int k = 1; k <= freed; k++)
        b[first[k]] = NULL;             /* freed, and handed out again later in b */
    free_all_checked(b, n);
    free(first);
    free(b);
}

/* A heap of few full pages stashes SHOAL_STASH_MIN blocks a class; one
 * of many (25 MiB of 4 KiB blocks, 399 full pages), SHOAL_STASH_MAX:
 * there a free that finds its page full is the common case (a random
 * replacement), and the stash decides how often malloc walks. */
static void test_stash_grows_with_full_pages(void **state)
{
    (void)state;
    stash_keeps(8, SHOAL_STASH_MIN + 1, SHOAL_STASH_MIN);
    stash_keeps(400, SHOAL_STASH_MAX + 1, SHOAL_STASH_MAX);
    stash_keeps(8, SHOAL_STASH_MIN + 1, SHOAL_STASH_MIN);    /* and shrinks again */
}

/* A program that frees what it held, with no malloc searching in
 * between, gets back every page of the class but its queue's head: once
 * SHOAL_STASH_EMPTIED pages have emptied, the stash closes and sends its
 * blocks home, and the pages they held empty too (an idle server after
 * freeing its data would keep them for as long as it idles).  The next
 * malloc that searches opens it again. */
static void test_mass_free_closes_the_stash(void **state)
{
    (void)state;
    alloc_collect(false);
    shoal_heap_t *h = shoal_tl_heap;
    unsigned c = shoal_size_to_class_nz(BIG);
    enum { PAGES = 40 };
    int cap = PAGES * 16 + 64, first[PAGES];
    char **b = calloc((size_t)cap, sizeof *b);
    assert_non_null(b);
    int n = make_pages(b, cap, first, PAGES);
    for (int k = 0; k < PAGES - 1; k++) {       /* into every full page: the stash fills */
        alloc_free(b[first[k]]);
        b[first[k]] = NULL;
    }
    assert_true(h->stashed[c] >= SHOAL_STASH_MIN);
    free_all_checked(b, n);
    assert_int_equal(h->stashed[c], 0);
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.classes[c].live_blocks, 0);
    assert_true(st.classes[c].pages <= 1);
    /* Open again: one block freed into each of five full pages, four
     * kept. */
    n = make_pages(b, cap, first, 8);
    for (int k = 1; k <= SHOAL_STASH_MIN + 1; k++) {
        alloc_free(b[first[k]]);
        b[first[k]] = NULL;
    }
    assert_int_equal(h->stashed[c], SHOAL_STASH_MIN);
    free_all_checked(b, n);
    alloc_collect(false);
    free(b);
}

/* ---- foreign blocks ------------------------------------------------------ */

enum { THEIRS = 4 };
static char *theirs[THEIRS];
static pthread_barrier_t step;

/* Makes THEIRS blocks and stays alive (its heap held) until the test is
 * done with them. */
static void *owner(void *arg)
{
    (void)arg;
    for (int i = 0; i < THEIRS; i++) {
        theirs[i] = alloc_malloc(SIZE);
        fill(theirs[i], 100 + i);
    }
    pthread_barrier_wait(&step);        /* made */
    pthread_barrier_wait(&step);        /* the test is done */
    return NULL;
}

static pthread_t start_owner(void)
{
    pthread_t t;
    alloc_collect(false);
    assert_int_equal(pthread_barrier_init(&step, NULL, 2), 0);
    assert_int_equal(pthread_create(&t, NULL, owner, NULL), 0);
    pthread_barrier_wait(&step);
    return t;
}

static void stop_owner(pthread_t t)
{
    pthread_barrier_wait(&step);
    assert_int_equal(pthread_join(t, NULL), 0);
    pthread_barrier_destroy(&step);
}

static uint64_t remote_frees(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st.remote_frees;
}

/* This thread's own block of SIZE (its page of the class is dry after
 * it: a SIZE block is one OS page's carve), and theirs[0] freed here:
 * into the stash. */
static char *stash_theirs(void)
{
    char *mine = alloc_malloc(SIZE);
    fill(mine, 1);
    check(theirs[0], 100);
    alloc_free(theirs[0]);
    assert_int_equal(shoal_tl_heap->stashed[shoal_size_to_class_nz(SIZE)], 1);
    return mine;
}

/* A block of the owner's page freed here, where this heap's page of the
 * class is dry (a SIZE block is one OS page's carve: the page runs dry
 * at each malloc), is this heap's next malloc of the class - not sent
 * home; the stash emptied (alloc_collect) sends the next one home, a
 * remote free then. */
static void test_foreign_block_used_here(void **state)
{
    (void)state;
    pthread_t t = start_owner();
    shoal_heap_t *h = shoal_tl_heap;
    unsigned c = shoal_size_to_class_nz(SIZE);
    uint64_t sent = remote_frees();
    char *mine = stash_theirs();
    char *again = alloc_malloc(SIZE);
    assert_ptr_equal(again, theirs[0]);
    fill(again, 7);
    alloc_free(theirs[1]);
    assert_int_equal(h->stashed[c], 1);
    assert_int_equal(remote_frees(), sent);
    alloc_collect(false);
    assert_int_equal(h->stashed[c], 0);
    assert_int_equal(remote_frees(), sent + 1);
    check(mine, 1);
    check(again, 7);
    for (int i = 2; i < THEIRS; i++)
        check(theirs[i], 100 + i);
    stop_owner(t);
    alloc_free(again);
    alloc_free(mine);
    for (int i = 2; i < THEIRS; i++)
        alloc_free(theirs[i]);
    alloc_collect(false);
}

/* A fork child whose heap holds a foreign block of a thread that did not
 * come with the fork: the block leaves the stash (the rebuild of the
 * thread's pages finds it free), and every block the child's mallocs
 * hand out is a different one, its contents intact until freed. */
static void test_fork_forgets_vanished_foreign_block(void **state)
{
    (void)state;
    pthread_t t = start_owner();
    shoal_heap_t *h = shoal_tl_heap;
    unsigned c = shoal_size_to_class_nz(SIZE);
    char *mine = stash_theirs();
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = h->stashed[c] != 0;
        alloc_free(theirs[1]);          /* its page's rebuild finds theirs[0] free */
        enum { M = 40 };
        char *got[M];
        for (int i = 0; i < M; i++) {
            got[i] = alloc_malloc(SIZE);
            bad |= got[i] == NULL;
            if (got[i] != NULL)
                fill(got[i], 50 + i);
        }
        for (int i = 0; i < M; i++)
            bad |= got[i] != NULL && !pattern_ok(got[i], SIZE, 50 + i);
        bad |= !pattern_ok(mine, SIZE, 1);
        for (int i = 2; i < THEIRS; i++)
            bad |= !pattern_ok(theirs[i], SIZE, 100 + i);
        _exit(bad);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    alloc_collect(false);               /* the foreign block goes home */
    stop_owner(t);
    alloc_free(mine);
    for (int i = 1; i < THEIRS; i++)
        alloc_free(theirs[i]);
    alloc_collect(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_freed_comes_back_first),
        cmocka_unit_test(test_collect_empties_the_stash),
        cmocka_unit_test(test_calloc_takes_stashed),
        cmocka_unit_test(test_calloc_takes_stashed_profiled),
        cmocka_unit_test(test_stash_grows_with_full_pages),
        cmocka_unit_test(test_mass_free_closes_the_stash),
        cmocka_unit_test(test_foreign_block_used_here),
        cmocka_unit_test(test_fork_forgets_vanished_foreign_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
