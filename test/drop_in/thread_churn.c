/* thread_churn.c - many short-lived threads, the way a server with a
 * thread per connection or a resizing pool uses them.
 *
 *   thread_churn [TOTAL [CONCURRENT]]
 *
 * Threads are started in batches of CONCURRENT and joined.  Each thread
 * allocates pattern-filled blocks of mixed sizes, frees most of them
 * (after verifying them), and leaves two in a shared hand-off array,
 * taking out and freeing whatever an earlier (now exited) thread left
 * there: blocks outlive their thread and are freed by another one, so
 * the exited thread's pages must be abandoned and adopted, not leaked.
 *
 * Checked at the end: no block changed; the process's RSS (from
 * /proc/self/statm) after the warm-up never grew by more than a bound
 * that is far below what one leaked page per thread would cost; every
 * thread's heap was given up at its exit; and once everything is freed,
 * alloc_collect(true) gets the pool back to a handful of slots.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include "drop_in.h"

/* After the warm-up, neither shoal's active memory (pool slots in use
 * and huge mappings) nor the RSS may grow by more than this.  The live
 * data is about 20 MiB at any time; one leaked 64 KiB page per thread
 * would be 6 GiB over 100,000 threads, and one per hundred threads
 * 64 MiB.  The peak depends on when the purger's passes land among the
 * exits (on a loaded 2-core machine: 45 MiB at the highest, 4 MiB at the
 * end).  Under a sanitizer the RSS is mostly the sanitizer's own (shadow
 * memory, per-thread state), so only shoal's accounting is held to the
 * bound there. */
#define GROWTH_LIMIT ((size_t)64 << 20)
#ifdef DROP_IN_TSAN
#define DEFAULT_TOTAL 4000
#else
#define DEFAULT_TOTAL 100000
#endif
#define DEFAULT_CONCURRENT 4
#define HANDOFF 512
#define ALLOCS 24

static _Atomic(uintptr_t) handoff[HANDOFF];

static void *churn(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
    void *b[ALLOCS];
    unsigned n = ALLOCS / 2 + rnd(&s) % (ALLOCS / 2);
    for (unsigned i = 0; i < n; i++) {
        /* One thread in 512 also makes a huge block. */
        b[i] = block_make(pick_size(&s, 512 * ALLOCS), rnd(&s));
        if (b[i] == NULL) {
            fprintf(stderr, "FAIL: out of memory in a thread\n");
            atomic_fetch_add(&drop_in_errors, 1);
            n = i;
            break;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        if (i < 2) {
            uintptr_t old = atomic_exchange(&handoff[rnd(&s) % HANDOFF], (uintptr_t)b[i]);
            if (old != 0)
                check_free((void *)old, "thread (block of an exited thread)");
        } else {
            check_free(b[i], "thread (own block)");
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned long total = argc > 1 ? strtoul(argv[1], NULL, 0) : DEFAULT_TOTAL;
    unsigned concurrent = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : DEFAULT_CONCURRENT;
    if (total < 100 || concurrent < 1 || concurrent > 64) {
        fprintf(stderr, "usage: %s [TOTAL>=100 [CONCURRENT 1..64]]\n", argv[0]);
        return 2;
    }
    unsigned long warmup = total / 20;
    size_t rss_base = 0, rss_max = 0, active_base = 0, active_max = 0;
    alloc_stats_t st;
    pthread_t t[64];
    unsigned long started = 0;

    while (started < total) {
        unsigned k = 0;
        for (; k < concurrent && started < total; k++, started++) {
            int rc = pthread_create(&t[k], NULL, churn, (void *)(uintptr_t)(started + 1));
            if (rc != 0)
                die("pthread_create after %lu threads: %s", started, strerror(rc));
        }
        for (unsigned j = 0; j < k; j++)
            pthread_join(t[j], NULL);
        if (rss_base == 0 && started >= warmup) {
            rss_base = rss_max = rss_bytes();
            st = stats_now();
            active_base = active_max = st.active;
        } else if (rss_base != 0 && started % 1000 < concurrent) {
            size_t r = rss_bytes();
            if (r > rss_max)
                rss_max = r;
            st = stats_now();
            if (st.active > active_max)
                active_max = st.active;
        }
        if (atomic_load_explicit(&drop_in_errors, memory_order_relaxed) != 0)
            die("damaged blocks after %lu threads", started);
    }
    size_t rss_end = rss_bytes();
    if (rss_end > rss_max)
        rss_max = rss_end;
    st = stats_now();
    if (st.active > active_max)
        active_max = st.active;
    alloc_stats_t run = st;
    if (getenv("THREAD_CHURN_VERBOSE") != NULL)
        alloc_stats_print(2);

    for (unsigned i = 0; i < HANDOFF; i++) {
        uintptr_t p = atomic_exchange(&handoff[i], 0);
        if (p != 0)
            check_free((void *)p, "main thread (block of an exited thread)");
    }
    if (atomic_load(&drop_in_errors) != 0)
        die("%ld damaged blocks", atomic_load(&drop_in_errors));
    alloc_collect(true);
    st = stats_now();

    printf("thread_churn: %lu threads, %u at a time\n", total, concurrent);
    printf("  RSS after warm-up %zu KiB, highest %zu KiB, at the end %zu KiB%s\n",
           rss_base >> 10, rss_max >> 10, rss_end >> 10, CHECK_RSS ? "" : " (not checked)");
    printf("  shoal active after warm-up %zu KiB, highest %zu KiB (growth limit %zu KiB)\n",
           active_base >> 10, active_max >> 10, GROWTH_LIMIT >> 10);
    printf("  heaps: %lu created, %lu exited, at most %zu live at once, %zu live at the end\n",
           (unsigned long)run.heaps_created, (unsigned long)run.heaps_exited,
           run.heaps_live_peak, run.heaps_live);
    printf("  after collect: pool slots %zu, abandoned pages %zu, pages adopted %lu\n",
           st.pool_slots_used, st.heaps_abandoned_pages, (unsigned long)st.pages_adopted);

    if (rss_base == 0 || rss_max == 0)
        die("could not read /proc/self/statm");
    if (active_max > active_base + GROWTH_LIMIT)
        die("shoal's active memory grew by %zu KiB over the run (limit %zu KiB): memory "
            "of exited threads is not coming back", (active_max - active_base) >> 10,
            GROWTH_LIMIT >> 10);
    if (CHECK_RSS && rss_max > rss_base + GROWTH_LIMIT)
        die("RSS grew by %zu KiB over the run (limit %zu KiB): memory of exited threads "
            "is not coming back", (rss_max - rss_base) >> 10, GROWTH_LIMIT >> 10);
    /* Every thread got a heap and gave it up at exit; with `concurrent`
     * threads at a time (plus the main thread and shoal's purger) no more
     * are ever live together. */
    if (run.heaps_exited < total)
        die("%lu heaps given up at thread exit for %lu threads",
            (unsigned long)run.heaps_exited, total);
    if (run.heaps_live_peak > (size_t)concurrent + 2)
        die("%zu heaps live at once with %u threads at a time: exited threads keep "
            "their heaps", run.heaps_live_peak, concurrent);
    if (run.heaps_live > 2)
        die("%zu heaps still live with only the main thread running", run.heaps_live);
    /* Nothing is live now: every abandoned page adopted and given back. */
    if (st.heaps_abandoned_pages != 0)
        die("%zu abandoned pages left after alloc_collect(true)", st.heaps_abandoned_pages);
    if (st.pool_slots_used > 8)
        die("%zu pool slots still in use with nothing allocated", st.pool_slots_used);
    printf("thread_churn: ok\n");
    return 0;
}
