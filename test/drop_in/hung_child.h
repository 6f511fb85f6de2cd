/* hung_child.h - say where a forked child hangs before it is killed.
 *
 * A child that does not finish is reported with each of its threads'
 * kernel state and wait channel (/proc) and, where gdb is installed, a
 * backtrace of every thread, so that one failure in a long run is enough
 * to find the lock.  The report also says whether the child hangs inside
 * a sanitizer's runtime rather than in shoal or the test: ThreadSanitizer
 * before LLVM 19 and AddressSanitizer do not hold their own allocator
 * and stack depot locks across fork, so a parent thread that held one at
 * the fork leaves the child waiting for it for ever (google/sanitizers
 * #453, llvm-project #96600).  The child calls hung_child_allow_trace()
 * first, so that gdb may attach where Yama allows only a parent to trace.
 * Included after drop_in.h, which says whether a sanitizer is built in.
 */
#ifndef SHOAL_HUNG_CHILD_H
#define SHOAL_HUNG_CHILD_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static inline void hung_child_allow_trace(void)
{
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);    /* best effort */
}

/* One line of /proc/<pid>/task/<tid>/<what>, or "?". */
static inline void hung_child_read(pid_t pid, int tid, const char *what, char *buf, size_t len)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/%s", (int)pid, tid, what);
    FILE *f = fopen(path, "r");
    if (f == NULL || fgets(buf, (int)len, f) == NULL)
        snprintf(buf, len, "?");
    if (f != NULL)
        fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* Whether a frame line of gdb's backtrace lies in a sanitizer's runtime
 * lock: the innermost frames of a thread that waits for one. */
static inline bool hung_child_sanitizer_lock(const char *line)
{
    return (strstr(line, "__sanitizer::") != NULL || strstr(line, "__tsan::") != NULL ||
            strstr(line, "__asan::") != NULL) &&
           (strstr(line, "Lock") != NULL || strstr(line, "Mutex") != NULL);
}

/* Report on stderr where the still-running child `pid` is; true if every
 * thread gdb shows waits on a sanitizer runtime's lock (false without
 * gdb: nothing is known). */
static inline bool hung_child_report(pid_t pid)
{
    char dir[48];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int tid = atoi(e->d_name);
        char stat[256], wchan[64], sys[128];
        hung_child_read(pid, tid, "stat", stat, sizeof stat);
        hung_child_read(pid, tid, "wchan", wchan, sizeof wchan);
        hung_child_read(pid, tid, "syscall", sys, sizeof sys);
        const char *state = strrchr(stat, ')');
        fprintf(stderr, "hung child %d, thread %d: state %.2s, wchan %s, syscall %s\n",
                (int)pid, tid, state != NULL ? state + 1 : "?", wchan, sys);
    }
    if (d != NULL)
        closedir(d);
    char cmd[160];
    snprintf(cmd, sizeof cmd,
             "timeout 60 gdb -batch -nx -p %d -ex 'thread apply all bt 32' 2>/dev/null",
             (int)pid);
    FILE *gdb = access("/usr/bin/gdb", X_OK) == 0 ? popen(cmd, "r") : NULL;
    if (gdb == NULL) {
        fprintf(stderr, "hung child %d: no backtrace (gdb is not installed)\n", (int)pid);
        return false;
    }
    /* A thread's backtrace starts at "Thread"; it waits on a sanitizer's
     * lock if one of its first frames is in one, and none of its frames
     * is one of shoal's waits (whose spinning atomics pass through the
     * sanitizer's locks: there the wait is shoal's). */
    unsigned threads = 0, in_sanitizer = 0;
    bool lock = false, shoal_wait = false;
    char line[1024];
    while (fgets(line, sizeof line, gdb) != NULL) {
        bool thread = strncmp(line, "Thread ", 7) == 0;
        if (thread || line[0] == '#')
            fputs(line, stderr);
        if (thread) {
            in_sanitizer += threads != 0 && lock && !shoal_wait;
            threads++;
            lock = shoal_wait = false;
        } else if (line[0] == '#') {
            lock |= atoi(line + 1) <= 4 && hung_child_sanitizer_lock(line);
            shoal_wait |= strstr(line, "shoal_lock") != NULL ||
                          strstr(line, "shoal_turn_take") != NULL ||
                          strstr(line, "shoal_once_begin") != NULL;
        }
    }
    in_sanitizer += threads != 0 && lock && !shoal_wait;
    pclose(gdb);
    return threads != 0 && in_sanitizer == threads;
}

/* How hung_child_wait's wait ended. */
enum hung_child_end {
    HUNG_CHILD_EXITED,                  /* *status is its wait status */
    HUNG_CHILD_HUNG,                    /* reported and killed */
    HUNG_CHILD_HUNG_IN_SANITIZER,       /* the same, every thread in a sanitizer's lock */
    HUNG_CHILD_LOST,                    /* waitpid failed: errno */
};

/* Wait for the child pid for at most `seconds`: one still there then is
 * reported (above) and killed with SIGKILL, the one signal nothing can
 * block or leave pending. */
static inline enum hung_child_end hung_child_wait(pid_t pid, int seconds, int *status)
{
    for (long waited_ms = 0;; waited_ms += 2) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return HUNG_CHILD_EXITED;
        if (r < 0 && errno != EINTR)
            return HUNG_CHILD_LOST;
        if (waited_ms >= seconds * 1000L) {
            bool in_sanitizer = hung_child_report(pid);
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return in_sanitizer ? HUNG_CHILD_HUNG_IN_SANITIZER : HUNG_CHILD_HUNG;
        }
        usleep(2000);
    }
}

/* Whether a fork whose child hung may be tried again: only in a
 * sanitizer build (drop_in.h), only where every thread of the child
 * waited on the sanitizer's own lock, and at most HUNG_CHILD_RETRIES
 * times a run - those runtimes' locks are not fork-safe, and the tests
 * are about shoal's.  Says so on stderr when it allows one. */
#define HUNG_CHILD_RETRIES 3
static inline bool hung_child_retry(enum hung_child_end end, const char *what)
{
#if defined(DROP_IN_TSAN) || defined(DROP_IN_ASAN)
    static unsigned retries;
    if (end == HUNG_CHILD_HUNG_IN_SANITIZER && ++retries <= HUNG_CHILD_RETRIES) {
        fprintf(stderr, "%s: the child hung in the sanitizer's runtime, not in shoal "
                "(above): forking again\n", what);
        return true;
    }
#else
    (void)end;
    (void)what;
#endif
    return false;
}

#endif
