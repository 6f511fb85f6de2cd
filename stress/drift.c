/* drift.c - blocks whose sizes drift, passed between threads, while
 * sweeps trim the pages of the sizes left behind and carve them again.
 *
 *   stress_drift [--long] [--threads N] [--seed N] [--scale X]
 *
 * N threads (4 by default) share a table of slots.  Each step a thread
 * allocates a block whose size comes from a window of 100 bytes that
 * moves through 16 B .. 4 KiB and back as its steps go, writes its
 * pattern, swaps it into a random slot, and checks and frees the block
 * it gets back - most often another thread's, so most frees are remote.
 * The pages of the sizes the window leaves keep the few blocks the table
 * still holds: with PURGE_DELAY_MS at 1 ms, sweeps and purge passes
 * trim them (core/page.c), and when the window comes back their trimmed
 * blocks are carved again; every 1024 steps a thread calls
 * alloc_collect, which trims every such page of its heap at once.  At
 * the end nothing is live, and a forced collect hands every pool slot
 * back.
 */
#include "stress.h"

#define SLOTS 4096
#define BANDS 40            /* window positions, 100 bytes apart */

static stress_opts_t opt;
static stress_entry_t table[SLOTS];
static uint64_t steps, band_steps;

/* Step i's size: the window goes up through the bands and down again. */
static size_t pick_size(rng_t *g, uint64_t i)
{
    uint64_t pos = (i / band_steps) % (2 * BANDS);
    uint64_t band = pos < BANDS ? pos : 2 * BANDS - 1 - pos;
    return 16 + (size_t)band * 100 + (size_t)rng_below(g, 100);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    rng_t g = rng_make(opt.seed, id);
    for (uint64_t i = 0; i < steps; i++) {
        size_t n = pick_size(&g, i);
        unsigned char *p = alloc_malloc(n);
        stress_check(p != NULL, "malloc(%zu) returned NULL", n);
        check_new_block(p, n, 0, "drift");
        stress_hand_on(table, (unsigned)rng_below(&g, SLOTS), p, n, opt.seed, "drift");
        if (i % 1024 == 1023)
            alloc_collect(false);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (!stress_init_plain("stress_drift", argc, argv, &opt))
        return 2;
    unsigned threads = opt.threads ? opt.threads : 4;
    steps = stress_amount(&opt, 400000, 8000000, 10);
    band_steps = steps / (4 * BANDS) ? steps / (4 * BANDS) : 1;    /* the window goes round twice */
    stress_option(ALLOC_OPTION_PURGE_DELAY_MS, 1, "PURGE_DELAY_MS");
    stress_run_threads(threads, worker);
    stress_table_drain(table, SLOTS, "drift, at the end");
    stress_check_quiescent();
    stress_done("%u threads x %" PRIu64 " steps of blocks of a drifting size, purge delay 1 ms",
                threads, steps);
    return 0;
}
