/* stash.h - a heap's stash: blocks whose free would have brought a full
 * page back to its queue, kept for the next malloc of their class that
 * finds its page dry.
 *
 * When the blocks of a class are replaced at random, every page holds
 * all its blocks but a free one or two: nearly every free lands in a
 * full page, which goes back to its queue (page_queue.h), and nearly
 * every malloc that ends a page walks the queue to find the block that
 * free left, after which the page is full again.  Pages of 8-64 KiB
 * blocks hold 2 to 25, and there the two transitions were most of a
 * replacement's cost: 64 live blocks of 20000 B, 225 instructions a
 * step, four times tcmalloc's time.  The stash cuts both out: such a
 * free keeps the block here (its page stays full, its `used` counts the
 * block), and malloc's dry path takes it back before it walks, still in
 * cache - a block freed by this thread a moment ago, as a thread cache
 * would hand out.  Only these frees, frees of other heaps' blocks
 * (foreign blocks, below) and that path touch the stash: the fast paths
 * are as they were.
 *
 * Up to SHOAL_STASH_MIN blocks a class, held in the heap's array (nothing
 * is written into the blocks but their freed mark, which free wrote: a
 * second free of a stashed block is a double free, as for any free
 * block, and malloc takes one back only if the mark is still there);
 * more in a heap with many full pages (heap.h).  Where frees and mallocs
 * of a class come in random order, its stash goes up and down as a
 * random walk, and overflows (the free puts its page back in the queue)
 * or runs dry (the malloc walks) about once in as many steps as it
 * holds blocks: 100,000 values of 64-4000 B replaced at random walked
 * 94,000 times in 400,000 steps with 4 a class, and that heap holds
 * 3,200 full pages, where 16 blocks a class are nothing.  A heap of a few
 * MiB, which a program's many threads may each have, keeps 4 (bench/
 * larson: 30 full pages; its peak RSS grew 2-3% with 8 for every heap).
 * Each stashed block keeps its page from going back to the pool, so the
 * stash is emptied into the pages wherever a heap's caches are - at the
 * idle sweep if no malloc took from it since the sweep before, at
 * alloc_collect, when memory runs short, and at thread exit - and
 * closed, emptied, when SHOAL_STASH_EMPTIED pages empty with no malloc
 * searching for a block in between: a program that frees what it held
 * (a server's FLUSHALL) and then idles would otherwise keep a page for
 * each block stashed on the way, for as long as it idles, since its idle
 * sweep runs on its own slow paths (redis after FLUSHALL: 2 MiB of
 * 512 KiB pages of 16-18 KiB blocks with none live).  The next search
 * opens it again (shoal_heap_find_page).  While the
 * heap is profiled, a block the stash hands out passes no page's trap:
 * the thread's count of such bytes samples it (profile.h,
 * shoal_prof_pass), as it samples large and huge blocks.  Only the
 * heap's holder touches it.
 */
#ifndef SHOAL_STASH_H
#define SHOAL_STASH_H

#include "heap.h"

/* The stash's size a class for h's count of full pages, which just
 * changed (page_queue.c), or since a malloc searched again (h's
 * holder): none while the stash is closed, and none before h's first
 * full page, which needs none (only a free into a full page stashes).  A class that holds more
 * than a smaller size allows keeps them until mallocs take them. */
static inline void shoal_stash_fit(shoal_heap_t *h)
{
    size_t more = h->full_pages >> SHOAL_STASH_SHIFT;
    h->stash_cap = (uint8_t)(h->emptied >= SHOAL_STASH_EMPTIED ? 0
                             : more < SHOAL_STASH_MAX - SHOAL_STASH_MIN
                                 ? SHOAL_STASH_MIN + more
                                 : SHOAL_STASH_MAX);
}

/* Stash b, which the holder of h freed into pg - one of h's full pages,
 * or another heap's page where shoal_stash_foreign_wanted (below) said
 * so - its freed mark written, the free counted; false if the stash of
 * its class is full (or closed), and then nothing is done. */
static inline bool shoal_stash_put(shoal_heap_t *h, shoal_page_t *pg, shoal_block_t *b)
{
    unsigned c = pg->size_class, n = h->stashed[c];
    if (n >= h->stash_cap)
        return false;
    h->stash[c][n] = (shoal_stashed_t){ b, shoal_freed_mark(pg) };
    h->stashed[c] = (uint8_t)(n + 1);
    return true;
}

/* Foreign blocks.  A block of another heap's page that the holder of h
 * frees may stay here, for h's next malloc of its class, where that
 * malloc would find h's page of the class dry and so take it: the
 * block, hot in this thread's cache, is used again at once instead of
 * travelling home through the owner's inbox, where it would wait for the
 * owner's next slow path (docs/design.md, Remote frees, step 6).  The
 * drain sends such a block home.  Whether h's page of class c is dry
 * so (h has one, and neither of its lists holds a block): the test on
 * the remote free's way, a load and a compare where h has no page of
 * the class, as a thread that only frees has none. */
static inline bool shoal_stash_foreign_wanted(const shoal_heap_t *h, unsigned c)
{
    const shoal_page_t *head = h->pages[c];
    return head != &shoal_empty_page && !shoal_page_has_free(head) &&
           shoal_page_local_empty(head);
}

/* Whether the stash holds a block of class c. */
static inline bool shoal_stash_holds(const shoal_heap_t *h, unsigned c)
{
    return h->stashed[c] != 0;
}

/* The block of class c stashed last, taken out of the stash, which
 * holds one, with its page's mark. */
static inline shoal_stashed_t shoal_stash_pop(shoal_heap_t *h, unsigned c)
{
    h->stash_used = true;
    return h->stash[c][--h->stashed[c]];
}

/* Hand out s.block, popped from the stash of class c: as malloc's
 * free-block test, the mark free wrote must still be there (its
 * clearing and the count follow); false, and nothing done, if something
 * wrote into the block after its free - the caller reports it
 * (shoal_stash_broken) and leaves it out.  The mark is the one the put
 * read from the page, which keeps it while the block is stashed (the
 * block counts in its `used`). */
static inline bool shoal_stash_hand_out(shoal_heap_t *h, shoal_stashed_t s, unsigned c)
{
    if (shoal_unlikely(s.block->freed != s.mark))
        return false;
    s.block->freed = 0;
    shoal_count(&h->stats.allocs[c], 1);
    return true;
}

/* Report a stashed block whose freed mark is gone. */
void shoal_stash_broken(shoal_block_t *b);

/* Every stashed block of h goes to its page, as its free would have
 * sent it (h's holder). */
void shoal_stash_drain(shoal_heap_t *h);

/* In a fork child, before any block is handed out: the stash's foreign
 * blocks of pages whose heaps did not come with the fork leave it - they
 * carry their freed mark, and the rebuild of those pages finds them free
 * (heap.c, Heaps and fork), which would hand each out twice. */
void shoal_stash_forget_vanished(shoal_heap_t *h);

#endif
