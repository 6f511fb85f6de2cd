/* page.c - setting up a page and moving blocks between its lists. */
#define _GNU_SOURCE
#include "page.h"

#include <errno.h>
#include <sys/random.h>
#include <time.h>
#include "pool.h"
#include "size_class.h"

/* Written once at start-up, before any page: one secret for the link
 * keys, one for the freed marks. */
static uintptr_t secret, mark_secret;

void shoal_page_secret_init(void)
{
    uint64_t r[2] = { 0, 0 };
    int saved = errno;
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* No entropy yet (very early boot): time and addresses still make
         * the keys differ from run to run. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15u ^ (uintptr_t)&r ^ (uint64_t)ts.tv_sec;
        r[1] = r[0] * 0xbf58476d1ce4e5b9u ^ (uintptr_t)&saved;
    }
    errno = saved;
    secret = (uintptr_t)r[0] | 1;
    mark_secret = (uintptr_t)r[1];
}

/* A 64-bit mix (splitmix64's finaliser). */
static uintptr_t mix(uintptr_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

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
    atomic_store_explicit(&pg->capacity, 0, memory_order_relaxed);
    atomic_store_explicit(&pg->start_limit, 0, memory_order_relaxed);
    pg->reserved = (uint16_t)((SHOAL_SLOT_SIZE << order) / bsize);
    pg->slot_offset = 0;
    pg->order = (uint8_t)order;
    pg->size_class = (uint8_t)cls;
    pg->start_mul = shoal_start_mul(bsize);
    pg->start = shoal_page_start(pg);
    /* A new key each time the slot becomes a page: marks and links left
     * by an earlier life of the same memory do not decode. */
    pg->key = mix(pg->key ^ secret ^ (uintptr_t)pg->start) | 1;
    /* Of another secret: the mark says nothing about the key. */
    pg->mark = mix(pg->key ^ mark_secret);
    pg->free_is_zero = 0;
    pg->fresh_zero = zero;
    pg->idle_sweeps = 0;
    pg->next = pg->prev = NULL;
    for (unsigned i = 1; i < (1u << order); i++) {
        pg[i].kind = SHOAL_SLOT_TAIL;
        pg[i].slot_offset = (uint8_t)i;
        atomic_store_explicit(&pg[i].start_limit, 0, memory_order_relaxed);
    }
    pg->kind = SHOAL_SLOT_PAGE;
}

void shoal_page_fini(shoal_page_t *pg)
{
    atomic_store_explicit(&pg->start_limit, 0, memory_order_relaxed);
    for (unsigned i = 0; i < (1u << pg->order); i++) {
        pg[i].kind = SHOAL_SLOT_FREE;
        pg[i].slot_offset = 0;
    }
}

void shoal_page_extend(shoal_page_t *pg)
{
    /* About 4 KiB of blocks a time, at least one. */
    unsigned capacity = atomic_load_explicit(&pg->capacity, memory_order_relaxed);
    unsigned n = SHOAL_OS_PAGE / pg->block_size;
    if (n == 0)
        n = 1;
    if (n > pg->reserved - capacity)
        n = pg->reserved - capacity;
    if (n == 0)
        return;
    char *start = pg->start + (size_t)capacity * pg->block_size;
    shoal_block_t *head = pg->free;
    /* Link back to front so blocks are handed out in address order. */
    for (unsigned i = n; i-- > 0;) {
        shoal_block_t *b = (shoal_block_t *)(start + (size_t)i * pg->block_size);
        b->link = shoal_encode(pg, head);
        b->freed = shoal_freed_mark(pg);    /* free: a free of it is a double free */
        head = b;
    }
    pg->free_is_zero = pg->fresh_zero && (pg->free == NULL || pg->free_is_zero);
    pg->free = head;
    /* Relaxed: a freeing thread reads it only for blocks it was handed,
     * which were carved before they were handed out. */
    atomic_store_explicit(&pg->capacity, (uint16_t)(capacity + n), memory_order_relaxed);
    atomic_store_explicit(&pg->start_limit,
                          (uint32_t)((capacity + n) * (pg->start_mul * pg->block_size)),
                          memory_order_relaxed);
}

/* Put local_free in front of `free`. */
void shoal_page_collect(shoal_page_t *pg)
{
    shoal_block_t *tail = pg->local_free, *next;
    if (tail == NULL)
        return;
    if (pg->free == NULL) {             /* the usual case: no walk */
        shoal_page_take_local(pg);
        return;
    }
    while ((next = shoal_decode(pg, tail->link)) != NULL)
        tail = next;
    tail->link = shoal_encode(pg, pg->free);
    pg->free = pg->local_free;
    pg->local_free = NULL;
    pg->free_is_zero = 0;       /* freed blocks hold old data */
}
