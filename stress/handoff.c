/* handoff.c - large and huge blocks passed between threads, while purge
 * passes take the threads' caches and huge slots.
 *
 *   stress_handoff [--long] [--threads N] [--seed N] [--scale X]
 *
 * N threads (4 by default) share a table of slots.  Each step a thread
 * allocates a block of 64 KiB to 40 MiB (alloc_malloc, or alloc_calloc,
 * checked zero), writes its pattern (sparsely above 64 KiB), and swaps
 * it into a random slot; the block it gets back, made by whichever
 * thread, has its pattern checked and is freed.  So every free lands in
 * the freeing thread's large cache or huge slot, and the next malloc of
 * a similar size takes it back, while PURGE_DELAY_MS is 1 ms: the purger
 * marks and unmaps the slots' mappings between the owners' exchanges.
 * Every few hundred steps one fresh thread, which has never allocated,
 * takes a block out of the table and frees it as its first call into
 * the allocator.  At the end: nothing is live, and a forced collect
 * hands every pool slot back.
 */
#include "stress.h"

#define SLOTS 16

static stress_opts_t opt;
static stress_entry_t table[SLOTS];
static uint64_t steps;

static size_t pick_size(rng_t *g)
{
    if (rng_below(g, 2) == 0)
        return rng_range(g, 64 * KiB + 1, 2 * MiB);         /* large */
    return rng_range(g, 2 * MiB + 1, 40 * MiB);             /* huge */
}

/* A thread whose first call into the allocator is a free. */
static void *first_call_free(void *arg)
{
    unsigned slot = (unsigned)(uintptr_t)arg;
    stress_drop(stress_swap(table, slot, (stress_entry_t){ NULL, 0, 0 }),
                "free by a thread without a heap");
    return NULL;
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    rng_t g = rng_make(opt.seed, id);
    for (uint64_t i = 0; i < steps; i++) {
        size_t n = pick_size(&g);
        bool zero = rng_below(&g, 8) == 0;
        unsigned char *p = zero ? alloc_calloc(1, n) : alloc_malloc(n);
        stress_check(p != NULL, "%s(%zu) returned NULL", zero ? "calloc" : "malloc", n);
        check_new_block(p, n, 0, "handoff");
        if (zero) {
            verify_zero(p, n < 64 * KiB ? n : 4 * KiB, "handoff");
            verify_zero(p + n - (n < 64 * KiB ? n : 4 * KiB), n < 64 * KiB ? n : 4 * KiB,
                        "handoff");
        }
        stress_hand_on(table, (unsigned)rng_below(&g, SLOTS), p, n, opt.seed, "handoff");
        if (id == 0 && i % 256 == 255) {
            pthread_t t;
            stress_thread_start(&t, first_call_free, (void *)(uintptr_t)rng_below(&g, SLOTS));
            stress_thread_join(t);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (!stress_init_plain("stress_handoff", argc, argv, &opt))
        return 2;
    unsigned threads = opt.threads ? opt.threads : 4;
    steps = stress_amount(&opt, 20000, 400000, 10);
    stress_option(ALLOC_OPTION_PURGE_DELAY_MS, 1, "PURGE_DELAY_MS");
    stress_run_threads(threads, worker);
    stress_table_drain(table, SLOTS, "handoff, at the end");
    stress_check_quiescent();
    stress_done("%u threads x %" PRIu64 " steps of 64 KiB-40 MiB blocks, purge delay 1 ms",
                threads, steps);
    return 0;
}
