/* override_new.c - C++'s replaceable allocation functions ([new.delete]
 * of ISO C++: operator new and delete in all their forms) under their
 * Itanium C++ ABI names, for libshoal.so.  A C++ program's new and delete
 * then come here straight; without them they come through libstdc++'s
 * operator new, which calls malloc through the PLT (about ten
 * instructions a new and delete more).
 *
 * The one thing C cannot do is throw.  When no block can be had, a
 * call goes on to the next definition of the same operator, the C++
 * runtime's (dlsym(RTLD_NEXT)): it runs the standard's loop - call the
 * new_handler, try again (malloc: ours), throw std::bad_alloc when there
 * is no handler - and the nothrow forms catch that and return NULL, as
 * the standard asks.  So new behaves as it does without shoal in every
 * case but the speed of the one that succeeds.  (libshoal.a leaves these
 * names to the C++ runtime: a static program has no next definition to
 * go on to, and its operators call our malloc anyway.)
 *
 * size_t is `m` in the mangled names, std::align_val_t (an enum of
 * size_t) is passed as one, a const std::nothrow_t & as a pointer; delete
 * takes no notice of the size or alignment it is given: free knows the
 * block. */
#define _GNU_SOURCE
#include "shoal.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "alloc_fast.h"
#include "core/message.h"
#include "core/samples.h"

#define SHOAL_EXPORT SHOAL_API

/* `name` in a C++ runtime loaded with dlopen(RTLD_LOCAL) - by a C
 * program's plugin, or Python's extension modules - which RTLD_NEXT,
 * searching the scope the program started with, does not see.  Looked
 * up in each runtime's own scope (its handle), where shoal is not. */
static void *local_runtime_operator(const char *name)
{
    static const char *const runtimes[] = { "libstdc++.so.6", "libc++.so.1" };
    for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; i++) {
        void *lib = dlopen(runtimes[i], RTLD_LAZY | RTLD_NOLOAD);
        if (lib == NULL)
            continue;
        void *f = dlsym(lib, name);
        dlclose(lib);           /* the NOLOAD open's reference: it stays loaded */
        if (f != NULL)
            return f;
    }
    return NULL;
}

/* The C++ runtime's definition of `name`, once.  A process that calls
 * operator new has one (libstdc++ or libc++) after us, or loaded
 * locally beside the code that called, unless it was linked into an
 * object and not exported: then new cannot fail as the standard says,
 * and says so. */
static void *next_operator(_Atomic(void *) *slot, const char *name)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f == NULL) {
        f = dlsym(RTLD_NEXT, name);
        if (f == NULL)
            f = local_runtime_operator(name);
        if (f == NULL) {
            shoal_warning("out of memory in %s, and no C++ runtime after shoal to throw "
                          "std::bad_alloc: aborting", name);
            abort();
        }
        /* Release: any thread that finds it may call it (the same value,
         * whoever stores first). */
        atomic_store_explicit(slot, f, memory_order_release);
    }
    return f;
}

#define NEXT(name) ({                                                                     \
        static _Atomic(void *) next_##name;                                               \
        next_operator(&next_##name, #name);                                               \
    })

/* Out of line and cold: the call that found no memory, with the size it
 * asked for. */
#define NEW_NEXT(name, body_args, args)                                                   \
    static __attribute__((noinline, cold)) void *name##_next body_args                    \
    {                                                                                     \
        return ((__typeof__(&name##_next))NEXT(name)) args;                               \
    }

/* The aligned forms: alloc_aligned, and the next operator where it has
 * no memory (body_args name the size n and the alignment a).  libstdc++'s
 * aligned operator rounds the size up to a multiple of the alignment
 * before it calls aligned_alloc, and the sum wraps for a size within an
 * alignment of SIZE_MAX (GCC 12: new(SIZE_MAX, align_val_t(4096)) asked
 * for 0 bytes and returned a block): such a size goes on as the largest
 * multiple of the alignment, which no allocator can meet either. */
#define NEW_ALIGNED(name, body_args, args)                                                \
    NEW_NEXT(name, body_args, args)                                                       \
    SHOAL_EXPORT SHOAL_ALLOC_PATH void *name body_args                                    \
    {                                                                                     \
        void *p = alloc_aligned(a, n);                                                    \
        if (__builtin_expect(p != NULL, 1))                                               \
            return p;                                                                     \
        if (n > -a)                                                                       \
            n = -a;                                                                       \
        return name##_next args;                                                          \
    }

/* The others (body_args name the size n) pop as malloc does, inline
 * (alloc_fast.h), where a call to malloc would cost a frame to keep n
 * in; whatever the pop leaves -
 * an empty page, a trap, a size above the pages' - goes to malloc, out
 * of line, which is a tail call. */
#define NEW(name, body_args, args)                                                        \
    NEW_NEXT(name, body_args, args)                                                       \
    static __attribute__((noinline)) SHOAL_ALLOC_PATH void *name##_slow body_args         \
    {                                                                                     \
        void *p = alloc_malloc(n);                                                        \
        return __builtin_expect(p != NULL, 1) ? p : name##_next args;                     \
    }                                                                                     \
    SHOAL_EXPORT SHOAL_ALLOC_PATH void *name body_args                                    \
    {                                                                                     \
        if (__builtin_expect(n <= SHOAL_MEDIUM_MAX, 1)) {                                 \
            shoal_heap_t *h = shoal_tl_heap;                                              \
            void *p = shoal_page_pop_or_null(h, shoal_page_for(h, n));                    \
            if (__builtin_expect(p != NULL, 1))                                           \
                return p;                                                                 \
        }                                                                                 \
        return name##_slow args;                                                          \
    }

NEW(_Znwm, (size_t n), (n))
NEW(_Znam, (size_t n), (n))
NEW(_ZnwmRKSt9nothrow_t, (size_t n, const void *nt), (n, nt))
NEW(_ZnamRKSt9nothrow_t, (size_t n, const void *nt), (n, nt))
NEW_ALIGNED(_ZnwmSt11align_val_t, (size_t n, size_t a), (n, a))
NEW_ALIGNED(_ZnamSt11align_val_t, (size_t n, size_t a), (n, a))
NEW_ALIGNED(_ZnwmSt11align_val_tRKSt9nothrow_t, (size_t n, size_t a, const void *nt), (n, a, nt))
NEW_ALIGNED(_ZnamSt11align_val_tRKSt9nothrow_t, (size_t n, size_t a, const void *nt), (n, a, nt))

SHOAL_EXPORT void _ZdlPv(void *p) { alloc_free(p); }
SHOAL_EXPORT void _ZdaPv(void *p) { alloc_free(p); }
SHOAL_EXPORT void _ZdlPvm(void *p, size_t n) { (void)n, alloc_free(p); }
SHOAL_EXPORT void _ZdaPvm(void *p, size_t n) { (void)n, alloc_free(p); }
SHOAL_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt, alloc_free(p); }
SHOAL_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt, alloc_free(p); }
SHOAL_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a, alloc_free(p); }
SHOAL_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a, alloc_free(p); }
SHOAL_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a, alloc_free(p); }
SHOAL_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a, alloc_free(p); }
SHOAL_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *nt)
{
    (void)a, (void)nt, alloc_free(p);
}
SHOAL_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *nt)
{
    (void)a, (void)nt, alloc_free(p);
}
