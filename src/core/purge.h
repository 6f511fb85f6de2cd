/* purge.h - when free memory goes back to the OS.
 *
 * Free pool slots and cached huge mappings are purged once they have
 * stayed free for PURGE_DELAY_MS (at once when it is 0, never when it is
 * -1).  The pool purger works in passes: a slot free at two passes in a
 * row is purged at the second, so it waits between one and two delays.
 *
 * Passes run on slow paths when one is due (shoal_purge_tick), and from
 * the thread layer's background purger, which this module wakes when
 * memory becomes purgeable, so memory also comes back from a process
 * that has gone idle.
 */
#ifndef SHOAL_PURGE_H
#define SHOAL_PURGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Memory became free that a later pass may purge: marks work pending
 * (waking the purger when it was not) and runs a pass if one is due. */
void shoal_purge_note_free(void);

/* The same without the pass: for a path that must not read the clock
 * (the next slow path's free, or the purger thread, runs it). */
void shoal_purge_note_waiting(void);

/* Run a pass if a delay has passed since the last one.  Cheap when it has
 * not: one clock read and one load.  `catch_up`: the tick of a slow path
 * that freed nothing, which takes everything free when the pass is
 * overdue by a whole delay (purge.c). */
void shoal_purge_tick(bool catch_up);

/* A pass now: with `force` everything free, whatever its age.  Returns
 * the bytes purged. */
size_t shoal_purge_now(bool force);

/* The slow paths' clock starts (at start-up), or starts again on a new
 * PURGE_DELAY_MS: the next tick runs a pass. */
void shoal_purge_clock_start(void);

/* Whether free memory is waiting for a pass. */
bool shoal_purge_pending(void);

/* The thread layer's wake-up for its purger (called when work appears),
 * its reclaimer (called at the start of every pass to give back what
 * exited threads left, with the pass's `force`; it returns how many
 * things a later pass must come back for), and whether that purger is
 * running (then frees need not run passes). */
void shoal_purge_set_waker(void (*wake)(void));
void shoal_purge_set_reclaimer(size_t (*reclaim)(bool force));
void shoal_purge_set_background(bool running);

/* That purger's next pass is at at_ms (the monotonic clock, ms). */
void shoal_purge_set_due(uint64_t at_ms);

/* Milliseconds until the next pass - the purger's, or the slow paths'
 * clock without one (0: due now, at the next slow path) - or -1 when no
 * memory waits for one or purging is off. */
long shoal_purge_due_in_ms(void);

#endif
