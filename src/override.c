/* override.c - the C library's allocation names, for libshoal.so (linked
 * or preloaded) and libshoal.a.  Each is a thin wrapper over alloc_*;
 * with link-time optimisation they compile to the same code. */
#define _GNU_SOURCE
#include "shoal.h"

#include <errno.h>
#include <unistd.h>
#include "core/layout.h"

#define SHOAL_EXPORT SHOAL_API

SHOAL_EXPORT void *malloc(size_t n) { return alloc_malloc(n); }
SHOAL_EXPORT void free(void *p) { alloc_free(p); }
SHOAL_EXPORT void *calloc(size_t c, size_t n) { return alloc_calloc(c, n); }
SHOAL_EXPORT void *realloc(void *p, size_t n) { return alloc_realloc(p, n); }
SHOAL_EXPORT void *reallocarray(void *p, size_t c, size_t n) { return alloc_reallocarray(p, c, n); }
SHOAL_EXPORT size_t malloc_usable_size(void *p) { return alloc_usable_size(p); }
SHOAL_EXPORT void free_sized(void *p, size_t n) { alloc_free_sized(p, n); }
SHOAL_EXPORT void cfree(void *p) { alloc_free(p); }

SHOAL_EXPORT void *aligned_alloc(size_t align, size_t n) { return alloc_aligned(align, n); }

SHOAL_EXPORT void free_aligned_sized(void *p, size_t align, size_t n)
{
    alloc_free_aligned_sized(p, align, n);
}

SHOAL_EXPORT int posix_memalign(void **out, size_t align, size_t n)
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

/* glibc's memalign rounds an alignment that is not a power of two up. */
SHOAL_EXPORT void *memalign(size_t align, size_t n)
{
    if (!shoal_is_pow2(align) && align <= ((size_t)1 << 62))
        align = align <= 1 ? 1 : (size_t)1 << (64 - __builtin_clzl(align - 1));
    return alloc_aligned(align, n);
}

SHOAL_EXPORT void *valloc(size_t n) { return alloc_aligned((size_t)sysconf(_SC_PAGESIZE), n); }

SHOAL_EXPORT void *pvalloc(size_t n)
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

/* glibc's internal names, which some programs and libraries call. */
SHOAL_EXPORT void *__libc_malloc(size_t n) { return alloc_malloc(n); }
SHOAL_EXPORT void __libc_free(void *p) { alloc_free(p); }
SHOAL_EXPORT void *__libc_calloc(size_t c, size_t n) { return alloc_calloc(c, n); }
SHOAL_EXPORT void *__libc_realloc(void *p, size_t n) { return alloc_realloc(p, n); }
SHOAL_EXPORT void *__libc_memalign(size_t align, size_t n) { return memalign(align, n); }
SHOAL_EXPORT int __posix_memalign(void **out, size_t align, size_t n)
{
    return posix_memalign(out, align, n);
}
