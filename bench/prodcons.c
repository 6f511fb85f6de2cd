/* prodcons.c - workload 5: producer/consumer, every free is remote.
 *
 * --threads T gives max(1, T/2) pairs.  In each pair one thread allocates
 * blocks of random size (--min-size..--max-size), stamps them and pushes
 * them into a bounded single-producer single-consumer ring (--queue
 * slots); the other pops, checks the stamp and size, and frees.  So every
 * block is freed by a thread that did not allocate it.
 * Reports ns per item (wall time / items per pair) and items per second.
 *
 *   prodcons [--threads 2] [--items 2000000] [--queue 1024]
 *            [--min-size 16] [--max-size 256]
 */
#include "bench.h"

#include <sched.h>
#include <stdatomic.h>

typedef struct {
    _Alignas(64) _Atomic uint64_t head;         /* next slot to pop  */
    _Alignas(64) _Atomic uint64_t tail;         /* next slot to push */
    _Alignas(64) unsigned char **slots;
    uint64_t mask;
    uint64_t items;
    uint64_t seed;
    size_t min_size, max_size;
    uint64_t checksum_prod, checksum_cons;
} ring_t;

static void backoff(unsigned *spins)
{
    if (++*spins < 64)
        bench_cpu_relax();
    else
        sched_yield();
}

static void *producer(void *arg)
{
    ring_t *r = arg;
    bench_rng_t rng;
    bench_rng_seed(&rng, r->seed);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < r->items; i++) {
        size_t size = (size_t)bench_rng_range(&rng, r->min_size, r->max_size);
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
        uint64_t tag = r->seed << 40 ^ i;
        bench_stamp(p, size, tag);
        sum += size;
        uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
        unsigned spins = 0;
        while (t - atomic_load_explicit(&r->head, memory_order_acquire) > r->mask)
            backoff(&spins);
        r->slots[t & r->mask] = p;
        atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    }
    r->checksum_prod = sum;
    return NULL;
}

static void *consumer(void *arg)
{
    ring_t *r = arg;
    bench_rng_t rng;                   /* mirrors the producer's sizes */
    bench_rng_seed(&rng, r->seed);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < r->items; i++) {
        size_t size = (size_t)bench_rng_range(&rng, r->min_size, r->max_size);
        uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        unsigned spins = 0;
        while (atomic_load_explicit(&r->tail, memory_order_acquire) == h)
            backoff(&spins);
        unsigned char *p = r->slots[h & r->mask];
        atomic_store_explicit(&r->head, h + 1, memory_order_release);
        if (!bench_stamp_ok(p, size, r->seed << 40 ^ i))
            bench_fail("item %" PRIu64 " (%zu bytes at %p) was overwritten", i, size, (void *)p);
        sum += size;
        free(p);
    }
    r->checksum_cons = sum;
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = bench_arg_long(argc, argv, "--threads", 2);
    uint64_t items = (uint64_t)bench_arg_long(argc, argv, "--items", 2000000);
    long queue = bench_arg_long(argc, argv, "--queue", 1024);
    size_t min_size = (size_t)bench_arg_long(argc, argv, "--min-size", 16);
    size_t max_size = (size_t)bench_arg_long(argc, argv, "--max-size", 256);
    if (queue < 2 || (queue & (queue - 1)) || min_size < 1 || max_size < min_size)
        bench_fail("bad arguments");
    int npairs = threads / 2 > 0 ? (int)(threads / 2) : 1;

    ring_t *rings = aligned_alloc(64, sizeof(ring_t) * (size_t)npairs);
    pthread_t *tid = malloc(sizeof(pthread_t) * 2 * (size_t)npairs);
    BENCH_CHECK(rings && tid, "out of memory");
    for (int i = 0; i < npairs; i++) {
        ring_t *r = &rings[i];
        memset(r, 0, sizeof *r);
        r->slots = calloc((size_t)queue, sizeof *r->slots);
        BENCH_CHECK(r->slots, "out of memory");
        r->mask = (uint64_t)queue - 1;
        r->items = items;
        r->seed = (uint64_t)i + 1;
        r->min_size = min_size;
        r->max_size = max_size;
    }
    double t0 = bench_now();
    for (int i = 0; i < npairs; i++) {
        bench_thread_create(&tid[2 * i], consumer, &rings[i]);
        bench_thread_create(&tid[2 * i + 1], producer, &rings[i]);
    }
    for (int i = 0; i < 2 * npairs; i++)
        pthread_join(tid[i], NULL);
    double t = bench_now() - t0;
    for (int i = 0; i < npairs; i++) {
        BENCH_CHECK(rings[i].checksum_prod == rings[i].checksum_cons,
                    "pair %d: produced %" PRIu64 " bytes, consumed %" PRIu64, i,
                    rings[i].checksum_prod, rings[i].checksum_cons);
        free(rings[i].slots);
    }
    free(tid);
    free(rings);
    bench_info("pairs=%d items_per_pair=%" PRIu64, npairs, items);
    bench_metric("item_ns", t * 1e9 / (double)items, "ns");
    bench_metric("mitems_per_s", (double)items * npairs / t / 1e6, "M/s");
    bench_ok();
    return 0;
}
