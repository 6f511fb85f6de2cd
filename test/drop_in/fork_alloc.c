/* fork_alloc.c - fork while other threads allocate.
 *
 *   fork_alloc main     the main thread forks repeatedly
 *   fork_alloc thread   each fork comes from a new, non-main thread
 *   fork_alloc grow     the main thread forks while another grows the
 *                       pool into freed huge mappings (below)
 *
 * Worker threads allocate and free all the time (small to huge blocks,
 * so the pool, the large path and the huge cache are all busy), hand
 * blocks to each other through a shared array, and one of them keeps
 * creating short-lived threads (heap creation and abandonment).  Before
 * each fork the forking thread makes blocks of its own.  The child:
 *
 *   - verifies and frees the forking side's blocks (its own heap),
 *   - takes every block left in the shared array and verifies and frees
 *     it (pages owned by the parent's other threads, which do not exist
 *     in the child),
 *   - allocates, verifies and frees a few thousand blocks of all sizes,
 *   - starts a thread that allocates (not under TSan, which does not
 *     allow threads in the child of a multi-threaded fork; for the same
 *     reason the TSan child turns off the background purger),
 *   - calls alloc_collect(true), and exits 0.
 *
 * A child that finds a damaged block exits 2; one that hangs (a lock held
 * by another thread at the moment of the fork) is reported with its
 * threads' backtraces and killed after CHILD_TIMEOUT_S.  In `thread` mode every other child
 * leaves through pthread_exit, so the thread-exit path (abandoning the
 * heap) also runs in a forked child, and the process must then end as
 * its last thread exits (not under TSan, see child_run).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include "drop_in.h"
#include "hung_child.h"

#ifdef DROP_IN_TSAN
#define FORKS 12                /* a fork costs TSan a lot more */
#define CHILD_OPS 1000
#else
#define FORKS 120
#define CHILD_OPS 3000
#endif
#define WORKERS 2
#define SLOTS 256
#define OWN_BLOCKS 48
#define CHILD_LIVE 64
#define CHILD_TIMEOUT_S 20

static _Atomic(uintptr_t) slots[SLOTS];
static _Atomic bool stop;
static _Atomic unsigned long worker_ops, spawned;

/* ---- parent side ------------------------------------------------------ */

static void *worker(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg * 2654435761u + 17;
    void *local[8];
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 8; k++) {
            local[k] = block_make(pick_size(&s, 0), rnd(&s));
            if (local[k] == NULL)
                die("worker: out of memory");
        }
        for (int k = 0; k < 8; k++)
            check_free(local[k], "worker");
        void *p = block_make(pick_size(&s, 64), rnd(&s));
        if (p == NULL)
            die("worker: out of memory");
        uintptr_t old = atomic_exchange(&slots[rnd(&s) % SLOTS], (uintptr_t)p);
        if (old != 0)
            check_free((void *)old, "worker");
        atomic_fetch_add_explicit(&worker_ops, 1, memory_order_relaxed);
    }
    return NULL;
}

static void *short_lived(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg | 1;
    void *keep = NULL;
    for (int k = 0; k < 16; k++) {
        void *p = block_make(pick_size(&s, 0), rnd(&s));
        if (p == NULL)
            die("short-lived thread: out of memory");
        if (k == 7)
            keep = p;           /* left behind for a worker to free */
        else
            check_free(p, "short-lived thread");
    }
    uintptr_t old = atomic_exchange(&slots[rnd(&s) % SLOTS], (uintptr_t)keep);
    if (old != 0)
        check_free((void *)old, "short-lived thread");
    return NULL;
}

/* Keeps creating threads, so heaps are made and abandoned during forks. */
static void *spawner(void *arg)
{
    (void)arg;
    uint32_t s = 99;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_lived, (void *)(uintptr_t)rnd(&s)) != 0)
            die("pthread_create failed");
        pthread_join(t, NULL);
        atomic_fetch_add_explicit(&spawned, 1, memory_order_relaxed);
    }
    return NULL;
}

/* ---- child side ------------------------------------------------------- */

static void child_fail(const char *what, void *p, const char *why)
{
    fprintf(stderr, "FAIL: child %d: %s %p: %s\n", (int)getpid(), what, p, why);
    _exit(2);
}

static void child_check_free(void *p, const char *what)
{
    const char *why = block_check(p);
    if (why != NULL)
        child_fail(what, p, why);
    alloc_free(p);
}

#ifndef DROP_IN_NO_CHILD_THREADS
static void *child_thread(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg | 1;
    void *p[32];
    for (int k = 0; k < 32; k++)
        if ((p[k] = block_make(pick_size(&s, 16), rnd(&s))) == NULL)
            child_fail("thread in child: malloc", NULL, "out of memory");
    for (int k = 0; k < 32; k++)
        child_check_free(p[k], "thread in child: block");
    return NULL;
}
#endif

/* Everything a child does; `mine` and `other` are blocks made before the
 * fork (NULL entries skipped). */
static void child_run(void **mine, void **other, unsigned iter, bool leave_by_pthread_exit)
{
    hung_child_allow_trace();
#ifdef DROP_IN_NO_CHILD_THREADS
    /* No thread in the child (see drop_in.h); shoal's background purger
     * would be one. */
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);
#endif
    for (int i = 0; i < OWN_BLOCKS; i++) {
        if (mine[i] != NULL)
            child_check_free(mine[i], "forking thread's block");
        if (other != NULL && other[i] != NULL)
            child_check_free(other[i], "main thread's block");
    }
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t p = atomic_exchange(&slots[i], 0);
        if (p != 0)
            child_check_free((void *)p, "worker's block");
    }
    uint32_t s = iter * 7919u + 3;
    void *live[CHILD_LIVE] = { 0 };
    for (int op = 0; op < CHILD_OPS; op++) {
        unsigned k = rnd(&s) % CHILD_LIVE;
        if (live[k] != NULL)
            child_check_free(live[k], "child's own block");
        live[k] = block_make(pick_size(&s, 200), rnd(&s));
        if (live[k] == NULL)
            child_fail("malloc", NULL, "out of memory");
    }
    for (int k = 0; k < CHILD_LIVE; k++)
        if (live[k] != NULL)
            child_check_free(live[k], "child's own block");
#ifndef DROP_IN_NO_CHILD_THREADS
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)s) != 0)
        child_fail("pthread_create", NULL, strerror(errno));
    pthread_join(t, NULL);
#endif
    alloc_collect(true);
#ifdef DROP_IN_TSAN
    /* ThreadSanitizer finishes a thread's state at pthread_exit and then,
     * when it was the last, runs the exit handlers on it: instrumented
     * code there (any library's destructor) can crash its runtime. */
    leave_by_pthread_exit = false;
#endif
    if (leave_by_pthread_exit)
        pthread_exit(NULL);     /* last thread: the process exits with 0 */
#ifdef DROP_IN_ASAN
    _exit(0);                   /* LeakSanitizer's exit check cannot stop the
                                   parent's threads, which are not here */
#else
    exit(0);
#endif
}

/* ---- the forks -------------------------------------------------------- */

static void make_blocks(void **b, uint32_t seed)
{
    uint32_t s = seed | 1;
    for (int i = 0; i < OWN_BLOCKS; i++)
        if ((b[i] = block_make(pick_size(&s, 16), rnd(&s))) == NULL)
            die("out of memory");
}

static void free_blocks(void **b, const char *who)
{
    for (int i = 0; i < OWN_BLOCKS; i++)
        if (b[i] != NULL)
            check_free(b[i], who);
}

/* Waits for the child, for at most CHILD_TIMEOUT_S (hung_child.h).
 * False if it hung inside a sanitizer's runtime and the fork is to be
 * tried again (hung_child_retry). */
static bool wait_child(pid_t pid, unsigned iter)
{
    int st = 0;
    enum hung_child_end end = hung_child_wait(pid, CHILD_TIMEOUT_S, &st);
    if (end == HUNG_CHILD_LOST)
        die("waitpid: %s", strerror(errno));
    char what[32];
    snprintf(what, sizeof what, "fork %u", iter);
    if (hung_child_retry(end, what))
        return false;
    if (end != HUNG_CHILD_EXITED)
        die("fork %u: the child did not finish in %d s (killed): it hung, on a lock "
            "held across fork or a thread that keeps the process alive%s",
            iter, CHILD_TIMEOUT_S,
            end == HUNG_CHILD_HUNG_IN_SANITIZER ? " (in the sanitizer's runtime)" : "");
    if (WIFSIGNALED(st))
        die("fork %u: child killed by signal %d (%s)", iter, WTERMSIG(st),
            strsignal(WTERMSIG(st)));
    if (WEXITSTATUS(st) != 0)
        die("fork %u: child exited with %d", iter, WEXITSTATUS(st));
    return true;
}

typedef struct forker_arg_s {
    unsigned iter;
    void **main_blocks;
} forker_arg_t;

static void fork_once(unsigned iter, void **other, bool from_thread)
{
    bool done;
    do {
        void *mine[OWN_BLOCKS];
        make_blocks(mine, iter * 31u + (from_thread ? 7 : 0));
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0)
            child_run(mine, other, iter, from_thread && (iter & 1));
        free_blocks(mine, "forking thread (parent)");
        done = wait_child(pid, iter);
    } while (!done);
}

static void *forker(void *arg)
{
    forker_arg_t *a = arg;
    fork_once(a->iter, a->main_blocks, true);
    return NULL;
}

/* ---- grow: fork while the pool grows into freed huge mappings --------- */

/* Pool growth takes a chunk of a freed huge mapping, so it holds the
 * pool's growth lock while it takes the huge cache's: a fork handler that
 * took those two the other way round hung the parent within a few hundred
 * growths.  The grower frees a 13 MiB block (it stays in its slot), then
 * a 9 MiB one (the 13 MiB mapping moves to the shared cache), then keeps
 * 128 KiB blocks until the pool has grown into them.  It writes a word at
 * either end of its huge blocks and none in its kept ones, so the process
 * stays small.  Two more threads make and
 * free huge blocks all the time. */
#ifdef DROP_IN_TSAN
#define GROW_ROUNDS 150
#else
#define GROW_ROUNDS 1500
#endif
#define GROW_KEPT 35
#define GROW_WATCHDOG_S 100         /* under ctest's TIMEOUT of 120 */

/* A huge block of n bytes with a word written at each end, checked and
 * freed: its mapping, and the chunks the pool takes of it, stay all but
 * unfaulted. */
static void touch_free(size_t n, uint32_t word)
{
    uint32_t *p = alloc_malloc(n);
    if (p == NULL)
        die("grower: out of memory");
    uint32_t *end = (uint32_t *)((char *)p + n) - 1;
    *p = *end = word;
    if (*p != word || *end != word)
        die("grower: a %zu-byte block changed", n);
    alloc_free(p);
}

static void *grower(void *arg)
{
    void **kept = arg;
    uint32_t s = 5;
    /* A system that refuses the kept blocks' 6.6 GiB of address space
     * (strict overcommit, ulimit -v) ends the rounds early: fewer
     * growths, the same test. */
    for (int r = 0; r < GROW_ROUNDS; r++) {
        touch_free((size_t)13 << 20, rnd(&s));
        touch_free((size_t)9 << 20, rnd(&s));
        for (int k = 0; k < GROW_KEPT && r < GROW_ROUNDS; k++)
            if ((kept[r * GROW_KEPT + k] = alloc_malloc((size_t)128 << 10)) == NULL)
                r = GROW_ROUNDS;
    }
    atomic_store(&stop, true);
    return NULL;
}

static void *huge_churn(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    uint32_t s = (uint32_t)n | 1;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        check_free(block_make(n, rnd(&s)), "huge churner");
        atomic_fetch_add_explicit(&worker_ops, 1, memory_order_relaxed);
    }
    return NULL;
}

/* The child of the fork under way, for the watchdog to kill: an alarm
 * is not inherited, and a hung child would outlive the test. */
static volatile pid_t grow_child;

static void grow_watchdog(int sig)
{
    (void)sig;
    if (grow_child > 0)
        kill(grow_child, SIGKILL);
    static const char msg[] = "FAIL: fork_alloc grow: not done in the time allowed: "
                              "fork's prepare handler waits on a lock\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to say */
    }
    _exit(1);
}

static int grow_mode(void)
{
    void **kept = calloc((size_t)GROW_ROUNDS * GROW_KEPT, sizeof *kept);
    if (kept == NULL)
        die("out of memory");
    signal(SIGALRM, grow_watchdog);
    alarm(GROW_WATCHDOG_S);
    pthread_t g, c[2];
    if (pthread_create(&c[0], NULL, huge_churn, (void *)(uintptr_t)(5 << 20)) != 0 ||
        pthread_create(&c[1], NULL, huge_churn, (void *)(uintptr_t)(17 << 20)) != 0 ||
        pthread_create(&g, NULL, grower, kept) != 0)
        die("pthread_create failed");
    unsigned forks = 0;
    while (!atomic_load(&stop)) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0) {
#ifdef DROP_IN_NO_CHILD_THREADS
            alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1);
#endif
            /* The child can take every lock the handler took. */
            uint32_t s = forks | 1;
            void *p = block_make((size_t)6 << 20, rnd(&s)), *q = block_make(100, rnd(&s));
            const char *why = p == NULL || q == NULL ? "out of memory" : block_check(p);
            if (why == NULL)
                why = block_check(q);
            if (why != NULL)
                child_fail("block", p, why);
            alloc_free(p);
            alloc_free(q);
            _exit(0);
        }
        /* The watchdog covers a child that hangs too. */
        grow_child = pid;
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            die("fork %u: the child failed (status %#x)", forks, st);
        forks++;
    }
    alarm(0);
    pthread_join(g, NULL);
    pthread_join(c[0], NULL);
    pthread_join(c[1], NULL);
    for (size_t i = 0; i < (size_t)GROW_ROUNDS * GROW_KEPT; i++)
        alloc_free(kept[i]);
    free(kept);
    if (atomic_load(&drop_in_errors) != 0)
        die("%ld damaged blocks in the parent", atomic_load(&drop_in_errors));
    if (forks == 0 || atomic_load(&worker_ops) == 0)
        die("no forks or no huge blocks made");
    printf("fork_alloc grow: %u forks over %d growth rounds, %lu huge blocks: ok\n", forks,
           GROW_ROUNDS, atomic_load(&worker_ops));
    return 0;
}

int main(int argc, char **argv)
{
    bool from_thread;
    if (argc == 2 && strcmp(argv[1], "main") == 0)
        from_thread = false;
    else if (argc == 2 && strcmp(argv[1], "thread") == 0)
        from_thread = true;
    else if (argc == 2 && strcmp(argv[1], "grow") == 0)
        return grow_mode();
    else {
        fprintf(stderr, "usage: %s main|thread|grow\n", argv[0]);
        return 2;
    }
    pthread_t w[WORKERS + 1];
    for (int i = 0; i < WORKERS; i++)
        if (pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)(i + 1)) != 0)
            die("pthread_create failed");
    if (pthread_create(&w[WORKERS], NULL, spawner, NULL) != 0)
        die("pthread_create failed");

    for (unsigned iter = 0; iter < FORKS && atomic_load(&drop_in_errors) == 0; iter++) {
        if (!from_thread) {
            fork_once(iter, NULL, false);
            continue;
        }
        void *main_blocks[OWN_BLOCKS];
        make_blocks(main_blocks, iter * 131u);
        forker_arg_t a = { iter, main_blocks };
        pthread_t t;
        if (pthread_create(&t, NULL, forker, &a) != 0)
            die("pthread_create failed");
        pthread_join(t, NULL);
        free_blocks(main_blocks, "main thread");
    }

    atomic_store(&stop, true);
    for (int i = 0; i <= WORKERS; i++)
        pthread_join(w[i], NULL);
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t p = atomic_exchange(&slots[i], 0);
        if (p != 0)
            check_free((void *)p, "main thread at the end");
    }
    if (atomic_load(&drop_in_errors) != 0)
        die("%ld damaged blocks in the parent", atomic_load(&drop_in_errors));
    if (atomic_load(&worker_ops) == 0 || atomic_load(&spawned) == 0)
        die("the workers made no progress");
    printf("fork_alloc %s: %u forks, %lu worker rounds, %lu short-lived threads: ok\n",
           from_thread ? "thread" : "main", (unsigned)FORKS, atomic_load(&worker_ops),
           atomic_load(&spawned));
    return 0;
}
