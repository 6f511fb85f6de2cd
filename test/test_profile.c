/* test_profile.c - heap profiles: what they attribute to whom, read back
 * from the files shoal writes.
 *
 * Sites are noinline functions of this program (exported, so dladdr
 * names them); a profile line is credited to the site its first address
 * falls in.  Shares are checked at the default rate on enough live bytes
 * that the sampling error is one to two points (400 MiB: some 800
 * samples), against a tolerance of six, over three and a half standard
 * deviations.  Under ThreadSanitizer the bytes and the
 * rate are both an eighth: the same number of samples. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shoal.h"
#include "core/expo.h"
#include "test_util.h"

#ifdef UNDER_TSAN
#define SCALE 8
#else
#define SCALE 1
#endif
#define MiB ((size_t)1 << 20)
#define RATE (((size_t)512 << 10) / SCALE)

/* ---- reading a profile back ------------------------------------------- */

#define MAX_SITES 8
typedef struct profile_s {
    unsigned long live_objs, live_bytes, total_objs, total_bytes;   /* the header */
    unsigned long site_live[MAX_SITES], site_total[MAX_SITES];
    unsigned long other_live;           /* lines of no site of ours */
    unsigned lines;
    int has_maps;
} profile_t;

static const char *site_names[MAX_SITES];

static int site_of(void *pc)
{
    Dl_info info;
    if (dladdr(pc, &info) == 0 || info.dli_sname == NULL)
        return -1;
    for (int i = 0; i < MAX_SITES && site_names[i] != NULL; i++)
        if (strcmp(info.dli_sname, site_names[i]) == 0)
            return i;
    return -1;
}

static void read_profile(const char *path, profile_t *p)
{
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("no profile at %s: %s", path, strerror(errno));
    char line[8192];
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(sscanf(line, "heap profile: %lu: %lu [%lu: %lu] @ heapprofile",
                            &p->live_objs, &p->live_bytes, &p->total_objs, &p->total_bytes), 4);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strcmp(line, "MAPPED_LIBRARIES:\n") == 0) {
            p->has_maps = fgets(line, sizeof line, f) != NULL;
            break;
        }
        if (line[0] == '\n')
            continue;
        unsigned long lo, lb, to, tb;
        int at;
        if (sscanf(line, "%lu: %lu [%lu: %lu] @%n", &lo, &lb, &to, &tb, &at) != 4)
            fail_msg("a line google-pprof cannot read in %s: %s", path, line);
        void *pc = (void *)strtoul(line + at, NULL, 16);
        assert_non_null(pc);
        int s = site_of(pc);
        if (s >= 0) {
            p->site_live[s] += lb;
            p->site_total[s] += tb;
        } else {
            p->other_live += lb;
        }
        p->lines++;
    }
    fclose(f);
    assert_true(p->has_maps);
}

/* Where profiles go: SHOAL_PROF_PREFIX, which ctest sets, as shoal's
 * own do. */
static const char *prefix(void)
{
    const char *p = getenv("SHOAL_PROF_PREFIX");
    return p != NULL ? p : "/tmp/test_profile";
}

static char *profile_path(const char *what)
{
    static char path[512];
    snprintf(path, sizeof path, "%s.%d.%s.heap", prefix(), (int)getpid(), what);
    return path;
}

static void dump(const char *what, profile_t *p)
{
    char *path = profile_path(what);
    assert_int_equal(alloc_prof_dump(path), 0);
    read_profile(path, p);
    unlink(path);
}

static double share(const profile_t *p, int site, int nsites)
{
    unsigned long sum = 0;
    for (int i = 0; i < nsites; i++)
        sum += p->site_live[i];
    return sum != 0 ? (double)p->site_live[site] / (double)sum : 0;
}

static void near(double got, double want, double tol, const char *what)
{
    if (got < want - tol || got > want + tol)
        fail_msg("%s: %.3f, expected %.3f +- %.3f", what, got, want, tol);
}

/* ---- blocks with patterns --------------------------------------------- */

typedef struct blocks_s {
    unsigned char **p;
    size_t n, size;
    size_t held;                /* their usable bytes: what a profile counts */
} blocks_t;

static void fill(unsigned char *b, size_t size, size_t i)
{
    memset(b, (int)(i * 7 + 1), size < 256 ? size : 256);
    b[size - 1] = (unsigned char)i;
}

static void check_and_free(blocks_t *bs)
{
    for (size_t i = 0; i < bs->n; i++) {
        unsigned char *b = bs->p[i];
        for (size_t k = 0; k + 1 < bs->size && k < 256; k++)
            if (b[k] != (unsigned char)(i * 7 + 1))
                fail_msg("block %zu of %zu bytes changed at %zu", i, bs->size, k);
        assert_int_equal(b[bs->size - 1], (unsigned char)i);
        alloc_free(b);
    }
    free(bs->p);
    bs->n = 0;
}

/* The sites: one function each, so that each has its own stack.  Not
 * cloned: a clone for a call with constant arguments (site_b.constprop.0)
 * is a local symbol, and dladdr names the exported one before it. */
#define SITE(name)                                                                          \
    __attribute__((noinline, noclone, visibility("default"))) void name(                    \
        blocks_t *bs, size_t size, size_t bytes)                                            \
    {                                                                                       \
        bs->size = size;                                                                    \
        bs->n = bytes / size;                                                               \
        bs->p = malloc(bs->n * sizeof *bs->p);                                              \
        for (size_t i = 0; i < bs->n; i++) {                                                \
            bs->p[i] = alloc_malloc(size);                                                  \
            assert_non_null(bs->p[i]);                                                      \
            fill(bs->p[i], size, i);                                                        \
        }                                                                                   \
        bs->held = bs->n * alloc_usable_size(bs->p[0]);                                     \
        __asm__ volatile("" ::: "memory"); /* no tail call: the site keeps its frame */    \
    }
SITE(site_a)
SITE(site_b)
SITE(site_c)
SITE(site_leak)
SITE(site_off)

/* Replaces a block of bs picked at random, `steps` times: where bs's
 * blocks fill their pages, each free goes to the heap's stash (its page
 * is full) and the next malloc takes that block back from there. */
__attribute__((noinline, noclone, visibility("default"))) void site_replace(blocks_t *bs,
                                                                              size_t steps)
{
    uint64_t x = 88172645463325252u;
    for (size_t s = 0; s < steps; s++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = x % bs->n;
        alloc_free(bs->p[i]);
        bs->p[i] = alloc_malloc(bs->size);
        assert_non_null(bs->p[i]);
        fill(bs->p[i], bs->size, i);
    }
    __asm__ volatile("" ::: "memory");
}

static void profiling(size_t rate)
{
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF_SAMPLE, (long)rate), 0);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF, 1), 0);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_PROF), 1);
}

/* ---- the tests -------------------------------------------------------- */

/* 60/30/10 of the live bytes from three sites; then the 60% site frees
 * its blocks and leaves the next profile. */
static void test_shares(void **state)
{
    (void)state;
    site_names[0] = "site_a", site_names[1] = "site_b", site_names[2] = "site_c";
    profiling(RATE);
    blocks_t a, b, c;
    site_a(&a, 1000, 240 * MiB / SCALE);
    site_b(&b, 1000, 120 * MiB / SCALE);
    site_c(&c, 1000, 40 * MiB / SCALE);
    profile_t p;
    dump("shares", &p);
    near(share(&p, 0, 3), 0.6, 0.06, "site_a's share");
    near(share(&p, 1, 3), 0.3, 0.06, "site_b's share");
    near(share(&p, 2, 3), 0.1, 0.06, "site_c's share");
    /* The estimate of the whole: 400 MiB and a little of cmocka's. */
    near((double)p.live_bytes / (400.0 * MiB / SCALE), 1.0, 0.15, "live bytes estimated / true");
    check_and_free(&a);
    dump("shares_after", &p);
    assert_int_equal(p.site_live[0], 0);        /* every sample of a was freed */
    assert_true(p.site_total[0] > 0);           /* and stays in the cumulative figures */
    /* About 320 samples: over 40 runs (one loaded machine) the share
     * came out 0.747 on average, 0.021 apart, the lowest 0.685; one CI
     * run saw 0.670.  The band is 0.10: a bias of that size is still
     * caught, a run of bad luck less often taken for one. */
    near(share(&p, 1, 3), 0.75, 0.10, "site_b's share after a's frees");
    check_and_free(&b);
    check_and_free(&c);
    dump("shares_none", &p);
    assert_int_equal(p.site_live[1] + p.site_live[2], 0);
}

/* Equal bytes in small, large and huge blocks: shares of the memory they
 * hold, their usable size (a 192 KiB block holds 256 KiB), whatever the
 * size: a huge block is sampled almost surely, a 48-byte one once in
 * 11000. */
static void test_unbiased_across_sizes(void **state)
{
    (void)state;
    site_names[0] = "site_a", site_names[1] = "site_b", site_names[2] = "site_c";
    profiling(RATE);
    blocks_t a, b, c;
    site_a(&a, 48, 96 * MiB / SCALE);
    site_b(&b, 192 << 10, 96 * MiB / SCALE);
    site_c(&c, 6 * MiB, 96 * MiB / SCALE);
    profile_t p;
    dump("sizes", &p);
    double held = (double)(a.held + b.held + c.held);
    near(share(&p, 0, 3), (double)a.held / held, 0.07, "48-byte blocks' share");
    near(share(&p, 1, 3), (double)b.held / held, 0.07, "192 KiB blocks' share");
    near(share(&p, 2, 3), (double)c.held / held, 0.07, "6 MiB blocks' share");
    near((double)p.site_live[0] / (double)a.held, 1.0, 0.3, "48-byte blocks estimated / true");
    check_and_free(&a);
    check_and_free(&b);
    check_and_free(&c);
    dump("sizes_after", &p);
    assert_int_equal(p.site_live[0] + p.site_live[1] + p.site_live[2], 0);
}

/* `live` blocks of `size` made at site_b, replaced at random at
 * site_replace, 256 MiB in all: the bytes that site made are estimated
 * right (about 500 samples: a standard error of 4.5%).  Its total is
 * cumulative: taken as the difference of two profiles. */
static void replaced_bytes_estimated(size_t size, size_t live, const char *what)
{
    site_names[0] = "site_replace", site_names[1] = "site_b", site_names[2] = NULL;
    profiling(RATE);
    blocks_t b;
    site_b(&b, size, live * size);
    size_t usable = alloc_usable_size(b.p[0]), steps = 256 * MiB / SCALE / usable;
    profile_t before, p;
    dump(what, &before);
    site_replace(&b, steps);
    dump(what, &p);
    near((double)(p.site_total[0] - before.site_total[0]) / (double)(steps * usable), 1.0, 0.2,
         "replaced bytes estimated / true");
    check_and_free(&b);
}

/* Blocks handed out by the stash pass no page's trap; the thread's
 * count of such bytes samples them: 48 blocks of 20000 B (three to a
 * page, every page full), nearly every malloc served from the stash. */
static void test_stashed_blocks_sampled(void **state)
{
    (void)state;
    replaced_bytes_estimated(20000, 48, "stashed");
}

/* A block freed into a page the thread allocates from goes out again at
 * the next malloc of its class, before the page's other free blocks -
 * but not in a profiled heap, where the page's sample trap stands a
 * drawn number of blocks into its free list, and a block pushed in
 * front of it would go out uncounted: 8 blocks of 1500 B (42 to a page,
 * of a class no test before used). */
static void test_block_freed_and_made_again_sampled(void **state)
{
    (void)state;
    replaced_bytes_estimated(1500, 8, "made_again");
}

/* A forked child profiles, leaks from one site, frees the other's
 * blocks, and exits: its leak report names the leaking site only. */
static void test_leak_report_in_a_fork_child(void **state)
{
    (void)state;
    site_names[0] = "site_leak", site_names[1] = "site_a", site_names[2] = NULL;
    alloc_option_set(ALLOC_OPTION_PROF, 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        profiling(RATE);
        alloc_option_set(ALLOC_OPTION_PROF_LEAKS, 1);
        blocks_t leak, a;
        site_leak(&leak, 4000, 64 * MiB / SCALE);
        site_a(&a, 4000, 64 * MiB / SCALE);
        check_and_free(&a);
        exit(0);                /* the report is written at exit */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s.%d.leaks.heap", prefix(), (int)pid);
    profile_t p;
    read_profile(path, &p);
    unlink(path);
    near((double)p.site_live[0] / (64.0 * MiB / SCALE), 1.0, 0.35, "leaked bytes estimated / true");
    assert_int_equal(p.site_live[1], 0);
    assert_true(p.site_total[1] > 0);
}

/* Allocating threads, and stats signals arriving on any of them: every
 * signal writes a profile, or is dropped if it lands inside the table. */
static atomic_int stop;

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned char *keep[64] = { 0 };
    size_t sizes[64] = { 0 };
    while (!atomic_load(&stop)) {
        unsigned i = (unsigned)rand_r(&seed) % 64;
        if (keep[i] != NULL) {
            for (size_t k = 0; k < sizes[i]; k += 512)
                assert_int_equal(keep[i][k], (unsigned char)sizes[i]);
            alloc_free(keep[i]);
        }
        sizes[i] = 16 + (size_t)rand_r(&seed) % (rand_r(&seed) % 8 == 0 ? 300000 : 2000);
        keep[i] = alloc_malloc(sizes[i]);
        assert_non_null(keep[i]);
        for (size_t k = 0; k < sizes[i]; k += 512)
            keep[i][k] = (unsigned char)sizes[i];
    }
    for (unsigned i = 0; i < 64; i++)
        alloc_free(keep[i]);
    return NULL;
}

static void test_signal_dumps_while_threads_allocate(void **state)
{
    (void)state;
    site_names[0] = NULL;
    profiling(16 << 10);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, SIGUSR2), 0);
    pthread_t t[4];
    atomic_store(&stop, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < 20; i++) {
        usleep(20000);
        kill(getpid(), SIGUSR2);
    }
    usleep(20000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, 0);
    /* Profiles .0, .1, ... in order; most signals wrote one. */
    unsigned found = 0;
    for (unsigned seq = 0; seq < 40; seq++) {
        char path[512];
        snprintf(path, sizeof path, "%s.%d.%u.heap", prefix(),
                 (int)getpid(), seq);
        if (access(path, R_OK) != 0)
            continue;
        profile_t p;
        read_profile(path, &p);
        assert_true(p.lines > 0);
        unlink(path);
        found++;
    }
    if (found < 10)
        fail_msg("only %u of 20 signals wrote a profile", found);
}

/* Threads sample while the main thread forks: each child can sample,
 * dump and free, and exits clean. */
static void test_fork_while_sampling(void **state)
{
    (void)state;
    site_names[0] = "site_a", site_names[1] = NULL;
    profiling(4 << 10);
    pthread_t t[2];
    atomic_store(&stop, 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 7)), 0);
    for (int round = 0; round < 5; round++) {
        usleep(10000);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            blocks_t a;
            site_a(&a, 100, 4 * MiB);
            char path[512];
            snprintf(path, sizeof path, "%s.child.%d.heap", prefix(),
                     (int)getpid());
            int err = alloc_prof_dump(path);
            profile_t p;
            read_profile(path, &p);
            unlink(path);
            check_and_free(&a);
            _exit(err == 0 && p.site_live[0] > 0 ? 0 : 1);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
}

/* Every allocation sampled: the whole API on sampled blocks, frees from
 * another thread, and a double free still caught. */
static void *free_all(void *arg)
{
    check_and_free(arg);
    return NULL;
}

static void test_every_allocation_sampled(void **state)
{
    (void)state;
    site_names[0] = "site_a", site_names[1] = NULL;
    profiling(1);
    static const size_t sizes[] = { 1, 16, 100, 1024, 5000, 40000, 100000, 1 << 20, 5 << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = alloc_malloc(n);
        assert_non_null(p);
        assert_true(alloc_usable_size(p) >= n);
        memset(p, 0x5a, n);
        p = alloc_realloc(p, n * 3);
        assert_non_null(p);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(p[k], 0x5a);
        p = alloc_realloc(p, n / 2 + 1);
        assert_int_equal(p[n / 2], 0x5a);
        alloc_free(p);
        unsigned char *z = alloc_calloc(1, n);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(z[k], 0);
        alloc_free_sized(z, n);
        void *al = alloc_aligned(4096, n);
        assert_int_equal((uintptr_t)al % 4096, 0);
        alloc_free(al);
        unsigned char *al64 = alloc_aligned(64, n);         /* malloc's pop, sampled */
        assert_int_equal((uintptr_t)al64 % 64, 0);
        memset(al64, 0x6b, n);
        assert_int_equal(al64[n - 1], 0x6b);
        alloc_free(al64);
    }
    blocks_t a;
    site_a(&a, 64, 64 << 10);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_all, &a), 0);
    pthread_join(t, NULL);
    profile_t p;
    dump("every", &p);
    assert_int_equal(p.site_live[0], 0);
    assert_true(p.site_total[0] >= (64u << 10));        /* 1024 samples, each of 64 bytes */

    /* A double free of a sampled block is caught as any other. */
    long on_error = alloc_option_get(ALLOC_OPTION_ON_ERROR);
    alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN);
    void *x = alloc_malloc(32);
    alloc_free(x);
    alloc_free(x);
    void *y = alloc_malloc(32), *w = alloc_malloc(32);
    assert_ptr_not_equal(y, w);
    alloc_free(y);
    alloc_free(w);
    alloc_option_set(ALLOC_OPTION_ON_ERROR, on_error);
}

/* Off: no profile.  Turned off after it was on, pages armed before keep
 * serving, and nothing more is sampled. */
static void test_off(void **state)
{
    (void)state;
    site_names[0] = "site_a", site_names[1] = "site_off", site_names[2] = NULL;
    profiling(1);
    blocks_t a;
    site_a(&a, 200, 1 << 20);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF, 0), 0);
    assert_int_equal(alloc_prof_dump(profile_path("off")), EINVAL);
    blocks_t b;
    site_off(&b, 200, 1 << 20);         /* from the same, armed, pages */
    check_and_free(&a);
    check_and_free(&b);
    profiling(1);
    profile_t p;
    dump("off", &p);
    assert_int_equal(p.site_live[0], 0);
    assert_int_equal(p.site_total[1], 0);       /* site_off's came while it was off */
    alloc_option_set(ALLOC_OPTION_PROF, 0);
}

static size_t slots_used(void)
{
    alloc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    assert_int_equal(alloc_stats_get(&st), 0);
    return st.pool_slots_used;
}

static void assert_all(const char *b, size_t n, char v)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != v)
            fail_msg("byte %zu of %zu changed", i, n);
}

/* While profiling is on, a heap's large blocks go by the slow paths (to
 * be counted for sampling), and its cache of freed ones still serves
 * them: a freed block comes back to the next malloc of its size, the
 * same address, with its new contents kept; turned off, the cache is
 * the fast paths' again, with the block in it. */
static void test_large_cache_while_profiling(void **state)
{
    (void)state;
    profiling(512 << 10);
    alloc_collect(true);
    char *p = alloc_malloc(200 << 10);          /* 4 slots: 256 KiB */
    assert_non_null(p);
    memset(p, 1, 200 << 10);
    size_t used = slots_used();
    alloc_free(p);
    assert_int_equal(slots_used(), used);      /* kept by the cache, not given back */
    char *q = alloc_malloc(250 << 10);          /* 4 slots too */
    assert_ptr_equal(q, p);
    assert_int_equal(alloc_usable_size(q), 256 << 10);
    memset(q, 2, 256 << 10);
    assert_all(q, 256 << 10, 2);
    alloc_free(q);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PROF, 0), 0);
    char *r = alloc_malloc(193 << 10);
    assert_ptr_equal(r, p);
    memset(r, 3, 193 << 10);
    assert_all(r, 193 << 10, 3);
    alloc_free(r);
    assert_int_equal(slots_used(), used);
    alloc_collect(true);                        /* now it goes */
    assert_true(slots_used() + 4 <= used);
}

/* The draws' two functions (core/expo.h, no libm in shoal) against
 * libm's, over their whole ranges and at both ends. */
static void test_expo_matches_libm(void **state)
{
    (void)state;
    for (double y = 0x1.0p-53; y <= 1.0; y *= 1.0009765625) {
        double want = -log(y), got = shoal_neg_log(y);
        if (fabs(got - want) > 1e-14 * (want > 1.0 ? want : 1.0))
            fail_msg("-log(%a): %.17g, libm %.17g", y, got, want);
    }
    assert_true(shoal_neg_log(1.0) == 0.0);
    for (double y = 1.0 - 0x1.0p-40; y < 1.0; y += 0x1.0p-44) {     /* just below 1 */
        double want = -log1p(y - 1.0), got = shoal_neg_log(y);
        if (fabs(got - want) > 1e-14 * want)
            fail_msg("-log(1 - %a): %.17g, libm %.17g", 1.0 - y, got, want);
    }
    for (double x = 0x1.0p-60; x < 800.0; x *= 1.001) {
        double want = -expm1(-x), got = shoal_one_minus_exp_neg(x);
        if (fabs(got - want) > 1e-14 * want)
            fail_msg("1 - exp(-%a): %.17g, libm %.17g", x, got, want);
    }
    assert_true(shoal_one_minus_exp_neg(0.0) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares),
        cmocka_unit_test(test_unbiased_across_sizes),
        cmocka_unit_test(test_stashed_blocks_sampled),
        cmocka_unit_test(test_block_freed_and_made_again_sampled),
        cmocka_unit_test(test_leak_report_in_a_fork_child),
        cmocka_unit_test(test_signal_dumps_while_threads_allocate),
        cmocka_unit_test(test_fork_while_sampling),
        cmocka_unit_test(test_every_allocation_sampled),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_large_cache_while_profiling),
        cmocka_unit_test(test_expo_matches_libm),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
