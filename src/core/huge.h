/* huge.h - blocks above SHOAL_LARGE_MAX, each in a mapping of its own.
 *
 * The mapping starts at a 4 MiB boundary B.  For an alignment below 4 MiB
 * the block starts at B + max(64, alignment) and a header at B describes
 * it; for a larger alignment A the block starts at B + A and the header
 * sits at the chunk just below it.  Either way the chunk that holds the
 * block's first byte is tagged in the chunk map, so free() finds the
 * header from the pointer alone.  Freed mappings wait in a short cache,
 * so alloc/free cycles of the same huge size do not map and unmap.
 */
#ifndef SHOAL_HUGE_H
#define SHOAL_HUGE_H

#include <stdbool.h>
#include <stddef.h>
#include "chunk_map.h"
#include "counter.h"
#include "sync.h"

typedef struct shoal_huge_s {
    char *base;                 /* the mapping */
    size_t map_size;
    char *origin;               /* the mapping it was cut from (huge.c); NULL: never cut */
    char *user;                 /* the block handed out */
    size_t usable;
} shoal_huge_t;

void *shoal_huge_alloc(size_t size, size_t align, bool zero);

/* A thread's huge slot: the last huge mapping its thread freed, kept in
 * the thread's heap for its next malloc of a similar size, with no lock,
 * no clock and no atomic read-modify-write.  Only its holder puts a
 * mapping in; the holder takes it back, in its turn (sync.h), and so may
 * a purge pass from any thread, on a claim: a pass marks the mapping it
 * finds, and the next pass that finds it still marked unmaps it, so an
 * idle thread's mapping goes back to the OS after one to two purge
 * delays (at once with PURGE_DELAY_MS 0, never with -1).  Where
 * membarrier(2) is not to be had (the claim's barrier), the holder takes
 * with an exchange and a pass with a compare-and-swap instead.  The statistics count
 * it as cached, and its exact peaks (live_peak, bins) as live. */
/* The `map` of a slot that takes nothing: the empty heap's, which every
 * thread without a heap shares. */
#define SHOAL_HUGE_SLOT_CLOSED ((uintptr_t)1)

typedef struct shoal_huge_slot_s {
    /* The mapping's base (4 MiB-aligned), a count of puts in the bits
     * below 4 MiB so that a pass's mark cannot land on a later put of
     * the same mapping, and bit 0: marked by a pass.  0: empty. */
    _Atomic uintptr_t map;
    _Atomic size_t size;        /* its size (written by the holder) */
    shoal_turn_flags_t turn;    /* the holder's against a pass's claim */
    uintptr_t puts;             /* the holder's count */
    size_t grown_at;            /* the pool's growth when it was put (huge.c) */
    shoal_counter_t requests;   /* mallocs it served */
} shoal_huge_slot_t;

/* A huge block of n bytes at the natural alignment from the slot (the
 * holder), zeroed if asked: NULL if the slot is empty or its mapping
 * does not fit n well. */
void *shoal_huge_slot_take(shoal_huge_slot_t *s, size_t n, bool zero);

/* free of h into the slot (its holder), the mapping there before going
 * to the shared cache: false, and nothing done, if the slot is closed,
 * h was laid out for a large alignment or purging is immediate. */
bool shoal_huge_slot_put(shoal_huge_slot_t *s, shoal_huge_t *h);

/* The slot of the calling thread's heap (NULL: none, before its heap
 * is given up): the pool's growth on this thread takes back the mapping
 * there as it does the shared cache's (shoal_huge_cache_yield). */
void shoal_huge_slot_bind(shoal_huge_slot_t *s);

/* The holder empties the slot into the shared cache (thread exit, and
 * when memory runs short). */
void shoal_huge_slot_drain(shoal_huge_slot_t *s);

/* The holder closes the slot, empty, or opens it again: a closed slot
 * takes nothing, so every huge malloc takes the slow way (heap profiling
 * samples there). */
void shoal_huge_slot_close(shoal_huge_slot_t *s, bool closed);

/* A purge pass (any thread, one at a time): mark a mapping the previous
 * pass has not; claim one it marked (any with `force`), and return true,
 * unless the slot is the calling thread's, whose mapping it unmaps at
 * once.  After its claims, the pass calls shoal_os_barrier_all and then
 * _take_claimed on each slot (`fenced`: the barrier succeeded), which
 * unmaps the claimed mapping unless its holder was at the slot.  Both add
 * 1 to *waiting for a mapping left for the next pass. */
bool shoal_huge_slot_age(shoal_huge_slot_t *s, bool force, size_t *waiting);
void shoal_huge_slot_take_claimed(shoal_huge_slot_t *s, bool force, bool fenced,
                                  size_t *waiting);

/* In a fork child: no pass's claim, nor (unless the slot is the child's
 * own thread's, `ours`) a holder's turn, outlives the fork. */
void shoal_huge_slot_fork_child(shoal_huge_slot_t *s, bool ours);

/* Where p lies in a freed huge block's mapping that shoal still holds,
 * for naming a bad pointer: at a place where a block of some alignment
 * starts (a double free, or a use after free), inside one, or in none.
 * The answer is only sure while the mapping is held. */
enum shoal_huge_freed {
    SHOAL_HUGE_NOT_FREED = 0,
    SHOAL_HUGE_FREED_INSIDE,
    SHOAL_HUGE_FREED_START,
};

/* The same for the mapping in a slot (any thread: the word is read,
 * nothing behind it). */
enum shoal_huge_freed shoal_huge_slot_holds(shoal_huge_slot_t *s, const void *p);

/* The header of the huge block starting at p (whose chunk has kind k),
 * or NULL if p is not the start of a live huge block. */
shoal_huge_t *shoal_huge_of(const void *p, enum shoal_chunk_kind k);

void shoal_huge_free(shoal_huge_t *h);

/* The pool made `bytes` resident afresh (or a huge block grew by them):
 * the shared cache gives back its oldest mapping of those that growth
 * has reached the size of, so memory a program freed in big blocks and
 * now uses in small ones is not held twice until the purge delay (a
 * sort's buffers, then a hash table). */
void shoal_huge_cache_yield(size_t bytes);

/* The pool must grow: a 4 MiB chunk of a freed huge mapping to grow
 * into, cut from the front of the calling thread's slot mapping or of
 * the oldest cached one that holds a chunk; NULL if none does.  Its
 * bytes stay charged to the committed account (the pool's dirty bits
 * answer for them from then on) and may be resident: the caller sets up
 * its header and counts every slot dirty. */
void *shoal_huge_cache_give_chunk(void);

/* Heap profiling sampled the live block h, or forgets it before its
 * free: the chunk map's sampled bit sends its free the slow way (the
 * holder of the block). */
void shoal_huge_mark_sampled(shoal_huge_t *h, bool sampled);

/* The same for the mappings of the shared cache. */
enum shoal_huge_freed shoal_huge_was_freed(const void *p);

/* The live huge block whose bytes hold p (not at its start: that is
 * shoal_huge_of's), found by its chunk's tag at most 16 GiB below p;
 * NULL if none.  For naming a bad pointer only: it reads the header of
 * a block another thread may be freeing. */
const shoal_huge_t *shoal_huge_containing(const void *p);

/* Whether the huge block h may have been asked for as n bytes
 * (free_sized's check): its mapping is one that a malloc, a reuse or a
 * realloc of n would hold at the block's place in it - it fits n and
 * wastes less than half. */
bool shoal_huge_size_matches(const shoal_huge_t *h, size_t n);

/* Resize in place or by moving the pages (mremap), never by copying.
 * NULL with errno ENOMEM if neither works; the block is then untouched. */
void *shoal_huge_realloc(shoal_huge_t *h, size_t size);

/* Unmap cached mappings freed longer than PURGE_DELAY_MS ago (all of
 * them with force).  Returns the bytes unmapped, and adds to *waiting
 * the mappings still cached. */
size_t shoal_huge_purge(bool force, size_t *waiting);

/* fork(): hold the cache lock across it, release it on both sides. */
void shoal_huge_fork_prepare(void);
void shoal_huge_fork_release(void);

/* Live huge blocks by size: bin i holds mappings of at most
 * SHOAL_HUGE_BIN_MIN << i bytes, the last bin all bigger ones. */
#define SHOAL_HUGE_BINS 16
#define SHOAL_HUGE_BIN_MIN ((size_t)4 << 20)

typedef struct shoal_huge_stats_s {
    uint64_t requests;
    size_t live, live_bytes, cached, cached_bytes;      /* mapping bytes */
    size_t live_peak, live_bytes_peak, cached_peak, cached_bytes_peak;
    size_t bin_live[SHOAL_HUGE_BINS], bin_bytes[SHOAL_HUGE_BINS], bin_peak[SHOAL_HUGE_BINS];
} shoal_huge_stats_t;
void shoal_huge_stats(shoal_huge_stats_t *st);

/* Count a thread's slot into figures from shoal_huge_stats: its mapping
 * moves from live to cached, its requests add up. */
void shoal_huge_slot_stats(shoal_huge_slot_t *s, shoal_huge_stats_t *st);

#endif
