/* outbox.c - remote frees from threads that pause, while the purger
 * sends the outboxes of idle threads.
 *
 *   stress_outbox [--long] [--threads N] [--seed N] [--scale X]
 *
 * N threads (4 by default) share a table of slots.  Each step a thread
 * allocates a pattern-filled block of 16-256 B and swaps it into a
 * random slot; the block it gets back, mostly another thread's, has its
 * pattern checked and is freed: a remote free held in the freeing
 * thread's outbox.  After a random burst of steps a thread pauses for
 * 0.1-3 ms, longer than the purger's scans are apart (PURGE_DELAY_MS is
 * 1 ms): the purger claims its outbox and sends it while the thread may
 * wake up and free again at that very moment.  Every few hundred steps a
 * thread exits (its outbox sent, its heap parked) and a new one takes its
 * place, so blocks go to parked heaps too, held in outboxes as well.  A
 * pump thread empties pages again and again, so that purge work is
 * always pending and the purger scans every delay (with nothing pending
 * it scans once a second, and a run would see few claims or none).  At
 * the end: nothing is live, every block came home.
 */
#include "stress.h"

#define SLOTS 256

static stress_opts_t opt;
static stress_entry_t table[SLOTS];
static uint64_t steps, steps_a_life;

typedef struct life_s {
    unsigned id;
    uint64_t from, to;          /* the steps this thread takes */
} life_t;

static void *worker(void *arg)
{
    life_t *l = arg;
    rng_t g = rng_make(opt.seed, l->id * 1000003u + l->from);
    uint64_t burst = rng_range(&g, 1, 200);
    for (uint64_t i = l->from; i < l->to; i++) {
        size_t n = rng_range(&g, 16, 256);
        unsigned char *p = alloc_malloc(n);
        stress_check(p != NULL, "malloc(%zu) returned NULL", n);
        check_new_block(p, n, 0, "outbox");
        stress_hand_on(table, (unsigned)rng_below(&g, SLOTS), p, n, opt.seed, "outbox");
        if (--burst == 0) {
            struct timespec pause = { 0, (long)rng_range(&g, 100, 3000) * 1000 };
            nanosleep(&pause, NULL);
            burst = rng_range(&g, 1, 200);
        }
    }
    return NULL;
}

static _Atomic bool pump_stop;

/* Fill about 30 pages with 1000 B blocks, check and free them: pages
 * emptied, slots to purge. */
static void *pump(void *arg)
{
    (void)arg;
    enum { N = 2000, SIZE = 1000 };
    static stress_entry_t v[N];
    for (uint64_t round = 0; !atomic_load_explicit(&pump_stop, memory_order_relaxed); round++) {
        for (int i = 0; i < N; i++) {
            unsigned char *p = alloc_malloc(SIZE);
            stress_check(p != NULL, "pump: malloc(%d) returned NULL", SIZE);
            check_new_block(p, SIZE, 0, "pump");
            v[i] = (stress_entry_t){ p, SIZE, block_key(p, SIZE, opt.seed + round) };
            sparse_fill(p, SIZE, v[i].key);
        }
        for (int i = 0; i < N; i++)
            stress_drop(v[i], "pump");
        struct timespec pause = { 0, 300 * 1000 };
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Thread `id`'s life: its share of the steps, a life at a time. */
static void *lane(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    for (uint64_t from = 0; from < steps; from += steps_a_life) {
        life_t l = { id, from, from + steps_a_life < steps ? from + steps_a_life : steps };
        pthread_t t;
        stress_thread_start(&t, worker, &l);
        stress_thread_join(t);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (!stress_init_plain("stress_outbox", argc, argv, &opt))
        return 2;
    unsigned threads = opt.threads ? opt.threads : 4;
    steps = stress_amount(&opt, 30000, 1500000, 6);
    steps_a_life = 15000;
    stress_option(ALLOC_OPTION_PURGE_DELAY_MS, 1, "PURGE_DELAY_MS");
    stress_option(ALLOC_OPTION_PURGE_THREAD, 1, "PURGE_THREAD");
    pthread_t pumper;
    stress_thread_start(&pumper, pump, NULL);
    stress_run_threads(threads, lane);
    atomic_store_explicit(&pump_stop, true, memory_order_relaxed);
    stress_thread_join(pumper);
    stress_table_drain(table, SLOTS, "outbox, at the end");
    alloc_stats_t st = stress_stats();
    stress_check_quiescent();
    stress_done("%u threads x %" PRIu64 " steps of 16-256 B blocks, pausing, %zu remote "
                "frees, %zu atomic operations, purge delay 1 ms", threads, steps,
                st.remote_frees, st.remote_atomics);
    return 0;
}
