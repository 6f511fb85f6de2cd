/* prof_own.c - a program built without shoal that frees every block it
 * allocates, run by prof_own.sh with heap profiling sampling nearly
 * every allocation, the purger forced on and a leak report at exit.
 * The purger thread that shoal starts from inside a malloc makes the C
 * library allocate (its TLS table): that memory is shoal's, and the
 * leak report must not show it as the program's.  The program waits
 * until the purger runs (a second thread in /proc/self/task), so the
 * check cannot pass by the purger not starting. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 2;       /* . and .. */
}

int main(void)
{
    const struct timespec tick = { 0, 10 * 1000 * 1000 };
    for (int round = 0; round < 500 && threads() < 2; round++) {
        /* Blocks freed make memory the purger has work for. */
        char *p[64];
        for (int i = 0; i < 64; i++) {
            p[i] = malloc(100000 + (size_t)i * 999);
            memset(p[i], i, 100000);
        }
        for (int i = 0; i < 64; i++) {
            if (p[i][99999] != (char)i)
                return 2;
            free(p[i]);
        }
        nanosleep(&tick, NULL);
    }
    if (threads() < 2) {
        static const char msg[] = "prof_own: the purger never started\n";
        write(2, msg, sizeof msg - 1);
        return 1;
    }
    char msg[64];
    int len = snprintf(msg, sizeof msg, "prof_own: pid %d, the purger running\n", (int)getpid());
    write(1, msg, (size_t)len);         /* stdio's buffer would be live at exit */
    return 0;
}
