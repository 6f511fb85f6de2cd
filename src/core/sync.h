/* sync.h - the allocator's lock for rare slow paths, run-once start-up,
 * and ThreadSanitizer annotations.
 *
 * The lock is ConcurrencyKit's fetch-and-store spinlock.  Its holder may
 * be inside a system call (mmap), so a waiter yields the CPU rather than
 * spin on a 2-core machine.  TSan cannot see ck's inline-assembly atomics,
 * so every hand-off through ck states the happens-before edge itself:
 * shoal_tsan_release(x) before publishing, shoal_tsan_acquire(x) after
 * taking.  Outside TSan builds these compile to nothing.
 */
#ifndef SHOAL_SYNC_H
#define SHOAL_SYNC_H

#include <ck_spinlock.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "layout.h"

#ifdef SHOAL_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define shoal_tsan_acquire(p) __tsan_acquire((void *)(p))
#define shoal_tsan_release(p) __tsan_release((void *)(p))
#else
#define shoal_tsan_acquire(p) ((void)(p))
#define shoal_tsan_release(p) ((void)(p))
#endif

typedef ck_spinlock_fas_t shoal_lock_t;
#define SHOAL_LOCK_INIT CK_SPINLOCK_FAS_INITIALIZER

static inline void shoal_lock(shoal_lock_t *l)
{
    while (!ck_spinlock_fas_trylock(l))
        sched_yield();
    shoal_tsan_acquire(l);
}

/* For paths that have something better to do than wait. */
static inline bool shoal_trylock(shoal_lock_t *l)
{
    if (!ck_spinlock_fas_trylock(l))
        return false;
    shoal_tsan_acquire(l);
    return true;
}

static inline void shoal_unlock(shoal_lock_t *l)
{
    shoal_tsan_release(l);
    ck_spinlock_fas_unlock(l);
}

/* A turn that one thread at a time holds, over work that may be skipped
 * rather than waited for (a signal handler must not wait: it may have
 * interrupted the holder): taken with a try, or with `wait` yielding
 * until it is free; false if not taken.  Acquire to take, release to
 * give: a holder sees what the one before it left. */
static inline bool shoal_turn_take(atomic_flag *turn, bool wait)
{
    while (atomic_flag_test_and_set_explicit(turn, memory_order_acquire)) {
        if (!wait)
            return false;
        sched_yield();
    }
    return true;
}

static inline void shoal_turn_give(atomic_flag *turn)
{
    atomic_flag_clear_explicit(turn, memory_order_release);
}

/* Run-once start-up.  shoal_once_begin returns true to the one caller
 * that must run the start-up, which then calls shoal_once_end; every
 * other caller gets false: at once if `wait` is false (the start-up may
 * allocate, and its own thread must not wait for itself), or once it is
 * done.  The end's release pairs with the acquire loads: a caller that
 * sees DONE sees everything the start-up wrote. */
enum shoal_once { SHOAL_ONCE_NOT_YET, SHOAL_ONCE_RUNNING, SHOAL_ONCE_DONE };

static inline bool shoal_once_begin(_Atomic int *state, bool wait)
{
    int expect = SHOAL_ONCE_NOT_YET;
    if (atomic_load_explicit(state, memory_order_acquire) == SHOAL_ONCE_DONE)
        return false;
    /* Relaxed: only the winner runs the start-up, and publishes with the
     * end's release; a loser that waits acquires in its loads below. */
    if (atomic_compare_exchange_strong_explicit(state, &expect, SHOAL_ONCE_RUNNING,
                                                memory_order_relaxed, memory_order_relaxed))
        return true;
    while (wait && atomic_load_explicit(state, memory_order_acquire) != SHOAL_ONCE_DONE)
        sched_yield();
    return false;
}

static inline void shoal_once_end(_Atomic int *state)
{
    atomic_store_explicit(state, SHOAL_ONCE_DONE, memory_order_release);
}

#endif
