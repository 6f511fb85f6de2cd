/* shared_table - threads that replace blocks of one table, as the
 * workers of a server share a cache: what memory that holds, with more
 * threads than cores.
 *
 * --threads T threads each fill their share of a table of --slots
 * blocks of 16-2000 B (about 201 MB for 200,000), then, until --seconds
 * have passed, each replaces a random slot's block with a new one it
 * makes (an atomic exchange) and checks and frees the block it took out
 * - most often another thread's: with T threads, T-1 frees in T are of
 * blocks another heap owns.  With more threads than cores the owner of
 * a block freed is often not running.  The process's RSS is read every
 * second.  Prints one line:
 *
 *   threads 4 live 201 1s 224 2s 226 ... peak 228 mops 45.7
 *
 * (MB; mops: million replacements a second, all threads).  Run it
 * under each allocator with LD_PRELOAD.
 *
 *   shared_table [--threads 4] [--slots 200000] [--seconds 10]
 */
#include "bench.h"

#include <stdatomic.h>
#include <unistd.h>

static _Atomic(unsigned char *) *table;
static long slots = 200000;
static int nthreads = 4;
static _Atomic int stop;
static pthread_barrier_t filled;

static size_t size_of(uint64_t r)
{
    return 16 + (size_t)(r % 1985);
}

/* A block's first 16 bytes: its size and its tag, checked at its free
 * (only those: a cache's values are mostly not read again). */
static unsigned char *make(size_t n, uint64_t tag)
{
    unsigned char *p = malloc(n);
    if (p == NULL)
        bench_fail("malloc(%zu) returned NULL", n);
    memcpy(p, &n, sizeof n);
    memcpy(p + 8, &tag, sizeof tag);
    return p;
}

static void check_free(unsigned char *p, uint64_t slot)
{
    size_t n;
    uint64_t tag;
    memcpy(&n, p, sizeof n);
    memcpy(&tag, p + 8, sizeof tag);
    if (n != size_of(tag) || tag % (uint64_t)slots != slot)
        bench_fail("block %p was overwritten", (void *)p);
    free(p);
}

static void *worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    bench_rng_t rng;
    bench_rng_seed(&rng, (uint64_t)id * 7919 + 1);
    for (long i = id; i < slots; i += nthreads)
        atomic_store(&table[i], make(size_of((uint64_t)i), (uint64_t)i));
    pthread_barrier_wait(&filled);
    long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        /* The tag names the slot (tag % slots) and the size. */
        uint64_t tag = bench_rng_next(&rng), slot = tag % (uint64_t)slots;
        check_free(atomic_exchange(&table[slot], make(size_of(tag), tag)), slot);
        n++;
    }
    return (void *)(intptr_t)n;
}

static long rss_mb(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%ld %ld", &pages, &res) != 2)
        res = 0;
    if (f != NULL)
        fclose(f);
    return res * sysconf(_SC_PAGESIZE) / 1000000;
}

int main(int argc, char **argv)
{
    nthreads = (int)bench_arg_long(argc, argv, "--threads", 4);
    slots = bench_arg_long(argc, argv, "--slots", 200000);
    int seconds = (int)bench_arg_long(argc, argv, "--seconds", 10);
    if (nthreads < 1 || nthreads > 256 || slots < nthreads || seconds < 1)
        bench_fail("bad arguments");
    table = calloc((size_t)slots, sizeof *table);
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    BENCH_CHECK(table && t, "out of memory");
    pthread_barrier_init(&filled, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++)
        bench_thread_create(&t[i], worker, (void *)(intptr_t)i);
    pthread_barrier_wait(&filled);
    uint64_t live = 0;
    for (long i = 0; i < slots; i++) {
        size_t n;
        memcpy(&n, atomic_load(&table[i]), sizeof n);
        live += n;
    }
    printf("threads %d live %.0f", nthreads, (double)live / 1e6);
    long peak = 0;
    double t0 = bench_now();
    for (int s = 1; s <= seconds; s++) {
        sleep(1);
        long r = rss_mb();
        peak = r > peak ? r : peak;
        printf(" %ds %ld", s, r);
        fflush(stdout);
    }
    atomic_store(&stop, 1);
    long ops = 0;
    for (int i = 0; i < nthreads; i++) {
        void *n;
        pthread_join(t[i], &n);
        ops += (long)(intptr_t)n;
    }
    double elapsed = bench_now() - t0;
    printf(" peak %ld mops %.1f\n", peak, (double)ops / elapsed / 1e6);
    for (long i = 0; i < slots; i++)
        check_free(atomic_load(&table[i]), (uint64_t)i);
    free(table);
    free(t);
    return 0;
}
