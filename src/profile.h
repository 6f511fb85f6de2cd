/* profile.h - heap profiling at the entry points: sampling the
 * allocation at hand, and writing the profiles (docs/profiling.md). */
#ifndef SHOAL_PROFILE_H
#define SHOAL_PROFILE_H

#include <stdbool.h>
#include "block.h"
#include "core/samples.h"

/* The allocation at hand, of a page class, is sampled (a page's trap
 * said so): a block of class cls from the sampled heap, recorded with
 * the stack from the caller of the allocation path's function whose
 * frame address `frame` is (shoal_prof_backtrace).  NULL when no stack
 * is to be had (or no memory): the caller serves it unsampled. */
void *shoal_prof_sample_block(unsigned cls, bool zero, const void *frame);

/* Bytes this thread may still be handed out, in blocks that no page's
 * trap sees, before the next sample point: large and huge blocks, made
 * on the slow path, and small ones from the stash (thread/stash.h) - the
 * same Poisson process over bytes as the traps', drawn per thread over
 * these bytes alone; negative until drawn. */
extern __thread int64_t shoal_prof_untrapped_left __attribute__((tls_model("initial-exec")));

/* A block of `size` bytes that no trap sees is handed out: whether the
 * count lets it pass unsampled (and falls by `size`). */
static inline bool shoal_prof_pass(size_t size)
{
    if (shoal_likely(shoal_prof_untrapped_left >= (int64_t)size)) {
        shoal_prof_untrapped_left -= (int64_t)size;
        return true;
    }
    return false;
}

/* The count did not let a block of `size` bytes pass: whether a sample
 * point falls in it (the count drawn first where it was not; after a
 * point falls, the next is drawn from the block's end). */
bool shoal_prof_point_falls(size_t size);

/* A large or huge block was made on the slow path: sample it if the
 * thread's byte count says so. */
void shoal_prof_sample_big(void *p);

static inline void *shoal_prof_after_big(void *p)
{
    if (shoal_unlikely(shoal_prof_rate() != 0) && p != NULL)
        shoal_prof_sample_big(p);
    return p;
}

/* The sampled large or huge block p (classified as c) is being freed:
 * forget its sample. */
void shoal_prof_unsample(const void *p, const shoal_ptr_t *c);

/* The stats signal came: a profile too, while profiling is on
 * (async-signal-safe; dropped if another dump is being written). */
void shoal_prof_signal(void);

#endif
