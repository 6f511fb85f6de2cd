/* page_queue.h - a heap's queues of pages, and its full pages.
 *
 * For each size class a heap keeps a doubly linked queue of pages that
 * may have free blocks; its head, pages[c], is the page the malloc fast
 * path pops from (the static empty page when the queue is empty), also
 * found by request size in the heap's direct table up to 1 KiB.  A page
 * with no free block leaves its queue and waits, full, in no list, its
 * owner word marked (page.h) and the heap's count of them up by one,
 * until a block comes back and the free that brings it finds the mark.
 * No walk needs them but a dismantled heap's, which finds them by their
 * owner words in the pool (heap.c): a list would cost every page that
 * goes full or comes back a write to its neighbours' descriptors, lines
 * that a random replacement of blocks finds out of cache (callgrind's
 * cache model, 50,000 blocks of 100-3000 B replaced 400,000 times: 2.78
 * million first-level data misses with the list, 2.33 without).  Only
 * the heap's holder calls these.
 */
#ifndef SHOAL_PAGE_QUEUE_H
#define SHOAL_PAGE_QUEUE_H

#include "heap.h"

/* Build the direct tables' ranges (start-up, before any heap). */
void shoal_queue_init(void);

/* pg heads class c's queue now: in pages[] and in the direct entries of
 * the requests that take class c (none for a class that CACHELINE_ALIGN
 * keeps out of the fast path). */
void shoal_queue_set_head(shoal_heap_t *h, unsigned c, shoal_page_t *pg);

void shoal_queue_remove(shoal_heap_t *h, shoal_page_t *pg);
void shoal_queue_push_front(shoal_heap_t *h, shoal_page_t *pg);
void shoal_queue_push_back(shoal_heap_t *h, shoal_page_t *pg);

/* A page goes full, or comes back from full: the owner word's mark and
 * the heap's count. */
void shoal_full_push(shoal_heap_t *h, shoal_page_t *pg);
void shoal_full_remove(shoal_heap_t *h, shoal_page_t *pg);

/* A full page got a block back.  Where the head of its queue has no
 * block to give (the next malloc of the class would walk the queue), it
 * becomes the head, and that malloc takes the block just freed, still in
 * cache.  A random replacement of blocks leaves a block or two in each
 * page, and walked the queue at every other malloc (50,000 blocks of
 * 100-3000 B replaced 400,000 times: 218,000 walks, 138,000 now).  The
 * head it displaces holds no free block, so it cannot be left empty
 * behind the new one.  Otherwise the page joins the back of the queue:
 * the head keeps serving mallocs, and a head page that empties stays
 * only while it is the head, so pushing in front of it would strand
 * it. */
void shoal_queue_unfull(shoal_heap_t *h, shoal_page_t *pg);

/* A walk of class c's queue for a page with a free block (heap.c's
 * search_queue) marks pages with none full, where nothing
 * looks at them again until a block comes back (shoal_heap_page_freed),
 * sparse pages to the back, and the page it finds to the front.  These
 * moves keep pages[c] but leave the direct table behind it: a walk that
 * moved the head publishes the new one, once, at its end.  (Publishing
 * at each move cost a random replacement of blocks two passes over the
 * direct entries a malloc.) */
void shoal_queue_walk_full(shoal_heap_t *h, shoal_page_t *pg);
void shoal_queue_walk_front(shoal_heap_t *h, shoal_page_t *pg);
void shoal_queue_walk_back(shoal_heap_t *h, shoal_page_t *pg);
void shoal_queue_publish(shoal_heap_t *h, unsigned c);

#endif
