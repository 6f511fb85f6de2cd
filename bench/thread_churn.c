/* thread_churn.c - workload 7: short-lived threads that allocate and exit.
 *
 * --waves times, start T threads.  Each does --allocs allocations of
 * random size (16..2048 bytes) through a ring of 64 live blocks, then
 * exits leaving --keep blocks to the main thread, which checks and frees
 * them after the join (frees into the heap of a thread that is gone).
 * An allocator that leaks the heaps of exited threads grows here: see
 * the peak RSS.  Reports wall microseconds per thread (start to join).
 *
 *   thread_churn [--threads 2] [--waves 1500] [--allocs 1000] [--keep 16]
 */
#include "bench.h"

#define RING 64

static long allocs, keep;

typedef struct {
    int id;
    unsigned char **kept;
    size_t *kept_size;
    uint64_t *kept_tag;
} arg_t;

static void *worker(void *a)
{
    arg_t *arg = a;
    bench_rng_t rng;
    bench_rng_seed(&rng, (uint64_t)arg->id * 2654435761u + 3);
    unsigned char *ring[RING] = { 0 };
    size_t rsize[RING] = { 0 };
    uint64_t rtag[RING] = { 0 };
    for (long i = 0; i < allocs; i++) {
        int s = (int)(i % RING);
        if (ring[s]) {
            if (!bench_stamp_ok(ring[s], rsize[s], rtag[s]))
                bench_fail("thread %d: block %p was overwritten", arg->id, (void *)ring[s]);
            free(ring[s]);
        }
        rsize[s] = (size_t)bench_rng_range(&rng, 16, 2048);
        rtag[s] = ((uint64_t)arg->id << 32) ^ (uint64_t)i;
        ring[s] = malloc(rsize[s]);
        if (ring[s] == NULL)
            bench_fail("malloc(%zu) returned NULL", rsize[s]);
        bench_stamp(ring[s], rsize[s], rtag[s]);
    }
    /* Hand --keep blocks to the main thread, free the rest. */
    long k = 0;
    for (int s = 0; s < RING; s++) {
        if (!ring[s])
            continue;
        if (k < keep) {
            arg->kept[k] = ring[s];
            arg->kept_size[k] = rsize[s];
            arg->kept_tag[k] = rtag[s];
            k++;
        } else {
            free(ring[s]);
        }
    }
    for (; k < keep; k++) {                          /* allocs < keep */
        arg->kept_size[k] = 32;
        arg->kept_tag[k] = ((uint64_t)arg->id << 32) ^ 0xffffffffu ^ (uint64_t)k;
        arg->kept[k] = malloc(32);
        if (arg->kept[k] == NULL)
            bench_fail("malloc(32) returned NULL");
        bench_stamp(arg->kept[k], 32, arg->kept_tag[k]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = (int)bench_arg_long(argc, argv, "--threads", 2);
    long waves = bench_arg_long(argc, argv, "--waves", 1500);
    allocs = bench_arg_long(argc, argv, "--allocs", 1000);
    keep = bench_arg_long(argc, argv, "--keep", 16);
    if (nthreads < 1 || waves < 1 || allocs < 0 || keep < 0 || keep > RING)
        bench_fail("bad arguments");

    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    arg_t *args = calloc((size_t)nthreads, sizeof *args);
    BENCH_CHECK(tid && args, "out of memory");
    for (int i = 0; i < nthreads; i++) {
        args[i].kept = calloc((size_t)keep + 1, sizeof *args[i].kept);
        args[i].kept_size = calloc((size_t)keep + 1, sizeof *args[i].kept_size);
        args[i].kept_tag = calloc((size_t)keep + 1, sizeof *args[i].kept_tag);
        BENCH_CHECK(args[i].kept && args[i].kept_size && args[i].kept_tag, "out of memory");
    }
    uint64_t freed = 0;
    double t0 = bench_now();
    for (long w = 0; w < waves; w++) {
        for (int i = 0; i < nthreads; i++) {
            args[i].id = (int)(w * nthreads + i);
            bench_thread_create(&tid[i], worker, &args[i]);
        }
        for (int i = 0; i < nthreads; i++) {
            pthread_join(tid[i], NULL);
            for (long k = 0; k < keep; k++) {
                if (!bench_stamp_ok(args[i].kept[k], args[i].kept_size[k], args[i].kept_tag[k]))
                    bench_fail("wave %ld: a block left by thread %d was overwritten", w, i);
                free(args[i].kept[k]);
                freed++;
            }
        }
    }
    double t = bench_now() - t0;
    BENCH_CHECK(freed == (uint64_t)waves * (uint64_t)nthreads * (uint64_t)keep,
                "freed %" PRIu64 " kept blocks", freed);
    for (int i = 0; i < nthreads; i++) {
        free(args[i].kept);
        free(args[i].kept_size);
        free(args[i].kept_tag);
    }
    free(args);
    free(tid);
    bench_info("%ld threads in all", waves * nthreads);
    bench_metric("thread_us", t * 1e6 / ((double)waves * nthreads), "us");
    bench_ok();
    return 0;
}
