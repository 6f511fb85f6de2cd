/* chunk_map.h - which 4 MiB chunks of the address space are shoal's.
 *
 * One byte per 4 MiB chunk of the user address space (SHOAL_ADDR_BITS:
 * on x86-64 32 MiB of zero-filled .bss that the kernel backs only where
 * written - one 4 KiB page of the map covers 16 GiB of address space -
 * but that counts, all of it, in a limit on address space: RLIMIT_AS,
 * `ulimit -v`).  free() reads it before it trusts any metadata, so a
 * pointer shoal never handed out is recognised with one load and never
 * dereferenced.
 */
#ifndef SHOAL_CHUNK_MAP_H
#define SHOAL_CHUNK_MAP_H

#include <errno.h>
#include <stdatomic.h>
#include "layout.h"
#include "../os/os.h"

enum shoal_chunk_kind {
    SHOAL_CHUNK_NONE = 0,      /* not shoal's */
    SHOAL_CHUNK_SUPERPAGE,     /* a pool superpage; header in its slot 0 (pool.h) */
    SHOAL_CHUNK_HUGE,          /* a huge block starts here; header at the chunk base */
    SHOAL_CHUNK_HUGE_BEHIND,   /* a huge block starts at this chunk's base;
                                  its header is at the base of the chunk below */
    /* Or'd onto HUGE or HUGE_BEHIND: heap profiling sampled the block,
     * so free's fast path (HUGE only) leaves it to the slow one. */
    SHOAL_CHUNK_SAMPLED = 4,
};

/* The kind without the sampled bit. */
static inline enum shoal_chunk_kind shoal_chunk_base_kind(enum shoal_chunk_kind k)
{
    return (enum shoal_chunk_kind)(k & ~SHOAL_CHUNK_SAMPLED);
}

#define SHOAL_CHUNKS ((size_t)1 << (SHOAL_ADDR_BITS - SHOAL_SP_SHIFT))

extern _Atomic uint8_t shoal_chunk_map[SHOAL_CHUNKS];

static inline enum shoal_chunk_kind shoal_chunk_of(const void *p)
{
    /* One compare on the index both bounds the map and rejects addresses
     * above the user space it covers. */
    uintptr_t i = (uintptr_t)p >> SHOAL_SP_SHIFT;
    if (shoal_unlikely(i >= SHOAL_CHUNKS))
        return SHOAL_CHUNK_NONE;
    return (enum shoal_chunk_kind)atomic_load_explicit(&shoal_chunk_map[i], memory_order_relaxed);
}

/* shoal_os_reserve's, for memory the map must tell apart: a mapping the
 * kernel placed beyond the map (it does not, unless asked) goes back,
 * and the answer is NULL with errno ENOMEM, as from a refusal. */
static inline void *shoal_chunk_reserve(size_t size, size_t align, enum shoal_os_charge charge)
{
    char *p = shoal_os_reserve(size, align, charge);
    if (shoal_unlikely(p != NULL && ((uintptr_t)p + size - 1) >> SHOAL_ADDR_BITS != 0)) {
        shoal_os_release(p, size);
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

/* Publish (release) or withdraw the kind of the chunk holding `base`. */
static inline void shoal_chunk_set(const void *base, enum shoal_chunk_kind k)
{
    atomic_store_explicit(&shoal_chunk_map[(uintptr_t)base >> SHOAL_SP_SHIFT],
                          (uint8_t)k, memory_order_release);
}

#endif
