/* launch.c - run one workload and report its resource use.
 *
 *   launch --report FILE [--preload LIB] -- PROGRAM ARGS...
 *
 * Forks, sets LD_PRELOAD=LIB in the child only, execs PROGRAM and waits
 * for it with wait4().  Writes one line to FILE:
 *
 *   status=<exit status or -signal> wall_s=<s> maxrss_kb=<KiB>
 *   minflt=<n> majflt=<n> utime_s=<s> stime_s=<s>
 *
 * Why not the runner itself: ru_maxrss counts the RSS a process had before
 * exec, and a Python parent's is larger than most workloads' peak.  This
 * launcher is small, so the peak it reports is the workload's.
 * Exit status: the child's (128 + signal when killed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t child;

static void forward(int sig)
{
    if (child > 0)
        kill(child, sig);
}

int main(int argc, char **argv)
{
    const char *report = NULL, *preload = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc) {
            report = argv[++i];
        } else if (strcmp(argv[i], "--preload") == 0 && i + 1 < argc) {
            preload = argv[++i];
        } else {
            fprintf(stderr, "launch: unknown argument %s\n", argv[i]);
            return 125;
        }
    }
    if (i >= argc || report == NULL) {
        fprintf(stderr, "usage: launch --report FILE [--preload LIB] -- PROGRAM ARGS...\n");
        return 125;
    }
    FILE *out = fopen(report, "w");
    if (out == NULL) {
        fprintf(stderr, "launch: %s: %s\n", report, strerror(errno));
        return 125;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    child = fork();
    if (child < 0) {
        perror("launch: fork");
        return 125;
    }
    if (child == 0) {
        if (preload != NULL && *preload != '\0')
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execvp(argv[i], &argv[i]);
        fprintf(stderr, "launch: %s: %s\n", argv[i], strerror(errno));
        _exit(127);
    }
    signal(SIGTERM, forward);
    signal(SIGINT, forward);

    int status;
    struct rusage ru;
    while (wait4(child, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("launch: wait4");
            return 125;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    fprintf(out, "status=%d wall_s=%.6f maxrss_kb=%ld minflt=%ld majflt=%ld utime_s=%.6f stime_s=%.6f\n",
            code, wall, ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt,
            (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
            (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6);
    fclose(out);
    return code >= 0 ? code : 128 - code;
}
