/* exit_destructor.c - threads whose thread-specific-data destructor
 * allocates and re-arms itself in every round the C library runs, as
 * libraries with per-thread caches do.
 *
 *   exit_destructor [THREADS]
 *
 * Each thread sets a pattern-filled block as its key's value.  The
 * destructor checks and frees the value, makes a new block and sets it
 * again, so it runs in every round (glibc runs four); the block set in
 * the last round is never handed to a destructor, so each one is also
 * recorded in the thread's slot of a global array, which the main thread
 * frees after the join.  Nothing is left to the program, so whatever
 * grows is the allocator's.  shoal's own exit handler runs in one of
 * those rounds; whatever the thread allocates after it must not leave a
 * heap behind (a heap made in the last round was never given up: 16 KiB
 * of RSS a thread).
 *
 * Checked: no block changed; at the end as many heaps are live as
 * threads (the main thread's); shoal's committed memory and, outside the
 * sanitizers, the RSS after all threads within GROWTH_LIMIT of after the
 * first tenth.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include "drop_in.h"

#ifdef DROP_IN_TSAN
#define DEFAULT_THREADS 2000
/* TSan tears its own per-thread state down in the C library's last
 * destructor round; code that runs after it crashes inside TSan. */
#define REARM_ROUNDS 2
#else
#define DEFAULT_THREADS 20000
#define REARM_ROUNDS 100        /* as long as the C library calls */
#endif
/* A leaked heap a thread would be 64 KiB of committed memory and 16 KiB
 * of RSS: 1.1 GiB and 280 MiB over 18,000 threads. */
#define GROWTH_LIMIT ((size_t)4 << 20)
#define BLOCK_SIZE 100

static pthread_key_t key;
static __thread unsigned my_slot;       /* this thread's slot in last_block */
static __thread unsigned my_rounds;
static void *last_block[DEFAULT_THREADS * 4];
static _Atomic long rounds;

/* Set a new block as the key's value, and as the thread's slot. */
static void arm(uint32_t seed)
{
    void *p = block_make(BLOCK_SIZE, seed);
    if (p == NULL) {
        fprintf(stderr, "FAIL: out of memory in a destructor\n");
        atomic_fetch_add(&drop_in_errors, 1);
        return;
    }
    last_block[my_slot] = p;
    pthread_setspecific(key, p);
}

static void destructor(void *value)
{
    atomic_fetch_add_explicit(&rounds, 1, memory_order_relaxed);
    check_free(value, "destructor (the value of an earlier round)");
    last_block[my_slot] = NULL;
    if (++my_rounds <= REARM_ROUNDS)
        arm((uint32_t)(uintptr_t)value);
}

static void *thread(void *arg)
{
    my_slot = (unsigned)(uintptr_t)arg;
    void *scratch = block_make(3000, my_slot);
    if (scratch == NULL)
        die("out of memory in a thread");
    arm(my_slot * 7919u);
    check_free(scratch, "thread (own block)");
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned long total = argc > 1 ? strtoul(argv[1], NULL, 0) : DEFAULT_THREADS;
    if (total < 100 || total > DEFAULT_THREADS * 4) {
        fprintf(stderr, "usage: %s [THREADS 100..%d]\n", argv[0], DEFAULT_THREADS * 4);
        return 2;
    }
    if (pthread_key_create(&key, destructor) != 0)
        die("pthread_key_create failed");
    size_t rss_base = 0, committed_base = 0;
    for (unsigned long i = 0; i < total; i++) {
        pthread_t t;
        int rc = pthread_create(&t, NULL, thread, (void *)(uintptr_t)i);
        if (rc != 0)
            die("pthread_create after %lu threads: %s", i, strerror(rc));
        pthread_join(t, NULL);
        /* The block set in the last round: nobody else will free it. */
        if (last_block[i] != NULL)
            check_free(last_block[i], "main thread (a destructor's last block)");
        if (i + 1 == total / 10) {
            rss_base = rss_bytes();
            committed_base = stats_now().committed;
        }
        if (atomic_load(&drop_in_errors) != 0)
            die("damaged blocks after %lu threads", i + 1);
    }
    size_t rss_end = rss_bytes();
    alloc_stats_t st = stats_now();
    size_t committed_end = st.committed;
    printf("exit_destructor: %lu threads, %.1f destructor rounds each\n", total,
           (double)atomic_load(&rounds) / (double)total);
    printf("  RSS after %lu threads %zu KiB, at the end %zu KiB%s\n", total / 10,
           rss_base >> 10, rss_end >> 10, CHECK_RSS ? "" : " (not checked)");
    printf("  committed after %lu threads %zu KiB, at the end %zu KiB\n", total / 10,
           committed_base >> 10, committed_end >> 10);
    printf("  heaps: %zu live at the end, %lu created, %lu exited\n", st.heaps_live,
           (unsigned long)st.heaps_created, (unsigned long)st.heaps_exited);
    if (atomic_load(&rounds) < (long)total * 2)
        die("the destructor ran %ld times for %lu threads: it did not re-arm",
            atomic_load(&rounds), total);
    /* Only the main thread is left, and it only frees: no heap, or its
     * own one. */
    if (st.heaps_live > 1)
        die("%zu heaps live with only the main thread running: exiting threads leave "
            "heaps behind", st.heaps_live);
    if (committed_end > committed_base + GROWTH_LIMIT)
        die("committed memory grew by %zu KiB over %lu threads (limit %zu KiB)",
            (committed_end - committed_base) >> 10, total - total / 10, GROWTH_LIMIT >> 10);
    if (CHECK_RSS && rss_end > rss_base + GROWTH_LIMIT)
        die("RSS grew by %zu KiB over %lu threads (limit %zu KiB)",
            (rss_end - rss_base) >> 10, total - total / 10, GROWTH_LIMIT >> 10);
    printf("exit_destructor: ok\n");
    return 0;
}
