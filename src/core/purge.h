/* purge.h - when free memory goes back to the OS.
 *
 * Free pool slots and cached huge mappings are purged once they have
 * stayed free for PURGE_DELAY_MS (at once when it is 0, never when it is
 * -1).  The pool purger works in passes: a slot free at two passes in a
 * row is purged at the second, so it waits between one and two delays.
 */
#ifndef SHOAL_PURGE_H
#define SHOAL_PURGE_H

#include <stdbool.h>
#include <stddef.h>

/* Called from slow paths: runs a pass if a delay has passed since the
 * last one.  Cheap when it has not (one clock read and one load). */
void shoal_purge_tick(void);

/* Purge now: with `force` everything free, whatever its age. */
size_t shoal_purge_now(bool force);

#endif
