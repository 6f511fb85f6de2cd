/* Statistics: counters follow a known sequence of allocations exactly,
 * the text report has its sections, and a signal storm while two threads
 * allocate ends with every dump complete (run with SHOAL_STATS_SIGNAL,
 * SHOAL_STATS_FILE and SHOAL_STATS_JSON set by ctest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "shoal.h"
#include "test_util.h"


static alloc_stats_t take(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    assert_int_equal(st.version, ALLOC_STATS_VERSION);
    return st;
}

static void test_rejects_small_struct(void **state)
{
    (void)state;
    alloc_stats_t st = { .size = ALLOC_STATS_SIZE_V2 - 1 };
    assert_int_equal(alloc_stats_get(&st), EINVAL);
    assert_int_equal(alloc_stats_get(NULL), EINVAL);
}

/* A program built against version 2 of shoal.h passes the smaller size:
 * it gets that prefix, filled, version 2, and nothing beyond it is
 * written. */
static void test_older_struct_gets_its_prefix(void **state)
{
    (void)state;
    static unsigned char buf[sizeof(alloc_stats_t) + 64];
    memset(buf, 0xab, sizeof buf);
    alloc_stats_t *st = (alloc_stats_t *)buf;
    st->size = ALLOC_STATS_SIZE_V2;
    void *p = alloc_malloc(100);
    assert_int_equal(alloc_stats_get(st), 0);
    alloc_free(p);
    assert_int_equal(st->size, ALLOC_STATS_SIZE_V2);
    assert_int_equal(st->version, 2);
    assert_true(st->allocated >= 100 && st->mapped >= st->active && st->heaps_live >= 1);
    assert_int_equal(st->classes[ALLOC_STATS_CLASSES - 1].block_size, 64 * 1024);
    for (size_t i = ALLOC_STATS_SIZE_V2; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xab);
}

static unsigned class_of(size_t n)
{
    alloc_stats_t st = take();
    for (unsigned c = 0; c < ALLOC_STATS_CLASSES; c++)
        if (st.classes[c].block_size >= n)
            return c;
    fail();
    return 0;
}

static void test_counters_exact(void **state)
{
    (void)state;
    enum { SMALL = 100, MEDIUM = 10, LARGE = 3 };
    void *small[SMALL], *medium[MEDIUM], *large[LARGE], *huge;
    unsigned cs = class_of(48), cm = class_of(20000);
    alloc_stats_t a = take();
    for (int i = 0; i < SMALL; i++)
        memset(small[i] = alloc_malloc(48), 1, 48);
    for (int i = 0; i < MEDIUM; i++)
        memset(medium[i] = alloc_malloc(20000), 2, 20000);
    for (int i = 0; i < LARGE; i++)
        memset(large[i] = alloc_malloc(200000), 3, 200000);
    memset(huge = alloc_malloc(5u << 20), 4, 4096);
    alloc_stats_t b = take();
    assert_int_equal(b.classes[cs].requests - a.classes[cs].requests, SMALL);
    assert_int_equal(b.classes[cs].live_blocks - a.classes[cs].live_blocks, SMALL);
    assert_int_equal(b.classes[cs].live_bytes - a.classes[cs].live_bytes, SMALL * 48);
    assert_true(b.classes[cs].pages >= 1);
    assert_int_equal(b.classes[cm].requests - a.classes[cm].requests, MEDIUM);
    assert_int_equal(b.classes[cm].live_blocks - a.classes[cm].live_blocks, MEDIUM);
    assert_int_equal(b.large_requests - a.large_requests, LARGE);
    assert_int_equal(b.large_live - a.large_live, LARGE);
    assert_int_equal(b.large_live_bytes - a.large_live_bytes, LARGE * 256 * 1024);
    assert_int_equal(b.huge_requests - a.huge_requests, 1);
    assert_int_equal(b.huge_live - a.huge_live, 1);
    assert_true(b.huge_live_bytes - a.huge_live_bytes >= 5u << 20);
    assert_true(b.allocated - a.allocated >=
                SMALL * 48 + MEDIUM * 20000 + LARGE * 200000 + (5u << 20));
    assert_true(b.active >= b.allocated - b.huge_live_bytes);
    assert_true(b.mapped >= b.active);
    assert_true(b.committed >= b.active);
    assert_true(b.resident > 0 && b.resident_peak >= b.resident);
    assert_true(b.active_peak >= b.active && b.mapped_peak >= b.mapped);
    assert_true(b.heaps_live >= 1 && b.heaps_created >= 1);
    assert_true(b.minor_faults > a.minor_faults);

    for (int i = 0; i < SMALL; i += 2)
        alloc_free(small[i]);
    for (int i = 0; i < LARGE; i++)
        alloc_free(large[i]);
    alloc_free(huge);
    alloc_stats_t c = take();
    assert_int_equal(c.classes[cs].requests - a.classes[cs].requests, SMALL);
    assert_int_equal(c.classes[cs].live_blocks - a.classes[cs].live_blocks, SMALL / 2);
    assert_int_equal(c.large_live, a.large_live);
    assert_int_equal(c.huge_live, a.huge_live);
    for (int i = 1; i < SMALL; i += 2)
        alloc_free(small[i]);
    for (int i = 0; i < MEDIUM; i++)
        alloc_free(medium[i]);
    alloc_stats_t d = take();
    assert_int_equal(d.classes[cs].live_blocks, a.classes[cs].live_blocks);
    assert_int_equal(d.classes[cm].live_blocks, a.classes[cm].live_blocks);
}

static void make_blocks(void **b, int n, size_t size, int fill)
{
    for (int i = 0; i < n; i++) {
        b[i] = alloc_malloc(size);
        assert_non_null(b[i]);
        memset(b[i], fill, size);
    }
}

static void free_blocks(void **b, int n)
{
    for (int i = 0; i < n; i++)
        alloc_free(b[i]);
}

/* Peaks: every read samples them, and huge blocks keep theirs exactly.
 * The classes used here (3000 and 6000 bytes) appear in no other test of
 * this file, so their peaks are this test's own. */
static void test_peaks_after_reads(void **state)
{
    (void)state;
    enum { N = 200 };
    static void *blocks[N];
    unsigned k = class_of(3000);
    alloc_stats_t a = take();
    assert_int_equal(a.class_peaks[k].live_blocks, a.classes[k].live_blocks);
    make_blocks(blocks, N, 3000, 5);
    void *h1 = alloc_malloc(3u << 20), *h2 = alloc_malloc(6u << 20);
    void *l = alloc_malloc(300000);
    assert_true(h1 != NULL && h2 != NULL && l != NULL);
    alloc_stats_t b = take();           /* the high point, sampled */
    free_blocks(blocks, N);
    alloc_free(h1);
    alloc_free(h2);
    alloc_free(l);
    alloc_stats_t c = take();
    assert_int_equal(c.classes[k].live_blocks, a.classes[k].live_blocks);
    assert_int_equal(c.class_peaks[k].live_blocks, a.classes[k].live_blocks + N);
    assert_int_equal(c.class_peaks[k].live_bytes, c.class_peaks[k].live_blocks *
                                                      c.classes[k].block_size);
    assert_true(c.class_peaks[k].pages >= b.classes[k].pages && b.classes[k].pages >= 1);
    assert_true(c.allocated_peak >= b.allocated && b.allocated > c.allocated);
    assert_true(c.committed_peak >= b.committed);
    assert_true(c.large_live_peak >= a.large_live + 1);
    assert_true(c.large_live_bytes_peak >= b.large_live_bytes);
    assert_true(c.huge_live_peak >= a.huge_live + 2);
    assert_true(c.huge_live_bytes_peak >= a.huge_live_bytes + (9u << 20));
    assert_true(c.pool_slots_used_peak >= b.pool_slots_used);
    assert_true(c.huge_cached_peak >= c.huge_cached && c.huge_cached_bytes_peak >=
                                                           c.huge_cached_bytes);
}

/* Requests the kernel cannot map - 64 TiB, more than the gaps of a 47-bit
 * address space hold, whatever the overcommit policy; 2^62 bytes; a
 * realloc growing a 10 MiB block to 64 TiB - fail with ENOMEM and leave
 * the committed peak where the memory really went: it once kept the
 * failed request's size for the rest of the process. */
static void test_failed_requests_leave_committed_peak(void **state)
{
    (void)state;
    void *b = alloc_malloc(10u << 20);
    assert_non_null(b);
    pattern_fill(b, 10u << 20, 7);
    alloc_stats_t a = take();
    size_t sizes[] = { (size_t)1 << 46, (size_t)1 << 62, ((size_t)1 << 47) + 1 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        errno = 0;
        assert_null(alloc_malloc(sizes[i]));
        assert_int_equal(errno, ENOMEM);
        errno = 0;
        assert_null(alloc_calloc(1, sizes[i]));
        assert_int_equal(errno, ENOMEM);
    }
    errno = 0;
    assert_null(alloc_realloc(b, (size_t)1 << 46));
    assert_int_equal(errno, ENOMEM);
    assert_true(pattern_ok(b, 10u << 20, 7));
    alloc_stats_t c = take();
    assert_true(c.committed_peak < a.committed_peak + (64u << 20));
    alloc_free(b);
}

/* Without a read in between, the peak is sampled when a heap needs a
 * fresh page or a large or huge block is made, once the sampling interval
 * (1 ms per live heap) has passed: 50 ms of sleep make sure it has. */
static void test_peaks_sampled_between_reads(void **state)
{
    (void)state;
    enum { N = 40 };
    static void *blocks[N];
    unsigned k = class_of(6000);
    alloc_stats_t a = take();
    make_blocks(blocks, N, 6000, 6);
    usleep(50 * 1000);
    /* A huge block of a size no earlier test frees, so no cache holds
     * one: new memory, a moment to sample. */
    void *h = alloc_malloc(20u << 20);
    assert_non_null(h);
    alloc_free(h);
    free_blocks(blocks, N);
    alloc_stats_t b = take();
    assert_int_equal(b.classes[k].live_blocks, a.classes[k].live_blocks);
    assert_int_equal(b.class_peaks[k].live_blocks, a.classes[k].live_blocks + N);
    assert_true(b.allocated_peak >= a.allocated + N * 6000 + (20u << 20));
}

typedef struct remote_s {
    void *blocks[64];
} remote_t;

/* Frees the blocks another thread made; own_then_free first allocates
 * one of its own. */
static void *free_them(void *arg)
{
    remote_t *r = arg;
    for (int i = 0; i < 64; i++)
        alloc_free(r->blocks[i]);
    return NULL;
}

static void *own_then_free(void *arg)
{
    alloc_free(alloc_malloc(100));
    return free_them(arg);
}

/* Large blocks by order and huge blocks by mapping size: two 200 KB
 * blocks are 256 KiB blocks (order 2), a 10 MiB block's mapping is in
 * the "up to 16 MiB" bin (2); freeing them takes them out again. */
static void test_bins(void **state)
{
    (void)state;
    alloc_stats_t a = take();
    void *l1 = alloc_malloc(200000), *l2 = alloc_malloc(200000), *h = alloc_malloc(10 << 20);
    assert_true(l1 != NULL && l2 != NULL && h != NULL);
    alloc_stats_t b = take();
    assert_int_equal(b.large_bins[2].live - a.large_bins[2].live, 2);
    assert_int_equal(b.large_bins[2].live_bytes - a.large_bins[2].live_bytes, 2 << 18);
    assert_true(b.large_bins[2].live_peak >= b.large_bins[2].live);
    assert_int_equal(b.huge_bins[2].live - a.huge_bins[2].live, 1);
    assert_true(b.huge_bins[2].live_bytes - a.huge_bins[2].live_bytes >= (size_t)10 << 20);
    assert_true(b.huge_bins[2].live_peak >= 1);
    for (unsigned i = 0; i < ALLOC_STATS_LARGE_BINS; i++)
        if (i != 2)
            assert_int_equal(b.large_bins[i].live, a.large_bins[i].live);
    alloc_free(l1);
    alloc_free(l2);
    alloc_free(h);
    alloc_stats_t c = take();
    assert_int_equal(c.large_bins[2].live, a.large_bins[2].live);
    assert_int_equal(c.huge_bins[2].live, a.huge_bins[2].live);
}

/* Freed memory is due for a pass; with none waiting, none is due. */
static void test_purge_due(void **state)
{
    (void)state;
    alloc_collect(true);
    alloc_stats_t st = take();
    assert_int_equal(st.purge_due_ms, -1);
    void *p = alloc_malloc(1 << 20);    /* a large block: its free leaves slots */
    alloc_free(p);
    alloc_collect(false);               /* drains the caches into the pool */
    st = take();
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    /* Unless the background purger's pass came in between and took the
     * slots, they wait, and a pass is due within the delay. */
    if (st.pool_slots_dirty > 0)
        assert_true(st.purge_due_ms >= 0 && st.purge_due_ms <= delay);
    alloc_collect(true);
    assert_int_equal(take().purge_due_ms, -1);
}

/* shoal's own structures: a superpage header for each superpage and a
 * struct for each heap, and nothing when there are none. */
static void test_metadata_counted(void **state)
{
    (void)state;
    void *p = alloc_malloc(100);
    alloc_stats_t st = take();
    assert_true(st.superpages >= 1 && st.heaps_live >= 1);
    assert_true(st.metadata >= st.superpages * 64 * 128);   /* the slot descriptors */
    assert_true(st.metadata < st.mapped);
    alloc_free(p);
}

static void test_remote_frees_counted(void **state)
{
    (void)state;
    remote_t r;
    unsigned c = class_of(100);
    for (int with_heap = 0; with_heap < 2; with_heap++) {
        alloc_stats_t a = take();
        for (int i = 0; i < 64; i++)
            r.blocks[i] = alloc_malloc(100);
        pthread_t t;
        pthread_create(&t, NULL, with_heap ? own_then_free : free_them, &r);
        pthread_join(t, NULL);
        alloc_stats_t b = take();
        assert_int_equal(b.remote_frees - a.remote_frees, 64);
        assert_int_equal(b.classes[c].live_blocks, a.classes[c].live_blocks);
        /* A thread that only frees gets a heap for its outbox too. */
        assert_int_equal(b.heaps_exited - a.heaps_exited, 1);
        /* Its exit sent the blocks; they wait in this thread's inbox
         * until this thread takes it. */
        assert_int_equal(b.remote_in_flight - a.remote_in_flight, 64);
        alloc_collect(false);
        alloc_stats_t d = take();
        assert_int_equal(d.remote_in_flight, a.remote_in_flight);
        assert_int_equal(d.remote_frees, b.remote_frees);
    }
}

static char *read_file(const char *path, size_t *len)
{
    static char buf[64 << 20];
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n >= 0);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static void test_text_report(void **state)
{
    (void)state;
    char path[] = "/tmp/shoal-stats-XXXXXX";
    int fd = mkstemp(path);
    void *p = alloc_malloc(1000);
    alloc_stats_print(fd);
    alloc_stats_print_json(fd);
    close(fd);
    alloc_free(p);
    size_t len;
    char *text = read_file(path, &len);
    unlink(path);
    static const char *needles[] = { "shoal 0.1 statistics", "allocated", "active",
                                     "resident", "mapped", "fragmentation", "pool",
                                     "large", "huge", "threads", "page faults",
                                     "class   block", "{\"shoal\":\"0.1\"", "\"classes\":[" };
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        assert_non_null(strstr(text, needles[i]));
    assert_int_equal(text[len - 1], '\n');
}

/* ---- the signal storm ------------------------------------------------- */

#ifdef UNDER_TSAN
#define SIGNALS 200
#else
#define SIGNALS 1000
#endif

static atomic_int stop;
static atomic_long verified;

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *live[256] = { 0 };
    while (!atomic_load(&stop)) {
        unsigned i = (seed = seed * 1103515245u + 12345u) % 256;
        if (live[i] != NULL) {
            unsigned char *q = live[i];
            size_t n = alloc_usable_size(q);
            assert_int_equal(q[0], (unsigned char)i);
            assert_int_equal(q[n - 1], (unsigned char)i);
            alloc_free(q);
            atomic_fetch_add(&verified, 1);
        }
        size_t n = 16 + (seed >> 8) % (i < 8 ? 300000 : 2000);
        unsigned char *q = live[i] = alloc_malloc(n);
        assert_non_null(q);
        memset(q, (int)i, alloc_usable_size(q));
    }
    for (int i = 0; i < 256; i++)
        alloc_free(live[i]);
    return NULL;
}

static void test_signal_storm(void **state)
{
    (void)state;
    const char *file = getenv("SHOAL_STATS_FILE");
    int sig = (int)alloc_option_get(ALLOC_OPTION_STATS_SIGNAL);
    if (file == NULL || sig == 0)
        skip();                 /* run through ctest, which sets them */
    assert_int_equal(alloc_option_get(ALLOC_OPTION_STATS_JSON), 1);
    truncate(file, 0);
    alloc_stats_t before = take();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 7));
    for (int i = 0; i < SIGNALS; i++) {
        pthread_kill(t[i % 2], sig);    /* land inside malloc and free */
        usleep(200);                    /* pending signals would merge */
    }
    usleep(20000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    alloc_stats_t after = take();
    long dumps = (long)(after.dumps - before.dumps);
    long skipped = (long)(after.dumps_skipped - before.dumps_skipped);
    print_message("%d signals: %ld dumps, %ld dropped while busy, %ld blocks verified\n",
                  SIGNALS, dumps, skipped, atomic_load(&verified));
    assert_true(dumps >= 1);
    assert_true(dumps + skipped <= SIGNALS);
    /* Every dump is one whole JSON line. */
    size_t len;
    char *text = read_file(file, &len);
    long lines = 0;
    for (char *line = text; *line != '\0';) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        int depth = 0;
        assert_true(strncmp(line, "{\"shoal\":", 9) == 0);
        for (char *c = line; c < end; c++) {
            depth += (*c == '{' || *c == '[') - (*c == '}' || *c == ']');
            assert_true(depth >= 0);
        }
        assert_int_equal(depth, 0);
        assert_true(end - line > 2 && end[-1] == '}' && end[-2] == ']');
        lines++;
        line = end + 1;
    }
    assert_int_equal(lines, dumps);
}

/* SHOAL_STATS_FILE is opened for each report and never held open: no
 * descriptor of this process refers to it, and a dump still reaches it.
 * The descriptors are read from /proc/self/fd, not by an fstat of each
 * number: ThreadSanitizer takes that for an access to a descriptor that
 * another thread may be opening (the purger reads /proc/self/stat), and
 * once failed inside its own report of it. */
static void test_stats_file_not_held(void **state)
{
    (void)state;
    const char *file = getenv("SHOAL_STATS_FILE");
    int sig = (int)alloc_option_get(ALLOC_OPTION_STATS_SIGNAL);
    if (file == NULL || sig == 0)
        skip();                 /* run through ctest, which sets them */
    struct stat want;
    assert_int_equal(stat(file, &want), 0);
    char path[PATH_MAX], fd_path[300], target[PATH_MAX];
    assert_non_null(realpath(file, path));
    DIR *fds = opendir("/proc/self/fd");
    assert_non_null(fds);
    for (struct dirent *e; (e = readdir(fds)) != NULL;) {
        snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(fd_path, target, sizeof target - 1);
        if (n < 0)
            continue;           /* "." and "..", or one closed meanwhile */
        target[n] = '\0';
        if (strcmp(target, path) == 0)
            fail_msg("descriptor %s holds %s open", e->d_name, path);
    }
    closedir(fds);
    alloc_stats_t before = take();
    raise(sig);
    alloc_stats_t after = take();
    assert_int_equal(after.dumps, before.dumps + 1);
    struct stat grown;
    assert_int_equal(stat(file, &grown), 0);
    assert_true(grown.st_size > want.st_size);
    /* The dump counts itself: its "dumps" is the count with it. */
    size_t len;
    char *text = read_file(file, &len);
    char *last = NULL;
    for (char *at = strstr(text, "\"dumps\":"); at != NULL; at = strstr(at + 1, "\"dumps\":"))
        last = at;
    assert_non_null(last);
    assert_int_equal(strtoul(last + 8, NULL, 10), after.dumps);
    (void)len;
}

/* Moving STATS_SIGNAL gives the old signal back only where shoal's
 * handler is still there: a handler the program put there since stays
 * (it was replaced by SIG_DFL, and the next such signal killed the
 * process).  Setting the same signal again moves nothing. */
static volatile sig_atomic_t mine_got;

static void mine(int sig)
{
    (void)sig;
    mine_got++;
}

static void test_signal_moves_leave_program_handlers(void **state)
{
    (void)state;
    long saved = alloc_option_get(ALLOC_OPTION_STATS_SIGNAL);
    int a = SIGRTMIN + 5, b = SIGRTMIN + 6;
    struct sigaction cur, sa = { 0 };
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, a), 0);
    assert_int_equal(sigaction(a, NULL, &cur), 0);
    void (*shoals)(int) = cur.sa_handler;
    assert_true(shoals != SIG_DFL && shoals != SIG_IGN);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, a), 0);     /* again */
    assert_int_equal(sigaction(a, NULL, &cur), 0);
    assert_ptr_equal(cur.sa_handler, shoals);
    /* The program takes signal a over, then shoal moves to b. */
    sa.sa_handler = mine;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(a, &sa, NULL), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, b), 0);
    assert_int_equal(sigaction(a, NULL, &cur), 0);
    assert_ptr_equal(cur.sa_handler, mine);
    raise(a);
    assert_int_equal(mine_got, 1);
    /* b had shoal's handler, and gets SIG_DFL back. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, 0), 0);
    assert_int_equal(sigaction(b, NULL, &cur), 0);
    assert_ptr_equal(cur.sa_handler, SIG_DFL);
    sa.sa_handler = SIG_DFL;
    sigaction(a, &sa, NULL);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, saved), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejects_small_struct),
        cmocka_unit_test(test_older_struct_gets_its_prefix),
        cmocka_unit_test(test_peaks_after_reads),
        cmocka_unit_test(test_peaks_sampled_between_reads),
        cmocka_unit_test(test_failed_requests_leave_committed_peak),
        cmocka_unit_test(test_counters_exact),
        cmocka_unit_test(test_metadata_counted),
        cmocka_unit_test(test_purge_due),
        cmocka_unit_test(test_bins),
        cmocka_unit_test(test_remote_frees_counted),
        cmocka_unit_test(test_text_report),
        cmocka_unit_test(test_signal_storm),
        cmocka_unit_test(test_stats_file_not_held),
        cmocka_unit_test(test_signal_moves_leave_program_handlers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
