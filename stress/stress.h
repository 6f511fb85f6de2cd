/* stress.h - what the stress programs share: options (quick and --long),
 * a random generator, content patterns that every byte of a block is
 * checked against, failure reporting, and the end-of-run accounting check.
 *
 * The programs use the alloc_* API only and link shoal_core (the allocator
 * without the libc override), so they build and run under every sanitizer,
 * ThreadSanitizer included, whose runtime owns malloc itself.
 *
 * Patterns.  A block of n bytes gets a 64-bit key when it is made (mixed
 * from its address, its size and the run's seed); byte j of the block is
 * byte j % 8 of pat_word(key, j / 8).  The key travels with the block, so
 * after a realloc the bytes that were kept must still match and the new
 * tail is filled from the same key.  A byte handed out twice, a free list
 * link written into a live block, a wrong memcpy length or a page given to
 * two owners all show up as a mismatch at the exact byte.
 */
#ifndef SHOAL_STRESS_H
#define SHOAL_STRESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shoal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the content patterns assume a little-endian machine (x86-64, aarch64)"
#endif

/* ---- which sanitizer, if any ------------------------------------------ */

#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define STRESS_ASAN 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(STRESS_TSAN)
#define STRESS_TSAN 1
#endif
#if __has_feature(address_sanitizer) && !defined(STRESS_ASAN)
#define STRESS_ASAN 1
#endif
#endif

/* A sanitizer report must fail the run even when nobody set *SAN_OPTIONS:
 * these are the runtime's defaults, and the environment still overrides
 * them.  ThreadSanitizer then stops at the first report with exit code 66
 * (it also exits 66 at the end of a run that had reports); UBSan, which
 * otherwise reports and carries on with status 0, aborts.  The build
 * passes the project's suppressions files, where they exist, as
 * STRESS_TSAN_SUPPRESSIONS (test/tsan.supp: library frames TSan cannot see
 * through) and STRESS_UBSAN_SUPPRESSIONS (test/ubsan.supp), so a plain
 * `ctest` in a sanitizer build reads them as the test command does. */
#ifdef STRESS_TSAN
__attribute__((visibility("default"), used)) const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
#ifdef STRESS_TSAN_SUPPRESSIONS
    return "halt_on_error=1:exitcode=66:second_deadlock_stack=1:"
           "suppressions='" STRESS_TSAN_SUPPRESSIONS "'";
#else
    return "halt_on_error=1:exitcode=66:second_deadlock_stack=1";
#endif
}
#endif
__attribute__((visibility("default"), used)) const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
#ifdef STRESS_UBSAN_SUPPRESSIONS
    return "halt_on_error=1:print_stacktrace=1:suppressions='" STRESS_UBSAN_SUPPRESSIONS "'";
#else
    return "halt_on_error=1:print_stacktrace=1";
#endif
}

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* ---- failure ---------------------------------------------------------- */

static const char *stress_name = "stress";

/* Report and abort at once: the first corruption is the one worth
 * reading, and the process state is left as it was for a debugger. */
__attribute__((format(printf, 1, 2), noreturn, cold))
static void stress_fail(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "FAIL: %s: ", stress_name);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
    abort();
}

#define stress_check(cond, ...)                                              \
    do {                                                                      \
        if (__builtin_expect(!(cond), 0))                                     \
            stress_fail(__VA_ARGS__);                                         \
    } while (0)

/* ---- options ---------------------------------------------------------- */

typedef struct stress_opts_s {
    bool long_mode;         /* --long: a soak run of minutes */
    unsigned threads;       /* --threads N (0: the program's default) */
    uint64_t seed;          /* --seed N */
    double scale;           /* --scale X: multiplies the amount of work */
} stress_opts_t;

static double stress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double stress_started;

static void stress_usage(const char *extra)
{
    fprintf(stderr,
            "usage: %s [--long] [--threads N] [--seed N] [--scale X]%s\n"
            "  default: the quick mode (the test suite); --long: a soak run of minutes\n",
            stress_name, extra != NULL ? extra : "");
}

/* Parses the common options; returns the index of the first argument it
 * did not know (argc when all were known). */
static int stress_init(const char *name, int argc, char **argv, stress_opts_t *o)
{
    stress_name = name;
    o->long_mode = false;
    o->threads = 0;
    o->seed = 0;
    o->scale = 1.0;
    bool seeded = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--long") == 0) {
            o->long_mode = true;
        } else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            o->threads = (unsigned)strtoul(argv[++i], NULL, 0);
        } else if (strcmp(a, "--seed") == 0 && i + 1 < argc) {
            o->seed = strtoull(argv[++i], NULL, 0);
            seeded = true;
        } else if (strcmp(a, "--scale") == 0 && i + 1 < argc) {
            o->scale = strtod(argv[++i], NULL);
            if (!(o->scale > 0)) {
                stress_usage(NULL);
                exit(2);
            }
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            stress_usage(NULL);
            exit(0);
        } else {
            break;
        }
    }
    /* The quick mode is reproducible (as far as thread interleaving lets
     * it be); a soak run explores a new seed each time and prints it. */
    if (!seeded)
        o->seed = o->long_mode ? (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) : 1;
    stress_started = stress_now();
    printf("%s: %s mode, seed %" PRIu64 "%s\n", name, o->long_mode ? "long" : "quick", o->seed,
#ifdef STRESS_TSAN
           " (ThreadSanitizer: scaled down)"
#else
           ""
#endif
    );
    fflush(stdout);
    return i;
}

/* stress_init for a program that takes no arguments of its own: false
 * (after the usage) if it was given some. */
static inline bool stress_init_plain(const char *name, int argc, char **argv, stress_opts_t *o)
{
    if (stress_init(name, argc, argv, o) < argc) {
        stress_usage(NULL);
        return false;
    }
    return true;
}

/* Set an option the program needs, or fail. */
static inline void stress_option(alloc_option_t which, long value, const char *what)
{
    stress_check(alloc_option_set(which, value) == 0, "alloc_option_set(%s, %ld) failed", what,
                 value);
}

/* Work counts: the quick figure, the long one, and a divisor for TSan's
 * quick mode (TSan runs this code 5-20 times slower, and the suite must
 * stay under a minute a program on two cores). */
static uint64_t stress_amount(const stress_opts_t *o, uint64_t quick, uint64_t longer,
                              unsigned tsan_div)
{
    uint64_t n = o->long_mode ? longer : quick;
#ifdef STRESS_TSAN
    if (!o->long_mode && tsan_div > 1)
        n /= tsan_div;
#else
    (void)tsan_div;
#endif
    n = (uint64_t)((double)n * o->scale);
    return n ? n : 1;
}

static void stress_done(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ok: ", stress_name);
    vprintf(fmt, ap);
    printf(" (%.1f s)\n", stress_now() - stress_started);
    va_end(ap);
    fflush(stdout);
}

/* ---- random numbers --------------------------------------------------- */

typedef struct { uint64_t s; } rng_t;

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static inline rng_t rng_make(uint64_t seed, uint64_t stream)
{
    rng_t r = { mix64(seed * 0x9e3779b97f4a7c15ull + stream + 1) };
    return r;
}

static inline uint64_t rng_next(rng_t *r)
{
    r->s += 0x9e3779b97f4a7c15ull;       /* splitmix64 */
    return mix64(r->s);
}

/* Uniform in [0, n), n > 0. */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
    return rng_next(r) % n;
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi)
{
    return lo + (size_t)rng_below(r, (uint64_t)(hi - lo) + 1);
}

/* ---- content patterns ------------------------------------------------- */

static inline uint64_t pat_word(uint64_t key, size_t i)
{
    uint64_t x = key + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return x;
}

static inline unsigned char pat_byte(uint64_t key, size_t j)
{
    return (unsigned char)(pat_word(key, j / 8) >> (8 * (j % 8)));
}

static inline uint64_t block_key(const void *p, size_t n, uint64_t seed)
{
    return mix64((uint64_t)(uintptr_t)p ^ mix64(n + 0x632be59bd9b4e019ull) ^ seed);
}

/* Fill bytes [from, to) of p with the pattern of key. */
static inline void pattern_fill(void *p, size_t from, size_t to, uint64_t key)
{
    unsigned char *b = p;
    size_t j = from;
    for (; j < to && (j & 7) != 0; j++)
        b[j] = pat_byte(key, j);
    for (; j + 8 <= to; j += 8) {
        uint64_t w = pat_word(key, j / 8);
        memcpy(b + j, &w, 8);
    }
    for (; j < to; j++)
        b[j] = pat_byte(key, j);
}

/* The first byte in [from, to) that does not match, or SIZE_MAX. */
static inline size_t pattern_find_bad(const void *p, size_t from, size_t to, uint64_t key)
{
    const unsigned char *b = p;
    size_t j = from;
    for (; j < to && (j & 7) != 0; j++)
        if (b[j] != pat_byte(key, j))
            return j;
    for (; j + 8 <= to; j += 8) {
        uint64_t w;
        memcpy(&w, b + j, 8);
        if (w != pat_word(key, j / 8)) {
            for (size_t k = j; k < j + 8; k++)
                if (b[k] != pat_byte(key, k))
                    return k;
        }
    }
    for (; j < to; j++)
        if (b[j] != pat_byte(key, j))
            return j;
    return SIZE_MAX;
}

static inline void pattern_verify(const void *p, size_t from, size_t to, uint64_t key,
                                  const char *where)
{
    size_t bad = pattern_find_bad(p, from, to, key);
    if (bad != SIZE_MAX)
        stress_fail("%s: block %p: byte %zu of [%zu, %zu) is 0x%02x, expected 0x%02x "
                    "(contents corrupted)",
                    where, p, bad, from, to, ((const unsigned char *)p)[bad],
                    pat_byte(key, bad));
}

/* Sparse patterns for blocks too big to write whole (hundreds of MiB):
 * the first and last 4 KiB and 8 bytes every `stride` bytes, so a block
 * touches a bounded number of pages whatever its size. */
static inline size_t sparse_stride(size_t n)
{
    size_t s = n / 64;
    return s < 64 * KiB ? 64 * KiB : (s + 7) & ~(size_t)7;
}

static inline void sparse_fill(void *p, size_t n, uint64_t key)
{
    if (n <= 64 * KiB) {
        pattern_fill(p, 0, n, key);
        return;
    }
    size_t stride = sparse_stride(n);
    pattern_fill(p, 0, 4 * KiB, key);
    for (size_t j = stride; j + 8 <= n; j += stride)
        pattern_fill(p, j, j + 8, key);
    pattern_fill(p, n - 4 * KiB, n, key);
}

static inline void sparse_verify(const void *p, size_t n, uint64_t key, const char *where)
{
    if (n <= 64 * KiB) {
        pattern_verify(p, 0, n, key, where);
        return;
    }
    size_t stride = sparse_stride(n);
    pattern_verify(p, 0, 4 * KiB, key, where);
    for (size_t j = stride; j + 8 <= n; j += stride)
        pattern_verify(p, j, j + 8, key, where);
    pattern_verify(p, n - 4 * KiB, n, key, where);
}

static inline void verify_zero(const void *p, size_t n, const char *where)
{
    const unsigned char *b = p;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        uint64_t w;
        memcpy(&w, b + j, 8);
        if (w != 0)
            break;
    }
    for (; j < n; j++)
        if (b[j] != 0)
            stress_fail("%s: calloc block %p of %zu bytes: byte %zu is 0x%02x, not zero", where,
                        p, n, j, b[j]);
}

/* A fresh block's basic promises: not NULL (checked by the caller),
 * aligned to at least 16 bytes (or `align`), and at least n usable. */
static inline void check_new_block(const void *p, size_t n, size_t align, const char *where)
{
    size_t a = align < 16 ? 16 : align;
    if (n == 0)
        a = align > 1 ? align : 1;  /* a zero-byte block need not be 16-aligned */
    stress_check(((uintptr_t)p & (a - 1)) == 0, "%s: block %p of %zu bytes not aligned to %zu",
                 where, p, n, a);
    size_t u = alloc_usable_size(p);
    stress_check(u >= n, "%s: block %p: usable size %zu < requested %zu", where, p, u, n);
}

/* ---- ThreadSanitizer and mremap ---------------------------------------
 *
 * ThreadSanitizer (clang 14) does not intercept mremap.  Memory a thread's
 * huge block gives up by a shrinking or moving mremap keeps that thread's
 * access history in TSan's shadow; when another thread's huge block later
 * grows over the same addresses by mremap, TSan sees its writes race with
 * the stale history (a race that is not there), and spends minutes trying
 * to restore the old stacks.  So under TSan, where more than one thread
 * could realloc huge blocks (above 2 MiB, the pool's largest), the
 * programs leave those reallocs out; the plain build and the other
 * sanitizers run them.  (stress_realloc still grows a huge array under
 * TSan, from one thread only.) */
#define STRESS_POOL_MAX (2 * MiB)

static inline bool stress_huge_realloc_ok(size_t old_n, size_t new_n)
{
#ifdef STRESS_TSAN
    return old_n <= STRESS_POOL_MAX && new_n <= STRESS_POOL_MAX;
#else
    (void)old_n;
    (void)new_n;
    return true;
#endif
}

/* ---- a table that threads swap blocks through -------------------------
 * A thread puts its new block, pattern-filled, into a slot under the
 * table's lock and frees, checked, the block it gets back: most often
 * another thread's, so most frees are remote.  `slots` is the program's
 * own array. */
typedef struct stress_entry_s {
    unsigned char *p;
    size_t n;
    uint64_t key;
} stress_entry_t;

static pthread_mutex_t stress_table_lock = PTHREAD_MUTEX_INITIALIZER;

static inline stress_entry_t stress_swap(stress_entry_t *slots, unsigned slot, stress_entry_t e)
{
    pthread_mutex_lock(&stress_table_lock);
    stress_entry_t old = slots[slot];
    slots[slot] = e;
    pthread_mutex_unlock(&stress_table_lock);
    return old;
}

/* Check e's pattern (sparse_fill's) and free it; nothing for an empty
 * slot. */
static inline void stress_drop(stress_entry_t e, const char *where)
{
    if (e.p == NULL)
        return;
    sparse_verify(e.p, e.n, e.key, where);
    alloc_free(e.p);
}

/* p, a new block of n bytes, filled (its key from seed) and put in
 * slot; the block that was there checked and freed. */
static inline void stress_hand_on(stress_entry_t *slots, unsigned slot, unsigned char *p,
                                  size_t n, uint64_t seed, const char *where)
{
    stress_entry_t e = { p, n, block_key(p, n, seed) };
    sparse_fill(p, n, e.key);
    stress_drop(stress_swap(slots, slot, e), where);
}

/* Free, checked, what the table still holds (at the end). */
static inline void stress_table_drain(stress_entry_t *slots, unsigned n, const char *where)
{
    for (unsigned s = 0; s < n; s++)
        stress_drop(stress_swap(slots, s, (stress_entry_t){ NULL, 0, 0 }), where);
}

/* ---- end of run ------------------------------------------------------- */

/* The allocator's statistics, now. */
static inline alloc_stats_t stress_stats(void)
{
    alloc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    stress_check(alloc_stats_get(&st) == 0, "alloc_stats_get failed");
    return st;
}

/* After every block is freed and every other thread joined: the
 * allocator's own accounting must say nothing is live, and a forced
 * collect must leave no page of an exited thread unadopted and hand every
 * pool slot back. */
static void stress_check_quiescent(void)
{
    alloc_collect(true);
    alloc_stats_t st = stress_stats();
    size_t live = 0;
    for (unsigned c = 0; c < ALLOC_STATS_CLASSES; c++)
        live += st.classes[c].live_blocks;
    stress_check(live == 0, "everything was freed, but the statistics count %zu live small "
                            "blocks (%zu bytes allocated)", live, st.allocated);
    stress_check(st.large_live == 0 && st.huge_live == 0,
                 "everything was freed, but the statistics count %zu large and %zu huge "
                 "live blocks", st.large_live, st.huge_live);
    stress_check(st.heaps_abandoned_pages == 0,
                 "%zu pages of exited threads left after alloc_collect(true)",
                 st.heaps_abandoned_pages);
    stress_check(st.pool_slots_used == 0,
                 "%zu pool slots still in use after everything was freed and "
                 "alloc_collect(true)", st.pool_slots_used);
}

/* ---- threads ---------------------------------------------------------- */

static inline void stress_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(t, NULL, fn, arg);
    stress_check(rc == 0, "pthread_create: %s", strerror(rc));
}

static inline void stress_thread_join(pthread_t t)
{
    int rc = pthread_join(t, NULL);
    stress_check(rc == 0, "pthread_join: %s", strerror(rc));
}

/* Run fn on n threads at once (at most 64), each given its index, and
 * wait for them all. */
static inline void stress_run_threads(unsigned n, void *(*fn)(void *))
{
    pthread_t t[64];
    if (n > 64)
        n = 64;
    for (unsigned i = 0; i < n; i++)
        stress_thread_start(&t[i], fn, (void *)(uintptr_t)i);
    for (unsigned i = 0; i < n; i++)
        stress_thread_join(t[i]);
}

#endif
