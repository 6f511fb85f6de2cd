/* random_blocks.c - random malloc, calloc, aligned, realloc and free of
 * pattern-checked blocks across threads, most of them freed by a thread
 * that did not make them, many after their maker has exited.
 *
 *   stress_random [--long] [--threads N] [--seed N] [--scale X]
 *
 * N worker threads (4 by default) run at a time; each does a fixed number
 * of random operations and exits, and is replaced at once by a new thread
 * (rolling restarts: exits, adoptions and remote frees overlap).  Blocks
 * travel through a shared transfer array: a thread swaps one of its blocks
 * into a random slot with an atomic exchange and takes whatever was there,
 * which it checks and frees or keeps and passes on later.  A thread leaves
 * part of what it holds in the array when it exits.
 *
 * Sizes run from 1 byte to 6 MiB (small, medium, large and huge tiers);
 * one block in eight is made by alloc_aligned with a power-of-two
 * alignment up to 2 MiB, one in eight by alloc_calloc (checked zero).
 * Every byte of a block is checked against its pattern when it is freed,
 * when it changes hands, and after every realloc (the kept prefix).
 * Blocks are freed alternately with alloc_free and alloc_free_sized with
 * the requested size (alloc_free_aligned_sized with the alignment too).
 * At the end every block is freed and the statistics must count nothing
 * live.
 */
#include "stress.h"

#define XFER 1024               /* slots in the transfer array */
#define LOCAL 64                /* blocks a thread holds */
#define REC_MAGIC 0x7265636f72646d67ull

/* A block and what is known about it; itself an alloc_malloc block (so
 * records are small blocks freed remotely too) with a check word. */
typedef struct rec_s {
    unsigned char *p;
    size_t n;                   /* requested size */
    uint64_t key;               /* pattern key */
    size_t align;               /* 0: not from alloc_aligned */
    uint64_t check;
} rec_t;

static _Atomic(rec_t *) xfer[XFER];
static stress_opts_t opt;
static uint64_t ops_per_thread;
static _Atomic uint64_t n_ops, n_remote_handoffs, n_reallocs, n_moves;

static uint64_t rec_sum(const rec_t *r)
{
    return mix64((uint64_t)(uintptr_t)r->p ^ mix64(r->n ^ REC_MAGIC) ^ r->key ^
                 ((uint64_t)r->align << 7));
}

static void rec_seal(rec_t *r)
{
    r->check = rec_sum(r);
}

static void rec_verify(const rec_t *r, const char *where)
{
    stress_check(r->check == rec_sum(r), "%s: record %p of a block was overwritten", where,
                 (const void *)r);
    pattern_verify(r->p, 0, r->n, r->key, where);
    size_t u = alloc_usable_size(r->p);
    stress_check(u >= r->n, "%s: block %p: usable size %zu < requested %zu", where,
                 (void *)r->p, u, r->n);
}

static size_t pick_size(rng_t *g)
{
    uint64_t r = rng_below(g, 1000);
    if (r < 600)
        return rng_range(g, 1, 256);
    if (r < 880)
        return rng_range(g, 257, 4096);
    if (r < 975)
        return rng_range(g, 4097, 64 * KiB);
    if (r < 998)
        return rng_range(g, 64 * KiB + 1, 2 * MiB);
    return rng_range(g, 2 * MiB + 1, 6 * MiB);          /* huge */
}

static rec_t *make_block(rng_t *g)
{
    size_t n = pick_size(g);
    uint64_t how = rng_below(g, 8);
    size_t align = 0;
    unsigned char *p;
    errno = 0;
    if (how == 0) {
        /* Mostly modest alignments, now and then up to 2 MiB. */
        unsigned k = (unsigned)(rng_below(g, 16) == 0 ? rng_below(g, 22) : rng_below(g, 13));
        align = (size_t)1 << k;
        p = alloc_aligned(align, n);
    } else if (how == 1) {
        p = alloc_calloc(1, n);
    } else {
        p = alloc_malloc(n);
    }
    stress_check(p != NULL, "allocating %zu bytes (align %zu) failed: %s", n, align,
                 strerror(errno));
    check_new_block(p, n, align, "new block");
    if (how == 1)
        verify_zero(p, n, "new block");
    rec_t *r = alloc_malloc(sizeof *r);
    stress_check(r != NULL, "allocating a record failed");
    r->p = p;
    r->n = n;
    r->key = block_key(p, n, opt.seed);
    r->align = align;
    rec_seal(r);
    pattern_fill(p, 0, n, r->key);
    return r;
}

static void free_block(rec_t *r, uint64_t coin, const char *where)
{
    rec_verify(r, where);
    /* The sized frees take what the block was requested with. */
    if ((coin & 1) && r->align != 0)
        alloc_free_aligned_sized(r->p, r->align, r->n);
    else if (coin & 1)
        alloc_free_sized(r->p, r->n);
    else
        alloc_free(r->p);
    r->check = 0;
    if (coin & 2)
        alloc_free_sized(r, sizeof *r);
    else
        alloc_free(r);
}

static void realloc_block(rng_t *g, rec_t *r)
{
    size_t n;
    switch (rng_below(g, 4)) {
    case 0: n = pick_size(g); break;                                /* anything */
    case 1: n = r->n + rng_range(g, 1, 64); break;                  /* a little more */
    case 2: n = r->n > 1 ? r->n - rng_range(g, 1, r->n / 2 + 1) + 1 : 1; break; /* less */
    default: n = r->n < 3 * MiB ? r->n * 2 : r->n / 2; break;       /* double or halve */
    }
    if (n == 0)
        n = 1;
    if (!stress_huge_realloc_ok(r->n, n))
        return;
    if (n < r->n)       /* the bytes realloc drops are checked here, the rest after */
        rec_verify(r, "before a shrinking realloc");
    else
        stress_check(r->check == rec_sum(r), "record %p of a block was overwritten", (void *)r);
    errno = 0;
    unsigned char *q;
    if (rng_below(g, 4) == 0 && n % 8 == 0)
        q = alloc_reallocarray(r->p, n / 8, 8);
    else
        q = alloc_realloc(r->p, n);
    stress_check(q != NULL, "realloc of %p from %zu to %zu bytes failed: %s", (void *)r->p, r->n,
                 n, strerror(errno));
    check_new_block(q, n, 0, "realloc");
    size_t kept = n < r->n ? n : r->n;
    pattern_verify(q, 0, kept, r->key, "after realloc (kept bytes)");
    if (n > kept)
        pattern_fill(q, kept, n, r->key);
    atomic_fetch_add_explicit(&n_reallocs, 1, memory_order_relaxed);
    if (q != r->p)
        atomic_fetch_add_explicit(&n_moves, 1, memory_order_relaxed);
    r->p = q;
    r->n = n;
    r->align = 0;               /* realloc keeps the natural alignment only */
    rec_seal(r);
}

typedef struct worker_s {
    pthread_t tid;
    uint64_t index;
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    rng_t g = rng_make(opt.seed, w->index);
    rec_t *local[LOCAL];
    unsigned nl = 0;
    uint64_t handoffs = 0;
    for (uint64_t op = 0; op < ops_per_thread; op++) {
        uint64_t r = rng_below(&g, 100);
        if (r < 35 || nl == 0) {
            rec_t *b = make_block(&g);
            if (nl < LOCAL) {
                local[nl++] = b;
            } else {
                rec_t *old = atomic_exchange(&xfer[rng_below(&g, XFER)], b);
                if (old != NULL)
                    free_block(old, rng_next(&g), "block taken from the transfer array");
            }
        } else if (r < 50) {
            realloc_block(&g, local[rng_below(&g, nl)]);
        } else if (r < 80) {
            unsigned i = (unsigned)rng_below(&g, nl);
            rec_t *b = local[i];           /* checked by whoever takes it */
            rec_t *old = atomic_exchange(&xfer[rng_below(&g, XFER)], b);
            handoffs++;
            if (old == NULL || rng_below(&g, 2) == 0) {
                local[i] = local[--nl];
                if (old != NULL)
                    free_block(old, rng_next(&g), "block taken from the transfer array");
            } else {
                rec_verify(old, "block taken from the transfer array");
                local[i] = old;                     /* keep it, pass it on later */
            }
        } else {
            unsigned i = (unsigned)rng_below(&g, nl);
            free_block(local[i], rng_next(&g), "own block");
            local[i] = local[--nl];
        }
        if ((op & 4095) == 4095) {
            /* Now and then: usable sizes of everything held, a collect. */
            for (unsigned i = 0; i < nl; i++)
                stress_check(alloc_usable_size(local[i]->p) >= local[i]->n,
                             "usable size shrank under a live block");
            if (rng_below(&g, 8) == 0)
                alloc_collect(false);
        }
    }
    /* Leave about half of what we hold behind: it outlives this thread. */
    for (unsigned i = 0; i < nl; i++) {
        if (rng_below(&g, 2) == 0) {
            rec_t *old = atomic_exchange(&xfer[rng_below(&g, XFER)], local[i]);
            if (old != NULL)
                free_block(old, rng_next(&g), "block taken from the transfer array");
        } else {
            free_block(local[i], rng_next(&g), "own block at thread exit");
        }
    }
    atomic_fetch_add_explicit(&n_ops, ops_per_thread, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_remote_handoffs, handoffs, memory_order_relaxed);
    return NULL;
}

int main(int argc, char **argv)
{
    if (stress_init("stress_random", argc, argv, &opt) != argc) {
        stress_usage(NULL);
        return 2;
    }
    unsigned nthreads = opt.threads ? opt.threads : 4;
    uint64_t total = stress_amount(&opt, 32, 400, 2);      /* threads over the run */
    ops_per_thread = stress_amount(&opt, 10000, 40000, 2);
    if (total < nthreads)
        total = nthreads;

    worker_t *w = alloc_calloc(nthreads, sizeof *w);
    stress_check(w != NULL, "calloc of the worker table failed");
    uint64_t next = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        w[i].index = next++;
        stress_thread_start(&w[i].tid, worker, &w[i]);
    }
    /* Rolling restarts: as each thread ends, its successor starts. */
    for (unsigned i = 0; next < total; i = (i + 1) % nthreads) {
        stress_thread_join(w[i].tid);
        w[i].index = next++;
        stress_thread_start(&w[i].tid, worker, &w[i]);
    }
    for (unsigned i = 0; i < nthreads; i++)
        stress_thread_join(w[i].tid);

    unsigned left = 0;
    for (unsigned i = 0; i < XFER; i++) {
        rec_t *r = atomic_exchange(&xfer[i], NULL);
        if (r != NULL) {
            free_block(r, i, "block left in the transfer array");
            left++;
        }
    }
    alloc_free(w);
    stress_check_quiescent();
    stress_done("%" PRIu64 " threads (%u at a time), %" PRIu64 " operations, %" PRIu64
                " hand-offs, %" PRIu64 " reallocs (%" PRIu64 " moved), %u blocks outlived "
                "every thread",
                total, nthreads, atomic_load(&n_ops), atomic_load(&n_remote_handoffs),
                atomic_load(&n_reallocs), atomic_load(&n_moves), left);
    return 0;
}
