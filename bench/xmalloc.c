/* xmalloc.c - workload 12: threads that only allocate hand blocks to
 * threads that only free (after xmalloc-test).
 *
 * --threads T gives max(1, T/2) producers and as many consumers.  A
 * producer allocates blocks of random size (--min-size..--max-size),
 * stamps them and hands them over in batches of --batch pointers through
 * one shared stack (a mutex, taken once a batch); any consumer may pop
 * any producer's batch, checks every stamp and frees every block and the
 * batch.  So every free is remote, and the blocks a consumer frees come
 * from every producer at once.  Reports ns per item (wall time / items
 * per producer) and items per second; at most --depth batches wait.
 *
 *   xmalloc [--threads 2] [--items 2000000] [--batch 256] [--depth 64]
 *           [--min-size 16] [--max-size 512]
 */
#include "bench.h"

#include <sched.h>
#include <stdatomic.h>

typedef struct batch_s {
    struct batch_s *next;
    uint64_t seed, first;       /* stamps: seed << 40 ^ item */
    unsigned n;
    size_t size[];              /* then the pointers, after size[cap] */
} batch_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t more, room;
    batch_t *top;
    long waiting, depth;
    int producers_left;
} q = { .lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER,
        .room = PTHREAD_COND_INITIALIZER };

static uint64_t items_per_producer;
static unsigned batch_cap;
static size_t min_size, max_size;
static _Atomic uint64_t bytes_made, bytes_freed;

static unsigned char **ptrs(batch_t *b)
{
    return (unsigned char **)&b->size[batch_cap];
}

static void push(batch_t *b)
{
    pthread_mutex_lock(&q.lock);
    while (q.waiting >= q.depth)
        pthread_cond_wait(&q.room, &q.lock);
    b->next = q.top;
    q.top = b;
    q.waiting++;
    pthread_cond_signal(&q.more);
    pthread_mutex_unlock(&q.lock);
}

/* NULL once every producer is done and the stack is empty. */
static batch_t *pop(void)
{
    pthread_mutex_lock(&q.lock);
    while (q.top == NULL && q.producers_left > 0)
        pthread_cond_wait(&q.more, &q.lock);
    batch_t *b = q.top;
    if (b != NULL) {
        q.top = b->next;
        q.waiting--;
        pthread_cond_signal(&q.room);
    }
    pthread_mutex_unlock(&q.lock);
    return b;
}

static void *producer(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    bench_rng_t rng;
    bench_rng_seed(&rng, seed);
    uint64_t made = 0;
    for (uint64_t i = 0; i < items_per_producer;) {
        batch_t *b = malloc(sizeof *b + batch_cap * (sizeof(size_t) + sizeof(void *)));
        BENCH_CHECK(b != NULL, "malloc of a batch returned NULL");
        b->seed = seed;
        b->first = i;
        b->n = 0;
        for (; b->n < batch_cap && i < items_per_producer; b->n++, i++) {
            size_t size = (size_t)bench_rng_range(&rng, min_size, max_size);
            unsigned char *p = malloc(size);
            BENCH_CHECK(p != NULL, "malloc(%zu) returned NULL", size);
            bench_stamp(p, size, seed << 40 ^ i);
            b->size[b->n] = size;
            ptrs(b)[b->n] = p;
            made += size;
        }
        push(b);
    }
    atomic_fetch_add(&bytes_made, made);
    pthread_mutex_lock(&q.lock);
    q.producers_left--;
    pthread_cond_broadcast(&q.more);
    pthread_mutex_unlock(&q.lock);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    uint64_t freed = 0;
    batch_t *b;
    while ((b = pop()) != NULL) {
        for (unsigned k = 0; k < b->n; k++) {
            unsigned char *p = ptrs(b)[k];
            if (!bench_stamp_ok(p, b->size[k], b->seed << 40 ^ (b->first + k)))
                bench_fail("item %" PRIu64 " of producer %" PRIu64 " was overwritten",
                           b->first + k, b->seed);
            freed += b->size[k];
            free(p);
        }
        free(b);
    }
    atomic_fetch_add(&bytes_freed, freed);
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = bench_arg_long(argc, argv, "--threads", 2);
    items_per_producer = (uint64_t)bench_arg_long(argc, argv, "--items", 2000000);
    long batch = bench_arg_long(argc, argv, "--batch", 256);
    q.depth = bench_arg_long(argc, argv, "--depth", 64);
    min_size = (size_t)bench_arg_long(argc, argv, "--min-size", 16);
    max_size = (size_t)bench_arg_long(argc, argv, "--max-size", 512);
    if (batch < 1 || q.depth < 1 || min_size < 1 || max_size < min_size)
        bench_fail("bad arguments");
    batch_cap = (unsigned)batch;
    int n = threads / 2 > 0 ? (int)(threads / 2) : 1;
    q.producers_left = n;
    pthread_t *tid = malloc(sizeof(pthread_t) * 2 * (size_t)n);
    BENCH_CHECK(tid != NULL, "out of memory");
    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
        bench_thread_create(&tid[2 * i], consumer, NULL);
        bench_thread_create(&tid[2 * i + 1], producer, (void *)(uintptr_t)(i + 1));
    }
    for (int i = 0; i < 2 * n; i++)
        pthread_join(tid[i], NULL);
    double t = bench_now() - t0;
    BENCH_CHECK(atomic_load(&bytes_made) == atomic_load(&bytes_freed),
                "made %" PRIu64 " bytes, freed %" PRIu64, atomic_load(&bytes_made),
                atomic_load(&bytes_freed));
    free(tid);
    bench_info("producers=%d consumers=%d items_per_producer=%" PRIu64 " batch=%u", n, n,
               items_per_producer, batch_cap);
    bench_metric("item_ns", t * 1e9 / (double)items_per_producer, "ns");
    bench_metric("mitems_per_s", (double)items_per_producer * n / t / 1e6, "M/s");
    bench_ok();
    return 0;
}
