/* stash.c - taking blocks back from a heap's stash, and emptying it
 * (stash.h). */
#include "stash.h"

#include "../core/message.h"

shoal_block_t *shoal_stash_take(shoal_heap_t *h, unsigned c)
{
    while (h->stashed[c] != 0) {
        shoal_block_t *b = h->stash[c][--h->stashed[c]];
        h->stash_used = true;
        /* As malloc's free-block test: the mark free wrote is still
         * there, or something wrote into the block after its free. */
        if (shoal_unlikely(b->freed != shoal_freed_mark(shoal_span_of(b)))) {
            shoal_fault("malloc", b, "freed block written after its free (its freed mark "
                                     "is gone): left out of use");
            continue;
        }
        b->freed = 0;
        shoal_count(&h->stats.allocs[c], 1);
        return b;
    }
    return NULL;
}

void shoal_stash_drain(shoal_heap_t *h)
{
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        while (h->stashed[c] != 0) {
            shoal_block_t *b = h->stash[c][--h->stashed[c]];
            shoal_page_t *pg = shoal_span_of(b);
            /* The page is still h's (only h's holder gives its pages
             * away, and drains first), full or back in a queue since:
             * the block goes home as the free that stashed it would
             * have sent it, with the page's event where one is due. */
            shoal_remote_come_home(h, pg, b, shoal_page_owner(pg), shoal_heap_page_freed);
        }
    }
}
