/* counter.h - statistics counters that cost (almost) nothing.
 *
 * A counter has one writer, the thread that owns it, so an update needs
 * no locked instruction: one add to memory on x86-64, a relaxed atomic
 * load and store elsewhere (and under TSan, which must see them).  A
 * reader on another thread - alloc_stats_get, or the statistics signal
 * handler - may read it at any time and sees a recent, whole value.
 * Counters that several threads update use atomic_fetch_add and live on
 * slow paths only.  Building with SHOAL_STATS_ENABLED=0 compiles the
 * single-writer updates out.
 */
#ifndef SHOAL_COUNTER_H
#define SHOAL_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>
#include "layout.h"

#ifndef SHOAL_STATS_ENABLED
#define SHOAL_STATS_ENABLED 1
#endif

typedef _Atomic uint64_t shoal_counter_t;

/* *c += n by its only writer (n may wrap, to subtract), whatever
 * SHOAL_STATS_ENABLED says: a relaxed load and store. */
static inline void shoal_add_only_writer(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline void shoal_count(shoal_counter_t *c, uint64_t n)
{
#if !SHOAL_STATS_ENABLED
    (void)c;
    (void)n;
#elif defined(__x86_64__) && !defined(SHOAL_TSAN)
    /* The atomics below take a load, an add and a store (compilers do
     * not merge them); this is one instruction, and an aligned 8-byte
     * write is seen whole by every reader. */
    __asm__("addq %1, %0" : "+m"(*(uint64_t *)c) : "er"(n));
#else
    shoal_add_only_writer(c, n);
#endif
}

static inline uint64_t shoal_counter_read(shoal_counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* Raise *peak to v if v is higher (any thread). */
static inline void shoal_peak_update(_Atomic size_t *peak, size_t v)
{
    size_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > cur &&
           !atomic_compare_exchange_weak_explicit(peak, &cur, v, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

#endif
