/* Memory return and limits: RSS comes back after the purge delay (and
 * not with PURGE_DELAY_MS=-1), prefault saves the faults of first touch,
 * MAX_MEMORY and RLIMIT_AS end in ENOMEM and recover, and the number of
 * kernel mappings stays small under load.  Fault counts and RSS are
 * counts, not timings, so they can be asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "shoal.h"
#include "test_util.h"

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* ---- RSS return ------------------------------------------------------- */

#define SUPERPAGE ((uintptr_t)4 << 20)  /* a pool superpage (src/core/layout.h) */
#define HALF_MB 256             /* each of two threads touches this many MiB */

typedef struct load_s {
    void **blocks;
    size_t count;
    bool small_only;            /* only blocks that live on pages */
} load_t;

/* Mixed sizes, every byte touched, until HALF_MB MiB are live.  Sizes
 * stay in the pool (up to 1.5 MiB): huge mappings beyond the last few
 * freed are unmapped at once whatever the purge delay, which would make
 * the PURGE_DELAY_MS=-1 case meaningless. */
static void *fill(void *arg)
{
    load_t *l = arg;
    size_t total = 0, i = 0;
    static const size_t sizes[] = { 24, 100, 700, 3000, 12000, 50000, 300000, 1536u << 10 };
    while (total < (size_t)HALF_MB << 20) {
        size_t n = sizes[i % (l->small_only ? 5 : 8)];
        char *p = alloc_malloc(n);
        assert_non_null(p);
        memset(p, (int)(i & 0xff), n);
        l->blocks[i++] = p;
        total += n;
    }
    l->count = i;
    return NULL;
}

static void free_all(load_t *l)
{
    for (size_t i = 0; i < l->count; i++) {
        unsigned char *p = l->blocks[i];
        assert_int_equal(p[0], (unsigned char)(i & 0xff));
        alloc_free(p);
    }
}

/* Two threads fill 512 MiB, the main thread frees it all, then idles:
 * with a delay, until the RSS is back within a tenth of the load of
 * where it started (polled, with no allocator call, for up to a minute:
 * the test fails only if it never comes back, however loaded the
 * machine); with PURGE_DELAY_MS=-1 for 300 ms, during which it must not
 * come back.  Returns the RSS growth left (bytes) over the start, less
 * what a sanitizer's shadow of the load holds. */
static long fill_free_idle(long delay_ms, bool small_only)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay_ms), 0);
    static void *a[1 << 22], *b[1 << 22];
    load_t la = { a, 0, small_only }, lb = { b, 0, small_only };
    size_t start = rss_bytes();
    pthread_t t1, t2;
    pthread_create(&t1, NULL, fill, &la);
    pthread_create(&t2, NULL, fill, &lb);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    size_t full = rss_bytes();
    assert_true(full > start + ((size_t)HALF_MB << 20));       /* it was really touched */
    free_all(&la);
    free_all(&lb);
    /* Under AddressSanitizer a shadow byte stands for 8 bytes of memory;
     * where the kernel backs a read of untouched memory with a page of
     * its own (not the shared zero page: some do), the load's shadow,
     * an eighth of it, stays resident after shoal gives the memory back,
     * and is not shoal's to give. */
    size_t shadow = 0;
#ifdef UNDER_ASAN
    shadow = (full - start) / 8;
#endif
    size_t back = start + shadow + ((size_t)(2 * HALF_MB) << 20) / 10, end;
    int polls = delay_ms > 0 ? 60 * 20 : 6;
    do {
        usleep(50 * 1000);
        end = rss_bytes();
    } while (--polls > 0 && (delay_ms < 0 || end >= back));
    print_message("delay %ld ms: RSS start %zu MiB, full %zu MiB, idle %zu MiB\n", delay_ms,
                  start >> 20, full >> 20, end >> 20);
    return (long)end - (long)start - (long)shadow;
}

static void test_rss_returns_after_delay(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    skip();             /* TSan's shadow memory would dominate RSS */
#endif
    long left = fill_free_idle(50, false);
    /* Within 10% of the 512 MiB load (and of where it started). */
    assert_true(left < (long)((2 * HALF_MB) << 20) / 10);
}

/* Only small blocks: every byte sits on pages of the two threads, which
 * have exited when the main thread frees it all, so nothing comes back
 * unless the purger takes those pages back itself. */
static void test_rss_returns_from_exited_threads(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    skip();
#endif
    long left = fill_free_idle(50, true);
    assert_true(left < (long)((2 * HALF_MB) << 20) / 10);
}

static void test_rss_stays_with_purge_off(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    skip();
#endif
    long left = fill_free_idle(-1, false);
    assert_true(left > (long)(HALF_MB << 20));
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000);     /* the default again */
    alloc_collect(true);
}

/* A huge mapping a thread keeps for reuse (its huge slot) goes back to
 * the OS while the thread idles and never calls the allocator again:
 * purge passes of the purger thread take it from the slot (one pass
 * marks it, the next unmaps it).  Address space is counted exactly
 * (`mapped`); RSS too where ThreadSanitizer's shadow does not blur it. */
/* At most 32 MiB: a bigger mapping freed before the purger has started
 * goes back at once (src/core/huge.c), and this test is about the slot. */
#define IDLE_HUGE ((size_t)24 << 20)
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_stage;          /* 1: freed, 2: may exit */

static void *free_huge_then_idle(void *arg)
{
    (void)arg;
    unsigned char *p = alloc_malloc(IDLE_HUGE);
    assert_non_null(p);
    memset(p, 0x5a, IDLE_HUGE);
    assert_int_equal(p[IDLE_HUGE - 1], 0x5a);
    alloc_free(p);
    pthread_mutex_lock(&idle_lock);
    idle_stage = 1;
    pthread_cond_broadcast(&idle_cond);
    while (idle_stage != 2)
        pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    return NULL;
}

/* shoal's statistics now. */
static alloc_stats_t stats_now(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st;
}

/* A table that grows by steps, as a hash table's resize does (the bigger
 * table made, the entries moved, the smaller one freed): each smaller
 * mapping leaves the process when it is freed, not at the purge delay -
 * kept, every step's table stayed resident beside the next.  Then a
 * program that maps that size again keeps it from then on.  First in the
 * list: what an earlier test mapped again after a give-back would have
 * taught shoal (process-wide) to keep these sizes. */
static void test_outgrown_mapping_goes_back(void **state)
{
    (void)state;
    const size_t first = (size_t)3 << 20;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
    unsigned char *t = alloc_malloc(first);
    assert_non_null(t);
    for (size_t i = 0; i < first; i++)
        t[i] = (unsigned char)(i * 7 + 1);
    size_t n = first;
    for (int step = 0; step < 3; step++, n *= 2) {
        unsigned char *u = alloc_malloc(2 * n);
        assert_non_null(u);
        memcpy(u, t, n);
        memset(u + n, 0xa5, n);
        alloc_stats_t before = stats_now();
        alloc_free(t);
        alloc_stats_t after = stats_now();
        assert_true(after.mapped + n <= before.mapped);        /* unmapped, */
        assert_int_equal(after.huge_cached, before.huge_cached); /* not kept */
        t = u;
    }
    for (size_t i = 0; i < first; i++)
        assert_int_equal(t[i], (unsigned char)(i * 7 + 1));
    for (size_t i = first; i < n; i++)
        assert_int_equal(t[i], 0xa5);
    /* The last size given back (n / 2) is mapped again: learnt.  Freed
     * after a bigger block, it is kept now. */
    unsigned char *again = alloc_malloc(n / 2), *bigger = alloc_malloc(n);
    assert_non_null(again);
    assert_non_null(bigger);
    memset(again, 0x3c, n / 2);
    alloc_stats_t before = stats_now();
    alloc_free(again);
    alloc_stats_t after = stats_now();
    assert_int_equal(after.mapped, before.mapped);
    assert_int_equal(after.huge_cached, before.huge_cached + 1);
    alloc_free(bigger);
    alloc_free(t);
    alloc_collect(true);
}

/* A program that freed big blocks (a sort's buffers) and then grows the
 * pool (a hash table of small entries) would hold both until the purge
 * delay: the pool's fresh slots make the huge cache give back as much,
 * oldest first.  With an hour's delay nothing else gives it back. */
#define YIELD_HUGE ((size_t)8 << 20)
#define YIELD_BLOCKS 6144       /* of 4000 B: 24 MiB of fresh pool slots */

/* With an hour's delay and the pool's free slots clean (a claim grows),
 * one YIELD_HUGE mapping in the shared cache and one in this thread's
 * huge slot; returns the cache's bytes. */
static size_t cache_one_mapping(void)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 3600 * 1000), 0);
    alloc_collect(true);
    char *a = alloc_malloc(YIELD_HUGE), *b = alloc_malloc(YIELD_HUGE);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 1, YIELD_HUGE);
    memset(b, 2, YIELD_HUGE);
    alloc_free(a);              /* into this thread's huge slot */
    alloc_free(b);              /* and a on to the shared cache */
    size_t cached = stats_now().huge_cached_bytes;
    assert_true(cached >= 2 * YIELD_HUGE);
    return cached;
}

static void default_delay_again(void)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
    alloc_collect(true);
}

/* The pool grows by n blocks of 4000 B, each filled with its index. */
static void grow_pool(char **blocks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        blocks[i] = alloc_malloc(4000);
        assert_non_null(blocks[i]);
        memset(blocks[i], (int)(i & 0xff), 4000);
    }
}

/* grow_pool's blocks checked and freed. */
static void free_pool_blocks(char **blocks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < 4000; j += 997)
            assert_int_equal((unsigned char)blocks[i][j], i & 0xff);
        alloc_free(blocks[i]);
    }
}

static void test_pool_growth_takes_from_huge_cache(void **state)
{
    (void)state;
    size_t cached0 = cache_one_mapping();
    static char *blocks[YIELD_BLOCKS];
    grow_pool(blocks, YIELD_BLOCKS);
    size_t cached1 = stats_now().huge_cached_bytes;
    print_message("huge cache while the pool grew 24 MiB: %zu -> %zu MiB\n", cached0 >> 20,
                  cached1 >> 20);
    assert_true(cached1 + YIELD_HUGE <= cached0);
    free_pool_blocks(blocks, YIELD_BLOCKS);
    default_delay_again();
}

/* The same for a huge block that realloc grows: 4 -> 16 MiB is 12 MiB
 * more resident, and the cached 8 MiB mapping goes back for it. */
static void test_realloc_growth_takes_from_huge_cache(void **state)
{
    (void)state;
    char *g = alloc_malloc(YIELD_HUGE / 2);     /* first: the cached one would serve it */
    assert_non_null(g);
    memset(g, 3, YIELD_HUGE / 2);
    size_t cached0 = cache_one_mapping();
    g = alloc_realloc(g, 2 * YIELD_HUGE);
    assert_non_null(g);
    memset(g + YIELD_HUGE / 2, 4, 2 * YIELD_HUGE - YIELD_HUGE / 2);
    size_t cached1 = stats_now().huge_cached_bytes;
    print_message("huge cache while realloc grew a block 4 -> 16 MiB: %zu -> %zu MiB\n",
                  cached0 >> 20, cached1 >> 20);
    assert_true(cached1 + YIELD_HUGE <= cached0);
    for (size_t j = 0; j < 2 * YIELD_HUGE; j += 4093)
        assert_int_equal(g[j], j < YIELD_HUGE / 2 ? 3 : 4);
    alloc_free(g);
    default_delay_again();
}

/* The same for the mapping in this thread's huge slot, which before
 * waited for the purge passes however much the pool grew beside it. */
static void test_pool_growth_takes_from_huge_slot(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 3600 * 1000), 0);
    alloc_collect(true);
    char *a = alloc_malloc(YIELD_HUGE + YIELD_HUGE / 2);
    assert_non_null(a);
    memset(a, 1, YIELD_HUGE + YIELD_HUGE / 2);
    alloc_free(a);              /* into this thread's huge slot */
    alloc_stats_t st0 = stats_now();
    assert_true(st0.huge_cached_bytes >= YIELD_HUGE + YIELD_HUGE / 2);
    static char *blocks[YIELD_BLOCKS];
    grow_pool(blocks, YIELD_BLOCKS);
    alloc_stats_t st1 = stats_now();
    print_message("huge slot while the pool grew 24 MiB: %zu -> %zu MiB\n",
                  st0.huge_cached_bytes >> 20, st1.huge_cached_bytes >> 20);
    assert_int_equal(st1.huge_cached_bytes, 0);
    free_pool_blocks(blocks, YIELD_BLOCKS);
    default_delay_again();
}

/* Growth takes back the oldest cached mapping it has grown as much as:
 * a 16 MiB mapping freed before an 8 MiB one does not keep the 8 MiB
 * one resident until 16 MiB have grown (before, only the oldest of all
 * could go), and stays itself for a block of its size. */
static void test_growth_passes_a_big_cached_mapping(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 3600 * 1000), 0);
    alloc_collect(true);
    char *big = alloc_malloc(2 * YIELD_HUGE), *mid = alloc_malloc(YIELD_HUGE),
         *small = alloc_malloc(YIELD_HUGE / 2);
    assert_non_null(big);
    assert_non_null(mid);
    assert_non_null(small);
    memset(big, 1, 2 * YIELD_HUGE);
    memset(mid, 2, YIELD_HUGE);
    memset(small, 3, YIELD_HUGE / 2);
    alloc_free(big);            /* into this thread's huge slot */
    alloc_free(mid);            /* big on to the shared cache */
    alloc_free(small);          /* mid after it */
    size_t cached0 = stats_now().huge_cached_bytes;
    static char *blocks[YIELD_BLOCKS / 2];
    grow_pool(blocks, YIELD_BLOCKS / 2);
    size_t cached1 = stats_now().huge_cached_bytes;
    print_message("huge cache while the pool grew 12 MiB: %zu -> %zu KiB\n", cached0 >> 10,
                  cached1 >> 10);
    assert_true(cached1 + YIELD_HUGE <= cached0);       /* mid went */
    assert_true(cached1 + 2 * YIELD_HUGE > cached0);    /* big did not */
    size_t mapped = stats_now().mapped;
    char *again = alloc_malloc(2 * YIELD_HUGE - (1u << 20));    /* big serves it */
    assert_non_null(again);
    memset(again, 4, 2 * YIELD_HUGE - (1u << 20));
    assert_true(stats_now().mapped <= mapped);
    for (size_t j = 0; j < 2 * YIELD_HUGE - (1u << 20); j += 4093)
        assert_int_equal(again[j], 4);
    alloc_free(again);
    free_pool_blocks(blocks, YIELD_BLOCKS / 2);
    default_delay_again();
}

/* A freed big block's mapping serves smaller blocks made after it: its
 * front is cut for the first (the rest stays cached), the rest serves
 * the second, and only the third maps anew - as `sort` frees its 30 MiB
 * array and then makes three 10 MiB buffers (before: three new mappings
 * beside the cached one, twice glibc's peak RSS).  Freed, the pieces
 * join again and serve a block of the first size, with no new mapping.
 * Every block is checked for its pattern. */
enum { BIG = 30 << 20, SMALL = 10 << 20 };

/* A BIG block's mapping, written and freed into the shared cache, which
 * keeps it for an hour. */
static void cache_big_mapping(void)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 3600 * 1000), 0);
    alloc_collect(true);
    char *big = alloc_malloc(BIG);
    assert_non_null(big);
    memset(big, 1, BIG);
    alloc_free(big);
}

static void test_freed_huge_mapping_serves_smaller_blocks(void **state)
{
    (void)state;
    cache_big_mapping();
    size_t mapped0 = stats_now().mapped;
    char *small[3];
    for (int i = 0; i < 3; i++) {
        small[i] = alloc_malloc(SMALL);
        assert_non_null(small[i]);
        memset(small[i], 2 + i, SMALL);
    }
    size_t mapped1 = stats_now().mapped;
    uintptr_t front = (uintptr_t)small[0];              /* the front of big's mapping */
    print_message("three 10 MiB blocks after a 30 MiB one: %zu MiB mapped more\n",
                  (mapped1 - mapped0) >> 20);
    assert_true(mapped1 <= mapped0 + SMALL + (1u << 20));      /* one new mapping, not three */
    for (int i = 0; i < 3; i++) {
        for (size_t j = 0; j < SMALL; j += 4093)
            assert_int_equal(small[i][j], 2 + i);
        alloc_free(small[i]);
    }
    size_t mapped2 = stats_now().mapped;
    char *big = alloc_malloc(BIG);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big, front);            /* the pieces, joined */
    assert_true(stats_now().mapped <= mapped2);
    memset(big, 5, BIG);
    for (size_t j = 0; j < BIG; j += 4093)
        assert_int_equal(big[j], 5);
    alloc_free(big);
    default_delay_again();
}

/* A realloc that cannot grow a block cut from a cached mapping leaves it
 * as it was: the rest of the mapping, which the growth took back to grow
 * in place, goes back to the cache (from which the failed malloc after
 * it gives it back to the OS), and the block keeps its usable size and
 * the size free_sized takes.  (It kept the whole mapping, and
 * free_sized(p, its size) reported "size does not match the block".) */
static void test_failed_growth_keeps_a_cut_block(void **state)
{
    (void)state;
    cache_big_mapping();
    char *small = alloc_malloc(SMALL);          /* the front of big's mapping */
    assert_non_null(small);
    memset(small, 2, SMALL);
    size_t usable = alloc_usable_size(small);
    size_t cached = stats_now().huge_cached_bytes;
    assert_true(cached >= BIG - SMALL - (4u << 20));    /* the rest, cached */
    errno = 0;
    assert_null(alloc_realloc(small, (size_t)1 << 62));
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(alloc_usable_size(small), usable);
    for (size_t j = 0; j < SMALL; j += 4093)
        assert_int_equal(small[j], 2);
    alloc_free_sized(small, SMALL);
    assert_int_equal(stats_now().huge_live, 0);
    default_delay_again();
}

static void test_idle_thread_huge_slot_purged(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 50), 0);
    /* With PURGE_THREAD=auto the purger starts once a second thread has
     * allocated: this one allocates first. */
    alloc_free(alloc_malloc(64));
    alloc_collect(true);
    size_t mapped0 = stats_now().mapped;
    pthread_t t;
    idle_stage = 0;
    pthread_create(&t, NULL, free_huge_then_idle, NULL);
    pthread_mutex_lock(&idle_lock);
    while (idle_stage != 1)
        pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    size_t rss_freed = rss_bytes();
    assert_true(stats_now().mapped >= mapped0 + IDLE_HUGE);     /* kept, in its slot */
    size_t mapped;
    int polls = 60 * 20;        /* up to a minute: fails only if it never goes */
    do {
        usleep(50 * 1000);
        mapped = stats_now().mapped;
    } while (--polls > 0 && mapped >= mapped0 + IDLE_HUGE);
    print_message("idle thread's huge slot: mapped %zu -> %zu MiB, RSS %zu -> %zu MiB\n",
                  mapped0 >> 20, mapped >> 20, rss_freed >> 20, rss_bytes() >> 20);
    assert_true(mapped < mapped0 + IDLE_HUGE);
#ifndef UNDER_TSAN
    assert_true(rss_bytes() + IDLE_HUGE / 2 < rss_freed);
#endif
    pthread_mutex_lock(&idle_lock);
    idle_stage = 2;
    pthread_cond_broadcast(&idle_cond);
    pthread_mutex_unlock(&idle_lock);
    pthread_join(t, NULL);
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000);
}

/* Blocks that another thread frees come back to their page only when the
 * page's owner collects them.  A page of a class its owner no longer
 * allocates must still go back once other threads have freed all its
 * blocks: the owner's idle sweep, on its slow paths at most once a
 * PURGE_DELAY_MS, looks at every page it keeps. */
enum { REMOTE_N = 1 << 20 };            /* 64 MiB of 64-byte blocks */
static void *remote_blocks[REMOTE_N];

static void *free_all_remote(void *arg)
{
    (void)arg;
    for (int i = 0; i < REMOTE_N; i++) {
        assert_int_equal(*(unsigned *)remote_blocks[i], (unsigned)i);
        alloc_free(remote_blocks[i]);
    }
    return NULL;
}

static void test_remotely_emptied_pages_go_back(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 20), 0);
    alloc_collect(true);
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    size_t base = st.active;
    for (int i = 0; i < REMOTE_N; i++) {
        assert_non_null(remote_blocks[i] = alloc_malloc(64));
        *(unsigned *)remote_blocks[i] = (unsigned)i;
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_all_remote, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    /* Other work in another class, with slow paths, over many delays. */
    enum { K = 2000 };
    static void *other[K];
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < K; i++) {
            assert_non_null(other[i] = alloc_malloc(3000));
            memset(other[i], round, 64);
        }
        for (int i = 0; i < K; i++) {
            assert_int_equal(((unsigned char *)other[i])[63], round);
            alloc_free(other[i]);
        }
        usleep(5000);
    }
    assert_int_equal(alloc_stats_get(&st), 0);
    size_t kept = st.active > base ? st.active - base : 0;
    print_message("64-byte pages emptied by another thread: %zu KiB of %d MiB still held\n",
                  kept >> 10, REMOTE_N * 64 >> 20);
    assert_true(kept < ((size_t)REMOTE_N * 64) / 8);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
}

/* A heap keeps two of the pages it empties, for its next need; the rest
 * go back to the pool at once, where any heap (and any large block)
 * takes them while they are still resident, rather than wait in this
 * heap's cache while others make new memory resident.  Six pages of
 * 1 KiB blocks freed: the queue's head stays, two of the other five are
 * kept, three leave. */
static void test_emptied_pages_kept_two(void **state)
{
    (void)state;
    enum { PER_PAGE = 64, PAGES = 6, N = PER_PAGE * PAGES };
    static unsigned char *b[N];
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    alloc_collect(true);
    for (int i = 0; i < N; i++) {
        assert_non_null(b[i] = alloc_malloc(1024));
        memset(b[i], i & 0xff, 1024);
    }
    alloc_stats_t full = { .size = sizeof full }, emptied = { .size = sizeof emptied };
    assert_int_equal(alloc_stats_get(&full), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(b[i][0], i & 0xff);
        assert_int_equal(b[i][1023], i & 0xff);
        alloc_free(b[i]);
    }
    assert_int_equal(alloc_stats_get(&emptied), 0);
    print_message("slots claimed with %d pages full %zu, emptied %zu\n", PAGES,
                  full.pool_slots_used, emptied.pool_slots_used);
    assert_true(full.pool_slots_used >= emptied.pool_slots_used + PAGES - 3);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
}

/* A new PURGE_DELAY_MS reaches a purger that sleeps on the old one: set
 * to an hour while 64 MiB wait to be purged, then to 100 ms, the memory
 * goes back within a few passes - the test only polls, with no allocator
 * call that could purge on its own slow path, and fails only if the
 * memory never goes (a purger that waited out the hour). */
static void test_purge_delay_change_wakes_purger(void **state)
{
    (void)state;
    enum { N = 64 };
    static void *blocks[N];
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_THREAD, 1), 0);
    /* A short delay first, so that whatever the purger sleeps on now ends
     * soon and it reads the hour below before the test goes on. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 50), 0);
    usleep(1200 * 1000);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 3600L * 1000), 0);
    alloc_collect(true);
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    size_t base = st.committed;
    for (int i = 0; i < N; i++) {
        assert_non_null(blocks[i] = alloc_malloc(1 << 20));
        memset(blocks[i], i, 1 << 20);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(((unsigned char *)blocks[i])[4095], i);
        alloc_free(blocks[i]);
    }
    usleep(300 * 1000);                 /* the purger is asleep on the hour */
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_true(st.committed >= base + ((size_t)N << 20) / 2);  /* not purged yet */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 100), 0);
    size_t left = st.committed - base;
    for (int tries = 0; tries < 200 && left > ((size_t)N << 20) / 8; tries++) {
        usleep(50 * 1000);
        assert_int_equal(alloc_stats_get(&st), 0);
        left = st.committed > base ? st.committed - base : 0;
    }
    print_message("after the delay went from an hour to 100 ms: %zu MiB of %d left\n",
                  left >> 20, N);
    assert_true(left <= ((size_t)N << 20) / 8);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_THREAD, -1), 0);
}

/* ---- prefault --------------------------------------------------------- */

static long touch_faults(bool prefault, void **blocks, int n)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PREFAULT, prefault), 0);
    for (int i = 0; i < n; i++)
        assert_non_null(blocks[i] = alloc_malloc(1 << 20));
    long before = minor_faults();
    for (int i = 0; i < n; i++)
        memset(blocks[i], 0x5a, 1 << 20);
    long faults = minor_faults() - before;
    for (int i = 0; i < n; i++) {
        assert_int_equal(((unsigned char *)blocks[i])[(1 << 20) - 1], 0x5a);
        alloc_free(blocks[i]);
    }
    alloc_collect(true);        /* purged: the next round starts from cold memory */
    return faults;
}

static void test_prefault_saves_faults(void **state)
{
    (void)state;
    enum { N = 256 };           /* 256 MiB in 1 MiB blocks */
    static void *blocks[N];
    alloc_collect(true);
    long off = touch_faults(false, blocks, N);
    long on = touch_faults(true, blocks, N);
    alloc_option_set(ALLOC_OPTION_PREFAULT, 0);
    print_message("faults while touching 256 MiB: prefault off %ld, on %ld\n", off, on);
    assert_true(off >= 256 * 256 / 2);          /* about one per 4 KiB page */
    assert_true(on * 8 < off);
}

/* ---- MAX_MEMORY ------------------------------------------------------- */

static int fill_to_limit(void **blocks, int max)
{
    int n = 0;
    errno = 0;
    while (n < max && (blocks[n] = alloc_malloc(1 << 20)) != NULL) {
        memset(blocks[n], n & 0xff, 1 << 20);
        n++;
    }
    assert_true(n < max);
    assert_int_equal(errno, ENOMEM);
    return n;
}

/* Set MAX_MEMORY to what is committed after a collection, plus `room`. */
static void limit_to(long room)
{
    alloc_collect(true);
    long limit = (long)stats_now().committed + room;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, limit), 0);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_MAX_MEMORY), limit);
}

enum { MAX = 4096 };
static void *blocks[MAX];

static void test_max_memory(void **state)
{
    (void)state;
    limit_to(64L << 20);
    errno = 0;
    assert_null(alloc_malloc(128u << 20));       /* a huge block beyond the limit */
    assert_int_equal(errno, ENOMEM);
    int first = fill_to_limit(blocks, MAX);
    assert_true(first >= 32);
    for (int i = 0; i < first; i++) {
        assert_int_equal(((unsigned char *)blocks[i])[12345], i & 0xff);
        alloc_free(blocks[i]);
    }
    int second = fill_to_limit(blocks, MAX);    /* freed memory is usable again */
    assert_true(second >= first - 1);
    for (int i = 0; i < second; i++)
        alloc_free(blocks[i]);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    void *p = alloc_malloc(128u << 20);
    assert_non_null(p);
    alloc_free(p);
}

/* MAX_MEMORY counts memory, not address space: after the limit was
 * reached with 1 MiB blocks and they were freed, the whole limit is
 * there again for any size - one block of half the limit, then 1 KiB
 * blocks filling it (both need the freed slots purged first, which a
 * failing allocation does). */
static void test_max_memory_recovers(void **state)
{
    (void)state;
    enum { SMALL = 1 << 18 };
    static void *small[SMALL];
    const long room = 128L << 20;
    limit_to(room);
    int n = fill_to_limit(blocks, MAX);
    assert_true(n >= 100);              /* 3 per superpage beside its header */
    for (int i = 0; i < n; i++) {
        assert_int_equal(((unsigned char *)blocks[i])[(1 << 20) - 1], i & 0xff);
        alloc_free(blocks[i]);
    }
    unsigned char *half = alloc_malloc((size_t)room / 2);
    assert_non_null(half);
    memset(half, 0x3c, (size_t)room / 2);
    assert_int_equal(half[room / 2 - 1], 0x3c);
    alloc_free(half);
    size_t k = 0;
    errno = 0;
    while (k < SMALL && (small[k] = alloc_malloc(1024)) != NULL) {
        memset(small[k], (int)(k & 0xff), 1024);
        k++;
    }
    assert_true(k < SMALL);
    assert_int_equal(errno, ENOMEM);
    print_message("under a %ld MiB limit: %d blocks of 1 MiB, then %zu of 1 KiB\n",
                  room >> 20, n, k);
    assert_true(k * 1024 >= (size_t)room / 4 * 3);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(((unsigned char *)small[i])[1023], i & 0xff);
        alloc_free(small[i]);
    }
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
}

/* A charge the limit refuses is never counted, not even for a moment:
 * added and taken back, a big refused request made the small ones other
 * threads made meanwhile fail too, well under the limit (half of 200,000
 * in one run). */
static atomic_int refusing;

static void *refuse_big(void *arg)
{
    size_t big = (size_t)(uintptr_t)arg;
    while (atomic_load(&refusing)) {
        void *p = alloc_malloc(big);
        if (p != NULL)
            alloc_free(p);
    }
    return NULL;
}

static void test_max_memory_refused_charge_costs_others_nothing(void **state)
{
    (void)state;
    limit_to(64L << 20);
    /* Each huge block mapped afresh and charged: no thread's slot keeps
     * a mapping (it would be reused with no charge) when purging is
     * immediate. */
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 0), 0);
    void *base = alloc_malloc(24u << 20);
    assert_non_null(base);
    atomic_store(&refusing, 1);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, refuse_big, (void *)(uintptr_t)(48u << 20)), 0);
    int failed = 0;
    for (int i = 0; i < 20000; i++) {
        unsigned char *p = alloc_malloc(3u << 20);
        if (p == NULL) {
            failed++;
            continue;
        }
        p[i % (3u << 20)] = (unsigned char)i;
        alloc_free(p);
    }
    atomic_store(&refusing, 0);
    pthread_join(t, NULL);
    alloc_free(base);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay), 0);
    if (failed != 0)
        fail_msg("%d of 20000 mallocs of 3 MiB failed with 24 MiB live under 64", failed);
}

/* At the limit, two 1 MiB buddies this thread freed sit in its own large
 * cache; a 1.5 MiB request needs them merged, and gets them: a failing
 * allocation gives the thread's caches back to the pool and tries again. */
static void test_max_memory_merges_cached_spans(void **state)
{
    (void)state;
    limit_to(16L << 20);
    int n = fill_to_limit(blocks, MAX);
    /* Every free 2 MiB-aligned run of slots would have held two of them,
     * so none is left; find two that are buddies in a superpage's upper
     * half. */
    int lo = -1, hi = -1;
    for (int i = 0; i < n && hi < 0; i++) {
        uintptr_t a = (uintptr_t)blocks[i];
        if ((a & (SUPERPAGE - 1)) != SUPERPAGE / 2)
            continue;
        for (int j = 0; j < n; j++)
            if ((uintptr_t)blocks[j] == a + (1u << 20)) {
                lo = i;
                hi = j;
                break;
            }
    }
    assert_true(hi >= 0);
    alloc_free(blocks[lo]);
    alloc_free(blocks[hi]);
    blocks[lo] = blocks[hi] = NULL;
    size_t want = 3u << 19;
    unsigned char *p = alloc_malloc(want);
    assert_non_null(p);
    memset(p, 0xa5, want);
    assert_int_equal(p[want - 1], 0xa5);
    for (int i = 0; i < n; i++) {
        if (blocks[i] == NULL)
            continue;
        assert_int_equal(((unsigned char *)blocks[i])[(1 << 20) - 1], i & 0xff);
        alloc_free(blocks[i]);
    }
    alloc_free(p);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
}

/* With HUGE_PAGES a purge gives back a superpage's wholly free upper
 * half in one call, clean slots with the dirty ones: only the dirty ones
 * may leave the committed account.  Uncharging the clean ones too made
 * the account drift down by a few slots a pass until it wrapped, and
 * then every pool block was refused (round 4 here).  Run in a process of
 * its own (this program again, with an argument), whose first superpage
 * the blocks fill to partway into its upper half. */
static int huge_pages_purge_rounds(void)
{
    enum { ROUNDS = 12, N = 40 };
    if (alloc_option_set(ALLOC_OPTION_HUGE_PAGES, 1) != 0 ||
        alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 256L << 20) != 0)
        return 2;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++) {
            blocks[i] = alloc_malloc(64 << 10);
            if (blocks[i] == NULL) {
                fprintf(stderr, "round %d: block %d refused, committed %zd\n", r, i,
                        (ssize_t)stats_now().committed);
                return 1;
            }
            memset(blocks[i], r + i, 64 << 10);
        }
        for (int i = 0; i < N; i++) {
            if (((unsigned char *)blocks[i])[(64 << 10) - 1] != ((r + i) & 0xff))
                return 3;
            alloc_free(blocks[i]);
        }
        alloc_collect(true);
        size_t c = stats_now().committed;
        if (c > (256u << 20)) {
            fprintf(stderr, "round %d: committed %zd, outside the limit\n", r, (ssize_t)c);
            return 1;
        }
    }
    return 0;
}

/* Under the limit the caller set: 1 KiB blocks until the limit refuses
 * one, all freed (and, with `collect`, alloc_collect(true)), then blocks
 * of `big` until it refuses one, all freed: how many of those fitted. */
static int big_after_small(size_t big, bool collect)
{
    enum { SMALL = 1 << 18 };
    static void *small[SMALL];
    int k = 0, n = 0;
    while (k < SMALL && (small[k] = alloc_malloc(1024)) != NULL)
        memset(small[k++], 1, 1024);
    for (int i = 0; i < k; i++)
        alloc_free(small[i]);
    if (collect)
        alloc_collect(true);
    while (n < MAX && (blocks[n] = alloc_malloc(big)) != NULL)
        memset(blocks[n++], 2, 4096);
    for (int i = 0; i < n; i++)
        alloc_free(blocks[i]);
    return n;
}

/* With HUGE_PAGES the lower half of a superpage (it holds the header, so
 * it is never wholly free) was never purged, and under MAX_MEMORY its
 * free slots stayed charged for ever: filled with 1 KiB blocks to a
 * 128 MiB limit and freed, the pool kept 64 MiB and only 7 blocks of
 * 8 MiB fitted after.  A forced pass under the limit takes every free
 * slot.  Run in a process of its own: HUGE_PAGES is the process's. */
static int huge_pages_refill(void)
{
    const size_t limit = 128u << 20, big = 8u << 20;
    if (alloc_option_set(ALLOC_OPTION_HUGE_PAGES, 1) != 0 ||
        alloc_option_set(ALLOC_OPTION_MAX_MEMORY, (long)limit) != 0)
        return 2;
    int n = big_after_small(big, true);
    if ((size_t)n >= limit / big - 2)
        return 0;
    fprintf(stderr, "HUGE_PAGES: %d blocks of 8 MiB after 1 KiB blocks were freed, under "
                    "128 MiB\n", n);
    return 1;
}

/* This program again, with `mode` as its argument: its exit status. */
static int run_self(const char *mode)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_memory", mode, (char *)NULL);
        _exit(4);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The same, which must succeed, or say 77: the system lacks what the
 * mode needs, and the test is skipped. */
static void run_self_or_skip(const char *mode)
{
    int status = run_self(mode);
    if (status == 77)
        skip();
    assert_int_equal(status, 0);
}

/* Whether the kernel mapping that holds p was advised MADV_HUGEPAGE
 * (its VmFlags in /proc/self/smaps say "hg"); -1 if p is in none. */
static int advised_huge(const void *p)
{
    char line[1024];
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL)
        return -1;
    bool in = false;
    int got = -1;
    uintptr_t a = (uintptr_t)p;
    while (got < 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = a >= lo && a < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            got = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return got;
}

/* With HUGE_PAGES a huge block's mapping is advised for transparent
 * huge pages, as a superpage is (a superpage's pool block and a 12 MiB
 * block here); without, neither is.  Run in a process of its own: the
 * option is the process's.  77: the kernel has no transparent huge
 * pages. */
static int huge_pages_hint(void)
{
    if (access("/sys/kernel/mm/transparent_hugepage", F_OK) != 0)
        return 77;
    void *off_small = alloc_malloc(256 << 10), *off_huge = alloc_malloc(12 << 20);
    if (off_small == NULL || off_huge == NULL)
        return 2;
    if (advised_huge(off_small) != 0 || advised_huge(off_huge) != 0) {
        fprintf(stderr, "advised without HUGE_PAGES: %d %d\n", advised_huge(off_small),
                advised_huge(off_huge));
        return 1;
    }
    if (alloc_option_set(ALLOC_OPTION_HUGE_PAGES, 1) != 0)
        return 2;
    /* Blocks that need a new superpage and a new mapping. */
    enum { N = 80 };
    static void *big[N];
    for (int i = 0; i < N; i++)
        if ((big[i] = alloc_malloc(256 << 10)) == NULL)
            return 2;
    void *huge = alloc_malloc(12 << 20);
    if (huge == NULL)
        return 2;
    memset(huge, 7, 12 << 20);
    int last = advised_huge(big[N - 1]), h = advised_huge(huge);
    if (last != 1 || h != 1) {
        fprintf(stderr, "HUGE_PAGES: a new superpage advised %d, a huge block %d\n", last, h);
        return 1;
    }
    for (int i = 0; i < N; i++)
        alloc_free(big[i]);
    alloc_free(huge);
    alloc_free(off_small);
    alloc_free(off_huge);
    return 0;
}

static void test_huge_pages_hint(void **state)
{
    (void)state;
    run_self_or_skip("huge-pages-hint");
}

static void test_max_memory_huge_pages_purge(void **state)
{
    (void)state;
    assert_int_equal(run_self("huge-pages-purge"), 0);
}

static void test_max_memory_huge_pages_refill(void **state)
{
    (void)state;
    assert_int_equal(run_self("huge-pages-refill"), 0);
}

/* Memory MADV_FREE gave back stays charged (it may be resident until the
 * kernel wants it); a limit set later must still get it out of the
 * account: a purge under MAX_MEMORY (DONTNEED) takes those slots too.
 * Before, they stayed charged for ever, and 128 MiB under a 256 MiB limit
 * failed with nothing live. */
static void test_max_memory_after_lazy_purge(void **state)
{
    (void)state;
    enum { N = 100, BLOCK = 2 << 20 };
    alloc_collect(true);
    size_t base = stats_now().committed;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_MODE, ALLOC_PURGE_FREE), 0);
    for (int i = 0; i < N; i++) {
        blocks[i] = alloc_malloc(BLOCK);
        assert_non_null(blocks[i]);
        memset(blocks[i], i, BLOCK);
    }
    for (int i = 0; i < N; i++)
        alloc_free(blocks[i]);
    alloc_collect(true);                /* lazily: still charged */
    long limit = (long)base + (256L << 20);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, limit), 0);
    alloc_collect(true);
    size_t c = stats_now().committed;
    if (c > base + (16u << 20))
        fail_msg("committed %zu after a purge under the limit, %zu before the blocks", c, base);
    unsigned char *p = alloc_malloc(128u << 20);
    assert_non_null(p);
    memset(p, 0x5a, 128u << 20);
    assert_int_equal(p[(128u << 20) - 1], 0x5a);
    alloc_free(p);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_MODE, ALLOC_PURGE_DONTNEED), 0);
}

/* With purging off (PURGE_DELAY_MS -1), from nothing free: n blocks of
 * `size`, filled, checked and freed again, charged and not purged.
 * Returns what was committed before them. */
static size_t freed_never_purged(int n, size_t size)
{
    static void *held[1 << 17];
    assert_true(n <= (int)(sizeof held / sizeof held[0]));
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    alloc_collect(true);
    size_t base = stats_now().committed;
    for (int i = 0; i < n; i++) {
        assert_non_null(held[i] = alloc_malloc(size));
        memset(held[i], i & 0xff, size);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(((unsigned char *)held[i])[size - 1], i & 0xff);
        alloc_free(held[i]);
    }
    return base;
}

/* A delay set to 0 at run time (purge at once) gives back what is
 * already free at once: the memory freed before, the large cache, the
 * huge cache and slot.  Before, it stayed until some later free came
 * along - with a purger asleep (a delay of 0 has no clock to sleep on). */
static void test_purge_delay_set_to_zero_purges_what_is_free(void **state)
{
    (void)state;
    enum { N = 64 };
    size_t base = freed_never_purged(N, 1 << 20);
    unsigned char *h = alloc_malloc(20u << 20);
    assert_non_null(h);
    memset(h, 1, 20u << 20);
    alloc_free(h);
    assert_true(stats_now().committed >= base + ((size_t)N << 20) / 2);  /* kept: never purge */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 0), 0);
    size_t c = stats_now().committed;
    if (c > base + (4u << 20))
        fail_msg("committed %zu MiB over the %zu before, right after the delay went to 0",
                 (c - base) >> 20, base >> 20);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
}

/* realloc growing a huge block at the limit: in place it needs only the
 * difference, which the freed memory of a moment ago holds once it is
 * purged.  The purge came with the failed allocation of the whole new
 * size, after the in-place try: the first realloc gave ENOMEM and the
 * same call again succeeded. */
static void test_max_memory_realloc_grows_after_purge(void **state)
{
    (void)state;
    enum { N = 25 };
    limit_to(50L << 20);
    unsigned char *p = alloc_malloc(20u << 20);
    assert_non_null(p);
    memset(p, 7, 20u << 20);
    for (int i = 0; i < N; i++) {
        assert_non_null(blocks[i] = alloc_malloc(1 << 20));
        memset(blocks[i], 1, 1 << 20);
    }
    for (int i = 0; i < N; i++)
        alloc_free(blocks[i]);
    errno = 0;
    unsigned char *q = alloc_realloc(p, 40u << 20);
    if (q == NULL)
        fail_msg("realloc to 40 MiB under a 50 MiB limit: errno %d, committed %zu", errno,
                 stats_now().committed);
    assert_int_equal(q[(20u << 20) - 1], 7);
    memset(q + (20u << 20), 8, 20u << 20);
    alloc_free(q);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
}

/* A forced purge (here: the one an allocation at the limit makes) waits
 * for a pass under way on another thread and makes its own: skipped,
 * it left freed slots charged, and a round of 1 MiB blocks after one of
 * 1 KiB blocks got 45-52 of 62 while another thread ran passes of its
 * own.  In a process of its own (this program again, with an argument),
 * as the pool of a fresh process makes the contention likely. */
static atomic_int collecting;

static void *collect_loop(void *arg)
{
    (void)arg;
    while (atomic_load(&collecting))
        alloc_collect(false);
    return NULL;
}

static int forced_purge_rounds(void)
{
    if (alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 64L << 20) != 0)
        return 2;
    int alone = big_after_small(1 << 20, false), fewest = alone;
    atomic_store(&collecting, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, collect_loop, NULL) != 0)
        return 2;
    for (int r = 0; r < 4; r++) {
        int n = big_after_small(1 << 20, false);
        fewest = n < fewest ? n : fewest;
    }
    atomic_store(&collecting, 0);
    pthread_join(t, NULL);
    if (fewest >= alone - 1)
        return 0;
    fprintf(stderr, "%d blocks of 1 MiB beside a collecting thread, %d alone\n", fewest, alone);
    return 1;
}

static void test_max_memory_forced_purge_waits_for_a_pass(void **state)
{
    (void)state;
    assert_int_equal(run_self("forced-purge"), 0);
}

/* The pool grows into a freed huge mapping, 4 MiB chunk by chunk, before
 * it maps new superpages beside it: `sort -S 12M` frees its 12 MiB
 * buffer and then makes 2 MiB blocks (peak RSS 23.8 -> 15.8 MB, glibc
 * 14.2).  In a process of its own, whose pool has no room to spare:
 * three superpages' growth after a 12 MiB free maps nothing new, and
 * every block keeps its pattern.  Exit status 0 when it holds. */
static int pool_into_huge(void)
{
    enum { BLOCK = (2 << 20) - 4096, MAX_BLOCKS = 64 };
    if (alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 3600 * 1000) != 0)
        return 2;
    char *a = alloc_malloc(12 << 20);
    if (a == NULL)
        return 2;
    memset(a, 1, 12 << 20);
    alloc_free(a);              /* into this thread's huge slot */
    alloc_stats_t st0 = stats_now();
    static char *blocks[MAX_BLOCKS];
    size_t n = 0;
    while (stats_now().superpages < st0.superpages + 3) {
        if (n == MAX_BLOCKS || (blocks[n] = alloc_malloc(BLOCK)) == NULL)
            return 3;
        memset(blocks[n], (int)n + 7, BLOCK);
        n++;
    }
    size_t more = stats_now().mapped - st0.mapped;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < BLOCK; j += 4093)
            if ((unsigned char)blocks[i][j] != (unsigned char)(i + 7))
                return 4;
        alloc_free(blocks[i]);
    }
    if (more <= (1u << 20))
        return 0;
    fprintf(stderr, "the pool grew by 3 superpages after a 12 MiB free: %zu MiB mapped more\n",
            more >> 20);
    return 1;
}

static void test_pool_grows_into_freed_huge_mapping(void **state)
{
    (void)state;
    assert_int_equal(run_self("pool-into-huge"), 0);
}

/* A limit set below what is committed now (memory freed but not yet
 * purged, still charged) is met: the free memory goes at once, and
 * blocks that reuse it are charged again.  Before, the charged free
 * slots were claimed again with no charge, and 75 blocks of 1 MiB lived
 * under a limit of 64 MiB. */
static void test_max_memory_set_below_committed(void **state)
{
    (void)state;
    size_t base = freed_never_purged(100000, 1024);
    long limit = (long)base + (64L << 20);
    assert_true(stats_now().committed > (size_t)limit);        /* ~100 MB, never purged */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, limit), 0);
    int n = fill_to_limit(blocks, MAX);
    size_t c = stats_now().committed;
    for (int i = 0; i < n; i++) {
        assert_int_equal(((unsigned char *)blocks[i])[(1 << 20) - 1], i & 0xff);
        alloc_free(blocks[i]);
    }
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
    if (c > (size_t)limit)
        fail_msg("%d blocks of 1 MiB, committed %zu over a limit of %ld", n, c, limit);
}

/* calloc from a reused huge mapping in a process under mlockall: the
 * kernel refuses MADV_DONTNEED on locked memory, so the old bytes must
 * be cleared another way (they were handed out as they were).  Run in a
 * child: the lock is for the whole process.  Skipped (exit 77) where
 * the memlock limit refuses mlockall. */
static int calloc_locked(void)
{
    enum { N = 8 << 20 };
#if defined(UNDER_TSAN) || defined(UNDER_ASAN)
    return 77;          /* locking a sanitizer's shadow would fault in terabytes */
#endif
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
        return 77;
    unsigned char *p = alloc_malloc(N);
    if (p == NULL)
        return 2;
    memset(p, 0xaa, N);
    alloc_free(p);
    unsigned char *q = alloc_calloc(1, N);
    if (q == NULL)
        return 2;
    size_t dirty = 0;
    for (size_t i = 0; i < N; i++)
        dirty += q[i] != 0;
    if (dirty != 0)
        fprintf(stderr, "calloc under mlockall: %zu of %d bytes not zero (reused: %d)\n", dirty,
                N, q == p);
    return dirty != 0;
}

static void test_calloc_of_locked_memory(void **state)
{
    (void)state;
    run_self_or_skip("calloc-locked");
}

/* ---- RLIMIT_AS -------------------------------------------------------- */

static void test_rlimit_as(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    skip();             /* TSan reserves terabytes of shadow address space */
#endif
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl;
        size_t vm = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f == NULL || fscanf(f, "%zu", &vm) != 1)
            _exit(2);
        fclose(f);
        rl.rlim_cur = rl.rlim_max = vm * 4096 + (256u << 20);
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
        static void *blocks[65536];
        int n = 0, m = 0;
        errno = 0;
        while (n < 65536 && (blocks[n] = alloc_malloc(100000)) != NULL)
            memset(blocks[n++], 1, 100000);
        if (n == 65536 || errno != ENOMEM)
            _exit(4);
        for (int i = 0; i < n; i++)
            alloc_free(blocks[i]);
        while (m < n && (blocks[m] = alloc_malloc(100000)) != NULL)
            m++;
        _exit(m >= n - 1 ? 0 : 5);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- kernel mappings -------------------------------------------------- */

static int count_maps(void)
{
    char line[512];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    while (fgets(line, sizeof line, f) != NULL)
        n++;
    fclose(f);
    return n;
}

static void test_few_mappings(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    skip();             /* TSan adds shadow mappings for every new range */
#endif
    enum { N = 20000 };
    static void *blocks[N];
    int before = count_maps();
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            size_t n = (size_t)((i * 7919) % 200000) + 1;
            assert_non_null(blocks[i] = alloc_malloc(n));
            ((char *)blocks[i])[n - 1] = 1;
        }
        for (int i = 0; i < N; i += 2)
            alloc_free(blocks[i]);
        alloc_collect(false);
        for (int i = 1; i < N; i += 2)
            alloc_free(blocks[i]);
    }
    int after = count_maps();
    print_message("kernel mappings: %d before, %d after\n", before, after);
    assert_true(after < before + 32);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "huge-pages-purge") == 0)
        return huge_pages_purge_rounds();
    if (argc == 2 && strcmp(argv[1], "calloc-locked") == 0)
        return calloc_locked();
    if (argc == 2 && strcmp(argv[1], "forced-purge") == 0)
        return forced_purge_rounds();
    if (argc == 2 && strcmp(argv[1], "pool-into-huge") == 0)
        return pool_into_huge();
    if (argc == 2 && strcmp(argv[1], "huge-pages-refill") == 0)
        return huge_pages_refill();
    if (argc == 2 && strcmp(argv[1], "huge-pages-hint") == 0)
        return huge_pages_hint();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outgrown_mapping_goes_back),
        cmocka_unit_test(test_emptied_pages_kept_two),
        cmocka_unit_test(test_rss_returns_after_delay),
        cmocka_unit_test(test_rss_returns_from_exited_threads),
        cmocka_unit_test(test_rss_stays_with_purge_off),
        cmocka_unit_test(test_prefault_saves_faults),
        cmocka_unit_test(test_idle_thread_huge_slot_purged),
        cmocka_unit_test(test_pool_growth_takes_from_huge_cache),
        cmocka_unit_test(test_realloc_growth_takes_from_huge_cache),
        cmocka_unit_test(test_pool_growth_takes_from_huge_slot),
        cmocka_unit_test(test_growth_passes_a_big_cached_mapping),
        cmocka_unit_test(test_freed_huge_mapping_serves_smaller_blocks),
        cmocka_unit_test(test_failed_growth_keeps_a_cut_block),
        cmocka_unit_test(test_remotely_emptied_pages_go_back),
        cmocka_unit_test(test_purge_delay_change_wakes_purger),
        cmocka_unit_test(test_purge_delay_set_to_zero_purges_what_is_free),
        cmocka_unit_test(test_calloc_of_locked_memory),
        cmocka_unit_test(test_max_memory_set_below_committed),
        cmocka_unit_test(test_max_memory_realloc_grows_after_purge),
        cmocka_unit_test(test_max_memory_forced_purge_waits_for_a_pass),
        cmocka_unit_test(test_pool_grows_into_freed_huge_mapping),
        cmocka_unit_test(test_max_memory),
        cmocka_unit_test(test_max_memory_recovers),
        cmocka_unit_test(test_max_memory_merges_cached_spans),
        cmocka_unit_test(test_max_memory_refused_charge_costs_others_nothing),
        cmocka_unit_test(test_max_memory_huge_pages_purge),
        cmocka_unit_test(test_max_memory_huge_pages_refill),
        cmocka_unit_test(test_huge_pages_hint),
        cmocka_unit_test(test_max_memory_after_lazy_purge),
        cmocka_unit_test(test_rlimit_as),
        cmocka_unit_test(test_few_mappings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
