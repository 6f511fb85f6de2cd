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

/* A holder's turn at something that one other party, a claimer, may
 * take from it while the holder is away: an idle thread's outbox
 * (remote.c) or huge slot (huge.c), claimed by a purge pass.  The
 * holder raises `busy`, then reads `steal`, and goes on only if it is
 * 0; the claimer raises `steal`, then, after shoal_os_barrier_all,
 * reads `busy`, and takes only if it is 0.  With a full barrier between
 * each side's store and its load, at least one side sees the other's
 * flag (Dekker): they are never both inside.  The holder's barrier is
 * only a compiler barrier, which costs it no atomic read-modify-write:
 * membarrier(2) (PRIVATE_EXPEDITED) makes every running thread of the
 * process execute a full barrier before it returns, and a thread not
 * running passed one when it was switched out, which orders the
 * holder's store before its load wherever that could matter (the
 * asymmetric fence of liburcu's membarrier flavour).  What the holder
 * did in its turn crosses with the flags: the claimer's acquire of
 * busy == 0 reads the holder's release at the end of its last turn, the
 * holder's acquire of steal == 0 the claimer's release when it is done.
 * A claimer whose barrier failed takes nothing.  ThreadSanitizer sees
 * no membarrier: there both sides use sequentially consistent
 * exchanges. */
typedef struct shoal_turn_flags_s {
    _Atomic uint32_t busy;              /* the holder is at work */
    _Atomic uint32_t steal;             /* a claimer claims */
} shoal_turn_flags_t;

#ifdef SHOAL_TSAN
#define SHOAL_TURN_RAISE(flag) ((void)atomic_exchange_explicit(flag, 1, memory_order_seq_cst))
#define SHOAL_TURN_LOOK memory_order_seq_cst
#else
#define SHOAL_TURN_RAISE(flag)                                                           \
    (atomic_store_explicit(flag, 1, memory_order_relaxed), atomic_signal_fence(memory_order_seq_cst))
#define SHOAL_TURN_LOOK memory_order_acquire
#endif

/* The holder's turn; false if a claimer is at it. */
static inline bool shoal_holder_enter(shoal_turn_flags_t *t)
{
    SHOAL_TURN_RAISE(&t->busy);
    if (__builtin_expect(atomic_load_explicit(&t->steal, SHOAL_TURN_LOOK) == 0, 1))
        return true;
    /* Release, as a leave: the claimer may read this store of busy. */
    atomic_store_explicit(&t->busy, 0, memory_order_release);
    return false;
}

static inline void shoal_holder_leave(shoal_turn_flags_t *t)
{
    atomic_store_explicit(&t->busy, 0, memory_order_release);
}

/* The claimer: raise the claim; after the barrier (`fenced`: it
 * succeeded), whether the holder is away, so that it may take; then
 * let the claim go. */
static inline void shoal_claimer_raise(shoal_turn_flags_t *t)
{
    SHOAL_TURN_RAISE(&t->steal);
}

static inline bool shoal_claimer_raised(shoal_turn_flags_t *t)
{
    return atomic_load_explicit(&t->steal, memory_order_relaxed) != 0;
}

static inline bool shoal_claimer_may_take(shoal_turn_flags_t *t, bool fenced)
{
    return fenced && atomic_load_explicit(&t->busy, SHOAL_TURN_LOOK) == 0;
}

static inline void shoal_claimer_release(shoal_turn_flags_t *t)
{
    atomic_store_explicit(&t->steal, 0, memory_order_release);
}

#endif
