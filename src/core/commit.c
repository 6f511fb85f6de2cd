/* commit.c - the committed-memory account (see commit.h). */
#include "commit.h"

#include <stdatomic.h>
#include "counter.h"
#include "options.h"

/* Relaxed: the account is one number, checked and changed with atomic
 * read-modify-writes; nothing else is published through it. */
static _Atomic size_t charged, charged_peak;

/* Add `bytes` to the account unless MAX_MEMORY refuses; its value after
 * in *now. */
static bool add(size_t bytes, size_t *now)
{
    /* Relaxed: the account orders nothing.  The memory it stands for is
     * handed over by the pool's CAS and the kernel's mmap. */
    long max = shoal_opt(ALLOC_OPTION_MAX_MEMORY);
    if (max == 0) {
        *now = atomic_fetch_add_explicit(&charged, bytes, memory_order_relaxed) + bytes;
        return true;
    }
    /* Under a limit, a charge that would pass it is never added, not
     * even for a moment: added and taken back, a big refused charge made
     * every other thread's small one fail meanwhile (and the account
     * read above the limit).  A failed CAS reloads the account and
     * decides again. */
    size_t cur = atomic_load_explicit(&charged, memory_order_relaxed);
    do {
        if (bytes > (size_t)max || cur > (size_t)max - bytes)
            return false;
        *now = cur + bytes;
    } while (!atomic_compare_exchange_weak_explicit(&charged, &cur, *now, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

bool shoal_commit_charge(size_t bytes)
{
    size_t now;
    if (!add(bytes, &now))
        return false;
    shoal_peak_update(&charged_peak, now);
    return true;
}

bool shoal_commit_charge_ahead(size_t bytes)
{
    size_t now;
    return add(bytes, &now);
}

void shoal_commit_settle(size_t bytes, bool mapped)
{
    if (mapped)
        shoal_peak_update(&charged_peak, shoal_commit_charged());
    else
        shoal_commit_uncharge(bytes);
}

void shoal_commit_uncharge(size_t bytes)
{
    atomic_fetch_sub_explicit(&charged, bytes, memory_order_relaxed);
}

size_t shoal_commit_charged(void)
{
    return atomic_load_explicit(&charged, memory_order_relaxed);
}

size_t shoal_commit_peak(void)
{
    return atomic_load_explicit(&charged_peak, memory_order_relaxed);
}
