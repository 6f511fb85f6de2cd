/* Statistics: counters follow a known sequence of allocations exactly,
 * the text report has its sections, and a signal storm while two threads
 * allocate ends with every dump complete (run with SHOAL_STATS_SIGNAL,
 * SHOAL_STATS_FILE and SHOAL_STATS_JSON set by ctest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    alloc_stats_t st = { .size = sizeof st - 1 };
    assert_int_equal(alloc_stats_get(&st), EINVAL);
    assert_int_equal(alloc_stats_get(NULL), EINVAL);
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

typedef struct remote_s {
    void *blocks[64];
} remote_t;

/* Frees the blocks another thread made; with `own`, first makes a heap
 * of its own (so it also exits with one). */
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
        assert_int_equal(b.heaps_exited - a.heaps_exited, with_heap);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejects_small_struct),
        cmocka_unit_test(test_counters_exact),
        cmocka_unit_test(test_remote_frees_counted),
        cmocka_unit_test(test_text_report),
        cmocka_unit_test(test_signal_storm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
