/* commit.c - the committed-memory account (see commit.h). */
#include "commit.h"

#include <stdatomic.h>
#include "counter.h"
#include "options.h"

/* Relaxed: the account is one number, checked and changed with atomic
 * read-modify-writes; nothing else is published through it. */
static _Atomic size_t charged, charged_peak;

bool shoal_commit_charge(size_t bytes)
{
    /* Relaxed: the account orders nothing.  The memory it stands for is
     * handed over by the pool's CAS and the kernel's mmap. */
    size_t now = atomic_fetch_add_explicit(&charged, bytes, memory_order_relaxed) + bytes;
    long max = shoal_opt(ALLOC_OPTION_MAX_MEMORY);
    if (max != 0 && now > (size_t)max) {
        atomic_fetch_sub_explicit(&charged, bytes, memory_order_relaxed);
        return false;
    }
    shoal_peak_update(&charged_peak, now);
    return true;
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
