/* fork.c - keep the allocator usable in the child of a multi-threaded
 * fork.
 *
 * Most of shoal is lock-free and every atomic word is consistent at any
 * instant, so fork only has to worry about the few locks (pool growth and
 * purge, huge cache, heap area): the prepare handler takes them all, so
 * no other thread holds one at the moment of the fork, and both sides
 * release them afterwards.  It takes them in the order the code nests
 * them - profiler, heap area, pool, huge cache (pool growth takes a chunk
 * of a freed huge mapping under grow_lock) - or it could wait for ever on
 * a thread that holds one and waits for the next.  The child inherits the
 * forking thread's heap and can free any block it inherited.  Heaps of
 * the parent's other threads are vanished in the child: their pages are
 * rebuilt from the blocks' freed marks and adopted (heap.c).
 */
#include <pthread.h>
#include <sys/single_threaded.h>
#include "fork.h"
#include "heap.h"
#include "../core/huge.h"
#include "../core/pool.h"
#include "../core/samples.h"

/* Whether prepare took the locks.  A single-threaded process takes none:
 * no other thread can hold one, and the one thread may be in a signal
 * handler that interrupted it while it held one (fork is
 * async-signal-safe, and daemons fork from SIGALRM and SIGCHLD
 * handlers); waiting for it would wait for ever.  glibc's own fork does
 * the same.  The flag is written and read by the forking thread only. */
static bool locked;

static void prepare(void)
{
    locked = !__libc_single_threaded;
    if (!locked)
        return;
    shoal_prof_lock();          /* first: a sample takes pool and heap locks inside it */
    shoal_heap_fork_prepare();
    shoal_pool_fork_prepare();
    shoal_huge_fork_prepare();
}

static void release(void)
{
    shoal_huge_fork_release();
    shoal_pool_fork_release();
    shoal_prof_unlock();
}

static void parent(void)
{
    if (!locked)
        return;
    release();
    shoal_heap_fork_parent();
}

static void child(void)
{
    shoal_prof_fork_child();    /* a dump the parent's other threads ran is gone */
    if (locked) {
        release();
        shoal_pool_fork_child();
    }
    shoal_heap_fork_child(locked);
    shoal_purger_fork_child(locked);
}

void shoal_fork_init(void)
{
    pthread_atfork(prepare, parent, child);
}
