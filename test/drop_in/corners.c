/* corners.c - fork, signals and exit where an allocator is easy to hang.
 *
 *   corners report    fork while another thread writes a statistics report
 *   corners signal    fork from a SIGALRM handler while the interrupted
 *                     code is inside malloc and free of huge blocks, or
 *                     inside fork itself (single-threaded)
 *   corners noproc    without /proc: blocks freed into the heap of an
 *                     exited thread come home from an idle outbox, and
 *                     when the main thread ends with pthread_exit, the
 *                     process must still end when its last thread does
 *   corners seccomp   a program that installs a seccomp filter of its own
 *                     after start-up, one that kills on mincore(2), still
 *                     gets zeroed huge blocks from calloc
 *   corners seccomp_thread  a single-threaded program whose filter kills
 *                     on clone: shoal, holding 48 MiB freed, starts no
 *                     purger thread there
 *   corners seccomp_barrier  a program whose filter kills on membarrier(2)
 *                     makes, frees and collects huge blocks
 *
 * Every case runs in a child that the test waits for with a deadline: a
 * hang is killed and reported as a failure, as is a child that crashes or
 * finds a damaged block.  Before these were fixed, the report case's
 * child spun for ever in its first report, the signal case deadlocked on
 * a lock the interrupted code held, the noproc case never exited, and
 * the seccomp case's child was killed by SIGSYS.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include "drop_in.h"
#include "hung_child.h"
#include "../seccomp_refuse.h"

#define DEADLINE_S 60
#define SKIP 77

/* Run fn in a child, in a process group of its own; fail if it hangs
 * past DEADLINE_S (the group is killed: nothing it forked is left
 * spinning), crashes or exits non-zero.  Returns its exit status (SKIP
 * passes through). */
static int in_child(int (*fn)(void), const char *what)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);          /* a hang is killed with all it forked */
        int rc = fn();
        fflush(NULL);
        _exit(rc);
    }
    for (int waited = 0; waited < DEADLINE_S * 100; waited++) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (WIFSIGNALED(status))
                die("%s: killed by signal %d", what, WTERMSIG(status));
            if (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != SKIP)
                die("%s: exit status %d", what, WEXITSTATUS(status));
            return WEXITSTATUS(status);
        }
        usleep(10 * 1000);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    die("%s: still running after %d s: it hangs", what, DEADLINE_S);
}

/* ---- fork during a report -------------------------------------------- */

static _Atomic bool stop;

static void *reporter(void *arg)
{
    int fd = *(int *)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        alloc_stats_print(fd);
    return NULL;
}

/* A child of the report case that has not ended by then is reported
 * where it waits and killed (hung_child.h), within the case's deadline
 * even when a sanitizer build forks again after hangs in its runtime. */
#define CHILD_TIMEOUT_S 10

static int report_case(void)
{
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        die("/dev/null: %s", strerror(errno));
    pthread_t t;
    if (pthread_create(&t, NULL, reporter, &fd) != 0)
        die("pthread_create failed");
    for (int i = 0; i < 200; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0) {
            hung_child_allow_trace();
            /* The reporter does not exist here; its report must not hold
             * ours (or the exit report) back. */
            alloc_stats_print(fd);
            void *p = block_make(1000, 7);
            if (p == NULL || block_check(p) != NULL)
                _exit(2);
            alloc_free(p);
            alloc_stats_print(fd);
            _exit(0);
        }
        int status = 0;
        enum hung_child_end end = hung_child_wait(pid, CHILD_TIMEOUT_S, &status);
        char what[48];
        snprintf(what, sizeof what, "fork %d during a report", i);
        if (hung_child_retry(end, what))
            continue;
        if (end != HUNG_CHILD_EXITED)
            die("%s: the child %s", what,
                end == HUNG_CHILD_LOST ? "was lost" : "hung (killed; where it waited is above)");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            die("%s: the child failed", what);
    }
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    return 0;
}

/* ---- fork from a signal handler --------------------------------------- */

static _Atomic long handler_forks;
static _Atomic long forked, reaped;     /* children, by both */
/* Children not yet reaped past which the handler forks no more.  A
 * machine whose fork takes most of the timer's period (0.3 ms and more
 * with thousands of zombies, whose list wait4 walks) otherwise reaped
 * one child for each the handler made, and never left the loop. */
#define UNREAPED_MAX 64

static void on_alarm(int sig)
{
    (void)sig;
    if (atomic_load_explicit(&forked, memory_order_relaxed) -
            atomic_load_explicit(&reaped, memory_order_relaxed) >= UNREAPED_MAX)
        return;
    int saved = errno;
    pid_t pid = fork();         /* async-signal-safe */
    if (pid == 0)
        _exit(0);               /* only async-signal-safe calls in here */
    if (pid > 0) {
        atomic_fetch_add_explicit(&handler_forks, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&forked, 1, memory_order_relaxed);
    }
    errno = saved;
}

static int signal_case(void)
{
#ifdef DROP_IN_TSAN
    return SKIP;                /* TSan defers signals and owns fork */
#endif
    struct sigaction sa = { 0 };
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
        die("sigaction: %s", strerror(errno));
    struct itimerval every = { { 0, 500 }, { 0, 500 } };        /* 0.5 ms */
    if (setitimer(ITIMER_REAL, &every, NULL) != 0)
        die("setitimer: %s", strerror(errno));
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long rounds = 0;
    do {
        /* Huge blocks take the huge cache's lock; a fork takes the
         * allocator's fork handlers. */
        void *p = block_make((8u << 20) + (size_t)(rounds % 7) * 4096, (uint32_t)rounds);
        if (p == NULL || block_check(p) != NULL)
            return 2;
        alloc_free(p);
        if (rounds % 16 == 0) {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            if (pid > 0)
                atomic_fetch_add_explicit(&forked, 1, memory_order_relaxed);
        }
        while (waitpid(-1, NULL, WNOHANG) > 0)
            atomic_fetch_add_explicit(&reaped, 1, memory_order_relaxed);
        rounds++;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < 3);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    while (waitpid(-1, NULL, 0) > 0) {
    }
    printf("  %ld rounds, %ld forks from the handler\n", rounds, atomic_load(&handler_forks));
    return atomic_load(&handler_forks) > 0 ? 0 : 3;
}

/* ---- pthread_exit from main without /proc ------------------------------ */

static void *last_thread(void *arg)
{
    (void)arg;
    for (int round = 0; round < 20; round++) {
        void *b[256];
        for (int i = 0; i < 256; i++)
            if ((b[i] = block_make(100 + (size_t)i * 37, (uint32_t)i)) == NULL)
                _exit(2);
        for (int i = 0; i < 256; i++)
            check_free(b[i], "last thread");
    }
    if (atomic_load(&drop_in_errors) != 0)
        _exit(2);
    usleep(100 * 1000);
    return NULL;                /* the process ends here */
}

/* Twelve blocks of a thread that has exited, freed by this thread, wait
 * in its outbox; without /proc the purger cannot count threads and
 * leaves when it has nothing to do, but it stays for them, sends them,
 * and they come home with no further allocator call. */
#define TWELVE 12
static void *twelve[TWELVE];

static void *make_twelve(void *arg)
{
    (void)arg;
    for (int i = 0; i < TWELVE; i++)
        twelve[i] = block_make(1024, 40 + (uint32_t)i);
    return NULL;
}

static bool idle_outbox_comes_home(void)
{
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 50);
    alloc_option_set(ALLOC_OPTION_PURGE_THREAD, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, make_twelve, NULL) != 0)
        return false;
    pthread_join(t, NULL);
    for (int i = 0; i < TWELVE; i++)
        if (twelve[i] != NULL)
            check_free(twelve[i], "a block of an exited thread");
    for (int ms = 0; ms < 10000; ms += 10) {
        alloc_stats_t st = { .size = sizeof st };
        if (alloc_stats_get(&st) == 0 && st.remote_in_flight == 0)
            return true;
        usleep(10 * 1000);
    }
    return false;
}

static int noproc_case(void)
{
#ifdef DROP_IN_TSAN
    /* TSan's runtime has a thread of its own that outlives main's
     * pthread_exit: no process ends with its last thread there. */
    return SKIP;
#endif
    /* A mount namespace of our own, with /proc unmounted in it. */
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        umount2("/proc", MNT_DETACH) != 0) {
        printf("  no mount namespace here (%s): skipped\n", strerror(errno));
        return SKIP;
    }
    if (access("/proc/self/stat", F_OK) == 0)
        return 4;
    void *p = block_make(5000, 1);      /* the main thread allocates too */
    if (p == NULL)
        return 2;
    if (!idle_outbox_comes_home())
        return 6;
    pthread_t t;
    if (pthread_create(&t, NULL, last_thread, NULL) != 0)
        return 5;
    check_free(p, "main thread");
    pthread_exit(NULL);
}

/* ---- a seccomp filter installed late ---------------------------------- */

/* calloc of a huge block from a mapping used before: every byte zero,
 * and what it was filled with before stays resident or not as shoal
 * decides (mincore(2) where it may ask). */
static bool huge_calloc_reads_zero(void)
{
    const size_t n = (size_t)8 << 20;
    unsigned char *p = alloc_malloc(n);
    if (p == NULL)
        return false;
    memset(p, 0xc5, n);
    alloc_free(p);                      /* into the thread's huge slot */
    unsigned char *q = alloc_calloc(1, n);
    if (q == NULL)
        return false;
    for (size_t i = 0; i < n; i++)
        if (q[i] != 0)
            return false;
    alloc_free(q);
    return true;
}

/* A daemon that sandboxes itself once it has started (libseccomp, or
 * prctl as here) with a list of the calls it makes: mincore is on no
 * such list (nor in any of systemd's groups), and a call the filter
 * does not allow kills the process.  shoal used to look for a filter
 * once, at its first huge calloc, and ask mincore from then on. */
static int seccomp_case(void)
{
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);  /* freed mappings stay */
    if (!huge_calloc_reads_zero())      /* before the filter: mincore asked */
        return 2;
    if (seccomp_refuse(__NR_mincore, SECCOMP_ANSWER_KILL) != 0) {
        printf("  no seccomp filter here (%s): skipped\n", strerror(errno));
        return SKIP;
    }
    for (int round = 0; round < 3; round++)
        if (!huge_calloc_reads_zero())
            return 3;
    return 0;
}

/* A single-threaded daemon sandboxed with a list that has no clone (it
 * starts no threads): shoal starts its purger in a single-threaded
 * process once it holds 32 MiB, and the thread's clone killed it. */
static int seccomp_thread_case(void)
{
    enum { BLOCKS = 48, ROUNDS = 4 };
    const size_t n = (size_t)1 << 20;
#ifdef DROP_IN_TSAN
    /* TSan's runtime starts a thread of its own in the fork child. */
    printf("  under ThreadSanitizer: skipped\n");
    return SKIP;
#endif
    if (seccomp_refuse(__NR_clone, SECCOMP_ANSWER_KILL) != 0 ||
        seccomp_refuse(__NR_clone3, SECCOMP_ANSWER_KILL) != 0) {
        printf("  no seccomp filter here (%s): skipped\n", strerror(errno));
        return SKIP;
    }
    static unsigned char *blocks[BLOCKS];
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < BLOCKS; i++) {
            if ((blocks[i] = alloc_malloc(n)) == NULL)
                return 2;
            memset(blocks[i], round * BLOCKS + i, n);
        }
        for (int i = 0; i < BLOCKS; i++) {
            for (size_t at = 0; at < n; at += 4093)
                if (blocks[i][at] != (unsigned char)(round * BLOCKS + i))
                    return 3;
            alloc_free(blocks[i]);      /* 48 MiB freed: a purger is wanted */
        }
    }
    return 0;
}

/* The same daemon's list without membarrier, which shoal asks at its
 * first huge block, and uses in the pass that takes back the mappings
 * that threads keep for reuse. */
static int seccomp_barrier_case(void)
{
    enum { ROUNDS = 4 };
    const size_t n = (size_t)8 << 20;
    if (seccomp_refuse(__NR_membarrier, SECCOMP_ANSWER_KILL) != 0) {
        printf("  no seccomp filter here (%s): skipped\n", strerror(errno));
        return SKIP;
    }
    for (int round = 0; round < ROUNDS; round++) {
        unsigned char *p = alloc_malloc(n);
        if (p == NULL)
            return 2;
        memset(p, round + 1, n);
        for (size_t at = 0; at < n; at += 4093)
            if (p[at] != (unsigned char)(round + 1))
                return 3;
        alloc_free(p);                  /* into the thread's huge slot */
        alloc_collect(true);            /* a pass: the slot's mapping back */
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *name; int (*fn)(void); } cases[] = {
        { "report", report_case }, { "signal", signal_case }, { "noproc", noproc_case },
        { "seccomp", seccomp_case }, { "seccomp_thread", seccomp_thread_case },
        { "seccomp_barrier", seccomp_barrier_case },
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) != 0)
            continue;
        int rc = in_child(cases[i].fn, cases[i].name);
        printf("corners %s: %s\n", cases[i].name, rc == SKIP ? "skipped" : "ok");
        return rc;
    }
    fprintf(stderr, "usage: %s report|signal|noproc|seccomp|seccomp_thread|seccomp_barrier\n",
            argv[0]);
    return 2;
}
