/* prof_sites.c - a program built without shoal, run under
 * `shoal-run --profile` by prof_pprof.sh: three allocation sites hold 60,
 * 30 and 10% of the live bytes when it exits, a fourth allocated as much
 * as the first and freed it all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 2000
#define UNIT (20u << 20)        /* 10% of the live bytes */

static void **hold(void *(*site)(size_t), size_t bytes)
{
    size_t n = bytes / BLOCK;
    void **p = calloc(n + 1, sizeof *p);
    for (size_t i = 0; i < n; i++) {
        p[i] = site(BLOCK);
        memset(p[i], (int)i, BLOCK);
    }
    return p;
}

/* Not inlined, and no tail call: each keeps a frame of its own. */
#define SITE(name)                                                                          \
    __attribute__((noinline)) void *name(size_t n)                                          \
    {                                                                                       \
        void *p = malloc(n);                                                                \
        __asm__ volatile("" ::: "memory");                                                  \
        return p;                                                                           \
    }
SITE(site_sixty)
SITE(site_thirty)
SITE(site_ten)
SITE(site_freed)

int main(void)
{
    hold(site_sixty, 6 * UNIT);
    hold(site_thirty, 3 * UNIT);
    hold(site_ten, 1 * UNIT);
    void **gone = hold(site_freed, 6 * UNIT);
    for (size_t i = 0; gone[i] != NULL; i++)
        free(gone[i]);
    puts("prof_sites: done");
    return 0;           /* the leak report shows what is still live */
}
