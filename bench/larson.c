/* larson.c - workload 4: a larson-style server.
 *
 * T threads each own an array of --slots live blocks of random size
 * (--min-size..--max-size).  In every round each thread does --ops steps:
 * pick a random slot, check the block there still holds its stamp, free
 * it, allocate a block of a new random size and stamp it.  Between rounds
 * the arrays move on to the next thread (as a server hands connections
 * between workers), so from the second round on most frees are of blocks
 * another thread allocated.  Reports wall ns per step per thread and
 * million steps per second in all.
 *
 *   larson [--threads 2] [--rounds 20] [--ops 200000] [--slots 5000]
 *          [--min-size 8] [--max-size 1000]
 */
#include "bench.h"

typedef struct {
    unsigned char **ptr;
    uint32_t *size;
    uint64_t *tag;
} arena_t;

static int nthreads, rounds;
static long ops, slots;
static size_t min_size, max_size;
static arena_t *arenas;
static pthread_barrier_t barrier;
static double t_start, t_end;

/* Put a new stamped block of a random size in slot s of arena a. */
static void fill_slot(arena_t *a, long s, bench_rng_t *rng, uint64_t tag)
{
    size_t size = (size_t)bench_rng_range(rng, min_size, max_size);
    unsigned char *p = malloc(size);
    if (p == NULL)
        bench_fail("malloc(%zu) returned NULL", size);
    bench_stamp(p, size, tag);
    a->ptr[s] = p;
    a->size[s] = (uint32_t)size;
    a->tag[s] = tag;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    bench_rng_t rng;
    bench_rng_seed(&rng, (uint64_t)id * 7919 + 17);
    uint64_t serial = (uint64_t)id << 48;

    arena_t *a = &arenas[id];
    for (long s = 0; s < slots; s++)
        fill_slot(a, s, &rng, ++serial);
    pthread_barrier_wait(&barrier);
    if (id == 0)
        t_start = bench_now();
    for (int r = 0; r < rounds; r++) {
        a = &arenas[(id + r) % nthreads];            /* handed on each round */
        for (long i = 0; i < ops; i++) {
            long s = (long)(bench_rng_next(&rng) % (uint64_t)slots);
            if (!bench_stamp_ok(a->ptr[s], a->size[s], a->tag[s]))
                bench_fail("thread %d: block %p (%u bytes) was overwritten",
                           id, (void *)a->ptr[s], a->size[s]);
            free(a->ptr[s]);
            fill_slot(a, s, &rng, ++serial);
        }
        pthread_barrier_wait(&barrier);
    }
    if (id == 0)
        t_end = bench_now();
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = (int)bench_arg_long(argc, argv, "--threads", 2);
    rounds = (int)bench_arg_long(argc, argv, "--rounds", 20);
    ops = bench_arg_long(argc, argv, "--ops", 200000);
    slots = bench_arg_long(argc, argv, "--slots", 5000);
    min_size = (size_t)bench_arg_long(argc, argv, "--min-size", 8);
    max_size = (size_t)bench_arg_long(argc, argv, "--max-size", 1000);
    if (nthreads < 1 || rounds < 1 || ops < 1 || slots < 1 || min_size < 1 || max_size < min_size)
        bench_fail("bad arguments");

    arenas = calloc((size_t)nthreads, sizeof *arenas);
    BENCH_CHECK(arenas, "out of memory");
    for (int i = 0; i < nthreads; i++) {
        arenas[i].ptr = calloc((size_t)slots, sizeof *arenas[i].ptr);
        arenas[i].size = calloc((size_t)slots, sizeof *arenas[i].size);
        arenas[i].tag = calloc((size_t)slots, sizeof *arenas[i].tag);
        BENCH_CHECK(arenas[i].ptr && arenas[i].size && arenas[i].tag, "out of memory");
    }
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    BENCH_CHECK(tid, "out of memory");
    for (int i = 0; i < nthreads; i++)
        bench_thread_create(&tid[i], worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);

    uint64_t live = 0;
    for (int i = 0; i < nthreads; i++) {
        for (long s = 0; s < slots; s++) {
            if (!bench_stamp_ok(arenas[i].ptr[s], arenas[i].size[s], arenas[i].tag[s]))
                bench_fail("final check: block %p was overwritten", (void *)arenas[i].ptr[s]);
            live += arenas[i].size[s];
            free(arenas[i].ptr[s]);
        }
        free(arenas[i].ptr);
        free(arenas[i].size);
        free(arenas[i].tag);
    }
    free(arenas);
    free(tid);
    pthread_barrier_destroy(&barrier);

    double t = t_end - t_start;
    double steps = (double)ops * rounds;
    bench_info("threads=%d live at end %.1f MiB", nthreads, (double)live / 1048576.0);
    bench_metric("op_ns", t * 1e9 / steps, "ns");
    bench_metric("mops_per_s", steps * nthreads / t / 1e6, "M/s");
    bench_ok();
    return 0;
}
