/* purger.c - the background purger: gives free memory back to the OS
 * when the process has gone quiet.
 *
 * Purge passes also run on slow paths, but a server that frees a lot and
 * then idles makes no further call into the allocator; without a thread
 * of its own its RSS would stay up for ever.  The purger is one thread,
 * started lazily the first time memory becomes purgeable (from an
 * allocation slow path, where starting a thread is safe), only when
 * PURGE_DELAY_MS > 0 and, with PURGE_THREAD=auto, only once the process
 * has a second thread or holds 32 MiB (see wanted()).  It leaves when it is the last
 * thread of the process, and, where only a single-threaded process's
 * memory called for it, when nothing is left to purge.  It sleeps on a futex while nothing is pending (waking once a
 * second to look for that) and runs a pass every PURGE_DELAY_MS while
 * something is.  All signals are blocked in it, so signals meant for
 * the program (the statistics dump included) go to the program's own
 * threads.
 */
#define _GNU_SOURCE
#include "purger.h"
#include "heap.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "../core/commit.h"
#include "../core/options.h"
#include "../core/purge.h"
#include "../core/samples.h"
#include "../os/os.h"

enum { PURGER_NONE, PURGER_RUNNING, PURGER_FAILED };

/* Whether a purger runs (PURGER_*): relaxed where it only decides a
 * wake-up; the start and the exit order it with a CAS (acquire) and a
 * release store, below. */
static _Atomic int state;
/* Futex words, bumped with release and read with acquire: the purger
 * that sees a new count sees the work (or the delay) that bumped it. */
static _Atomic uint32_t work_seq;       /* bumped on new work */
static _Atomic uint32_t delay_seq;      /* bumped when PURGE_DELAY_MS changes */

static void futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* Whether the purger may be the process's last thread.  Without /proc
 * (a chroot, a sandbox) it cannot tell, so it leaves whenever it has
 * nothing to do (no work pending, and no outbox holding blocks, which
 * it would send but which are not work pending), and a slow path that
 * finds work starts it again: a
 * purger that stayed could be all that keeps a process alive whose main
 * thread ended with pthread_exit, and with every signal blocked in it
 * not even SIGTERM would end that process. */
static bool alone(void)
{
    long n = shoal_os_threads();
    return n == 1 || (n < 0 && !shoal_purge_pending() && !shoal_heap_outboxes_hold());
}

static void wake(void)
{
    atomic_fetch_add_explicit(&work_seq, 1, memory_order_release);
    if (atomic_load_explicit(&state, memory_order_relaxed) == PURGER_RUNNING)
        futex(&work_seq, FUTEX_WAKE_PRIVATE, 1, NULL);
}

/* Relaxed: a hint to look again soon, nothing is published through it. */
static _Atomic bool thread_exited;

void shoal_purger_thread_exiting(void)
{
    if (atomic_load_explicit(&state, memory_order_relaxed) != PURGER_RUNNING)
        return;
    atomic_store_explicit(&thread_exited, true, memory_order_relaxed);
    wake();
}

/* A thread is on its way out and may have been the program's last: it is
 * still running its exit handlers now, so look again for a little while
 * rather than wait a whole second. */
static bool alone_soon(void)
{
    static const struct timespec tick = { 0, 10 * 1000000L };
    if (!atomic_exchange_explicit(&thread_exited, false, memory_order_relaxed))
        return alone();
    for (int i = 0; i < 20; i++) {
        if (alone())
            return true;
        nanosleep(&tick, NULL);
    }
    return false;
}

/* Sleep for one purge delay.  A new PURGE_DELAY_MS cuts the sleep short
 * (false: the caller starts again on the new delay), so an hour's delay
 * set back to 100 ms does not wait out the hour. */
static bool sleep_delay(long delay)
{
    uint32_t seq = atomic_load_explicit(&delay_seq, memory_order_acquire);
    uint64_t end = shoal_os_now_ms() + (uint64_t)delay;
    shoal_purge_set_due(end);
    for (;;) {
        uint64_t now = shoal_os_now_ms();
        if (now >= end)
            return true;
        uint64_t left = end - now;
        struct timespec ts = { (time_t)(left / 1000), (long)(left % 1000) * 1000000L };
        futex(&delay_seq, FUTEX_WAIT_PRIVATE, seq, &ts);
        if (atomic_load_explicit(&delay_seq, memory_order_acquire) != seq)
            return false;
    }
}

/* A purger that only a single-threaded process's memory called for
 * (wanted()): with nothing left to purge, it leaves, and the process is
 * single-threaded again - for an unshare(CLONE_NEWUSER), or a fork that
 * warns when other threads are there (CPython 3.12's) - until its next
 * slow path finds memory to purge. */
static bool only_for_one(void)
{
    return shoal_opt(ALLOC_OPTION_PURGE_THREAD) == -1 && shoal_heap_created() < 2 &&
           shoal_os_threads() == 2;
}

/* The purger stops being one: a slow path that finds work starts
 * another. */
static void leave(void)
{
    shoal_remote_stealer_set(false);
    shoal_purge_set_background(false);
    /* Release: a slow path that starts the next purger after reading
     * NONE (its CAS acquires) finds this one's last pass done. */
    atomic_store_explicit(&state, PURGER_NONE, memory_order_release);
}

/* The purger starts being one (on its own thread).  From here on, idle
 * outboxes are its to send, where membarrier(2) is to be had: registered
 * by each purger (a fork child's registration is not inherited).  Here,
 * not in the thread that starts the purger: the first registration of a
 * process waits out an RCU grace period in the kernel, and a server's
 * thread that paid it inside a malloc stalled for 7-25 ms (redis-server:
 * GET's worst latency 8-25 ms, against 2.5-5 without the purger). */
static void begin(void)
{
    shoal_purge_set_background(true);
    shoal_remote_stealer_set(shoal_os_barrier_register());
}

/* Leave, where only a lone thread's memory called for this purger and
 * nothing is left to purge - unless work came in meanwhile: true if it
 * left.  The free that makes work pending (mark_pending's exchange, seq
 * cst) and then looks for a purger to start (shoal_purger_start's load
 * of `state`, seq cst) against this store of NONE, fence and look at
 * the work: one of the two sees the other's write.  Either this purger
 * sees the work and stays (unless another started meanwhile, whose CAS
 * won), or the free sees no purger and starts one.  Without this look,
 * a free between the purger's last look and its leaving woke nobody and
 * started nobody, and a single-threaded server that then idled kept that
 * memory until its next request. */
static bool leave_idle(void)
{
    leave();
    atomic_thread_fence(memory_order_seq_cst);
    int none = PURGER_NONE;
    if (!shoal_purge_pending() ||
        !atomic_compare_exchange_strong_explicit(&state, &none, PURGER_RUNNING,
                                                 memory_order_acquire, memory_order_relaxed))
        return true;
    begin();
    return false;
}

static void *purger_main(void *arg)
{
    (void)arg;
    begin();
    for (;;) {
        uint32_t seq = atomic_load_explicit(&work_seq, memory_order_acquire);
        if (alone_soon()) {
            leave();
            return NULL;
        }
        long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
        bool idle = delay <= 0 || !shoal_purge_pending();
        if (idle && only_for_one()) {
            if (leave_idle())
                return NULL;
            continue;
        }
        shoal_heap_scan_idle();
        if (idle) {
            /* Returns at once if work arrived since we read seq, and after
             * a second anyway, to see whether the program is still there:
             * one wake-up a second is all an idle process pays. */
            static const struct timespec second = { 1, 0 };
            futex(&work_seq, FUTEX_WAIT_PRIVATE, seq, &second);
            continue;
        }
        if (sleep_delay(delay))
            shoal_purge_now(false);
    }
    return NULL;
}

/* Calls of this thread to let pass before wanted() looks again, after
 * it found one heap in the process: a huge block's free in a
 * single-threaded program comes here every time. */
static __thread uint8_t tl_single_skip __attribute__((tls_model("initial-exec")));

/* In auto mode the purger may start once the process has a second
 * thread: one that allocated (a second heap), or any other - a server
 * whose helper threads never allocate, like redis's, must not keep its
 * freed memory while idle - or once it holds PURGER_SINGLE_MIN from the
 * OS: a single-threaded server that idles between requests (a
 * PostgreSQL backend, after a query that sorted 256 MB: 73 MB of RSS
 * idle against glibc's 13) must not keep what its last request freed
 * until the next - unless a seccomp filter is on it, which may kill the
 * process for the thread's clone (a single-threaded daemon's list of its
 * calls has no need of clone).  A small single-threaded program stays
 * so (it may want unshare(CLONE_NEWUSER), which the kernel allows only
 * there); the thread count is read at most once a second, as this runs
 * on slow paths while memory awaits purging. */
#define PURGER_SINGLE_MIN ((size_t)32 << 20)

/* Set in a fork child of a process that had other threads: POSIX leaves
 * a thread started there undefined (glibc copes; ThreadSanitizer kills
 * the process), so only the program's own second thread starts one. */
static bool forked_from_threads;

/* Whether the process holds enough for the purger on that count alone. */
static bool holds_much(void)
{
    return !forked_from_threads && shoal_commit_charged() >= PURGER_SINGLE_MIN;
}

static bool wanted(void)
{
    /* Relaxed: a time; the start itself is the CAS on state. */
    static _Atomic uint64_t next_look_ms;
    long mode = shoal_opt(ALLOC_OPTION_PURGE_THREAD);
    if (mode != -1)
        return mode == 1;
    if (shoal_heap_created() >= 2 || (holds_much() && !shoal_os_filtered()))
        return true;
    /* Not even the clock but once in 64 calls of a thread. */
    tl_single_skip = 63;
    uint64_t now = shoal_os_now_ms();
    uint64_t due = atomic_load_explicit(&next_look_ms, memory_order_relaxed);
    if (now < due || !atomic_compare_exchange_strong_explicit(&next_look_ms, &due, now + 1000,
                                                              memory_order_relaxed,
                                                              memory_order_relaxed))
        return false;
    return shoal_os_threads() >= 2;
}

/* Start the purger where it is wanted, not running, and memory waits
 * for it (`inbox`: or a full outbox was just sent to owners' inboxes). */
static void start(bool inbox)
{
    int none = PURGER_NONE;
    /* Seq cst: leave_idle's argument. */
    if (atomic_load_explicit(&state, memory_order_seq_cst) != PURGER_NONE)
        return;
    if (tl_single_skip != 0) {
        /* (The memory wanted() looks at grows without this thread
         * calling: the rest of its look waits, that does not.) */
        if (!holds_much()) {
            tl_single_skip--;
            return;
        }
        tl_single_skip = 0;
    }
    if (shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) <= 0 || !(inbox || shoal_purge_pending()) ||
        !wanted() ||
        /* Acquire: pairs with a leaving purger's release (above). */
        !atomic_compare_exchange_strong_explicit(&state, &none, PURGER_RUNNING,
                                                 memory_order_acquire, memory_order_relaxed))
        return;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_sigmask(SIG_SETMASK, &all, &old);           /* the thread inherits it */
    shoal_prof_own_begin();
    int failed = pthread_create(&t, &attr, purger_main, NULL);
    shoal_prof_own_end();
    if (failed != 0) {
        /* Relaxed: nothing is published; slow paths still purge. */
        atomic_store_explicit(&state, PURGER_FAILED, memory_order_relaxed);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

void shoal_purger_start(void)
{
    start(false);
}

void shoal_purger_start_for_inbox(void)
{
    start(true);
}

void shoal_purger_slow_path(void)
{
    /* A purger that has just left only makes this one tick more. */
    if (!shoal_purger_running() && shoal_purge_pending())
        shoal_purge_tick(true);
    shoal_purger_start();
}

/* alloc_option_set changed PURGE_DELAY_MS: a purger asleep on the old
 * delay wakes, one that was not wanted may now be.  A delay of 0 means
 * at once, and no clock runs for it (frees purge as they come): what is
 * free already goes now, on the caller's thread. */
static void delay_changed(long value)
{
    if (value == 0)
        shoal_purge_now(true);
    shoal_purge_clock_start();
    atomic_fetch_add_explicit(&delay_seq, 1, memory_order_release);
    if (atomic_load_explicit(&state, memory_order_relaxed) == PURGER_RUNNING)
        futex(&delay_seq, FUTEX_WAKE_PRIVATE, 1, NULL);
    wake();
    tl_single_skip = 0;         /* look now */
    shoal_purger_start();
}

/* MAX_MEMORY set below what is committed now: free memory goes at once,
 * so that the account comes under the limit.  (Free slots still charged
 * would otherwise be claimed again with no new charge, and the process
 * go on above the limit it was given.) */
static void limit_changed(long value)
{
    if (value != 0 && shoal_commit_charged() > (size_t)value)
        shoal_purge_now(true);
}

void shoal_purger_init(void)
{
    shoal_purge_clock_start();
    shoal_purge_set_waker(wake);
    shoal_option_on_change(ALLOC_OPTION_PURGE_DELAY_MS, delay_changed);
    shoal_option_on_change(ALLOC_OPTION_MAX_MEMORY, limit_changed);
    shoal_purge_set_reclaimer(shoal_heap_reclaim);
}

bool shoal_purger_running(void)
{
    return atomic_load_explicit(&state, memory_order_relaxed) == PURGER_RUNNING;
}

void shoal_purger_fork_child(bool threaded)
{
    forked_from_threads |= threaded;
    /* The thread did not come with the fork; start another when needed. */
    atomic_store_explicit(&state, PURGER_NONE, memory_order_relaxed);    /* one thread here */
    shoal_remote_stealer_set(false);
    shoal_purge_set_background(false);
}
