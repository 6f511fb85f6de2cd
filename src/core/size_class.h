/* size_class.h - request size <-> size class.
 *
 * Classes step by 16 bytes up to 128 (the alignment every block keeps),
 * then by eighths of each power of two: 144, 160, ... 256, 288, ... so two
 * neighbouring classes are at most 12.5% apart and a block wastes at most
 * 1/9 of itself.  Classes 0..55 reach 8 KiB and live on 64 KiB pages;
 * classes 56..79 reach 64 KiB and live on pages of 128 to 512 KiB.
 * Every class size is a multiple of its step, which is what lets aligned requests use them
 * (see shoal_class_for_aligned).
 */
#ifndef SHOAL_SIZE_CLASS_H
#define SHOAL_SIZE_CLASS_H

#include <stdbool.h>
#include <stdint.h>
#include "layout.h"

#define SHOAL_CLASSES        80
#define SHOAL_SMALL_CLASSES  56     /* classes served from order-0 pages */

/* Below 1 KiB the class of n depends on (n - 1) >> 4 alone (steps there
 * are 16, 32 and 64 bytes), so a table of 64 answers it in one load where
 * the formula below takes ten instructions.  Entry i is the formula's
 * class for n - 1 = 16 * i: i itself below 256 bytes, then 8 + i / 2
 * below 512 and 16 + i / 4 below 1024. */
#define SHOAL_CLASS_OF_W16(i) ((i) < 16 ? (i) : (i) < 32 ? 8 + (i) / 2 : 16 + (i) / 4)
#define SHOAL_CLASS_OF_W16_X4(i)                                                       \
    SHOAL_CLASS_OF_W16(i), SHOAL_CLASS_OF_W16(i + 1), SHOAL_CLASS_OF_W16(i + 2),       \
        SHOAL_CLASS_OF_W16(i + 3)
#define SHOAL_CLASS_OF_W16_X16(i)                                                      \
    SHOAL_CLASS_OF_W16_X4(i), SHOAL_CLASS_OF_W16_X4(i + 4), SHOAL_CLASS_OF_W16_X4(i + 8), \
        SHOAL_CLASS_OF_W16_X4(i + 12)
static const uint8_t shoal_small_class[64] = {
    SHOAL_CLASS_OF_W16_X16(0), SHOAL_CLASS_OF_W16_X16(16),
    SHOAL_CLASS_OF_W16_X16(32), SHOAL_CLASS_OF_W16_X16(48),
};

/* The class for a request of n bytes, 0 < n <= SHOAL_MEDIUM_MAX. */
static inline unsigned shoal_size_to_class_nz(size_t n)
{
    size_t w = n - 1;
    if (w < 1024)
        return shoal_small_class[w >> 4];
    unsigned b = 63u - (unsigned)__builtin_clzl(w);      /* b >= 10 */
    return 8u + (b - 7u) * 8u + (unsigned)((w >> (b - 3)) & 7u);
}

/* Requests up to SHOAL_DIRECT_MAX bytes find their page in one load: a
 * heap keeps, for each index (n + 15) / 16, the page of n's class (its
 * "direct" table, as mimalloc's pages_free_direct), so malloc needs
 * neither the class nor the queue head.  Index 0 (n = 0) is class 0's.
 * Above 1 KiB the classes step by 128 bytes or more, above 8 KiB by 1 KiB
 * or more, each starting at a multiple of its step, so the table goes on
 * to SHOAL_MEDIUM_MAX: an entry per 128 bytes to 8 KiB, then one per KiB
 * (a shift and a load where the class formula takes ten instructions). */
#define SHOAL_DIRECT_MAX 1024
#define SHOAL_DIRECT_MED_MAX 8192
#define SHOAL_DIRECT_SMALL_ENTRIES (SHOAL_DIRECT_MAX / 16 + 1)
#define SHOAL_DIRECT_MED_ENTRIES ((SHOAL_DIRECT_MED_MAX - SHOAL_DIRECT_MAX) / 128)
#define SHOAL_DIRECT_ENTRIES                                                          \
    (SHOAL_DIRECT_SMALL_ENTRIES + SHOAL_DIRECT_MED_ENTRIES +                          \
     (SHOAL_MEDIUM_MAX - SHOAL_DIRECT_MED_MAX) / 1024)

/* The entry of a request of n bytes, n <= SHOAL_DIRECT_MAX. */
static inline size_t shoal_direct_index(size_t n)
{
    return (n + 15) >> 4;
}

/* SHOAL_DIRECT_MAX < n <= SHOAL_DIRECT_MED_MAX: (n - 1025) / 128 after
 * the small entries. */
static inline size_t shoal_direct_mid_index(size_t n)
{
    return (n + (SHOAL_DIRECT_SMALL_ENTRIES * 128 - SHOAL_DIRECT_MAX - 1)) >> 7;
}

/* SHOAL_DIRECT_MED_MAX < n <= SHOAL_MEDIUM_MAX: (n - 8193) / 1024 after
 * the 128-byte entries. */
static inline size_t shoal_direct_big_index(size_t n)
{
    const size_t big = SHOAL_DIRECT_SMALL_ENTRIES + SHOAL_DIRECT_MED_ENTRIES;
    return (n + (big * 1024 - SHOAL_DIRECT_MED_MAX - 1)) >> 10;
}

/* SHOAL_DIRECT_MAX < n <= SHOAL_MEDIUM_MAX: whichever of the two. */
static inline size_t shoal_direct_med_index(size_t n)
{
    return n <= SHOAL_DIRECT_MED_MAX ? shoal_direct_mid_index(n) : shoal_direct_big_index(n);
}

/* The same, with 0 taken as 1. */
static inline unsigned shoal_size_to_class(size_t n)
{
    return shoal_size_to_class_nz(n ? n : 1);
}

/* The block size of class c. */
static inline size_t shoal_class_size(unsigned c)
{
    if (c < 8)
        return (size_t)(c + 1) << 4;
    unsigned b = 7u + (c - 8u) / 8u;
    return ((size_t)1 << b) + ((size_t)((c - 8u) % 8u + 1u) << (b - 3));
}

/* The direct indices whose requests take class c's page: [*lo, *hi],
 * empty (*lo > *hi) with every block cache-line aligned for a class whose
 * size is not a multiple of 64 (such requests take the next class that
 * is: every multiple of 64 up to SHOAL_DIRECT_MAX is a class, and every
 * class above it a multiple). */
static inline void shoal_direct_range(unsigned c, bool cacheline, size_t *lo, size_t *hi)
{
    size_t size = shoal_class_size(c);
    size_t below = cacheline && size <= SHOAL_DIRECT_MAX ? size - SHOAL_CACHE_LINE
                   : c ? shoal_class_size(c - 1) : 0;
    if (size <= SHOAL_DIRECT_MAX) {
        *lo = below == 0 ? 0 : below / 16 + 1;
        *hi = size / 16;
    } else {
        *lo = shoal_direct_med_index(below + 1);
        *hi = shoal_direct_med_index(size);
    }
    if (cacheline && size % SHOAL_CACHE_LINE != 0)
        *lo = *hi + 1;
}

/* Order of the buddy block a page of class c occupies: one slot up to
 * 8 KiB, then the smallest page that holds at least 8 blocks (128 KiB up
 * to 16 KiB blocks, 256 KiB up to 32 KiB, 512 KiB up to 64 KiB). */
static inline unsigned shoal_class_page_order(unsigned c)
{
    return c < SHOAL_SMALL_CLASSES ? 0 : 1 + (c - SHOAL_SMALL_CLASSES) / 8;
}

/* For an aligned request: a class whose block size is a multiple of
 * `align`, so every block of a page (pages start at a 64 KiB boundary) is
 * aligned.  Rounding n up to a multiple of align and taking its class
 * works: if the class step is at least align, the class size is a
 * multiple of the step; if it is smaller, the rounded size is itself a
 * class.  Returns SHOAL_CLASSES when the request is not a page object. */
static inline unsigned shoal_class_for_aligned(size_t n, size_t align)
{
    size_t r = shoal_align_up(n ? n : 1, align);
    if (r > SHOAL_MEDIUM_MAX || align > SHOAL_SLOT_SIZE)
        return SHOAL_CLASSES;
    return shoal_size_to_class(r);
}

#endif
