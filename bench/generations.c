/* generations.c - workload 10: threads that come and go in generations,
 * beside a long-lived thread.
 *
 * --gens times, start --threads threads.  Each frees the blocks its
 * slot's previous occupant left behind (frees into the pages of a thread
 * that is gone), allocates --blocks blocks of 8..1024 B (powers of two),
 * keeps one in --keep for the next generation and frees the rest.
 * Between generations the main thread allocates and frees --main-batch
 * blocks of 4 KiB, as a server's long-lived thread does a little work
 * now and then.  An allocator whose memory follows the history of
 * exited threads rather than what is live grows here with every
 * generation.
 *
 * Reports ms per generation, the RSS at --samples points of the run
 * (rss_mb.gNNNN, for the chart of RSS over the run) and, after the last
 * leftovers are freed, the RSS once --idle-ms have passed with no
 * allocator call (memory given back while idle).
 *
 *   generations [--threads 2] [--gens 300] [--blocks 40000] [--keep 10]
 *               [--main-batch 17] [--samples 12] [--idle-ms 2500]
 */
#include "bench.h"

#include <fcntl.h>
#include <unistd.h>

static long blocks, keep;

typedef struct {
    unsigned char **left;       /* this slot's leftovers */
    size_t *left_size;
    uint64_t *left_tag;
    long n_left;
    uint64_t seed;
} slot_t;

static double rss_mb(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long size, resident;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static void free_left(slot_t *s, const char *who)
{
    for (long i = 0; i < s->n_left; i++) {
        if (!bench_stamp_ok(s->left[i], s->left_size[i], s->left_tag[i]))
            bench_fail("%s: a block left behind was overwritten", who);
        free(s->left[i]);
    }
    s->n_left = 0;
}

static void *generation(void *arg)
{
    slot_t *s = arg;
    bench_rng_t rng;
    bench_rng_seed(&rng, s->seed);
    free_left(s, "thread");
    for (long i = 0; i < blocks; i++) {
        size_t n = (size_t)8 << bench_rng_range(&rng, 0, 7);
        uint64_t tag = s->seed << 24 ^ (uint64_t)i;
        unsigned char *p = malloc(n);
        if (p == NULL)
            bench_fail("malloc(%zu) returned NULL", n);
        bench_stamp(p, n, tag);
        if (i % keep == 0) {
            s->left[s->n_left] = p;
            s->left_size[s->n_left] = n;
            s->left_tag[s->n_left] = tag;
            s->n_left++;
        } else {
            if (!bench_stamp_ok(p, n, tag))
                bench_fail("thread: a block was overwritten");
            free(p);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = (int)bench_arg_long(argc, argv, "--threads", 2);
    long gens = bench_arg_long(argc, argv, "--gens", 300);
    blocks = bench_arg_long(argc, argv, "--blocks", 40000);
    keep = bench_arg_long(argc, argv, "--keep", 10);
    long batch = bench_arg_long(argc, argv, "--main-batch", 17);
    long samples = bench_arg_long(argc, argv, "--samples", 12);
    long idle_ms = bench_arg_long(argc, argv, "--idle-ms", 2500);
    if (nthreads < 1 || gens < 1 || blocks < 1 || keep < 1 || batch < 0 || samples < 1 ||
        idle_ms < 0)
        bench_fail("bad arguments");

    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    slot_t *slots = calloc((size_t)nthreads, sizeof *slots);
    unsigned char **mine = calloc((size_t)batch + 1, sizeof *mine);
    BENCH_CHECK(tid && slots && mine, "out of memory");
    long cap = blocks / keep + 1;
    for (int i = 0; i < nthreads; i++) {
        slots[i].left = calloc((size_t)cap, sizeof *slots[i].left);
        slots[i].left_size = calloc((size_t)cap, sizeof *slots[i].left_size);
        slots[i].left_tag = calloc((size_t)cap, sizeof *slots[i].left_tag);
        BENCH_CHECK(slots[i].left && slots[i].left_size && slots[i].left_tag, "out of memory");
    }
    double t0 = bench_now();
    for (long g = 0; g < gens; g++) {
        for (int i = 0; i < nthreads; i++) {
            slots[i].seed = (uint64_t)(g * nthreads + i) * 2654435761u + 7;
            bench_thread_create(&tid[i], generation, &slots[i]);
        }
        for (int i = 0; i < nthreads; i++)
            pthread_join(tid[i], NULL);
        for (long i = 0; i < batch; i++) {
            if ((mine[i] = malloc(4096)) == NULL)
                bench_fail("malloc(4096) returned NULL");
            bench_stamp(mine[i], 4096, (uint64_t)g << 20 ^ (uint64_t)i);
        }
        for (long i = 0; i < batch; i++) {
            if (!bench_stamp_ok(mine[i], 4096, (uint64_t)g << 20 ^ (uint64_t)i))
                bench_fail("main: a block was overwritten");
            free(mine[i]);
        }
        /* Sample at evenly spread generations, the last one included. */
        if ((g + 1) * samples / gens != g * samples / gens) {
            char name[32];
            snprintf(name, sizeof name, "rss_mb.g%04ld", g + 1);
            bench_metric(name, rss_mb(), "MiB");
        }
    }
    double t = bench_now() - t0;
    for (int i = 0; i < nthreads; i++)
        free_left(&slots[i], "main");
    if (idle_ms > 0) {
        struct timespec ts = { idle_ms / 1000, (idle_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        bench_metric("rss_idle_mb", rss_mb(), "MiB");
    }
    for (int i = 0; i < nthreads; i++) {
        free(slots[i].left);
        free(slots[i].left_size);
        free(slots[i].left_tag);
    }
    free(slots);
    free(tid);
    free(mine);
    bench_info("%ld generations of %d threads, %ld blocks each", gens, nthreads, blocks);
    bench_metric("gen_ms", t * 1e3 / (double)gens, "ms");
    bench_ok();
    return 0;
}
