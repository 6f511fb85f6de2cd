/* handoff_rss - what a thread keeps of the blocks another thread freed.
 *
 * An owner thread allocates --blocks blocks of 32-511 B (--mib of them
 * in all, about) and writes them; a second thread checks and frees
 * every one (each a free into the owner's pages); then the owner either
 * goes on allocating a little (--owner busy: a malloc, a write and a
 * free of 100 B every 100 ms, all from its own pages' free blocks, as a
 * server's main thread between requests) or makes no call at all
 * (--owner idle: it waits on a barrier).  The process's RSS is read
 * after the owner's allocation, right after the frees, and every second
 * for --seconds seconds.  Prints one line:
 *
 *   owner busy live 116 freed 116 1s 116 2s 116 3s 116 4s 6 5s 6
 *
 * (MiB).  Run it under each allocator with LD_PRELOAD.
 *
 *   handoff_rss [--owner busy|idle] [--blocks 400000] [--seconds 5]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char **blocks;
static long nblocks = 400000;
static int seconds = 5;
static int busy = 1;
static pthread_barrier_t made, freed, done;
static volatile int finished;

static size_t size_of(long i)
{
    return 32 + (size_t)((i * 7919) % 480);
}

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f == NULL || fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    if (f != NULL)
        fclose(f);
    return rss * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

static void sleep_ms(long ms)
{
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

static void *owner(void *arg)
{
    (void)arg;
    for (long i = 0; i < nblocks; i++) {
        size_t n = size_of(i);
        if ((blocks[i] = malloc(n)) == NULL) {
            fprintf(stderr, "handoff_rss: out of memory\n");
            exit(1);
        }
        memset(blocks[i], (int)(i & 0xff), n);
    }
    pthread_barrier_wait(&made);
    pthread_barrier_wait(&freed);
    while (busy && !finished) {
        char *volatile p = malloc(100);
        if (p == NULL)
            exit(1);
        memset(p, 1, 100);
        free(p);
        sleep_ms(100);
    }
    pthread_barrier_wait(&done);
    return NULL;
}

static void *freer(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&made);
    for (long i = 0; i < nblocks; i++) {
        size_t n = size_of(i);
        for (size_t k = 0; k < n; k += 61)
            if (blocks[i][k] != (char)(i & 0xff)) {
                fprintf(stderr, "handoff_rss: block %ld changed\n", i);
                exit(2);
            }
        free(blocks[i]);
    }
    pthread_barrier_wait(&freed);
    pthread_barrier_wait(&done);
    return NULL;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--owner") == 0)
            busy = strcmp(argv[i + 1], "idle") != 0;
        else if (strcmp(argv[i], "--blocks") == 0)
            nblocks = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--owner busy|idle] [--blocks N] [--seconds S]\n",
                    argv[0]);
            return 2;
        }
    }
    blocks = calloc((size_t)nblocks, sizeof *blocks);
    if (blocks == NULL || nblocks <= 0)
        return 1;
    pthread_barrier_init(&made, NULL, 3);
    pthread_barrier_init(&freed, NULL, 3);
    pthread_barrier_init(&done, NULL, 3);
    pthread_t o, f;
    if (pthread_create(&o, NULL, owner, NULL) != 0 || pthread_create(&f, NULL, freer, NULL) != 0)
        return 1;
    pthread_barrier_wait(&made);
    printf("owner %s live %.0f", busy ? "busy" : "idle", rss_mib());
    pthread_barrier_wait(&freed);
    printf(" freed %.0f", rss_mib());
    for (int s = 1; s <= seconds; s++) {
        sleep_ms(1000);
        printf(" %ds %.0f", s, rss_mib());
    }
    printf("\n");
    finished = 1;
    pthread_barrier_wait(&done);
    pthread_join(o, NULL);
    pthread_join(f, NULL);
    free(blocks);
    return 0;
}
