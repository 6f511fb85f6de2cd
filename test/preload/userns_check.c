/* userns_check.c - a program that enters a new user namespace after it
 * has allocated and freed memory, as sandboxes (bubblewrap, browsers,
 * unshare -U, rootless containers) do.  The kernel allows
 * unshare(CLONE_NEWUSER) only in a single-threaded process, so an
 * allocator that starts a thread of its own behind the program's back
 * breaks them.  Run by userns.sh with and without shoal preloaded.
 *
 * Exit 0: unshare worked; 1: it failed (the reason on stderr). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    /* Memory that becomes free, then longer than a purge delay. */
    for (int round = 0; round < 3; round++) {
        void *p[200];
        for (int i = 0; i < 200; i++) {
            p[i] = malloc(1000 + (size_t)i * 997);
            if (p[i] != NULL)
                memset(p[i], i, 1000);
        }
        for (int i = 0; i < 200; i++)
            free(p[i]);
    }
    free(malloc((size_t)8 << 20));
    usleep(1500 * 1000);
    if (unshare(CLONE_NEWUSER) != 0) {
        int e = errno;
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", (int)getpid());
        FILE *f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof line, f) != NULL)
            if (strncmp(line, "Threads:", 8) == 0)
                fprintf(stderr, "userns_check: %s", line);
        if (f != NULL)
            fclose(f);
        fprintf(stderr, "userns_check: unshare(CLONE_NEWUSER): %s\n", strerror(e));
        return 1;
    }
    puts("userns_check: unshare(CLONE_NEWUSER): ok");
    return 0;
}
