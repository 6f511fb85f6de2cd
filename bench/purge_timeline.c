/* purge_timeline - what PURGE_DELAY_MS costs and what it buys.
 *
 * Two measurements in one run, for the delay set in the environment:
 *  1. churn: a working set that swings between 8 and 64 MiB of mixed
 *     blocks, 40 times; the elapsed time shows what purging (and faulting
 *     the memory back in) costs when memory is reused soon after it is
 *     freed;
 *  2. timeline: 256 MiB allocated and touched, then all freed; RSS is
 *     sampled at fixed times after the free while the process makes no
 *     allocator call at all.
 * Prints one line: delay, churn ms, minor faults, and RSS (MiB) at each
 * sample time.  Every block is checked before it is freed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long rss_mib(void)
{
    char buf[128];
    long size = 0, res = 0;
    int fd = open("/proc/self/statm", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    sscanf(buf, "%ld %ld", &size, &res);
    return res * sysconf(_SC_PAGESIZE) >> 20;
}

static size_t size_of(size_t i)
{
    static const size_t sizes[] = { 32, 80, 200, 640, 1500, 4000, 9000, 30000 };
    return sizes[(i * 2654435761u) % 8];
}

static size_t fill(char **blocks, size_t bytes)
{
    size_t n = 0, total = 0;
    while (total < bytes) {
        size_t sz = size_of(n);
        blocks[n] = malloc(sz);
        if (blocks[n] == NULL)
            exit(2);
        memset(blocks[n], (int)(n & 0x7f), sz);
        total += sz;
        n++;
    }
    return n;
}

static void drain(char **blocks, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (blocks[i][size_of(i) - 1] != (char)(i & 0x7f))
            exit(3);
        free(blocks[i]);
    }
}

int main(void)
{
    static char *blocks[1 << 22];
    const char *d = getenv("SHOAL_PURGE_DELAY_MS");
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double t0 = now_ms();
    for (int round = 0; round < 40; round++) {
        size_t n = fill(blocks, 64u << 20);
        drain(blocks, n / 8, n);                /* down to 8 MiB */
        usleep(20000);                          /* a quiet moment */
        drain(blocks, 0, n / 8);
    }
    double churn = now_ms() - t0;
    getrusage(RUSAGE_SELF, &ru1);

    size_t n = fill(blocks, 256u << 20);
    long full = rss_mib();
    drain(blocks, 0, n);
    static const int at[] = { 0, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 3000 };
    long rss[sizeof at / sizeof at[0]];
    double t1 = now_ms();
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        while (now_ms() - t1 < at[i])
            usleep(500);
        rss[i] = rss_mib();
    }
    printf("delay=%s churn_ms=%.0f churn_minor_faults=%ld full_mib=%ld", d ? d : "default",
           churn, ru1.ru_minflt - ru0.ru_minflt, full);
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        printf(" rss@%dms=%ld", at[i], rss[i]);
    printf("\n");
    return 0;
}
