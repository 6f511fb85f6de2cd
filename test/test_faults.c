/* Bad input: each misuse runs in a child process, which must die of
 * SIGABRT after one line on stderr naming the fault, the function and the
 * address; with ON_ERROR=warn the child must report the same line, ignore
 * the call and go on with a heap that still works. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "shoal.h"
#include "seccomp_refuse.h"
#include "core/layout.h"
#include "core/pool.h"
#include "thread/heap.h"

typedef void (*misuse_fn)(void);
static char *expected_addr;     /* the address the message must name */

static void *remote_free(void *p)
{
    alloc_free(p);
    return NULL;
}

/* malloc(n), free it, then `again` on the freed block. */
static void freed_then(size_t n, void (*again)(void *))
{
    char *p = expected_addr = alloc_malloc(n);
    alloc_free(p);
    again(p);
}

static void usable_size_of(void *p)
{
    alloc_usable_size(p);
}

static void double_free_small(void) { freed_then(40, alloc_free); }
static void double_free_large(void) { freed_then(300000, alloc_free); }
static void double_free_huge(void) { freed_then(20u << 20, alloc_free); }
static void usable_size_freed(void) { freed_then(100, usable_size_of); }
static void usable_size_freed_large(void) { freed_then(300000, usable_size_of); }
static void usable_size_freed_huge(void) { freed_then(20u << 20, usable_size_of); }

static void double_free_remote(void)
{
    pthread_t t;
    char *p = expected_addr = alloc_malloc(200);
    alloc_free(p);
    pthread_create(&t, NULL, remote_free, p);
    pthread_join(t, NULL);
}

/* The second free comes while the block waits in the freeing thread's
 * outbox, on its way to its owner. */
static void *free_twice(void *p)
{
    alloc_free(p);
    alloc_free(p);
    return NULL;
}

static void double_free_in_flight(void)
{
    pthread_t t;
    char *p = expected_addr = alloc_malloc(200);
    pthread_create(&t, NULL, free_twice, p);
    pthread_join(t, NULL);
}

/* A write after free into a block on its way home (in this thread's
 * inbox: the freeing thread's exit sent it) replaces its queue link. */
static void write_after_remote_free(void)
{
    pthread_t t;
    char *p = expected_addr = alloc_malloc(200);
    pthread_create(&t, NULL, remote_free, p);
    pthread_join(t, NULL);
    *(uintptr_t *)p = (uintptr_t)0x4141414141414140u;
    alloc_collect(false);       /* takes the inbox */
}

/* The same with a link that stays in the page: the link of a block on
 * its way home (the first of its batch of two, whose second is in the
 * same 64 KiB slot) made to lead to a block of that slot in use. */
static void *remote_free_two(void *p)
{
    char **two = p;
    alloc_free(two[0]);
    alloc_free(two[1]);
    return NULL;
}

static void write_after_remote_free_near(void)
{
    pthread_t t;
    char *two[2], *in_use;
    two[0] = alloc_malloc(200);
    two[1] = expected_addr = alloc_malloc(200);
    in_use = alloc_malloc(200);
    if ((uintptr_t)two[0] >> SHOAL_SLOT_SHIFT != (uintptr_t)two[1] >> SHOAL_SLOT_SHIFT ||
        (uintptr_t)in_use >> SHOAL_SLOT_SHIFT != (uintptr_t)two[1] >> SHOAL_SLOT_SHIFT)
        abort();                /* no test without three blocks in one slot */
    pthread_create(&t, NULL, remote_free_two, two);
    pthread_join(t, NULL);
    *(char **)two[1] = in_use;  /* the batch went two[1] -> two[0] */
    alloc_collect(false);       /* takes the inbox */
}

static void double_free_medium(void)
{
    char *p = expected_addr = alloc_malloc(20000);
    alloc_free(p);
    alloc_free(p);
}

/* A 20000-byte block that is not in the first 64 KiB slot of its page
 * (pages of such blocks span several slots), which free finds through
 * the head's descriptor. */
static char *medium_in_later_slot(void)
{
    char *first = alloc_malloc(20000);
    for (int i = 0; i < 8; i++) {
        char *p = alloc_malloc(20000);
        if ((uintptr_t)p >> SHOAL_SLOT_SHIFT != (uintptr_t)first >> SHOAL_SLOT_SHIFT && p > first &&
            (size_t)(p - first) < (SHOAL_SLOT_SIZE << 3))
            return p;
    }
    abort();                    /* no test without such a block */
}

static void double_free_medium_later_slot(void)
{
    char *p = expected_addr = medium_in_later_slot();
    alloc_free(p);
    alloc_free(p);
}

static void free_interior_medium_later_slot(void)
{
    char *p = medium_in_later_slot();
    alloc_free(expected_addr = p + 4096);
}

/* Slot 0 of a superpage: its first bytes (the header's only at color
 * 0), a descriptor in the header wherever its color puts it, and the
 * superpage's own words in descriptor 0's second line. */
static void free_superpage_slot0(void)
{
    char *p = alloc_malloc(100);
    alloc_free(expected_addr = (char *)((uintptr_t)p & ~(SHOAL_SP_SIZE - 1)) + 256);
}

static void free_superpage_header(void)
{
    char *p = alloc_malloc(100);
    alloc_free(expected_addr = (char *)shoal_superpage_of(p) + 3 * sizeof(shoal_page_t));
}

static void free_superpage_words(void)
{
    char *p = alloc_malloc(100);
    alloc_free(expected_addr = (char *)&shoal_superpage_of(p)->occupied);
}

static void free_stack(void)
{
    char local[64];
    expected_addr = local;
    alloc_free(local);
}

static void free_static(void)
{
    static char data[64];
    expected_addr = data;
    alloc_free(data);
}

static void free_unmapped(void)
{
    expected_addr = (char *)(uintptr_t)0x7e0000001000;
    alloc_free(expected_addr);
}

static void free_kernel_address(void)
{
    expected_addr = (char *)(uintptr_t)0xffffffffff600000u;     /* above user space */
    alloc_free(expected_addr);
}

static void free_other_allocator(void)
{
    expected_addr = malloc(100);        /* the C library's, not shoal's */
    alloc_free(expected_addr);
}

static void free_mmap(void)
{
    expected_addr = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    alloc_free(expected_addr);
}

static void free_interior(void)
{
    char *p = alloc_malloc(100);
    alloc_free(expected_addr = p + 16);
}

static void free_misaligned(void)
{
    char *p = alloc_malloc(100);
    alloc_free(expected_addr = p + 3);
}

static void free_inside_large(void)
{
    char *p = alloc_malloc(300000);
    alloc_free(expected_addr = p + 4096);
}

static void free_inside_large_later_slot(void)
{
    char *p = alloc_malloc(300000);             /* 5 slots: an order-3 block */
    alloc_free(expected_addr = p + 200000);     /* in its fourth slot */
}

/* Laid out with its header in the chunk below, 8 MiB into its mapping. */
static void double_free_huge_aligned(void)
{
    char *p = expected_addr = alloc_aligned(8u << 20, 5u << 20);
    alloc_free(p);
    alloc_free(p);
}

/* Freed into this thread's huge slot, then again by another thread. */
static void double_free_huge_other_thread(void)
{
    pthread_t t;
    char *p = expected_addr = alloc_malloc(20u << 20);
    alloc_free(p);
    pthread_create(&t, NULL, remote_free, p);
    pthread_join(t, NULL);
}

static void free_inside_huge(void)
{
    char *p = alloc_malloc(20u << 20);
    alloc_free(expected_addr = p + 4096);
}

/* Past the first 4 MiB: a chunk no tag names. */
static void free_inside_huge_later_chunk(void)
{
    char *p = alloc_malloc(20u << 20);
    alloc_free(expected_addr = p + (13u << 20));
}

static void free_inside_freed_huge(void)
{
    char *p = alloc_malloc(20u << 20);
    alloc_free(p);
    alloc_free(expected_addr = p + 100000);
}

/* The 64 KiB page of a small block. */
static char *page_of(void *p)
{
    return (char *)((uintptr_t)p & ~(uintptr_t)0xffff);
}

/* An overflow of 24 bytes past a block, into its free neighbour: the
 * neighbour's link and freed mark are overwritten, and the malloc that
 * reaches it must say so instead of following the link. */
static void overflow_into_free_neighbour(void)
{
    char *p = alloc_malloc(24);                 /* the 32-byte class */
    char *q = alloc_malloc(24);                 /* right after p */
    if (q != p + 32)
        abort();
    expected_addr = page_of(q);                 /* the message names the page */
    alloc_free(q);
    memset(p, 'A', 32 + 24);
    for (int i = 0; i < 10000; i++)             /* until q is handed out */
        alloc_malloc(24);
}

/* A write after free that forges a link to another address: reading a
 * freed block must not give away the key that encodes its link (the
 * freed mark is not the key), and a link to an address outside the page
 * must not be followed. */
static char forged_target[256] __attribute__((aligned(64)));

static void forged_link(void)
{
    uintptr_t *p = alloc_malloc(64);
    alloc_free(p);
    uintptr_t key = p[1];                       /* what a freed block shows */
    uintptr_t x = (uintptr_t)forged_target ^ key;
    expected_addr = page_of(p);
    p[0] = (x << 17) | (x >> 47);               /* a link as the key would encode it */
    for (int i = 0; i < 10000; i++)             /* until p and its link are used */
        if (alloc_malloc(64) == forged_target)
            abort();                            /* handed out: not caught */
}

/* A double free that the freed mark cannot see: a write after free
 * wiped the block's mark before it was freed again.  The page's count of
 * blocks out falls by two for one block, reaches 0 while q is still
 * live, and the page must not go back to the pool (to be handed out
 * again over q): its lists, counted when it empties, hold a block too
 * few.  `at_head`: the page, full until blocks come back to it, becomes
 * the head of its queue (the head was dry: page_queue.h), which stays
 * when it empties, and alloc_collect, as the idle sweep, checks it;
 * otherwise a block back in the head page (the last one's) has it join
 * the back of the queue, which it leaves when it empties.  The class's
 * stash is filled first (the frees of a full page's first blocks), so
 * that the frees below move the page as the comment says instead of
 * waiting there (thread/stash.h). */
static void double_free_after_write_in(bool at_head)
{
    enum { N = 64, SIZE = 4096 };
    char *b[N];
    int first = -1;
    for (int i = 0; i < N; i++) {
        b[i] = alloc_malloc(SIZE);
        if (first < 0 && page_of(b[i]) == b[i])
            first = i;
    }
    if (first < 0 || first + 32 > N - 1 || page_of(b[first + 15]) != b[first] ||
        page_of(b[first + 16]) != b[first + 16] || page_of(b[N - 1]) == b[first])
        abort();                                /* 16 blocks a page, in order */
    for (int i = first + 16; i < first + 16 + SHOAL_STASH_MIN; i++)
        alloc_free(b[i]);                       /* the second page's: the stash fills */
    char *p = b[first], *q = b[first + 1];
    memset(q, 'q', SIZE);
    if (!at_head)
        alloc_free(b[N - 1]);
    for (int i = first + 2; i < first + 16; i++)
        alloc_free(b[i]);
    expected_addr = p;                          /* the message names the page */
    alloc_free(p);
    memset(p, 0, 16);                           /* the write after free */
    alloc_free(p);                              /* the page's count reaches 0 */
    if (at_head)
        alloc_collect(false);
    for (int i = 0; i < 64; i++)                /* reuse its slot, if it went back */
        memset(alloc_malloc(8000), 'x', 8000);
    for (int i = 0; i < SIZE; i++)
        if (q[i] != 'q')
            abort();                            /* handed out over a live block */
}

static void double_free_after_write(void)
{
    double_free_after_write_in(false);
}

static void double_free_after_write_head(void)
{
    double_free_after_write_in(true);
}

/* A block of 4096 B freed into its full page, so held in the heap's
 * stash (thread/stash.h) for the next malloc that finds its page dry:
 * the first block of a page whose 16 blocks are all out, with the next
 * page started. */
static char *stashed_block(void)
{
    char *b[20];
    for (int i = 0; i < 20; i++)
        b[i] = alloc_malloc(4096);
    for (int i = 0; i + 16 < 20; i++) {
        if (page_of(b[i]) == b[i] && page_of(b[i + 15]) == b[i] && page_of(b[i + 16]) != b[i]) {
            alloc_free(b[i]);
            return b[i];
        }
    }
    abort();                    /* no full page: no test */
}

static void double_free_stashed(void)
{
    char *p = expected_addr = stashed_block();
    alloc_free(p);
}

/* The same for a block of another thread's page, stashed by the thread
 * that freed it (its page of the class dry: one 20,000 B block is one
 * OS page's carve) while the owner lives on. */
static pthread_barrier_t owner_step;

static void *owner_of_one(void *p)
{
    *(char **)p = alloc_malloc(20000);
    pthread_barrier_wait(&owner_step);          /* made */
    pthread_barrier_wait(&owner_step);          /* freed twice */
    return NULL;
}

static void double_free_foreign_stashed(void)
{
    pthread_t t;
    char *theirs;
    pthread_barrier_init(&owner_step, NULL, 2);
    pthread_create(&t, NULL, owner_of_one, &theirs);
    pthread_barrier_wait(&owner_step);
    char *mine = alloc_malloc(20000);
    expected_addr = theirs;
    alloc_free(theirs);
    alloc_free(theirs);
    pthread_barrier_wait(&owner_step);
    pthread_join(t, NULL);
    alloc_free(mine);
}

/* A write after free wipes a stashed block's freed mark: malloc must not
 * hand it out (here it is the only block the dry page path could take
 * before a new page). */
static void write_after_free_stashed(void)
{
    char *p = expected_addr = stashed_block();
    memset(p, 0, 16);
    for (int i = 0; i < 40; i++)
        if (alloc_malloc(4096) == p)
            abort();            /* handed out over the write */
}

/* A write after free over a free block's link, met by heap profiling's
 * walk along a list (placing its sample trap) rather than by malloc's
 * pop: the walk must check each link as the pop does, and say so. */
static void write_after_free_profiled(void)
{
    enum { N = 200 };
    char *b[N];
    alloc_option_set(ALLOC_OPTION_PROF_SAMPLE, 64);
    alloc_option_set(ALLOC_OPTION_PROF, 1);
    for (int i = 0; i < N; i++)
        b[i] = alloc_malloc(64);
    expected_addr = page_of(b[N / 2]);
    for (int i = 0; i < N; i++)
        alloc_free(b[i]);
    memset(b[N / 2], 0x5a, 8);                  /* its link, not its mark */
    for (int i = 0; i < 4 * N; i++)
        alloc_malloc(64);
    alloc_option_set(ALLOC_OPTION_PROF, 0);
}

static void free_never_allocated(void)
{
    char *p = alloc_malloc(64);
    alloc_free(expected_addr = p + 64 * 200);   /* same page, not carved yet */
}

static void free_sized_wrong(void)
{
    char *p = expected_addr = alloc_malloc(100);
    alloc_free_sized(p, 5000);
}

static void realloc_freed(void)
{
    char *p = expected_addr = alloc_malloc(100);
    alloc_free(p);
    alloc_realloc(p, 200);
}

/* The same where the size would keep the block in place (realloc's
 * quick test reads the freed mark). */
static void realloc_freed_in_place(void)
{
    char *p = expected_addr = alloc_malloc(100);
    alloc_free(p);
    alloc_realloc(p, 100);
}

/* realloc to 0 frees: a freed block is still named as realloc's double
 * free, not freed again. */
static void realloc_freed_to_zero(void)
{
    char *p = expected_addr = alloc_malloc(100);
    alloc_free(p);
    alloc_realloc(p, 0);
}

static void usable_size_interior(void)
{
    char *p = alloc_malloc(1000);
    alloc_usable_size(expected_addr = p + 8);
}

/* After the misuse, in warn mode: the heap must still hand out and take
 * back blocks with their contents intact. */
static int heap_still_works(void)
{
    enum { N = 2000 };
    static unsigned char *b[N];
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(i * 37) % 5000;
        if ((b[i] = alloc_malloc(n)) == NULL)
            return 0;
        memset(b[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(i * 37) % 5000;
        for (size_t k = 0; k < n; k++)
            if (b[i][k] != (i & 0xff))
                return 0;
        alloc_free(b[i]);
    }
    return 1;
}

/* Run fn in a child; return its stderr in out, its status in *status. */
static void run_child(misuse_fn fn, bool warn, char *out, size_t cap, int *status)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        if (warn)
            alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN);
        fn();
        char line[64];
        int n = snprintf(line, sizeof line, "@%p\n", (void *)expected_addr);
        write(2, line, (size_t)n);
        _exit(heap_still_works() ? 0 : 7);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fds[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    out[len] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, status, 0), pid);
}

static void expect(misuse_fn fn, const char *fault, const char *function)
{
    char out[4096], addr[64];
    int status;
    /* Default policy: one line, then abort. */
    run_child(fn, false, out, sizeof out, &status);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_non_null(strstr(out, "shoal: error: "));
    assert_non_null(strstr(out, fault));
    assert_non_null(strstr(out, function));
    assert_int_equal(strchr(out, '\n') - out + 1, (long)strlen(out));      /* one line */
    /* Warn: the same line, the call ignored, the heap intact. */
    run_child(fn, true, out, sizeof out, &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_non_null(strstr(out, fault));
    const char *at = strrchr(out, '@');                 /* the address the child used */
    assert_non_null(at);
    snprintf(addr, sizeof addr, "address %.*s)", (int)(strchr(at, '\n') - at - 1), at + 1);
    assert_non_null(strstr(out, addr));
}

#define CASE(name, fault, function)                                                         \
    static void test_##name(void **state)                                                   \
    {                                                                                       \
        (void)state;                                                                        \
        expect(name, fault, function);                                                      \
    }
CASE(double_free_small, "double free", "(free,")
CASE(double_free_remote, "double free", "(free,")
CASE(double_free_in_flight, "double free", "(free,")
CASE(write_after_remote_free, "remote free queue corrupted", "(free,")
CASE(write_after_remote_free_near, "remote free queue corrupted", "(free,")
CASE(double_free_medium, "double free", "(free,")
CASE(double_free_medium_later_slot, "double free", "(free,")
CASE(double_free_large, "double free", "(free,")
CASE(double_free_huge, "double free", "(free,")
CASE(free_stack, "not allocated by shoal", "(free,")
CASE(free_static, "not allocated by shoal", "(free,")
CASE(free_unmapped, "not allocated by shoal", "(free,")
CASE(free_kernel_address, "not allocated by shoal", "(free,")
CASE(free_other_allocator, "not allocated by shoal", "(free,")
CASE(free_mmap, "not allocated by shoal", "(free,")
CASE(free_interior, "inside a block", "(free,")
CASE(free_misaligned, "inside a block", "(free,")
CASE(free_interior_medium_later_slot, "inside a block", "(free,")
CASE(free_superpage_slot0, "not allocated", "(free,")
CASE(free_superpage_header, "not allocated", "(free,")
CASE(free_superpage_words, "not allocated", "(free,")
CASE(free_inside_large, "inside a large block", "(free,")
CASE(free_inside_large_later_slot, "inside a large block", "(free,")
CASE(usable_size_freed, "already free (used after free)", "(usable_size,")
CASE(usable_size_freed_large, "freed already (used after free)", "(usable_size,")
CASE(usable_size_freed_huge, "already free (used after free)", "(usable_size,")
CASE(double_free_huge_aligned, "double free", "(free,")
CASE(double_free_huge_other_thread, "double free", "(free,")
CASE(free_inside_huge, "inside a huge block, not its start", "(free,")
CASE(free_inside_huge_later_chunk, "inside a huge block, not its start", "(free,")
CASE(free_inside_freed_huge, "inside a huge block that is already free", "(free,")
CASE(free_never_allocated, "never allocated", "(free,")
CASE(overflow_into_free_neighbour, "free list corrupted", "(malloc,")
CASE(forged_link, "free list corrupted", "(malloc,")
CASE(double_free_stashed, "double free", "(free,")
CASE(double_free_foreign_stashed, "double free", "(free,")
CASE(write_after_free_stashed, "written after its free", "(malloc,")
CASE(double_free_after_write, "freed twice", "(free,")
CASE(double_free_after_write_head, "freed twice", "(free,")
CASE(write_after_free_profiled, "free list corrupted", "(malloc,")
CASE(free_sized_wrong, "size does not match", "(free_sized,")
CASE(realloc_freed, "double free", "(realloc,")
CASE(realloc_freed_in_place, "double free", "(realloc,")
CASE(realloc_freed_to_zero, "double free", "(realloc,")
CASE(usable_size_interior, "inside a block", "(usable_size,")

/* A huge block's shrink that the kernel refuses - mremap fails where
 * the unmapped tail would split a mapping past vm.max_map_count; here a
 * seccomp filter answers ENOMEM - keeps the block where it is, at the
 * size asked for: malloc_usable_size says that size, free_sized takes
 * the block back at it (no misuse to report), and the mapping serves a
 * block of its first size again.  Exit status: 0, or where it broke. */
static void shrink_refused(void)
{
    const size_t big = (size_t)64 << 20, small = (size_t)8 << 20;
    unsigned char *p = alloc_malloc(big);
    if (p == NULL)
        _exit(2);
    memset(p, 0x3c, big);
    if (seccomp_refuse(__NR_mremap, SECCOMP_ANSWER_ERRNO(ENOMEM)) != 0)
        _exit(77);
    unsigned char *q = alloc_realloc(p, small);
    if (q == NULL)
        _exit(3);
    for (size_t i = 0; i < small; i++)
        if (q[i] != 0x3c)
            _exit(4);
    size_t u = alloc_usable_size(q);
    if (u < small || u >= 2 * small)
        _exit(5);
    alloc_free_sized(q, small);
    unsigned char *r = alloc_malloc(big);
    if (r == NULL)
        _exit(6);
    memset(r, 0xc3, big);
    for (size_t i = 0; i < big; i += 4096)
        if (r[i] != 0xc3)
            _exit(7);
    alloc_free_sized(r, big);
}

static void test_huge_shrink_refused(void **state)
{
    (void)state;
    char out[4096];
    int status;
    run_child(shrink_refused, false, out, sizeof out, &status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        skip();                 /* no seccomp filters here */
    if (out[0] != '\0' && strstr(out, "shoal:") != NULL)
        fail_msg("%s", out);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_bad_sizes_and_alignments(void **state)
{
    (void)state;
    errno = 0;
    assert_null(alloc_malloc((size_t)PTRDIFF_MAX + 1));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(alloc_calloc((size_t)1 << 40, (size_t)1 << 40));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(alloc_aligned(48, 100));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(alloc_aligned(0, 100));
    assert_int_equal(errno, EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_free_small),
        cmocka_unit_test(test_double_free_remote),
        cmocka_unit_test(test_double_free_in_flight),
        cmocka_unit_test(test_write_after_remote_free),
        cmocka_unit_test(test_write_after_remote_free_near),
        cmocka_unit_test(test_double_free_medium),
        cmocka_unit_test(test_double_free_medium_later_slot),
        cmocka_unit_test(test_double_free_large),
        cmocka_unit_test(test_double_free_huge),
        cmocka_unit_test(test_free_stack),
        cmocka_unit_test(test_free_static),
        cmocka_unit_test(test_free_unmapped),
        cmocka_unit_test(test_free_kernel_address),
        cmocka_unit_test(test_free_other_allocator),
        cmocka_unit_test(test_free_mmap),
        cmocka_unit_test(test_free_interior),
        cmocka_unit_test(test_free_misaligned),
        cmocka_unit_test(test_free_interior_medium_later_slot),
        cmocka_unit_test(test_free_superpage_slot0),
        cmocka_unit_test(test_free_superpage_header),
        cmocka_unit_test(test_free_superpage_words),
        cmocka_unit_test(test_free_inside_large),
        cmocka_unit_test(test_free_inside_large_later_slot),
        cmocka_unit_test(test_usable_size_freed),
        cmocka_unit_test(test_usable_size_freed_large),
        cmocka_unit_test(test_usable_size_freed_huge),
        cmocka_unit_test(test_double_free_huge_aligned),
        cmocka_unit_test(test_double_free_huge_other_thread),
        cmocka_unit_test(test_free_inside_huge),
        cmocka_unit_test(test_free_inside_huge_later_chunk),
        cmocka_unit_test(test_free_inside_freed_huge),
        cmocka_unit_test(test_free_never_allocated),
        cmocka_unit_test(test_overflow_into_free_neighbour),
        cmocka_unit_test(test_forged_link),
        cmocka_unit_test(test_double_free_stashed),
        cmocka_unit_test(test_double_free_foreign_stashed),
        cmocka_unit_test(test_write_after_free_stashed),
        cmocka_unit_test(test_double_free_after_write),
        cmocka_unit_test(test_double_free_after_write_head),
        cmocka_unit_test(test_write_after_free_profiled),
        cmocka_unit_test(test_free_sized_wrong),
        cmocka_unit_test(test_huge_shrink_refused),
        cmocka_unit_test(test_realloc_freed),
        cmocka_unit_test(test_realloc_freed_in_place),
        cmocka_unit_test(test_realloc_freed_to_zero),
        cmocka_unit_test(test_usable_size_interior),
        cmocka_unit_test(test_bad_sizes_and_alignments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
