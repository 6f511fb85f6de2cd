/* orphanage.c - the pages of dismantled heaps, and their adoption
 * (orphanage.h). */
#include "orphanage.h"
#include "page_queue.h"

#include "../core/sync.h"
#include "../os/os.h"

/* The orphanage holds the pages of dismantled heaps that still have live
 * blocks, one queue per size class (a heap adopts only pages of a class
 * it allocates: one of a class it never allocates would keep its free
 * blocks from every thread).  Its pages' blocks come home through its
 * inbox, like any heap's.  Set up by its first holder: a process whose
 * threads never leave a page there never touches its 9 KiB (zero, they
 * take no memory until then). */
shoal_heap_t shoal_orphans;
/* Written by a holder, once; relaxed: a look without the lock may miss
 * it, and then finds nothing the orphanage could hold. */
static _Atomic bool set_up;
static shoal_lock_t orphan_lock = SHOAL_LOCK_INIT;
static __thread bool tl_holds_orphans __attribute__((tls_model("initial-exec")));
/* Pages in the orphanage, by class: a look without the lock. */
static _Atomic size_t orphaned[SHOAL_CLASSES];

bool shoal_orphanage_take(bool wait)
{
    if (tl_holds_orphans)
        return false;
    if (wait)
        shoal_lock(&orphan_lock);
    else if (!shoal_trylock(&orphan_lock))
        return false;
    tl_holds_orphans = true;
    if (!atomic_load_explicit(&set_up, memory_order_relaxed)) {
        shoal_heap_setup(&shoal_orphans);
        atomic_store_explicit(&set_up, true, memory_order_relaxed);
    }
    return true;
}

void shoal_orphanage_give(void)
{
    tl_holds_orphans = false;
    shoal_unlock(&orphan_lock);
}

bool shoal_orphanage_held(void)
{
    return tl_holds_orphans;
}

void shoal_orphanage_put(shoal_page_t *pg)
{
    shoal_page_set_owner(pg, &shoal_orphans, false);
    shoal_queue_push_back(&shoal_orphans, pg);
    atomic_fetch_add_explicit(&orphaned[pg->size_class], 1, memory_order_relaxed);
}

/* Move pg from the orphanage to h (holding both). */
static void take_orphan(shoal_heap_t *h, shoal_page_t *pg)
{
    shoal_queue_remove(&shoal_orphans, pg);
    atomic_fetch_sub_explicit(&orphaned[pg->size_class], 1, memory_order_relaxed);
    /* Release, paired with free's acquire load: a thread that frees a
     * block of pg (which it may hold since long before h existed) and
     * finds h there sees h set up - its outbox slot, its inbox.  A
     * sender that still reads the orphanage sends there, and the
     * orphanage's next holder forwards the block to h. */
    shoal_page_set_owner(pg, h, false);
}

/* Pages are taken up to one with room, which goes to the front of h's
 * queue (the others, with every block out, to the back); pages whose
 * blocks have all come home go straight back to the pool.  Another
 * thread holding the orphanage costs nothing but the try: adoption is a
 * slow path's extra, and a fresh page serves as well. */
unsigned shoal_orphanage_adopt(shoal_heap_t *h, unsigned cls, unsigned max)
{
    unsigned n = 0;
    shoal_page_t *pg;
    if (atomic_load_explicit(&orphaned[cls], memory_order_relaxed) == 0 ||
        !shoal_orphanage_take(false))
        return 0;
    shoal_heap_receive(&shoal_orphans);
    while (n < max && (pg = shoal_orphans.pages[cls]) != &shoal_empty_page) {
        take_orphan(h, pg);
        shoal_page_collect(pg);
        if (shoal_page_all_home(pg)) {
            shoal_heap_release_page(h, pg, SHOAL_TO_CACHE);
            continue;
        }
        n++;
        if (shoal_page_has_free(pg) || shoal_page_carvable(pg)) {
            shoal_queue_push_front(h, pg);
            break;
        }
        shoal_queue_push_back(h, pg);
    }
    shoal_orphanage_give();
    shoal_count(&h->stats.pages_adopted, n);
    return n;
}

size_t shoal_orphanage_reclaim(bool force)
{
    if (!atomic_load_explicit(&set_up, memory_order_relaxed))
        return 0;                       /* it never held a page */
    if (!shoal_orphanage_take(force))
        return 1;
    shoal_heap_receive(&shoal_orphans);
    /* Its pages keep the blocks their threads left live, often a few
     * each: trimmed as a sweep trims a heap's (the pass holds them). */
    unsigned trims = shoal_heap_trims_allowed(shoal_os_now_ms(), &shoal_orphans.trimmed_ms);
    for (unsigned c = SHOAL_CLASSES; c-- > 0;) {
        shoal_page_t *pg = shoal_orphans.pages[c], *next;
        for (; pg != &shoal_empty_page; pg = next) {
            next = pg->next != NULL ? pg->next : &shoal_empty_page;
            shoal_page_collect(pg);
            if (!shoal_page_all_home(pg)) {
                shoal_heap_trim_if_due(pg, &trims);
                continue;
            }
            shoal_queue_remove(&shoal_orphans, pg);
            atomic_fetch_sub_explicit(&orphaned[c], 1, memory_order_relaxed);
            shoal_heap_release_page(&shoal_orphans, pg, SHOAL_TO_POOL_IN_PASS);
        }
    }
    shoal_orphanage_give();
    return 0;
}


size_t shoal_orphanage_pages(void)
{
    size_t n = 0;
    for (unsigned c = 0; c < SHOAL_CLASSES; c++)
        n += atomic_load_explicit(&orphaned[c], memory_order_relaxed);
    return n;
}

/* The only waits for the lock without a try: whoever holds it lets go
 * without waiting for anything. */
void shoal_orphanage_fork_lock(void)
{
    shoal_lock(&orphan_lock);
}

void shoal_orphanage_fork_unlock(void)
{
    shoal_unlock(&orphan_lock);
}
