/* figures.h - every scalar figure of alloc_stats_t, once (stats.c fills
 * the struct from this list, report.c makes the reports' table from it).
 */
#ifndef SHOAL_FIGURES_H
#define SHOAL_FIGURES_H

/* Every scalar figure of alloc_stats_t, once, in the order the reports
 * show them: its group, its key (the same in the text and the JSON
 * report), how it is shown, its field, and the expression stats_fill
 * takes it from - over stats_fill's readings `heaps`, `pool`, `huge`,
 * `sum` and the process's resource use - and, for FIGURE_PEAK, the one
 * its peak (FIELD_peak) comes from.  RATIO is shown but stored nowhere.
 * stats_fill assigns from this list and the reports' table is made from
 * it: no list of the fields is written twice. */
#define SHOAL_FIGURES(FIGURE, FIGURE_PEAK, RATIO)                                              \
    FIGURE_PEAK(MEMORY, "allocated", BYTES, allocated, sum.allocated, peak_of(&peak_allocated)) \
    FIGURE_PEAK(MEMORY, "active", BYTES, active, sum.active,                                   \
                max_of(peak_of(&peak_active), pool.slots_claimed_peak << SHOAL_SLOT_SHIFT))     \
    FIGURE_PEAK(MEMORY, "resident", BYTES, resident, read_resident(),                          \
                max_of(rss_peak, st->resident)) /* the kernel updates maxrss lazily */          \
    FIGURE_PEAK(MEMORY, "mapped", BYTES, mapped, sum.mapped,                                   \
                max_of(shoal_os_mapped_peak(), st->mapped))                                    \
    FIGURE_PEAK(MEMORY, "committed", BYTES, committed, sum.committed,                          \
                max_of(shoal_commit_peak(), st->committed))                                    \
    FIGURE(MEMORY, "purged", BYTES, purged, pool.purged_bytes)                                 \
    FIGURE(MEMORY, "metadata", BYTES, metadata,                                                \
           pool.superpages * sizeof(shoal_superpage_t) + heaps->structs * heaps->struct_bytes) \
    RATIO(FRAGMENTATION, "active_allocated", active, allocated)                                \
    RATIO(FRAGMENTATION, "resident_active", resident, active)                                  \
    RATIO(FRAGMENTATION, "resident_allocated", resident, allocated)                            \
    FIGURE(POOL, "superpages", COUNT, superpages, pool.superpages)                             \
    FIGURE_PEAK(POOL, "slots_used", COUNT, pool_slots_used, pool.slots_claimed,                \
                max_of(pool.slots_claimed_peak, pool.slots_claimed))                           \
    FIGURE_PEAK(POOL, "slots_dirty", COUNT, pool_slots_dirty, sum.dirty, peak_of(&peak_dirty)) \
    FIGURE(POOL, "claims", COUNT, pool_claims, pool.claims)                                    \
    FIGURE(POOL, "releases", COUNT, pool_releases, pool.releases)                              \
    FIGURE(POOL, "purge_due_ms", DUE, purge_due_ms, shoal_purge_due_in_ms())                   \
    FIGURE(LARGE, "requests", COUNT, large_requests, heaps->large_allocs)                      \
    FIGURE_PEAK(LARGE, "live", COUNT, large_live, sum.large, peak_of(&peak_large))             \
    FIGURE_PEAK(LARGE, "live_bytes", BYTES, large_live_bytes, sum.large_bytes,                 \
                peak_of(&peak_large_bytes))                                                    \
    /* An exact peak is raised just after its value: a read in between                       \
     * must not show the value above its peak (max_of). */                                    \
    FIGURE(HUGE, "requests", COUNT, huge_requests, huge.requests)                              \
    FIGURE_PEAK(HUGE, "live", COUNT, huge_live, huge.live, max_of(huge.live_peak, huge.live))  \
    FIGURE_PEAK(HUGE, "live_bytes", BYTES, huge_live_bytes, huge.live_bytes,                   \
                max_of(huge.live_bytes_peak, huge.live_bytes))                                 \
    FIGURE_PEAK(HUGE, "cached", COUNT, huge_cached, huge.cached,                               \
                max_of(huge.cached_peak, huge.cached))                                         \
    FIGURE_PEAK(HUGE, "cached_bytes", BYTES, huge_cached_bytes, huge.cached_bytes,             \
                max_of(huge.cached_bytes_peak, huge.cached_bytes))                             \
    FIGURE_PEAK(THREADS, "heaps_live", COUNT, heaps_live, heaps->live,                         \
                max_of(heaps->live_peak, heaps->live))                                         \
    FIGURE(THREADS, "heaps_created", COUNT, heaps_created, heaps->created)                     \
    FIGURE(THREADS, "heaps_exited", COUNT, heaps_exited, heaps->exited)                        \
    FIGURE_PEAK(THREADS, "abandoned_pages", COUNT, heaps_abandoned_pages, sum.abandoned,       \
                peak_of(&peak_abandoned))                                                      \
    FIGURE(THREADS, "pages_adopted", COUNT, pages_adopted, heaps->adopted)                     \
    FIGURE(THREADS, "remote_frees", COUNT, remote_frees, heaps->remote_frees)                  \
    FIGURE(THREADS, "remote_in_flight", COUNT, remote_in_flight,                               \
           (size_t)(heaps->remote_frees - heaps->remote_received))                            \
    FIGURE(THREADS, "remote_atomics", COUNT, remote_atomics, heaps->remote_atomics)            \
    FIGURE(FAULTS, "minor", COUNT, minor_faults, minor)                                        \
    FIGURE(FAULTS, "major", COUNT, major_faults, major)                                        \
    FIGURE(REPORTS, "dumps", COUNT, dumps, atomic_load_explicit(&n_dumps, memory_order_relaxed)) \
    FIGURE(REPORTS, "dumps_skipped", COUNT, dumps_skipped,                                     \
           atomic_load_explicit(&n_skipped, memory_order_relaxed))

#endif
