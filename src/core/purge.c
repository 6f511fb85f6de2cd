/* purge.c - the purge clock, over the pool and the huge cache. */
#include "purge.h"

#include <stdatomic.h>
#include "huge.h"
#include "options.h"
#include "pool.h"
#include "../os/os.h"

/* The clock's words are relaxed: each is one fact on its own (a time, a
 * flag), and what a pass purges it finds under the pool's and the huge
 * cache's own locks.  The two hooks are stored with release when
 * registered and loaded with acquire when called: the module behind a
 * hook is set up before it registers. */
static _Atomic uint64_t next_pass_ms;
static _Atomic bool pending;
static void (*_Atomic waker)(void);
static size_t (*_Atomic reclaimer)(bool force);
static _Atomic bool background;         /* a purger thread runs the passes */
static _Atomic uint64_t purger_due_ms;  /* when that thread runs its next one */

void shoal_purge_set_due(uint64_t at_ms)
{
    atomic_store_explicit(&purger_due_ms, at_ms, memory_order_relaxed);
}

long shoal_purge_due_in_ms(void)
{
    if (!atomic_load_explicit(&pending, memory_order_relaxed) ||
        shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) < 0)
        return -1;
    uint64_t due = atomic_load_explicit(atomic_load_explicit(&background, memory_order_relaxed)
                                            ? &purger_due_ms
                                            : &next_pass_ms,
                                        memory_order_relaxed);
    uint64_t now = shoal_os_now_ms();
    return due > now ? (long)(due - now) : 0;
}

void shoal_purge_set_background(bool running)
{
    atomic_store_explicit(&background, running, memory_order_relaxed);
}

void shoal_purge_set_waker(void (*wake)(void))
{
    atomic_store_explicit(&waker, wake, memory_order_release);
}

void shoal_purge_set_reclaimer(size_t (*reclaim)(bool force))
{
    atomic_store_explicit(&reclaimer, reclaim, memory_order_release);
}

bool shoal_purge_pending(void)
{
    return atomic_load_explicit(&pending, memory_order_relaxed);
}

/* Work is pending.  The transition from none wakes the purger: whoever
 * makes it, a free or a pass that left work behind, so the purger never
 * sleeps while work is pending. */
static void mark_pending(void)
{
    if (atomic_load_explicit(&pending, memory_order_relaxed))
        return;                 /* no write, so frees do not fight over the line */
    /* Seq cst: the purger's leave_idle (thread/purger.c) relies on it. */
    if (!atomic_exchange_explicit(&pending, true, memory_order_seq_cst)) {
        void (*wake)(void) = atomic_load_explicit(&waker, memory_order_acquire);
        if (wake != NULL)
            wake();
    }
}

size_t shoal_purge_now(bool force)
{
    /* Clear first: memory freed while the pass runs sets it again, so no
     * work is forgotten; what the pass leaves for later sets it too. */
    atomic_store_explicit(&pending, false, memory_order_relaxed);
    size_t (*reclaim)(bool) = atomic_load_explicit(&reclaimer, memory_order_acquire);
    size_t waiting = reclaim != NULL ? reclaim(force) : 0;
    size_t bytes = shoal_pool_purge(force, &waiting) + shoal_huge_purge(force, &waiting);
    if (waiting != 0)
        mark_pending();
    return bytes;
}

void shoal_purge_tick(bool catch_up)
{
    long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
    if (delay < 0)
        return;
    uint64_t now = shoal_os_now_ms();
    uint64_t due = atomic_load_explicit(&next_pass_ms, memory_order_relaxed);
    if (now < due)
        return;
    /* One thread wins and runs the pass; the others go on at once. */
    if (!atomic_compare_exchange_strong_explicit(&next_pass_ms, &due, now + (uint64_t)delay,
                                                 memory_order_relaxed, memory_order_relaxed))
        return;
    /* A slow path's tick overdue by a whole delay, with memory waiting:
     * no tick came for that long, and every free to the pool or the huge
     * cache ticks, so all that waits there was freed a delay ago at
     * least.  It all goes now, as two passes would have taken it:
     * without a purger thread, a program that worked, idled and works
     * again gets its memory back at its first slow path, rather than
     * keeping it, or clearing it again for calloc at every reuse.  (Not
     * a free's tick: what it freed is new, and may be all there is.  A
     * thread's huge slot ticks nothing: its mapping may go sooner than a
     * delay, once a delay at most.)  `due` is 0 only before the clock
     * started. */
    shoal_purge_now(delay == 0 || (catch_up && due != 0 && now - due >= (uint64_t)delay));
}

void shoal_purge_clock_start(void)
{
    atomic_store_explicit(&next_pass_ms, shoal_os_now_ms(), memory_order_relaxed);
}

void shoal_purge_note_waiting(void)
{
    mark_pending();
}

void shoal_purge_note_free(void)
{
    mark_pending();
    /* With a purger thread running, frees leave the clock to it: no clock
     * read on their path.  A delay of 0 still purges at once, here. */
    if (!atomic_load_explicit(&background, memory_order_relaxed) ||
        shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) == 0)
        shoal_purge_tick(false);
}
