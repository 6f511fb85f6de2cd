/* stash.c - a heap's stash: a broken block, and emptying it (stash.h). */
#include "stash.h"

#include "../core/message.h"

void shoal_stash_broken(shoal_block_t *b)
{
    shoal_fault("malloc", b, "freed block written after its free (its freed mark is gone): "
                             "left out of use");
}

void shoal_stash_drain(shoal_heap_t *h)
{
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        while (h->stashed[c] != 0) {
            shoal_block_t *b = h->stash[c][--h->stashed[c]].block;
            shoal_page_t *pg = shoal_span_of(b);
            /* The page is still h's (only h's holder gives its pages
             * away, and drains first), full or back in a queue since:
             * the block goes home as the free that stashed it would
             * have sent it, with the page's event where one is due. */
            shoal_remote_come_home(h, pg, b, shoal_page_owner(pg), shoal_heap_page_freed);
        }
    }
}
