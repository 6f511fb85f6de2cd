/* commit.h - the committed-memory account, which MAX_MEMORY bounds.
 *
 * "Committed" is the memory shoal holds from the OS that may be resident:
 * every pool slot whose dirty bit is set (in use, or free and waiting for
 * the purger; superpage headers included) and every huge mapping, live or
 * cached.  Address space that was never touched, or was purged, does not
 * count: reserving it costs nothing.  So the figure goes down when memory
 * is given back, and after frees and a purge the whole limit is available
 * again to any size.
 *
 * The pool charges a slot when a claim finds it clean and uncharges it
 * when a purge cleans it; the huge layer charges a mapping when it maps it
 * and uncharges it when it unmaps it (ahead of the kernel's mmap, and
 * back if the kernel refuses: shoal_commit_charge_ahead and _settle).  A charge that would pass
 * MAX_MEMORY fails and leaves the account as it was: one atomic add, and
 * one more to take it back, so concurrent charges never together pass the
 * limit.
 */
#ifndef SHOAL_COMMIT_H
#define SHOAL_COMMIT_H

#include <stdbool.h>
#include <stddef.h>

/* The least MAX_MEMORY under which shoal can hand out its first small
 * block: a superpage header and one page. */
#define SHOAL_COMMIT_MIN ((size_t)128 << 10)

/* Add `bytes` to the account; false (and nothing added) if that would
 * pass MAX_MEMORY. */
bool shoal_commit_charge(size_t bytes);

/* The same for a mapping about to be made (a huge block's, a new
 * superpage's header), which the kernel may still refuse: the account's
 * peak is not raised until shoal_commit_settle says the memory is there,
 * and a refused mapping's `bytes` go back out of the account there.  A
 * request the kernel cannot serve - a program asking for 10 TB - so
 * leaves the peak as it was, where it stayed at 10 TB for the rest of
 * the process.  (A peak noted while another thread's charge ahead waits
 * for its mapping includes that charge: it is bounded by that request,
 * and the kernel refuses it only where the request is more than the
 * machine has.) */
bool shoal_commit_charge_ahead(size_t bytes);
void shoal_commit_settle(size_t bytes, bool mapped);

/* Take `bytes` out of the account. */
void shoal_commit_uncharge(size_t bytes);

/* Bytes in the account now, and its peak. */
size_t shoal_commit_charged(void);
size_t shoal_commit_peak(void);

#endif
