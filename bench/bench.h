/* bench.h - shared helpers for the shoal benchmark workloads.
 *
 * Every workload is a plain C11 program that uses only the standard
 * malloc family, so the same binary runs under any allocator loaded with
 * LD_PRELOAD.  Output protocol (read by bench/run):
 *
 *   METRIC <name> <value> <unit>     one measured figure
 *   INFO <text>                      anything else worth showing
 *   OK                               last line: every self-check passed
 *
 * A failed self-check prints "FAIL ..." on stderr and exits with status 2.
 * Timing is never checked: only results are.
 */
#ifndef SHOAL_BENCH_H
#define SHOAL_BENCH_H

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_UNUSED __attribute__((unused))

/* Keep the compiler from eliding an allocation, or from folding stores to
 * it: the pointer escapes into an empty asm that clobbers memory. */
static inline void bench_escape(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static BENCH_UNUSED __attribute__((format(printf, 1, 2), noreturn))
void bench_fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("FAIL ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

#define BENCH_CHECK(cond, ...)                                            \
    do {                                                                  \
        if (!(cond))                                                      \
            bench_fail(__VA_ARGS__);                                      \
    } while (0)

static BENCH_UNUSED void bench_metric(const char *name, double value, const char *unit)
{
    printf("METRIC %s %.6g %s\n", name, value, unit);
    fflush(stdout);
}

static BENCH_UNUSED __attribute__((format(printf, 1, 2)))
void bench_info(const char *fmt, ...)
{
    va_list ap;
    fputs("INFO ", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

static BENCH_UNUSED void bench_ok(void)
{
    puts("OK");
    fflush(stdout);
}

/* xorshift64*: a small, fast, seedable generator (one per thread). */
typedef struct { uint64_t s; } bench_rng_t;

static inline void bench_rng_seed(bench_rng_t *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (r->s == 0)
        r->s = 1;
}

static inline uint64_t bench_rng_next(bench_rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]. */
static inline uint64_t bench_rng_range(bench_rng_t *r, uint64_t lo, uint64_t hi)
{
    return lo + bench_rng_next(r) % (hi - lo + 1);
}

/* A byte pattern that depends on a tag and a position: blocks are filled
 * with it and verified before they are freed. */
static inline unsigned char bench_pat(uint64_t tag, size_t i)
{
    return (unsigned char)((tag * 31u + i * 7u) ^ (tag >> 11));
}

static BENCH_UNUSED void bench_fill(unsigned char *p, size_t n, uint64_t tag)
{
    for (size_t i = 0; i < n; i++)
        p[i] = bench_pat(tag, i);
}

/* 0 when the block still holds its pattern; else 1 + the first bad index. */
static BENCH_UNUSED size_t bench_verify(const unsigned char *p, size_t n, uint64_t tag)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != bench_pat(tag, i))
            return i + 1;
    return 0;
}

/* Cheap stamp for blocks of any size: a header word (the tag) and the
 * last byte, or every byte of blocks under 16 bytes; checks that neither
 * end was overwritten by another allocation. */
static inline void bench_stamp(unsigned char *p, size_t n, uint64_t tag)
{
    if (n >= 16) {
        memcpy(p, &tag, sizeof tag);
        p[n - 1] = (unsigned char)(tag ^ 0x5a);
    } else {
        for (size_t i = 0; i < n; i++)
            p[i] = bench_pat(tag, i);
    }
}

static inline int bench_stamp_ok(const unsigned char *p, size_t n, uint64_t tag)
{
    if (n >= 16) {
        uint64_t t;
        memcpy(&t, p, sizeof t);
        return t == tag && p[n - 1] == (unsigned char)(tag ^ 0x5a);
    }
    for (size_t i = 0; i < n; i++)
        if (p[i] != bench_pat(tag, i))
            return 0;
    return 1;
}

/* Option parsing: every workload takes --name value pairs. */
static BENCH_UNUSED long bench_arg_long(int argc, char **argv, const char *name, long dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) {
            char *end;
            errno = 0;
            long v = strtol(argv[i + 1], &end, 0);
            if (errno || end == argv[i + 1])
                bench_fail("bad value for %s: %s", name, argv[i + 1]);
            switch (*end) {
            case 'k': case 'K': v <<= 10; break;
            case 'm': case 'M': v <<= 20; break;
            case 'g': case 'G': v <<= 30; break;
            default: break;
            }
            return v;
        }
    return dflt;
}

static BENCH_UNUSED double bench_arg_double(int argc, char **argv, const char *name, double dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return strtod(argv[i + 1], NULL);
    return dflt;
}

static BENCH_UNUSED const char *bench_arg_str(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return dflt;
}

static BENCH_UNUSED void bench_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(t, NULL, fn, arg);
    if (rc != 0)
        bench_fail("pthread_create: %s", strerror(rc));
}

static BENCH_UNUSED int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static BENCH_UNUSED double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static BENCH_UNUSED double bench_min(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] < m)
            m = v[i];
    return m;
}

#endif
