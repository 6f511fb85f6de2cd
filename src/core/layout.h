/* layout.h - the geometry every layer agrees on.
 *
 * Address space comes in superpages: 4 MiB, aligned to 4 MiB, so that any
 * pointer finds its superpage by masking.  A superpage is 64 slots of
 * 64 KiB.  Slot 0 holds the superpage header, the 64 slot descriptors;
 * slots 1..63 are handed out buddy-style as blocks of 2^k slots, k <= 5,
 * always aligned to their own size.  Objects larger than the largest
 * block (2 MiB) get a mapping of their own ("huge").
 */
#ifndef SHOAL_LAYOUT_H
#define SHOAL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define SHOAL_SLOT_SHIFT   16
#define SHOAL_SLOT_SIZE    ((size_t)1 << SHOAL_SLOT_SHIFT)      /* 64 KiB */
#define SHOAL_SP_SHIFT     22
#define SHOAL_SP_SIZE      ((size_t)1 << SHOAL_SP_SHIFT)        /* 4 MiB  */
#define SHOAL_SP_SLOTS     64
#define SHOAL_MAX_ORDER    5          /* largest block: 32 slots, 2 MiB */

/* Object size tiers. */
#define SHOAL_MEDIUM_MAX   ((size_t)64 << 10)   /* on 128..512 KiB pages (order 1..3) */
#define SHOAL_LARGE_MAX    (SHOAL_SLOT_SIZE << SHOAL_MAX_ORDER) /* 2 MiB */
#define SHOAL_LARGE_SLOTS  (1u << SHOAL_MAX_ORDER)     /* its slots */

/* User addresses fit in 47 bits on x86-64 and 48 on aarch64 (4-level
 * tables): the kernel maps above them (5-level tables, 52-bit VA) only
 * where mmap is given a hint there, which shoal never gives. */
#if defined(__x86_64__)
#define SHOAL_ADDR_BITS    47
#else
#define SHOAL_ADDR_BITS    48
#endif

/* Requests above this are refused with ENOMEM at once: no mapping is
 * larger than the address space (C's bound, PTRDIFF_MAX, is far above
 * it), and a larger one need not go through the caches and the kernel
 * only to fail there. */
#define SHOAL_MAX_REQUEST  ((size_t)1 << SHOAL_ADDR_BITS)

#define SHOAL_ALIGN        16         /* natural alignment of every block */
#define SHOAL_OS_PAGE_SHIFT 12
#define SHOAL_OS_PAGE      4096       /* the smallest page the kernel maps (x86-64, most arm64) */
#define SHOAL_CACHE_LINE   64

#define shoal_likely(x)    __builtin_expect(!!(x), 1)
#define shoal_unlikely(x)  __builtin_expect(!!(x), 0)

/* Built with ThreadSanitizer (gcc says so one way, clang another). */
#if defined(__SANITIZE_THREAD__)
#define SHOAL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_TSAN 1
#endif
#endif

/* A 64-bit mix (splitmix64's finaliser): page keys, sampling draws. */
static inline uint64_t shoal_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static inline size_t shoal_align_up(size_t n, size_t a)
{
    return (n + a - 1) & ~(a - 1);
}

static inline int shoal_is_pow2(size_t a)
{
    return a != 0 && (a & (a - 1)) == 0;
}

/* The one rule for serving `want` bytes from a block or mapping of `have`:
 * it holds them and wastes less than half.  realloc resizes in place by
 * it (so free_sized accepts what it kept), and the huge caches reuse a
 * mapping by it. */
static inline int shoal_fits_without_waste(size_t have, size_t want)
{
    return want <= have && want > have / 2;
}

#endif
