/* huge.c - huge blocks: own mappings, a header, and a short cache. */
#include "huge.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include "commit.h"
#include "layout.h"
#include "message.h"
#include "options.h"
#include "purge.h"
#include "sync.h"
#include "../os/os.h"

#define HUGE_CACHE 128                          /* mappings kept for reuse, */
#define HUGE_CACHE_BYTES ((size_t)1 << 30)      /* and their bytes beyond the first, */
#define HUGE_CACHE_FLOOR ((size_t)32 << 20)     /* or, in mappings above */
#define HUGE_BIG ((size_t)8 << 20)              /* this, the live blocks' */
#define HUGE_HEADER 64          /* room for the header before the block */
/* Beyond this, a freed mapping goes back at once until the program has
 * shown it reuses such a size (below). */
#define HUGE_KEEP_UNSEEN ((size_t)32 << 20)

/* A cached mapping, or a piece of one.  A block's header sits at the
 * start of its chunk, so only a piece that starts on a chunk boundary
 * can hold a block (or become a superpage); a block's shed tail
 * (shed_tail) starts on a slot boundary and waits to join it again. */
typedef struct cached_map_s {
    char *base;
    size_t size;
    uint64_t freed_ms;
    char *origin;               /* as the header's (huge.h): NULL, never cut */
    bool purged;                /* a shed tail whose memory went back (evict_oldest) */
} cached_map_t;

static bool is_chunk_start(const char *p)
{
    return ((uintptr_t)p & (SHOAL_SP_SIZE - 1)) == 0;
}

/* What a block's mapping held before it. */
enum mapping_was {
    MAPPING_NEW,        /* nothing: fresh from the OS */
    MAPPING_USED,       /* a block's: bytes of it are resident */
    MAPPING_CUT,        /* the same, the front of a cached mapping (cache_take) */
    MAPPING_SHORT,      /* a cached mapping too small, to grow (cache_take) */
    MAPPING_SHORT_SLOT, /* the same, but the thread's slot's (cache_take) */
};

static shoal_lock_t cache_lock = SHOAL_LOCK_INIT;
static cached_map_t cache[HUGE_CACHE] SHOAL_SELDOM_BSS;   /* 5 KiB: only huge frees write it */
static unsigned cached;

/* The counters change only under cache_lock, so an update is a relaxed
 * load and store, with no locked instruction of its own (a huge
 * malloc+free pair made nine); the statistics read them without the
 * lock. */
static _Atomic size_t live, live_bytes, cached_bytes, cached_maps;
static _Atomic size_t live_peak, live_bytes_peak, cached_peak, cached_bytes_peak;
static _Atomic size_t requests;
/* By size: live blocks whose mapping is at most 4 MiB << i (the last bin
 * takes every bigger one), their bytes, and the most live at once. */
static _Atomic size_t bin_live[SHOAL_HUGE_BINS], bin_bytes[SHOAL_HUGE_BINS];
static _Atomic size_t bin_peak[SHOAL_HUGE_BINS];

static size_t get(_Atomic size_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void set(_Atomic size_t *c, size_t v, _Atomic size_t *peak)
{
    atomic_store_explicit(c, v, memory_order_relaxed);
    if (peak != NULL && v > get(peak))
        atomic_store_explicit(peak, v, memory_order_relaxed);
}

/* *c += d (d may wrap, to subtract), raising *peak if it is given. */
static void add(_Atomic size_t *c, size_t d, _Atomic size_t *peak)
{
    set(c, get(c) + d, peak);
}

/* The bin of a mapping of `size` bytes. */
static unsigned bin_of(size_t size)
{
    unsigned bin = 0;
    while (bin + 1 < SHOAL_HUGE_BINS && size > (SHOAL_HUGE_BIN_MIN << bin))
        bin++;
    return bin;
}

/* A block of `size` mapped bytes starts (+1) or stops (-1) being live. */
static void count_live(int dir, size_t size)
{
    add(&live, (size_t)dir, &live_peak);
    add(&live_bytes, dir > 0 ? size : -size, &live_bytes_peak);
    unsigned bin = bin_of(size);
    add(&bin_live[bin], (size_t)dir, &bin_peak[bin]);
    add(&bin_bytes[bin], dir > 0 ? size : -size, NULL);
}

/* Where the block starts in a mapping, for an alignment. */
static size_t user_offset(size_t align)
{
    return align < HUGE_HEADER ? HUGE_HEADER : align;
}

static shoal_huge_t *header_for(char *user, size_t align)
{
    char *chunk = (char *)((uintptr_t)user & ~(uintptr_t)(SHOAL_SP_SIZE - 1));
    return (shoal_huge_t *)(align >= SHOAL_SP_SIZE ? chunk - SHOAL_SP_SIZE : chunk);
}

/* Cached mappings leave the cache in two steps: out of the array and
 * out of the committed account under cache_lock, then unmapped after
 * it.  A thread that fails at MAX_MEMORY and purges the cache
 * (alloc_generic) either takes the mappings itself or, through the lock,
 * sees the account already lowered by whoever took them, and so finds
 * the room even while the munmaps are still running. */
static void take_out(unsigned i, cached_map_t *out, unsigned *n)
{
    out[(*n)++] = cache[i];
    add(&cached_bytes, -cache[i].size, NULL);
    shoal_commit_uncharge(cache[i].size);
    cache[i] = cache[--cached];
}

static size_t release_taken(const cached_map_t *out, unsigned n)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < n; i++) {
        shoal_os_release(out[i].base, out[i].size);
        bytes += out[i].size;
    }
    return bytes;
}

/* The cached mapping freed longest ago of those at most `bytes` large
 * (`above` false) or larger (true), or -1 (cache_lock held). */
static int oldest_sized(size_t bytes, bool above)
{
    int oldest = -1;
    for (unsigned i = 0; i < cached; i++)
        if ((cache[i].size > bytes) == above &&
            (oldest < 0 || cache[i].freed_ms < cache[oldest].freed_ms))
            oldest = (int)i;
    return oldest;
}

/* The cached mapping freed longest ago (cache_lock held, cached > 0). */
static unsigned oldest_cached(void)
{
    return (unsigned)oldest_sized(0, true);
}

/* Give back the memory of cached mappings, oldest first, until at least
 * `bytes` have gone or none is left (cache_lock held; the caller
 * releases `out`).  A shed tail stays cached, purged, to join its block
 * again: a program that frees a 30 MiB block, makes three 10 MiB ones and
 * then 30 MiB again reuses the first mapping whole, where the second
 * block's tail would otherwise be gone from beside it.  It is purged
 * under the lock: a free that joined it to its block, and the next
 * malloc, could otherwise write there before the purge. */
static void evict_oldest(size_t bytes, cached_map_t *out, unsigned *n)
{
    for (size_t freed = 0; freed < bytes;) {
        int i = -1;
        for (unsigned j = 0; j < cached; j++)
            if (!cache[j].purged && (i < 0 || cache[j].freed_ms < cache[i].freed_ms))
                i = (int)j;
        if (i < 0)
            return;
        freed += cache[i].size;
        if (is_chunk_start(cache[i].base)) {
            take_out((unsigned)i, out, n);
        } else {
            shoal_os_purge(cache[i].base, cache[i].size, false);
            cache[i].purged = true;
        }
    }
}

/* The smallest cached mapping at alignment `align` that holds `bytes`
 * (all of them, `whole`, or more than half: not wasting more than half
 * of it), or -1 (cache_lock held). */
static int smallest_holding(size_t bytes, size_t align, bool whole)
{
    int best = -1;
    for (unsigned i = 0; i < cached; i++) {
        bool holds = whole ? cache[i].size >= bytes
                           : shoal_fits_without_waste(cache[i].size, bytes);
        if (!holds || ((uintptr_t)cache[i].base & (align - 1)) != 0)
            continue;
        if (best < 0 || cache[i].size < cache[best].size)
            best = (int)i;
    }
    return best;
}

/* The largest cached mapping smaller than `bytes` that a miss may grow
 * into a block of that size (shoal_huge_alloc), or -1 (cache_lock held):
 * a whole mapping (never cut: a piece moved away from its neighbours
 * could not join them again), at alignment `align`. */
static int largest_short_of(size_t bytes, size_t align)
{
    int best = -1;
    for (unsigned i = 0; i < cached; i++) {
        if (cache[i].size >= bytes || cache[i].origin != NULL || !is_chunk_start(cache[i].base) ||
            ((uintptr_t)cache[i].base & (align - 1)) != 0)
            continue;
        if (best < 0 || cache[i].size > cache[best].size)
            best = (int)i;
    }
    return best;
}

/* A cached mapping that fits `need` bytes at alignment `align` without
 * wasting more than half of it; else the front of the smallest one that
 * holds it, cut at a chunk boundary, whose rest stays cached (a sort
 * that frees its 30 MiB array and then makes three 10 MiB buffers
 * reuses the array's memory for them, where it mapped all three anew
 * beside it: peak RSS 63 -> 35 MB, glibc 33); or NULL.  Counts the
 * request, and the block as live if it found one.  On a miss, cached
 * mappings go back to the OS, oldest first, until as many bytes as the
 * new one's have: memory that sat in the cache in sizes that did not
 * fit does not stay resident beside the new mapping until the purge
 * delay (the process grows by what it uses, as it would with no
 * cache) - but the largest one that can grow (largest_short_of) is
 * taken to grow into the new block (MAPPING_SHORT), and only the bytes
 * it lacks go back from the others; or, where it is larger, the
 * mapping in the caller's slot, of `slot_short` bytes (MAPPING_SHORT_SLOT,
 * NULL returned: the caller takes it from its slot), as a program that
 * frees its buffer and makes a bigger one would have it. */
static char *cache_take(size_t need, size_t align, size_t slot_short, size_t *size, char **origin,
                        enum mapping_was *was)
{
    cached_map_t out[HUGE_CACHE];
    unsigned n_out = 0;
    size_t front = shoal_align_up(need, SHOAL_SP_SIZE);
    shoal_lock(&cache_lock);
    add(&requests, 1, NULL);
    int best = smallest_holding(need, align, false);
    char *base = NULL;
    if (best >= 0) {
        base = cache[best].base;
        *size = cache[best].size;
        *origin = cache[best].origin;
        *was = MAPPING_USED;
        cache[best] = cache[--cached];
        add(&cached_bytes, -*size, NULL);
        count_live(1, *size);
    } else if ((best = smallest_holding(front + SHOAL_SP_SIZE, align, true)) >= 0) {
        /* The rest keeps its place and its age; it starts on a chunk
         * boundary, as every mapping does, and is at least a chunk. */
        if (cache[best].origin == NULL)
            cache[best].origin = cache[best].base;
        base = cache[best].base;
        *size = front;
        *origin = cache[best].origin;
        *was = MAPPING_CUT;
        cache[best].base += front;
        cache[best].size -= front;
        add(&cached_bytes, -front, NULL);
        count_live(1, front);
    } else if ((best = largest_short_of(need, align)) >= 0 && cache[best].size >= slot_short) {
        base = cache[best].base;
        *size = cache[best].size;
        *origin = NULL;
        *was = MAPPING_SHORT;
        cache[best] = cache[--cached];
        add(&cached_bytes, -*size, NULL);
        count_live(1, *size);
        evict_oldest(need - *size, out, &n_out);
    } else if (slot_short != 0) {
        *was = MAPPING_SHORT_SLOT;
        evict_oldest(need - slot_short, out, &n_out);
    } else {
        evict_oldest(need, out, &n_out);
    }
    set(&cached_maps, cached, NULL);
    shoal_unlock(&cache_lock);
    release_taken(out, n_out);
    return base;
}

/* Bytes the pool made resident afresh, while the cache held mappings,
 * that no cached memory has gone back for yet (cache_lock). */
static size_t pool_grown;

/* Bytes the pool and huge reallocs made resident afresh since the
 * start: a slot's mapping goes once they grew by its size after it was
 * put (slot_yield). */
static _Atomic size_t grown_total;

static char *slot_base(uintptr_t w);
static size_t slot_size(uintptr_t w);
static void unmap(char *base, size_t size);

/* The calling thread's slot (shoal_huge_slot_bind). */
static __thread shoal_huge_slot_t *tl_slot __attribute__((tls_model("initial-exec")));

void shoal_huge_slot_bind(shoal_huge_slot_t *s)
{
    tl_slot = s;
}

/* Whether the holder's turn at its slot may be plain loads and stores
 * (sync.h): only where membarrier(2) offers the barrier a claiming pass
 * needs.  Asked once (MEMBARRIER_CMD_QUERY answers every thread alike,
 * so a thread that asks again finds the same): elsewhere - an old
 * kernel, a sandbox that refuses the call - the holder exchanges and a
 * pass takes with a compare-and-swap, as each may on any platform. */
static _Atomic int slot_turns_known;    /* 0: not asked, 1: turns, 2: exchanges */

/* The first ask, out of line: slot_swap, which the huge malloc and free
 * call each time, needs no frame for it. */
static __attribute__((noinline, cold)) int slot_turns_ask(void)
{
    int k = shoal_os_barrier_offered() ? 1 : 2;
    atomic_store_explicit(&slot_turns_known, k, memory_order_relaxed);
    return k;
}

static inline bool slot_turns(void)
{
    int k = atomic_load_explicit(&slot_turns_known, memory_order_relaxed);
    if (shoal_unlikely(k == 0))
        k = slot_turns_ask();
    return k == 1;
}

/* The holder puts `w` in its slot (0: empties it) and gets the word that
 * was there (0 if a pass took the mapping).  In the holder's turn
 * (sync.h) a plain load and store; where a pass claims the slot, or
 * turns are not to be had, an exchange: a pass takes with a
 * compare-and-swap, and of two atomic read-modify-writes on the word
 * one comes first.  Nothing else runs in the turn: a pass on this
 * thread (a slow path's) never finds the holder in it. */
static uintptr_t slot_swap(shoal_huge_slot_t *s, uintptr_t w)
{
    if (shoal_likely(slot_turns()) && shoal_likely(shoal_holder_enter(&s->turn))) {
        /* Relaxed load: the word is the holder's own put, a pass's mark
         * on it, which carries nothing, or the 0 of a pass that took the
         * mapping - which the turn orders before this load: a take came
         * after the holder's last turn (the pass read busy == 0 after
         * its barrier), and the holder saw steal == 0 only from the
         * pass's release, after the take.  Release store: the header of
         * the mapping put is whole for a pass that takes it (its
         * compare-and-swap acquires). */
        uintptr_t old = atomic_load_explicit(&s->map, memory_order_relaxed);
        atomic_store_explicit(&s->map, w, memory_order_release);
        shoal_holder_leave(&s->turn);
        return old;
    }
    /* Acquire and release, as a pass's take and the put above. */
    return atomic_exchange_explicit(&s->map, w, memory_order_acq_rel);
}

/* The holder empties its slot: the word that was there (slot_swap). */
static uintptr_t slot_empty(shoal_huge_slot_t *s)
{
    uintptr_t w = slot_swap(s, 0);
    atomic_store_explicit(&s->size, 0, memory_order_relaxed);
    return w;
}

/* A slot's mapping, taken from it, leaves for the OS. */
static void slot_unmap(uintptr_t w)
{
    size_t size = slot_size(w);
    shoal_lock(&cache_lock);
    count_live(-1, size);
    shoal_unlock(&cache_lock);
    unmap(slot_base(w), size);
}

/* The growth rule of the shared cache (below), for this thread's slot,
 * whose mapping would otherwise wait for the purge passes while the
 * process grows beside it: `sort -S 12M` frees its 12 MiB buffer into
 * the slot and then makes 9 MiB of 2 MiB blocks.  Only the holder takes
 * from its slot this way, as it does at malloc (slot_swap: a pass may
 * have taken the mapping first). */
static void slot_yield(size_t total)
{
    shoal_huge_slot_t *s = tl_slot;
    if (s == NULL)
        return;
    /* Relaxed: the holder wrote both. */
    size_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
    if (size == 0 || total - s->grown_at < size)
        return;
    uintptr_t w = slot_empty(s);
    if (w != 0)
        slot_unmap(w);
}

void shoal_huge_cache_yield(size_t bytes)
{
    slot_yield(atomic_fetch_add_explicit(&grown_total, bytes, memory_order_relaxed) + bytes);
    if (get(&cached_bytes) == 0)
        return;
    cached_map_t out[HUGE_CACHE];
    unsigned n = 0;
    shoal_lock(&cache_lock);
    /* A mapping goes once the growth it answers for reaches its size:
     * the pool taking 256 KiB does not cost a 40 MiB mapping its reuse,
     * and the process holds at most one mapping's worth more than it
     * would with no cache.  The oldest of those the growth covers: a
     * bigger one freed before them (a sort's 24 MiB array before its
     * 8 MiB buffers) does not keep them resident until its own size
     * has grown. */
    pool_grown += bytes;
    for (int i; (i = oldest_sized(pool_grown, false)) >= 0;) {
        pool_grown -= cache[i].size;
        take_out((unsigned)i, out, &n);
    }
    set(&cached_maps, cached, NULL);
    shoal_unlock(&cache_lock);
    release_taken(out, n);
}

/* Put [base, base + size), a piece of the mapping `origin`, in the
 * shared cache as freed now (cache_lock held; a slot is free). */
static void cache_piece(char *base, size_t size, char *origin)
{
    cache[cached++] = (cached_map_t){ base, size, shoal_os_now_ms(), origin, false };
    add(&cached_bytes, size, &cached_bytes_peak);
    set(&cached_maps, cached, &cached_peak);
}

void *shoal_huge_cache_give_chunk(void)
{
    /* This thread's slot first: the mapping freed last, by this very
     * thread, which now grows the pool beside it.  Only its holder takes
     * from a slot, as a malloc does (slot_swap). */
    shoal_huge_slot_t *s = tl_slot;
    uintptr_t w = 0;
    size_t slot_size = s != NULL ? atomic_load_explicit(&s->size, memory_order_relaxed) : 0;
    char *slot_origin = NULL;
    if (slot_size >= SHOAL_SP_SIZE) {
        w = slot_empty(s);
        if (w != 0)
            slot_origin = ((shoal_huge_t *)slot_base(w))->origin;
    }
    char *chunk = NULL;
    cached_map_t out[1];
    unsigned n_out = 0;
    shoal_lock(&cache_lock);
    if (w != 0) {
        /* From live (a slot's mapping counts so) to the pool, and the
         * rest to the cache; room for it there, as retire makes. */
        count_live(-1, slot_size);
        chunk = slot_base(w);
        if (slot_size > SHOAL_SP_SIZE) {
            if (cached == HUGE_CACHE)
                take_out(oldest_cached(), out, &n_out);
            cache_piece(chunk + SHOAL_SP_SIZE, slot_size - SHOAL_SP_SIZE,
                        slot_origin != NULL ? slot_origin : chunk);
        }
    } else {
        int oldest = -1;
        for (unsigned i = 0; i < cached; i++)
            if (cache[i].size >= SHOAL_SP_SIZE && is_chunk_start(cache[i].base) &&
                (oldest < 0 || cache[i].freed_ms < cache[oldest].freed_ms))
                oldest = (int)i;
        if (oldest >= 0) {
            cached_map_t *c = &cache[oldest];
            chunk = c->base;
            add(&cached_bytes, -SHOAL_SP_SIZE, NULL);
            if (c->origin == NULL)
                c->origin = c->base;
            c->base += SHOAL_SP_SIZE;
            c->size -= SHOAL_SP_SIZE;
            if (c->size == 0)
                *c = cache[--cached];
        }
    }
    set(&cached_maps, cached, NULL);
    shoal_unlock(&cache_lock);
    release_taken(out, n_out);
    return chunk;
}

/* The first `bytes` of a reused mapping must read as zero. */
static __attribute__((noinline)) void zero_front(char *base, size_t bytes)
{
    shoal_os_zero(base, shoal_align_up(bytes, SHOAL_OS_PAGE));
}

/* The bytes of h's mapping past `keep` (a slot boundary) leave it, as a
 * piece of its mapping h->origin, into the cache (room made there as
 * retire makes it). */
static void cache_tail(shoal_huge_t *h, size_t keep)
{
    cached_map_t out[1];
    unsigned n_out = 0;
    shoal_lock(&cache_lock);
    count_live(-1, h->map_size);
    count_live(1, keep);
    if (cached == HUGE_CACHE)
        take_out(oldest_cached(), out, &n_out);
    cache_piece(h->base + keep, h->map_size - keep, h->origin);
    shoal_unlock(&cache_lock);
    release_taken(out, n_out);
    h->map_size = keep;
    h->usable = keep - (size_t)(h->user - h->base);
}

/* A mapping taken back for h, a block that reaches `reach` bytes into
 * it: the bytes past that are dirty from the mapping's last block, and
 * would stay resident, unused, as long as h lives.  They leave the block
 * from the slot after `reach` on, as a piece of the mapping (`origin`),
 * into the cache: resident there until the purge delay, or another miss,
 * gives them back, and joined to the block again when it is freed, so
 * the mapping serves the size it was made for with no fault.  Purged at
 * once, before, a program alternating blocks of 6 and 3 MiB faulted 50
 * times as often as under glibc (154k faults in 200 rounds, 3k), of 12
 * and 7 MiB 42 times, and ran 3-4 times as long.  Where nothing is cached
 * (PURGE_DELAY_MS 0) they go back to the OS, the mapping staying whole.
 * Returns h's user (never NULL, which lets the huge malloc's fast path
 * end in a tail call here, with no frame). */
static __attribute__((noinline, returns_nonnull)) void *shed_tail(shoal_huge_t *h, size_t reach)
{
    size_t keep = shoal_align_up(reach, SHOAL_SLOT_SIZE);
    if (shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) == 0 || keep >= h->map_size) {
        reach = shoal_align_up(reach, SHOAL_OS_PAGE);
        shoal_os_purge(h->base + reach, h->map_size - reach, false);
        return h->user;
    }
    if (h->origin == NULL)
        h->origin = h->base;
    cache_tail(h, keep);
    shoal_purge_note_free();
    return h->user;
}

/* h grows to `size` mapped bytes (SIZE_MAX: h shrinks): it takes back,
 * in place, what it needs of the cached piece of its mapping that starts
 * where it ends, and the rest stays cached.  Its shed tail: left behind
 * by a move, or cut off by a shrink, the tail would never join anything
 * again, so a shrink takes it all.  A cut's rest, which starts on a chunk
 * and can hold blocks: a growth takes whole chunks of it, so that what
 * stays still starts on one, where it used to move h and fault in all
 * it grew by (blocks of 5-11 MiB made in a cached 18 MiB mapping and
 * grown to 19-23 MiB: 2,600-3,300 faults each, 256 now); a shrink leaves
 * it.  Those bytes are charged already. */
static void take_back_tail(shoal_huge_t *h, size_t size)
{
    if (h->origin == NULL)
        return;
    shoal_lock(&cache_lock);
    for (unsigned i = 0; i < cached && h->map_size < size;) {
        char *end = h->base + h->map_size;
        bool rest = is_chunk_start(end);
        if (cache[i].origin != h->origin || cache[i].base != end || (rest && size == SIZE_MAX)) {
            i++;
            continue;
        }
        size_t want = size - h->map_size;
        if (rest)
            want = shoal_align_up(want, SHOAL_SP_SIZE);
        size_t take = want < cache[i].size ? want : cache[i].size;
        count_live(-1, h->map_size);
        h->map_size += take;
        count_live(1, h->map_size);
        add(&cached_bytes, -take, NULL);
        cache[i].base += take;
        cache[i].size -= take;
        if (cache[i].size == 0)
            cache[i] = cache[--cached];
        i = 0;                  /* a piece after it may follow */
    }
    set(&cached_maps, cached, NULL);
    h->usable = h->map_size - (size_t)(h->user - h->base);
    shoal_unlock(&cache_lock);
}

/* The last two huge blocks the calling thread was handed other than by
 * a malloc from its slot (whose mapping it had freed: memory reused,
 * not grown; a calloc there, which writes the header anew in map_block,
 * counts): their mappings' bases, and the size of the last one's.  A
 * table that grows by steps - a hash table's resize makes the bigger
 * table, moves the entries, frees the smaller one - never takes the
 * smaller mapping back, and each step's table, kept, stayed resident
 * beside the next until the purge delay.  So a mapping freed by its
 * thread once it was outgrown - the block made just before the last
 * one, and smaller - goes back at once too, whatever its size, with the
 * same learning: a program that then maps one it would have served
 * keeps that size from then on.  (CPython building a dict of 2 M keys:
 * peak RSS 420 -> 390 MB, glibc 387.)  Only that block: a program that
 * frees a burst of blocks of mixed sizes (bench/page_faults) makes them
 * again, and given back whenever a bigger one was made last they cost
 * it twice the faults (197 -> 376 thousand). */
static __thread char *tl_made_base[2] __attribute__((tls_model("initial-exec")));
static __thread size_t tl_made_size __attribute__((tls_model("initial-exec")));

/* A block of n bytes in the mapping at base.  A mapping used before
 * holds resident bytes: a block that needs `zero` has them purged, and
 * one that leaves more than an eighth of the mapping unused sheds that
 * part.  A cut front's unused part (less than a chunk) stays up to a
 * quarter of it, beyond which it is shed too: the block keeps what it
 * may grow into by realloc in place without holding much idle. */
static void *hand_out(shoal_huge_t *h, size_t align, size_t n, enum mapping_was was);

static void *map_block(char *base, size_t size, char *origin, size_t align, size_t n, bool zero,
                       enum mapping_was was)
{
    size_t off = user_offset(align);
    if (was != MAPPING_NEW && zero)
        zero_front(base, off + n);      /* the header's page too: it is written after */
    shoal_huge_t *h = header_for(base + off, align);
    h->base = base;
    h->map_size = size;
    h->origin = origin;
    h->usable = size - off;
    tl_made_base[0] = tl_made_base[1];
    tl_made_base[1] = base;
    tl_made_size = size;
    return hand_out(h, align, n, was);
}

/* The rest of map_block, for a header that holds the block's mapping
 * already: a slot's, which its last block left as it was made (the
 * slot takes only mappings that nothing was cut from, at the natural
 * alignment), but for the user pointer, which its free cleared, and
 * the chunk map's mark, which the free took away. */
static inline __attribute__((always_inline)) void *hand_out(shoal_huge_t *h, size_t align,
                                                            size_t n, enum mapping_was was)
{
    size_t off = user_offset(align), size = h->map_size;
    char *user = h->base + off;
    h->user = user;
    shoal_chunk_set(user, align >= SHOAL_SP_SIZE ? SHOAL_CHUNK_HUGE_BEHIND : SHOAL_CHUNK_HUGE);
    size_t unused = size - (off + n);
    if (was != MAPPING_NEW && unused > size >> (was == MAPPING_CUT ? 2 : 3))
        return shed_tail(h, off + n);
    return user;
}

void shoal_huge_mark_sampled(shoal_huge_t *h, bool sampled)
{
    enum shoal_chunk_kind k = shoal_chunk_base_kind(shoal_chunk_of(h->user));
    shoal_chunk_set(h->user, sampled ? (enum shoal_chunk_kind)(k | SHOAL_CHUNK_SAMPLED) : k);
}

/* Map `size` bytes at `align` for a huge block, charged to the committed
 * account; NULL with errno ENOMEM when the account or the OS refuses.
 * With HUGE_PAGES, transparent huge pages as for a superpage: the
 * mapping keeps the hint when it grows, moves (mremap carries it) or is
 * cut for smaller blocks, and when the pool grows into it. */
static char *map_new(size_t size, size_t align)
{
    char *base = NULL;
    if (shoal_commit_charge_ahead(size)) {
        base = shoal_chunk_reserve(size, align, SHOAL_OS_CHARGED);
        shoal_commit_settle(size, base != NULL);
    }
    if (base != NULL && shoal_opt(ALLOC_OPTION_HUGE_PAGES))
        shoal_os_huge_hint(base, size);
    if (base == NULL) {
        if (shoal_opt(ALLOC_OPTION_VERBOSE))
            shoal_warning("no memory for a huge block of %zu bytes (%zu committed, MAX_MEMORY %ld)",
                          size, shoal_commit_charged(), shoal_opt(ALLOC_OPTION_MAX_MEMORY));
        errno = ENOMEM;
    }
    return base;
}

/* Resize the mapping at old_base from `old` to `size` bytes: in place,
 * or, growing, by moving its pages to a new reservation aligned to
 * base_align (shoal's account has the bytes already).  The kernel unmaps
 * the target first and then charges the move the new size: a charge
 * refused there would leave the target's addresses free for any
 * thread's mmap, where the failure path below unmaps them.  So the
 * target is charged whole, as the block will be: it is refused up front
 * if the kernel would refuse the move, and the move then takes the
 * charge the unmap gave back (refused after all only under strict
 * overcommit, if other processes took the headroom in between).  `user`
 * is a live block in the mapping whose chunk tag moves with it, or NULL
 * (a cached mapping, untagged).  The new base, or NULL with the mapping
 * as it was. */
static char *remap(char *old_base, size_t old, size_t size, size_t base_align, char *user)
{
    char *base = shoal_os_remap(old_base, old, size, NULL);
    if (base != NULL || size < old)
        return base;
    char *target = shoal_chunk_reserve(size, base_align, SHOAL_OS_CHARGED);
    if (target == NULL)
        return NULL;
    /* The old chunk is untagged before the move, not after: once the
     * pages have moved, the kernel may give the old addresses to another
     * thread's mmap at once, and that thread tags the chunk for a block
     * of its own, which an untagging after would take from it (its free
     * or usable_size would then find a pointer "not allocated by
     * shoal").  Meanwhile the mapping is the caller's alone: no other
     * thread may touch a block during its realloc, nor a cached mapping
     * taken out of the cache. */
    enum shoal_chunk_kind k = user != NULL ? shoal_chunk_of(user) : SHOAL_CHUNK_NONE;
    if (user != NULL)
        shoal_chunk_set(user, SHOAL_CHUNK_NONE);
    base = shoal_os_remap(old_base, old, size, target);
    if (base == NULL) {
        if (user != NULL)
            shoal_chunk_set(user, k);   /* it stays where it was */
        shoal_os_release(target, size);
    }
    return base;
}

/* Unmap a huge block's mapping and take it out of the account. */
static void unmap(char *base, size_t size)
{
    shoal_os_release(base, size);
    shoal_commit_uncharge(size);
}

/* Big freed mappings.  A big block is often made once (a buffer for one
 * request, a file read whole): kept for reuse, it stays resident for a
 * delay or two with a purger thread, and where none runs (a
 * single-threaded program runs its passes on its own slow paths) for as
 * long as the program then sleeps or only reuses what it has.  So a
 * freed mapping above HUGE_KEEP_UNSEEN goes back at once, as glibc gives
 * back every block above its mmap threshold (at most 32 MiB once it
 * grew), jemalloc every one above 8 MiB and mimalloc from 32 MiB, until
 * the program maps one that such a mapping would have served: from then
 * on mappings up to that size are kept for reuse like the smaller ones (a
 * cycle of 64 MiB blocks maps twice, then reuses).  Relaxed: two sizes,
 * hints. */
static _Atomic size_t given_back_size, reused_size;

/* Whether a freed mapping of `size` at `base` (freed by its thread:
 * the slot's holder, or free) goes back to the OS now. */
static bool give_back_now(const char *base, size_t size)
{
    return (size > HUGE_KEEP_UNSEEN || (base == tl_made_base[0] && size < tl_made_size)) &&
           size > atomic_load_explicit(&reused_size, memory_order_relaxed) &&
           shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) > 0;
}

/* A new mapping of `size` is made: had one given back served it? */
static void note_mapped(size_t size)
{
    size_t back = atomic_load_explicit(&given_back_size, memory_order_relaxed);
    if (shoal_fits_without_waste(back, size) &&
        back > atomic_load_explicit(&reused_size, memory_order_relaxed))
        atomic_store_explicit(&reused_size, back, memory_order_relaxed);
}

/* The size of the calling thread's slot mapping where a miss for
 * `need` bytes at base alignment `align` may grow it (it is smaller),
 * else 0.  Relaxed: the holder wrote both, and a pass that takes the
 * mapping meanwhile leaves slot_take_short nothing to take. */
static size_t slot_short_of(size_t need, size_t align)
{
    shoal_huge_slot_t *s = tl_slot;
    if (s == NULL)
        return 0;
    size_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
    uintptr_t w = atomic_load_explicit(&s->map, memory_order_relaxed);
    if (size == 0 || size >= need || w == 0 || w == SHOAL_HUGE_SLOT_CLOSED ||
        ((uintptr_t)slot_base(w) & (align - 1)) != 0)
        return 0;
    return size;
}

/* The holder takes its slot's mapping to grow it: its base and, in
 * *size, its size; NULL if a pass took it first.  It stays counted
 * live, as a slot's mapping is. */
static char *slot_take_short(size_t *size)
{
    shoal_huge_slot_t *s = tl_slot;
    uintptr_t w = slot_empty(s);
    if (w == 0)
        return NULL;
    *size = slot_size(w);
    return slot_base(w);
}

/* A block of n bytes (`size` mapped) in the cached mapping of `got`
 * bytes at base, too small for it (cache_take, MAPPING_SHORT, counted
 * live at `got`): the mapping grows, in place or moved with its pages,
 * so that only the bytes it lacks are new to the process - a random
 * mix of 2-40 MiB blocks made anew what did not fit, and faulted it all
 * in.  The pages it had are resident: zeroed where asked (the rest is
 * new, and zero).  Where it cannot grow (MAX_MEMORY, the kernel), it
 * goes back to the OS, and NULL says the block needs a mapping of its
 * own. */
static void *grow_short(char *base, size_t got, size_t size, size_t base_align, size_t align,
                        size_t n, bool zero)
{
    char *grown = NULL;
    if (shoal_commit_charge_ahead(size - got)) {
        grown = remap(base, got, size, base_align, NULL);
        shoal_commit_settle(size - got, grown != NULL);
    }
    shoal_lock(&cache_lock);
    count_live(-1, got);
    if (grown != NULL)
        count_live(1, size);
    shoal_unlock(&cache_lock);
    if (grown == NULL) {
        unmap(base, got);
        return NULL;
    }
    note_mapped(size);
    if (zero)
        zero_front(grown, got < user_offset(align) + n ? got : user_offset(align) + n);
    if (shoal_opt(ALLOC_OPTION_PREFAULT))
        shoal_os_prefault(grown + got, size - got);
    return map_block(grown, size, NULL, align, n, false, MAPPING_NEW);
}

void *shoal_huge_alloc(size_t n, size_t align, bool zero)
{
    if (align < SHOAL_ALIGN)
        align = SHOAL_ALIGN;
    if (n == 0)
        n = 1;          /* a block at the very end of its mapping would tag
                           the chunk after it, which is not ours */
    size_t off = user_offset(align);
    if (n > SHOAL_MAX_REQUEST - off - SHOAL_SLOT_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t size = shoal_align_up(off + n, SHOAL_SLOT_SIZE);
    size_t base_align = align > SHOAL_SP_SIZE ? align : SHOAL_SP_SIZE;
    size_t got;
    char *origin;
    enum mapping_was was = MAPPING_NEW;
    char *base = cache_take(size, base_align, slot_short_of(size, base_align), &got, &origin, &was);
    if (was == MAPPING_SHORT_SLOT)
        base = slot_take_short(&got);
    if (base != NULL && (was == MAPPING_SHORT || was == MAPPING_SHORT_SLOT)) {
        void *p = grow_short(base, got, size, base_align, align, n, zero);
        if (p != NULL)
            return p;
    } else if (base != NULL) {
        return map_block(base, got, origin, align, n, zero, was);
    }
    base = map_new(size, base_align);
    if (base == NULL)
        return NULL;
    note_mapped(size);
    if (shoal_opt(ALLOC_OPTION_PREFAULT))
        shoal_os_prefault(base, size);
    shoal_lock(&cache_lock);
    count_live(1, size);
    shoal_unlock(&cache_lock);
    return map_block(base, size, NULL, align, n, false, MAPPING_NEW);
}

shoal_huge_t *shoal_huge_of(const void *p, enum shoal_chunk_kind k)
{
    char *chunk = (char *)((uintptr_t)p & ~(uintptr_t)(SHOAL_SP_SIZE - 1));
    shoal_huge_t *h = (shoal_huge_t *)(shoal_chunk_base_kind(k) == SHOAL_CHUNK_HUGE_BEHIND
                                           ? chunk - SHOAL_SP_SIZE
                                           : chunk);
    return h->user == p ? h : NULL;
}

/* A huge block stops being one: its chunk untagged, its header marked
 * free; the mapping stays. */
static void unlink_block(shoal_huge_t *h)
{
    shoal_chunk_set(h->user, SHOAL_CHUNK_NONE);
    h->user = NULL;
}

/* The bytes the cache may hold in mappings above HUGE_BIG (cache_lock):
 * as many as the huge blocks still live, and at least HUGE_CACHE_FLOOR.
 * A server that cycles big buffers keeps as many as it has in use; a
 * program that ends a phase and frees its big blocks all at once keeps
 * the last 32 MiB of them, not all: what the next phase does not reuse
 * would stay resident, beside whatever it makes resident (a database
 * backend's sort, whose 85 MiB of 8 and 24 MiB blocks then waited while
 * the next query read 45 MiB of shared buffers), until the purge delay -
 * or, in a program that sleeps or no longer calls the allocator's slow
 * paths, until it wakes.  As jemalloc gives back every block above
 * 8 MiB at its free, and keeps smaller ones: those are the sizes a
 * program cycles by the hundred (a burst of 2-8 MiB buffers freed and
 * made again 50 ms later maps none anew), where a block above 8 MiB
 * costs its page faults whatever the cache does. */
static size_t budget(void)
{
    size_t b = get(&live_bytes);
    return b < HUGE_CACHE_FLOOR ? HUGE_CACHE_FLOOR : b;
}

/* The cached pieces of the mapping `origin` that end where [*base,
 * *base + *size) starts or start where it ends join it (cache_lock
 * held): a mapping cut for a smaller block (cache_take) is whole again
 * once the block is freed, and serves the size it was made for with no
 * new mapping and no fault.  A piece below joins only if it starts on a
 * chunk: a live block's shed tail joined to a freed piece above it would
 * make one that starts mid-chunk, which nothing can use until that block
 * is freed (its free joins the tail, and the piece, from below).  Only pieces of one mapping: two mappings
 * the kernel placed side by side stay two, each going back to the OS
 * on its own (shoal_huge_cache_yield gives back the mappings that the
 * growth it answers for covers, one by one). */
static void join_neighbours(char **base, size_t *size, char *origin)
{
    for (unsigned i = 0; origin != NULL && i < cached;) {
        if (cache[i].origin != origin) {
            i++;
            continue;
        }
        if (cache[i].base + cache[i].size == *base && is_chunk_start(cache[i].base)) {
            *base = cache[i].base;
        } else if (*base + *size != cache[i].base) {
            i++;
            continue;
        }
        *size += cache[i].size;
        add(&cached_bytes, -cache[i].size, NULL);
        cache[i] = cache[--cached];
        i = 0;
    }
}

/* A freed block's mapping: into the cache, or unmapped. */
static void retire(char *base, size_t size, char *origin)
{
    bool back = give_back_now(base, size);
    bool keep = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) != 0 && !back;
    cached_map_t evicted[HUGE_CACHE];
    unsigned n_evicted = 0;
    shoal_lock(&cache_lock);
    count_live(-1, size);
    if (keep) {
        join_neighbours(&base, &size, origin);
        /* Full, or over the byte limit: the oldest go; over the budget,
         * the oldest of those above HUGE_BIG.  (The new one is always
         * kept, so a cycle of the same size never maps, whatever its
         * size.) */
        while (cached == HUGE_CACHE ||
               (cached != 0 && get(&cached_bytes) + size > HUGE_CACHE_BYTES))
            take_out(oldest_cached(), evicted, &n_evicted);
        for (int i; get(&cached_bytes) + size > budget() &&
                    (i = oldest_sized(HUGE_BIG, true)) >= 0;)
            take_out((unsigned)i, evicted, &n_evicted);
        if (cached == 0)
            pool_grown = 0;     /* growth while it was empty is owed by nothing */
        cache[cached++] = (cached_map_t){ base, size, shoal_os_now_ms(), origin, false };
        add(&cached_bytes, size, &cached_bytes_peak);
        set(&cached_maps, cached, &cached_peak);
    }
    shoal_unlock(&cache_lock);
    if (!keep) {
        if (back)
            atomic_store_explicit(&given_back_size, size, memory_order_relaxed);
        unmap(base, size);
        return;
    }
    release_taken(evicted, n_evicted);
    shoal_purge_note_free();
}

void shoal_huge_free(shoal_huge_t *h)
{
    char *base = h->base, *origin = h->origin;
    size_t size = h->map_size;
    unlink_block(h);
    retire(base, size, origin);
}

/* ---- a thread's slot -------------------------------------------------- *
 *
 * Ownership: the mapping in a slot belongs to whoever moves `map` from
 * its value to 0 - the holder in slot_swap (in its turn, or with an
 * exchange), or a pass's compare-exchange, which the turn keeps apart
 * from the holder's plain moves - and only the holder stores a mapping
 * in.  The holder's stores are releases and a pass's take an acquire,
 * so the pass finds the header as the holder left it; a pass's mark is
 * a read-modify-write, which continues the release sequence of the
 * store it marks (a plain store of the mark would break it).  A block in a slot stays counted live in the shared counters (so
 * put and take touch none of them); its taker by a pass or a drain
 * uncounts it, after the move, so a reader that sees the slot full has
 * the block in the live figures it read before (shoal_huge_slot_stats). */

static char *slot_base(uintptr_t w)
{
    return (char *)(w & ~(uintptr_t)(SHOAL_SP_SIZE - 1));
}

/* The size of the mapping a slot's word names, from its header. */
static size_t slot_size(uintptr_t w)
{
    return ((shoal_huge_t *)slot_base(w))->map_size;
}

/* The mapping a slot's mapping was cut from, from its header. */
static char *slot_origin(uintptr_t w)
{
    return ((shoal_huge_t *)slot_base(w))->origin;
}

void *shoal_huge_slot_take(shoal_huge_slot_t *s, size_t n, bool zero)
{
    /* Relaxed: only the holder writes `size`, and this is the holder. */
    size_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
    if (n > size)
        return NULL;            /* also an empty slot (0), and no overflow below */
    size_t need = shoal_align_up(user_offset(SHOAL_ALIGN) + n, SHOAL_SLOT_SIZE);
    if (!shoal_fits_without_waste(size, need)) {
        /* Too big to serve n whole: to the shared cache, where the
         * slow path cuts the block's front from it. */
        shoal_huge_slot_drain(s);
        return NULL;
    }
    uintptr_t w = slot_empty(s);
    if (w == 0)
        return NULL;            /* a purge pass took it */
    shoal_count(&s->requests, 1);
    /* Zeroing takes the header's page with it: that path writes the
     * header whole again. */
    if (zero)
        return map_block(slot_base(w), size, NULL, SHOAL_ALIGN, n, true, MAPPING_USED);
    return hand_out((shoal_huge_t *)slot_base(w), SHOAL_ALIGN, n, MAPPING_USED);
}

bool shoal_huge_slot_put(shoal_huge_slot_t *s, shoal_huge_t *h)
{
    /* A piece of a cut mapping goes to the shared cache, to join the
     * rest of it there. */
    if (h->user != h->base + user_offset(SHOAL_ALIGN) || h->origin != NULL ||
        shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) == 0 || give_back_now(h->base, h->map_size))
        return false;
    char *base = h->base;
    /* Relaxed: a pass may only mark or empty the slot meanwhile, which
     * slot_swap below finds. */
    uintptr_t old = atomic_load_explicit(&s->map, memory_order_relaxed);
    if (old == SHOAL_HUGE_SLOT_CLOSED)
        return false;
    atomic_store_explicit(&s->size, h->map_size, memory_order_relaxed);
    s->grown_at = atomic_load_explicit(&grown_total, memory_order_relaxed);
    unlink_block(h);
    s->puts++;
    uintptr_t w = (uintptr_t)base | ((s->puts << 1) & (SHOAL_SP_SIZE - 2));
    if (old == 0) {
        /* Empty stays empty but for us: only the holder puts.  Release:
         * the header (unlink_block above) is whole for whoever takes it. */
        atomic_store_explicit(&s->map, w, memory_order_release);
    } else {
        /* The newest mapping is the likeliest to serve the next malloc:
         * it takes the place of the one there, which goes to the shared
         * cache (unless a pass took it meanwhile). */
        old = slot_swap(s, w);
        if (old != 0)
            retire(slot_base(old), slot_size(old), slot_origin(old));
    }
    shoal_purge_note_waiting();         /* a pass will come for it */
    return true;
}

void shoal_huge_slot_drain(shoal_huge_slot_t *s)
{
    /* Relaxed: only the holder closes a slot, and this is the holder. */
    if (atomic_load_explicit(&s->map, memory_order_relaxed) == SHOAL_HUGE_SLOT_CLOSED)
        return;
    uintptr_t w = slot_empty(s);
    if (w != 0)
        retire(slot_base(w), slot_size(w), slot_origin(w));
}

void shoal_huge_slot_close(shoal_huge_slot_t *s, bool closed)
{
    shoal_huge_slot_drain(s);
    /* Relaxed: a pass reads only to skip a closed or empty slot, and
     * only the holder puts. */
    atomic_store_explicit(&s->map, closed ? SHOAL_HUGE_SLOT_CLOSED : 0, memory_order_relaxed);
}

bool shoal_huge_slot_age(shoal_huge_slot_t *s, bool force, size_t *waiting)
{
    uintptr_t w = atomic_load_explicit(&s->map, memory_order_relaxed);
    if (w == 0 || w == SHOAL_HUGE_SLOT_CLOSED ||
        (!force && shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) < 0))
        return false;
    if (!force && (w & 1) == 0) {
        /* Marked for the next pass.  Relaxed: the mark carries nothing,
         * and a failure means the holder took the mapping or put another
         * (the count in `map` tells them apart), which this pass leaves.
         * A holder's plain store in its turn may overwrite the mark: it
         * took the mapping, or put another. */
        atomic_compare_exchange_strong_explicit(&s->map, &w, w | 1, memory_order_relaxed,
                                                memory_order_relaxed);
        (*waiting)++;
        return false;
    }
    if (s == tl_slot) {
        /* This thread holds the slot, and is not in its turn. */
        w = slot_empty(s);
        if (w != 0)
            slot_unmap(w);
        return false;
    }
    if (!slot_turns()) {
        /* The holder exchanges: a compare-and-swap against it.  Acquire,
         * paired with the put's release: the header is whole. */
        if (atomic_compare_exchange_strong_explicit(&s->map, &w, 0, memory_order_acquire,
                                                    memory_order_relaxed))
            slot_unmap(w);
        else
            (*waiting)++;
        return false;
    }
    shoal_claimer_raise(&s->turn);
    return true;
}

void shoal_huge_slot_fork_child(shoal_huge_slot_t *s, bool ours)
{
    /* The claim of a pass that the fork interrupted has no claimer
     * left; a holder that was in its turn in the parent has no thread
     * left either, unless it is this one (a fork from a signal handler
     * that interrupted the turn, which goes on when the handler
     * returns). */
    atomic_store_explicit(&s->turn.steal, 0, memory_order_relaxed);
    if (!ours)
        atomic_store_explicit(&s->turn.busy, 0, memory_order_relaxed);
}

void shoal_huge_slot_take_claimed(shoal_huge_slot_t *s, bool force, bool fenced,
                                  size_t *waiting)
{
    if (!shoal_claimer_raised(&s->turn))
        return;
    uintptr_t w = atomic_load_explicit(&s->map, memory_order_relaxed);
    /* Still marked (the holder neither took nor put since the pass
     * before), or any mapping for a forced pass.  Acquire, paired with
     * the put's release: the header is whole. */
    bool took = shoal_claimer_may_take(&s->turn, fenced) && w != 0 &&
                w != SHOAL_HUGE_SLOT_CLOSED && (force || (w & 1) != 0) &&
                atomic_compare_exchange_strong_explicit(&s->map, &w, 0, memory_order_acquire,
                                                        memory_order_relaxed);
    shoal_claimer_release(&s->turn);
    if (!took) {
        if (fenced)
            (*waiting)++;       /* the holder was at it: the next pass */
        return;
    }
    slot_unmap(w);
}

/* Whether a block may start `off` bytes into a mapping: a block of any
 * alignment starts a power of two from HUGE_HEADER on into it
 * (user_offset). */
static bool start_offset(uintptr_t off)
{
    return off >= HUGE_HEADER && (off & (off - 1)) == 0;
}

/* Where p lies in the freed mapping [base, base + size), which may be
 * pieces joined (join_neighbours).  A block started a power of two from
 * HUGE_HEADER on into a mapping or a piece, each starting on a chunk
 * boundary (a block aligned to 4 MiB or more at a chunk boundary past
 * its piece's start); a shed tail (which starts mid-chunk) held none in
 * the chunk it starts in. */
static enum shoal_huge_freed freed_place(uintptr_t base, size_t size, const void *p)
{
    uintptr_t off = (uintptr_t)p - base;
    if (base == 0 || off >= size)
        return SHOAL_HUGE_NOT_FREED;
    uintptr_t in_chunk = (uintptr_t)p & (SHOAL_SP_SIZE - 1);
    bool chunk_inside = (uintptr_t)p - in_chunk >= base;
    bool aligned_start = in_chunk == 0 && (uintptr_t)p > base;
    return (is_chunk_start((const char *)base) && start_offset(off)) ||
                   (chunk_inside && (start_offset(in_chunk) || aligned_start))
               ? SHOAL_HUGE_FREED_START
               : SHOAL_HUGE_FREED_INSIDE;
}

enum shoal_huge_freed shoal_huge_slot_holds(shoal_huge_slot_t *s, const void *p)
{
    /* In integers: a closed slot's word is no mapping's.  Relaxed: only
     * the addresses are compared, nothing behind them is read. */
    uintptr_t base = atomic_load_explicit(&s->map, memory_order_relaxed) &
                     ~(uintptr_t)(SHOAL_SP_SIZE - 1);
    return freed_place(base, atomic_load_explicit(&s->size, memory_order_relaxed), p);
}

void shoal_huge_slot_stats(shoal_huge_slot_t *s, shoal_huge_stats_t *st)
{
    st->requests += shoal_counter_read(&s->requests);
    /* Acquire, paired with the put's release: `size`, stored before it,
     * is the mapping's (or, read while it moved, caught below). */
    uintptr_t w = atomic_load_explicit(&s->map, memory_order_acquire);
    if (w == 0 || w == SHOAL_HUGE_SLOT_CLOSED)
        return;
    size_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
    unsigned bin = bin_of(size);
    if (st->live == 0 || st->live_bytes < size || st->bin_live[bin] == 0)
        return;                 /* read while it moved: leave the figures as they are */
    st->live--;
    st->live_bytes -= size;
    st->bin_live[bin]--;
    st->bin_bytes[bin] -= size;
    st->cached++;
    st->cached_bytes += size;
}

enum shoal_huge_freed shoal_huge_was_freed(const void *p)
{
    enum shoal_huge_freed place = SHOAL_HUGE_NOT_FREED;
    shoal_lock(&cache_lock);
    for (unsigned i = 0; i < cached && place == SHOAL_HUGE_NOT_FREED; i++)
        place = freed_place((uintptr_t)cache[i].base, cache[i].size, p);
    shoal_unlock(&cache_lock);
    return place;
}

const shoal_huge_t *shoal_huge_containing(const void *p)
{
    uintptr_t chunk = (uintptr_t)p >> SHOAL_SP_SHIFT;
    for (uintptr_t i = 0; i < 4096 && i <= chunk; i++) {
        const char *c = (const char *)((chunk - i) << SHOAL_SP_SHIFT);
        enum shoal_chunk_kind k = shoal_chunk_base_kind(shoal_chunk_of(c));
        if (k == SHOAL_CHUNK_SUPERPAGE)
            return NULL;                /* the pool's: no huge block reaches over it */
        if (k != SHOAL_CHUNK_HUGE && k != SHOAL_CHUNK_HUGE_BEHIND)
            continue;
        const shoal_huge_t *h =
            (const shoal_huge_t *)(k == SHOAL_CHUNK_HUGE_BEHIND ? c - SHOAL_SP_SIZE : c);
        return (const char *)p >= h->user && (const char *)p < h->user + h->usable ? h : NULL;
    }
    return NULL;
}

bool shoal_huge_size_matches(const shoal_huge_t *h, size_t n)
{
    /* The block's own offset, not its alignment's: realloc keeps an
     * aligned block where it was in its mapping, for any later size. */
    size_t off = (size_t)(h->user - h->base);
    if (n == 0)
        n = 1;                  /* as shoal_huge_alloc serves it */
    return n <= h->usable &&
           shoal_fits_without_waste(h->map_size, shoal_align_up(off + n, SHOAL_SLOT_SIZE));
}

/* realloc could not grow h, whose mapping was `had` bytes: what
 * take_back_tail took for the growth goes back to the cache, and the
 * block stays as it was - its usable size, and the size free_sized
 * takes (a 10 MiB block cut from a cached 128 MiB mapping, asked to grow
 * to 2^62 bytes, kept the whole mapping, and free_sized(p, 10 MiB)
 * called the size wrong).  NULL with ENOMEM. */
static void *grow_failed(shoal_huge_t *h, size_t had)
{
    if (h->map_size > had)
        cache_tail(h, had);
    errno = ENOMEM;
    return NULL;
}

void *shoal_huge_realloc(shoal_huge_t *h, size_t n)
{
    size_t off = (size_t)(h->user - h->base);
    size_t align = off == HUGE_HEADER ? SHOAL_ALIGN : off;
    if (n > SHOAL_MAX_REQUEST - off - SHOAL_SLOT_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t size = shoal_align_up(off + n, SHOAL_SLOT_SIZE);
    size_t had = h->map_size;
    if (size > had)
        take_back_tail(h, size);
    else if (!shoal_fits_without_waste(had, size))
        take_back_tail(h, SIZE_MAX);    /* all of it: the shrink unmaps it with the rest */
    size_t old = h->map_size;
    char *old_base = h->base, *origin = h->origin;     /* h lives in the mapping: gone once it moves */
    if (shoal_fits_without_waste(old, size))
        return h->user;
    /* The account holds the larger of the two sizes while the mapping
     * changes, and the new size after. */
    if (size > old && !shoal_commit_charge_ahead(size - old))
        return grow_failed(h, had);
    size_t base_align = align > SHOAL_SP_SIZE ? align : SHOAL_SP_SIZE;
    char *base = remap(old_base, old, size, base_align, old_base + off);
    if (size > old) {
        shoal_commit_settle(size - old, base != NULL);
        if (base == NULL)
            return grow_failed(h, had);
    }
    if (base == NULL) {
        /* A shrink the kernel refused (the tail's unmap would split a
         * mapping past vm.max_map_count): the bytes past the new size
         * stay mapped, but leave the block as a cut's rest does, a piece
         * of its mapping in the cache, which joins it again at its free.
         * The block is then what the shrink would have made, for
         * malloc_usable_size and for the size free_sized takes. */
        if (h->origin == NULL)
            h->origin = h->base;
        cache_tail(h, size);
        shoal_purge_note_free();
        return h->user;
    }
    if (size < old)
        shoal_commit_uncharge(old - size);
    shoal_lock(&cache_lock);
    count_live(-1, old);
    count_live(1, size);
    shoal_unlock(&cache_lock);
    /* A block grown is the process grown, as the pool's fresh slots are:
     * an array doubled by realloc while the mappings of a phase before
     * wait in the cache would otherwise hold both (a PostgreSQL sort's
     * tuple array, 1.5 to 24 MiB, beside the last sort's). */
    if (size > old)
        shoal_huge_cache_yield(size - old);
    return map_block(base, size, base == old_base ? origin : NULL, align, n, false, MAPPING_NEW);
}

size_t shoal_huge_purge(bool force, size_t *waiting)
{
    cached_map_t out[HUGE_CACHE];
    unsigned n = 0;
    uint64_t now = shoal_os_now_ms();
    long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
    /* A forced purge takes the lock even when the cache looks empty: it
     * is what orders the caller after a concurrent purge's uncounting. */
    if (!force && get(&cached_bytes) == 0)
        return 0;
    shoal_lock(&cache_lock);
    for (unsigned i = 0; i < cached;) {
        if (force || (delay >= 0 && now - cache[i].freed_ms >= (uint64_t)delay))
            take_out(i, out, &n);
        else
            i++;
    }
    set(&cached_maps, cached, NULL);
    *waiting += cached;
    shoal_unlock(&cache_lock);
    return release_taken(out, n);
}

void shoal_huge_fork_prepare(void)
{
    shoal_lock(&cache_lock);
}

void shoal_huge_fork_release(void)
{
    shoal_unlock(&cache_lock);
}

void shoal_huge_stats(shoal_huge_stats_t *st)
{
    st->requests = get(&requests);
    st->live = get(&live);
    st->live_bytes = get(&live_bytes);
    st->cached_bytes = get(&cached_bytes);
    st->cached = get(&cached_maps);
    st->live_peak = get(&live_peak);
    st->live_bytes_peak = get(&live_bytes_peak);
    st->cached_peak = get(&cached_peak);
    st->cached_bytes_peak = get(&cached_bytes_peak);
    for (unsigned i = 0; i < SHOAL_HUGE_BINS; i++) {
        st->bin_live[i] = get(&bin_live[i]);
        st->bin_bytes[i] = get(&bin_bytes[i]);
        st->bin_peak[i] = get(&bin_peak[i]);
    }
}
