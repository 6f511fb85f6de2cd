/* The stack walk of heap profiles (src/os/unwind.h): frame for frame
 * against the return addresses the compiler knows (__builtin_return_
 * address), through frames whose CFA is rsp- and rbp-based, a large
 * frame, libc's qsort calling back, a thread's stack to its outermost
 * frame, a signal handler (the walk stops at the signal frame, whole
 * below it), and many threads walking at once while the rule table
 * fills (each must get its own stack right). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "os/unwind.h"

#define MAX 80

/* The walk from `leaf`, and the return addresses of the three callers
 * above it, which the walk must find as its frames 1, 2 and 3 (frame 0
 * is in leaf itself, past its call of the walk). */
typedef struct walk_s {
    void *pcs[MAX];
    unsigned n;
    void *ra[3];
    const void *own_lo, *own_hi;        /* the walk's own code (NULL: none) */
    bool from_frame;                    /* walk from leaf's frame address */
} walk_t;

static __attribute__((noinline)) void leaf(walk_t *w)
{
    w->ra[0] = __builtin_return_address(0);
    w->n = shoal_os_unwind(w->pcs, MAX, w->own_lo, w->own_hi,
                           w->from_frame ? __builtin_frame_address(0) : NULL);
    __asm__ volatile("" ::: "memory");  /* no tail call: leaf keeps its frame */
}

/* rbp-based CFA: an alloca the compiler cannot size. */
static __attribute__((noinline)) void middle(walk_t *w, size_t grow)
{
    w->ra[1] = __builtin_return_address(0);
    char *pad = __builtin_alloca(grow);
    memset(pad, 1, grow);
    leaf(w);
    __asm__ volatile("" ::"r"(pad) : "memory");
}

/* rsp-based CFA: a frame of fixed size. */
static __attribute__((noinline)) void plain(walk_t *w)
{
    w->ra[1] = __builtin_return_address(0);
    leaf(w);
    __asm__ volatile("" ::: "memory");  /* no tail call */
}

/* A frame of 200 KB. */
static __attribute__((noinline)) void top(walk_t *w, size_t grow)
{
    w->ra[2] = __builtin_return_address(0);
    volatile char big[200000];
    big[grow % sizeof big] = 1;
    middle(w, grow);
    big[0] = big[grow % sizeof big];
}

static void check_walk(const walk_t *w)
{
    assert_true(w->n >= 4);
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(w->pcs[i + 1], w->ra[i]);
}

/* A walk from leaf through top (middle's alloca of `grow`), checked.
 * Inline, so that the frames above top are its caller's, as in a walk
 * that calls top itself. */
static inline __attribute__((always_inline)) walk_t checked_walk(size_t grow)
{
    walk_t w = { .own_lo = NULL };
    top(&w, grow);
    check_walk(&w);
    return w;
}

static void test_frames_match_return_addresses(void **state)
{
    (void)state;
    assert_true(shoal_os_unwind_supported());
    for (size_t grow = 8; grow <= 8192; grow *= 4) {
        walk_t w = checked_walk(grow);
        /* The same stack again: from the table this time, the same. */
        walk_t again = checked_walk(grow);
        assert_int_equal(again.n, w.n);
    }
}

/* A caller's own frames: a return address in its range drops it and all
 * before it, and only those. */
static void test_own_frames_dropped(void **state)
{
    (void)state;
    walk_t w = { .own_lo = NULL };
    top(&w, 64);
    check_walk(&w);
    walk_t own = { .own_lo = w.ra[1], .own_hi = (const char *)w.ra[1] + 1 };
    top(&own, 64);              /* middle's return address is "own" */
    assert_int_equal(own.n, w.n - 3);
    assert_ptr_equal(own.pcs[0], own.ra[2]);    /* top's return, here */
    for (unsigned i = 1; i < own.n; i++)
        assert_ptr_equal(own.pcs[i], w.pcs[i + 3]);
}

/* A walk from leaf's frame address starts at leaf's return address: the
 * frames below it are not walked, and the rest is the same walk (through
 * middle's rbp-based CFA too); a return address there in the own range
 * is dropped as anywhere else. */
static void test_walk_from_frame(void **state)
{
    (void)state;
    for (size_t grow = 8; grow <= 8192; grow *= 4) {
        walk_t w = checked_walk(grow);
        walk_t from = { .from_frame = true };
        top(&from, grow);
        assert_int_equal(from.n, w.n - 1);
        for (unsigned i = 0; i < 3; i++)
            assert_ptr_equal(from.pcs[i], from.ra[i]);
        for (unsigned i = 3; i < from.n; i++)
            assert_ptr_equal(from.pcs[i], w.pcs[i + 1]);
        walk_t own = { .own_lo = w.ra[0], .own_hi = (const char *)w.ra[0] + 1, .from_frame = true };
        top(&own, grow);        /* leaf's return address, the first, is "own" */
        assert_int_equal(own.n, w.n - 2);
        assert_ptr_equal(own.pcs[0], own.ra[1]);
    }
    /* From a frame whose caller's CFA is rsp-based. */
    walk_t p = { .own_lo = NULL }, from = { .from_frame = true };
    plain(&p);
    plain(&from);
    assert_true(p.n >= 3);
    assert_int_equal(from.n, p.n - 1);
    assert_ptr_equal(from.pcs[0], from.ra[0]);
    assert_ptr_equal(from.pcs[1], from.ra[1]);
    for (unsigned i = 2; i < from.n; i++)
        assert_ptr_equal(from.pcs[i], p.pcs[i + 1]);
}

static __attribute__((noinline)) unsigned depth_of(unsigned d, void **pcs)
{
    if (d == 0)
        return shoal_os_unwind(pcs, MAX, NULL, NULL, NULL);
    unsigned n = depth_of(d - 1, pcs);
    __asm__ volatile("" ::: "memory");
    return n;
}

static void test_deep_stack_is_cut_at_max(void **state)
{
    (void)state;
    void *shallow[MAX], *deep[MAX];
    unsigned n0 = depth_of(0, shallow);
    unsigned n10 = depth_of(10, deep);
    assert_int_equal(n10, n0 + 10);     /* ten frames more, no more */
    assert_int_equal(depth_of(200, deep), MAX);
}

/* A call that never returns is a function's last instruction, so its
 * return address is the next function's first: the rule is looked up
 * at the call (ra - 1), or the walk would follow the wrong function. */
static jmp_buf out_of_noreturn;
static walk_t noreturn_walk;

static __attribute__((noinline, noreturn)) void walk_and_leave(void)
{
    noreturn_walk.n = shoal_os_unwind(noreturn_walk.pcs, MAX, NULL, NULL, NULL);
    longjmp(out_of_noreturn, 1);
}

static __attribute__((noinline, noreturn)) void ends_in_call(int *guard)
{
    noreturn_walk.ra[0] = __builtin_return_address(0);
    if (*guard)         /* a frame of its own, not a jump to walk_and_leave */
        abort();
    walk_and_leave();
}

static __attribute__((noinline)) void caller_of_noreturn(int *guard)
{
    noreturn_walk.ra[1] = __builtin_return_address(0);
    if (setjmp(out_of_noreturn) == 0)
        ends_in_call(guard);
    __asm__ volatile("" ::: "memory");
}

static void test_noreturn_call(void **state)
{
    (void)state;
    int guard = 0;
    caller_of_noreturn(&guard);
    assert_true(noreturn_walk.n >= 3);
    assert_ptr_equal(noreturn_walk.pcs[2], noreturn_walk.ra[0]);
    assert_ptr_equal(noreturn_walk.pcs[3], noreturn_walk.ra[1]);
}

/* qsort calls back: the walk crosses libc to the caller of qsort. */
static walk_t sorted_walk;
static int walked;

static int compare(const void *a, const void *b)
{
    if (!walked++)
        sorted_walk.n = shoal_os_unwind(sorted_walk.pcs, MAX, NULL, NULL, NULL);
    return *(const int *)a - *(const int *)b;
}

static __attribute__((noinline)) void sort_some(void)
{
    sorted_walk.ra[0] = __builtin_return_address(0);
    int v[8] = { 5, 3, 7, 1, 8, 2, 6, 4 };
    qsort(v, 8, sizeof v[0], compare);
    __asm__ volatile("" ::: "memory");
}

static void test_through_libc_callback(void **state)
{
    (void)state;
    walked = 0;
    sort_some();
    bool found = false;
    for (unsigned i = 0; i < sorted_walk.n; i++)
        found |= sorted_walk.pcs[i] == sorted_walk.ra[0];
    assert_true(found);
}

/* A thread's walk ends at its outermost frame (clone's), not at MAX. */
static void *thread_walk(void *arg)
{
    walk_t *w = arg;
    top(w, 64);
    return NULL;
}

static void test_thread_stack_ends(void **state)
{
    (void)state;
    walk_t w = { .own_lo = NULL };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_walk, &w), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    check_walk(&w);
    assert_true(w.n < 16);
}

/* In a signal handler: the frames of the handler, then a stop at the
 * signal frame (its rules are DWARF expressions) - never a crash. */
static walk_t signal_walk;

static void on_signal(int sig)
{
    (void)sig;
    top(&signal_walk, 32);
}

static void test_signal_handler(void **state)
{
    (void)state;
    struct sigaction sa = { .sa_handler = on_signal }, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    raise(SIGUSR1);
    sigaction(SIGUSR1, &old, NULL);
    check_walk(&signal_walk);
}

/* Threads walk different stacks at once while the table fills: every
 * walk must match its own return addresses. */
#define THREADS 8
#define ROUNDS 2000

static void *walker(void *arg)
{
    size_t grow = 8 + (size_t)(uintptr_t)arg * 24;
    for (int r = 0; r < ROUNDS; r++) {
        walk_t w = { .own_lo = NULL };
        if (r & 1)
            top(&w, grow);
        else
            middle(&w, grow);
        assert_true(w.n >= 3);
        assert_ptr_equal(w.pcs[1], w.ra[0]);
        assert_ptr_equal(w.pcs[2], w.ra[1]);
        if (r & 1)
            assert_ptr_equal(w.pcs[3], w.ra[2]);
    }
    return NULL;
}

static void test_threads_walk_at_once(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, walker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames_match_return_addresses),
        cmocka_unit_test(test_own_frames_dropped),
        cmocka_unit_test(test_walk_from_frame),
        cmocka_unit_test(test_deep_stack_is_cut_at_max),
        cmocka_unit_test(test_noreturn_call),
        cmocka_unit_test(test_through_libc_callback),
        cmocka_unit_test(test_thread_stack_ends),
        cmocka_unit_test(test_signal_handler),
        cmocka_unit_test(test_threads_walk_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
