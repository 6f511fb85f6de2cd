/* samples.c - when to sample, the stacks, and the table of sampled
 * blocks (samples.h). */
#define _GNU_SOURCE
#include "samples.h"

#include <string.h>
#include "counter.h"
#include "expo.h"
#include "layout.h"
#include "message.h"
#include "sync.h"
#include "../os/os.h"
#include "../os/unwind.h"

_Atomic size_t shoal_prof_rate_now;

bool shoal_prof_set_rate(size_t rate)
{
    if (rate != 0 && !shoal_os_unwind_supported()) {
        shoal_warning("heap profiling needs x86-64 and glibc 2.35 or later (for its stack "
                      "walk), which this build lacks: profiling stays off");
        return false;
    }
    atomic_store_explicit(&shoal_prof_rate_now, rate, memory_order_relaxed);
    return true;
}

/* The functions between a program's call and the capture that may keep a
 * frame are in one section (SHOAL_ALLOC_PATH); the linker marks its
 * bounds.  Frames up to the last one in it are shoal's own. */
extern const char __start_shoal_alloc_path[] __attribute__((weak, visibility("hidden")));
extern const char __stop_shoal_alloc_path[] __attribute__((weak, visibility("hidden")));

static __thread bool tl_own __attribute__((tls_model("initial-exec")));

void shoal_prof_own_begin(void)
{
    tl_own = true;
}

void shoal_prof_own_end(void)
{
    tl_own = false;
}

unsigned shoal_prof_backtrace(void **pcs, const void *frame)
{
    if (tl_own)
        return 0;
    return shoal_os_unwind(pcs, SHOAL_PROF_DEPTH, __start_shoal_alloc_path,
                           __stop_shoal_alloc_path, frame);
}

/* ---- the draws -------------------------------------------------------- */

static _Atomic uint64_t seeds;
static __thread uint64_t tl_random __attribute__((tls_model("initial-exec")));

/* xorshift64*, seeded per thread (its state must never be 0). */
static uint64_t next_random(void)
{
    uint64_t x = tl_random;
    if (x == 0) {
        /* Relaxed: any distinct value will do. */
        uint64_t n = atomic_fetch_add_explicit(&seeds, 1, memory_order_relaxed);
        x = shoal_mix64(n ^ (uintptr_t)&tl_random ^ shoal_os_now_ms()) | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    tl_random = x;
    return x * 0x2545f4914f6cdd1du;
}

uint64_t shoal_prof_interval(size_t rate)
{
    /* u uniform in [0, 1): -log(1 - u) is exponential of mean 1. */
    double u = (double)(next_random() >> 11) * 0x1.0p-53;
    double x = shoal_neg_log(1.0 - u) * (double)rate;     /* 1 - u is exact */
    return x >= 0x1.0p63 ? UINT64_MAX : (uint64_t)x;
}

uint64_t shoal_prof_gap(size_t size, size_t rate)
{
    return shoal_prof_interval(rate) / size;
}

/* ---- the lock --------------------------------------------------------- */

static shoal_lock_t lock = SHOAL_LOCK_INIT;

void shoal_prof_lock(void)
{
    shoal_lock(&lock);
}

void shoal_prof_unlock(void)
{
    shoal_unlock(&lock);
}

/* The dumps' turn (sync.h): a dump's buffer is whole for the next. */
static atomic_flag dumping = ATOMIC_FLAG_INIT;
static __thread bool tl_dumping __attribute__((tls_model("initial-exec")));

bool shoal_prof_dump_begin(bool wait)
{
    if (!shoal_turn_take(&dumping, wait))
        return false;
    tl_dumping = true;
    return true;
}

void shoal_prof_dump_end(void)
{
    tl_dumping = false;
    shoal_turn_give(&dumping);
}

/* Only a turn that another thread held is gone: one that this thread
 * holds (a fork from a signal handler that interrupted its dump) goes
 * on in the child, and ends there. */
void shoal_prof_fork_child(void)
{
    if (!tl_dumping)
        atomic_flag_clear_explicit(&dumping, memory_order_relaxed);
}

/* ---- the table ---------------------------------------------------------
 * Records and sites come from mappings of shoal's own, never from malloc,
 * and are never given back: freed records are reused, sites (one per
 * distinct stack) stay for the cumulative figures.  Both tables hash into
 * arrays of chains: the sites' of a fixed size (zeroed data, touched as
 * it fills), the records' mapped at the first sample, small at first and
 * four times larger whenever it
 * holds twice as many records as chains (the lock is held: a rehash
 * needs no care), so that a process with few samples touches a page or
 * two of it, not half a megabyte. */

typedef struct record_s {
    struct record_s *next;
    const void *addr;
    shoal_prof_site_t *site;
    uint64_t bytes, objs;       /* the weights it added to its site */
} record_t;

#define RECORD_BITS_FIRST 9
#define RECORD_BITS_MAX 20
#define SITE_BUCKETS (1u << 12)
#define ARENA_CHUNK ((size_t)1 << 20)

static record_t **records;
static unsigned record_bits;    /* records has 2^record_bits chains */
static size_t record_count;
/* A site is pushed on its chain with a release store of the head, after
 * every field is written; a dump walks the chains with an acquire load
 * of each head, without the lock, and a site's `next` never changes. */
static _Atomic(shoal_prof_site_t *) sites[SITE_BUCKETS] SHOAL_SELDOM_BSS;
static record_t *spare_records;
static char *arena_next, *arena_end;

static void *arena_take(size_t n)
{
    n = shoal_align_up(n, 16);
    if ((size_t)(arena_end - arena_next) < n) {
        size_t size = n > ARENA_CHUNK ? shoal_align_up(n, ARENA_CHUNK) : ARENA_CHUNK;
        char *chunk = shoal_os_reserve(size, SHOAL_OS_PAGE, SHOAL_OS_LAZY);
        if (chunk == NULL)
            return NULL;
        arena_next = chunk;
        arena_end = chunk + size;
    }
    void *p = arena_next;
    arena_next += n;
    return p;
}

static size_t record_chain(const void *p, unsigned bits)
{
    return shoal_mix64((uintptr_t)p) & (((size_t)1 << bits) - 1);
}

static record_t **records_map(unsigned bits)
{
    return shoal_os_reserve(sizeof *records << bits, SHOAL_OS_PAGE, SHOAL_OS_LAZY);
}

/* Four times the chains, every record rehashed (a failed mapping keeps
 * the chains as they are: longer, still right). */
static void grow_records(void)
{
    unsigned bits = record_bits + 2;
    record_t **grown = records_map(bits);
    if (grown == NULL)
        return;
    for (size_t i = 0; i < (size_t)1 << record_bits; i++)
        for (record_t *r = records[i], *next; r != NULL; r = next) {
            next = r->next;
            record_t **chain = &grown[record_chain(r->addr, bits)];
            r->next = *chain;
            *chain = r;
        }
    shoal_os_release(records, sizeof *records << record_bits);
    records = grown;
    record_bits = bits;
}

static bool tables_ready(void)
{
    if (records == NULL && (records = records_map(RECORD_BITS_FIRST)) != NULL)
        record_bits = RECORD_BITS_FIRST;
    return records != NULL;
}

static uint64_t hash_pcs(void *const *pcs, unsigned depth)
{
    uint64_t h = depth;
    for (unsigned i = 0; i < depth; i++)
        h = shoal_mix64(h ^ (uintptr_t)pcs[i]);
    return h;
}

static shoal_prof_site_t *site_of(void *const *pcs, unsigned depth)
{
    uint64_t h = hash_pcs(pcs, depth);
    _Atomic(shoal_prof_site_t *) *chain = &sites[h & (SITE_BUCKETS - 1)];
    shoal_prof_site_t *head = atomic_load_explicit(chain, memory_order_relaxed);  /* ours */
    for (shoal_prof_site_t *s = head; s != NULL; s = s->next)
        if (s->hash == h && s->depth == depth && memcmp(s->pcs, pcs, depth * sizeof *pcs) == 0)
            return s;
    shoal_prof_site_t *s = arena_take(sizeof *s + depth * sizeof *pcs);
    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof *s);
    s->hash = h;
    s->depth = depth;
    memcpy(s->pcs, pcs, depth * sizeof *pcs);
    s->next = head;
    atomic_store_explicit(chain, s, memory_order_release);
    return s;
}

static record_t **chain_of(const void *p)
{
    return &records[record_chain(p, record_bits)];
}

/* Take the record of p out of the table, or NULL. */
static record_t *unlink_record(const void *p)
{
    for (record_t **at = chain_of(p); *at != NULL; at = &(*at)->next) {
        record_t *r = *at;
        if (r->addr == p) {
            *at = r->next;
            record_count--;
            return r;
        }
    }
    return NULL;
}

static void drop(record_t *r)
{
    /* Holding the lock: the only writer (counter.h). */
    shoal_add_only_writer(&r->site->live_bytes, -r->bytes);
    shoal_add_only_writer(&r->site->live_objs, -r->objs);
    r->next = spare_records;
    spare_records = r;
}

/* What a sample of `size` bytes at `rate` stands for: size / p(s) bytes
 * and 1 / p(s) objects (in SHOAL_PROF_OBJ_ONE units), with p(s) =
 * 1 - exp(-s / rate), exact for small s too (expo.h).  Kept for the
 * sizes sampled last, direct-mapped: most samples are of a few classes'
 * sizes, and the exponential and the two divisions were a quarter of a
 * record.  Under the lock. */
typedef struct {
    size_t size, rate;
    uint64_t bytes, objs;
} weight_t;

static weight_t weights[64] SHOAL_SELDOM_BSS;

static const weight_t *weight_of(size_t size, size_t rate)
{
    weight_t *w = &weights[(size * 0x9e3779b97f4a7c15u) >> 58];
    if (w->size != size || w->rate != rate) {
        double prob = shoal_one_minus_exp_neg((double)size / (double)rate);
        w->size = size;
        w->rate = rate;
        w->bytes = (uint64_t)((double)size / prob + 0.5);
        w->objs = (uint64_t)(SHOAL_PROF_OBJ_ONE / prob + 0.5);
    }
    return w;
}

void shoal_prof_record(const void *p, size_t size, size_t rate, void *const *pcs,
                       unsigned depth)
{
    if (!tables_ready())
        return;
    record_t *r = unlink_record(p);
    if (r != NULL)
        drop(r);
    shoal_prof_site_t *s = site_of(pcs, depth);
    if (s == NULL)
        return;
    if (spare_records != NULL) {
        r = spare_records;
        spare_records = r->next;
    } else if ((r = arena_take(sizeof *r)) == NULL) {
        return;
    }
    const weight_t *w = weight_of(size, rate);
    r->addr = p;
    r->site = s;
    r->bytes = w->bytes;
    r->objs = w->objs;
    shoal_add_only_writer(&s->live_bytes, r->bytes);
    shoal_add_only_writer(&s->total_bytes, r->bytes);
    shoal_add_only_writer(&s->live_objs, r->objs);
    shoal_add_only_writer(&s->total_objs, r->objs);
    if (record_count >= (size_t)2 << record_bits && record_bits < RECORD_BITS_MAX)
        grow_records();
    record_t **chain = chain_of(p);
    r->next = *chain;
    *chain = r;
    record_count++;
}

void shoal_prof_forget(const void *p)
{
    if (records == NULL)
        return;
    record_t *r = unlink_record(p);
    if (r != NULL)
        drop(r);
}

void shoal_prof_each_site(void (*fn)(const shoal_prof_site_t *, void *), void *arg)
{
    for (unsigned i = 0; i < SITE_BUCKETS; i++)
        for (shoal_prof_site_t *s = atomic_load_explicit(&sites[i], memory_order_acquire);
             s != NULL; s = s->next)
            fn(s, arg);
}
