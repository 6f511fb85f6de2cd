/* prodcons.c - producers and consumers: one-way remote frees.
 *
 *   stress_prodcons [--long] [--threads N] [--seed N] [--scale X]
 *
 * N/2 producers (2 by default) allocate pattern-filled blocks and pass
 * them through single-producer single-consumer rings to N/2 consumers,
 * which check every byte and free them (alternately alloc_free and
 * alloc_free_sized; one block in sixteen is first grown or shrunk with
 * realloc by the consumer).  Producers never free and consumers never
 * keep, so every free is a remote free into a page whose owner is busy
 * allocating: the owner must take its inbox, and pages that went full
 * must come back when their blocks come home, or the producers' memory
 * grows without bound.
 *
 * The rings carry only what acquire/release on their indices orders: a
 * consumer publishes a slot as free before it touches the block, so the
 * only thing ordering its free before the producer's reuse of that
 * memory is the allocator's own synchronisation (which ThreadSanitizer
 * checks).  At the end: nothing is live, and the pool never held more
 * than a generous multiple of what the rings can hold.
 */
#include "stress.h"

#define RING 256                /* entries per ring (a power of two) */

typedef struct item_s {
    unsigned char *p;
    size_t n;
    uint64_t key;
} item_t;

typedef struct ring_s {
    _Alignas(64) _Atomic uint64_t head;     /* next to read (consumer) */
    _Alignas(64) _Atomic uint64_t tail;     /* next to write (producer) */
    _Alignas(64) item_t item[RING];
} ring_t;

static stress_opts_t opt;
static unsigned nprod, ncons;
static ring_t *rings;           /* nprod * ncons: ring p*ncons + c */
static uint64_t per_producer;
static _Atomic uint64_t consumed, n_reallocs;

static size_t pick_size(rng_t *g)
{
    uint64_t r = rng_below(g, 1000);
    if (r < 700)
        return rng_range(g, 1, 512);
    if (r < 950)
        return rng_range(g, 513, 8 * KiB);
    if (r < 995)
        return rng_range(g, 8 * KiB + 1, 64 * KiB);
    if (r < 999)
        return rng_range(g, 64 * KiB + 1, 2 * MiB);
    return rng_range(g, 2 * MiB + 1, 4 * MiB);
}

static void *producer(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    rng_t g = rng_make(opt.seed, id);
    unsigned c = id % ncons;
    for (uint64_t i = 0; i < per_producer; i++) {
        item_t it;
        it.n = pick_size(&g);
        it.p = rng_below(&g, 8) == 0 ? alloc_calloc(1, it.n) : alloc_malloc(it.n);
        stress_check(it.p != NULL, "producer: allocating %zu bytes failed: %s", it.n,
                     strerror(errno));
        check_new_block(it.p, it.n, 0, "producer");
        it.key = block_key(it.p, it.n, opt.seed);
        pattern_fill(it.p, 0, it.n, it.key);
        /* The next consumer whose ring has room. */
        for (unsigned spins = 0;; spins++) {
            ring_t *r = &rings[id * ncons + c];
            uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
            if (t - atomic_load_explicit(&r->head, memory_order_acquire) < RING) {
                r->item[t % RING] = it;
                atomic_store_explicit(&r->tail, t + 1, memory_order_release);
                break;
            }
            c = (c + 1) % ncons;
            if (spins % ncons == ncons - 1)
                sched_yield();
        }
        if (rng_below(&g, 4) == 0)
            c = (c + 1) % ncons;
    }
    return NULL;
}

static void consume(rng_t *g, item_t it)
{
    pattern_verify(it.p, 0, it.n, it.key, "consumer");
    uint64_t r = rng_next(g);
    size_t n = r % 32 == 0 ? it.n * 2 : it.n / 2 + 1;
    if (r % 16 == 0 && stress_huge_realloc_ok(it.n, n)) {
        unsigned char *q = alloc_realloc(it.p, n);
        stress_check(q != NULL, "consumer: realloc to %zu failed: %s", n, strerror(errno));
        size_t kept = n < it.n ? n : it.n;
        pattern_verify(q, 0, kept, it.key, "consumer, after realloc");
        pattern_fill(q, kept, n, it.key);
        it.p = q;
        it.n = n;
        atomic_fetch_add_explicit(&n_reallocs, 1, memory_order_relaxed);
    }
    if (r & (1u << 8))
        alloc_free_sized(it.p, it.n);
    else
        alloc_free(it.p);
}

static void *consumer(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    rng_t g = rng_make(opt.seed, 1000 + id);
    uint64_t total = per_producer * nprod;
    for (;;) {
        bool got = false;
        for (unsigned p = 0; p < nprod; p++) {
            ring_t *r = &rings[p * ncons + id];
            uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
            uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
            /* Take a batch; free the slots before touching the blocks. */
            item_t batch[32];
            unsigned k = 0;
            while (h != t && k < 32)
                batch[k++] = r->item[h++ % RING];
            if (k == 0)
                continue;
            atomic_store_explicit(&r->head, h, memory_order_release);
            for (unsigned i = 0; i < k; i++)
                consume(&g, batch[i]);
            atomic_fetch_add_explicit(&consumed, k, memory_order_relaxed);
            got = true;
        }
        if (!got) {
            if (atomic_load_explicit(&consumed, memory_order_relaxed) >= total)
                break;
            sched_yield();
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (stress_init("stress_prodcons", argc, argv, &opt) != argc) {
        stress_usage(NULL);
        return 2;
    }
    unsigned n = opt.threads ? opt.threads : 4;
    nprod = n / 2 ? n / 2 : 1;
    ncons = n - nprod ? n - nprod : 1;
    per_producer = stress_amount(&opt, 200000, 20000000, 2);
    rings = alloc_aligned(_Alignof(ring_t), (size_t)nprod * ncons * sizeof *rings);
    stress_check(rings != NULL && ((uintptr_t)rings & (_Alignof(ring_t) - 1)) == 0,
                 "alloc_aligned of the rings failed");
    memset(rings, 0, (size_t)nprod * ncons * sizeof *rings);

    pthread_t *t = alloc_malloc((nprod + ncons) * sizeof *t);
    stress_check(t != NULL, "malloc failed");
    for (unsigned i = 0; i < ncons; i++)
        stress_thread_start(&t[nprod + i], consumer, (void *)(uintptr_t)i);
    for (unsigned i = 0; i < nprod; i++)
        stress_thread_start(&t[i], producer, (void *)(uintptr_t)i);
    for (unsigned i = 0; i < nprod + ncons; i++)
        stress_thread_join(t[i]);
    stress_check(atomic_load(&consumed) == per_producer * nprod,
                 "%" PRIu64 " blocks consumed, %" PRIu64 " produced", atomic_load(&consumed),
                 per_producer * nprod);

    /* What the rings can hold at once is bounded (RING entries of at most
     * 4 MiB each, mostly far smaller); memory that consumers freed must
     * have been reused, not accumulated behind the producers. */
    alloc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    stress_check(alloc_stats_get(&st) == 0, "alloc_stats_get failed");
    size_t peak_pool = st.active_peak - st.huge_live_bytes;
    size_t bound = (size_t)nprod * ncons * 64 * MiB;
    stress_check(peak_pool < bound,
                 "the pool held up to %zu MiB for rings that hold far less: remote frees "
                 "are not being reused", peak_pool >> 20);
    alloc_free(t);
    alloc_free(rings);
    stress_check_quiescent();
    stress_done("%u producers, %u consumers, %" PRIu64 " blocks (%" PRIu64
                " reallocated by the consumer), pool peak %zu MiB",
                nprod, ncons, per_producer * nprod, atomic_load(&n_reallocs), peak_pool >> 20);
    return 0;
}
