/* idle_helper.c - memory goes back while a server idles, even when its
 * only other thread never allocates (redis's helper threads, say).
 *
 * The main thread starts a helper that blocks in read(2) and never calls
 * the allocator, so shoal has one heap; it then allocates 96 MiB of
 * 1 KiB blocks, writes them, frees them all, and makes no allocator call
 * again: it polls its RSS (open/read, no stdio) until the purger has
 * given the memory back, and fails if that takes more than 20 s
 * (SHOAL_PURGE_DELAY_MS=100 is set by ctest; with PURGE_THREAD=auto the
 * purger may start because the process has a second thread).  Under
 * ThreadSanitizer, whose shadow memory stays resident, it watches shoal's
 * committed bytes (in use, or free and not yet purged) instead.
 */
#include <pthread.h>
#include <sys/mman.h>
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

int main(void)
{
    pthread_t t;
    if (pipe(gate) != 0 || pthread_create(&t, NULL, helper, NULL) != 0)
        die("pipe or pthread_create failed");
    /* The pointers live outside shoal, so the count of its calls is ours. */
    char **b = mmap(NULL, BLOCKS * sizeof *b, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED)
        die("mmap failed");
    size_t before = resident();
    for (int i = 0; i < BLOCKS; i++) {
        if ((b[i] = alloc_malloc(BLOCK)) == NULL)
            die("out of memory");
        memset(b[i], i & 0xff, BLOCK);
    }
    size_t full = resident();
    for (int i = 0; i < BLOCKS; i++) {
        if ((unsigned char)b[i][BLOCK - 1] != (i & 0xff))
            die("block %d damaged", i);
        alloc_free(b[i]);
    }
    /* From here on, no allocator call. */
    size_t now = full;
    struct timespec tick = { 0, 50 * 1000000L };
    for (int i = 0; i < 400 && now > before + (full - before) / 4; i++) {
        nanosleep(&tick, NULL);
        now = resident();
    }
    if (now > before + (full - before) / 4)
        die("memory %zu MiB after freeing everything and idling 20 s (%zu MiB before the "
            "blocks, %zu MiB with them): the memory did not go back", now >> 20, before >> 20,
            full >> 20);
    printf("idle_helper: ok: memory %zu MiB -> %zu MiB -> %zu MiB while idle\n", before >> 20,
           full >> 20, now >> 20);
    if (write(gate[1], "x", 1) != 1 || pthread_join(t, NULL) != 0)
        die("stopping the helper failed");
    return 0;
}
