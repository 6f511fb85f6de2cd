/* fork_reuse.c - a fork child reuses what the parent's other threads
 * held.
 *
 *   fork_reuse all      the child frees every block the parent's worker
 *                       threads made, then makes as many of its own
 *   fork_reuse half     the child frees every other one (pages half
 *                       live), then makes as many as it freed
 *   fork_reuse threaded the child starts a thread first, then does what
 *                       `half` does (not under a sanitizer: see drop_in.h)
 *   fork_reuse after_thread  the child runs a short thread (and so starts
 *                       shoal's purger) and joins it, then does what `half`
 *                       does (not under a sanitizer)
 *   fork_reuse cow      the child frees one block: the memory it has to
 *                       copy from the parent stays small (not under a
 *                       sanitizer, whose own memory is in the count)
 *   fork_reuse forward  blocks of a page are on their way to a heap that
 *                       owned it before, when a thread that adopted the
 *                       page vanishes at the fork
 *   fork_reuse parked   a block is on its way to the parked heap of an
 *                       exited thread at the fork, with PURGE_DELAY_MS=0
 *                       (set by ctest): the child's rebuild sends it
 *
 * Two worker threads each make WORKER_BLOCKS pattern-filled blocks of
 * 48 and 64 bytes and stay alive, idle, across the fork: in the child
 * their heaps have no thread.  The child checks every block it frees and
 * every one it keeps; its own new blocks are pattern-filled too and
 * checked after the child has sent its outbox, so a block handed out over
 * one still live, or written by a send after it was handed out, shows up
 * as a damaged pattern.  Before the fork the main thread frees a few of
 * the first worker's blocks: five reach the worker's inbox, which it
 * never takes, five wait in the main thread's outbox - blocks the child's
 * rebuild finds free by their marks, and which must then never be sent
 * anywhere.  In `all` and `half` the child must take no more
 * than SLACK_SLOTS new 64 KiB slots for its blocks (before, it took new
 * ones for all of them: the pages of the vanished threads were kept, and
 * what the child freed into them never came back); after it frees
 * everything and collects, the slots it holds must fall below what the
 * workers' blocks took.  `threaded` checks contents only: a child with a
 * second thread leaves those pages alone (docs/design.md, Known limits).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include "drop_in.h"
#include "hung_child.h"

#define WORKERS 2
#ifdef DROP_IN_TSAN
#define WORKER_BLOCKS 20000
#else
#define WORKER_BLOCKS 100000
#endif
#define SLACK_SLOTS 16

enum mode { ALL, HALF, THREADED, AFTER_THREAD, COW };

static void *blocks[WORKERS][WORKER_BLOCKS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready;
static bool done;

static void *worker(void *arg)
{
    int w = (int)(uintptr_t)arg;
    for (int i = 0; i < WORKER_BLOCKS; i++)
        if ((blocks[w][i] = block_make(i & 1 ? 64 : 48, (uint32_t)(w * WORKER_BLOCKS + i))) ==
            NULL)
            die("worker: out of memory");
    pthread_mutex_lock(&lock);
    ready++;
    pthread_cond_broadcast(&cond);
    while (!done)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* How child pid ended; one that has not in CHILD_TIMEOUT_S is reported
 * with where it waits, and killed (hung_child.h). */
#define CHILD_TIMEOUT_S 60
static int child_status(pid_t pid)
{
    int st = 0;
    enum hung_child_end end = hung_child_wait(pid, CHILD_TIMEOUT_S, &st);
    if (end == HUNG_CHILD_LOST)
        die("waitpid: %s", strerror(errno));
    if (end != HUNG_CHILD_EXITED)
        die("the child did not finish in %d s (killed; where it waited is above)",
            CHILD_TIMEOUT_S);
    return st;
}

static void child_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: child: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    _exit(2);
}

static void check(void *p, const char *what)
{
    const char *why = block_check(p);
    if (why != NULL)
        child_fail("%s %p: %s", what, p, why);
}

/* The child's memory that is its own (written since the fork):
 * Private_Dirty of /proc/self/smaps_rollup, in KiB. */
static long private_dirty_kb(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (f == NULL)
        child_fail("/proc/self/smaps_rollup: %s", strerror(errno));
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "Private_Dirty: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* A free of one inherited block copies no more than the page it is in
 * (before: every page of the parent's other threads that held a free
 * block - half the second worker's blocks are free here, 5.5 MiB). */
static void child_cow(void)
{
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);
    long before = private_dirty_kb();
    alloc_free(blocks[1][WORKER_BLOCKS / 2 + 1]);
    long after = private_dirty_kb();
    if (after - before > 1024)
        child_fail("one free of an inherited block made %ld KiB of the parent's memory the "
                   "child's own (%ld -> %ld)",
                   after - before, before, after);
    printf("fork_reuse child: one free: private dirty %ld -> %ld KiB\n", before, after);
    fflush(stdout);
    _exit(0);
}

#ifndef DROP_IN_NO_CHILD_THREADS
/* Allocates a little and ends: the child has had a second thread. */
static void *child_short(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        alloc_free(alloc_malloc(100));
    return NULL;
}

/* A second thread that stays, idle, until the child exits. */
static void *child_helper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}
#endif

static void child_run(enum mode mode)
{
#ifdef DROP_IN_NO_CHILD_THREADS
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);  /* no purger thread */
#endif
    if (mode == COW)
        child_cow();
#ifndef DROP_IN_NO_CHILD_THREADS
    pthread_t t;
    if (mode == THREADED && pthread_create(&t, NULL, child_helper, NULL) != 0)
        child_fail("pthread_create: %s", strerror(errno));
    if (mode == AFTER_THREAD) {
        if (pthread_create(&t, NULL, child_short, NULL) != 0)
            child_fail("pthread_create: %s", strerror(errno));
        pthread_join(t, NULL);
    }
#endif
    size_t before = stats_now().pool_slots_used;
    static void *mine[WORKERS * WORKER_BLOCKS];
    size_t n = 0;
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < WORKER_BLOCKS; i++) {
            if (blocks[w][i] == NULL)
                continue;               /* freed before the fork */
            check(blocks[w][i], "worker's block");
            if (mode == ALL || (i & 2) != 0) {
                alloc_free(blocks[w][i]);
                blocks[w][i] = NULL;
                n++;
            }
        }
    for (size_t k = 0; k < n; k++)
        if ((mine[k] = block_make(k & 1 ? 64 : 48, (uint32_t)(k * 2654435761u))) == NULL)
            child_fail("malloc: out of memory");
    size_t after = stats_now().pool_slots_used;
    alloc_collect(false);               /* the outbox goes */
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < WORKER_BLOCKS; i++)
            if (blocks[w][i] != NULL)
                check(blocks[w][i], "worker's block kept");
    for (size_t k = 0; k < n; k++)
        check(mine[k], "child's block");
    if (mode != THREADED && after > before + SLACK_SLOTS)
        child_fail("%zu blocks made after %zu of the vanished threads' were freed took %zu new "
                   "64 KiB slots (%zu -> %zu)",
                   n, n, after - before, before, after);
    for (size_t k = 0; k < n; k++)
        alloc_free(mine[k]);
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < WORKER_BLOCKS; i++)
            if (blocks[w][i] != NULL)
                alloc_free(blocks[w][i]);
    alloc_collect(true);
    size_t end = stats_now().pool_slots_used;
    size_t workers_slots = (size_t)WORKERS * WORKER_BLOCKS * 56 / 65536;
    if (mode != THREADED && end + workers_slots / 2 > before)
        child_fail("%zu slots in use with every block freed, %zu with the workers' blocks live",
                   end, before);
    /* What was on its way at the fork is written off, not in flight. */
    size_t in_flight = stats_now().remote_in_flight;
    if (mode != THREADED && in_flight != 0)
        child_fail("%zu remote frees in flight with every block back", in_flight);
    printf("fork_reuse child: %zu blocks freed and made again: slots %zu -> %zu, %zu at the end\n",
           n, before, after, end);
    fflush(stdout);
    _exit(0);
}

/* ---- forward: blocks on their way to a page's former heap ---------------
 * Thread X makes blocks and exits; the main thread and thread S free some
 * of them first (held in their outboxes for X's heap, now parked).  Thread
 * T collects (X's heap is dismantled, its pages orphaned) and adopts X's
 * page; then S's outbox goes (to X's inbox: the page is T's now), and T
 * and S idle across the fork.  In the child, T is vanished with the page,
 * and its blocks on their way - in the main thread's outbox, in X's
 * inbox - must reach the rebuild once: neither handed out twice nor
 * reported as a broken list. */
enum { FWD_BLOCKS = 1000, FWD_SIZE = 64, FWD_PUSH = 300 };
static void *fwd[FWD_BLOCKS], *pushers[FWD_PUSH];
static int step;

static void step_wait(int s)
{
    pthread_mutex_lock(&lock);
    while (step < s)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void step_set(int s)
{
    pthread_mutex_lock(&lock);
    step = s;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void *fwd_x(void *arg)
{
    (void)arg;
    for (int i = 0; i < FWD_BLOCKS; i++)
        if ((fwd[i] = block_make(FWD_SIZE, (uint32_t)i + 1)) == NULL)
            die("X: out of memory");
    step_set(1);
    step_wait(2);
    return NULL;                        /* its heap is parked */
}

static void *fwd_s(void *arg)
{
    (void)arg;
    alloc_free(alloc_malloc(1000));     /* a heap of its own */
    step_wait(2);
    for (int i = 10; i < 20; i++)
        check_free(fwd[i], "S");        /* held for X's heap */
    step_set(3);
    step_wait(5);
    for (int i = 0; i < FWD_PUSH; i++)
        check_free(pushers[i], "S");    /* 16 KiB: the outbox goes, X's batch with it */
    step_set(6);
    step_wait(7);
    return NULL;
}

static void *fwd_t(void *arg)
{
    (void)arg;
    alloc_free(alloc_malloc(1000));
    step_wait(4);
    alloc_collect(true);                /* X's parked heap: its pages to the orphanage */
    void *p = alloc_malloc(FWD_SIZE);   /* adopts X's page */
    step_set(5);
    step_wait(7);
    alloc_free(p);
    return NULL;
}

static int forward(void)
{
    for (int i = 0; i < FWD_PUSH; i++)
        if ((pushers[i] = block_make(FWD_SIZE, (uint32_t)i + 5000)) == NULL)
            die("out of memory");
    pthread_t x, s, t;
    if (pthread_create(&t, NULL, fwd_t, NULL) != 0 || pthread_create(&s, NULL, fwd_s, NULL) != 0 ||
        pthread_create(&x, NULL, fwd_x, NULL) != 0)
        die("pthread_create failed");
    step_wait(1);
    for (int i = 0; i < 10; i++)
        check_free(fwd[i], "main");     /* held for X's heap */
    step_set(2);
    pthread_join(x, NULL);
    step_wait(3);
    step_set(4);
    step_wait(6);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        hung_child_allow_trace();
#ifdef DROP_IN_NO_CHILD_THREADS
        alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);
#endif
        alloc_collect(false);           /* the rebuild, and the outbox goes */
        enum { M = 3000 };
        static void *got[M];
        for (int n = 0; n < M; n++)
            if ((got[n] = block_make(FWD_SIZE, (uint32_t)n * 7919u + 1)) == NULL)
                child_fail("malloc: out of memory");
        alloc_collect(false);
        for (int n = 0; n < M; n++)
            check(got[n], "child's block");
        for (int i = 20; i < FWD_BLOCKS; i++)
            check(fwd[i], "X's block kept");
        _exit(0);
    }
    int st = child_status(pid);
    step_set(7);
    pthread_join(s, NULL);
    pthread_join(t, NULL);
    for (int i = 20; i < FWD_BLOCKS; i++)
        check_free(fwd[i], "main");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the child failed (status %#x)", st);
    printf("fork_reuse forward: ok\n");
    return 0;
}

/* ---- parked -----------------------------------------------------------
 * Thread P makes a block and exits, after the main thread freed it: the
 * block waits in the main thread's outbox, for P's parked heap.  Thread V
 * makes a block and idles across the fork.  The child frees V's block:
 * the rebuild of V's page sends the outbox first, and a send to a heap
 * no thread holds runs a purge pass when one is due - at once, and
 * forced, with PURGE_DELAY_MS=0 - whose reclaim wants the turn the
 * rebuild holds: the child must not wait for itself (it did, for ever). */
static void *parked_block, *vanished_block;

/* Makes *a->block, says so with step a->made, and returns (its heap
 * parked) at step a->go. */
typedef struct {
    void **block;
    uint32_t seed;
    int made, go;
} parked_arg_t;

static void *parked_thread(void *arg)
{
    parked_arg_t *a = arg;
    if ((*a->block = block_make(FWD_SIZE, a->seed)) == NULL)
        die("out of memory");
    step_set(a->made);
    step_wait(a->go);
    return NULL;
}

static int parked(void)
{
    void *mine = block_make(FWD_SIZE, 13);      /* a heap of the main thread's own */
    pthread_t p, v;
    parked_arg_t va = { &vanished_block, 12, 1, 4 }, pa = { &parked_block, 11, 2, 3 };
    /* V first: a thread that starts after P exited would take P's heap. */
    if (pthread_create(&v, NULL, parked_thread, &va) != 0)
        die("pthread_create failed");
    step_wait(1);
    if (pthread_create(&p, NULL, parked_thread, &pa) != 0)
        die("pthread_create failed");
    step_wait(2);
    check_free(parked_block, "main");   /* held in the outbox, for P's heap */
    step_set(3);
    pthread_join(p, NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        alarm(30);                      /* a child waiting for itself ends */
        check(vanished_block, "V's block");
        alloc_free(vanished_block);
        void *q = block_make(FWD_SIZE, 14);
        if (q == NULL)
            child_fail("malloc: out of memory");
        check(q, "child's block");
        _exit(0);
    }
    int st = child_status(pid);
    step_set(4);
    pthread_join(v, NULL);
    check_free(vanished_block, "main");
    check_free(mine, "main");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the child failed (status %#x%s)", st,
            WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? ": it waited for 30 s" : "");
    printf("fork_reuse parked: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    enum mode mode;
    if (argc == 2 && strcmp(argv[1], "all") == 0)
        mode = ALL;
    else if (argc == 2 && strcmp(argv[1], "half") == 0)
        mode = HALF;
    else if (argc == 2 && strcmp(argv[1], "threaded") == 0)
        mode = THREADED;
    else if (argc == 2 && strcmp(argv[1], "after_thread") == 0)
        mode = AFTER_THREAD;
    else if (argc == 2 && strcmp(argv[1], "cow") == 0)
        mode = COW;
    else if (argc == 2 && strcmp(argv[1], "forward") == 0)
        return forward();
    else if (argc == 2 && strcmp(argv[1], "parked") == 0)
        return parked();
    else {
        fprintf(stderr, "usage: %s all|half|threaded|after_thread|cow|forward|parked\n", argv[0]);
        return 2;
    }
#ifdef DROP_IN_NO_CHILD_THREADS
    if (mode == THREADED || mode == AFTER_THREAD) {
        printf("fork_reuse %s: skipped (no threads in a fork child here)\n", argv[1]);
        return 77;
    }
#endif
    if (mode == COW && !CHECK_RSS) {
        printf("fork_reuse cow: skipped (the sanitizer's memory is in the count)\n");
        return 77;
    }
    pthread_t t[WORKERS];
    for (int w = 0; w < WORKERS; w++)
        if (pthread_create(&t[w], NULL, worker, (void *)(uintptr_t)w) != 0)
            die("pthread_create failed");
    pthread_mutex_lock(&lock);
    while (ready < WORKERS)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < 10; i++) {
        check_free(blocks[0][i], "main");
        blocks[0][i] = NULL;
        if (i == 4)
            alloc_collect(false);       /* these five to the worker's inbox */
    }
    if (mode == COW) {                  /* half the second worker's blocks free */
        for (int i = 0; i < WORKER_BLOCKS; i += 2) {
            check_free(blocks[1][i], "main");
            blocks[1][i] = NULL;
        }
        alloc_collect(false);
    }

    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        hung_child_allow_trace();
        child_run(mode);
    }
    int st = child_status(pid);

    pthread_mutex_lock(&lock);
    done = true;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int w = 0; w < WORKERS; w++)
        pthread_join(t[w], NULL);
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < WORKER_BLOCKS; i++)
            if (blocks[w][i] != NULL)
                check_free(blocks[w][i], "parent");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the child failed (status %#x)", st);
    if (atomic_load(&drop_in_errors) != 0)
        die("%ld damaged blocks in the parent", atomic_load(&drop_in_errors));
    printf("fork_reuse %s: ok\n", argv[1]);
    return 0;
}
