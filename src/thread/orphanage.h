/* orphanage.h - where the pages of dismantled heaps wait for a heap to
 * adopt them (docs/design.md, "The life cycle of pages and heaps").
 *
 * The orphanage is a heap no thread owns.  Its holder is whoever holds
 * it by shoal_orphanage_take, which is tried, never waited for, on the
 * slow paths (an adoption, dismantling a parked heap, the purge pass's
 * reclaim), and waited for only by a forced pass and by fork: whoever
 * holds it lets go without waiting for anything.
 */
#ifndef SHOAL_ORPHANAGE_H
#define SHOAL_ORPHANAGE_H

#include "heap.h"

extern shoal_heap_t shoal_orphans;

/* Hold the orphanage: with a try, or waiting (`wait`, a forced pass) for
 * the thread that holds it - unless that is this thread, whose hold a
 * pass run from inside it (a free that ran a purge pass) must not wait
 * for.  False if it is not to be had. */
bool shoal_orphanage_take(bool wait);
void shoal_orphanage_give(void);

/* Whether the calling thread holds it. */
bool shoal_orphanage_held(void);

/* Move pg to the orphanage (holding it and pg's heap). */
void shoal_orphanage_put(shoal_page_t *pg);

/* Take up to `max` orphaned pages of class `cls` into h (h's holder);
 * returns how many h kept.  Nothing if another thread holds the
 * orphanage. */
unsigned shoal_orphanage_adopt(shoal_heap_t *h, unsigned cls, unsigned max);

/* The purge pass: give back the orphanage's pages whose blocks have all
 * come home.  Returns 1 when it was not to be had (a later pass looks
 * again), else 0. */
size_t shoal_orphanage_reclaim(bool force);

/* Pages in the orphanage now (a look without holding it). */
size_t shoal_orphanage_pages(void);

/* fork(): held across it (heap.c's handlers call these). */
void shoal_orphanage_fork_lock(void);
void shoal_orphanage_fork_unlock(void);

#endif
