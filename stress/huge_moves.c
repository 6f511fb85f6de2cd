/* huge_moves.c - huge blocks that realloc moves, while other threads map
 * new ones at the addresses the moves give back.
 *
 *   stress_huge_moves [--long] [--threads N] [--seed N] [--scale X]
 *
 * Half the threads (2 of 4 by default) grow a huge block of 5-8 MiB to
 * 24-40 MiB with alloc_realloc, which mostly cannot grow it in place and
 * moves its pages to a new reservation; the other half allocate a few
 * huge blocks of 5-6 MiB at a time.  PURGE_DELAY_MS is 0, so every freed
 * mapping goes back to the OS at once and the kernel hands its addresses
 * out again at the next mmap - often to another thread, often the
 * addresses a move has just left.  Every block's usable size is asked
 * (shoal reports a pointer whose chunk is not tagged as its own, which
 * an untagging of a moved block's old chunk that came after another
 * thread had tagged it would cause) and its pattern checked, across
 * the move too.  At the end nothing is live.
 */
#include "stress.h"

#define MAPPED 4

static stress_opts_t opt;
static uint64_t steps;
static unsigned movers;

static void *mover(rng_t *g)
{
    for (uint64_t i = 0; i < steps; i++) {
        size_t n = rng_range(g, 5 * MiB, 8 * MiB), m = rng_range(g, 24 * MiB, 40 * MiB);
        unsigned char *p = alloc_malloc(n);
        stress_check(p != NULL, "malloc(%zu) returned NULL", n);
        uint64_t key = block_key(p, n, opt.seed);
        sparse_fill(p, n, key);
        unsigned char *q = alloc_realloc(p, m);
        stress_check(q != NULL, "realloc(%zu -> %zu) returned NULL", n, m);
        check_new_block(q, m, 0, "moved block");
        sparse_verify(q, n, key, "moved block");
        alloc_free(q);
    }
    return NULL;
}

static void *mapper(rng_t *g)
{
    for (uint64_t i = 0; i < steps; i++) {
        unsigned char *b[MAPPED];
        size_t n[MAPPED];
        uint64_t key[MAPPED];
        for (unsigned k = 0; k < MAPPED; k++) {
            n[k] = rng_range(g, 5 * MiB, 6 * MiB);
            b[k] = alloc_malloc(n[k]);
            stress_check(b[k] != NULL, "malloc(%zu) returned NULL", n[k]);
            key[k] = block_key(b[k], n[k], opt.seed);
            sparse_fill(b[k], n[k], key[k]);
        }
        for (unsigned k = 0; k < MAPPED; k++) {
            check_new_block(b[k], n[k], 0, "mapped block");
            sparse_verify(b[k], n[k], key[k], "mapped block");
            alloc_free(b[k]);
        }
    }
    return NULL;
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    rng_t g = rng_make(opt.seed, id);
    return id < movers ? mover(&g) : mapper(&g);
}

int main(int argc, char **argv)
{
    if (!stress_init_plain("stress_huge_moves", argc, argv, &opt))
        return 2;
    unsigned threads = opt.threads >= 2 ? opt.threads : 4;
    movers = threads / 2;
    steps = stress_amount(&opt, 3000, 100000, 10);
    stress_option(ALLOC_OPTION_PURGE_DELAY_MS, 0, "PURGE_DELAY_MS");
    stress_run_threads(threads, worker);
    stress_check_quiescent();
    stress_done("%u threads (%u moving) x %" PRIu64 " steps of 5-40 MiB blocks, purge delay 0",
                threads, movers, steps);
    return 0;
}
