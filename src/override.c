/* override.c - the C library's allocation names, for libshoal.so (linked
 * or preloaded) and libshoal.a.  Each is a thin wrapper over alloc_*, but
 * in libshoal.so, where those that are an alloc_* function under another
 * name are aliases (override.h).  Those that allocate are on the
 * allocation path (core/samples.h), so that a heap profile's stacks start
 * at their caller. */
#define _GNU_SOURCE
#include "shoal.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <unistd.h>
#include "core/layout.h"
#include "core/samples.h"

#define SHOAL_EXPORT SHOAL_API

#ifndef SHOAL_ALIASES
SHOAL_EXPORT SHOAL_ALLOC_PATH void *malloc(size_t n) { return alloc_malloc(n); }
SHOAL_EXPORT void free(void *p) { alloc_free(p); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *calloc(size_t c, size_t n) { return alloc_calloc(c, n); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *realloc(void *p, size_t n) { return alloc_realloc(p, n); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *reallocarray(void *p, size_t c, size_t n) { return alloc_reallocarray(p, c, n); }
SHOAL_EXPORT void free_sized(void *p, size_t n) { alloc_free_sized(p, n); }
SHOAL_EXPORT void cfree(void *p) { alloc_free(p); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *aligned_alloc(size_t align, size_t n) { return alloc_aligned(align, n); }

SHOAL_EXPORT void free_aligned_sized(void *p, size_t align, size_t n)
{
    alloc_free_aligned_sized(p, align, n);
}

/* glibc's internal names, which some programs and libraries call. */
SHOAL_EXPORT SHOAL_ALLOC_PATH void *__libc_malloc(size_t n) { return alloc_malloc(n); }
SHOAL_EXPORT void __libc_free(void *p) { alloc_free(p); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *__libc_calloc(size_t c, size_t n) { return alloc_calloc(c, n); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *__libc_realloc(void *p, size_t n) { return alloc_realloc(p, n); }
#endif

SHOAL_EXPORT size_t malloc_usable_size(void *p) { return alloc_usable_size(p); }

SHOAL_EXPORT SHOAL_ALLOC_PATH int posix_memalign(void **out, size_t align, size_t n)
{
    if (!shoal_is_pow2(align) || align % sizeof(void *) != 0)
        return EINVAL;
    int saved = errno;
    void *p = alloc_aligned(align, n);
    errno = saved;
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

/* glibc's memalign rounds an alignment that is not a power of two up
 * (to 2^63 at most: one above that is EINVAL, as glibc's). */
SHOAL_EXPORT SHOAL_ALLOC_PATH void *memalign(size_t align, size_t n)
{
    if (!shoal_is_pow2(align) && align <= ((size_t)1 << 63))
        align = align <= 1 ? 1 : (size_t)1 << (64 - __builtin_clzl(align - 1));
    return alloc_aligned(align, n);
}

SHOAL_EXPORT SHOAL_ALLOC_PATH void *valloc(size_t n) { return alloc_aligned((size_t)sysconf(_SC_PAGESIZE), n); }

SHOAL_EXPORT SHOAL_ALLOC_PATH void *pvalloc(size_t n)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    if (n > SHOAL_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    return alloc_aligned(ps, shoal_align_up(n ? n : 1, ps));
}

/* glibc's malloc_stats(): the report, on stderr.  (It also makes a static
 * link pull in the statistics code, and with it the signal dump.) */
SHOAL_EXPORT void malloc_stats(void) { alloc_stats_print(2); }

/* ---- glibc's malloc.h extras ------------------------------------------
 * Programs call these to trim or describe the heap; a static link of a
 * program that uses one would otherwise pull glibc's malloc in beside
 * shoal's and fail.  They answer from shoal's own figures. */

static alloc_stats_t stats_now(void)
{
    alloc_stats_t st = { .size = sizeof st };
    alloc_stats_get(&st);
    return st;
}

/* Give free memory back to the OS now; 1 if some went back. */
SHOAL_EXPORT int malloc_trim(size_t pad)
{
    (void)pad;
    size_t before = stats_now().committed;
    alloc_collect(true);
    return stats_now().committed < before;
}

/* a - b, or 0: the statistics' sums are sampled one by one while other
 * threads allocate, so one may trail another for a moment. */
static size_t beyond(size_t a, size_t b)
{
    return a > b ? a - b : 0;
}

/* glibc's fields, in shoal's terms: the pool memory in use is the
 * "arena", huge blocks are the "mmapped" ones, and memory freed but not
 * yet given back is what a trim could release. */
SHOAL_EXPORT struct mallinfo2 mallinfo2(void)
{
    alloc_stats_t st = stats_now();
    size_t pool = beyond(st.active, st.huge_live_bytes);
    size_t used = beyond(st.allocated, st.huge_live_bytes);
    return (struct mallinfo2){
        .arena = pool,
        .hblks = st.huge_live,
        .hblkhd = st.huge_live_bytes,
        .uordblks = used,
        .fordblks = beyond(pool, used),
        .keepcost = beyond(st.committed, st.active),
    };
}

static int clamp(size_t v)
{
    return v > INT_MAX ? INT_MAX : (int)v;
}

static struct mallinfo mallinfo_now(void)
{
    struct mallinfo2 m = mallinfo2();
    return (struct mallinfo){ .arena = clamp(m.arena), .hblks = clamp(m.hblks),
                              .hblkhd = clamp(m.hblkhd), .uordblks = clamp(m.uordblks),
                              .fordblks = clamp(m.fordblks), .keepcost = clamp(m.keepcost) };
}

SHOAL_EXPORT struct mallinfo mallinfo(void) { return mallinfo_now(); }

/* glibc's tunables have no meaning here (SHOAL_* options govern shoal):
 * accepted, as glibc accepts them, and ignored. */
SHOAL_EXPORT int mallopt(int param, int value)
{
    (void)param;
    (void)value;
    return 1;
}

/* glibc writes XML; so does this, with shoal's summary. */
SHOAL_EXPORT int malloc_info(int options, FILE *fp)
{
    if (options != 0)
        return EINVAL;          /* glibc's answer: no -1, errno as it was */
    alloc_stats_t st = stats_now();
    fprintf(fp, "<malloc version=\"shoal-%d.%d\">\n", SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR);
    fprintf(fp, "<total type=\"allocated\" size=\"%zu\"/>\n", st.allocated);
    fprintf(fp, "<total type=\"active\" size=\"%zu\"/>\n", st.active);
    fprintf(fp, "<total type=\"committed\" size=\"%zu\"/>\n", st.committed);
    fprintf(fp, "<total type=\"mapped\" size=\"%zu\"/>\n", st.mapped);
    fprintf(fp, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n", st.huge_live,
            st.huge_live_bytes);
    fprintf(fp, "</malloc>\n");
    return 0;
}

SHOAL_EXPORT SHOAL_ALLOC_PATH void *__libc_memalign(size_t align, size_t n) { return memalign(align, n); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *__libc_valloc(size_t n) { return valloc(n); }
SHOAL_EXPORT SHOAL_ALLOC_PATH void *__libc_pvalloc(size_t n) { return pvalloc(n); }
SHOAL_EXPORT int __libc_mallopt(int param, int value) { return mallopt(param, value); }
SHOAL_EXPORT struct mallinfo __libc_mallinfo(void) { return mallinfo_now(); }
SHOAL_EXPORT int __posix_memalign(void **out, size_t align, size_t n)
{
    return posix_memalign(out, align, n);
}
