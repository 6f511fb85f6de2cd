/* churn.c - thread churn around long-lived threads.
 *
 *   stress_churn [--long] [--threads N] [--seed N] [--scale X]
 *
 * Two survivor threads run for the whole test while the main thread keeps
 * N short-lived threads (4 by default) going, starting a new one as each
 * ends.  A short-lived thread allocates a dozen or more pattern-filled
 * blocks, frees some itself, frees blocks the survivors made (taken from
 * a gift array), hands some of its own to the survivors (an inbox array)
 * and leaves some in a leftover array for later short-lived threads, then
 * exits.  So blocks of exited threads are freed by survivors and by other
 * short-lived threads, while new threads adopt the exited ones' pages.
 * Survivors check and free what reaches their inbox, keep some of it for
 * a while, and refill the gift array.
 *
 * Checked: every byte of every block; at the end, the heap counters add
 * up (one heap live - the main thread's - and every other one exited), no
 * more heaps were ever live at once than threads that allocate, and
 * nothing is live.  (test/drop_in/thread_churn covers the RSS bound and
 * the batch-joined pattern; this one overlaps churn with busy threads.)
 */
#include "stress.h"

#define INBOX 256
#define GIFTS 256
#define LEFTOVER 512
#define SURVIVORS 2
#define KEEP 128

typedef struct blk_s {
    unsigned char *p;
    size_t n;
    uint64_t key;
    uint64_t check;
} blk_t;

static stress_opts_t opt;
static _Atomic(blk_t *) inbox[INBOX], gifts[GIFTS], leftover[LEFTOVER];
static _Atomic bool stop;
static _Atomic uint64_t n_blocks, n_to_survivors, n_from_survivors, n_leftover;

static size_t pick_size(rng_t *g)
{
    uint64_t r = rng_below(g, 1000);
    if (r < 800)
        return rng_range(g, 1, 512);
    if (r < 980)
        return rng_range(g, 513, 16 * KiB);
    if (r < 998)
        return rng_range(g, 16 * KiB + 1, 256 * KiB);
    return rng_range(g, 256 * KiB + 1, 3 * MiB);
}

static uint64_t blk_sum(const blk_t *b)
{
    return mix64((uint64_t)(uintptr_t)b->p ^ mix64(b->n) ^ b->key ^ 0x636875726eull);
}

static blk_t *blk_make(rng_t *g)
{
    blk_t *b = alloc_malloc(sizeof *b);
    size_t n = pick_size(g);
    unsigned char *p = alloc_malloc(n);
    stress_check(b != NULL && p != NULL, "allocating %zu bytes failed: %s", n, strerror(errno));
    check_new_block(p, n, 0, "churn");
    b->p = p;
    b->n = n;
    b->key = block_key(p, n, opt.seed);
    b->check = blk_sum(b);
    pattern_fill(p, 0, n, b->key);
    atomic_fetch_add_explicit(&n_blocks, 1, memory_order_relaxed);
    return b;
}

static void blk_free(blk_t *b, uint64_t coin, const char *where)
{
    stress_check(b->check == blk_sum(b), "%s: record %p overwritten", where, (void *)b);
    pattern_verify(b->p, 0, b->n, b->key, where);
    if (coin & 1)
        alloc_free_sized(b->p, b->n);
    else
        alloc_free(b->p);
    b->check = 0;
    alloc_free(b);
}

/* Put b into a random slot of arr; free what was there. */
static void put(_Atomic(blk_t *) *arr, unsigned len, blk_t *b, rng_t *g, const char *where)
{
    blk_t *old = atomic_exchange(&arr[rng_below(g, len)], b);
    if (old != NULL)
        blk_free(old, rng_next(g), where);
}

static void *short_lived(void *arg)
{
    rng_t g = rng_make(opt.seed, (uint64_t)(uintptr_t)arg);
    blk_t *mine[48];
    unsigned n = 12 + (unsigned)rng_below(&g, 36);
    for (unsigned i = 0; i < n; i++)
        mine[i] = blk_make(&g);
    /* Free what survivors made for us. */
    unsigned from = 0;
    for (unsigned k = 0; k < 4; k++) {
        blk_t *b = atomic_exchange(&gifts[rng_below(&g, GIFTS)], NULL);
        if (b != NULL) {
            blk_free(b, rng_next(&g), "short-lived thread, block from a survivor");
            from++;
        }
    }
    atomic_fetch_add_explicit(&n_from_survivors, from, memory_order_relaxed);
    /* Ours: some freed here, some to the survivors, some left behind. */
    unsigned to = 0, left = 0;
    for (unsigned i = 0; i < n; i++) {
        switch (rng_below(&g, 4)) {
        case 0:
        case 1:
            blk_free(mine[i], rng_next(&g), "short-lived thread, own block");
            break;
        case 2:
            put(inbox, INBOX, mine[i], &g, "short-lived thread, unread survivor inbox");
            to++;
            break;
        default:
            put(leftover, LEFTOVER, mine[i], &g, "short-lived thread, block of an exited thread");
            left++;
            break;
        }
    }
    atomic_fetch_add_explicit(&n_to_survivors, to, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_leftover, left, memory_order_relaxed);
    return NULL;
}

static void *survivor(void *arg)
{
    rng_t g = rng_make(opt.seed, 0x5000000000ull + (uintptr_t)arg);
    blk_t *kept[KEEP] = { 0 };
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (unsigned k = 0; k < 8; k++) {
            blk_t *b = atomic_exchange(&inbox[rng_below(&g, INBOX)], NULL);
            if (b == NULL)
                continue;
            if (rng_below(&g, 2) == 0) {
                blk_free(b, rng_next(&g), "survivor, block of a short-lived thread");
            } else {
                unsigned i = (unsigned)rng_below(&g, KEEP);
                if (kept[i] != NULL)
                    blk_free(kept[i], rng_next(&g), "survivor, kept block");
                kept[i] = b;
            }
        }
        put(gifts, GIFTS, blk_make(&g), &g, "survivor, gift nobody took");
        if (rng_below(&g, 256) == 0)
            alloc_collect(false);
        sched_yield();
    }
    for (unsigned i = 0; i < KEEP; i++)
        if (kept[i] != NULL)
            blk_free(kept[i], i, "survivor at the end, kept block");
    return NULL;
}

static void drain(_Atomic(blk_t *) *arr, unsigned len, const char *where)
{
    for (unsigned i = 0; i < len; i++) {
        blk_t *b = atomic_exchange(&arr[i], NULL);
        if (b != NULL)
            blk_free(b, i, where);
    }
}

int main(int argc, char **argv)
{
    if (stress_init("stress_churn", argc, argv, &opt) != argc) {
        stress_usage(NULL);
        return 2;
    }
    unsigned conc = opt.threads ? opt.threads : 4;
    uint64_t total = stress_amount(&opt, 6000, 300000, 2);
    /* The main thread allocates too: its heap is the one left live. */
    pthread_t *t = alloc_calloc(conc + SURVIVORS, sizeof *t);
    stress_check(t != NULL, "calloc failed");
    for (unsigned i = 0; i < SURVIVORS; i++)
        stress_thread_start(&t[conc + i], survivor, (void *)(uintptr_t)i);
    uint64_t next = 0;
    for (unsigned i = 0; i < conc && next < total; i++)
        stress_thread_start(&t[i], short_lived, (void *)(uintptr_t)next++);
    for (unsigned i = 0; next < total; i = (i + 1) % conc) {
        stress_thread_join(t[i]);
        stress_thread_start(&t[i], short_lived, (void *)(uintptr_t)next++);
    }
    for (unsigned i = 0; i < conc && i < total; i++)
        stress_thread_join(t[i]);
    atomic_store(&stop, true);
    for (unsigned i = 0; i < SURVIVORS; i++)
        stress_thread_join(t[conc + i]);
    drain(inbox, INBOX, "main at the end, inbox");
    drain(gifts, GIFTS, "main at the end, gifts");
    drain(leftover, LEFTOVER, "main at the end, leftovers");
    alloc_free(t);

    alloc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    stress_check(alloc_stats_get(&st) == 0, "alloc_stats_get failed");
    stress_check(st.heaps_live == 1,
                 "every thread but main has exited, yet %zu heaps are live", st.heaps_live);
    stress_check(st.heaps_created == st.heaps_exited + st.heaps_live,
                 "heaps: %" PRIu64 " created, %" PRIu64 " exited, %zu live: they do not add up",
                 st.heaps_created, st.heaps_exited, st.heaps_live);
    stress_check(st.heaps_created >= total + SURVIVORS,
                 "%" PRIu64 " heaps created for %" PRIu64 " threads that allocated",
                 st.heaps_created, total + SURVIVORS + 1);
    stress_check(st.heaps_live_peak <= conc + SURVIVORS + 1,
                 "%zu heaps live at once with at most %u threads allocating",
                 st.heaps_live_peak, conc + SURVIVORS + 1);
    stress_check_quiescent();
    stress_done("%" PRIu64 " short-lived threads (%u at a time) beside %u survivors, %" PRIu64
                " blocks, %" PRIu64 " handed to survivors, %" PRIu64 " freed from survivors, "
                "%" PRIu64 " left to later threads, heaps live at most %zu",
                total, conc, SURVIVORS, atomic_load(&n_blocks), atomic_load(&n_to_survivors),
                atomic_load(&n_from_survivors), atomic_load(&n_leftover), st.heaps_live_peak);
    return 0;
}
