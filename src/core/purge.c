/* purge.c - the purge clock, over the pool and the huge cache. */
#include "purge.h"

#include <stdatomic.h>
#include "huge.h"
#include "options.h"
#include "pool.h"
#include "../os/os.h"

static _Atomic uint64_t next_pass_ms;

size_t shoal_purge_now(bool force)
{
    return shoal_pool_purge(force) + shoal_huge_purge(force);
}

void shoal_purge_tick(void)
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
    shoal_purge_now(delay == 0);
}
