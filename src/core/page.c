/* page.c - setting up a page and moving blocks between its lists. */
#include "page.h"

#include "pool.h"
#include "size_class.h"

void *shoal_page_start(const shoal_page_t *pg)
{
    shoal_superpage_t *sp = shoal_superpage_of(pg);
    return shoal_slot_addr(sp, (unsigned)(pg - sp->pages));
}

void shoal_page_init(shoal_page_t *pg, unsigned cls, unsigned order, bool zero)
{
    size_t bsize = shoal_class_size(cls);
    pg->free = NULL;
    pg->local_free = NULL;
    pg->used = 0;
    pg->block_size = (uint32_t)bsize;
    pg->capacity = 0;
    pg->reserved = (uint16_t)((SHOAL_SLOT_SIZE << order) / bsize);
    pg->slot_offset = 0;
    pg->order = (uint8_t)order;
    pg->size_class = (uint8_t)cls;
    pg->in_full = 0;
    pg->free_is_zero = 0;
    pg->fresh_zero = zero;
    pg->idle_sweeps = 0;
    atomic_store_explicit(&pg->in_notify, 0, memory_order_relaxed);
    atomic_store_explicit(&pg->remote_free, 0, memory_order_relaxed);
    pg->next = pg->prev = NULL;
    for (unsigned i = 1; i < (1u << order); i++) {
        pg[i].kind = SHOAL_SLOT_TAIL;
        pg[i].slot_offset = (uint8_t)i;
    }
    pg->kind = SHOAL_SLOT_PAGE;
}

void shoal_page_extend(shoal_page_t *pg)
{
    /* About 4 KiB of blocks a time, at least one. */
    unsigned n = 4096u / pg->block_size;
    if (n == 0)
        n = 1;
    if (n > (unsigned)(pg->reserved - pg->capacity))
        n = pg->reserved - pg->capacity;
    if (n == 0)
        return;
    char *start = (char *)shoal_page_start(pg) + (size_t)pg->capacity * pg->block_size;
    shoal_block_t *head = pg->free;
    /* Link back to front so blocks are handed out in address order. */
    for (unsigned i = n; i-- > 0;) {
        shoal_block_t *b = (shoal_block_t *)(start + (size_t)i * pg->block_size);
        b->next = head;
        head = b;
    }
    pg->free_is_zero = pg->fresh_zero && (pg->free == NULL || pg->free_is_zero);
    pg->free = head;
    pg->capacity = (uint16_t)(pg->capacity + n);
}

bool shoal_page_remote_push(shoal_page_t *pg, shoal_block_t *b)
{
    uintptr_t old = atomic_load_explicit(&pg->remote_free, memory_order_relaxed);
    do {
        b->next = (shoal_block_t *)(old & ~SHOAL_REMOTE_FULL);
        /* Release: the block's contents and its link are written before
         * the owner can take the list (its exchange is acquire).  The new
         * value drops the FULL mark: exactly one pusher sees it set and
         * tells the owner.  A Treiber push with a take-all consumer has no
         * ABA: nothing is ever popped singly. */
    } while (!atomic_compare_exchange_weak_explicit(&pg->remote_free, &old, (uintptr_t)b,
                                                    memory_order_release,
                                                    memory_order_relaxed));
    return (old & SHOAL_REMOTE_FULL) != 0;
}

void shoal_page_collect(shoal_page_t *pg)
{
    if (pg->local_free != NULL) {
        /* Blocks freed by the owner hold old data: the list is no longer
         * all-zero once they join it. */
        shoal_block_t *tail = pg->local_free;
        while (tail->next != NULL)
            tail = tail->next;
        tail->next = pg->free;
        pg->free = pg->local_free;
        pg->local_free = NULL;
        pg->free_is_zero = 0;
    }
    uintptr_t r = atomic_load_explicit(&pg->remote_free, memory_order_relaxed);
    if ((r & ~SHOAL_REMOTE_FULL) == 0)
        return;
    /* Acquire pairs with the pushers' release: their writes to the blocks
     * are visible before we reuse them.  A set FULL mark cannot be here:
     * the list is not empty, and the push that made it so cleared it. */
    r = atomic_exchange_explicit(&pg->remote_free, 0, memory_order_acquire);
    shoal_block_t *list = (shoal_block_t *)r;
    shoal_block_t *tail = list;
    uint32_t n = 1;
    while (tail->next != NULL) {
        tail = tail->next;
        n++;
    }
    tail->next = pg->free;
    pg->free = list;
    pg->free_is_zero = 0;
    pg->used -= n;
}
