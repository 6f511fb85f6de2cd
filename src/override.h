/* override.h - C library names that are an alloc_* function under
 * another name, in libshoal.so.
 *
 * There (built with SHOAL_ALIASES) `malloc` is alloc_malloc itself: an
 * alias, the same code at the same address, declared where the function
 * is defined, as an alias must be.  A wrapper would cost every call a
 * jump, or, where link-time optimisation inlines it, a copy of the
 * function (free's fast path, inlined or not from one build to the next).
 * libshoal.a keeps override.c's wrappers: a static link pulls in the
 * objects whose names it needs, and glibc's malloc names must all come
 * from one of ours - the one that malloc pulls in - or some libc.a
 * object that calls, say, __libc_memalign pulls glibc's malloc in beside
 * it.  The names with a behaviour of their own (posix_memalign, memalign,
 * valloc, malloc_usable_size's non-const argument, ...) are override.c's
 * in both.
 */
#ifndef SHOAL_OVERRIDE_H
#define SHOAL_OVERRIDE_H

#include "shoal.h"

#ifdef SHOAL_ALIASES
#define SHOAL_ALSO_NAMED(name, target)                                                     \
    extern __typeof__(target) name __attribute__((alias(#target), visibility("default")));
#else
#define SHOAL_ALSO_NAMED(name, target)
#endif

#endif
