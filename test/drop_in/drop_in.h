/* drop_in.h - helpers shared by the drop-in tests: pattern-filled blocks
 * that can be verified anywhere (another thread, a forked child), the
 * process's RSS, and failure reporting.
 *
 * The tests use the alloc_* API only, so they build against shoal_core
 * and run under ThreadSanitizer as well as in the plain build.
 */
#ifndef SHOAL_DROP_IN_H
#define SHOAL_DROP_IN_H

#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shoal.h"
#include "../test_util.h"

#if defined(__SANITIZE_THREAD__)
#define DROP_IN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DROP_IN_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DROP_IN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DROP_IN_ASAN 1
#endif
#endif
/* Under a sanitizer the RSS is mostly the sanitizer's own (shadow memory,
 * per-thread state): only shoal's own accounting is held to a bound. */
#if defined(DROP_IN_TSAN) || defined(DROP_IN_ASAN)
#define CHECK_RSS 0
#else
#define CHECK_RSS 1
#endif
/* The sanitizers' own allocators are not fork-safe in a multi-threaded
 * parent: TSan kills a child that starts a thread, and ASan's allocator
 * can be locked by a parent thread at the fork (a child hung in its
 * SizeClassAllocator64 here).  Children then start no thread. */
#if defined(DROP_IN_TSAN) || defined(DROP_IN_ASAN)
#define DROP_IN_NO_CHILD_THREADS 1
#endif

#define BLOCK_MAGIC 0x5b0a1c3du

/* Every block starts with this header; the rest is a pattern derived
 * from the seed, so a block handed out twice, a corrupted free list or a
 * page given to the wrong owner shows up as a mismatch. */
typedef struct block_hdr_s {
    uint64_t size;
    uint32_t seed;
    uint32_t magic;
} block_hdr_t;

static inline uint32_t rnd(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x ? x : 0x9e3779b9u;
}

/* The bytes of a block that carry the pattern: every byte up to 64 KiB;
 * beyond that the first 4 KiB, 8 bytes of every 64 KiB and the last 64
 * bytes, so large and huge blocks stay cheap.  Runs `body` for each such
 * index i past the header. */
#define PATTERN_FOR_EACH(n, i, body)                                          \
    do {                                                                      \
        size_t n_ = (n);                                                      \
        size_t dense_ = n_ <= 65536 ? n_ : 4096;                              \
        for (size_t i = sizeof(block_hdr_t); i < dense_; i++) { body; }       \
        if (n_ > 65536) {                                                     \
            for (size_t b_ = 65536; b_ + 64 < n_; b_ += 65536)                  \
                for (size_t i = b_; i < b_ + 8; i++) { body; }                \
            for (size_t i = n_ - 64; i < n_; i++) { body; }                   \
        }                                                                     \
    } while (0)

static inline unsigned char pattern_byte(uint32_t seed, size_t i)
{
    return (unsigned char)(seed + i * 131 + (i >> 8));
}

/* A mix of sizes: mostly small, some medium, a few large. `huge_every`
 * (0 = never) makes one in that many draws a huge block (> 4 MiB). */
static inline size_t pick_size(uint32_t *s, unsigned huge_every)
{
    uint32_t r = rnd(s);
    if (huge_every != 0 && r % huge_every == 0)
        return ((size_t)5 << 20) + r % (3u << 20);
    switch (r % 32) {
    case 0: return 65536 + r % (1u << 20);          /* large */
    case 1: case 2: return 8192 + r % 57344;        /* medium to large */
    case 3: case 4: case 5: return 1024 + r % 7168; /* medium */
    default: return sizeof(block_hdr_t) + r % 512;  /* small */
    }
}

static inline void *block_make(size_t n, uint32_t seed)
{
    if (n < sizeof(block_hdr_t))
        n = sizeof(block_hdr_t);
    unsigned char *p = alloc_malloc(n);
    if (p == NULL)
        return NULL;
    block_hdr_t h = { n, seed, BLOCK_MAGIC };
    memcpy(p, &h, sizeof h);
    PATTERN_FOR_EACH(n, i, p[i] = pattern_byte(seed, i));
    return p;
}

/* 0 if the block is intact, else a short reason. */
static inline const char *block_check(const void *q)
{
    const unsigned char *p = q;
    block_hdr_t h;
    memcpy(&h, p, sizeof h);
    if (h.magic != BLOCK_MAGIC)
        return "header magic overwritten";
    if (h.size < sizeof h || h.size > ((size_t)64 << 20))
        return "header size overwritten";
    if (alloc_usable_size(p) < h.size)
        return "usable size smaller than the requested size";
    PATTERN_FOR_EACH(h.size, i, if (p[i] != pattern_byte(h.seed, i)) return "contents changed");
    return NULL;
}


/* Damaged blocks seen so far by check_free, in every thread. */
static _Atomic long drop_in_errors;

/* Check a block, then free it.  A damaged one is reported and counted,
 * and left alone: freeing it may hide the damage. */
static inline void check_free(void *p, const char *who)
{
    const char *why = block_check(p);
    if (why != NULL) {
        fprintf(stderr, "FAIL: %s: block %p: %s\n", who, p, why);
        atomic_fetch_add(&drop_in_errors, 1);
        return;
    }
    alloc_free(p);
}

__attribute__((format(printf, 1, 2), noreturn))
static inline void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* shoal's statistics now. */
static inline alloc_stats_t stats_now(void)
{
    alloc_stats_t st = { .size = sizeof st };
    if (alloc_stats_get(&st) != 0)
        die("alloc_stats_get failed");
    return st;
}

#endif
