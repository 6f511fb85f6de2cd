/* samples.h - heap profiling's shared state: when to sample, the stack
 * of a sampled allocation, and the table of sampled blocks still live
 * (docs/profiling.md).
 *
 * Sampling is a Poisson process over the bytes allocated: every byte is
 * a sample point with probability 1/rate, so a block of s bytes is
 * sampled with probability p(s) = 1 - exp(-s/rate), independently of
 * every other, and stands for s/p(s) bytes and 1/p(s) objects in the
 * estimates (jemalloc and tcmalloc draw the same way).  A block's
 * weights are fixed when it is sampled and taken back when it is freed,
 * so the live and cumulative figures of each stack are unbiased
 * estimates whatever the sizes.
 *
 * The table is guarded by one lock, taken on slow paths only: a sample
 * (one in about `rate` bytes), the free of a sampled block, a dump.  The
 * stack is captured before the lock is taken.
 */
#ifndef SHOAL_SAMPLES_H
#define SHOAL_SAMPLES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHOAL_PROF_DEPTH 64     /* frames kept of a stack */

/* Every function that may keep a frame between a program's call of the
 * malloc family and the capture of its stack goes in one section, whose
 * bounds the linker marks: the frames up to the last one in it are
 * shoal's own, and left out of the stack (shoal_prof_backtrace). */
#define SHOAL_ALLOC_PATH __attribute__((section("shoal_alloc_path")))

/* Mean bytes between samples; 0 while profiling is off. */
extern _Atomic size_t shoal_prof_rate_now;

static inline size_t shoal_prof_rate(void)
{
    return atomic_load_explicit(&shoal_prof_rate_now, memory_order_relaxed);
}

/* Turn sampling on at `rate` bytes (false, with a warning, where this
 * build has no stack walk: os/unwind.h), or off with 0. */
bool shoal_prof_set_rate(size_t rate);

/* Blocks of `size` bytes to let pass before the next one sampled: the
 * geometric gap of the process above, floor(X / size) with X drawn from
 * an exponential of mean `rate`.  A caller may draw again at any moment
 * that does not depend on what follows (the process has no memory). */
uint64_t shoal_prof_gap(size_t size, size_t rate);

/* Bytes until the next sample point (X above). */
uint64_t shoal_prof_interval(size_t rate);

/* The calling thread's stack into pcs, from the first frame outside
 * shoal (the caller of malloc); returns the depth (0 where the walk
 * found no frame outside shoal).  The walk starts from the caller of
 * the function whose __builtin_frame_address(0) `frame` is (one of the
 * allocation path's: the frames below it are shoal's, and not walked). */
unsigned shoal_prof_backtrace(void **pcs, const void *frame);

/* Between these two, what the calling thread allocates is shoal's own,
 * not the program's, and is never sampled: the C library's memory for
 * the purger thread that shoal starts from inside a malloc (its TLS
 * table, which lives as long as the thread), which a profile would
 * credit to that malloc's caller and a leak report call a leak.  The
 * stack walk finds no frame (shoal_prof_backtrace gives 0). */
void shoal_prof_own_begin(void);
void shoal_prof_own_end(void);

/* The lock over the table's writers (and the sampled heap,
 * thread/sampled.h); fork holds it across (thread/fork.c): the child
 * inherits the table.  A dump reads the sites without it (below). */
void shoal_prof_lock(void);
void shoal_prof_unlock(void);

/* One dump at a time (they share a buffer): take the turn, waiting for
 * another dump to end with `wait`, else false if one runs (a signal
 * handler, which must not wait: it may have interrupted that dump).
 * fork's child gives up a turn that a thread of the parent held. */
bool shoal_prof_dump_begin(bool wait);
void shoal_prof_dump_end(void);
void shoal_prof_fork_child(void);

/* Record the block at p, of `size` usable bytes, allocated at the stack
 * pcs[0..depth), sampled at `rate` (holding the lock).  A block recorded
 * again at the same address replaces its record: the old block was
 * freed. */
void shoal_prof_record(const void *p, size_t size, size_t rate, void *const *pcs,
                       unsigned depth);

/* The block at p, sampled, was freed (holding the lock). */
void shoal_prof_forget(const void *p);

/* The estimates of one allocation stack.  Everything but the four
 * figures is written once, before the site is published; the figures
 * change under the lock and are read without it (relaxed: each is one
 * word, and a dump is a snapshot of a moving process anyway). */
typedef struct shoal_prof_site_s {
    struct shoal_prof_site_s *next;     /* in the table's chain */
    uint64_t hash;
    _Atomic uint64_t live_bytes, total_bytes;   /* estimated bytes: live now, ever */
    _Atomic uint64_t live_objs, total_objs;     /* estimated objects, in 1/65536 */
    unsigned depth;
    void *pcs[];
} shoal_prof_site_t;

#define SHOAL_PROF_OBJ_ONE 65536

/* Call fn for every stack that ever allocated a sample, without the
 * lock (a site published meanwhile may be seen or not). */
void shoal_prof_each_site(void (*fn)(const shoal_prof_site_t *, void *), void *arg);

#endif
