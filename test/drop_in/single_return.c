/* single_return.c - a single-threaded program gets its memory back at
 * its first slow path after an idle time.
 *
 * With PURGE_THREAD=auto a single-threaded program has no purger thread:
 * its purge passes run on its own slow paths.  It works, frees, idles
 * (no allocator call at all: a worker waiting for its next request), and
 * works again; the first slow path of the new work must give back what
 * the last work freed, all of it, before the new work reuses it:
 *
 *   pool    48 blocks of 1 MiB, written, freed: pool slots;
 *   huge    one block of 64 MiB, written, freed: given back at its free;
 *           then three, one after the other: kept for reuse, in the
 *           thread's huge slot;
 *   huge_purger  the same single block, with a purger thread running
 *           (PURGE_THREAD=1): given back at its free all the same;
 *   calloc  48 blocks of 1 MiB + 64 from calloc, never written, freed,
 *           and made again by calloc after the idle time: reused without
 *           a purge, they would be cleared, so made resident, by calloc;
 *   fresh   after the idle time, a huge block freed (to the shared
 *           cache) stays cached for reuse: what goes at once is what
 *           waited through the idle time, not what the free freed.
 *
 * The idle time is four delays (ctest sets SHOAL_PURGE_DELAY_MS=100);
 * the slow path is a malloc of a size class not used before.  Checked on
 * shoal's committed bytes (memory that may be resident), and on the RSS
 * outside the sanitizers.
 */
#include <time.h>
#include "drop_in.h"

#define BLOCKS 48
#define MIB ((size_t)1 << 20)

static void *block[BLOCKS];

static void idle(void)
{
    struct timespec t = { 0, 400 * 1000000L };
    nanosleep(&t, NULL);
}

/* The first call of the new work: a slow path (a size class this
 * program has not used). */
static void *slow_call(void)
{
    void *p = alloc_malloc(3000);
    if (p == NULL)
        die("out of memory");
    return p;
}

/* Made, written and freed: n blocks of `size`. */
static void work(size_t size, int n)
{
    for (int i = 0; i < n; i++) {
        if ((block[i] = alloc_malloc(size)) == NULL)
            die("out of memory");
        memset(block[i], i + 1, size);
    }
    for (int i = 0; i < n; i++) {
        unsigned char *b = block[i];
        if (b[0] != (unsigned char)(i + 1) || b[size - 1] != (unsigned char)(i + 1))
            die("block %d damaged", i);
        alloc_free(b);
    }
}

/* Committed memory (and the RSS) fell by half of `freed` at least since
 * `committed` and `rss` were read, `when` says after what. */
static void expect_back(const char *mode, const char *when, size_t committed, size_t rss,
                        size_t freed)
{
    size_t c = stats_now().committed, r = rss_bytes();
    if (c + freed / 2 > committed)
        die("%s: committed %zu MiB %s (%zu MiB before): the %zu MiB freed did not go back",
            mode, c / MIB, when, committed / MIB, freed / MIB);
    if (CHECK_RSS && r + freed / 2 > rss)
        die("%s: RSS %zu MiB %s (%zu MiB before): the %zu MiB freed did not go back", mode,
            r / MIB, when, rss / MIB, freed / MIB);
    printf("single_return %s: ok: committed %zu -> %zu MiB, RSS %zu -> %zu MiB\n", mode,
           committed / MIB, c / MIB, rss / MIB, r / MIB);
}

static void pool_mode(void)
{
    work(MIB, BLOCKS);
    size_t c = stats_now().committed, r = rss_bytes();
    idle();
    alloc_free(slow_call());
    expect_back("pool", "after the idle time and a slow path", c, r, BLOCKS * MIB);
}

/* A 64 MiB block freed once goes back at its free: no pass would come
 * for it while the program sleeps.  Made and freed again and again, the
 * size is seen reused: the mapping is kept for the next malloc, and goes
 * at the first slow path after an idle time. */
static void huge_mode(bool purger)
{
    size_t size = 64 * MIB;
    if (purger) {
        /* The purger runs the passes: the block goes back at its free all
         * the same. */
        if (alloc_option_set(ALLOC_OPTION_PURGE_THREAD, 1) != 0)
            die("PURGE_THREAD=1 refused");
        work(MIB, 8);                   /* memory to purge: the purger starts */
        idle();
    }
    unsigned char *b = alloc_malloc(size);
    if (b == NULL)
        die("out of memory");
    memset(b, 1, size);
    size_t c = stats_now().committed, r = rss_bytes();
    alloc_free(b);
    expect_back(purger ? "huge once, beside a purger" : "huge once", "after its free", c, r,
                size);
    if (purger)
        return;
    work(size, 1);
    work(size, 1);
    alloc_stats_t st = stats_now();
    if (st.huge_cached_bytes < size)
        die("huge: a cycle of 64 MiB blocks keeps no mapping for reuse (%zu MiB cached)",
            st.huge_cached_bytes / MIB);
    c = st.committed;
    r = rss_bytes();
    idle();
    alloc_free(slow_call());
    expect_back("huge cycle", "after the idle time and a slow path", c, r, size);
}

static void calloc_mode(void)
{
    size_t size = MIB + 64;
    for (int i = 0; i < BLOCKS; i++)
        if ((block[i] = alloc_calloc(1, size)) == NULL)
            die("out of memory");
    for (int i = 0; i < BLOCKS; i++)
        alloc_free(block[i]);
    size_t c = stats_now().committed, r = rss_bytes();
    idle();
    void *first = slow_call();
    for (int i = 0; i < BLOCKS; i++) {
        unsigned char *b = alloc_calloc(1, size);
        if (b == NULL)
            die("out of memory");
        if (b[0] != 0 || b[size / 2] != 0 || b[size - 1] != 0)
            die("calloc block %d not zero", i);
        block[i] = b;
    }
    /* The blocks are live, never written: only what calloc itself wrote
     * is resident. */
    size_t rb = rss_bytes();
    if (CHECK_RSS && rb > r + BLOCKS * MIB / 4)
        die("calloc: RSS %zu MiB with %d fresh calloc blocks of 1 MiB never written (%zu MiB "
            "before): calloc cleared reused memory that a purge would have given back zero",
            rb / MIB, BLOCKS, r / MIB);
    for (int i = 0; i < BLOCKS; i++)
        alloc_free(block[i]);
    alloc_free(first);
    printf("single_return calloc: ok: committed %zu MiB, RSS %zu -> %zu MiB with the blocks "
           "made again\n", c / MIB, r / MIB, rb / MIB);
}

/* A free after the idle time keeps what it frees for reuse: only what
 * waited through the idle time goes at once.  (A block laid out for a
 * large alignment skips the thread's slot: the shared cache, whose free
 * ticks the clock.) */
static void fresh_mode(void)
{
    work(MIB, BLOCKS);
    alloc_collect(true);                /* nothing waits */
    idle();
    void *p = alloc_aligned(8 * MIB, 5 * MIB);
    if (p == NULL)
        die("out of memory");
    memset(p, 1, 5 * MIB);
    alloc_free(p);
    alloc_stats_t st = stats_now();
    if (st.huge_cached_bytes < 5 * MIB)
        die("fresh: a huge block freed after the idle time went back at once (%zu MiB cached): "
            "the free's own tick purged what it had just freed", st.huge_cached_bytes / MIB);
    printf("single_return fresh: ok: %zu MiB cached after the free\n",
           st.huge_cached_bytes / MIB);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "pool") == 0)
        pool_mode();
    else if (strcmp(mode, "huge") == 0)
        huge_mode(false);
    else if (strcmp(mode, "huge_purger") == 0)
        huge_mode(true);
    else if (strcmp(mode, "calloc") == 0)
        calloc_mode();
    else if (strcmp(mode, "fresh") == 0)
        fresh_mode();
    else
        die("usage: single_return pool|huge|huge_purger|calloc|fresh");
    return 0;
}
