/* generations.c - threads that come and go in generations, as a thread
 * pool that is resized or restarted uses them, beside a long-lived
 * thread.
 *
 *   generations [GENS]
 *
 * Each generation is two threads.  A thread frees what its slot's
 * previous occupant left in a global array (remote frees into the pages
 * of an exited thread), makes BLOCKS pattern-filled blocks of 8..1024 B
 * (powers of two), keeps every tenth for the next generation, checks and
 * frees the rest, and exits.  Between generations the main thread makes
 * and frees a batch of 17 blocks of 4 KiB, one more than a page holds: a
 * long-lived thread that takes a slow path once a generation.  That was
 * enough for the pages of exited threads to pile up in its heap, never
 * looked at again, and for the peak RSS to grow 2 MB a generation.
 *
 * Checked: no block changed; the peak of shoal's committed memory (and,
 * outside the sanitizers, of the RSS) over all generations is within
 * 1.25x of the peak over the first 25 (plus GROWTH_SLACK under
 * ThreadSanitizer); and once the last leftovers are
 * freed, within a few purge delays and with no allocator call meanwhile,
 * active memory comes within ACTIVE_SLACK of the bytes allocated.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include "drop_in.h"

#define THREADS 2
#define KEEP 10                         /* one block in KEEP is left behind */
#ifdef DROP_IN_TSAN
#define BLOCKS 4000
/* Under ThreadSanitizer the peaks are about 2 MiB, a generation runs
 * tens of times slower, and where the purger's passes fall among the
 * generations is the machine's load's to say: the early and late peaks
 * have been seen 8 slots apart from timing alone (2432 KiB against
 * 1920).  The growth this test is for, pages of exited threads kept,
 * was 2 MiB a generation. */
#define GROWTH_SLACK ((size_t)1 << 20)
#else
#define BLOCKS 40000
#define GROWTH_SLACK 0
#endif
#define MAIN_BATCH 17
#define PURGE_DELAY_MS 100
/* What a live heap may hold with nothing allocated in it: the main
 * thread's page cache (5 slots of 64 KiB) and the empty pages heading
 * the queues of the classes it used. */
#define ACTIVE_SLACK ((size_t)1 << 20)

static void *left[THREADS][BLOCKS / KEEP];
static unsigned n_left[THREADS];

static void *generation(void *arg)
{
    unsigned slot = (unsigned)(uintptr_t)arg >> 16;
    uint32_t s = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
    for (unsigned i = 0; i < n_left[slot]; i++)
        check_free(left[slot][i], "thread (block of the previous generation)");
    n_left[slot] = 0;
    for (unsigned i = 0; i < BLOCKS; i++) {
        size_t n = (size_t)8 << (rnd(&s) % 8);
        void *p = block_make(n, rnd(&s));
        if (p == NULL) {
            fprintf(stderr, "FAIL: out of memory in a thread\n");
            atomic_fetch_add(&drop_in_errors, 1);
            break;
        }
        if (i % KEEP == 0)
            left[slot][n_left[slot]++] = p;
        else
            check_free(p, "thread (own block)");
    }
    return NULL;
}

static size_t max_of(size_t a, size_t b)
{
    return a > b ? a : b;
}

int main(int argc, char **argv)
{
    unsigned gens = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 300;
    if (gens < 50) {
        fprintf(stderr, "usage: %s [GENS>=50]\n", argv[0]);
        return 2;
    }
    if (alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, PURGE_DELAY_MS) != 0)
        die("alloc_option_set(PURGE_DELAY_MS) failed");
    size_t rss_early = 0, rss_peak = 0, committed_early = 0, committed_peak = 0;
    void *mine[MAIN_BATCH];
    for (unsigned g = 0; g < gens; g++) {
        pthread_t t[THREADS];
        for (unsigned i = 0; i < THREADS; i++) {
            uintptr_t arg = (uintptr_t)i << 16 | (g & 0xffff);
            int rc = pthread_create(&t[i], NULL, generation, (void *)arg);
            if (rc != 0)
                die("pthread_create in generation %u: %s", g, strerror(rc));
        }
        for (unsigned i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
        for (unsigned i = 0; i < MAIN_BATCH; i++)
            if ((mine[i] = block_make(4096, g * MAIN_BATCH + i)) == NULL)
                die("out of memory in the main thread");
        for (unsigned i = 0; i < MAIN_BATCH; i++)
            check_free(mine[i], "main thread (own block)");
        rss_peak = max_of(rss_peak, rss_bytes());
        committed_peak = max_of(committed_peak, stats_now().committed);
        if (g == 24) {
            rss_early = rss_peak;
            committed_early = committed_peak;
        }
        if (atomic_load(&drop_in_errors) != 0)
            die("damaged blocks in generation %u", g);
    }
    for (unsigned slot = 0; slot < THREADS; slot++)
        for (unsigned i = 0; i < n_left[slot]; i++)
            check_free(left[slot][i], "main thread (block of the last generation)");
    if (atomic_load(&drop_in_errors) != 0)
        die("%ld damaged blocks", atomic_load(&drop_in_errors));

    /* The last frees went into pages of exited threads: the purger takes
     * those back at its next pass.  Poll, calling nothing that allocates. */
    alloc_stats_t st = stats_now();
    for (int tries = 0; tries < 100 && st.active > st.allocated + ACTIVE_SLACK; tries++) {
        usleep(50 * 1000);
        st = stats_now();
    }
    printf("generations: %u of %d threads, %d blocks each\n", gens, THREADS, BLOCKS);
    printf("  peak RSS after 25 generations %zu KiB, after %u %zu KiB%s\n", rss_early >> 10,
           gens, rss_peak >> 10, CHECK_RSS ? "" : " (not checked)");
    printf("  peak committed after 25 generations %zu KiB, after %u %zu KiB\n",
           committed_early >> 10, gens, committed_peak >> 10);
    printf("  at the end: allocated %zu KiB, active %zu KiB (slack %zu KiB), "
           "%zu abandoned pages, %zu heaps live\n", st.allocated >> 10, st.active >> 10,
           ACTIVE_SLACK >> 10, st.heaps_abandoned_pages, st.heaps_live);
    if (committed_peak * 4 > committed_early * 5 + GROWTH_SLACK * 4)
        die("committed memory grows with the generations: %zu KiB after 25, %zu KiB "
            "after %u", committed_early >> 10, committed_peak >> 10, gens);
    if (CHECK_RSS && rss_peak * 4 > rss_early * 5)
        die("peak RSS grows with the generations: %zu KiB after 25, %zu KiB after %u",
            rss_early >> 10, rss_peak >> 10, gens);
    if (st.active > st.allocated + ACTIVE_SLACK) {
        alloc_stats_print(2);           /* who holds the pages: the failure's evidence */
        die("%zu KiB active for %zu KiB allocated, several purge delays after the last "
            "free: pages without a live block are kept", st.active >> 10,
            st.allocated >> 10);
    }
    printf("generations: ok\n");
    return 0;
}
