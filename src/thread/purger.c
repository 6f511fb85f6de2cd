/* purger.c - the background purger: gives free memory back to the OS
 * when the process has gone quiet.
 *
 * Purge passes also run on slow paths, but a server that frees a lot and
 * then idles makes no further call into the allocator; without a thread
 * of its own its RSS would stay up for ever.  The purger is one thread,
 * started lazily the first time memory becomes purgeable (from an
 * allocation slow path, where starting a thread is safe), only when
 * PURGE_DELAY_MS > 0.  It sleeps on a futex while nothing is pending and
 * runs a pass every PURGE_DELAY_MS while something is, so an idle process
 * costs no wake-ups.  All signals are blocked in it, so signals meant for
 * the program (the statistics dump included) go to the program's own
 * threads.
 */
#define _GNU_SOURCE
#include "heap.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "../core/options.h"
#include "../core/purge.h"

enum { PURGER_NONE, PURGER_RUNNING, PURGER_FAILED };

static _Atomic int state;
static _Atomic uint32_t work_seq;       /* the futex word: bumped on new work */

static void futex(_Atomic uint32_t *word, int op, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

static void wake(void)
{
    atomic_fetch_add_explicit(&work_seq, 1, memory_order_release);
    if (atomic_load_explicit(&state, memory_order_relaxed) == PURGER_RUNNING)
        futex(&work_seq, FUTEX_WAKE_PRIVATE, 1);
}

static void *purger_main(void *arg)
{
    (void)arg;
    shoal_purge_set_background(true);
    for (;;) {
        uint32_t seq = atomic_load_explicit(&work_seq, memory_order_acquire);
        long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
        if (delay <= 0 || !shoal_purge_pending()) {
            /* Returns at once if work arrived since we read seq. */
            futex(&work_seq, FUTEX_WAIT_PRIVATE, seq);
            continue;
        }
        struct timespec ts = { delay / 1000, (delay % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0) {
        }
        shoal_heap_reclaim_abandoned();
        shoal_purge_now(false);
    }
    return NULL;
}

void shoal_purger_start(void)
{
    int none = PURGER_NONE;
    if (atomic_load_explicit(&state, memory_order_relaxed) != PURGER_NONE ||
        shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) <= 0 || !shoal_purge_pending() ||
        !atomic_compare_exchange_strong(&state, &none, PURGER_RUNNING))
        return;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_sigmask(SIG_SETMASK, &all, &old);           /* the thread inherits it */
    if (pthread_create(&t, &attr, purger_main, NULL) != 0)
        atomic_store(&state, PURGER_FAILED);            /* slow paths still purge */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

void shoal_purger_init(void)
{
    shoal_purge_set_waker(wake);
}

void shoal_purger_fork_child(void)
{
    /* The thread did not come with the fork; start another when needed. */
    atomic_store(&state, PURGER_NONE);
    shoal_purge_set_background(false);
}
