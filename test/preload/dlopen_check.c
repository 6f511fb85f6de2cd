/* dlopen_check.c - what happens when libshoal.so is dlopen()ed after
 * start-up (documented in docs/drop-in.md):
 *
 *   dlopen_check PATH/libshoal.so
 *
 * shoal's thread-local heap pointer uses the initial-exec TLS model, so
 * the library takes a few bytes of the static TLS block.  glibc keeps a
 * small surplus there for libraries like this one, so the dlopen itself
 * succeeds as long as the surplus lasts (once other initial-exec
 * libraries have used it up, dlopen fails with "cannot allocate memory
 * in static TLS block").  But a dlopen()ed library does not replace
 * malloc: malloc, free, ... are already bound to the C library, which
 * comes first in the lookup order.  What works is shoal's own API,
 * through dlsym: alloc_malloc and friends on their own memory, in every
 * thread.  This program checks exactly that.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shoal.h"

static void *(*a_malloc)(size_t);
static void (*a_free)(void *);
static size_t (*a_usable)(const void *);

static void *thread_main(void *arg)
{
    (void)arg;
    char *p = a_malloc(1000);
    if (p != NULL)
        memset(p, 'x', 1000);
    return p;
}

static const char *object_of(void *addr)
{
    Dl_info info;
    return addr != NULL && dladdr(addr, &info) != 0 && info.dli_fname ? info.dli_fname : "?";
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/libshoal.so\n", argv[0]);
        return 2;
    }
    void *before = malloc(100);         /* the C library's, of course */
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
        return 1;
    }
    a_malloc = (void *(*)(size_t))dlsym(h, "alloc_malloc");
    a_free = (void (*)(void *))dlsym(h, "alloc_free");
    a_usable = (size_t (*)(const void *))dlsym(h, "alloc_usable_size");
    if (a_malloc == NULL || a_free == NULL || a_usable == NULL) {
        fprintf(stderr, "FAIL: alloc_* not found in %s\n", argv[1]);
        return 1;
    }
    int bad = 0;
    const char *m = object_of(dlsym(RTLD_DEFAULT, "malloc"));
    if (strstr(m, "libshoal") != NULL) {
        fprintf(stderr, "FAIL: after dlopen, malloc resolves to %s\n", m);
        bad = 1;
    }
    free(before);                       /* still the C library's free */
    void *after = malloc(100);
    free(after);

    char *p = a_malloc(5000);
    if (p == NULL || a_usable(p) < 5000) {
        fprintf(stderr, "FAIL: alloc_malloc through dlsym\n");
        bad = 1;
    }
    pthread_t t;
    char *q = NULL;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, (void **)&q) != 0 ||
        q == NULL || q[999] != 'x') {
        fprintf(stderr, "FAIL: alloc_malloc in a new thread\n");
        bad = 1;
    }
    a_free(q);
    a_free(p);
    if (bad)
        return 1;
    printf("dlopen_check: dlopen works, alloc_* work, malloc stays %s\n", m);
    return 0;
}
