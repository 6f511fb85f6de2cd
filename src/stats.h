/* stats.h - what the allocator's slow paths tell the statistics. */
#ifndef SHOAL_STATS_H
#define SHOAL_STATS_H

/* A heap took new memory, or a huge block was made: sample the peaks of
 * the values summed over threads, if the last sample is old enough (the
 * heap layer's `grew` hook, and malloc.c). */
void shoal_stats_tick(void);

/* In the child of a fork: a sample another thread was taking is not (the
 * heap layer's `fork_child` hook). */
void shoal_stats_fork_child(void);

#endif
