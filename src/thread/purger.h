/* purger.h - the background purger (purger.c): a thread that runs purge
 * passes while the process idles, so freed memory goes back to the OS
 * without a call into the allocator. */
#ifndef SHOAL_PURGER_H
#define SHOAL_PURGER_H

#include <stdbool.h>

/* Register the purger's wake-up and the heaps' reclaimer with the purge
 * clock (start-up). */
void shoal_purger_init(void);

/* Start the purger if memory is waiting, it is wanted and not running;
 * a load or two when it runs. */
void shoal_purger_start(void);

/* The same where a full outbox was sent (remote.c, at the end of a
 * free): nothing may wait for a pass, but an owner that takes no slow
 * path takes the blocks only when the purger asks it to (heap.c,
 * shoal_heap_scan_idle). */
void shoal_purger_start_for_inbox(void);

/* The end of a slow path: where no purger thread runs (a single-threaded
 * program, PURGE_THREAD=never, a purger that could not start), the purge
 * passes are run here, one a delay; then the purger may start. */
void shoal_purger_slow_path(void);

/* A thread is exiting: the purger may soon be alone, and looks. */
void shoal_purger_thread_exiting(void);

/* Whether the purger thread runs (or is starting): one of the process's
 * threads that never frees a block a program allocated. */
bool shoal_purger_running(void);

/* In a fork child: the purger thread did not come along; `threaded`:
 * the parent had other threads than the forking one. */
void shoal_purger_fork_child(bool threaded);

#endif
