/* Pages of size-classed blocks (src/core/page.h) on spans claimed from
 * the pool: the block-start test (against division, at every byte offset
 * of every class's span), carving, the local free list, `used`, the
 * freed mark, and heap profiling's traps (samples where drawn, a take
 * under the sample trap).  The tests play the owning heap themselves: they pop
 * blocks off `free` the way malloc does (decode the link, clear the
 * freed mark, used++) and push frees the way free does (set the mark,
 * push onto the list the page names, used--).  Frees from other threads:
 * test_remote.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/page.h"
#include "core/pool.h"
#include "core/samples.h"
#include "core/size_class.h"

#include "test_util.h"

#define MAX_BLOCKS 4096         /* 64 KiB of 16-byte blocks */

/* ---- a page on a fresh span ------------------------------------------- */

typedef struct test_page_s {
    shoal_span_t span;
    shoal_page_t *pg;
    char *start;
    size_t span_bytes;
} test_page_t;

static void page_open(test_page_t *t, unsigned cls)
{
    unsigned order = shoal_class_page_order(cls);
    assert_true(shoal_pool_claim(order, &t->span));
    t->pg = shoal_span_head(&t->span);
    t->start = shoal_slot_addr(t->span.sp, t->span.slot);
    t->span_bytes = SHOAL_SLOT_SIZE << order;
    shoal_page_init(t->pg, cls, order, t->span.zero);
}

static void page_close(test_page_t *t)
{
    shoal_page_fini(t->pg);     /* what the heap does before it gives a page back */
    shoal_pool_release(t->span.sp, t->span.slot, 1u << t->span.order);
    /* The next span claimed is clean (known zero) again. */
    size_t waiting = 0;
    shoal_pool_purge(true, &waiting);
}

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != 0)
            return false;
    return true;
}

/* Index of block b in its page, checking that it is a block start. */
static size_t block_index(const test_page_t *t, const void *b)
{
    const char *c = b;
    assert_true(c >= t->start && c < t->start + t->span_bytes);
    size_t off = (size_t)(c - t->start);
    assert_int_equal(off % t->pg->block_size, 0);
    assert_true(off / t->pg->block_size < t->pg->reserved);
    return off / t->pg->block_size;
}

static shoal_block_t *next_of(const shoal_page_t *pg, const shoal_block_t *b)
{
    return shoal_decode(pg, b->link);
}

static shoal_block_t *pop(shoal_page_t *pg)
{
    shoal_block_t *b = pg->free;
    if (b != NULL) {
        pg->free = next_of(pg, b);
        b->freed = 0;
        pg->used++;
    }
    return b;
}

static void owner_free(shoal_page_t *pg, void *p)
{
    shoal_block_t *b = p;
    assert_true(shoal_block_is_live(pg, b));
    b->freed = shoal_freed_mark(pg);
    shoal_page_push(pg, b, pg->key);
    pg->used--;
}

static size_t list_length(const shoal_page_t *pg, const shoal_block_t *b)
{
    size_t n = 0;
    for (; b != NULL; b = next_of(pg, b))
        n++;
    return n;
}

static unsigned char pattern(unsigned cls, size_t index, size_t byte)
{
    return (unsigned char)(cls * 31 + index * 7 + byte * 13 + 1);
}

static void fill_block(void *b, size_t bsize, unsigned cls, size_t index, size_t from)
{
    unsigned char *c = b;
    for (size_t i = from; i < bsize; i++)
        c[i] = pattern(cls, index, i);
}

static bool block_filled(const void *b, size_t bsize, unsigned cls, size_t index, size_t from)
{
    const unsigned char *c = b;
    for (size_t i = from; i < bsize; i++)
        if (c[i] != pattern(cls, index, i))
            return false;
    return true;
}

/* ---- carving ---------------------------------------------------------- */

/* The block-start test (one multiply, one compare) against plain
 * division, for every class: at every byte offset of the span when the
 * page has one step carved, half of it and all of it, and around the
 * carved edge after every step. */
static void expect_starts(const shoal_page_t *pg, const char *start, size_t from, size_t to)
{
    size_t d = pg->block_size;
    for (size_t off = from; off < to; off++) {
        bool want = off % d == 0 && off / d < pg->capacity;
        if (shoal_block_is_start(pg, start + off) != want)
            fail_msg("class %u, block %zu B, capacity %u: offset %zu says %d", pg->size_class,
                     d, (unsigned)pg->capacity, off, !want);
    }
}

static void test_block_start_every_offset(void **state)
{
    (void)state;
    for (unsigned cls = 0; cls < SHOAL_CLASSES; cls++) {
        test_page_t t;
        page_open(&t, cls);
        shoal_page_t *pg = t.pg;
        size_t d = pg->block_size;
        expect_starts(pg, t.start, 0, t.span_bytes);       /* nothing carved */
        bool first = true, half = false;
        while (pg->capacity < pg->reserved) {
            shoal_page_extend(pg);
            pg->free = NULL;            /* the blocks stay untouched */
            size_t edge = pg->capacity * d;
            expect_starts(pg, t.start, edge > d ? edge - d - 1 : 0,
                          edge + d + 1 < t.span_bytes ? edge + d + 1 : t.span_bytes);
            bool sweep = first || pg->capacity == pg->reserved ||
                         (!half && 2u * pg->capacity >= pg->reserved);
            if (sweep)
                expect_starts(pg, t.start, 0, t.span_bytes);
            half = half || 2u * pg->capacity >= pg->reserved;
            first = false;
        }
        page_close(&t);
    }
}


/* For every class: init sets the page up, extend carves about 4 KiB at a
 * time in address order until the page is full, and the blocks are
 * distinct, inside the page, aligned to the block size, and find their
 * page through the slot descriptors the way free() does.  A fresh span's
 * blocks read as zero.  Freed blocks come back once through collect. */
static void test_carve_every_class(void **state)
{
    (void)state;
    static void *blocks[MAX_BLOCKS];
    static unsigned char seen[MAX_BLOCKS];
    for (unsigned cls = 0; cls < SHOAL_CLASSES; cls++) {
        test_page_t t;
        page_open(&t, cls);
        shoal_page_t *pg = t.pg;
        size_t bsize = shoal_class_size(cls);
        unsigned order = shoal_class_page_order(cls);

        assert_true(t.span.zero);                   /* fresh or purged */
        assert_ptr_equal(shoal_page_start(pg), t.start);
        assert_int_equal(pg->kind, SHOAL_SLOT_PAGE);
        assert_int_equal(pg->block_size, bsize);
        assert_int_equal(pg->size_class, cls);
        assert_int_equal(pg->order, order);
        assert_int_equal(pg->reserved, t.span_bytes / bsize);
        assert_int_equal(pg->capacity, 0);
        assert_int_equal(pg->used, 0);
        assert_null(pg->free);
        assert_null(pg->local_free);
        assert_int_equal(pg->slot_offset, 0);
        for (unsigned i = 1; i < (1u << order); i++) {
            assert_int_equal(pg[i].kind, SHOAL_SLOT_TAIL);
            assert_int_equal(pg[i].slot_offset, i);
        }

        /* Carve and take everything. */
        size_t n = 0;
        memset(seen, 0, sizeof seen);
        while (pg->capacity < pg->reserved) {
            unsigned cap = pg->capacity;
            assert_null(pg->free);
            shoal_page_extend(pg);
            /* To the end of the OS page the first new block ends in:
             * every new block ends by then, and the next would not (or
             * the page is all carved). */
            size_t step = pg->capacity - cap;
            size_t os_end = (cap * bsize + bsize + 4095) / 4096 * 4096;
            assert_true(step >= 1);
            assert_true(pg->capacity * bsize <= os_end);
            assert_true(pg->capacity == pg->reserved || (pg->capacity + 1) * bsize > os_end);
            assert_int_equal(list_length(pg, pg->free), step);
            assert_true(pg->free_is_zero);
            shoal_block_t *b;
            while ((b = pop(pg)) != NULL) {
                size_t idx = block_index(&t, b);
                assert_int_equal(idx, n);                   /* address order */
                assert_int_equal(seen[idx], 0);
                seen[idx] = 1;
                assert_int_equal((uintptr_t)b % SHOAL_ALIGN, 0);
                if ((bsize & (bsize - 1)) == 0)
                    assert_int_equal((uintptr_t)b % bsize, 0);
                /* free() finds the page from the pointer, and sees a live
                 * block there; an interior pointer is not one. */
                shoal_page_t *d = shoal_slot_desc(b);
                assert_ptr_equal(d - d->slot_offset, pg);
                assert_true(shoal_block_is_live(pg, b));
                assert_false(shoal_block_is_live(pg, (shoal_block_t *)((char *)b + 8)));
                for (size_t off = 16; off < bsize; off += 16)     /* every aligned interior */
                    assert_false(shoal_block_is_live(pg, (shoal_block_t *)((char *)b + off)));
                /* Fresh memory: all zero but the link. */
                b->link = 0;
                assert_true(all_zero(b, bsize));
                fill_block(b, bsize, cls, idx, 0);
                blocks[n++] = b;
            }
            assert_int_equal(pg->used, n);
        }
        assert_int_equal(n, pg->reserved);
        assert_int_equal(n, t.span_bytes / bsize);
        /* Full: extend has nothing more to give. */
        shoal_page_extend(pg);
        assert_null(pg->free);
        assert_int_equal(pg->capacity, pg->reserved);

        /* No two blocks overlap: every pattern is intact. */
        for (size_t i = 0; i < n; i++)
            assert_true(block_filled(blocks[i], bsize, cls, i, 0));

        /* Free every third block locally; collect brings exactly those
         * back, and the others are untouched. */
        size_t freed = 0;
        for (size_t i = 0; i < n; i += 3) {
            owner_free(pg, blocks[i]);
            freed++;
        }
        assert_int_equal(pg->used, n - freed);
        for (size_t i = 0; i < n; i++)             /* freed ones are marked */
            assert_int_equal(shoal_block_is_live(pg, blocks[i]), i % 3 != 0);
        assert_null(pg->free);
        shoal_page_collect(pg);
        assert_null(pg->local_free);
        assert_false(pg->free_is_zero);            /* freed blocks hold old data */
        assert_int_equal(list_length(pg, pg->free), freed);
        assert_int_equal(pg->used, n - freed);
        memset(seen, 0, sizeof seen);
        shoal_block_t *b;
        while ((b = pop(pg)) != NULL) {
            size_t idx = block_index(&t, b);
            assert_int_equal(idx % 3, 0);
            assert_int_equal(seen[idx], 0);
            seen[idx] = 1;
            /* Only the link and the mark were written. */
            assert_true(shoal_block_is_live(pg, b));
            assert_true(block_filled(b, bsize, cls, idx, sizeof(shoal_block_t)));
        }
        assert_int_equal(pg->used, n);
        for (size_t i = 0; i < n; i++)
            if (i % 3 != 0)
                assert_true(block_filled(blocks[i], bsize, cls, i, 0));
        page_close(&t);
    }
}

/* A span that is not known to be zero never claims its blocks are. */
static void test_dirty_span_not_zero(void **state)
{
    (void)state;
    test_page_t t;
    page_open(&t, 5);
    shoal_page_init(t.pg, 5, 0, false);
    shoal_page_extend(t.pg);
    assert_non_null(t.pg->free);
    assert_false(t.pg->free_is_zero);
    page_close(&t);

    /* And a zero span's free list stays zero while it holds fresh blocks:
     * a block freed meanwhile waits on local_free, and joins `free` when
     * `free` runs dry, which then stops being zero. */
    page_open(&t, 5);
    shoal_page_init(t.pg, 5, 0, true);
    memset(t.start, 0, t.span_bytes);
    shoal_page_extend(t.pg);
    assert_true(t.pg->free_is_zero);
    void *b = pop(t.pg);
    memset(b, 0xaa, t.pg->block_size);
    owner_free(t.pg, b);
    assert_ptr_equal(t.pg->local_free, b);
    shoal_page_collect(t.pg);                       /* `free` holds blocks: no change */
    assert_ptr_equal(t.pg->local_free, b);
    assert_true(t.pg->free_is_zero);
    void *c;
    while ((c = pop(t.pg)) != NULL)             /* zero past the link and the mark */
        for (size_t k = sizeof(shoal_block_t); k < t.pg->block_size; k++)
            assert_int_equal(((unsigned char *)c)[k], 0);
    shoal_page_collect(t.pg);
    assert_ptr_equal(t.pg->free, b);
    assert_null(t.pg->local_free);
    assert_false(t.pg->free_is_zero);
    /* From now on a freed block heads `free`: the next pop hands it out. */
    assert_ptr_equal(pop(t.pg), b);
    owner_free(t.pg, b);
    assert_ptr_equal(t.pg->free, b);
    assert_ptr_equal(pop(t.pg), b);
    /* Extending later (free list empty again) makes it zero again, and a
     * block freed then waits apart. */
    assert_null(t.pg->free);
    shoal_page_extend(t.pg);
    assert_true(t.pg->free_is_zero);                /* only fresh blocks now */
    owner_free(t.pg, b);
    assert_ptr_equal(t.pg->local_free, b);
    page_close(&t);
}

/* ---- heap profiling's traps (page.h) ---------------------------------- */

/* The allocation of the page, counted from its first, that the page's
 * traps will sample next (`count` handed out so far; UINT64_MAX: none
 * drawn).  Where the sample trap stands in `free`, its place must agree
 * with gap_rest. */
static uint64_t sample_due(const shoal_page_t *pg, uint64_t count)
{
    uint64_t len = 0, at = UINT64_MAX;
    for (const shoal_block_t *b = pg->free; !shoal_list_ended(b);) {
        if (b == &shoal_trap_sample) {
            at = len;
            b = pg->trap_next;
            continue;
        }
        len++;
        b = next_of(pg, b);
    }
    if (pg->gap_rest == SHOAL_GAP_UNDRAWN) {
        assert_true(at == UINT64_MAX);
        return UINT64_MAX;
    }
    if (at != UINT64_MAX)
        assert_true((int64_t)at == pg->gap_rest + (int64_t)len);
    else
        assert_true(pg->gap_rest >= 0);
    return count + (uint64_t)(pg->gap_rest + (int64_t)len);
}

/* What malloc does with an armed page (malloc.c: the pop, the end trap,
 * free_list_stop) as the test's allocation number *count: a block; NULL
 * where the page is dry; NULL with *sampled where the sample trap came,
 * which must come at the very allocation due (*due), no pop passing it. */
static shoal_block_t *prof_pop(shoal_page_t *pg, uint64_t *count, uint64_t *due, bool *sampled)
{
    *sampled = false;
    for (;;) {
        shoal_block_t *b = pg->free;
        if (shoal_block_is_free(pg, b)) {
            assert_true(*count < *due);
            shoal_page_take(pg, b);
            ++*count;
            return b;
        }
        if (b == &shoal_trap_end) {
            if (shoal_page_local_empty(pg))
                return NULL;
            if (!shoal_page_take_local_untrapped(pg))
                shoal_page_take_local_trapped(pg);
            /* The gap goes on into the new list (drawn, if none was). */
            uint64_t now = sample_due(pg, *count);
            assert_true(*due == UINT64_MAX || now == *due);
            *due = now;
            continue;
        }
        assert_ptr_equal(b, &shoal_trap_sample);
        assert_true(*count == *due);
        shoal_page_trap_sample(pg);
        ++*count;                               /* the sampled allocation */
        *due = sample_due(pg, *count);
        assert_true(*due >= *count);
        *sampled = true;
        return NULL;
    }
}

/* A program of `live` blocks that frees one and allocates one, `steps`
 * times, on one armed page of 64-byte blocks sampled at `rate`: each
 * sample trap comes at the very allocation drawn, none is passed by,
 * the gap goes on unchanged through frees (a block pushed onto `free`
 * where the trap stands beyond it), list ends, carving and collects (in
 * prof_pop and sample_due), the lists hand out only free blocks of the
 * page (contents checked), and the number sampled is what p = 1 -
 * exp(-64 / rate) gives, within six standard deviations.  A slow path
 * collects local_free now and then, mid-list. */
static void churn_sampled(size_t rate, unsigned live, unsigned steps)
{
    assert_true(shoal_prof_set_rate(rate));
    test_page_t t;
    page_open(&t, 3);                           /* 64-byte blocks */
    shoal_page_t *pg = t.pg;
    shoal_page_arm(pg);                         /* before any block: carving comes armed */
    uint64_t count = 0, due = sample_due(pg, 0), sampled = 0;
    assert_true(due != UINT64_MAX);
    shoal_block_t *ring[1000] = { NULL };
    assert_true(live <= 1000);
    uint64_t rng = 88172645463325292u;
    for (unsigned i = 0; i < steps; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned s = (unsigned)(rng % live);
        if (ring[s] != NULL) {
            uint64_t *w = (uint64_t *)ring[s];
            for (unsigned k = 2; k < 8; k++)
                assert_int_equal(w[k], (uintptr_t)ring[s] ^ k);
            shoal_block_t *freed = ring[s];
            bool beyond = !pg->free_is_zero && pg->gap_rest >= 1;
            owner_free(pg, freed);
            ring[s] = NULL;
            /* A free moves no sample: onto `free` where the trap stands
             * beyond the list (one allocation more before the one due,
             * which the gap gave up), else behind the trap. */
            if (beyond) {
                assert_ptr_equal(pg->free, freed);
                assert_null(pg->trap_next);
                if ((i & 7) == 0)
                    assert_true(sample_due(pg, count) == due);
            } else {
                assert_ptr_equal(pg->local_free, freed);
            }
        }
        bool was_sampled;
        shoal_block_t *b = prof_pop(pg, &count, &due, &was_sampled);
        if (b == NULL && !was_sampled) {
            /* Dry: the heap's slow path carves more, or collects. */
            if (atomic_load_explicit(&pg->capacity, memory_order_relaxed) < pg->reserved)
                shoal_page_extend(pg);
            else
                shoal_page_collect(pg);
            assert_true(sample_due(pg, count) == due);
            b = prof_pop(pg, &count, &due, &was_sampled);
        }
        if (was_sampled) {
            sampled++;
            continue;
        }
        assert_non_null(b);
        block_index(&t, b);
        uint64_t *w = (uint64_t *)b;
        for (unsigned k = 2; k < 8; k++)
            w[k] = (uintptr_t)b ^ k;
        ring[s] = b;
        if (i % 97 == 0) {                      /* a slow path collects, mid-list */
            shoal_page_collect(pg);
            assert_true(sample_due(pg, count) == due);
        }
    }
    double n = (double)count, p = 1.0 - exp(-64.0 / (double)rate);
    double mean = n * p, sd = sqrt(n * p * (1.0 - p));
    if (fabs((double)sampled - mean) > 6.0 * sd)
        fail_msg("%llu samples in %.0f allocations, expected %.1f +- %.1f",
                 (unsigned long long)sampled, n, mean, 6.0 * sd);
    for (unsigned s = 0; s < live; s++)
        if (ring[s] != NULL)
            owner_free(pg, ring[s]);
    assert_true(shoal_prof_set_rate(0));
    page_close(&t);
}

/* Short lists (a few live blocks: a list end every few allocations),
 * long ones, nearly as many live blocks as the page holds (dry until
 * carved to the end), and a sample near all the time (a rate of a few
 * blocks). */
static void test_traps_sample_where_drawn(void **state)
{
    (void)state;
    churn_sampled(64 * 40, 3, 200000);
    churn_sampled(64 * 40, 40, 200000);
    churn_sampled(64 * 40, 1000, 200000);      /* carved to the end (1024 blocks) */
    churn_sampled(64 * 3, 5, 100000);
    churn_sampled(64 * 200, 2, 300000);
}

/* Heap profiling's sample trap at the head of `free`, for an allocation
 * that cannot be sampled (no stack, no memory): shoal_page_take_trapped
 * hands out the blocks the trap stands before, in list order, each once,
 * counted as used and no longer marked free, the trap staying at the
 * head until the list's last block, after which the list ends as it
 * did.  Blocks of the page carved but not yet reached stay untouched. */
static void test_take_under_the_sample_trap(void **state)
{
    (void)state;
    assert_true(shoal_prof_set_rate(1 << 20));  /* trap_place places only while on */
    test_page_t t;
    page_open(&t, 3);                           /* 64-byte blocks */
    shoal_page_t *pg = t.pg;
    shoal_page_extend(pg);
    unsigned len = atomic_load_explicit(&pg->capacity, memory_order_relaxed);
    shoal_block_t *expect[64];
    assert_true(len <= 64);
    shoal_block_t *b = pg->free;
    for (unsigned i = 0; i < len; i++, b = next_of(pg, b))
        expect[i] = b;
    shoal_page_trap_place(pg, len, 0);          /* the trap heads the list */
    assert_ptr_equal(pg->free, &shoal_trap_sample);
    for (unsigned i = 0; i < len; i++) {
        shoal_block_t *got = shoal_page_take_trapped(pg);
        assert_ptr_equal(got, expect[i]);
        assert_false(shoal_block_is_free(pg, got));
        assert_int_equal(pg->used, i + 1);
        if (i + 1 < len)
            assert_ptr_equal(pg->free, &shoal_trap_sample);
    }
    assert_true(pg->free == NULL);              /* the list's own end again */
    assert_null(shoal_page_take_trapped(pg));   /* no trap: nothing taken */
    assert_true(shoal_prof_set_rate(0));
    page_close(&t);
}

/* A fork child rebuilds the lists of a page whose owner vanished in the
 * middle of an edit (heap.c, vanished heaps): from the blocks' freed
 * marks alone.  Here the lists are wrecked as a thread stopped halfway
 * could leave them - a pop that cleared the mark but never moved the
 * head, a free that marked its block but never linked it, `used` off, a
 * carve that marked blocks past the capacity - and every free block
 * must come back exactly once, in address order, the live ones never,
 * and the live ones' contents stay as they were. */
static void test_rebuild_from_marks(void **state)
{
    (void)state;
    test_page_t t;
    page_open(&t, 3);                           /* 64-byte blocks */
    shoal_page_t *pg = t.pg;
    size_t bsize = pg->block_size;
    shoal_page_extend(pg);
    shoal_page_extend(pg);
    unsigned cap = atomic_load_explicit(&pg->capacity, memory_order_relaxed);
    assert_true(cap >= 64 && cap <= MAX_BLOCKS);
    static void *got[MAX_BLOCKS];
    static bool live[MAX_BLOCKS];
    for (unsigned i = 0; i < cap; i++) {
        got[i] = pop(pg);
        assert_non_null(got[i]);
        fill_block(got[i], bsize, 3, block_index(&t, got[i]), 0);
        live[block_index(&t, got[i])] = true;
    }
    for (unsigned i = 0; i < cap; i += 3) {     /* a third freed */
        live[block_index(&t, got[i])] = false;
        owner_free(pg, got[i]);
    }
    shoal_block_t *half_popped = pg->local_free;    /* still linked, mark cleared */
    half_popped->freed = 0;
    live[block_index(&t, half_popped)] = true;
    shoal_block_t *half_freed = got[1];         /* marked, on no list */
    half_freed->freed = shoal_freed_mark(pg);
    live[block_index(&t, half_freed)] = false;
    pg->free = (shoal_block_t *)(t.start + 8);  /* wrecked */
    pg->used = 7;
    /* A carve stopped between its marks and the capacity, with the start
     * limit of another step: marks past the capacity, the limit ahead. */
    shoal_block_t *past = (shoal_block_t *)(t.start + (size_t)cap * bsize);
    past->freed = shoal_freed_mark(pg);
    atomic_store_explicit(&pg->start_limit,
                          (uint32_t)((cap + 8) * (pg->start_mul * pg->block_size)),
                          memory_order_relaxed);

    shoal_page_rebuild(pg);

    unsigned n_live = 0;
    for (unsigned i = 0; i < cap; i++)
        n_live += live[i];
    assert_int_equal(pg->used, n_live);
    assert_null(pg->local_free);
    assert_int_equal(pg->fresh_zero, 0);
    size_t prev = 0;
    unsigned n_free = 0;
    for (shoal_block_t *b = pg->free; b != NULL; b = next_of(pg, b), n_free++) {
        assert_true(shoal_block_is_free(pg, b));
        size_t i = block_index(&t, b);
        assert_true(i < cap);
        assert_false(live[i]);
        assert_true(n_free == 0 || i > prev);   /* address order, each once */
        prev = i;
    }
    assert_int_equal(n_free, cap - n_live);
    for (unsigned i = 0; i < cap; i++) {
        if (!live[block_index(&t, got[i])] || got[i] == half_popped)
            continue;
        assert_true(shoal_block_is_live(pg, got[i]));
        assert_true(block_filled(got[i], bsize, 3, block_index(&t, got[i]), 0));
    }
    /* The start test follows the capacity, not what the carve wrote. */
    assert_false(shoal_block_is_start(pg, past));
    page_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_start_every_offset),
        cmocka_unit_test(test_carve_every_class),
        cmocka_unit_test(test_dirty_span_not_zero),
        cmocka_unit_test(test_traps_sample_where_drawn),
        cmocka_unit_test(test_take_under_the_sample_trap),
        cmocka_unit_test(test_rebuild_from_marks),
    };
    /* TEST_FILTER=name runs the tests whose names match (a glob). */
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
