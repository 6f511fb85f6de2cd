/* false_sharing.c - workload 6: allocator-induced false sharing
 * (Hoard's cache-thrash and cache-scratch).
 *
 * thrash (active): each of T threads --objects times allocates a small
 *   block (--size bytes), writes it --writes times, checks it, frees it.
 *   If the allocator gives different threads blocks on one cache line,
 *   the writes ping-pong that line between cores.
 * scratch (passive): the main thread allocates T small blocks in a row
 *   (likely one cache line), writes them, and hands one to each thread,
 *   which frees it and then runs the thrash loop.  An allocator that
 *   reuses a freed block in the freeing thread hands every thread a
 *   block on that shared line.
 * Reports wall seconds for each phase.
 *
 *   false_sharing [--threads 2] [--objects 50000] [--writes 1000] [--size 8]
 */
#include "bench.h"

static long objects, writes;
static size_t size;
static pthread_barrier_t barrier;

typedef struct {
    unsigned char *given;       /* scratch: block from the main thread */
    int id;
} arg_t;

static void work(int id)
{
    for (long i = 0; i < objects; i++) {
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", size);
        volatile unsigned char *v = p;
        unsigned char base = (unsigned char)(id * 31 + i);
        for (size_t k = 0; k < size; k++)
            v[k] = base;
        for (long w = 0; w < writes; w++)
            v[w % (long)size]++;
        /* Each byte k got writes/size increments, plus one for k < writes%size. */
        for (size_t k = 0; k < size; k++) {
            long n = writes / (long)size + ((long)k < writes % (long)size);
            if (v[k] != (unsigned char)(base + n))
                bench_fail("thread %d: block %p byte %zu is %u, expected %u", id,
                           (void *)p, k, v[k], (unsigned char)(base + n));
        }
        free(p);
    }
}

static void *thrash(void *a)
{
    arg_t *arg = a;
    pthread_barrier_wait(&barrier);
    work(arg->id);
    return NULL;
}

static void *scratch(void *a)
{
    arg_t *arg = a;
    pthread_barrier_wait(&barrier);
    if (!bench_stamp_ok(arg->given, size, (uint64_t)arg->id + 101))
        bench_fail("thread %d: the block handed over was changed", arg->id);
    free(arg->given);
    work(arg->id);
    return NULL;
}

static double phase(int nthreads, void *(*fn)(void *), int give)
{
    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    arg_t *args = calloc((size_t)nthreads, sizeof *args);
    BENCH_CHECK(tid && args, "out of memory");
    for (int i = 0; i < nthreads; i++) {
        args[i].id = i;
        if (give) {
            args[i].given = malloc(size);
            BENCH_CHECK(args[i].given, "malloc(%zu) returned NULL", size);
            bench_stamp(args[i].given, size, (uint64_t)i + 101);
        }
    }
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++)
        bench_thread_create(&tid[i], fn, &args[i]);
    pthread_barrier_wait(&barrier);
    double t0 = bench_now();
    for (int i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    double t = bench_now() - t0;
    pthread_barrier_destroy(&barrier);
    free(tid);
    free(args);
    return t;
}

int main(int argc, char **argv)
{
    int nthreads = (int)bench_arg_long(argc, argv, "--threads", 2);
    objects = bench_arg_long(argc, argv, "--objects", 50000);
    writes = bench_arg_long(argc, argv, "--writes", 1000);
    size = (size_t)bench_arg_long(argc, argv, "--size", 8);
    if (nthreads < 1 || objects < 1 || writes < 0 || size < 1)
        bench_fail("bad arguments");

    double thrash_s = phase(nthreads, thrash, 0);
    double scratch_s = phase(nthreads, scratch, 1);
    bench_metric("thrash_s", thrash_s, "s");
    bench_metric("scratch_s", scratch_s, "s");
    bench_ok();
    return 0;
}
