/* sync.h - the allocator's lock for rare slow paths, and ThreadSanitizer
 * annotations.
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

#endif
