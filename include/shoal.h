/* shoal.h - the public interface of the shoal memory allocator.
 *
 * Every function here is also reachable through the standard names
 * (malloc, free, ...) when libshoal is linked or preloaded; these names
 * work whether or not shoal overrides the C library.
 */
#ifndef SHOAL_H
#define SHOAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* shoal builds with hidden visibility; this is what it exports. */
#define SHOAL_API __attribute__((visibility("default")))

/* The version this header belongs to (CMakeLists.txt checks that it is
 * the project's); alloc_version() says which library is running. */
#define SHOAL_VERSION_MAJOR 0
#define SHOAL_VERSION_MINOR 1
#define SHOAL_VERSION_PATCH 0
#define SHOAL_VERSION "0.1.0"

/* The malloc family.  Semantics are C11/POSIX: sizes above PTRDIFF_MAX
 * and overflowing products give NULL with errno ENOMEM, alloc_malloc(0)
 * gives a unique pointer, a failed realloc leaves the block untouched.
 * As glibc's, alloc_realloc(ptr, 0) with ptr not NULL frees ptr and
 * returns NULL (alloc_realloc(NULL, 0) is alloc_malloc(0)). */
SHOAL_API void *alloc_malloc(size_t size);
SHOAL_API void *alloc_calloc(size_t count, size_t size);
SHOAL_API void *alloc_realloc(void *ptr, size_t size);
SHOAL_API void *alloc_reallocarray(void *ptr, size_t count, size_t size);
SHOAL_API void  alloc_free(void *ptr);
/* Free with the size the block was requested with (checked). */
SHOAL_API void  alloc_free_sized(void *ptr, size_t size);
/* Free a block from alloc_aligned with the alignment and size it was
 * requested with (checked). */
SHOAL_API void  alloc_free_aligned_sized(void *ptr, size_t alignment, size_t size);
/* `alignment` must be a power of two; any other value gives NULL with
 * errno EINVAL.  Every power of two up to at least 256 MiB is honoured. */
SHOAL_API void *alloc_aligned(size_t alignment, size_t size);
/* Bytes usable at ptr: at least the size requested. */
SHOAL_API size_t alloc_usable_size(const void *ptr);

/* Give free memory back: the calling thread's empty pages and caches go
 * to the pool, pages of exited threads whose blocks have all been freed
 * too (once their heap has waited PURGE_DELAY_MS for a thread to take it
 * over), and a purge pass returns to the OS what has been free for
 * PURGE_DELAY_MS (a slot free at the previous pass); with `force`, all
 * free memory, whatever its age, and the huge-block cache - all but what
 * other live threads hold themselves (their caches, and the pages that
 * blocks freed to them keep until they next allocate). */
SHOAL_API void alloc_collect(bool force);

/* Options: each is also read from the environment at start-up as
 * SHOAL_<NAME> (decimal numbers with an optional k/m/g suffix, booleans
 * 0/1/on/off; docs/options.md has them all).  Defaults in brackets. */
typedef enum alloc_option_e {
    ALLOC_OPTION_PREFAULT = 0,      /* 1: populate new memory at once [0]   */
    ALLOC_OPTION_PURGE_DELAY_MS,    /* ms free memory waits; -1 never [1000] */
    ALLOC_OPTION_PURGE_MODE,        /* 0 MADV_DONTNEED, 1 MADV_FREE [0]     */
    ALLOC_OPTION_MAX_MEMORY,        /* committed bytes; 0 unlimited [0]     */
    ALLOC_OPTION_CACHELINE_ALIGN,   /* 1: every block 64-byte aligned [0]   */
    ALLOC_OPTION_HUGE_PAGES,        /* 1: MADV_HUGEPAGE on new memory [0]   */
    ALLOC_OPTION_STATS_SIGNAL,      /* signal that dumps statistics; 0 off  */
    ALLOC_OPTION_STATS_JSON,        /* dumps as 0 text, 1 JSON [0]          */
    ALLOC_OPTION_SHOW_STATS,        /* 1: print statistics at exit [0]      */
    ALLOC_OPTION_ON_ERROR,          /* 0 abort, 1 warn and ignore [0]       */
    ALLOC_OPTION_VERBOSE,           /* 1: say what shoal does and refuses   */
    ALLOC_OPTION_PURGE_THREAD,      /* -1 auto, 0 never, 1 always [-1]      */
    ALLOC_OPTION_PROF,              /* 1: sample allocations: heap profiles [0] */
    ALLOC_OPTION_PROF_SAMPLE,       /* mean bytes between samples [512 KiB] */
    ALLOC_OPTION_PROF_LEAKS,        /* 1: profile what is live at exit [0]  */
    ALLOC_OPTION_COUNT_
} alloc_option_t;

#define ALLOC_PURGE_DONTNEED 0
#define ALLOC_PURGE_FREE     1
#define ALLOC_ON_ERROR_ABORT 0
#define ALLOC_ON_ERROR_WARN  1

/* 0 on success; EINVAL for an unknown option or a value out of range
 * (or a STATS_SIGNAL no dump may use); EBUSY for CACHELINE_ALIGN once
 * memory has been handed out.  alloc_option_get returns -1 for an
 * unknown option. */
SHOAL_API int  alloc_option_set(alloc_option_t option, long value);
SHOAL_API long alloc_option_get(alloc_option_t option);

/* Heap profiles (docs/profiling.md): write the sampled blocks live now,
 * and every stack that allocated one, in the heap-profile format that
 * google-pprof reads, to `path`, or with NULL to the next
 * SHOAL_PROF_PREFIX.<pid>.<seq>.heap.  0, or EINVAL while profiling is
 * off, or the error of opening the file. */
SHOAL_API int alloc_prof_dump(const char *path);

/* The version of the library in use, "MAJOR.MINOR.PATCH". */
SHOAL_API const char *alloc_version(void);

/* Statistics.  Set `size` to sizeof(alloc_stats_t) before the call; the
 * struct only ever grows at its end, and `version` says which fields a
 * library filled in (a program built against an older shoal.h passes its
 * smaller size and gets the fields it knows).  Byte figures are bytes. */
#define ALLOC_STATS_VERSION 4
#define ALLOC_STATS_CLASSES 80

typedef struct alloc_class_stats_s {
    size_t block_size;
    uint64_t requests;          /* blocks handed out, cumulative */
    size_t live_blocks;         /* handed out and not yet freed */
    size_t live_bytes;          /* live_blocks * block_size */
    size_t pages;               /* pages of this class in use */
} alloc_class_stats_t;

typedef struct alloc_class_peaks_s {     /* version 3 */
    size_t live_blocks;         /* the most blocks of the class live at once */
    size_t live_bytes;          /* live_blocks * block_size */
    size_t pages;               /* the most pages of the class in use */
} alloc_class_peaks_t;

/* Blocks of one size bin (version 4): large blocks of 64 KiB << i, huge
 * blocks whose mapping is at most 4 MiB << i (the last bin: any bigger). */
#define ALLOC_STATS_LARGE_BINS 6
#define ALLOC_STATS_HUGE_BINS 16
typedef struct alloc_bin_stats_s {
    size_t live, live_bytes;    /* blocks live now, and their block or mapping bytes */
    size_t live_peak;           /* the most live at once (large: sampled; huge: exact) */
} alloc_bin_stats_t;

typedef struct alloc_stats_s {
    size_t size;                /* in: sizeof(alloc_stats_t) */
    uint32_t version;           /* out: ALLOC_STATS_VERSION */
    uint64_t elapsed_ms;        /* since shoal started */
    /* The summary, read like Redis' INFO memory. */
    size_t allocated;           /* in live blocks (their usable size) */
    size_t active;              /* in pool slots in use and live huge mappings */
    size_t resident;            /* RSS of the process (/proc/self/statm) */
    size_t mapped;              /* address space reserved from the OS */
    size_t committed;           /* active, plus free memory not yet purged */
    size_t purged;              /* given back to the OS, cumulative */
    size_t active_peak, resident_peak, mapped_peak;
    /* The pool. */
    size_t superpages;
    size_t pool_slots_used;     /* 64 KiB slots claimed (heaps' caches included) */
    size_t pool_slots_dirty;    /* free slots waiting for the purger */
    uint64_t pool_claims, pool_releases;
    /* Large (pool blocks above 64 KiB) and huge (own mappings) blocks. */
    uint64_t large_requests;
    size_t large_live, large_live_bytes;
    uint64_t huge_requests;
    size_t huge_live, huge_live_bytes, huge_cached, huge_cached_bytes;
    /* Threads. */
    size_t heaps_live, heaps_live_peak;
    uint64_t heaps_created, heaps_exited;
    size_t heaps_abandoned_pages;       /* pages of exited threads not yet adopted */
    uint64_t pages_adopted, remote_frees;
    /* The process. */
    uint64_t minor_faults, major_faults;
    uint64_t dumps, dumps_skipped;      /* signal dumps written, and dropped while busy */
    alloc_class_stats_t classes[ALLOC_STATS_CLASSES];
    /* Version 3: the peaks of the other current values (superpages are
     * never unmapped: their count is its own peak).  Sums of per-thread
     * counters - allocated, committed, pool_slots_dirty, large, abandoned
     * pages, classes - are sampled, see docs/stats.md. */
    size_t allocated_peak, committed_peak;
    size_t pool_slots_used_peak, pool_slots_dirty_peak;
    size_t large_live_peak, large_live_bytes_peak;
    size_t huge_live_peak, huge_live_bytes_peak, huge_cached_peak, huge_cached_bytes_peak;
    size_t heaps_abandoned_pages_peak;
    alloc_class_peaks_t class_peaks[ALLOC_STATS_CLASSES];
    /* Version 4: blocks freed by a thread that does not own them and not
     * yet back on their page: in the freeing heap's outbox (at most
     * 16 KiB a heap) or in the owner's inbox. */
    size_t remote_in_flight;
    /* Atomic read-modify-writes the remote frees cost: one per batch sent
     * to an owner, one per owner's inbox taken empty. */
    uint64_t remote_atomics;
    /* Bytes of shoal's own structures: superpage headers (slot
     * descriptors and occupancy words) and heap structs. */
    size_t metadata;
    /* Milliseconds until the next purge pass, -1 when no memory waits for
     * one (or PURGE_DELAY_MS is -1); a free slot is purged at the second
     * pass that finds it free. */
    long purge_due_ms;
    alloc_bin_stats_t large_bins[ALLOC_STATS_LARGE_BINS];
    alloc_bin_stats_t huge_bins[ALLOC_STATS_HUGE_BINS];
} alloc_stats_t;

/* The size of a version 2 alloc_stats_t, the smallest accepted. */
#define ALLOC_STATS_SIZE_V2 offsetof(alloc_stats_t, allocated_peak)
#define ALLOC_STATS_SIZE_V3 offsetof(alloc_stats_t, remote_in_flight)

/* 0, or EINVAL if st is NULL or st->size is too small. */
SHOAL_API int  alloc_stats_get(alloc_stats_t *st);
SHOAL_API void alloc_stats_print(int fd);
SHOAL_API void alloc_stats_print_json(int fd);

#ifdef __cplusplus
}
#endif
#endif
