/* idle_helper.c - memory goes back while a server idles, even when its
 * only other thread never allocates (redis's helper threads, say), and
 * when it has no other thread at all but holds much memory (a
 * PostgreSQL backend between queries).
 *
 *   idle_helper [helper|single|small|fork]
 *
 * helper (the default): the main thread starts a helper that blocks in
 * read(2) and never calls the allocator, so shoal has one heap; it then
 * allocates 96 MiB of 1 KiB blocks, writes them, frees them all, and
 * makes no allocator call again: it polls its RSS (open/read, no stdio)
 * until the purger has given the memory back, and fails if that takes
 * more than 20 s (SHOAL_PURGE_DELAY_MS=100 is set by ctest; with
 * PURGE_THREAD=auto the purger may start because the process has a
 * second thread).  single: the same with no helper: a single-threaded
 * process that holds 32 MiB or more gets a purger too, which leaves once
 * nothing is left to purge (one thread again).  small: no
 * helper, 8 MiB made and freed, then four delays idle: a process that
 * holds less stays single-threaded (it may want unshare(CLONE_NEWUSER),
 * which the kernel allows only there; not checked under ThreadSanitizer,
 * whose own thread is always there).  fork: a process with a helper
 * thread and 48 MiB forks, and the child frees it all: the child starts
 * no purger, for POSIX leaves a thread started in the child of a
 * multi-threaded process undefined (not run under ThreadSanitizer, which
 * would kill the child for it).  Under ThreadSanitizer, whose
 * shadow memory stays resident, it watches shoal's committed bytes (in
 * use, or free and not yet purged) instead of the RSS.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include "drop_in.h"

#define BLOCKS (96 * 1024)
#define BLOCK 1024

static int gate[2];

/* What the test watches: the RSS, or under TSan shoal's committed bytes,
 * which fall as the purger works, like the RSS. */
static size_t resident(void)
{
#ifdef DROP_IN_TSAN
    return stats_now().committed;
#else
    return rss_bytes();
#endif
}

static void *helper(void *arg)
{
    (void)arg;
    char c;
    while (read(gate[0], &c, 1) < 0) {
    }
    return NULL;
}

/* The helper: started, and stopped and joined. */
static void start_helper(pthread_t *t)
{
    if (pipe(gate) != 0 || pthread_create(t, NULL, helper, NULL) != 0)
        die("pipe or pthread_create failed");
}

static void stop_helper(pthread_t t)
{
    if (write(gate[1], "x", 1) != 1 || pthread_join(t, NULL) != 0)
        die("stopping the helper failed");
}

/* The process's threads, from /proc/self/status. */
static long threads(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        die("cannot read /proc/self/status");
    buf[n] = 0;
    const char *t = strstr(buf, "Threads:");
    return t == NULL ? -1 : strtol(t + 8, NULL, 10);
}

/* Made, written and freed: n blocks of BLOCK bytes, their pointers
 * outside shoal, so the count of its calls is ours; *full (if given):
 * resident() with all of them made. */
static void work(int n, size_t *full)
{
    char **b = mmap(NULL, (size_t)n * sizeof *b, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED)
        die("mmap failed");
    for (int i = 0; i < n; i++) {
        if ((b[i] = alloc_malloc(BLOCK)) == NULL)
            die("out of memory");
        memset(b[i], i & 0xff, BLOCK);
    }
    if (full != NULL)
        *full = resident();
    for (int i = 0; i < n; i++) {
        if ((unsigned char)b[i][BLOCK - 1] != (i & 0xff))
            die("block %d damaged", i);
        alloc_free(b[i]);
    }
    munmap(b, (size_t)n * sizeof *b);
}

static void small_mode(void)
{
    work(8 * 1024, NULL);
#ifndef DROP_IN_TSAN
    /* The frees, with memory to purge, are where a purger would start. */
    if (threads() != 1)
        die("a single-threaded program that freed 8 MiB has %ld threads: shoal started one",
            threads());
#endif
    struct timespec idle = { 0, 400 * 1000000L };
    nanosleep(&idle, NULL);
    alloc_free(alloc_malloc(3000));     /* a slow path, where a purger would start */
    nanosleep(&idle, NULL);
#ifndef DROP_IN_TSAN
    if (threads() != 1)
        die("a single-threaded program that held 8 MiB has %ld threads: shoal started one",
            threads());
#endif
    printf("idle_helper small: ok: %ld thread(s) after 8 MiB made, freed and idle\n", threads());
}

#ifndef DROP_IN_TSAN
/* A fork child of a process with other threads frees 48 MiB: it starts
 * no purger (POSIX leaves a thread started there undefined). */
static void fork_mode(void)
{
    pthread_t t;
    start_helper(&t);
    enum { N = 48 };
    char *b[N];
    for (int i = 0; i < N; i++) {
        if ((b[i] = alloc_malloc(1 << 20)) == NULL)
            die("out of memory");
        memset(b[i], i, 1 << 20);
    }
    pid_t pid = fork();
    if (pid < 0)
        die("fork failed");
    if (pid == 0) {
        /* Looked at right after the calls that would start a purger: one
         * stays at least a delay, while what they freed waits. */
        for (int i = 0; i < N; i++)
            alloc_free(b[i]);
        long n = threads();
        struct timespec idle = { 0, 400 * 1000000L };
        nanosleep(&idle, NULL);
        alloc_free(alloc_malloc(3000));
        if (n == 1)
            n = threads();
        if (n != 1)
            fprintf(stderr, "FAIL: the fork child of a threaded process has %ld threads\n", n);
        _exit(n == 1 ? 0 : 1);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("fork: the child started a thread, or failed");
    for (int i = 0; i < N; i++)
        alloc_free(b[i]);
    stop_helper(t);
    printf("idle_helper fork: ok: the child of a threaded process stayed single-threaded\n");
}
#endif

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "helper";
    if (strcmp(mode, "small") == 0) {
        small_mode();
        return 0;
    }
    if (strcmp(mode, "fork") == 0) {
#ifndef DROP_IN_TSAN
        fork_mode();
#endif
        return 0;
    }
    bool helped = strcmp(mode, "helper") == 0;
    if (!helped && strcmp(mode, "single") != 0)
        die("usage: idle_helper [helper|single|small|fork]");
    pthread_t t;
    if (helped)
        start_helper(&t);
    size_t before = resident(), full;
    work(BLOCKS, &full);
    /* From here on, no allocator call. */
    size_t now = full;
    struct timespec tick = { 0, 50 * 1000000L };
    for (int i = 0; i < 400 && now > before + (full - before) / 4; i++) {
        nanosleep(&tick, NULL);
        now = resident();
    }
    if (now > before + (full - before) / 4)
        die("%s: memory %zu MiB after freeing everything and idling 20 s (%zu MiB before the "
            "blocks, %zu MiB with them): the memory did not go back", mode, now >> 20,
            before >> 20, full >> 20);
#ifndef DROP_IN_TSAN
    /* Alone, the purger leaves once nothing is left to purge. */
    for (int i = 0; i < 400 && !helped && threads() != 1; i++)
        nanosleep(&tick, NULL);
    if (!helped && threads() != 1)
        die("single: %ld threads 20 s after the memory went back: the purger stayed",
            threads());
#endif
    printf("idle_helper %s: ok: memory %zu MiB -> %zu MiB -> %zu MiB while idle, %ld threads\n",
           mode, before >> 20, full >> 20, now >> 20, threads());
    if (helped)
        stop_helper(t);
    return 0;
}
