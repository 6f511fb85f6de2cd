/* oom.c - running out of memory on every thread at once, and recovering.
 *
 *   stress_oom [--long] [--threads N] [--seed N] [--scale X] [--no-rlimit]
 *
 * Part 1, MAX_MEMORY: the limit is set to what shoal has mapped plus
 * 192 MiB (64 MiB under ThreadSanitizer), and N threads (4 by default)
 * allocate pattern-filled blocks of four tiers in turn - small (16 B to
 * 4 KiB), medium (to 64 KiB), large (to 2 MiB) and huge (to 8 MiB) - until
 * every tier has failed for every thread.  Each failure must be NULL with
 * errno ENOMEM; at the first failure of a tier the thread also checks that
 * alloc_calloc and alloc_aligned either succeed or fail the same way, and
 * that a realloc that fails leaves its block intact.  Then each thread
 * frees half of its own blocks and half of its neighbour's, so that every
 * block goes, half of them by remote frees into full pages of a thread
 * that is at the limit too; then every thread must at once be able
 * to allocate a small, a medium and a large block again; then they fill
 * up to the limit a second time and must get at least half as much as
 * the first time.  Every byte is checked before it is freed.  Cycles
 * repeat (more in --long); at the end the limit is lifted and a 512 MiB
 * block must succeed.
 *
 * Part 2, RLIMIT_AS: the same in a forked child whose address space is
 * limited to what it has plus 128 MiB, with MAX_MEMORY off: the kernel's
 * mmap refusal must surface as NULL/ENOMEM in every thread, the purger
 * thread's start included.  Skipped under ThreadSanitizer and
 * AddressSanitizer, which reserve terabytes of shadow address space.
 */
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "stress.h"

enum { SMALL, MEDIUM, LARGE, HUGE, TIERS };
static const char *const tier_name[TIERS] = { "small", "medium", "large", "huge" };

typedef struct entry_s {
    unsigned char *p;
    size_t n;
    uint64_t key;
} entry_t;

/* Bookkeeping lives in mmap'd arrays made before any limit is set, so
 * the test's own memory never competes with what it measures. */
#define CAPACITY ((size_t)1 << 18)

typedef struct worker_s {
    unsigned index;
    pthread_t tid;
    entry_t *e;
    size_t n;                   /* entries in use (NULL p: freed) */
    size_t filled[2];           /* bytes got in the first and second fill */
    unsigned failures[TIERS];
} worker_t;

static stress_opts_t opt;
static unsigned nthreads, cycles;
static worker_t *workers;
static pthread_barrier_t barrier;

static size_t tier_size(rng_t *g, int t)
{
    switch (t) {
    case SMALL: return rng_range(g, 16, 4 * KiB);
    case MEDIUM: return rng_range(g, 4 * KiB + 1, 64 * KiB);
    case LARGE: return rng_range(g, 64 * KiB + 1, 2 * MiB);
    default: return rng_range(g, 2 * MiB + 1, 8 * MiB);
    }
}

static void wait_all(void)
{
    int rc = pthread_barrier_wait(&barrier);
    stress_check(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "pthread_barrier_wait: %d", rc);
}

static void keep(worker_t *w, unsigned char *p, size_t n, bool zeroed)
{
    stress_check(w->n < CAPACITY, "thread %u: %zu blocks and still no ENOMEM: is the limit "
                 "enforced?", w->index, w->n);
    check_new_block(p, n, 0, "oom");
    if (zeroed)
        verify_zero(p, n, "calloc at the limit");
    entry_t *e = &w->e[w->n++];
    e->p = p;
    e->n = n;
    e->key = block_key(p, n, opt.seed);
    pattern_fill(p, 0, n, e->key);
}

static void release(entry_t *e, const char *where)
{
    if (e->p == NULL)
        return;
    pattern_verify(e->p, 0, e->n, e->key, where);
    alloc_free(e->p);
    e->p = NULL;
}

/* What else must hold when a tier has just failed. */
static void at_failure(worker_t *w, rng_t *g, size_t n)
{
    errno = 0;
    unsigned char *p = alloc_calloc(1, n);
    if (p == NULL)
        stress_check(errno == ENOMEM, "calloc(%zu) at the limit: NULL with errno %d, not ENOMEM",
                     n, errno);
    else
        keep(w, p, n, true);
    errno = 0;
    p = alloc_aligned(4096, n);
    if (p == NULL) {
        stress_check(errno == ENOMEM,
                     "aligned(4096, %zu) at the limit: NULL with errno %d, not ENOMEM", n, errno);
    } else {
        stress_check(((uintptr_t)p & 4095) == 0, "aligned(4096) gave %p", (void *)p);
        keep(w, p, n, false);
    }
    if (w->n == 0)
        return;
    entry_t *e = &w->e[rng_below(g, w->n)];
    if (e->p == NULL)
        return;
    size_t want = e->n + n;
    if (!stress_huge_realloc_ok(e->n, want))
        return;
    errno = 0;
    unsigned char *q = alloc_realloc(e->p, want);
    if (q == NULL) {
        stress_check(errno == ENOMEM, "realloc(%zu) at the limit: NULL with errno %d", want,
                     errno);
        pattern_verify(e->p, 0, e->n, e->key, "block whose realloc failed at the limit");
        return;
    }
    pattern_verify(q, 0, e->n, e->key, "block grown by realloc at the limit");
    pattern_fill(q, e->n, want, e->key);
    e->p = q;
    e->n = want;
}

/* Where the memory is, printed before a recovery failure is reported. */
static void where_is_memory(void)
{
    alloc_stats_t st = stress_stats();
    fprintf(stderr, "stress_oom: MAX_MEMORY %ld; mapped %zu KiB, %zu superpages, %zu of "
            "their slots used; huge: %zu live (%zu KiB), %zu cached (%zu KiB); large: "
            "%zu live (%zu KiB)\n", alloc_option_get(ALLOC_OPTION_MAX_MEMORY),
            st.mapped >> 10, st.superpages, st.pool_slots_used, st.huge_live,
            st.huge_live_bytes >> 10, st.huge_cached, st.huge_cached_bytes >> 10,
            st.large_live, st.large_live_bytes >> 10);
}

/* Allocate tiers in turn until each has failed; returns the bytes got. */
static size_t fill(worker_t *w, rng_t *g)
{
    bool failed[TIERS] = { false };
    unsigned left = TIERS;
    size_t bytes = 0;
    for (int t = 0; left != 0; t = (t + 1) % TIERS) {
        if (failed[t])
            continue;
        size_t n = tier_size(g, t);
        errno = 0;
        unsigned char *p = alloc_malloc(n);
        if (p != NULL) {
            keep(w, p, n, false);
            bytes += n;
            continue;
        }
        stress_check(errno == ENOMEM, "thread %u: malloc(%zu) (%s) at the limit: NULL with "
                     "errno %d, not ENOMEM", w->index, n, tier_name[t], errno);
        failed[t] = true;
        left--;
        w->failures[t]++;
        at_failure(w, g, n);
    }
    return bytes;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    wait_all();                 /* the limit is set */
    for (unsigned c = 0; c < cycles; c++) {
        rng_t g = rng_make(opt.seed, ((uint64_t)c << 32) | w->index);
        w->n = 0;
        w->filled[0] = fill(w, &g);
        wait_all();
        /* Half of ours, half of the neighbour's: remote frees into pages
         * whose owner is at the limit too. */
        worker_t *nb = &workers[(w->index + 1) % nthreads];
        for (size_t i = 0; i < w->n; i += 2)
            release(&w->e[i], "own block, freed at the limit");
        for (size_t i = 1; i < nb->n; i += 2)
            release(&nb->e[i], "neighbour's block, freed at the limit");
        wait_all();
        /* Recovered: each thread gets a block of each pool tier at once. */
        for (int t = SMALL; t <= LARGE; t++) {
            size_t n = tier_size(&g, t);
            errno = 0;
            unsigned char *p = alloc_malloc(n);
            if (p == NULL)
                where_is_memory();
            stress_check(p != NULL, "thread %u: after half of everything was freed, "
                         "malloc(%zu) (%s) still fails: %s", w->index, n, tier_name[t],
                         strerror(errno));
            keep(w, p, n, false);
        }
        wait_all();
        w->filled[1] = fill(w, &g);
        wait_all();
        for (size_t i = 0; i < w->n; i++)
            release(&w->e[i], "block freed at the end of a cycle");
        wait_all();
        if (w->index == 0) {
            size_t a = 0, b = 0;
            for (unsigned i = 0; i < nthreads; i++) {
                a += workers[i].filled[0];
                b += workers[i].filled[1];
            }
            stress_check(b >= a / 2, "cycle %u: the first fill got %zu MiB, the second only "
                         "%zu MiB: freed memory is not reusable", c, a >> 20, b >> 20);
        }
        wait_all();
    }
    return NULL;
}

static void run_threads(void)
{
    int rc = pthread_barrier_init(&barrier, NULL, nthreads + 1);
    stress_check(rc == 0, "pthread_barrier_init: %d", rc);
    for (unsigned i = 0; i < nthreads; i++) {
        workers[i].index = i;
        memset(workers[i].failures, 0, sizeof workers[i].failures);
        stress_thread_start(&workers[i].tid, worker, &workers[i]);
    }
}

static void start_and_join(void)
{
    wait_all();                 /* let them go */
    for (unsigned c = 0; c < cycles; c++)
        for (int k = 0; k < 6; k++)     /* the workers' waits per cycle */
            wait_all();
    for (unsigned i = 0; i < nthreads; i++)
        stress_thread_join(workers[i].tid);
    pthread_barrier_destroy(&barrier);
    for (unsigned i = 0; i < nthreads; i++)
        for (int t = 0; t < TIERS; t++)
            stress_check(workers[i].failures[t] == 2 * cycles, "thread %u: tier %s failed %u "
                         "times in %u cycles", i, tier_name[t], workers[i].failures[t], cycles);
}

static void part_max_memory(size_t room)
{
    long limit = (long)(stress_stats().mapped + room);
    stress_check(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, limit) == 0, "setting MAX_MEMORY");
    stress_check(alloc_option_get(ALLOC_OPTION_MAX_MEMORY) == limit, "MAX_MEMORY not kept");
    run_threads();
    start_and_join();
    stress_check(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0) == 0, "clearing MAX_MEMORY");
    /* Lifted: a block far beyond the old limit works. */
    size_t big = 512 * MiB;
    errno = 0;
    unsigned char *p = alloc_malloc(big);
    stress_check(p != NULL, "malloc(512 MiB) after MAX_MEMORY was lifted: %s", strerror(errno));
    uint64_t key = block_key(p, big, opt.seed);
    sparse_fill(p, big, key);
    sparse_verify(p, big, key, "512 MiB block");
    alloc_free(p);
}

#if !defined(STRESS_TSAN) && !defined(STRESS_ASAN)
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    size_t pages = 0;
    stress_check(f != NULL && fscanf(f, "%zu", &pages) == 1, "reading /proc/self/statm");
    fclose(f);
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void part_rlimit(void)
{
    /* Unmap the huge cache first (the 512 MiB block of part 1 is in it):
     * the child would drop it at its limit and fill that much more. */
    alloc_collect(true);
    fflush(NULL);
    pid_t pid = fork();
    stress_check(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        stress_name = "stress_oom (RLIMIT_AS child)";
        run_threads();          /* stacks before the limit */
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = vm_size() + 128 * MiB;
        stress_check(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
        start_and_join();
        _exit(0);
    }
    int status;
    stress_check(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    stress_check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                 "the RLIMIT_AS child %s %d", WIFEXITED(status) ? "exited with" : "died of signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}
#endif

int main(int argc, char **argv)
{
    int i = stress_init("stress_oom", argc, argv, &opt);
    bool rlimit = true;
    if (i < argc && strcmp(argv[i], "--no-rlimit") == 0) {
        rlimit = false;
        i++;
    }
    if (i != argc) {
        stress_usage(" [--no-rlimit]");
        return 2;
    }
    nthreads = opt.threads ? opt.threads : 4;
    cycles = (unsigned)stress_amount(&opt, 2, 200, 1);
    workers = mmap(NULL, nthreads * sizeof *workers, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    stress_check(workers != MAP_FAILED, "mmap: %s", strerror(errno));
    for (unsigned k = 0; k < nthreads; k++) {
        workers[k].e = mmap(NULL, CAPACITY * sizeof(entry_t), PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        stress_check(workers[k].e != MAP_FAILED, "mmap: %s", strerror(errno));
    }
#ifdef STRESS_TSAN
    size_t room = 64 * MiB;
#else
    size_t room = 192 * MiB;
#endif
    part_max_memory(room);
    const char *rl = "RLIMIT_AS in a child";
#if defined(STRESS_TSAN) || defined(STRESS_ASAN)
    rl = "RLIMIT_AS skipped under a sanitizer that reserves shadow memory";
#else
    if (rlimit)
        part_rlimit();
    else
        rl = "RLIMIT_AS skipped (--no-rlimit)";
#endif
    (void)rlimit;
    stress_check_quiescent();
    size_t a = 0;
    for (unsigned k = 0; k < nthreads; k++)
        a += workers[k].filled[0];
    stress_done("%u threads x %u cycles at MAX_MEMORY (+%zu MiB; last fill %zu MiB), %s", nthreads,
                cycles, room >> 20, a >> 20, rl);
    return 0;
}
