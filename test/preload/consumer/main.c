/* A program built against an installed shoal (by install_package.sh,
 * with pkg-config and with find_package).  It never calls malloc or free
 * itself: all its memory comes from the C library's own allocations
 * (strdup, asprintf, stdio), so it also shows that linking libshoal.a
 * takes the malloc override even when the program names no malloc
 * function.  shoal is the allocator if its counters moved and the
 * program break did not. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <shoal.h>

int main(void)
{
    void *brk0 = sbrk(0);
    size_t total = 0;
    for (int i = 0; i < 20000; i++) {
        char *s = NULL;
        if (asprintf(&s, "%0*d", 1 + (i * 37) % 3000, i) < 0 || s == NULL)
            return 1;
        total += strlen(s);     /* kept: freeing would name free() */
    }
    alloc_stats_t st = { .size = sizeof st };
    if (alloc_stats_get(&st) != 0) {
        fprintf(stderr, "consumer: alloc_stats_get failed\n");
        return 1;
    }
    void *brk1 = sbrk(0);
    if (st.heaps_created < 1 || st.pool_claims == 0) {
        fprintf(stderr, "consumer: shoal's counters did not move: not shoal's malloc\n");
        return 1;
    }
    if (brk1 != brk0) {
        fprintf(stderr, "consumer: the program break moved: something else allocated\n");
        return 1;
    }
    printf("consumer: shoal %d.%d is the allocator (%zu bytes in strings, %lu pool claims)\n",
           SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR, total, (unsigned long)st.pool_claims);
    return 0;
}
