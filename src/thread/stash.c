/* stash.c - a heap's stash: a broken block, and emptying it (stash.h). */
#include "stash.h"

#include "../core/message.h"
#include "remote.h"

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
            /* A page of h is still h's (only h's holder gives its pages
             * away, and drains first), full or back in a queue since:
             * the block goes home as the free that stashed it would
             * have sent it, with the page's event where one is due.  A
             * foreign block goes to its page's heap now, as a remote
             * free (acquire, as free's owner read: that heap is seen
             * set up). */
            uintptr_t owner = shoal_page_owner(pg);
            shoal_heap_t *home = shoal_owner_heap(owner);
            if (home == h) {
                shoal_remote_come_home(h, pg, b, owner, shoal_heap_page_freed);
            } else {
                shoal_count(&h->stats.remote_frees, 1);
                shoal_remote_send_one(h, home, b);
            }
        }
    }
}

void shoal_stash_forget_vanished(shoal_heap_t *h)
{
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        unsigned kept = 0;
        for (unsigned i = 0; i < h->stashed[c]; i++) {
            shoal_stashed_t s = h->stash[c][i];
            if (!shoal_owner_heap(shoal_page_owner(shoal_span_of(s.block)))->vanished)
                h->stash[c][kept++] = s;
        }
        h->stashed[c] = (uint8_t)kept;
    }
}
