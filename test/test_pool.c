/* The superpage buddy pool (src/core/pool.h), through its internal API.
 *
 * This binary never calls alloc_*, so no heap claims slots behind the
 * tests' backs: the pool holds exactly what the tests claimed.  Several
 * tests first fill every superpage with single slots ("fill_pool"), so
 * the only free slots are the ones a test releases and every claim that
 * follows has exactly one right answer.
 *
 * Every claimed block gets marked in an ownership bitmap (a slot handed
 * out twice shows up there) and gets a tag written into its memory (two
 * claims that overlap overwrite each other's tags). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/commit.h"
#include "core/layout.h"
#include "core/options.h"
#include "core/pool.h"
#include "os/os.h"

#include "test_util.h"

#ifdef UNDER_TSAN
#define CONC_ITERS 60000
#define MIXED_ROUNDS 2
#else
#define CONC_ITERS 100000
#define MIXED_ROUNDS 6
#endif

#define MAX_SP 4096             /* superpages a test binary may see */
#define MAX_HELD 16384

static uint64_t mask_of(unsigned slot, unsigned count)
{
    return (count >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << count) - 1)) << slot;
}

static uint64_t occupied(shoal_superpage_t *sp)
{
    return atomic_load(&sp->occupied);
}

static size_t slots_claimed(void)
{
    shoal_pool_stats_t st;
    shoal_pool_stats(&st);
    return st.slots_claimed;
}

static size_t superpage_count(void)
{
    shoal_pool_stats_t st;
    shoal_pool_stats(&st);
    return st.superpages;
}

static size_t dirty_free(void)
{
    shoal_pool_stats_t st;
    shoal_pool_stats(&st);
    return st.slots_dirty_free;
}

/* One purge pass (what it leaves for a later pass is not needed here). */
static size_t pool_purge(bool force)
{
    size_t waiting = 0;
    return shoal_pool_purge(force, &waiting);
}

/* ---- blocks held by the single-threaded tests ------------------------- */

typedef struct held_s {
    shoal_superpage_t *sp;
    unsigned slot, count;
} held_t;

static held_t held[MAX_HELD];
static size_t nheld;

static void hold(shoal_superpage_t *sp, unsigned slot, unsigned count)
{
    assert_true(nheld < MAX_HELD);
    held[nheld++] = (held_t){ sp, slot, count };
}

/* Release the held block that starts at (sp, slot), whole. */
static void release_held(shoal_superpage_t *sp, unsigned slot)
{
    for (size_t i = 0; i < nheld; i++) {
        if (held[i].sp == sp && held[i].slot == slot) {
            shoal_pool_release(sp, slot, held[i].count);
            held[i] = held[--nheld];
            return;
        }
    }
    fail_msg("slot %u of superpage %p is not held", slot, (void *)sp);
}

static void release_all_held(void)
{
    while (nheld > 0) {
        held_t h = held[--nheld];
        shoal_pool_release(h.sp, h.slot, h.count);
    }
    assert_int_equal(slots_claimed(), 0);
}

/* Teardown: whatever a failed test left behind, so failures do not
 * cascade into the next test. */
static int release_leftovers(void **state)
{
    (void)state;
    while (nheld > 0) {
        held_t h = held[--nheld];
        shoal_pool_release(h.sp, h.slot, h.count);
    }
    alloc_option_set(ALLOC_OPTION_PURGE_MODE, ALLOC_PURGE_DONTNEED);
    alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0);
    alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000);
    return 0;
}

/* Claim a block and check what every claim must satisfy. */
static shoal_span_t claim_checked(unsigned order)
{
    shoal_span_t s;
    memset(&s, 0xee, sizeof s);
    assert_true(shoal_pool_claim(order, &s));
    assert_non_null(s.sp);
    assert_ptr_equal(s.sp, shoal_superpage_at(shoal_superpage_base(s.sp)));  /* its header */
    assert_int_equal(s.order, order);
    assert_true(s.slot >= 1);                               /* slot 0 is the header */
    assert_true(s.slot + (1u << order) <= SHOAL_SP_SLOTS);
    assert_int_equal(s.slot & ((1u << order) - 1), 0);      /* aligned to its order */
    uintptr_t addr = (uintptr_t)shoal_slot_addr(s.sp, s.slot);
    assert_int_equal(addr & ((SHOAL_SLOT_SIZE << order) - 1), 0);
    uint64_t m = mask_of(s.slot, 1u << order);
    assert_true((occupied(s.sp) & m) == m);
    return s;
}

/* Claim single slots until every superpage is full.  Returns the
 * superpage the last one grew; every slot of the pool is then held. */
static shoal_superpage_t *fill_pool(void)
{
    size_t before = superpage_count();
    shoal_superpage_t *fresh = NULL;
    for (;;) {
        shoal_span_t s = claim_checked(0);
        hold(s.sp, s.slot, 1);
        if (s.sp->index >= before) {
            fresh = s.sp;
            break;
        }
    }
    assert_int_equal(superpage_count(), before + 1);
    while (occupied(fresh) != ~(uint64_t)0) {
        shoal_span_t s = claim_checked(0);
        assert_ptr_equal(s.sp, fresh);
        hold(s.sp, s.slot, 1);
    }
    assert_int_equal(superpage_count(), before + 1);
    return fresh;
}

/* Every superpage's header lies at its color in slot 0, and the
 * descriptor free finds for an address by masking (shoal_slot_desc) is
 * the one in that header (shoal_superpage_of), in every slot.
 * SHOAL_SP_COLORS fresh superpages at least, so that more than one color
 * is seen (the OS places them side by side). */
static void test_headers_at_their_colors(void **state)
{
    (void)state;
    for (int i = 0; i < SHOAL_SP_COLORS; i++)
        fill_pool();
    unsigned seen = 0;
    for (size_t i = 0; i < superpage_count(); i++) {
        shoal_superpage_t *sp = shoal_pool_superpage(i);
        uintptr_t base = (uintptr_t)shoal_superpage_base(sp);
        assert_int_equal(base & (SHOAL_SP_SIZE - 1), 0);
        size_t color = (base >> SHOAL_SP_SHIFT) & (SHOAL_SP_COLORS - 1);
        assert_int_equal((uintptr_t)sp - base, color * SHOAL_SP_HEADER_STEP);
        assert_true((uintptr_t)sp - base + sizeof *sp <= SHOAL_SLOT_SIZE);
        seen |= 1u << color;
        for (unsigned slot = 0; slot < SHOAL_SP_SLOTS; slot++) {
            char *at = shoal_slot_addr(sp, slot);
            assert_ptr_equal(shoal_superpage_of(at + 4096), sp);
            assert_ptr_equal(shoal_slot_desc(at), &sp->pages[slot]);
            assert_ptr_equal(shoal_slot_desc(at + SHOAL_SLOT_SIZE - 16), &sp->pages[slot]);
        }
    }
    print_message("superpages %zu, colors seen 0x%x\n", superpage_count(), seen);
    assert_true(__builtin_popcount(seen) >= 2);
}

static void fill(void *p, size_t n, uint64_t seed)
{
    uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        w[i] = seed ^ (i * 0x9e3779b97f4a7c15u);
}

static bool filled(const void *p, size_t n, uint64_t seed)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != (seed ^ (i * 0x9e3779b97f4a7c15u)))
            return false;
    return true;
}

static bool all_zero(const void *p, size_t n)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != 0)
            return false;
    return true;
}

/* ---- single-threaded -------------------------------------------------- */

/* Many claims of mixed orders: aligned, never overlapping (bitmap and
 * tags), the occupancy word and the statistics agree with what is held,
 * and releasing in random order gives everything back. */
static void test_claims_aligned_and_disjoint(void **state)
{
    (void)state;
    static uint64_t owned[MAX_SP];
    memset(owned, 0, sizeof owned);
    uint32_t rng = 12345;
    size_t expect_slots = 0;
    for (int round = 0; round < MIXED_ROUNDS; round++) {
        /* Claim up to 400 blocks. */
        while (nheld < 400) {
            rng = rng * 1103515245u + 12345u;
            unsigned order = (rng >> 16) % (SHOAL_MAX_ORDER + 1);
            shoal_span_t s = claim_checked(order);
            assert_true(s.sp->index < MAX_SP);
            uint64_t m = mask_of(s.slot, 1u << order);
            assert_int_equal(owned[s.sp->index] & m, 0);    /* handed out twice */
            owned[s.sp->index] |= m;
            /* Tag the first and last word of every slot. */
            for (unsigned i = 0; i < (1u << order); i++) {
                uint64_t *w = shoal_slot_addr(s.sp, s.slot + i);
                uint64_t tag = ((uint64_t)s.sp->index << 32) | (s.slot << 8) | i;
                w[0] = tag;
                w[SHOAL_SLOT_SIZE / 8 - 1] = ~tag;
            }
            hold(s.sp, s.slot, 1u << order);
            expect_slots += 1u << order;
        }
        assert_int_equal(slots_claimed(), expect_slots);
        /* Every tag intact, every held slot marked occupied. */
        for (size_t k = 0; k < nheld; k++) {
            held_t h = held[k];
            assert_true((occupied(h.sp) & mask_of(h.slot, h.count)) == mask_of(h.slot, h.count));
            for (unsigned i = 0; i < h.count; i++) {
                uint64_t *w = shoal_slot_addr(h.sp, h.slot + i);
                uint64_t tag = ((uint64_t)h.sp->index << 32) | (h.slot << 8) | i;
                assert_int_equal(w[0], tag);
                assert_int_equal(w[SHOAL_SLOT_SIZE / 8 - 1], ~tag);
            }
        }
        /* Release a random two thirds. */
        for (size_t k = 0; k < nheld;) {
            rng = rng * 1103515245u + 12345u;
            if ((rng >> 16) % 3 != 0) {
                held_t h = held[k];
                owned[h.sp->index] &= ~mask_of(h.slot, h.count);
                expect_slots -= h.count;
                release_held(h.sp, h.slot);     /* moves the last entry to k */
            } else {
                k++;
            }
        }
        assert_int_equal(slots_claimed(), expect_slots);
    }
    /* What is occupied is exactly the header plus what we hold. */
    for (size_t k = 0; k < nheld; k++)
        assert_int_equal(occupied(held[k].sp), 1 | owned[held[k].sp->index]);
    size_t n = superpage_count();
    assert_true(n <= MAX_SP);
    release_all_held();
    memset(owned, 0, sizeof owned);
    /* With nothing held, every superpage is back to the header alone, and
     * everything coalesced: each one has room for a largest block. */
    for (size_t i = 0; i < n; i++) {
        shoal_span_t s = claim_checked(SHOAL_MAX_ORDER);
        assert_int_equal(s.slot, 32);
        assert_int_equal(occupied(s.sp), 1 | mask_of(32, 32));
        assert_int_equal(owned[s.sp->index], 0);
        owned[s.sp->index] = 1;         /* each superpage exactly once */
        hold(s.sp, s.slot, 32);
    }
    assert_int_equal(superpage_count(), n);
    release_all_held();
}

/* Two free buddies are a free parent, up to the largest order; two free
 * neighbours that are not buddies are not. */
static void test_buddies_coalesce(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    size_t n = superpage_count();
    shoal_span_t s;

    /* Order 0 + order 0 -> order 1 at 32. */
    release_held(f, 32);
    release_held(f, 33);
    s = claim_checked(1);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 32);
    hold(s.sp, s.slot, 2);
    /* Order 1 + two order 0 -> order 2, and so on up to order 5. */
    for (unsigned order = 2; order <= SHOAL_MAX_ORDER; order++) {
        unsigned half = 1u << (order - 1);
        release_held(f, 32);                    /* the block of order-1 */
        for (unsigned i = 32 + half; i < 32 + 2 * half; i++)
            release_held(f, i);                 /* its buddy, slot by slot */
        s = claim_checked(order);
        assert_ptr_equal(s.sp, f);
        assert_int_equal(s.slot, 32);
        hold(s.sp, s.slot, 1u << order);
    }
    assert_int_equal(occupied(f), ~(uint64_t)0);
    assert_int_equal(superpage_count(), n);     /* no claim needed a new superpage */

    /* Slots 1 and 2 are neighbours but not buddies (1 pairs with the
     * header, 2 with 3): no order-1 block may come from them. */
    release_held(f, 1);
    release_held(f, 2);
    s = claim_checked(1);
    assert_ptr_not_equal(s.sp, f);
    assert_int_equal(superpage_count(), n + 1);
    hold(s.sp, s.slot, 2);
    assert_int_equal(occupied(f), ~mask_of(1, 2));
    release_all_held();
}

/* A claimed block may be given back in parts (a large block shrinking),
 * and the part given back can be claimed at once. */
static void test_release_part_of_block(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    for (unsigned i = 8; i < 16; i++)
        release_held(f, i);
    shoal_span_t s = claim_checked(3);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 8);
    for (unsigned i = 0; i < 8; i++)
        fill(shoal_slot_addr(f, 8 + i), 4096, 100 + i);

    /* Shrink to 4 slots, then to 2. */
    shoal_pool_release(f, 12, 4);
    assert_int_equal(occupied(f), ~mask_of(12, 4));
    shoal_pool_release(f, 10, 2);
    assert_int_equal(occupied(f), ~mask_of(10, 6));
    for (unsigned i = 0; i < 2; i++)
        assert_true(filled(shoal_slot_addr(f, 8 + i), 4096, 100 + i));
    /* The freed tail: one order-2 block at 12, then one order-1 at 10. */
    shoal_span_t t = claim_checked(2);
    assert_ptr_equal(t.sp, f);
    assert_int_equal(t.slot, 12);
    hold(f, 12, 4);
    t = claim_checked(1);
    assert_ptr_equal(t.sp, f);
    assert_int_equal(t.slot, 10);
    hold(f, 10, 2);
    assert_int_equal(occupied(f), ~(uint64_t)0);
    /* The head, still ours, is intact. */
    for (unsigned i = 0; i < 2; i++)
        assert_true(filled(shoal_slot_addr(f, 8 + i), 4096, 100 + i));
    hold(f, 8, 2);
    release_all_held();
}

/* Growing a block in place takes the free slots after it, by number,
 * only when those slots are all free and within the superpage. */
static void test_grow_in_place(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    uint64_t occ;
    /* We hold slot 32 as a block of one; all neighbours are held too. */
    assert_false(shoal_pool_grow(f, 32, 1, 2));
    release_held(f, 33);
    assert_true(shoal_pool_grow(f, 32, 1, 2));
    assert_int_equal(occupied(f), ~(uint64_t)0);
    release_held(f, 34);                        /* 35 still held */
    occ = occupied(f);
    assert_false(shoal_pool_grow(f, 32, 2, 4));
    assert_int_equal(occupied(f), occ);         /* a failed grow takes nothing */
    assert_true(shoal_pool_grow(f, 32, 2, 3));  /* to any number of slots */
    release_held(f, 35);
    assert_true(shoal_pool_grow(f, 32, 3, 4));
    assert_int_equal(occupied(f), ~(uint64_t)0);
    /* No alignment asked: 37 grows over 38 and 39. */
    release_held(f, 38);
    release_held(f, 39);
    assert_true(shoal_pool_grow(f, 37, 1, 3));
    assert_int_equal(occupied(f), ~(uint64_t)0);
    /* Past the superpage's last slot: never. */
    release_held(f, 63);
    assert_false(shoal_pool_grow(f, 62, 1, 3));
    assert_true(shoal_pool_grow(f, 62, 1, 2));
    assert_int_equal(slots_claimed(), nheld + 6);  /* 6 slots joined other blocks */
    release_held(f, 32);                        /* held as one slot: give the rest */
    shoal_pool_release(f, 33, 3);
    release_held(f, 37);
    shoal_pool_release(f, 38, 2);
    release_held(f, 62);
    shoal_pool_release(f, 63, 1);
    release_all_held();
}

/* A run claim takes free slots in a row wherever they lie, aligned or
 * not, one that ends where a taken slot does first (runs fill gaps). */
static void test_claim_run_anywhere(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    for (unsigned s = 5; s < 8; s++)
        release_held(f, s);                     /* the only three in a row */
    shoal_span_t r;
    assert_true(shoal_pool_claim_run(3, &r));
    assert_ptr_equal(r.sp, f);
    assert_int_equal(r.slot, 5);
    hold(f, 5, 3);
    assert_int_equal(occupied(f), ~(uint64_t)0);
    for (unsigned s = 9; s < 14; s++)
        release_held(f, s);                     /* 9..13 free, 14 taken */
    assert_true(shoal_pool_claim_run(2, &r));
    assert_ptr_equal(r.sp, f);
    assert_int_equal(r.slot, 12);               /* snug against 14 */
    hold(f, 12, 2);
    assert_true(shoal_pool_claim_run(3, &r));
    assert_ptr_equal(r.sp, f);
    assert_int_equal(r.slot, 9);
    hold(f, 9, 3);
    assert_int_equal(occupied(f), ~(uint64_t)0);
    release_all_held();
}

/* Purged slots read as zero, and the claim that gets them says so; a
 * claimed slot is never purged; without force a slot waits one pass. */
static void test_purge_zeroes_free_slots(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_get(ALLOC_OPTION_PURGE_MODE), ALLOC_PURGE_DONTNEED);
    shoal_superpage_t *f = fill_pool();
    fill(shoal_slot_addr(f, 20), SHOAL_SLOT_SIZE, 20);     /* held throughout */

    /* Forced. */
    for (unsigned i = 8; i < 16; i++) {
        fill(shoal_slot_addr(f, i), SHOAL_SLOT_SIZE, 0xa5a5 + i);
        release_held(f, i);
    }
    assert_int_equal(dirty_free(), 8);
    assert_int_equal(pool_purge(true), 8 * SHOAL_SLOT_SIZE);
    assert_int_equal(dirty_free(), 0);
    assert_int_equal(pool_purge(true), 0);           /* nothing left to do */
    assert_true(filled(shoal_slot_addr(f, 20), SHOAL_SLOT_SIZE, 20));
    shoal_span_t s = claim_checked(3);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 8);
    assert_true(s.zero);
    assert_true(all_zero(shoal_slot_addr(f, 8), 8 * SHOAL_SLOT_SIZE));

    /* Not forced: the first pass only notes the slots, the second purges. */
    fill(shoal_slot_addr(f, 8), 8 * SHOAL_SLOT_SIZE, 77);
    shoal_pool_release(f, 8, 8);
    assert_int_equal(pool_purge(false), 0);
    assert_int_equal(dirty_free(), 8);
    /* A slot freed between the passes waits for the next one. */
    fill(shoal_slot_addr(f, 16), SHOAL_SLOT_SIZE, 16);
    release_held(f, 16);
    assert_int_equal(pool_purge(false), 8 * SHOAL_SLOT_SIZE);
    assert_int_equal(dirty_free(), 1);
    assert_int_equal(pool_purge(false), SHOAL_SLOT_SIZE);
    assert_int_equal(dirty_free(), 0);
    s = claim_checked(3);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 8);
    assert_true(s.zero);
    assert_true(all_zero(shoal_slot_addr(f, 8), 8 * SHOAL_SLOT_SIZE));
    hold(f, 8, 8);
    s = claim_checked(0);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 16);
    assert_true(s.zero);
    assert_true(all_zero(shoal_slot_addr(f, 16), SHOAL_SLOT_SIZE));
    hold(f, 16, 1);

    /* A dirty slot that was not purged is reported as not zero. */
    fill(shoal_slot_addr(f, 16), SHOAL_SLOT_SIZE, 1616);
    release_held(f, 16);
    s = claim_checked(0);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 16);
    assert_false(s.zero);
    hold(f, 16, 1);

    assert_true(filled(shoal_slot_addr(f, 20), SHOAL_SLOT_SIZE, 20));
    release_all_held();
    pool_purge(true);
}

/* A forced pass, on a thread of its own. */
static void *forced_pass(void *arg)
{
    *(size_t *)arg = pool_purge(true);
    return NULL;
}

/* A timed pass, the purger's, on a thread of its own. */
static void *timed_pass(void *arg)
{
    *(size_t *)arg = pool_purge(false);
    return NULL;
}

/* Released slots 8..15 of f, written: dirty free ones for a pass. */
static void release_dirty(shoal_superpage_t *f)
{
    for (unsigned i = 8; i < 16; i++) {
        fill(shoal_slot_addr(f, i), SHOAL_SLOT_SIZE, 0x2a2a + i);
        release_held(f, i);
    }
    assert_int_equal(dirty_free(), 8);
}

/* fork holds the pool's locks from its prepare handler to its parent
 * handler.  A pass that starts meanwhile waits for the fork at the next
 * superpage and then does its work: it used to find the pass lock taken
 * and leave everything for a later pass, so that a process that forks
 * often (its fork slowed by the very memory the pass would give back:
 * 2 GiB freed, 25 ms a fork) skipped pass after pass. */
static void test_pass_waits_for_fork(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    release_dirty(f);
    assert_int_equal(pool_purge(false), 0);     /* the first pass marks them */
    shoal_pool_fork_prepare();
    size_t bytes = SIZE_MAX;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, timed_pass, &bytes), 0);
    struct timespec pause = { 0, 20 * 1000 * 1000 };
    nanosleep(&pause, NULL);                    /* it waits, or (before) it gave up */
    shoal_pool_fork_release();
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(bytes, 8 * SHOAL_SLOT_SIZE);
    assert_int_equal(dirty_free(), 0);
    release_all_held();
}

/* The child of a fork that came while another thread's pass held the
 * pass lock (between two superpages: here, waiting for the superpage
 * lock that the "fork" holds) has no such thread: fork's child handler
 * lets the pass lock go, and the child's own forced pass purges all,
 * where it used to wait for ever.  The child is forked with the raw
 * system call, as the libc's fork would run shoal's handlers, and does
 * what the child handler does (thread/fork.c). */
static void test_child_passes_after_fork_mid_pass(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    release_dirty(f);
    shoal_pool_fork_prepare();
    size_t bytes = SIZE_MAX;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, forced_pass, &bytes), 0);
    struct timespec pause = { 0, 20 * 1000 * 1000 };
    nanosleep(&pause, NULL);                    /* it holds the pass lock */
    pid_t pid = (pid_t)syscall(SYS_fork);
    if (pid == 0) {
        shoal_pool_fork_release();
        shoal_pool_fork_child();
        alarm(10);                              /* a pass that waits for ever */
        size_t waiting = 0;
        size_t got = shoal_pool_purge(true, &waiting);
        _exit(got == 8 * SHOAL_SLOT_SIZE && dirty_free() == 0 ? 0 : 3);
    }
    assert_true(pid > 0);
    shoal_pool_fork_release();
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));                 /* not SIGALRM */
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(bytes, 8 * SHOAL_SLOT_SIZE);
    release_all_held();
}

/* Release slots 8..15 of f, written, as the hole that a claim of 16
 * slots cannot use, and make that claim: it takes a fresh superpage. */
static shoal_span_t claim_past_hole(shoal_superpage_t *f)
{
    for (unsigned i = 8; i < 16; i++) {
        fill(shoal_slot_addr(f, i), SHOAL_SLOT_SIZE, 0x5151 + i);
        release_held(f, i);
    }
    assert_int_equal(dirty_free(), 8);
    shoal_span_t big = claim_checked(4);
    assert_ptr_not_equal(big.sp, f);
    assert_true(big.zero);
    hold(big.sp, big.slot, 16);
    return big;
}

/* Slots made resident afresh while free dirty ones wait where the claim
 * could not use them: as many of those are purged at once, not at the
 * purge delay - unless PURGE_DELAY_MS is -1 (never purge). */
static void test_fresh_slots_purge_unfit_dirty_ones(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    shoal_span_t big = claim_past_hole(f);
    assert_int_equal(dirty_free(), 8);                  /* kept */
    for (unsigned i = 8; i < 16; i++)
        assert_true(filled(shoal_slot_addr(f, i), SHOAL_SLOT_SIZE, 0x5151 + i));
    /* The hole taken again (warm: it comes first), and the big block
     * back, purged: a clean superpage but for the hole. */
    shoal_span_t s = claim_checked(3);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 8);
    assert_false(s.zero);
    for (unsigned i = 8; i < 16; i++)
        hold(f, i, 1);
    release_held(big.sp, big.slot);
    pool_purge(true);

    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1000), 0);
    claim_past_hole(f);
    assert_int_equal(dirty_free(), 0);                  /* purged for the fresh slots */
    assert_true(all_zero(shoal_slot_addr(f, 8), 8 * SHOAL_SLOT_SIZE));
    release_all_held();
    pool_purge(true);
}

/* A batch of single slots (a heap's page-cache refill) takes a warm slot
 * alone: warm slots are resident memory, which a batch would keep in one
 * heap's cache from every other heap.  Where only cold slots are free,
 * it takes the batch whole. */
static void test_batch_takes_one_warm_slot(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    for (unsigned i = 40; i < 43; i++)
        release_held(f, i);                     /* three warm slots, nothing else free */
    assert_int_equal(dirty_free(), 3);
    shoal_span_t got[4];
    uint64_t taken = 0;
    for (unsigned k = 0; k < 3; k++) {
        memset(got, 0xee, sizeof got);
        unsigned n = shoal_pool_claim_slots(4, got);
        for (unsigned j = 0; j < n; j++)
            hold(got[j].sp, got[j].slot, 1);
        assert_int_equal(n, 1);
        assert_ptr_equal(got[0].sp, f);
        assert_true(got[0].slot >= 40 && got[0].slot < 43);
        assert_false(got[0].zero);
        taken |= (uint64_t)1 << got[0].slot;
    }
    assert_int_equal(taken, mask_of(40, 3));    /* each warm slot once */
    /* No warm slot left: a fresh superpage's cold slots, four at once. */
    unsigned n = shoal_pool_claim_slots(4, got);
    for (unsigned j = 0; j < n; j++)
        hold(got[j].sp, got[j].slot, 1);
    assert_int_equal(n, 4);
    for (unsigned k = 0; k < 4; k++)
        assert_true(got[k].zero);
    release_all_held();
    pool_purge(true);
}

/* MADV_FREE mode: the slots go to the kernel once, are not counted as
 * waiting any more, and a claim trusts them to be zero only if they are. */
static void test_purge_lazy_mode(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_MODE, ALLOC_PURGE_FREE), 0);
    shoal_superpage_t *f = fill_pool();
    for (unsigned i = 40; i < 48; i++) {
        fill(shoal_slot_addr(f, i), SHOAL_SLOT_SIZE, i);
        release_held(f, i);
    }
    assert_int_equal(pool_purge(true), 8 * SHOAL_SLOT_SIZE);
    assert_int_equal(dirty_free(), 0);
    assert_int_equal(pool_purge(true), 0);           /* not purged twice */
    shoal_span_t s = claim_checked(3);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 40);
    if (s.zero)
        assert_true(all_zero(shoal_slot_addr(f, 40), 8 * SHOAL_SLOT_SIZE));
    hold(f, 40, 8);
    /* Claimed again, the slots are ordinary dirty slots once freed. */
    release_held(f, 40);
    assert_int_equal(dirty_free(), 8);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_MODE, ALLOC_PURGE_DONTNEED), 0);
    assert_int_equal(pool_purge(true), 8 * SHOAL_SLOT_SIZE);
    s = claim_checked(3);
    assert_ptr_equal(s.sp, f);
    assert_true(s.zero);
    assert_true(all_zero(shoal_slot_addr(f, 40), 8 * SHOAL_SLOT_SIZE));
    hold(f, 40, 8);
    release_all_held();
}

/* MAX_MEMORY stops the pool from committing more: the claim of clean
 * slots fails with ENOMEM and the pool does not grow; slots that are
 * resident already are still handed out, and a raised limit helps. */
static void test_max_memory_refuses_growth(void **state)
{
    (void)state;
    shoal_superpage_t *f = fill_pool();
    size_t n = superpage_count();
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, (long)shoal_commit_charged()), 0);
    shoal_span_t s;
    errno = 0;
    assert_false(shoal_pool_claim(0, &s));
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(superpage_count(), n);
    /* Room inside the pool is still handed out under the limit. */
    release_held(f, 5);
    s = claim_checked(0);
    assert_ptr_equal(s.sp, f);
    assert_int_equal(s.slot, 5);
    hold(f, 5, 1);
    errno = 0;
    assert_false(shoal_pool_claim(SHOAL_MAX_ORDER, &s));
    assert_int_equal(errno, ENOMEM);
    /* Room for one more superpage's header and a block in it. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY,
                                      (long)(shoal_commit_charged() + SHOAL_SP_SIZE)), 0);
    s = claim_checked(SHOAL_MAX_ORDER);
    hold(s.sp, s.slot, 32);
    assert_int_equal(superpage_count(), n + 1);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 0), 0);
    release_all_held();
}

/* ---- concurrent ------------------------------------------------------- */

#define WORKERS 4
#define LIVE 24

static _Atomic uint64_t owner_map[MAX_SP];
static _Atomic long conc_failures;
static _Atomic int workers_running;

typedef struct cblk_s {
    shoal_superpage_t *sp;
    unsigned slot, count;
    uint64_t tag;
} cblk_t;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            atomic_fetch_add(&conc_failures, 1);                            \
            print_error("%s:%d: %s\n", __FILE__, __LINE__, #cond);          \
        }                                                                   \
    } while (0)

/* Mark slots as ours; none may be anyone's already. */
static void own(shoal_superpage_t *sp, uint64_t m)
{
    CHECK(sp->index < MAX_SP);
    uint64_t prev = atomic_fetch_or(&owner_map[sp->index], m);
    CHECK((prev & m) == 0);
}

/* Unmark before the release, so the next claimer finds them unmarked. */
static void disown(shoal_superpage_t *sp, uint64_t m)
{
    uint64_t prev = atomic_fetch_and(&owner_map[sp->index], ~m);
    CHECK((prev & m) == m);
}

static uint64_t *slot_word(const cblk_t *b, unsigned i, bool last)
{
    uint64_t *w = shoal_slot_addr(b->sp, b->slot + i);
    return last ? &w[SHOAL_SLOT_SIZE / 8 - 1] : w;
}

static void tag_block(const cblk_t *b)
{
    for (unsigned i = 0; i < b->count; i++) {
        *slot_word(b, i, false) = b->tag + i;
        *slot_word(b, i, true) = ~(b->tag + i);
    }
}

static void check_block(const cblk_t *b)
{
    for (unsigned i = 0; i < b->count; i++) {
        CHECK(*slot_word(b, i, false) == b->tag + i);
        CHECK(*slot_word(b, i, true) == ~(b->tag + i));
    }
}

static unsigned order_of(unsigned count)
{
    return (unsigned)__builtin_ctz(count);
}

static void *pool_worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint32_t rng = id * 2654435761u + 7;
    cblk_t live[LIVE];
    unsigned n = 0;
    uint64_t seq = 0;
    for (int it = 0; it < CONC_ITERS; it++) {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        unsigned r = rng;
        if (n == 0 || (n < LIVE && r % 8 < 4)) {
            /* Claim: mostly small orders. */
            static const unsigned orders[16] = { 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 5 };
            unsigned order = orders[(r >> 4) % 16];
            shoal_span_t s;
            if (!shoal_pool_claim(order, &s)) {
                CHECK(!"claim failed");
                continue;
            }
            CHECK(s.order == order && s.slot >= 1 && (s.slot & ((1u << order) - 1)) == 0 &&
                  s.slot + (1u << order) <= SHOAL_SP_SLOTS);
            uint64_t m = mask_of(s.slot, 1u << order);
            CHECK((atomic_load(&s.sp->occupied) & m) == m);
            own(s.sp, m);
            cblk_t b = { s.sp, s.slot, 1u << order, ((uint64_t)id << 56) | (++seq << 8) };
            if (s.zero)
                for (unsigned i = 0; i < b.count; i++)
                    CHECK(*slot_word(&b, i, false) == 0 && *slot_word(&b, i, true) == 0);
            tag_block(&b);
            live[n++] = b;
        } else {
            unsigned k = (r >> 4) % n;
            cblk_t *b = &live[k];
            check_block(b);
            unsigned what = (r >> 12) % 8;
            if (what == 0 && b->count > 1) {
                /* Shrink: give back the upper half. */
                unsigned half = b->count / 2;
                disown(b->sp, mask_of(b->slot + half, half));
                shoal_pool_release(b->sp, b->slot + half, half);
                b->count = half;
            } else if (what == 1 && b->count < 32) {
                /* Grow in place when the buddy is free. */
                unsigned order = order_of(b->count);
                if (shoal_pool_grow(b->sp, b->slot, order, order + 1)) {
                    own(b->sp, mask_of(b->slot + b->count, b->count));
                    b->count *= 2;
                    tag_block(b);
                }
            } else {
                disown(b->sp, mask_of(b->slot, b->count));
                shoal_pool_release(b->sp, b->slot, b->count);
                live[k] = live[--n];
            }
        }
        if (id == 0 && it % 500 == 0)
            pool_purge(it % 1000 == 0);
    }
    while (n > 0) {
        cblk_t *b = &live[--n];
        check_block(b);
        disown(b->sp, mask_of(b->slot, b->count));
        shoal_pool_release(b->sp, b->slot, b->count);
    }
    atomic_fetch_sub(&workers_running, 1);
    return NULL;
}

/* A purger that runs while the workers claim and release. */
static void *purger(void *arg)
{
    (void)arg;
    struct timespec pause = { 0, 1000 * 1000 };    /* pacing only */
    while (atomic_load(&workers_running) > 0) {
        pool_purge(true);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static void test_concurrent_claim_release(void **state)
{
    (void)state;
    pthread_t t[WORKERS], p;
    atomic_store(&workers_running, WORKERS);
    for (unsigned i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pool_worker, (void *)(uintptr_t)i), 0);
    assert_int_equal(pthread_create(&p, NULL, purger, NULL), 0);
    for (unsigned i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    pthread_join(p, NULL);
    assert_int_equal(atomic_load(&conc_failures), 0);
    for (size_t i = 0; i < MAX_SP; i++)
        assert_int_equal(atomic_load(&owner_map[i]), 0);
    assert_int_equal(slots_claimed(), 0);
    /* Everything released coalesced back: each superpage is empty. */
    size_t n = superpage_count();
    for (size_t i = 0; i < n; i++) {
        shoal_span_t s = claim_checked(SHOAL_MAX_ORDER);
        hold(s.sp, s.slot, 32);
    }
    assert_int_equal(superpage_count(), n);
    for (size_t i = 0; i < nheld; i++)
        assert_int_equal(occupied(held[i].sp), 1 | mask_of(32, 32));
    release_all_held();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_claims_aligned_and_disjoint, release_leftovers),
        cmocka_unit_test_teardown(test_buddies_coalesce, release_leftovers),
        cmocka_unit_test_teardown(test_release_part_of_block, release_leftovers),
        cmocka_unit_test_teardown(test_grow_in_place, release_leftovers),
        cmocka_unit_test_teardown(test_claim_run_anywhere, release_leftovers),
        cmocka_unit_test_teardown(test_purge_zeroes_free_slots, release_leftovers),
        cmocka_unit_test_teardown(test_pass_waits_for_fork, release_leftovers),
        cmocka_unit_test_teardown(test_child_passes_after_fork_mid_pass, release_leftovers),
        cmocka_unit_test_teardown(test_headers_at_their_colors, release_leftovers),
        cmocka_unit_test_teardown(test_fresh_slots_purge_unfit_dirty_ones, release_leftovers),
        cmocka_unit_test_teardown(test_batch_takes_one_warm_slot, release_leftovers),
        cmocka_unit_test_teardown(test_purge_lazy_mode, release_leftovers),
        cmocka_unit_test_teardown(test_max_memory_refuses_growth, release_leftovers),
        cmocka_unit_test_teardown(test_concurrent_claim_release, release_leftovers),
    };
    /* TEST_FILTER=name runs the tests whose names match (a glob). */
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
