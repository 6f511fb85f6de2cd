/* page.c - setting up a page and moving blocks between its lists. */
#define _GNU_SOURCE
#include "page.h"

#include <errno.h>
#include <limits.h>
#include <sys/random.h>
#include <time.h>
#include "message.h"
#include "pool.h"
#include "samples.h"
#include "size_class.h"

/* In no superpage, so shoal_block_is_free fails for them before it reads
 * them (page.h). */
shoal_block_t shoal_trap_end, shoal_trap_sample;

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
    pg->key = shoal_mix64(pg->key ^ secret ^ (uintptr_t)pg->start) | 1;
    /* Of another secret: the mark says nothing about the key. */
    pg->mark = shoal_mix64(pg->key ^ mark_secret);
    pg->free_is_zero = 0;
    pg->fresh_zero = zero;
    pg->idle_sweeps = 0;
    pg->next = pg->prev = NULL;
    pg->trap_next = pg->trap_after = NULL;
    pg->armed = 0;
    pg->trimmed = 0;
    pg->trim_used = 0;          /* a trim's first look only records */
    shoal_page_settle_push(pg);
    pg->gap_rest = SHOAL_GAP_UNDRAWN;
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

static unsigned capacity_of(const shoal_page_t *pg)
{
    return atomic_load_explicit(&pg->capacity, memory_order_relaxed);
}

/* A page whose lists cannot be trusted goes out of service: both lists
 * end where they start, every carved block counts as out, so `used`
 * never reaches 0 again and the page never goes back to the pool under a
 * block that may still be live; the blocks its lists held are lost to
 * it.  Frees of its live blocks go on as before (onto its lists), and
 * they may be handed out again. */
static void take_out_of_service(shoal_page_t *pg)
{
    shoal_block_t *end = pg->armed ? &shoal_trap_end : NULL;
    pg->free = pg->local_free = end;
    pg->trap_next = NULL;
    pg->gap_rest = SHOAL_GAP_UNDRAWN;
    pg->used = capacity_of(pg);
}

void shoal_page_broken(shoal_page_t *pg)
{
    shoal_fault("malloc", pg->start, "free list corrupted in the page at this address: a "
                                     "free block's link or freed mark was overwritten (an "
                                     "overflow of the block before it, or a write after free)");
    take_out_of_service(pg);
}

bool shoal_page_none_live(const shoal_page_t *pg)
{
    /* A scan in address order, no list to follow: a few instructions a
     * block, and only loads. */
    uintptr_t mark = shoal_freed_mark(pg);
    unsigned capacity = capacity_of(pg), i = 0;
    for (; i < capacity; i++) {
        const shoal_block_t *b = (const shoal_block_t *)(pg->start + (size_t)i * pg->block_size);
        if (b->freed != mark && !shoal_page_in_trimmed(pg, b))
            break;
    }
    return i == capacity;
}

bool shoal_page_all_home(shoal_page_t *pg)
{
    if (pg->used != 0)
        return false;
    /* `used` says no block is out: then every block carved carries the
     * freed mark, for a block handed out had it cleared (once a page). */
    if (shoal_page_none_live(pg))
        return true;
    /* `used` fell twice for one block: the freed mark could not tell
     * its second free, after a write had wiped it. */
    shoal_fault("free", pg->start,
                "a block of the page at this address was freed twice, the second time after a "
                "write into it had wiped its freed mark: the page is kept out of use");
    take_out_of_service(pg);
    return false;
}

void shoal_page_rebuild(shoal_page_t *pg)
{
    uintptr_t mark = shoal_freed_mark(pg);
    unsigned capacity = capacity_of(pg), n_free = 0, n_trimmed = 0;
    shoal_block_t *head = NULL;
    for (unsigned i = capacity; i-- > 0;) {
        shoal_block_t *b = (shoal_block_t *)(pg->start + (size_t)i * pg->block_size);
        if (shoal_page_in_trimmed(pg, b)) {
            n_trimmed++;        /* free, and on no list: it stays so */
            continue;
        }
        if (b->freed != mark)
            continue;
        b->link = shoal_encode(pg, head);
        head = b;
        n_free++;
    }
    pg->free = head;
    pg->local_free = NULL;
    pg->used = capacity - n_free - n_trimmed;
    /* The start limit as the capacity says (the thread may have stopped
     * between the two); blocks it was carving past the capacity were
     * written, so what is left uncarved no longer reads as zero. */
    atomic_store_explicit(&pg->start_limit,
                          (uint32_t)(capacity * (pg->start_mul * pg->block_size)),
                          memory_order_relaxed);
    pg->free_is_zero = pg->fresh_zero = 0;
    pg->idle_sweeps = 0;
    pg->armed = 0;
    shoal_page_settle_push(pg);
    pg->trap_rest = 0;
    pg->trap_next = pg->trap_after = NULL;
    pg->gap_rest = SHOAL_GAP_UNDRAWN;
    pg->next = pg->prev = NULL;
}

/* ---- checked walks ------------------------------------------------------
 * malloc checks each block it pops (shoal_block_is_free); a walk along a
 * list on a slow path checks each block the same way before it reads or
 * writes through it, and counts: a list holds at most `capacity` blocks,
 * so a longer one runs in a cycle, which is what a block freed twice
 * makes (its second free links it to the list it is already on). */

#define LIST_BAD UINT_MAX               /* a link failed the check */
#define LIST_LONG (UINT_MAX - 1)        /* more blocks than it may hold */

/* Up to max blocks of a list of pg from b on: how many (or LIST_BAD), in
 * *last the last of them (NULL for none), and in *rest what comes after
 * it.  The sample trap is stepped over: it stands for trap_next. */
static unsigned list_walk(const shoal_page_t *pg, shoal_block_t *b, unsigned max,
                          shoal_block_t **last, shoal_block_t **rest)
{
    unsigned n = 0;
    *last = NULL;
    for (;; b = shoal_decode(pg, b->link)) {
        if (b == &shoal_trap_sample)
            b = pg->trap_next;
        if (shoal_list_ended(b) || n == max)
            break;
        if (!shoal_block_is_free(pg, b))
            return LIST_BAD;
        n++;
        *last = b;
    }
    *rest = b;
    return n;
}

/* The length of a whole list, at most max (else LIST_LONG, or LIST_BAD),
 * and in *last its last block. */
static unsigned list_count(const shoal_page_t *pg, shoal_block_t *head, unsigned max,
                           shoal_block_t **last)
{
    shoal_block_t *rest;
    unsigned n = list_walk(pg, head, max, last, &rest);
    return n != LIST_BAD && !shoal_list_ended(rest) ? LIST_LONG : n;
}

/* ---- the traps (page.h) ------------------------------------------------ */

/* Take the sample trap out of `free`, if one stands there. */
static void untrap(shoal_page_t *pg)
{
    if (pg->trap_next == NULL)
        return;
    if (pg->free == &shoal_trap_sample)
        pg->free = pg->trap_next;
    else
        pg->trap_after->link = shoal_encode(pg, pg->trap_next);
    pg->trap_next = NULL;
}

/* Nothing while profiling is off, or if the gap is as long as the list
 * (page.h). */
void shoal_page_trap_place(shoal_page_t *pg, unsigned len, uint64_t gap)
{
    size_t rate = shoal_prof_rate();
    if (rate == 0) {
        pg->gap_rest = SHOAL_GAP_UNDRAWN;
        return;
    }
    if (gap == UINT64_MAX)
        gap = shoal_prof_gap(pg->block_size, rate);
    if (gap > (uint64_t)INT64_MAX / 2)
        gap = (uint64_t)INT64_MAX / 2;          /* never in this process's life */
    pg->gap_rest = (int64_t)gap - len;
    if (gap >= len)
        return;
    /* The block before the one the trap stands for: the gap-th. */
    shoal_block_t *after, *next;
    if (list_walk(pg, pg->free, (unsigned)gap, &after, &next) != gap) {
        shoal_page_broken(pg);          /* a bad link, or the list is short */
        return;
    }
    pg->trap_next = next;
    if (after == NULL)
        pg->free = &shoal_trap_sample;
    else
        after->link = shoal_encode(pg, &shoal_trap_sample);
    pg->trap_after = after;
    pg->trap_rest = (uint16_t)(len - gap);
}

/* Blocks on local_free (a walk: only where they are not known to be 0);
 * a list that fails the walk's checks takes the page out of service. */
static unsigned local_count(shoal_page_t *pg)
{
    shoal_block_t *last;
    unsigned n = list_count(pg, pg->local_free, capacity_of(pg), &last);
    if (n < LIST_LONG)
        return n;
    shoal_page_broken(pg);
    return 0;
}

/* Blocks on `free` now, n_local being on local_free (a block is on one
 * of the two lists, or out: used). */
static unsigned free_count_with(const shoal_page_t *pg, unsigned n_local)
{
    return capacity_of(pg) - pg->used - n_local;
}

static unsigned free_count(shoal_page_t *pg)
{
    return free_count_with(pg, local_count(pg));
}

/* The gap from the head of `free`, which holds free_len blocks
 * (UINT64_MAX: none drawn). */
static uint64_t gap_now(const shoal_page_t *pg, unsigned free_len)
{
    return pg->gap_rest == SHOAL_GAP_UNDRAWN ? UINT64_MAX : (uint64_t)(pg->gap_rest + free_len);
}

/* Make the end of *list the end trap (a list cut by a broken page ends
 * in it already). */
static void end_in_trap(shoal_page_t *pg, shoal_block_t **list)
{
    shoal_block_t *tail;
    if (shoal_list_ended(*list))
        *list = &shoal_trap_end;
    else if (list_count(pg, *list, capacity_of(pg), &tail) < LIST_LONG)
        tail->link = shoal_encode(pg, &shoal_trap_end);
    else
        shoal_page_broken(pg);
}

/* ---- trimming ----------------------------------------------------------
 * A page of a queue that holds a few live blocks keeps all the memory its
 * carved blocks touched.  Where a program's blocks change size over time
 * (a cache whose values went from 2.5 KB to 160 B), the pages of the
 * classes it uses less keep a live block or two each until those go:
 * redis, values of ever other sizes set and deleted, held 1,300 pages
 * of 2304-3072 B blocks, 4% used, 80 MiB resident for 3.6 MiB live.
 * A trim gives back the OS pages of such a page that hold free blocks
 * only: the blocks that start in them leave the page's lists, the OS
 * pages are purged, and the live blocks stay where they are.  The
 * blocks trimmed are free and on no list: `trimmed` says which OS pages
 * they start in; a free of one is a double free (the page's `push` says
 * TRIMMED, and free tests the block there, shoal_page_push); when the
 * lists run dry they are carved again (shoal_page_extend), one trimmed
 * OS page at a time, before the untouched rest of the page.  A block on
 * its way home from another thread is on no list either, and holds its
 * link there: an OS page it touches is never trimmed, for only blocks
 * found on the lists count as free here. */

#define OS_PAGES ((unsigned)(SHOAL_SLOT_SIZE / SHOAL_OS_PAGE))
_Static_assert(OS_PAGES <= 16, "a page's trimmed OS pages fit in its 16 bits");
#define MAX_BLOCKS ((unsigned)(SHOAL_SLOT_SIZE / SHOAL_ALIGN))

/* How many of pg's carved blocks start in OS page k, the first of them
 * in *first. */
static unsigned starting_in(const shoal_page_t *pg, unsigned k, unsigned *first)
{
    size_t bs = pg->block_size, lo = (size_t)k << SHOAL_OS_PAGE_SHIFT;
    size_t a = (lo + bs - 1) / bs, end = (lo + SHOAL_OS_PAGE + bs - 1) / bs;
    size_t cap = capacity_of(pg);
    *first = (unsigned)a;
    end = end < cap ? end : cap;
    return end > a ? (unsigned)(end - a) : 0;
}

/* The n blocks from `start` on, linked back to front in front of
 * `head`, so that they go out in address order, each with the freed
 * mark (a free of one is a double free): the new head.  A carve's, and
 * a carve of trimmed blocks'. */
static inline shoal_block_t *link_carved(const shoal_page_t *pg, char *start, unsigned n,
                                         shoal_block_t *head)
{
    uintptr_t mark = shoal_freed_mark(pg);
    for (unsigned i = n; i-- > 0;) {
        shoal_block_t *b = (shoal_block_t *)(start + (size_t)i * pg->block_size);
        b->link = shoal_encode(pg, head);
        b->freed = mark;
        head = b;
    }
    return head;
}

/* The blocks of trimmed OS pages go back on `free`, those of the lowest
 * such page that has any; false if none was left (owner). */
static bool carve_trimmed(shoal_page_t *pg)
{
    while (pg->trimmed != 0) {
        unsigned k = (unsigned)__builtin_ctz(pg->trimmed), first;
        pg->trimmed &= (uint16_t)(pg->trimmed - 1);
        unsigned n = starting_in(pg, k, &first);
        pg->free = link_carved(pg, pg->start + (size_t)first * pg->block_size, n, pg->free);
        pg->free_is_zero = 0;   /* a lazy purge may have left old data */
        shoal_page_settle_push(pg);
        if (n != 0)
            return true;
    }
    return false;
}

/* Mark in `listed` the blocks of the list from b on, each checked as
 * malloc checks what it pops; false if one fails, or the list is longer
 * than the page's blocks (a cycle). */
static bool mark_listed(const shoal_page_t *pg, shoal_block_t *b, uint64_t *listed,
                        unsigned *n)
{
    unsigned capacity = capacity_of(pg);
    for (; b != NULL; b = shoal_decode(pg, b->link)) {
        if (!shoal_block_is_free(pg, b) || !shoal_block_is_start(pg, b) || ++*n > capacity)
            return false;
        size_t i = (size_t)((char *)b - pg->start) / pg->block_size;
        listed[i / 64] |= (uint64_t)1 << (i % 64);
    }
    return true;
}

static inline bool is_listed(const uint64_t *listed, size_t i)
{
    return listed[i / 64] >> (i % 64) & 1;
}

static bool all_listed(const uint64_t *listed, size_t a, size_t end)
{
    for (size_t i = a; i < end; i++)
        if (!is_listed(listed, i))
            return false;
    return true;
}

size_t shoal_page_trim(shoal_page_t *pg)
{
    pg->trim_used = (uint16_t)(pg->used | SHOAL_TRIM_DONE);
    if (pg->armed || pg->order != 0)
        return 0;
    uint64_t listed[MAX_BLOCKS / 64] = { 0 };
    unsigned n = 0;
    if (!mark_listed(pg, pg->free, listed, &n) || !mark_listed(pg, pg->local_free, listed, &n)) {
        shoal_page_broken(pg);
        return 0;
    }
    /* The OS pages whose every carved block is listed, and of those, the
     * ones in which a block starts. */
    size_t bs = pg->block_size, carved = (size_t)capacity_of(pg) * bs;
    unsigned purge = 0, mask = 0;
    for (unsigned k = 0; k < OS_PAGES && ((size_t)k << SHOAL_OS_PAGE_SHIFT) < carved; k++) {
        size_t lo = (size_t)k << SHOAL_OS_PAGE_SHIFT, hi = lo + SHOAL_OS_PAGE;
        hi = hi < carved ? hi : carved;
        if ((pg->trimmed >> k & 1) || !all_listed(listed, lo / bs, (hi - 1) / bs + 1))
            continue;
        unsigned first;
        purge |= 1u << k;
        if (starting_in(pg, k, &first) != 0)
            mask |= 1u << k;
    }
    if (purge == 0)
        return 0;
    /* The lists again, in address order, without the blocks that leave;
     * `trimmed` first, so that a fork child's rebuild, should this
     * thread stop here, counts them as trimmed (page.h). */
    pg->trimmed |= (uint16_t)mask;
    shoal_block_t *head = NULL;
    for (unsigned i = capacity_of(pg); i-- > 0;) {
        shoal_block_t *b = (shoal_block_t *)(pg->start + (size_t)i * bs);
        if (!is_listed(listed, i) || shoal_page_in_trimmed(pg, b))
            continue;
        b->link = shoal_encode(pg, head);
        head = b;
    }
    pg->free = head;
    pg->local_free = NULL;
    pg->free_is_zero = 0;
    shoal_page_settle_push(pg);
    size_t bytes = 0;
    while (purge != 0) {
        unsigned k = (unsigned)__builtin_ctz(purge), run = (unsigned)__builtin_ctz(~(purge >> k));
        bytes += shoal_pool_trim(pg->start + ((size_t)k << SHOAL_OS_PAGE_SHIFT),
                                 (size_t)run << SHOAL_OS_PAGE_SHIFT);
        purge &= ~(((1u << run) - 1) << k);
    }
    return bytes;
}

void shoal_page_arm(shoal_page_t *pg)
{
    if (pg->armed)
        return;
    while (carve_trimmed(pg)) {     /* its lists hold every free block */
    }
    pg->armed = 1;              /* first: a list found broken is cut to the end trap */
    shoal_page_settle_push(pg);
    end_in_trap(pg, &pg->free);
    end_in_trap(pg, &pg->local_free);
    shoal_page_trap_place(pg, free_count(pg), UINT64_MAX);
}

void shoal_page_trap_sample(shoal_page_t *pg)
{
    pg->free = pg->trap_next;
    pg->trap_next = NULL;
    shoal_page_trap_place(pg, pg->trap_rest, UINT64_MAX);
}

shoal_block_t *shoal_page_take_trapped(shoal_page_t *pg)
{
    if (pg->free != &shoal_trap_sample)
        return NULL;
    shoal_block_t *b = pg->trap_next;
    if (!shoal_block_is_free(pg, b)) {
        shoal_page_broken(pg);
        return NULL;
    }
    pg->free = b;                       /* the trap steps aside for b */
    shoal_page_take(pg, b);
    pg->gap_rest++;                     /* and stays at the head: a gap of 0 */
    if (--pg->trap_rest == 0) {         /* b was the list's last */
        pg->trap_next = NULL;
    } else {                            /* and stands before the next */
        pg->trap_next = pg->free;
        pg->free = &shoal_trap_sample;
    }
    return b;
}

void shoal_page_extend(shoal_page_t *pg)
{
    if (shoal_unlikely(pg->trimmed != 0) && carve_trimmed(pg))
        return;
    /* The blocks that end by the end of the OS page in which the first
     * new one ends (the page start is 64 KiB-aligned): a carve makes
     * that OS page resident and reaches no further, so what a page has
     * made resident is what its blocks in use need, rounded up to one
     * OS page.  Carving 4 KiB of blocks from wherever the last carve
     * stopped left blocks reaching into the next OS page each time:
     * thread_churn's median peak RSS 2,580 -> 2,452 KB. */
    unsigned capacity = capacity_of(pg);
    size_t carved = (size_t)capacity * pg->block_size;
    size_t end = shoal_align_up(carved + pg->block_size, SHOAL_OS_PAGE);
    unsigned n = (unsigned)((end - carved) / pg->block_size);
    if (n > pg->reserved - capacity)
        n = pg->reserved - capacity;
    if (n == 0)
        return;
    char *start = pg->start + carved;
    unsigned free_len = 0;
    uint64_t gap = 0;
    if (pg->armed) {            /* the trap out, and the gap from the head */
        untrap(pg);
        free_len = shoal_page_has_free(pg) ? free_count(pg) : 0;   /* mostly it ran out */
        gap = gap_now(pg, free_len);
    }
    shoal_block_t *head = link_carved(pg, start, n, pg->free);
    pg->free_is_zero = pg->fresh_zero && (shoal_list_ended(pg->free) || pg->free_is_zero);
    shoal_page_settle_push(pg);
    pg->free = head;
    /* Relaxed: a freeing thread reads it only for blocks it was handed,
     * which were carved before they were handed out. */
    atomic_store_explicit(&pg->capacity, (uint16_t)(capacity + n), memory_order_relaxed);
    atomic_store_explicit(&pg->start_limit,
                          (uint32_t)((capacity + n) * (pg->start_mul * pg->block_size)),
                          memory_order_relaxed);
    if (!pg->armed)
        return;
    /* The gap goes on: past the list (mostly: carving comes once every
     * 4 KiB of blocks), or the trap goes in it. */
    if (gap != UINT64_MAX && gap >= free_len + n)
        pg->gap_rest = (int64_t)(gap - free_len - n);
    else
        shoal_page_trap_place(pg, free_len + n, gap);
}

/* Put local_free in front of `free` in an armed page; both end in the
 * end trap.  local_free holds blocks. */
void shoal_page_collect_onto(shoal_page_t *pg)
{
    if (pg->free == &shoal_trap_end) {  /* `free` ran dry */
        if (!shoal_page_take_local_untrapped(pg))
            shoal_page_take_local_trapped(pg);
        return;
    }
    shoal_block_t *tail;
    untrap(pg);
    unsigned n_local = list_count(pg, pg->local_free, capacity_of(pg), &tail);
    if (n_local >= LIST_LONG) {
        shoal_page_broken(pg);
        return;
    }
    tail->link = shoal_encode(pg, pg->free);
    unsigned free_len = free_count_with(pg, n_local);
    /* The gap goes on, counted from the new head. */
    uint64_t gap = gap_now(pg, free_len);
    pg->free = pg->local_free;
    pg->local_free = &shoal_trap_end;
    pg->free_is_zero = 0;       /* freed blocks hold old data */
    pg->push = SHOAL_PUSH_ARMED;
    shoal_page_trap_place(pg, free_len + n_local, gap);
}
