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
 *  - the committed account (commit.h) holds one slot for every set dirty
 *    bit: the claimer that sets a clean slot's bit charges it, the purge
 *    that clears one uncharges it.
 *  - superpages are never unmapped, so a descriptor pointer stays valid
 *    for ever and lock-free readers may always dereference one.
 */
#include "pool.h"

#include <errno.h>
#include <string.h>
#include "chunk_map.h"
#include "commit.h"
#include "counter.h"
#include "huge.h"
#include "message.h"
#include "options.h"
#include "sync.h"
#include "../os/os.h"

_Atomic uint8_t shoal_chunk_map[SHOAL_CHUNKS] SHOAL_SPARSE_BSS;

#define SHOAL_MAX_SUPERPAGES ((size_t)1 << 18)     /* 1 TiB of pool */

static shoal_superpage_t *sp_table[SHOAL_MAX_SUPERPAGES] SHOAL_SPARSE_BSS;
/* Entries of sp_table published: stored with release after the entry
 * and its superpage are set up, loaded with acquire by every walk. */
static _Atomic size_t sp_count;
/* A superpage likely to have room: a hint, relaxed (a stale one costs a
 * longer search, nothing else). */
static _Atomic size_t claim_hint;
/* Per superpage, the free slots a lazy purge (MADV_FREE) gave back;
 * relaxed: changed under purge_lock or by a claim of the slots (which
 * owns them), read as a hint. */
static _Atomic uint64_t lazy_purged[SHOAL_MAX_SUPERPAGES] SHOAL_SPARSE_BSS;
static shoal_lock_t grow_lock = SHOAL_LOCK_INIT;
/* One pass at a time: a pass's marks age the free slots by one pass,
 * and two at once would purge what only one of them saw free. */
static shoal_lock_t pass_lock = SHOAL_LOCK_INIT;
/* Held while one superpage's free slots are purged (claimed, given to
 * the kernel, let go): what fork waits for, so that no slot is claimed
 * by a thread the child does not have.  A pass takes it a superpage at
 * a time, so a fork waits for one superpage's madvise calls, not for
 * the whole pass (which over 2 GiB freed took 150 ms and held fork back
 * as long). */
static shoal_lock_t purge_lock = SHOAL_LOCK_INIT;
/* Forks waiting for purge_lock.  The pass lets the lock go between two
 * superpages and takes it again at once; the lock (a try, a yield, a
 * try) would let the pass win nearly every time, and the fork wait for
 * the whole pass after all.  So the pass waits while a fork does.
 * Relaxed: the lock orders what it guards; this only says when to
 * yield. */
static _Atomic unsigned forks_waiting;
/* Statistics: relaxed, nothing is published through them. */
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

/* Slots where an aligned run of 2^order bits of m starts. */
static uint64_t run_starts(uint64_t m, unsigned order)
{
    for (unsigned s = 1; s < (1u << order); s <<= 1)
        m &= m >> s;
    return m & starts[order];
}

/* Of the free runs `cand` of 2^order slots, those whose buddy is taken:
 * best fit takes these first, so free buddies stay together for larger
 * requests. */
static uint64_t lone_runs(uint64_t cand, unsigned order)
{
    unsigned s = 1u << order;
    uint64_t parent = starts[order + 1];
    uint64_t buddy_free = ((cand & parent) << s) | ((cand >> s) & parent);
    return cand & ~buddy_free;
}

/* What a claim asks for, its shape: a buddy block of 2^order slots,
 * aligned to its size (the shape is the order), or RUN | n: n slots
 * anywhere (a large block of the natural alignment). */
#define RUN 0x100u

static unsigned shape_slots(unsigned shape)
{
    return shape & RUN ? shape & ~RUN : 1u << shape;
}

/* Slots where a run of the shape, all of its bits set in m, starts. */
static uint64_t shape_starts(uint64_t m, unsigned shape)
{
    if (!(shape & RUN))
        return run_starts(m, shape);
    /* Runs of len bits, len doubling, then of n: a run of len ANDed with
     * the one n - len on (n - len < len) covers n. */
    unsigned n = shape & ~RUN, len = 1;
    for (; len * 2 <= n; len *= 2)
        m &= m >> len;
    return len < n ? m & (m >> (n - len)) : m;
}

/* Best fit among `among`, a subset of the free runs `cand`: for a buddy
 * block one whose buddy is taken; for a run one that ends where a taken
 * slot (or the superpage) does, so that runs fill gaps and leave the
 * free space around them whole. */
static unsigned pick(uint64_t cand, uint64_t room, uint64_t among, unsigned shape)
{
    uint64_t snug = shape & RUN ? among & ~(room >> shape_slots(shape))
                                : among & lone_runs(cand, shape);
    return (unsigned)__builtin_ctzll(snug ? snug : among);
}

/* The free runs of a superpage for a claim of the shape, and among them
 * the "warm" ones, every slot of which is dirty: reusing memory that is
 * resident already costs no page fault and no RSS, so claims take warm
 * runs first and the process's footprint follows its live memory, not
 * the history of which slots it once used. */
static uint64_t free_runs(const shoal_superpage_t *sp, uint64_t occ, unsigned shape,
                          uint64_t *warm)
{
    uint64_t cand = shape_starts(~occ, shape);
    uint64_t dirty = atomic_load_explicit(&sp->dirty, memory_order_relaxed);
    *warm = cand & shape_starts(~occ & dirty, shape);
    return cand;
}

/* Set the bits of `mask` in sp's occupancy word if they are all free:
 * the claim itself. */
static bool occupy(shoal_superpage_t *sp, uint64_t *occ, uint64_t mask)
{
    /* Acquire on success: whoever held these slots before released them
     * with a release AND after its last write to them (user data,
     * descriptor, dirty bits), so all of that is visible before we reuse
     * the memory.  On failure occ is reloaded and the caller chooses
     * again: the CAS compares the whole word, so a stale view can only
     * fail, never hand one slot out twice. */
    return atomic_compare_exchange_weak_explicit(&sp->occupied, occ, *occ | mask,
                                                 memory_order_acquire, memory_order_relaxed);
}

/* Give back claimed slots: the release AND. */
static void unoccupy(shoal_superpage_t *sp, uint64_t mask)
{
    /* Release: our writes to the slots happen before the next claimer's
     * acquire CAS sees them free. */
    atomic_fetch_and_explicit(&sp->occupied, ~mask, memory_order_release);
}

static void count_claimed(size_t n)
{
    shoal_peak_update(&slots_claimed_peak,
                      atomic_fetch_add_explicit(&slots_claimed, n, memory_order_relaxed) + n);
}

static size_t purge_slots(size_t i, uint64_t ready, bool lazy);

/* Whether a purge lets the kernel take its slots lazily (MADV_FREE):
 * under MAX_MEMORY a purge must free room in the committed account,
 * which lazily reclaimed slots would not. */
static bool purge_is_lazy(void)
{
    return shoal_opt(ALLOC_OPTION_PURGE_MODE) == ALLOC_PURGE_FREE &&
           shoal_opt(ALLOC_OPTION_MAX_MEMORY) == 0;
}

size_t shoal_pool_trim(void *addr, size_t size)
{
    if (!shoal_os_purge(addr, size, purge_is_lazy()))
        return 0;
    atomic_fetch_add_explicit(&n_purged_bytes, size, memory_order_relaxed);
    return size;
}

/* `slots` slots were made resident afresh, in `except`, while free dirty
 * slots may wait elsewhere - where the sizes asked for now do not fit
 * (a burst of blocks of one size leaves holes that the next burst's
 * bigger runs cannot use), or past the superpages a claim looks at: as
 * many of those go back to the OS now, not at the purge delay, so that
 * the process grows by what it uses, not by how its free slots lie
 * (CPython's test_pickle: peak RSS 109 -> 81 MB, glibc 83).  Not while
 * another thread purges (a try), with PURGE_DELAY_MS below 1 (0 purges
 * at once anyway, -1 never) or with HUGE_PAGES (a part of a huge page
 * would split it: the passes give back only whole halves).  A call looks
 * at YIELD_LOOK superpages at most, from the claims' hint on (the lowest
 * superpage released into lately: where free slots are): a pool that
 * only grows, with no dirty slot to find, pays a bounded look for each
 * claim, not one over all it holds. */
#define YIELD_LOOK 64

static void yield_dirty(const shoal_superpage_t *except, size_t slots)
{
    if (shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) <= 0 || shoal_opt(ALLOC_OPTION_HUGE_PAGES) ||
        !shoal_trylock(&purge_lock))
        return;
    bool lazy = purge_is_lazy();
    size_t n = atomic_load_explicit(&sp_count, memory_order_acquire), bytes = 0;
    size_t hint = atomic_load_explicit(&claim_hint, memory_order_relaxed);
    for (size_t k = 0; k < n && k < YIELD_LOOK && slots != 0; k++) {
        size_t i = (hint + k) % n;
        shoal_superpage_t *sp = sp_table[i];
        if (sp == except)
            continue;
        uint64_t cand = atomic_load_explicit(&sp->dirty, memory_order_relaxed) &
                        ~atomic_load_explicit(&sp->occupied, memory_order_relaxed) &
                        ~atomic_load_explicit(&lazy_purged[i], memory_order_relaxed);
        uint64_t take = 0;
        for (; cand != 0 && slots != 0; cand &= cand - 1, slots--)
            take |= cand & -cand;
        bytes += purge_slots(i, take, lazy);
    }
    atomic_fetch_add_explicit(&n_purged_bytes, bytes, memory_order_relaxed);
    shoal_unlock(&purge_lock);
}

/* The claimer's side of slots it has just occupied: mark them dirty and
 * charge those that were clean to the committed account (commit.h).  A
 * slot the account has no room for is handed back at once, untouched;
 * with `whole` (a block, which is all or nothing) one such slot hands
 * back all of them.  Returns the slots kept, and in *clean those of them
 * that read as zero. */
static uint64_t settle(shoal_superpage_t *sp, uint64_t mask, bool whole, uint64_t *clean)
{
    atomic_fetch_and_explicit(&lazy_purged[sp->index], ~mask, memory_order_relaxed);
    uint64_t fresh = mask & ~atomic_fetch_or_explicit(&sp->dirty, mask, memory_order_relaxed);
    uint64_t refused = 0;
    if (fresh != 0 && !shoal_commit_charge((size_t)__builtin_popcountll(fresh) << SHOAL_SLOT_SHIFT)) {
        refused = whole ? mask : 0;
        for (uint64_t r = fresh; !whole && r != 0; r &= r - 1)
            if (!shoal_commit_charge(SHOAL_SLOT_SIZE))
                refused |= r & -r;
        /* Still ours, and untouched: only the holder changes a dirty bit. */
        atomic_fetch_and_explicit(&sp->dirty, ~(refused & fresh), memory_order_relaxed);
        unoccupy(sp, refused);
    }
    uint64_t kept = mask & ~refused;
    *clean = fresh & kept;
    if (*clean != 0) {          /* memory made resident afresh */
        shoal_huge_cache_yield((size_t)__builtin_popcountll(*clean) << SHOAL_SLOT_SHIFT);
        yield_dirty(sp, (size_t)__builtin_popcountll(*clean));
    }
    if (kept != 0) {
        atomic_fetch_add_explicit(&n_claims, 1, memory_order_relaxed);
        count_claimed((size_t)__builtin_popcountll(kept));
    }
    return kept;
}

/* Add a superpage to the pool.  Returns false with errno ENOMEM when the
 * OS or MAX_MEMORY refuses.  `seen` is the count the caller searched; if
 * another thread grew the pool meanwhile, we return true at once and the
 * caller searches again.  A superpage is address space until its slots
 * are touched: only its header slot is charged to the committed account. */
static bool grow(size_t seen)
{
    bool ok = true;
    shoal_lock(&grow_lock);
    size_t n = atomic_load_explicit(&sp_count, memory_order_relaxed);
    if (n != seen)
        goto out;
    /* A chunk of a freed huge mapping first: its memory is resident, and
     * growing into new address space beside it would make the process
     * hold both (`sort -S 12M` frees its 12 MiB buffer and then makes
     * 2 MiB blocks).  It is charged already, as the mapping was; every
     * slot of it counts dirty, and its header must be written whole (the
     * rest of slot 0 keeps what the huge block left there, the huge
     * block's own header at the chunk's base among it: nothing reads
     * slot 0 outside the superpage's header). */
    void *base = n < SHOAL_MAX_SUPERPAGES ? shoal_huge_cache_give_chunk() : NULL;
    uint64_t dirty = ~(uint64_t)0;
    if (base != NULL) {
        memset(shoal_superpage_at(base), 0, sizeof(shoal_superpage_t));
    } else {
        dirty = 1;
        bool charged = shoal_commit_charge_ahead(SHOAL_SLOT_SIZE);
        if (charged && n < SHOAL_MAX_SUPERPAGES)
            base = shoal_chunk_reserve(SHOAL_SP_SIZE, SHOAL_SP_SIZE, SHOAL_OS_LAZY);
        if (charged)
            shoal_commit_settle(SHOAL_SLOT_SIZE, base != NULL);
    }
    if (base == NULL) {
        if (shoal_opt(ALLOC_OPTION_VERBOSE))
            shoal_warning("no memory for another superpage (%zu committed, MAX_MEMORY %ld)",
                          shoal_commit_charged(), shoal_opt(ALLOC_OPTION_MAX_MEMORY));
        errno = ENOMEM;
        ok = false;
        goto out;
    }
    if (shoal_opt(ALLOC_OPTION_HUGE_PAGES))
        shoal_os_huge_hint(base, SHOAL_SP_SIZE);
    /* Fresh memory is zero: only the header's fields need values. */
    shoal_superpage_t *sp = shoal_superpage_at(base);
    atomic_store_explicit(&sp->occupied, 1, memory_order_relaxed);
    atomic_store_explicit(&sp->dirty, dirty, memory_order_relaxed);
    sp->index = (uint32_t)n;
    sp->pages[0].kind = SHOAL_SLOT_META;
    sp_table[n] = sp;
    shoal_chunk_set(base, SHOAL_CHUNK_SUPERPAGE);
    /* Release: a reader that sees the new count sees the header above. */
    atomic_store_explicit(&sp_count, n + 1, memory_order_release);
    atomic_store_explicit(&claim_hint, n, memory_order_relaxed);
out:
    shoal_unlock(&grow_lock);
    return ok;
}

/* Superpages a claim looks at past the first one with room, for one with
 * a warm run: a bounded search, so a claim in a big pool stays cheap. */
#define CLAIM_LOOKAHEAD 4

/* The superpage a claim of the shape should try: from the hint (the lowest
 * superpage recently released into) on, the first with a warm run within
 * the lookahead, else the first with any free run; -1 if none has one.
 * With `warm_only`, only a warm run anywhere will do. */
static long choose(unsigned shape, size_t n, bool warm_only)
{
    size_t hint = atomic_load_explicit(&claim_hint, memory_order_relaxed);
    long first = -1;
    unsigned looked = 0;
    for (size_t k = 0; k < n && looked <= CLAIM_LOOKAHEAD; k++) {
        size_t i = (hint + k) % n;
        shoal_superpage_t *sp = sp_table[i];
        uint64_t warm;
        uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
        if (free_runs(sp, occ, shape, &warm) == 0)
            continue;
        if (warm != 0)
            return (long)i;
        if (warm_only)
            continue;
        if (first < 0)
            first = (long)i;
        looked++;
    }
    return first;
}

enum claim_result { CLAIMED, RACED, REFUSED };

/* Claim a block of the shape in superpage i (warm runs first), or, with
 * max_slots > 0, up to that many single slots (order 0) in one CAS. */
static enum claim_result claim_at(size_t i, unsigned shape, unsigned max_slots,
                                  shoal_span_t *out, unsigned *got)
{
    shoal_superpage_t *sp = sp_table[i];
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    uint64_t mask;
    do {
        uint64_t warm, cand = free_runs(sp, occ, shape, &warm);
        if (cand == 0)
            return RACED;
        if (max_slots == 0) {
            unsigned at = pick(cand, ~occ, warm ? warm : cand, shape);
            mask = slots_mask(at, shape_slots(shape));
        } else {
            /* A warm slot alone, where there is one: a batch of warm
             * slots would hold resident memory in the claimer's cache
             * that another heap, claiming at the same time, would then
             * have to make resident afresh (larson, both threads on one
             * core: peak RSS 12.9 -> 12.5 MiB, with heap.c's cap on the
             * pages a heap keeps).  Cold slots come in a batch, which
             * costs no memory until each is used.  Lone slots (whose
             * buddy is taken) before halves of free pairs. */
            uint64_t lone = lone_runs(cand, 0);
            const uint64_t pref[4] = { warm & lone, warm, lone, cand };
            unsigned left = warm != 0 ? 1 : max_slots;
            mask = 0;
            for (unsigned k = 0; k < 4; k++)
                for (uint64_t m = pref[k] & ~mask; m != 0 && left != 0; m &= m - 1, left--)
                    mask |= m & -m;
        }
    } while (!occupy(sp, &occ, mask));
    uint64_t clean, kept = settle(sp, mask, max_slots == 0, &clean);
    if (kept == 0)
        return REFUSED;
    if (i != atomic_load_explicit(&claim_hint, memory_order_relaxed))
        atomic_store_explicit(&claim_hint, i, memory_order_relaxed);
    *got = 0;
    for (uint64_t m = kept; m != 0; m &= m - 1) {
        unsigned slot = (unsigned)__builtin_ctzll(m);
        out[*got] = (shoal_span_t){ sp, slot, shape & RUN ? 0 : shape, false };
        out[*got].zero = max_slots == 0 ? clean == kept : ((clean >> slot) & 1) != 0;
        if (out[*got].zero && shoal_opt(ALLOC_OPTION_PREFAULT))
            shoal_os_prefault(shoal_slot_addr(sp, slot),
                              (size_t)SHOAL_SLOT_SIZE * shape_slots(shape));
        ++*got;
        if (max_slots == 0)
            break;
    }
    return CLAIMED;
}

/* The claims' common loop: choose a superpage, claim there, grow the pool
 * when none has room.  When the committed account refuses clean slots,
 * only warm ones (charged already) can be had. */
static unsigned claim(unsigned shape, unsigned max_slots, shoal_span_t *out)
{
    bool warm_only = false;
    for (;;) {
        size_t n = atomic_load_explicit(&sp_count, memory_order_acquire);
        long i = choose(shape, n, warm_only);
        if (i < 0) {
            if (warm_only && shoal_opt(ALLOC_OPTION_VERBOSE))
                shoal_warning("no room under MAX_MEMORY for a block of %u KiB (%zu committed, "
                              "MAX_MEMORY %ld)", 64u * shape_slots(shape), shoal_commit_charged(),
                              shoal_opt(ALLOC_OPTION_MAX_MEMORY));
            if (warm_only || !grow(n)) {
                errno = ENOMEM;
                return 0;
            }
            continue;
        }
        unsigned got;
        switch (claim_at((size_t)i, shape, max_slots, out, &got)) {
        case CLAIMED:
            return got;
        case REFUSED:
            warm_only = true;
            break;
        case RACED:
            break;
        }
    }
}

bool shoal_pool_claim(unsigned order, shoal_span_t *out)
{
    return claim(order, 0, out) != 0;
}

unsigned shoal_pool_claim_slots(unsigned max, shoal_span_t *out)
{
    return claim(0, max, out);
}

bool shoal_pool_claim_run(unsigned count, shoal_span_t *out)
{
    return claim(RUN | count, 0, out) != 0;
}

void shoal_pool_release(shoal_superpage_t *sp, unsigned slot, unsigned count)
{
    unoccupy(sp, slots_mask(slot, count));
    if (sp->index < atomic_load_explicit(&claim_hint, memory_order_relaxed))
        atomic_store_explicit(&claim_hint, sp->index, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_releases, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&slots_claimed, count, memory_order_relaxed);
}

void shoal_pool_release_idle(shoal_superpage_t *sp, unsigned slot, unsigned count)
{
    /* Marked as seen free at the last pass: the next one purges them. */
    atomic_fetch_or_explicit(&sp->purge_mark, slots_mask(slot, count), memory_order_relaxed);
    shoal_pool_release(sp, slot, count);
}

bool shoal_pool_grow(shoal_superpage_t *sp, unsigned slot, unsigned count, unsigned new_count)
{
    if (slot + new_count > SHOAL_SP_SLOTS)
        return false;
    uint64_t more = slots_mask(slot + count, new_count - count);
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    do {
        if ((occ & more) != 0)
            return false;
    } while (!occupy(sp, &occ, more));
    uint64_t clean;
    return settle(sp, more, true, &clean) != 0;
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
    } while (!occupy(sp, &occ, got));
    return got;
}

static size_t purge_superpage(size_t i, bool force, bool lazy, bool huge, size_t *waiting)
{
    shoal_superpage_t *sp = sp_table[i];
    uint64_t dirty = atomic_load_explicit(&sp->dirty, memory_order_relaxed);
    uint64_t occ = atomic_load_explicit(&sp->occupied, memory_order_relaxed);
    /* A lazy pass skips the slots MADV_FREE already has; a DONTNEED pass
     * takes them too: they are still charged (they may be resident), and
     * a limit set after a lazy purge needs them out of the account. */
    uint64_t cand = dirty & ~occ;
    if (lazy)
        cand &= ~atomic_load_explicit(&lazy_purged[i], memory_order_relaxed);
    if (huge) {
        /* Purging part of a transparent huge page splits it: only a
         * wholly free 2 MiB half goes, in one piece.  (The lower half
         * holds the header, so it stays.) */
        const uint64_t upper = ~(uint64_t)0 << (SHOAL_SP_SLOTS / 2);
        cand = (occ & upper) == 0 && (cand & upper) != 0 ? upper : 0;
    }
    /* Relaxed: the mark is a hint about age, not a hand-off; a
     * shoal_pool_release_idle that lands between the load and the store
     * only waits one more pass. */
    uint64_t ready = force ? cand : cand & atomic_load_explicit(&sp->purge_mark,
                                                                memory_order_relaxed);
    atomic_store_explicit(&sp->purge_mark, cand & ~ready, memory_order_relaxed);
    *waiting += (size_t)__builtin_popcountll(cand & ~ready);
    return purge_slots(i, ready, lazy);
}

/* Purge the free slots among `ready` of superpage i (purge_lock held):
 * the bytes that left the account or went lazily. */
static size_t purge_slots(size_t i, uint64_t ready, bool lazy)
{
    shoal_superpage_t *sp = sp_table[i];
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
    /* Only the slots this pass made clean leave the account, read from
     * the dirty word as it is now that the slots are ours: `dirty` above
     * may be stale (a claim the limit refused sets a slot's bit and
     * clears it again before it lets the slot go, and the load may have
     * seen the bit), and with HUGE_PAGES `got` is a whole half, clean
     * slots and all.  Uncharging either would let the account drift
     * below what is held, until it wraps and refuses everything. */
    uint64_t was = atomic_fetch_and_explicit(&sp->dirty, ~zeroed, memory_order_relaxed);
    uint64_t cleaned = zeroed & was, lazied = got & ~zeroed & was;
    atomic_fetch_and_explicit(&lazy_purged[i], ~zeroed, memory_order_relaxed);
    atomic_fetch_or_explicit(&lazy_purged[i], lazied, memory_order_relaxed);
    shoal_commit_uncharge((size_t)__builtin_popcountll(cleaned) << SHOAL_SLOT_SHIFT);
    /* The release in unoccupy: the dirty bits above are visible to the
     * next claimer. */
    unoccupy(sp, got);
    return (size_t)__builtin_popcountll(cleaned | lazied) << SHOAL_SLOT_SHIFT;
}

size_t shoal_pool_purge(bool force, size_t *waiting)
{
    /* A forced pass (alloc_collect(true), an allocation at MAX_MEMORY
     * that needs room) promises everything free back, so it waits for a
     * pass under way - which waits for nothing - and then makes its own;
     * a timed one leaves the work to that pass. */
    if (force) {
        shoal_lock(&pass_lock);
    } else if (!shoal_trylock(&pass_lock)) {
        *waiting += 1;          /* someone else's pass; ours comes later */
        return 0;
    }
    bool lazy = purge_is_lazy();
    /* HUGE_PAGES gives back only wholly free upper halves, never a part
     * of a huge page - but a forced pass under MAX_MEMORY (an allocation
     * at the limit, alloc_collect(true)) must free room in the account,
     * and takes every free slot, lower halves too. */
    bool huge = shoal_opt(ALLOC_OPTION_HUGE_PAGES) != 0 &&
                !(force && shoal_opt(ALLOC_OPTION_MAX_MEMORY) != 0);
    size_t n = atomic_load_explicit(&sp_count, memory_order_acquire);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        while (atomic_load_explicit(&forks_waiting, memory_order_relaxed) != 0)
            sched_yield();
        shoal_lock(&purge_lock);
        bytes += purge_superpage(i, force, lazy, huge, waiting);
        shoal_unlock(&purge_lock);
    }
    atomic_fetch_add_explicit(&n_purged_bytes, bytes, memory_order_relaxed);
    shoal_unlock(&pass_lock);
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
    atomic_fetch_add_explicit(&forks_waiting, 1, memory_order_relaxed);
    shoal_lock(&purge_lock);
    atomic_fetch_sub_explicit(&forks_waiting, 1, memory_order_relaxed);
}

void shoal_pool_fork_release(void)
{
    shoal_unlock(&purge_lock);
    shoal_unlock(&grow_lock);
}

void shoal_pool_fork_child(void)
{
    /* A pass of another thread may have been between two superpages:
     * the child has not that thread, and its own passes would wait for
     * it for ever (a forced one) or never run (the timed ones). */
    shoal_unlock(&pass_lock);
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

