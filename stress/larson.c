/* larson.c - a Larson-style server simulation (after Larson and Krishnan,
 * "Memory allocation for long-running server applications", 1998).
 *
 *   stress_larson [--long] [--threads N] [--seed N] [--scale X]
 *
 * N lanes (4 by default) each own an array of pattern-filled blocks.  A
 * lane's thread replaces random blocks - checks and frees one, allocates
 * another of a random size - for a number of rounds, then starts its
 * successor, hands it the array and exits.  The successor frees the
 * blocks its predecessors made: frees into pages of exited threads, which
 * must be adopted rather than leaked, while the other lanes keep going.
 * The first generation frees blocks the main thread made, the main thread
 * frees the last generation's.  Sizes are mostly 8 to 1024 bytes (the
 * classic Larson range) with some up to 64 KiB and a few large blocks.
 */
#include "stress.h"

typedef struct slot_s {
    unsigned char *p;
    size_t n;
    uint64_t key;
} slot_t;

typedef struct lane_s {
    unsigned index;
    unsigned gen;               /* generation now running */
    pthread_t prev;             /* the generation before, to join */
    bool has_prev;
    slot_t *slots;
    uint64_t ops;
} lane_t;

static stress_opts_t opt;
static unsigned nslots, generations;
static uint64_t rounds;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static unsigned lanes_done;
static pthread_t *last_thread;

static size_t pick_size(rng_t *g)
{
    uint64_t r = rng_below(g, 1000);
    if (r < 980)
        return rng_range(g, 8, 1024);
    if (r < 999)
        return rng_range(g, 1025, 64 * KiB);
    return rng_range(g, 64 * KiB + 1, 1 * MiB);
}

static void slot_fill(slot_t *s, rng_t *g)
{
    size_t n = pick_size(g);
    unsigned char *p = alloc_malloc(n);
    stress_check(p != NULL, "malloc(%zu) failed: %s", n, strerror(errno));
    check_new_block(p, n, 0, "larson");
    s->p = p;
    s->n = n;
    s->key = block_key(p, n, rng_next(g));
    pattern_fill(p, 0, n, s->key);
}

static void slot_free(slot_t *s, bool sized, const char *where)
{
    pattern_verify(s->p, 0, s->n, s->key, where);
    if (sized)
        alloc_free_sized(s->p, s->n);
    else
        alloc_free(s->p);
    s->p = NULL;
}

static void *lane_thread(void *arg)
{
    lane_t *l = arg;
    rng_t g = rng_make(opt.seed, ((uint64_t)l->index << 32) | l->gen);
    for (uint64_t r = 0; r < rounds; r++) {
        slot_t *s = &l->slots[rng_below(&g, nslots)];
        slot_free(s, r & 1, "block of an earlier generation or this one");
        slot_fill(s, &g);
    }
    l->ops += rounds;
    if (l->has_prev)
        stress_thread_join(l->prev);
    if (++l->gen < generations) {
        /* Hand the lane on; pthread_create orders our writes before the
         * successor's reads. */
        l->prev = pthread_self();
        l->has_prev = true;
        pthread_t next;
        stress_thread_start(&next, lane_thread, l);
        return NULL;
    }
    pthread_mutex_lock(&done_lock);
    last_thread[l->index] = pthread_self();
    lanes_done++;
    pthread_cond_signal(&done_cond);
    pthread_mutex_unlock(&done_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    if (stress_init("stress_larson", argc, argv, &opt) != argc) {
        stress_usage(NULL);
        return 2;
    }
    unsigned nlanes = opt.threads ? opt.threads : 4;
    nslots = 1000;
    rounds = stress_amount(&opt, 10000, 20000, 2);
    generations = (unsigned)stress_amount(&opt, 30, 2000, 2);

    lane_t *lanes = alloc_calloc(nlanes, sizeof *lanes);
    last_thread = alloc_calloc(nlanes, sizeof *last_thread);
    stress_check(lanes != NULL && last_thread != NULL, "calloc failed");
    rng_t g = rng_make(opt.seed, 0xffffffffu);
    for (unsigned i = 0; i < nlanes; i++) {
        lanes[i].index = i;
        lanes[i].slots = alloc_malloc(nslots * sizeof(slot_t));
        stress_check(lanes[i].slots != NULL, "malloc failed");
        for (unsigned k = 0; k < nslots; k++)
            slot_fill(&lanes[i].slots[k], &g);
    }
    for (unsigned i = 0; i < nlanes; i++) {
        pthread_t t;
        stress_thread_start(&t, lane_thread, &lanes[i]);
    }
    pthread_mutex_lock(&done_lock);
    while (lanes_done < nlanes)
        pthread_cond_wait(&done_cond, &done_lock);
    pthread_mutex_unlock(&done_lock);
    uint64_t ops = 0;
    for (unsigned i = 0; i < nlanes; i++) {
        stress_thread_join(last_thread[i]);     /* it joined the one before */
        for (unsigned k = 0; k < nslots; k++)
            slot_free(&lanes[i].slots[k], k & 1, "block of the last generation");
        alloc_free(lanes[i].slots);
        ops += lanes[i].ops;
    }
    alloc_free(lanes);
    alloc_free(last_thread);
    stress_check_quiescent();
    stress_done("%u lanes x %u generations, %" PRIu64 " replacements", nlanes, generations, ops);
    return 0;
}
