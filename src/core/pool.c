/* pool.c - superpages, buddy claim and release, and the purger.
 *
 * Invariants
 *  - occupied bit i is set iff slot i belongs to someone: a heap, a large
 *    block, the header (slot 0, always), or the purger for the length of
 *    one madvise.
 *  - dirty bit i is clear only if slot i reads as zero.  Only the holder
 *    of a slot changes its dirty bit, so a claimer can trust what it sees.
 *  - lazy bit i (MADV_FREE mode) says slot i was already handed to the
 *    kernel and needs no further purge; cleared when it is claimed again.
 *  - superpages are never unmapped, so a descriptor pointer stays valid
 *    for ever and lock-free readers may always dereference one.
 */
#include "pool.h"

#include <errno.h>
#include "chunk_map.h"
#include "counter.h"
#include "message.h"
#include "options.h"
#include "sync.h"
#include "../os/os.h"

_Atomic uint8_t shoal_chunk_map[SHOAL_CHUNKS];

#define SHOAL_MAX_SUPERPAGES ((size_t)1 << 18)     /* 1 TiB of pool */

static shoal_superpage_t *sp_table[SHOAL_MAX_SUPERPAGES];
static _Atomic size_t sp_count;     /* entries of sp_table published */
static _Atomic size_t claim_hint;   /* a superpage likely to have room */
static _Atomic uint64_t lazy_purged[SHOAL_MAX_SUPERPAGES];
static shoal_lock_t grow_lock = SHOAL_LOCK_INIT;
static shoal_lock_t purge_lock = SHOAL_LOCK_INIT;
static _Atomic uint64_t n_claims, n_releases, n_purged_bytes;
static _Atomic size_t slots_claimed, slots_claimed_peak;  /* the purger's excluded */

/* Bit i of starts[k] is set iff a block of order k may start at slot i. */
static const uint64_t starts[SHOAL_MAX_ORDER + 2] = {
    ~(uint64_t)0, 0x5555555555555555u, 0x1111111111111111u,
    0x0101010101010101u, 0x0001000100010001u, 0x0000000100000001u, 1u,
};

/* `count` bits from bit `slot` on. */
static inline uint64_t slots_mask(unsigned slot, unsigned count)
{
    return (count >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << count) - 1)) << slot;
}

/* Slots where a free, aligned run of 2^order slots starts. */
static uint64_t free_starts(uint64_t occupied, unsigned order)
{
    uint64_t m = ~occupied;
    for (unsigned s = 1; s < (1u << order); s <<= 1)
        m &= m >> s;
    return m & starts[order];
}

/* Best fit: prefer a block whose buddy is taken, so free buddies stay
 * together for larger requests. */
static unsigned pick(uint64_t cand, unsigned order)
{
    unsigned s = 1u << order;
    uint64_t parent = starts[order + 1];
    uint64_t buddy_free = ((cand & parent) << s) | ((cand >> s) & parent);
    uint64_t lone = cand & ~buddy_free;
    return (unsigned)__builtin_ctzll(lone ? lone : cand);
}

static bool claim_in(shoal_superpage_t *sp, unsigned order, unsigned *slot)
{
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    for (;;) {
        uint64_t cand = free_starts(occ, order);
        if (cand == 0)
            return false;
        unsigned i = pick(cand, order);
        /* Acquire on success: whoever held these slots before released
         * them with a release AND after its last write to them (user data,
         * descriptor, dirty bits), so all of that is visible before we
         * reuse the memory.  On failure occ is reloaded and the choice is
         * made again: the CAS compares the whole word, so a stale view can
         * only fail, never hand one slot out twice. */
        if (atomic_compare_exchange_weak_explicit(&sp->occupied, &occ,
                                                  occ | slots_mask(i, 1u << order),
                                                  memory_order_acquire,
                                                  memory_order_relaxed)) {
            *slot = i;
            return true;
        }
    }
}

/* Add a superpage to the pool.  Returns false with errno ENOMEM when the
 * OS or MAX_MEMORY refuses.  `seen` is the count the caller searched; if
 * another thread grew the pool meanwhile, we return true at once and the
 * caller searches again. */
static bool grow(size_t seen)
{
    bool ok = true;
    shoal_lock(&grow_lock);
    size_t n = atomic_load_explicit(&sp_count, memory_order_relaxed);
    if (n != seen)
        goto out;
    long max = shoal_opt(ALLOC_OPTION_MAX_MEMORY);
    shoal_superpage_t *sp = NULL;
    if (n < SHOAL_MAX_SUPERPAGES &&
        (max == 0 || shoal_os_mapped() + SHOAL_SP_SIZE <= (size_t)max))
        sp = shoal_os_reserve(SHOAL_SP_SIZE, SHOAL_SP_SIZE);
    if (sp == NULL) {
        if (shoal_opt(ALLOC_OPTION_VERBOSE))
            shoal_warning("no memory for another superpage (%zu mapped, MAX_MEMORY %ld)",
                          shoal_os_mapped(), max);
        errno = ENOMEM;
        ok = false;
        goto out;
    }
    if (shoal_opt(ALLOC_OPTION_HUGE_PAGES))
        shoal_os_huge_hint(sp, SHOAL_SP_SIZE, true);
    /* Fresh memory is zero: only the header's fields need values. */
    atomic_store_explicit(&sp->occupied, 1, memory_order_relaxed);
    atomic_store_explicit(&sp->dirty, 1, memory_order_relaxed);
    sp->index = (uint32_t)n;
    sp->pages[0].kind = SHOAL_SLOT_META;
    sp_table[n] = sp;
    shoal_chunk_set(sp, SHOAL_CHUNK_SUPERPAGE);
    /* Release: a reader that sees the new count sees the header above. */
    atomic_store_explicit(&sp_count, n + 1, memory_order_release);
    atomic_store_explicit(&claim_hint, n, memory_order_relaxed);
out:
    shoal_unlock(&grow_lock);
    return ok;
}

static void count_claimed(size_t n)
{
    shoal_peak_update(&slots_claimed_peak,
                      atomic_fetch_add_explicit(&slots_claimed, n, memory_order_relaxed) + n);
}

bool shoal_pool_claim(unsigned order, shoal_span_t *out)
{
    for (;;) {
        size_t n = atomic_load_explicit(&sp_count, memory_order_acquire);
        size_t hint = atomic_load_explicit(&claim_hint, memory_order_relaxed);
        for (size_t k = 0; k < n; k++) {
            size_t i = (hint + k) % n;
            shoal_superpage_t *sp = sp_table[i];
            unsigned slot;
            if (!claim_in(sp, order, &slot))
                continue;
            if (k != 0)
                atomic_store_explicit(&claim_hint, i, memory_order_relaxed);
            uint64_t mask = slots_mask(slot, 1u << order);
            atomic_fetch_and_explicit(&lazy_purged[i], ~mask, memory_order_relaxed);
            uint64_t was = atomic_fetch_or_explicit(&sp->dirty, mask, memory_order_relaxed);
            out->sp = sp;
            out->slot = slot;
            out->order = order;
            out->zero = (was & mask) == 0;
            if (out->zero && shoal_opt(ALLOC_OPTION_PREFAULT))
                shoal_os_prefault(shoal_slot_addr(sp, slot), SHOAL_SLOT_SIZE << order);
            atomic_fetch_add_explicit(&n_claims, 1, memory_order_relaxed);
            count_claimed(1u << order);
            return true;
        }
        if (!grow(n))
            return false;
    }
}

void shoal_pool_release(shoal_superpage_t *sp, unsigned slot, unsigned count)
{
    /* Release: our writes to the slots happen before the next claimer's
     * acquire CAS sees them free. */
    atomic_fetch_and_explicit(&sp->occupied, ~slots_mask(slot, count), memory_order_release);
    if (sp->index < atomic_load_explicit(&claim_hint, memory_order_relaxed))
        atomic_store_explicit(&claim_hint, sp->index, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_releases, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&slots_claimed, count, memory_order_relaxed);
}

bool shoal_pool_grow(shoal_superpage_t *sp, unsigned slot, unsigned order,
                     unsigned new_order)
{
    if (new_order > SHOAL_MAX_ORDER || (slot & ((1u << new_order) - 1)) != 0)
        return false;
    uint64_t more = slots_mask(slot + (1u << order), (1u << new_order) - (1u << order));
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    do {
        if ((occ & more) != 0)
            return false;
        /* Acquire, as in claim_in: the last holder's writes are done. */
    } while (!atomic_compare_exchange_weak_explicit(&sp->occupied, &occ, occ | more,
                                                    memory_order_acquire,
                                                    memory_order_relaxed));
    atomic_fetch_or_explicit(&sp->dirty, more, memory_order_relaxed);
    atomic_fetch_and_explicit(&lazy_purged[sp->index], ~more, memory_order_relaxed);
    count_claimed((1u << new_order) - (1u << order));
    return true;
}

/* Take the free slots among `want` for the purger; returns those taken. */
static uint64_t claim_free_bits(shoal_superpage_t *sp, uint64_t want)
{
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    uint64_t got;
    do {
        got = want & ~occ;
        if (got == 0)
            return 0;
        /* Acquire, as in claim_in: the last holder's writes are done. */
    } while (!atomic_compare_exchange_weak_explicit(&sp->occupied, &occ, occ | got,
                                                    memory_order_acquire,
                                                    memory_order_relaxed));
    return got;
}

static size_t purge_superpage(size_t i, bool force, bool lazy, bool huge, size_t *waiting)
{
    shoal_superpage_t *sp = sp_table[i];
    uint64_t dirty = atomic_load_explicit(&sp->dirty, memory_order_relaxed);
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    uint64_t cand = dirty & ~occ & ~atomic_load_explicit(&lazy_purged[i], memory_order_relaxed);
    if (huge) {
        /* Purging part of a transparent huge page splits it: only a
         * wholly free 2 MiB half goes, in one piece.  (The lower half
         * holds the header, so it stays.) */
        const uint64_t upper = ~(uint64_t)0 << (SHOAL_SP_SLOTS / 2);
        cand = (occ & upper) == 0 && (cand & upper) != 0 ? upper : 0;
    }
    uint64_t ready = force ? cand : cand & sp->purge_mark;
    sp->purge_mark = cand & ~ready;
    *waiting += (size_t)__builtin_popcountll(sp->purge_mark);
    uint64_t got = ready ? claim_free_bits(sp, ready) : 0;
    if (got == 0)
        return 0;
    /* Contiguous runs go to the kernel in one call each. */
    uint64_t zeroed = 0, rest = got;
    while (rest != 0) {
        unsigned first = (unsigned)__builtin_ctzll(rest);
        unsigned len = (unsigned)__builtin_ctzll(~(rest >> first));
        if (first + len > 64)
            len = 64 - first;
        uint64_t run = slots_mask(first, len);
        if (shoal_os_purge(shoal_slot_addr(sp, first), (size_t)len << SHOAL_SLOT_SHIFT, lazy))
            zeroed |= run;
        rest &= ~run;
    }
    atomic_fetch_and_explicit(&sp->dirty, ~zeroed, memory_order_relaxed);
    atomic_fetch_or_explicit(&lazy_purged[i], got & ~zeroed, memory_order_relaxed);
    /* Release: the dirty bits above are visible to the next claimer. */
    atomic_fetch_and_explicit(&sp->occupied, ~got, memory_order_release);
    return (size_t)__builtin_popcountll(got) << SHOAL_SLOT_SHIFT;
}

size_t shoal_pool_purge(bool force, size_t *waiting)
{
    if (!ck_spinlock_fas_trylock(&purge_lock)) {
        *waiting += 1;          /* someone else's pass; ours comes later */
        return 0;
    }
    shoal_tsan_acquire(&purge_lock);
    bool lazy = shoal_opt(ALLOC_OPTION_PURGE_MODE) == ALLOC_PURGE_FREE;
    bool huge = shoal_opt(ALLOC_OPTION_HUGE_PAGES) != 0;
    size_t n = atomic_load_explicit(&sp_count, memory_order_acquire);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += purge_superpage(i, force, lazy, huge, waiting);
    atomic_fetch_add_explicit(&n_purged_bytes, bytes, memory_order_relaxed);
    shoal_unlock(&purge_lock);
    return bytes;
}

size_t shoal_pool_count(void)
{
    return atomic_load_explicit(&sp_count, memory_order_acquire);
}

shoal_superpage_t *shoal_pool_superpage(size_t i)
{
    return sp_table[i];
}

void shoal_pool_fork_prepare(void)
{
    shoal_lock(&grow_lock);
    shoal_lock(&purge_lock);
}

void shoal_pool_fork_release(void)
{
    shoal_unlock(&purge_lock);
    shoal_unlock(&grow_lock);
}

void shoal_pool_stats(shoal_pool_stats_t *st)
{
    size_t n = atomic_load_explicit(&sp_count, memory_order_acquire);
    st->superpages = n;
    st->slots_claimed = atomic_load_explicit(&slots_claimed, memory_order_relaxed);
    st->slots_claimed_peak = atomic_load_explicit(&slots_claimed_peak, memory_order_relaxed);
    st->slots_dirty_free = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t occ = atomic_load_explicit(&sp_table[i]->occupied, memory_order_relaxed);
        uint64_t dirty = atomic_load_explicit(&sp_table[i]->dirty, memory_order_relaxed);
        uint64_t lazy = atomic_load_explicit(&lazy_purged[i], memory_order_relaxed);
        st->slots_dirty_free += (size_t)__builtin_popcountll(dirty & ~occ & ~lazy);
    }
    st->claims = atomic_load_explicit(&n_claims, memory_order_relaxed);
    st->releases = atomic_load_explicit(&n_releases, memory_order_relaxed);
    st->purged_bytes = atomic_load_explicit(&n_purged_bytes, memory_order_relaxed);
}

