/* heap.c - per-thread heaps: finding a page, parking, dismantling
 * (docs/design.md, "The life cycle of pages and heaps"); the queues
 * themselves are page_queue.c's, the orphanage and adoption
 * orphanage.c's.  Blocks that other threads free come back through the
 * heap's inbox (remote.c); every function here that touches a heap's
 * pages is called by that heap's holder (heap.h).
 */
#include "heap.h"
#include "fork.h"
#include "large_cache.h"
#include "orphanage.h"
#include "page_queue.h"
#include "purger.h"
#include "sampled.h"
#include "stash.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include "../core/options.h"
#include "../core/purge.h"
#include "../core/sync.h"
#include "../os/os.h"

shoal_page_t shoal_empty_page;
shoal_heap_t shoal_empty_heap = {
    .direct = { [0 ... SHOAL_DIRECT_ENTRIES - 1] = &shoal_empty_page },
    .pages = { [0 ... SHOAL_CLASSES - 1] = &shoal_empty_page },
    .large_cached_slots = SHOAL_LARGE_CACHE_CLOSED,     /* it keeps nothing */
    .huge_slot = { .map = SHOAL_HUGE_SLOT_CLOSED },     /* likewise */
};
__thread shoal_heap_t *shoal_tl_heap __attribute__((tls_model("initial-exec"))) =
    &shoal_empty_heap;

#define container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* Heaps that exited threads parked whole, the most recently parked on
 * top: a thread that starts takes one over, warm (heap_give_up). */
static ck_stack_t free_heaps __attribute__((aligned(16))) = CK_STACK_INITIALIZER;
/* Heaps a purge pass has emptied: a thread takes one only where no
 * parked heap is to be had, so that a warm one is never passed over for
 * an empty one (retire_parked). */
static ck_stack_t spare_heaps __attribute__((aligned(16))) = CK_STACK_INITIALIZER;
/* Every heap ever made, pushed with release once the heap is set up and
 * walked with acquire (heaps are never freed, so a walk needs no more). */
static _Atomic(shoal_heap_t *) all_heaps;
/* Statistics: relaxed, nothing is published through them. */
static _Atomic size_t heaps_created, heaps_live, heaps_live_peak, heaps_exited;
/* Frees by threads that have no heap (their exit handler ran). */
static _Atomic uint64_t orphan_frees[SHOAL_CLASSES], orphan_remote_frees;

static shoal_lock_t area_lock = SHOAL_LOCK_INIT;
static _Atomic unsigned heaps_made;     /* structs, for their outbox slots (relaxed: a count) */
static char *area_next, *area_end;

static pthread_key_t exit_key;

/* Set once this thread's exit handler has given its heap up.  Such a
 * thread may still allocate (another key's destructor); it borrows a heap
 * for each call and gives it up before the call returns, because glibc
 * runs destructors for at most four rounds: a heap made in the last one
 * would never be given up, and every exiting thread would leave one. */
static __thread bool tl_exited __attribute__((tls_model("initial-exec")));
/* The heap this thread is taking or giving up, between the stores that
 * make it its own or parked (the empty heap while it pops one whose name
 * it does not know yet): for its own fork child, should a signal handler
 * fork in between (vanished heaps, below).  Ordered with the stores
 * around it by compiler barriers, which is all a handler on the same
 * thread needs. */
static __thread shoal_heap_t *tl_transit __attribute__((tls_model("initial-exec")));
static _Atomic int init_state;          /* enum shoal_once (sync.h says its order) */

static void thread_exit(void *arg);

/* Stored with release when registered, loaded with acquire when called:
 * the module behind a hook is set up before it registers. */
static void (*_Atomic grew_hook)(void);
static void (*_Atomic fork_child_hook)(void);

void shoal_heap_set_hooks(void (*grew)(void), void (*fork_child)(void))
{
    /* Release: a thread that finds a hook finds what it set up. */
    atomic_store_explicit(&grew_hook, grew, memory_order_release);
    atomic_store_explicit(&fork_child_hook, fork_child, memory_order_release);
}

void shoal_heap_grew(void)
{
    void (*grew)(void) = atomic_load_explicit(&grew_hook, memory_order_acquire);
    if (grew != NULL)
        grew();
}

/* Put h on the list of every heap (which statistics and fork walk). */
static void link_heap(shoal_heap_t *h)
{
    shoal_heap_t *head = atomic_load_explicit(&all_heaps, memory_order_relaxed);
    do {
        h->next_all = head;
        /* Release: a reader that finds h sees its fields set up. */
    } while (!atomic_compare_exchange_weak_explicit(&all_heaps, &head, h,
                                                    memory_order_release,
                                                    memory_order_relaxed));
}

void shoal_heap_setup(shoal_heap_t *h)
{
    /* Only the queue heads and the inbox need values. */
    for (unsigned c = 0; c < SHOAL_CLASSES; c++)
        shoal_queue_set_head(h, c, &shoal_empty_page);
    shoal_inbox_init(&h->inbox);
    link_heap(h);
}

/* ---- process start-up ------------------------------------------------- */

void shoal_process_init(void)
{
    /* No wait: pthread_key_create and pthread_atfork may allocate, in
     * this thread. */
    if (shoal_once_begin(&init_state, false)) {
        shoal_options_init();
        shoal_page_secret_init();
        shoal_queue_init();
        pthread_key_create(&exit_key, thread_exit);
        shoal_fork_init();
        shoal_purger_init();
        shoal_once_end(&init_state);
        return;
    }
    while (atomic_load_explicit(&init_state, memory_order_acquire) != SHOAL_ONCE_DONE)
        sched_yield();
}

/* ---- blocks freed by other threads ------------------------------------ */

static shoal_heap_t *heap_acquire(void);

/* A block came home to pg, which has none out now or was full (see
 * remote.h).  The orphanage marks no page full, and gives its empty pages
 * back in shoal_orphanage_reclaim. */
static void page_event(shoal_heap_t *h, shoal_page_t *pg)
{
    if (h != &shoal_orphans)
        shoal_heap_page_freed(h, pg);
}

size_t shoal_heap_receive(shoal_heap_t *h)
{
    return shoal_remote_receive(h, page_event);
}

__attribute__((noinline)) shoal_heap_t *shoal_heap_acquire_for_thread(void)
{
    if (tl_exited)
        return &shoal_empty_heap;
    int saved = errno;          /* a free must leave errno alone */
    shoal_heap_t *h = heap_acquire();
    errno = saved;
    return h != NULL ? h : &shoal_empty_heap;
}

static void recover_vanished(shoal_page_t *pg);

/* What remote_free does not do inline: a thread with no heap yet, a
 * heap that has just become ours, a heap no thread holds, a heap a fork
 * left without its thread. */
static __attribute__((noinline)) void remote_free_slow(shoal_heap_t *me, shoal_heap_t *dest,
                                                       shoal_page_t *pg, shoal_block_t *b)
{
    if (shoal_unlikely(dest == &shoal_sampled_heap)) {
        shoal_sampled_free(pg, b);
        return;
    }
    /* A thread that only frees still sends in batches: it gets a heap for
     * its outbox (and, if it pops a parked heap that owns pg, the block
     * is its own).  The owner is read again once the heap is ours: the
     * purge pass may have given pg away from the heap popped here before
     * it parked it again, after the read that brought us here. */
    if (me == &shoal_empty_heap) {
        me = shoal_heap_of_thread();
        dest = shoal_page_heap(pg);
    }
    if (me != &shoal_empty_heap)
        shoal_count(&me->stats.frees[pg->size_class], 1);
    else if (SHOAL_STATS_ENABLED)
        atomic_fetch_add_explicit(&orphan_frees[pg->size_class], 1, memory_order_relaxed);
    if (shoal_unlikely(dest->vanished)) {
        /* A heap whose thread did not come with a fork: the block keeps
         * the freed mark free gave it and goes nowhere (no one takes that
         * heap's inbox); the page's rebuild finds it free by its mark. */
        recover_vanished(pg);
        return;
    }
    if (me == &shoal_empty_heap) {
        if (SHOAL_STATS_ENABLED)
            atomic_fetch_add_explicit(&orphan_remote_frees, 1, memory_order_relaxed);
        shoal_remote_send_one(NULL, dest, b);
        return;
    }
    if (dest == me) {           /* a free by the owner after all, or into its full page */
        shoal_remote_come_home(me, pg, b, shoal_page_owner(pg), page_event);
        return;
    }
    shoal_count(&me->stats.remote_frees, 1);
    /* A heap no thread holds takes its inbox only in a purge pass.  The
     * block waits in our outbox, with the next ones for that heap, only
     * where the purger sends idle outboxes: otherwise it would keep its
     * page from the pool while this thread does other things. */
    if (atomic_load_explicit(&dest->live, memory_order_relaxed) || shoal_remote_stealer_runs())
        shoal_remote_hold(me, dest, b, pg->block_size);
    else
        shoal_remote_send_one(me, dest, b);
}

/* Out of line: free's local path keeps its shape, and the outbox's hold
 * is inlined here. */
/* A free into one of our full pages (the owner word's mark failed free's
 * test), which a random replacement of blocks makes at nearly every
 * free: the block goes to the stash, or home as the owner's free would
 * put it, and the page back to its queue.  (The empty heap owns no page,
 * so me is a heap here.)  Out of line, so that the remote case, every
 * free of a producer/consumer load, stays as short as it was. */
static __attribute__((noinline)) void full_page_free(shoal_page_t *pg, shoal_block_t *b,
                                                     shoal_heap_t *me, uintptr_t owner)
{
    shoal_count(&me->stats.frees[pg->size_class], 1);
    if (!shoal_stash_put(me, pg, b))
        shoal_remote_come_home(me, pg, b, owner, page_event);
}

__attribute__((noinline)) void shoal_heap_remote_free(shoal_page_t *pg, shoal_block_t *b,
                                                      shoal_heap_t *me, uintptr_t owner)
{
    shoal_heap_t *dest = shoal_owner_heap(owner);
    if (dest == me) {
        full_page_free(pg, b, me, owner);   /* remote_free's arguments: a plain jump */
        return;
    }
    /* Relaxed: a page changes heaps only under its holder, and a block
     * sent to the heap it just left is forwarded (remote.h). */
    if (shoal_likely(me != &shoal_empty_heap &&
                     atomic_load_explicit(&dest->live, memory_order_relaxed))) {
        unsigned c = pg->size_class;
        shoal_count(&me->stats.frees[c], 1);
        /* Kept for this thread's next malloc of the class where its own
         * page of the class is dry, else sent home (stash.h). */
        if (shoal_unlikely(shoal_stash_foreign_wanted(me, c)) && shoal_stash_put(me, pg, b))
            return;
        shoal_count(&me->stats.remote_frees, 1);
        shoal_remote_hold(me, dest, b, pg->block_size);
        return;
    }
    remote_free_slow(me, dest, pg, b);
}

/* ---- slots for new pages ---------------------------------------------- */

static bool take_span(shoal_heap_t *h, unsigned order, shoal_span_t *s)
{
    if (order != 0 || h->uncached)
        return shoal_pool_claim(order, s);
    if (h->cached == 0) {
        /* Refill in a batch: one CAS claims up to four slots, wherever
         * they are free in one superpage. */
        shoal_span_t got[SHOAL_PAGE_REFILL];
        unsigned n = shoal_pool_claim_slots(SHOAL_PAGE_REFILL, got);
        if (n == 0)
            return false;
        /* The lowest slot goes out first: memory in use packs low. */
        while (n != 0)
            h->cache[h->cached++] = got[--n];
    }
    *s = h->cache[--h->cached];
    if (h->cached_emptied != 0)
        h->cached_emptied--;    /* they lie on top */
    h->page_cache_used = true;
    return true;
}

void shoal_heap_release_page(shoal_heap_t *h, shoal_page_t *pg, enum shoal_release_to to)
{
    shoal_count(&h->stats.pages[pg->size_class], (uint64_t)-1);
    shoal_page_fini(pg);        /* its slots stop being a page */
    shoal_page_set_owner(pg, NULL, false);
    shoal_superpage_t *sp = shoal_superpage_of(pg);
    unsigned slot = (unsigned)(pg - sp->pages);
    if (pg->order == 0 && to == SHOAL_TO_CACHE && !h->uncached &&
        h->cached_emptied < SHOAL_PAGE_KEEP) {
        h->cache[h->cached++] = (shoal_span_t){ sp, slot, 0, false };
        h->cached_emptied++;
        return;
    }
    if (to == SHOAL_TO_POOL_IDLE)
        shoal_pool_release_idle(sp, slot, 1u << pg->order);
    else
        shoal_pool_release(sp, slot, 1u << pg->order);
    if (to != SHOAL_TO_POOL_IN_PASS)
        shoal_purge_note_free();
}

static void drain_page_cache(shoal_heap_t *h)
{
    if (h->cached == 0)
        return;
    h->cached_emptied = 0;
    while (h->cached != 0) {
        shoal_span_t *s = &h->cache[--h->cached];
        shoal_pool_release(s->sp, s->slot, 1);
    }
    shoal_purge_note_free();
}

/* Everything a heap keeps that is not a page: the stash first, whose
 * blocks may leave pages empty for the page cache. */
static void drain_cache(shoal_heap_t *h)
{
    shoal_stash_drain(h);
    drain_page_cache(h);
    shoal_large_cache_drain(h);
    shoal_huge_slot_drain(&h->huge_slot);
}

void shoal_heap_drain_caches(void)
{
    if (shoal_tl_heap != &shoal_empty_heap)
        drain_cache(shoal_tl_heap);
}

/* A page whose blocks are all with the owner: back to the pool, unless it
 * heads its queue (the next malloc of the class takes from it, so it
 * would be claimed again at once). */
static void retire(shoal_heap_t *h, shoal_page_t *pg)
{
    if (h->pages[pg->size_class] == pg || !shoal_page_all_home(pg))
        return;
    shoal_queue_remove(h, pg);
    shoal_heap_release_page(h, pg, SHOAL_TO_CACHE);
}

void shoal_heap_page_freed(shoal_heap_t *h, shoal_page_t *pg)
{
    if (shoal_page_is_full(pg))
        shoal_queue_unfull(h, pg);
    if (pg->used != 0)
        return;
    retire(h, pg);
    /* The stash closes, emptied (stash.h); the pages its blocks come
     * home to come back here, past the count. */
    if (h->emptied < SHOAL_STASH_EMPTIED && ++h->emptied == SHOAL_STASH_EMPTIED) {
        shoal_stash_fit(h);
        shoal_stash_drain(h);
    }
}

/* ---- finding a page --------------------------------------------------- */

#define SPARSE_PASSES 4     /* sparse pages a walk passes over at most */

/* Whether pg, which has a free block, is less than a quarter used. */
static bool page_sparse(const shoal_page_t *pg)
{
    return pg->used * 4 < pg->reserved;
}

/* Whether the process gives memory back from inside pages (below). */
static bool trims_on(void)
{
    return shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS) >= 0 && !shoal_opt(ALLOC_OPTION_HUGE_PAGES);
}

unsigned shoal_heap_trims_allowed(uint64_t now, uint64_t *last_ms)
{
    long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
    uint64_t every = delay > SHOAL_TRIM_EVERY_MS ? (uint64_t)delay : SHOAL_TRIM_EVERY_MS;
    if (!trims_on() || now - *last_ms < every)
        return 0;
    *last_ms = now;
    return SHOAL_TRIMS_PER_SWEEP;
}

void shoal_heap_trim_if_due(shoal_page_t *pg, unsigned *trims)
{
    if (*trims != 0 && shoal_page_trim_worth(pg) && shoal_page_trim_due(pg)) {
        shoal_page_trim(pg);
        --*trims;
    }
}

/* A walk met pg with no free block: the first such page that can be
 * carved further is kept in *carvable, one that cannot is full. */
static inline void walk_dry(shoal_heap_t *h, shoal_page_t *pg, shoal_page_t **carvable)
{
    if (shoal_page_carvable(pg))
        *carvable = *carvable != NULL ? *carvable : pg;
    else
        shoal_queue_walk_full(h, pg);
}

/* search_queue's walk from pg, a sparse page with a free block, on: the
 * first page at least a quarter used with a free block, or the page
 * after SPARSE_PASSES sparse ones, or else pg; each sparse page passed
 * goes to the back of the queue, and the walk stops where they begin.
 * (The bound keeps a queue of sparse pages only, as a program that
 * freed most of its blocks leaves it, from being walked whole at every
 * search: 50,000 blocks of 1000 B, 90% of them freed at random and
 * allocated again five times, 3.2 times the instructions without it,
 * 1.016 with.) */
static __attribute__((noinline)) shoal_page_t *search_past_sparse(shoal_heap_t *h,
                                                                  shoal_page_t *pg,
                                                                  shoal_page_t **carvable)
{
    shoal_page_t *first = pg, *moved = NULL;
    unsigned passed = 0;
    while (pg != &shoal_empty_page && pg != moved) {
        shoal_page_t *next = pg->next != NULL ? pg->next : &shoal_empty_page;
        shoal_page_collect(pg);
        if (!shoal_page_has_free(pg)) {
            walk_dry(h, pg, carvable);
        } else if (!page_sparse(pg) || passed == SPARSE_PASSES) {
            return pg;
        } else {
            passed++;
            if (next != &shoal_empty_page) {
                shoal_queue_walk_back(h, pg);
                moved = moved != NULL ? moved : pg;
            }
        }
        pg = next;
    }
    return first;
}

/* A page of the queue with a free block, moved to its head; NULL if
 * none has one.  Blocks that came back come first: a page is carved
 * further (touching memory it never touched) only when no page of the
 * queue has a freed block to give, or freed blocks on pages deeper in
 * the queue would wait while new memory is touched for the same class.
 *
 * Among the pages with freed blocks, one at least a quarter used comes
 * before a *sparse* one, which the walk passes over, to the back of the
 * queue: a sparse page gets no block while a fuller one has room, so the
 * program's frees can empty it and it goes back (shoal_heap_page_freed),
 * and the class's pages follow its live blocks down as they followed
 * them up.  Served in queue order, every page with a free block got its
 * turn and none emptied: two threads that replace blocks of 8-1000 B at
 * random and hand them to each other (bench/larson, 5,000 blocks each)
 * held 156, 169 and 181 pages after 30, 100 and 300 rounds for the same
 * 5.1 MB live, and 143, 139 and 136 with sparse pages passed over.  A
 * sparse page still serves before a page is carved or begun, so a class
 * holds no more pages for it. */
static shoal_page_t *search_queue(shoal_heap_t *h, unsigned cls)
{
    shoal_page_t *head = h->pages[cls], *pg = head, *found = NULL, *carvable = NULL;
    while (found == NULL && pg != &shoal_empty_page) {
        shoal_page_t *next = pg->next != NULL ? pg->next : &shoal_empty_page;
        shoal_page_collect(pg);
        if (shoal_page_has_free(pg))
            found = page_sparse(pg) ? search_past_sparse(h, pg, &carvable) : pg;
        else
            walk_dry(h, pg, &carvable);
        pg = next;
    }
    if (found == NULL && carvable != NULL) {
        shoal_page_extend(carvable);
        found = carvable;
    }
    if (found != NULL && h->pages[cls] != found)
        shoal_queue_walk_front(h, found);
    if (h->pages[cls] != head)
        shoal_queue_publish(h, cls);
    return found;
}

static shoal_page_t *fresh_page(shoal_heap_t *h, unsigned cls)
{
    /* No page of the queue has room: this thread's live blocks of the
     * class are at a high. */
    shoal_heap_grew();
    shoal_span_t s;
    unsigned order = shoal_class_page_order(cls);
    if (!take_span(h, order, &s))
        return NULL;
    shoal_page_t *pg = shoal_span_head(&s);
    shoal_page_init(pg, cls, order, s.zero);
    shoal_count(&h->stats.pages[cls], 1);
    shoal_page_set_owner(pg, h, false);
    shoal_page_extend(pg);
    shoal_queue_push_front(h, pg);
    return pg;
}

/* What a heap keeps without using it goes back to the pool on a clock of
 * PURGE_DELAY_MS, so that the purger can return it to the OS: a page of
 * a queue whose blocks have all come back (an empty page at the head of
 * its queue, kept for the next malloc of its class, only once it was
 * empty at two sweeps in a row), and the stash, the page and large-block
 * caches when they were not taken from since the last sweep; and it
 * trims pages with few blocks out (core/page.c).  A sweep runs on every
 * 256th slow path, at most once a delay (or where a purge pass asks
 * for one: ask_sweeps, below), so memory in use again soon is not given
 * back and claimed again; releasing it sooner would only move resident
 * memory from one slot to another (a slot re-made for another class
 * keeps what the last one touched). */
static void sweep_idle(shoal_heap_t *h)
{
    long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
    uint64_t now = shoal_os_now_ms();
    if (delay > 0 &&
        now - atomic_load_explicit(&h->swept_ms, memory_order_relaxed) < (uint64_t)delay)
        return;
    atomic_store_explicit(&h->swept_ms, now, memory_order_relaxed);
    shoal_large_cache_share(h, shoal_heaps_live());
    if (!h->stash_used)
        shoal_stash_drain(h);           /* before the page cache: it may fill it */
    if (!h->large_cache_used)
        shoal_large_cache_drain(h);
    if (!h->page_cache_used)
        drain_page_cache(h);
    h->large_cache_used = h->page_cache_used = h->stash_used = false;
    /* Blocks waiting in the outbox go home, and those waiting in the
     * inbox are taken: then `used` is exact, and a page of a class this
     * heap no longer allocates, which other threads emptied, is seen. */
    shoal_remote_send_all(h);
    shoal_heap_receive(h);
    unsigned trims = shoal_heap_trims_allowed(now, &h->trimmed_ms);
    for (unsigned c = SHOAL_CLASSES; c-- > 0;) {
        shoal_page_t *head = h->pages[c], *next;
        for (shoal_page_t *pg = head; pg != &shoal_empty_page; pg = next) {
            next = pg->next != NULL ? pg->next : &shoal_empty_page;
            if (!shoal_page_all_home(pg)) {
                pg->idle_sweeps = 0;
                if (pg != head)         /* the head: malloc takes from it now */
                    shoal_heap_trim_if_due(pg, &trims);
            } else if (pg != head || ++pg->idle_sweeps >= 2) {
                shoal_queue_remove(h, pg);
                shoal_heap_release_page(h, pg, SHOAL_TO_POOL);
            }
        }
    }
}

shoal_page_t *shoal_heap_page_for(shoal_heap_t *h, unsigned cls)
{
    /* The head with a block to give needs no search (the sampled
     * heap's blocks come home to its local list one by one, and a
     * search would walk the queue for each). */
    if (shoal_page_has_free(h->pages[cls]))
        return h->pages[cls];
    shoal_page_t *pg = search_queue(h, cls);
    return pg != NULL ? pg : fresh_page(h, cls);
}

/* A sweep was asked for (ask_sweep, below): the direct table again, and
 * the sweep. */
static __attribute__((noinline, cold)) void answer_sweep(shoal_heap_t *h)
{
    /* An exchange, acquire: it synchronizes with every asker whose flag
     * came before it, so the publish below comes after their entries. */
    atomic_exchange_explicit(&h->sweep_asked, false, memory_order_acquire);
    for (unsigned c = 0; c < SHOAL_CLASSES; c++)
        shoal_queue_publish(h, c);
    /* A pass that is overdue first, as the slow path's own would run it
     * at its end: what waited through an idle time goes back whole
     * (core/purge.c, catch_up), where a pass ticked by what the sweep
     * gives back would take only what waited two passes, and put the
     * slow path's off by a delay. */
    shoal_purger_slow_path();
    sweep_idle(h);
}

shoal_page_t *shoal_heap_find_page(unsigned cls)
{
    shoal_heap_t *h = shoal_tl_heap;
    if (h == &shoal_empty_heap && (h = heap_acquire()) == NULL)
        return NULL;
    if (shoal_unlikely(atomic_load_explicit(&h->sweep_asked, memory_order_acquire)))
        answer_sweep(h);
    shoal_page_t *head = h->pages[cls];
    if (shoal_page_has_free(head))      /* a call no fast path took: aligned, say */
        return head;
    if (!shoal_page_local_empty(head)) {
        /* The page in use ran dry but has blocks its owner freed: the
         * cheapest refill there is. */
        shoal_page_collect(head);
        return head;
    }
    if (!shoal_remote_inbox_empty(&h->inbox))
        shoal_heap_receive(h);
    if (shoal_unlikely(h->emptied != 0)) {
        h->emptied = 0;         /* a malloc searches: the stash is open */
        shoal_stash_fit(h);
    }
    if ((++h->slow_calls & 255) == 0)
        sweep_idle(h);
    shoal_page_t *pg = search_queue(h, cls);
    if (pg == NULL && shoal_orphanage_adopt(h, cls, 64) != 0)
        pg = search_queue(h, cls);
    return pg != NULL ? pg : fresh_page(h, cls);
}

/* ---- heap lifetime ---------------------------------------------------- */

/* What a heap struct takes in the areas they are cut from: whole OS
 * pages, so that the struct's first 6 KiB, which every heap touches,
 * lie on two pages and not three (a thread's heap is 8 KB of RSS, not
 * 12, where it uses a few classes). */
static size_t heap_struct_bytes(void)
{
    return shoal_align_up(sizeof(shoal_heap_t) +
                              SHOAL_CLASSES * SHOAL_STASH_MAX * sizeof(shoal_stashed_t),
                          SHOAL_OS_PAGE);
}

static shoal_heap_t *heap_new(void)
{
    ck_stack_entry_t *e = ck_stack_pop_mpmc(&free_heaps);
    if (e == NULL)
        e = ck_stack_pop_mpmc(&spare_heaps);
    if (e != NULL) {
        shoal_heap_t *h = container_of(e, shoal_heap_t, free_link);
        shoal_tsan_acquire(h);
        return h;
    }
    size_t sz = heap_struct_bytes();
    shoal_heap_t *h = NULL;
    shoal_lock(&area_lock);
    if (area_next == NULL || (size_t)(area_end - area_next) < sz) {
        char *area = shoal_os_reserve(SHOAL_SLOT_SIZE, SHOAL_SLOT_SIZE, SHOAL_OS_LAZY);
        if (area != NULL) {
            area_next = area;
            area_end = area + SHOAL_SLOT_SIZE;
        }
    }
    if (area_next != NULL && (size_t)(area_end - area_next) >= sz) {
        h = (shoal_heap_t *)area_next;
        area_next += sz;
    }
    shoal_unlock(&area_lock);
    if (h == NULL)
        return NULL;
    h->outbox_slot = (uint8_t)(atomic_fetch_add_explicit(&heaps_made, 1, memory_order_relaxed) %
                               SHOAL_OUTBOX_SLOTS);
    shoal_heap_setup(h);
    return h;
}

static shoal_heap_t *heap_acquire(void)
{
    shoal_process_init();
    tl_transit = &shoal_empty_heap;     /* popping one */
    atomic_signal_fence(memory_order_seq_cst);
    shoal_heap_t *h = heap_new();
    atomic_signal_fence(memory_order_seq_cst);
    tl_transit = h;
    atomic_signal_fence(memory_order_seq_cst);
    if (h == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    atomic_store_explicit(&h->live, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&heaps_created, 1, memory_order_relaxed);
    size_t live = atomic_fetch_add_explicit(&heaps_live, 1, memory_order_relaxed) + 1;
    shoal_peak_update(&heaps_live_peak, live);
    shoal_large_cache_share(h, live);
    shoal_tl_heap = h;
    shoal_huge_slot_bind(&h->huge_slot);
    atomic_signal_fence(memory_order_seq_cst);
    tl_transit = NULL;
    if (!tl_exited)
        pthread_setspecific(exit_key, h);
    shoal_heap_prof_check();
    return h;
}

/* h's full pages, chained through `next` (h's holder).  They are in no
 * list: the pool's descriptors are walked for the pages whose owner word
 * names h as full - a value only h's holder writes - until all h counts
 * are found.  The walk reads a descriptor of every slot of the pool
 * (about 0.3 ms a GiB): it runs before the orphanage is taken, which
 * fork and adoptions wait for. */
static shoal_page_t *gather_full_pages(shoal_heap_t *h)
{
    uintptr_t full = (uintptr_t)h | SHOAL_PAGE_FULL;
    shoal_page_t *chain = NULL;
    size_t want = h->full_pages, n = shoal_pool_count();
    for (size_t i = 0; i < n && want != 0; i++) {
        shoal_superpage_t *sp = shoal_pool_superpage(i);
        for (unsigned slot = 1; slot < SHOAL_SP_SLOTS; slot++) {
            shoal_page_t *pg = &sp->pages[slot];
            if (atomic_load_explicit(&pg->owner, memory_order_relaxed) == full) {
                pg->next = chain;
                chain = pg;
                want--;
            }
        }
    }
    return chain;
}

/* The first page of a chain gather_full_pages made, taken off it: its
 * `next` is NULL again, as a full page's is (it is in no list). */
static shoal_page_t *chain_pop(shoal_page_t **chain)
{
    shoal_page_t *pg = *chain;
    *chain = pg->next;
    pg->next = NULL;
    return pg;
}

/* Give away everything a parked heap holds: empty pages to the pool (as
 * unused for a purge delay: the heap has been parked that long, or the
 * pass is forced), pages with live blocks to the orphanage.  Blocks sent
 * to h later are forwarded by its next holder (remote.h).  False, and
 * nothing given away, when the orphanage is not to be had (orphanage.h);
 * what waited in h's inbox has come home then. */
static bool heap_dismantle(shoal_heap_t *h, bool force)
{
    shoal_heap_receive(h);      /* first: a block home may take a page off the full ones */
    shoal_page_t *full = gather_full_pages(h);
    if (!shoal_orphanage_take(force)) {
        while (full != NULL)
            chain_pop(&full);
        return false;
    }
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        while (h->pages[c] != &shoal_empty_page) {
            shoal_page_t *pg = h->pages[c];
            shoal_queue_remove(h, pg);
            shoal_page_collect(pg);
            if (shoal_page_all_home(pg))
                shoal_heap_release_page(h, pg, SHOAL_TO_POOL_IDLE);
            else
                shoal_orphanage_put(pg);
        }
    }
    while (full != NULL) {
        shoal_page_t *pg = chain_pop(&full);
        shoal_full_remove(h, pg);
        shoal_orphanage_put(pg);
    }
    shoal_orphanage_give();
    drain_cache(h);
    return true;
}

/* The heap's thread is done with it.  The heap is parked whole, pages,
 * caches and all, on the stack of free heaps: the next thread that
 * starts takes it over warm (a pool of worker threads that come and go
 * reuses the same pages, formatted for the same classes, and touches no
 * new memory), and remote frees into its pages go on as before, to a
 * heap that is owned again as soon as someone pops it.  A heap parked
 * for a purge delay is emptied by the purge pass (retire_parked). */
static void heap_give_up(shoal_heap_t *h)
{
    tl_transit = h;
    atomic_signal_fence(memory_order_seq_cst);
    shoal_tl_heap = &shoal_empty_heap;
    shoal_huge_slot_bind(NULL);
    shoal_remote_send_all(h);   /* nothing waits in an outbox nobody holds */
    drain_cache(h);             /* what is not a page is anyone's to reuse */
    h->parked_ms = shoal_os_now_ms();
    atomic_store_explicit(&h->live, 0, memory_order_relaxed);
    atomic_fetch_sub_explicit(&heaps_live, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&heaps_exited, 1, memory_order_relaxed);
    shoal_tsan_release(h);
    ck_stack_push_mpmc(&free_heaps, &h->free_link);
    atomic_signal_fence(memory_order_seq_cst);
    tl_transit = NULL;
    shoal_purge_note_free();
}

static void thread_exit(void *arg)
{
    tl_exited = true;
    heap_give_up(arg);
    shoal_purger_slow_path();
    shoal_purger_thread_exiting();
}

void shoal_heap_end_call(void)
{
    if (shoal_unlikely(tl_exited) && shoal_tl_heap != &shoal_empty_heap)
        heap_give_up(shoal_tl_heap);
}

/* Whether a parked heap has anything to dismantle. */
static bool heap_holds_memory(const shoal_heap_t *h)
{
    if (h->full_pages != 0 || h->cached != 0 || h->large_held_slots != 0 ||
        (h->large_cached_slots != 0 && h->large_cached_slots != SHOAL_LARGE_CACHE_CLOSED))
        return true;
    for (unsigned c = 0; c < SHOAL_CLASSES; c++)
        if (h->pages[c] != &shoal_empty_page)
            return true;
    return false;
}

/* Pop every heap off `stack` (one at a time: a pop that bumps the
 * stack's generation, so that a thread popping meanwhile cannot take a
 * heap pushed back as the top it read before), as a list oldest first:
 * popping one makes us its only holder, as a thread that takes it over
 * would be. */
static shoal_heap_t *unpark_all(ck_stack_t *stack)
{
    shoal_heap_t *list = NULL, *h;
    ck_stack_entry_t *e;
    while ((e = ck_stack_pop_mpmc(stack)) != NULL) {
        h = container_of(e, shoal_heap_t, free_link);
        shoal_tsan_acquire(h);
        h->next_parked = list;
        list = h;
    }
    return list;
}

/* Push a list of heaps (linked by next_parked) back on `stack`, in its
 * order: the last ends on top. */
static void park_all(ck_stack_t *stack, shoal_heap_t *list)
{
    shoal_heap_t *h;
    while ((h = list) != NULL) {
        list = h->next_parked;
        shoal_tsan_release(h);
        ck_stack_push_mpmc(stack, &h->free_link);
    }
}

/* Whether a heap parked since `parked_ms` has waited a purge delay. */
static bool parked_long(const shoal_heap_t *h, bool force, long delay, uint64_t now)
{
    return force || (delay >= 0 && now - h->parked_ms >= (uint64_t)delay);
}

/* Give away what parked heaps hold once they have been parked for a
 * purge delay (all of them with `force`; none with `receive_only`).
 *
 * The heaps parked less than a delay go back at once, untouched, in the
 * order they came off: a thread that starts while the pass runs must
 * find them there.  (Held for their inboxes' sake, a thread that started
 * meanwhile made a heap from nothing, and a generation of workers kept
 * two heaps' pages for a delay.)  Their inboxes wait for the thread that
 * takes them over, or for the pass that finds them due; the blocks there
 * are of their own pages, which they keep until then anyway.  A heap due
 * takes its inbox and is dismantled, and goes on the spare stack, empty;
 * every spare heap's inbox is taken at every pass, as blocks sent before
 * its pages moved on may still reach it (remote.h forwards them).  With
 * `receive_only` every heap's inbox is taken and none is dismantled.
 * Returns how many parked heaps still hold memory or blocks (a later
 * pass will retire them). */
static size_t retire_parked(bool force, bool receive_only)
{
    long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
    uint64_t now = shoal_os_now_ms();
    size_t waiting = 0;
    shoal_heap_t *warm = NULL, **warm_end = &warm, *due = NULL, *h, *next;
    for (h = unpark_all(&free_heaps); h != NULL; h = next) {
        next = h->next_parked;
        if (receive_only || parked_long(h, force, delay, now)) {
            h->next_parked = due;
            due = h;
            continue;
        }
        waiting += heap_holds_memory(h) || !shoal_remote_inbox_empty(&h->inbox);
        h->next_parked = NULL;
        *warm_end = h;
        warm_end = &h->next_parked;
    }
    park_all(&free_heaps, warm);
    /* `due` is newest first: what goes back parked (a dismantle that
     * failed, the orphanage busy; every heap with `receive_only`) is
     * gathered oldest first, and the newest ends on top again. */
    shoal_heap_t *spare = unpark_all(&spare_heaps), *kept = NULL;
    for (h = due; h != NULL; h = next) {
        next = h->next_parked;
        shoal_heap_receive(h);
        bool emptied = !receive_only && (!heap_holds_memory(h) || heap_dismantle(h, force));
        waiting += !receive_only && !emptied;
        shoal_heap_t **to = emptied ? &spare : &kept;
        h->next_parked = *to;
        *to = h;
    }
    park_all(&free_heaps, kept);
    for (h = spare; h != NULL; h = h->next_parked)
        shoal_heap_receive(h);
    park_all(&spare_heaps, spare);
    return waiting;
}

/* One reclaim at a time.  A forced one (alloc_collect(true), a failing
 * allocation, every pass with PURGE_DELAY_MS=0) waits for another
 * thread's to end: it promises everything back.  None runs from inside
 * itself: giving pages back can run a purge pass on this very thread. */
/* A turn (sync.h): a reclaim sees what the one before it left (the heaps
 * it parked back, the orphanage's pages). */
static atomic_flag reclaiming = ATOMIC_FLAG_INIT;
static __thread bool tl_reclaiming __attribute__((tls_model("initial-exec")));
/* This thread rebuilds a fork child's vanished pages, holding the turn
 * (below). */
static __thread bool tl_recovering __attribute__((tls_model("initial-exec")));

/* A live heap whose thread calls the allocator seldom, or whose mallocs
 * find freed blocks in its pages without a search, sweeps seldom: what
 * its caches hold, what its pages could give back (sweep_idle) and what
 * other threads freed into its pages, waiting in its inbox, wait with
 * it.  One that has not swept for two delays is asked to, at its next
 * malloc of a page's block: its direct table is pointed at the empty
 * page, where that malloc finds nothing and takes the slow path, whose
 * shoal_heap_find_page sweeps and publishes the table again.  No cost
 * on the fast path, and one slow path a heap in two delays.  Two
 * threads ask: a purge pass, and the purger thread each time it wakes
 * (at least once a second: shoal_heap_scan_idle, below), which a full
 * outbox sent starts where none runs (remote.c) - where another
 * thread frees what a thread allocated from its fast paths alone, the
 * blocks in its inbox and the pages they empty would otherwise wait for
 * ever, for no pass runs while nothing waits for one.
 *
 * The flag goes up after the entries, with a release; the holder takes
 * it down with an exchange that acquires.  Each asker's entries then
 * come before the holder's publish: the exchange reads the last flag
 * store before it, so it synchronizes with every asker whose store
 * came before the exchange, and an asker whose store comes after
 * leaves the flag up for the next answer.  A holder's publish before
 * the flag may keep an entry from the empty page (the next ask comes
 * again), and its malloc may see the empty page before the flag (it
 * takes the slow path without sweeping, and sees the flag at the
 * next).  A heap that makes no such malloc at all keeps what it holds
 * (docs/design.md, Known limits). */
static void ask_sweep(shoal_heap_t *h, uint64_t now, long delay)
{
    if (!atomic_load_explicit(&h->live, memory_order_relaxed) ||
        atomic_load_explicit(&h->sweep_asked, memory_order_relaxed) ||
        now - atomic_load_explicit(&h->swept_ms, memory_order_relaxed) < 2 * (uint64_t)delay)
        return;
    for (size_t i = 0; i < SHOAL_DIRECT_ENTRIES; i++)
        atomic_store_explicit(&h->direct[i], &shoal_empty_page, memory_order_relaxed);
    /* Release, after the entries: pairs with answer_sweep's exchange. */
    atomic_store_explicit(&h->sweep_asked, true, memory_order_release);
}

static void ask_sweeps(shoal_heap_t *all)
{
    long delay = shoal_opt(ALLOC_OPTION_PURGE_DELAY_MS);
    if (delay <= 0)
        return;
    uint64_t now = shoal_os_now_ms();
    for (shoal_heap_t *h = all; h != NULL; h = h->next_all)
        ask_sweep(h, now, delay);
}

size_t shoal_heap_reclaim(bool force)
{
    /* Nor from inside an adoption: the thread that holds the orphanage
     * must wait for nothing (a forced reclaim may be waiting for it).
     * Nor from inside a fork child's rebuild, which holds the turn: its
     * sends can run a pass (at once, and forced, with PURGE_DELAY_MS=0),
     * which would wait for the turn for ever. */
    if (tl_reclaiming || tl_recovering || shoal_orphanage_held())
        return 1;               /* a later pass looks again */
    if (!shoal_turn_take(&reclaiming, force))
        return 1;
    tl_reclaiming = true;
    size_t waiting = retire_parked(force, false);
    waiting += shoal_orphanage_reclaim(force);
    /* Huge mappings that live threads keep for reuse, unused for a pass:
     * claimed, then taken after one barrier for all (huge.h).  A forced
     * pass promises everything back: where the purger has not registered
     * the process for the barrier, it does, waiting out the kernel's
     * grace period (milliseconds, once). */
    shoal_heap_t *all = atomic_load_explicit(&all_heaps, memory_order_acquire), *h;
    ask_sweeps(all);
    bool claimed = false;
    for (h = all; h != NULL; h = h->next_all)
        claimed |= shoal_huge_slot_age(&h->huge_slot, force, &waiting);
    if (claimed) {
        bool fenced = shoal_os_barrier_all() ||
                      (force && shoal_os_barrier_register() && shoal_os_barrier_all());
        for (h = all; h != NULL; h = h->next_all)
            shoal_huge_slot_take_claimed(&h->huge_slot, force, fenced, &waiting);
    }
    tl_reclaiming = false;
    shoal_turn_give(&reclaiming);
    return waiting;
}

enum shoal_huge_freed shoal_heap_huge_slots_hold(const void *p)
{
    enum shoal_huge_freed place = SHOAL_HUGE_NOT_FREED;
    for (shoal_heap_t *h = atomic_load_explicit(&all_heaps, memory_order_acquire);
         h != NULL && place == SHOAL_HUGE_NOT_FREED; h = h->next_all)
        place = shoal_huge_slot_holds(&h->huge_slot, p);
    return place;
}

/* One scan at a time, and none across a fork: a claim the child kept
 * would never be let go. */
static shoal_lock_t scan_lock = SHOAL_LOCK_INIT;

bool shoal_heap_outboxes_hold(void)
{
    for (shoal_heap_t *h = atomic_load_explicit(&all_heaps, memory_order_acquire); h != NULL;
         h = h->next_all)
        if (shoal_remote_outbox_holds(h))
            return true;
    return false;
}

void shoal_heap_scan_idle(void)
{
    shoal_heap_t *all = atomic_load_explicit(&all_heaps, memory_order_acquire), *h;
    ask_sweeps(all);
    if (!shoal_remote_stealer_runs())
        return;
    shoal_lock(&scan_lock);
    uint32_t scan = shoal_remote_scan_begin();
    bool claimed = false;
    for (h = all; h != NULL; h = h->next_all)
        claimed |= shoal_remote_claim_idle(h, scan);
    shoal_remote_scan_end(scan);
    if (claimed) {
        bool fenced = shoal_os_barrier_all();
        if (!fenced)
            shoal_remote_stealer_set(false);    /* blocks wait for their holders again */
        for (h = all; h != NULL; h = h->next_all)
            shoal_remote_take_claimed(h, fenced);
    }
    shoal_unlock(&scan_lock);
}

/* In a fork child, heaps made in the parent do not count: the child has
 * one thread (whose heap counts as one) until it starts more. */
static size_t created_in_parent;

size_t shoal_heaps_live(void)
{
    return atomic_load_explicit(&heaps_live, memory_order_relaxed);
}

size_t shoal_heap_created(void)
{
    return atomic_load_explicit(&heaps_created, memory_order_relaxed) - created_in_parent;
}

bool shoal_heap_collect(void)
{
    recover_vanished(NULL);
    shoal_heap_t *h = shoal_tl_heap;
    if (h == &shoal_empty_heap)
        return false;
    shoal_remote_send_all(h);
    size_t got = shoal_heap_receive(h);
    shoal_stash_drain(h);
    bool trim = trims_on();
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        shoal_page_t *pg = h->pages[c];
        while (pg != &shoal_empty_page) {
            shoal_page_t *next = pg->next != NULL ? pg->next : &shoal_empty_page;
            shoal_page_collect(pg);
            if (shoal_page_all_home(pg)) {
                shoal_queue_remove(h, pg);
                shoal_heap_release_page(h, pg, SHOAL_TO_POOL);
            } else if (trim && shoal_page_trim_worth(pg)) {
                shoal_page_trim(pg);
            }
            pg = next;
        }
    }
    drain_cache(h);
    return got != 0;
}

/* ---- heaps a fork left without their thread -----------------------------
 * In the child of a fork, the parent's other threads do not exist, and
 * each may have stopped anywhere in an edit of its heap: its queues, a
 * page's lists, its outbox.  Those heaps are *vanished*: no thread takes
 * them again and nothing walks their lists.  A page of theirs is
 * rebuilt from the blocks themselves (shoal_page_rebuild: a block
 * carrying its page's freed mark is free) when the child first frees a
 * block of it, and goes to the orphanage, where the child's heaps adopt
 * it as they adopt an exited thread's pages - so a child that frees what
 * the parent's threads made reuses that memory.  One page at a time: the
 * rebuild writes a link into each free block, and a page is shared with
 * the parent until the child writes to it (rebuilding them all at the
 * first free made the child copy every page of theirs that held a free
 * block: 513 MiB for one free).  alloc_collect gives back the ones with
 * no block live, counted by their marks without a store.
 *
 * Counting by marks needs every free block of those pages to be nowhere
 * but where the rebuild finds it, and nowhere after it:
 *   - a vanished heap's inbox is closed: never taken, and a send to it
 *     is dropped (its blocks are counted by their marks instead);
 *   - until its page is rebuilt, a block of a vanished heap freed in the
 *     child keeps its mark and goes nowhere (remote_free_slow);
 *   - a block of a vanished heap's page may be on its way to another
 *     heap, one that owned the page before (a block freed before the
 *     page was adopted waits in the outbox of its freer, or in the old
 *     owner's inbox, to be forwarded).  Before the first rebuild, this
 *     thread sends its outbox and takes every inbox that may hold one -
 *     its own heap's, the parked heaps', the orphanage's: each such
 *     block is forwarded to its page's vanished heap, and dropped there
 *     (settle_queues).  No other outbox can send: the other threads'
 *     heaps are vanished or parked, and a parked heap's outbox is empty;
 *     and from then on nothing sends a block of a vanished page anywhere.
 * And no free may be under way during the rebuild: a free marks its
 * block before it reads the page's owner, so a free between the two as
 * the owner changes would put its block on the rebuilt list and send it
 * to the new owner as well.  So a rebuild runs only when /proc says
 * the child has no thread but this one and shoal's purger (only this
 * thread could start another, and it is busy here; the purger frees no
 * program's block, and runs no pass while the rebuild holds the reclaim
 * turn).  It is tried at the child's frees into vanished heaps' pages
 * and at alloc_collect - places where this thread is in no edit of its
 * own heap - looking at /proc less and less often, up to once a second,
 * while another thread is there (alone_now).  A child with a thread of its own keeps those pages
 * until it is alone again (docs/design.md, Known limits).
 *
 * Which heaps vanished: every heap a thread owned at the fork but the
 * forking thread's own, every one popped from the parked stack and not
 * pushed back (a reclaim or a take-over that a vanished thread was in),
 * and every one an earlier fork left vanished.  A fork from a signal
 * handler that interrupted this thread in such a step leaves the heap
 * it was taking or giving up (tl_transit) and, if it was popping (a
 * reclaim, a take-over, a rebuild's settle_queues), every heap off the
 * stack: it goes on with them when the handler returns. */

/* Whether vanished pages wait for a rebuild, whether the queues have
 * been settled (below), when to look again at the thread count, and how
 * long to wait after the next look that finds another thread (relaxed:
 * hints; set by the fork child's one thread, changed by the rebuild,
 * which runs only while it is alone). */
static _Atomic bool vanished_pending, vanished_settled;
static _Atomic uint64_t vanished_next_look_ms;
#define VANISHED_FIRST_WAIT_MS 4
static _Atomic uint32_t vanished_wait_ms = VANISHED_FIRST_WAIT_MS;
/* Remote frees that will never be received: those that were on their way
 * at the fork (statistics: they are not in flight). */
static _Atomic uint64_t remote_written_off;

/* Whether the rebuild may run now: no thread but this one and the purger
 * (which frees no program's block, and runs no pass while the rebuild
 * holds the reclaim turn).  /proc is read again for each rebuild (this
 * thread may have started one since); after it said no, not for 4 ms,
 * then twice as long each time, up to a second.  A thread the child has
 * just joined is still counted there for a moment (pthread_join returns
 * once the kernel cleared its tid, before the thread leaves its group):
 * a whole second's wait after that moment kept the pages of the child's
 * frees from it, and the child took new memory for its next blocks
 * (drop_in_fork_reuse_after_thread, 5 runs in 40). */
static bool alone_now(void)
{
    uint64_t now = shoal_os_now_ms();
    if (now < atomic_load_explicit(&vanished_next_look_ms, memory_order_relaxed))
        return false;
    long n = shoal_os_threads();
    if (n == 1 || (n == 2 && shoal_purger_running())) {
        atomic_store_explicit(&vanished_wait_ms, VANISHED_FIRST_WAIT_MS, memory_order_relaxed);
        return true;
    }
    uint32_t wait = atomic_load_explicit(&vanished_wait_ms, memory_order_relaxed);
    atomic_store_explicit(&vanished_next_look_ms, now + wait, memory_order_relaxed);
    atomic_store_explicit(&vanished_wait_ms, wait < 512 ? wait * 2 : 1000, memory_order_relaxed);
    return false;
}

/* Once, before the first page is rebuilt: send this thread's outbox and
 * take every inbox that may hold a block of a vanished page on its way
 * to a former owner (above), so that each goes to its vanished heap and
 * is dropped.  Every free still counted in flight is then written off. */
static void settle_queues(void)
{
    shoal_heap_t *me = shoal_tl_heap;
    if (me != &shoal_empty_heap) {
        shoal_remote_send_all(me);
        shoal_heap_receive(me);
    }
    retire_parked(false, true);
    if (!shoal_orphanage_take(false))
        return;
    shoal_heap_receive(&shoal_orphans);
    shoal_orphanage_give();
    shoal_heap_stats_t st;
    shoal_heap_stats(&st);
    if (st.remote_frees > st.remote_received)
        atomic_fetch_add_explicit(&remote_written_off, st.remote_frees - st.remote_received,
                                  memory_order_relaxed);
    atomic_store_explicit(&vanished_settled, true, memory_order_relaxed);
}

/* Rebuild `pg`, a vanished page this thread has just freed a block of;
 * or, with pg NULL (alloc_collect), give back every vanished page with no
 * block live.  Nothing if the rebuild may not run now (above).  The
 * caller is in no edit of its own heap. */
static void recover_vanished(shoal_page_t *pg)
{
    if (!atomic_load_explicit(&vanished_pending, memory_order_relaxed) || tl_recovering ||
        tl_reclaiming || shoal_orphanage_held() || !alone_now())
        return;
    tl_recovering = true;
    shoal_turn_take(&reclaiming, true);     /* no purge pass meanwhile */
    if (!atomic_load_explicit(&vanished_settled, memory_order_relaxed))
        settle_queues();
    if (atomic_load_explicit(&vanished_settled, memory_order_relaxed) &&
        shoal_orphanage_take(false)) {
        if (pg != NULL) {
            shoal_page_rebuild(pg);
            if (pg->used == 0)
                shoal_heap_release_page(&shoal_orphans, pg, SHOAL_TO_POOL);
            else
                shoal_orphanage_put(pg);
        } else {
            bool left = false;
            size_t n = shoal_pool_count();
            for (size_t i = 0; i < n; i++) {
                shoal_superpage_t *sp = shoal_pool_superpage(i);
                for (unsigned slot = 1; slot < SHOAL_SP_SLOTS; slot++) {
                    shoal_page_t *p = &sp->pages[slot];
                    shoal_heap_t *h;
                    if (p->kind != SHOAL_SLOT_PAGE || (h = shoal_page_heap(p)) == NULL ||
                        !h->vanished)
                        continue;
                    /* Counted with loads only: a page shared with the
                     * parent is not copied to be given back. */
                    if (shoal_page_none_live(p))
                        shoal_heap_release_page(&shoal_orphans, p, SHOAL_TO_POOL);
                    else
                        left = true;                        /* still vanished */
                }
            }
            atomic_store_explicit(&vanished_pending, left, memory_order_relaxed);
        }
        shoal_orphanage_give();
    }
    shoal_turn_give(&reclaiming);
    tl_recovering = false;
}

/* In the fork child: mark the vanished heaps (above).  A vanished heap
 * stops counting as live, and its inbox is closed.  The count of live
 * heaps is made again: a thread may have stopped between a heap's live
 * flag and that count. */
static void mark_vanished(void)
{
    bool own_pops = tl_transit != NULL || tl_reclaiming || tl_recovering;
    size_t live = 0, found = 0;
    shoal_heap_t *h;
    for (h = atomic_load_explicit(&all_heaps, memory_order_acquire); h != NULL; h = h->next_all)
        h->vanished = h->vanished ||
                      (h != shoal_tl_heap && h != tl_transit && h != &shoal_orphans &&
                       h != &shoal_sampled_heap &&
                       (atomic_load_explicit(&h->live, memory_order_relaxed) || !own_pops));
    ck_stack_entry_t *e;
    CK_STACK_FOREACH(&free_heaps, e)
        container_of(e, shoal_heap_t, free_link)->vanished = false;    /* parked */
    CK_STACK_FOREACH(&spare_heaps, e)
        container_of(e, shoal_heap_t, free_link)->vanished = false;
    for (h = atomic_load_explicit(&all_heaps, memory_order_acquire); h != NULL; h = h->next_all) {
        if (h->vanished) {
            atomic_store_explicit(&h->live, 0, memory_order_relaxed);
            shoal_remote_close(h);
            found++;
        }
        live += atomic_load_explicit(&h->live, memory_order_relaxed) != 0;
    }
    atomic_store_explicit(&heaps_live, live, memory_order_relaxed);
    atomic_store_explicit(&vanished_pending, found != 0, memory_order_relaxed);
    atomic_store_explicit(&vanished_settled, false, memory_order_relaxed);
    atomic_store_explicit(&vanished_next_look_ms, 0, memory_order_relaxed);
}

void shoal_heap_fork_prepare(void)
{
    shoal_lock(&scan_lock);
    shoal_lock(&area_lock);
    shoal_orphanage_fork_lock();
}

void shoal_heap_fork_parent(void)
{
    shoal_orphanage_fork_unlock();
    shoal_unlock(&area_lock);
    shoal_unlock(&scan_lock);
}

void shoal_heap_fork_child(bool locked)
{
    void (*fork_child)(void) = atomic_load_explicit(&fork_child_hook, memory_order_acquire);
    if (fork_child != NULL)
        fork_child();
    size_t created = atomic_load_explicit(&heaps_created, memory_order_relaxed);
    created_in_parent = created != 0 ? created - 1 : 0;
    if (!locked)
        return;         /* no other thread: nothing was left half done */
    /* A thread that was sending when the parent forked does not exist
     * here, and may have left an inbox's tail ahead of its last link; one
     * that was in its huge slot's turn, or a pass's claim, is gone too. */
    for (shoal_heap_t *h = atomic_load_explicit(&all_heaps, memory_order_acquire); h != NULL;
         h = h->next_all) {
        shoal_remote_fork_child(h, h == shoal_tl_heap);
        shoal_huge_slot_fork_child(&h->huge_slot, h == shoal_tl_heap);
    }
    mark_vanished();
    if (shoal_tl_heap != &shoal_empty_heap)
        shoal_stash_forget_vanished(shoal_tl_heap);
    /* A reclaim that a vanished thread was running never ends here: what
     * it had popped is lost to the child, and the child's own forced
     * reclaims must not wait for it. */
    atomic_flag_clear_explicit(&reclaiming, memory_order_relaxed);
    shoal_orphanage_fork_unlock();
    shoal_unlock(&area_lock);
    shoal_unlock(&scan_lock);
}

void shoal_heap_stats(shoal_heap_stats_t *st)
{
    st->live = atomic_load_explicit(&heaps_live, memory_order_relaxed);
    st->live_peak = atomic_load_explicit(&heaps_live_peak, memory_order_relaxed);
    st->created = atomic_load_explicit(&heaps_created, memory_order_relaxed);
    st->exited = atomic_load_explicit(&heaps_exited, memory_order_relaxed);
    st->abandoned_pages = shoal_orphanage_pages();
    st->structs = atomic_load_explicit(&heaps_made, memory_order_relaxed);
    st->struct_bytes = heap_struct_bytes();
    st->adopted = 0;
    st->remote_atomics = atomic_load_explicit(&shoal_remote_orphan_atomics, memory_order_relaxed);
    st->remote_frees = atomic_load_explicit(&orphan_remote_frees, memory_order_relaxed);
    st->remote_received = atomic_load_explicit(&remote_written_off, memory_order_relaxed);
    st->large_allocs = atomic_load_explicit(&shoal_large_orphan_allocs, memory_order_relaxed);
    uint64_t by_slots[SHOAL_LARGE_SLOTS + 1];
    for (unsigned m = 0; m <= SHOAL_LARGE_SLOTS; m++)
        by_slots[m] = atomic_load_explicit(&shoal_large_orphan_live[m], memory_order_relaxed);
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        st->allocs[c] = 0;
        st->frees[c] = atomic_load_explicit(&orphan_frees[c], memory_order_relaxed);
        st->pages[c] = 0;
    }
    for (shoal_heap_t *h = atomic_load_explicit(&all_heaps, memory_order_acquire); h != NULL;
         h = h->next_all) {
        shoal_heap_counters_t *k = &h->stats;
        st->adopted += shoal_counter_read(&k->pages_adopted);
        st->remote_frees += shoal_counter_read(&k->remote_frees);
        st->remote_received += shoal_counter_read(&k->remote_received);
        st->remote_atomics += shoal_counter_read(&k->remote_atomics);
        st->large_allocs += shoal_counter_read(&k->large_allocs);
        for (unsigned m = 0; m <= SHOAL_LARGE_SLOTS; m++)
            by_slots[m] += shoal_counter_read(&k->large_live[m]);
        for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
            st->allocs[c] += shoal_counter_read(&k->allocs[c]);
            st->frees[c] += shoal_counter_read(&k->frees[c]);
            st->pages[c] += shoal_counter_read(&k->pages[c]);
        }
    }
    /* Derived: a large block out is live until it comes back; by order
     * of its size (the bins of the statistics), its bytes exact. */
    uint64_t live = 0;
    st->large_bytes = 0;
    memset(st->large_live, 0, sizeof st->large_live);
    memset(st->large_bin_bytes, 0, sizeof st->large_bin_bytes);
    for (unsigned m = 1; m <= SHOAL_LARGE_SLOTS; m++) {
        unsigned o = shoal_large_order((size_t)m << SHOAL_SLOT_SHIFT);
        uint64_t bytes = by_slots[m] * ((uint64_t)m << SHOAL_SLOT_SHIFT);
        live += by_slots[m];
        st->large_live[o] += by_slots[m];
        st->large_bin_bytes[o] += bytes;
        st->large_bytes += bytes;
    }
    st->large_frees = st->large_allocs - live;
}

void shoal_heap_huge_stats(shoal_huge_stats_t *st)
{
    for (shoal_heap_t *h = atomic_load_explicit(&all_heaps, memory_order_acquire); h != NULL;
         h = h->next_all)
        shoal_huge_slot_stats(&h->huge_slot, st);
}
