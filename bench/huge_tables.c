/* huge_tables.c - workload 14: big zeroed tables, read before written.
 *
 * T threads each keep --live tables of random sizes between --min-mb and
 * --max-mb MiB.  In every round a thread picks one of its tables, checks
 * and frees it, and makes a new one of a new random size with calloc,
 * which it reads a page at a time (a table of counters is looked up
 * before it is incremented; a buffer is checked before it is filled)
 * and then writes whole.  What it measures is what an allocator does
 * with a zeroed block that reuses freed memory: stores zeros into pages
 * that are resident, or gives them back and lets the kernel zero them at
 * the next fault - where, in a process with other threads running, a
 * read maps the shared zero page and the write after it takes a second
 * fault and a TLB shootdown to the other CPUs.  Reports wall ms a round
 * per thread.
 *
 * Checks: every page of a new table reads zero, and a table holds what
 * was written into it when it is freed.
 *
 *   huge_tables [--threads 2] [--rounds 100] [--live 12] [--min-mb 2] [--max-mb 40]
 */
#include "bench.h"

#define MAX_LIVE 64
#define PAGE 4096

static long rounds;
static int live;
static size_t min_bytes, max_bytes;
static pthread_barrier_t barrier;

static void check_written(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i += PAGE)
        BENCH_CHECK(p[i] == v, "table byte %zu changed before its free", i);
    BENCH_CHECK(p[n - 1] == v, "table's last byte changed before its free");
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    bench_rng_t rng;
    bench_rng_seed(&rng, (uint64_t)id * 7919 + 3);
    unsigned char *table[MAX_LIVE] = { 0 };
    size_t len[MAX_LIVE] = { 0 };
    pthread_barrier_wait(&barrier);
    for (long r = 0; r < rounds; r++) {
        int i = (int)(bench_rng_next(&rng) % (uint64_t)live);
        unsigned char v = (unsigned char)(i + 1);
        if (table[i] != NULL) {
            check_written(table[i], len[i], v);
            free(table[i]);
        }
        size_t n = (size_t)bench_rng_range(&rng, min_bytes, max_bytes);
        unsigned char *p = calloc(1, n);
        BENCH_CHECK(p != NULL, "calloc(1, %zu) returned NULL", n);
        unsigned sum = 0;
        for (size_t k = 0; k < n; k += PAGE)
            sum |= p[k];
        BENCH_CHECK(sum == 0 && p[n - 1] == 0, "calloc'd table does not read zero");
        memset(p, v, n);
        table[i] = p;
        len[i] = n;
    }
    for (int i = 0; i < live; i++) {
        if (table[i] != NULL) {
            check_written(table[i], len[i], (unsigned char)(i + 1));
            free(table[i]);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = (int)bench_arg_long(argc, argv, "--threads", 2);
    rounds = bench_arg_long(argc, argv, "--rounds", 100);
    live = (int)bench_arg_long(argc, argv, "--live", 12);
    long min_mb = bench_arg_long(argc, argv, "--min-mb", 2);
    long max_mb = bench_arg_long(argc, argv, "--max-mb", 40);
    BENCH_CHECK(threads > 0 && threads <= 64 && rounds > 0 && live > 0 && live <= MAX_LIVE &&
                    min_mb > 0 && max_mb > min_mb,
                "bad arguments");
    min_bytes = (size_t)min_mb << 20;
    max_bytes = (size_t)max_mb << 20;
    pthread_t t[64];
    pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++)
        bench_thread_create(&t[i], worker, (void *)(intptr_t)i);
    pthread_barrier_wait(&barrier);
    double t0 = bench_now();
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double el = bench_now() - t0;
    bench_metric("round_ms", el * 1e3 / (double)rounds, "ms");
    bench_info("threads=%d rounds=%ld live=%d sizes %ld-%ld MiB", threads, rounds, live, min_mb,
               max_mb);
    bench_ok();
    return 0;
}
