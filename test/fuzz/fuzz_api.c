/* fuzz_api.c - libFuzzer harness: the input is a program of alloc_* calls,
 * run against a shadow model of the live blocks.
 *
 * Each input starts with no live blocks and ends by freeing every block
 * it made, so an input (a crash artifact, a corpus file) replays alone.
 * The allocator's state carries over from input to input, which is what
 * a long-running server does to it.
 *
 * Input format: a sequence of operations, each an opcode byte, a slot byte
 * and the operand bytes of the call (a short read pads with zeros; see
 * make_corpus.py):
 *
 *   op % 16   call                          operands after the slot
 *   0, 1      alloc_malloc                  size
 *   2         alloc_calloc                  count (2 bytes), size
 *   3         alloc_realloc                 size
 *   4         alloc_reallocarray            count (2 bytes), size
 *   5         alloc_aligned                 alignment, size
 *   6         alloc_free                    -
 *   7         alloc_free_sized, or          -
 *             alloc_free_aligned_sized for a block from alloc_aligned,
 *             with the size (and alignment) requested
 *   8         alloc_usable_size             - (then writes the slack)
 *   9         alloc_collect                 - (force: the slot byte's low bit)
 *   10        free on another thread        -
 *   11        malloc on another thread      size
 *   12        check a block's contents      -
 *   13        PURGE_DELAY_MS                - (slot byte % 4: 0, 1, 10, 1000 ms), or,
 *             with the slot byte's bit 5, heap profiling turned on at
 *             a mean of 1 KiB << (slot byte / 4 % 8) between samples, or
 *             off (every input ends with it off)
 *   14, 15    alloc_malloc then realloc     size, size
 *
 * The slot byte picks one of 64 slots; allocating into a live slot frees
 * that block first.  A size is one selector byte and up to four more:
 *   sel % 16 < 8   0 .. 1024                  (2 bytes)
 *   8 .. 10        0 .. 80 KiB                (2 bytes, x 1.25)
 *   11, 12         0 .. 4 MiB                 (3 bytes)
 *   13             0 .. 64 MiB                (4 bytes)
 *   14             a boundary: 0, 1, 16, 17, 8 KiB, 64 KiB, 2 MiB, 4 MiB
 *                  and their neighbours
 *   15             an absurd size: beyond 2^48 or PTRDIFF_MAX, or near
 *                  SIZE_MAX
 * An alignment byte a: a < 0xc0 gives 2^(a % 31); 0xc0 and up give a
 * value that is not a power of two (or 0), or 2^48 and more.
 *
 * Checked: a block is not NULL (for a size that can be served), is
 * aligned (16 bytes, or its alignment), has at least its size usable;
 * calloc zeroes; realloc and reallocarray keep the contents up to the
 * smaller size, and when they fail return NULL with ENOMEM and leave the
 * block intact; contents are intact at every free (from this or another
 * thread); absurd sizes and overflowing products give NULL with ENOMEM,
 * bad alignments NULL with EINVAL; and at the end of each input the
 * statistics count no live block, and the committed peak is below any
 * request that can be served.  Blocks carry a pattern from a per
 * block seed: every byte of the first 8 KiB, 16 bytes of every 4 KiB page
 * after that (of every 64 KiB in blocks above 1 MiB) and the last 64
 * bytes.  A failed check prints one line and aborts, which libFuzzer
 * reports with the input that caused it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shoal.h"

#define SLOTS 64
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define DENSE (8 * KiB)             /* fully patterned prefix */
#define MAX_SERVED (64 * MiB + 64 * KiB)
#define ABSURD ((size_t)1 << 48)    /* no request this big can be served */

typedef struct slot_s {
    unsigned char *p;
    size_t n;           /* requested size */
    size_t align;       /* 0: natural */
    uint32_t seed;
} slot_t;

static slot_t slots[SLOTS];
static uint32_t next_seed;

/* ---- failure ---------------------------------------------------------- */

__attribute__((noreturn, format(printf, 1, 2)))
static void fail(const char *fmt, ...)
{
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fuzz_api: check failed: %s\n", line);
    abort();
}

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond))                                                          \
            fail(__VA_ARGS__);                                                \
    } while (0)

/* ---- input ------------------------------------------------------------ */

typedef struct input_s {
    const uint8_t *p;
    size_t left;
} input_t;

static uint64_t take(input_t *in, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) {
        v <<= 8;
        if (in->left != 0) {
            v |= *in->p++;
            in->left--;
        }
    }
    return v;
}

static size_t take_size(input_t *in)
{
    static const size_t bounds[] = {
        0, 1, 15, 16, 17, 127, 128, 129, 8191, 8192, 8193, 65535, 65536, 65537,
        2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 4 * MiB - 65, 4 * MiB - 64, 4 * MiB, 4 * MiB + 1,
    };
    static const size_t absurd[] = {
        (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX + 1, SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4095,
        SIZE_MAX - 65535, SIZE_MAX - (4 * MiB), (size_t)PTRDIFF_MAX - 4095, ABSURD,
        ((size_t)1 << 62) + 1,
    };
    unsigned sel = (unsigned)take(in, 1) % 16;
    if (sel < 8)
        return (size_t)take(in, 2) % 1025;
    if (sel < 11)
        return (size_t)take(in, 2) * 5 / 4;
    if (sel < 13)
        return (size_t)take(in, 3) % (4 * MiB + 1);
    if (sel == 13)
        return (size_t)take(in, 4) % (64 * MiB + 1);
    if (sel == 14)
        return bounds[take(in, 1) % (sizeof bounds / sizeof bounds[0])];
    return absurd[take(in, 1) % (sizeof absurd / sizeof absurd[0])];
}

/* 0 for a power of two that can be honoured; EINVAL or ENOMEM for the
 * error alloc_aligned must report. */
static size_t take_align(input_t *in, int *expect)
{
    static const size_t bad[] = { 0, 3, 6, 12, 24, 48, 100, 4095, 4097, 65537,
                                  ((size_t)1 << 40) + 1, SIZE_MAX, (size_t)PTRDIFF_MAX };
    unsigned a = (unsigned)take(in, 1);
    *expect = 0;
    if (a < 0xc0)
        return (size_t)1 << (a % 31);
    if (a < 0xf0) {
        *expect = EINVAL;
        return bad[a % (sizeof bad / sizeof bad[0])];
    }
    *expect = ENOMEM;                   /* no 48-bit address is so aligned */
    return (size_t)1 << (48 + a % 16);
}

/* ---- patterns --------------------------------------------------------- */

static inline unsigned char pat(uint32_t seed, size_t j)
{
    uint32_t x = seed ^ (uint32_t)(j * 0x9e3779b1u) ^ (uint32_t)(j >> 13);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (unsigned char)x;
}

/* The patterned bytes of an n-byte block: the first 8 KiB, 16 bytes of
 * every 4 KiB page (every 64 KiB beyond 1 MiB) and the last 64 bytes, so
 * a check costs little whatever the size. */
#define FOR_PATTERNED(n, j, body)                                              \
    do {                                                                       \
        size_t n_ = (n);                                                       \
        size_t d_ = n_ < DENSE ? n_ : DENSE;                                   \
        size_t s_ = n_ <= MiB ? 4 * KiB : 64 * KiB;                            \
        for (size_t j = 0; j < d_; j++) { body; }                              \
        for (size_t b_ = DENSE; b_ < n_; b_ += s_)                             \
            for (size_t j = b_; j < b_ + 16 && j < n_; j++) { body; }          \
        for (size_t j = n_ > DENSE + 64 ? n_ - 64 : d_; j < n_; j++) { body; } \
    } while (0)

static void fill(unsigned char *p, size_t n, uint32_t seed)
{
    FOR_PATTERNED(n, j, p[j] = pat(seed, j));
}

/* Check the pattern of an n-byte layout, below `limit`. */
static void verify(const unsigned char *p, size_t n, size_t limit, uint32_t seed,
                   const char *where)
{
    FOR_PATTERNED(n, j, if (j < limit && p[j] != pat(seed, j))
        fail("%s: block %p of %zu bytes: byte %zu is 0x%02x, expected 0x%02x", where,
             (const void *)p, n, j, p[j], pat(seed, j)));
}

static void verify_zero(const unsigned char *p, size_t n)
{
    FOR_PATTERNED(n, j, if (p[j] != 0)
        fail("calloc: block %p of %zu bytes: byte %zu is 0x%02x", (const void *)p, n, j, p[j]));
}

/* ---- the model -------------------------------------------------------- */

static void check_fresh(const unsigned char *p, size_t n, size_t align, const char *what)
{
    size_t a = align > 16 ? align : 16;
    CHECK(((uintptr_t)p & (a - 1)) == 0, "%s(%zu): %p is not aligned to %zu", what, n,
          (const void *)p, a);
    size_t u = alloc_usable_size(p);
    CHECK(u >= n, "%s(%zu): usable size %zu is smaller", what, n, u);
}

static void adopt(unsigned s, unsigned char *p, size_t n, size_t align)
{
    slots[s] = (slot_t){ p, n, align, next_seed++ };
    fill(p, n, slots[s].seed);
}

static void check_slot(const slot_t *sl, const char *where)
{
    verify(sl->p, sl->n, sl->n, sl->seed, where);
    CHECK(alloc_usable_size(sl->p) >= sl->n, "%s: usable size of %p shrank below %zu", where,
          (const void *)sl->p, sl->n);
}

static void release(unsigned s, int how)
{
    slot_t *sl = &slots[s];
    if (sl->p == NULL)
        return;
    check_slot(sl, "before free");
    if (how == 1 && sl->align != 0)
        alloc_free_aligned_sized(sl->p, sl->align, sl->n);
    else if (how == 1)
        alloc_free_sized(sl->p, sl->n);
    else
        alloc_free(sl->p);
    sl->p = NULL;
}

static void expect_failure(void *p, int err, const char *what, size_t n)
{
    CHECK(p == NULL, "%s(%zu) should fail, gave %p", what, n, p);
    CHECK(errno == err, "%s(%zu): NULL with errno %d, expected %s", what, n, errno,
          err == EINVAL ? "EINVAL" : "ENOMEM");
}

/* ---- another thread --------------------------------------------------- */

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cond = PTHREAD_COND_INITIALIZER;
static enum { IDLE, FREE_IT, MALLOC_IT, DONE } job;
static void *job_ptr;
static size_t job_size;
static bool helper_started;

static void *helper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&job_lock);
    for (;;) {
        while (job != FREE_IT && job != MALLOC_IT)
            pthread_cond_wait(&job_cond, &job_lock);
        if (job == FREE_IT)
            alloc_free(job_ptr);
        else
            job_ptr = alloc_malloc(job_size);
        job = DONE;
        pthread_cond_broadcast(&job_cond);
    }
    return NULL;
}

/* Run one job on the helper thread and wait for it. */
static void *on_helper(int what, void *p, size_t n)
{
    if (!helper_started) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, helper, NULL) == 0, "pthread_create");
        pthread_detach(t);
        helper_started = true;
    }
    pthread_mutex_lock(&job_lock);
    job_ptr = p;
    job_size = n;
    job = what;
    pthread_cond_broadcast(&job_cond);
    while (job != DONE)
        pthread_cond_wait(&job_cond, &job_lock);
    job = IDLE;
    void *r = job_ptr;
    pthread_mutex_unlock(&job_lock);
    return r;
}

/* ---- operations ------------------------------------------------------- */

static void op_malloc(unsigned s, size_t n)
{
    release(s, 0);
    errno = 0;
    unsigned char *p = alloc_malloc(n);
    if (n >= ABSURD || n > (size_t)PTRDIFF_MAX - 8 * MiB) {
        expect_failure(p, ENOMEM, "malloc", n);
        return;
    }
    CHECK(p != NULL, "malloc(%zu) failed: errno %d", n, errno);
    check_fresh(p, n, 0, "malloc");
    adopt(s, p, n, 0);
}

static void op_calloc(unsigned s, size_t count, size_t n)
{
    release(s, 0);
    size_t total;
    bool overflow = __builtin_mul_overflow(count, n, &total);
    if (!overflow && total > MAX_SERVED && total < ABSURD)
        return;                 /* servable but too costly to fuzz */
    errno = 0;
    unsigned char *p = alloc_calloc(count, n);
    if (overflow || total >= ABSURD) {
        expect_failure(p, ENOMEM, "calloc", total);
        return;
    }
    CHECK(p != NULL, "calloc(%zu, %zu) failed: errno %d", count, n, errno);
    check_fresh(p, total, 0, "calloc");
    verify_zero(p, total);
    adopt(s, p, total, 0);
}

static void resize(unsigned s, size_t count, size_t n, bool array)
{
    slot_t *sl = &slots[s];
    size_t total;
    bool overflow = array ? __builtin_mul_overflow(count, n, &total) : (total = n, false);
    if (!overflow && total > MAX_SERVED && total < ABSURD)
        return;
    if (sl->p != NULL)
        check_slot(sl, "before realloc");
    errno = 0;
    unsigned char *q = array ? alloc_reallocarray(sl->p, count, n) : alloc_realloc(sl->p, n);
    const char *what = array ? "reallocarray" : "realloc";
    if (!overflow && total == 0 && sl->p != NULL) {
        /* As glibc's: the block is freed, the answer NULL. */
        CHECK(q == NULL, "%s(%p, 0) returned %p: it frees", what, (void *)sl->p, (void *)q);
        sl->p = NULL;
        return;
    }
    if (overflow || total >= ABSURD) {
        expect_failure(q, ENOMEM, what, total);
        if (sl->p != NULL)
            check_slot(sl, "after a failed realloc");
        return;
    }
    CHECK(q != NULL, "%s(%p, %zu) failed: errno %d", what, (void *)sl->p, total, errno);
    check_fresh(q, total, 0, what);
    if (sl->p == NULL) {
        adopt(s, q, total, 0);
        return;
    }
    size_t kept = total < sl->n ? total : sl->n;
    verify(q, sl->n, kept, sl->seed, "after realloc");
    sl->p = q;
    sl->n = total;
    sl->align = 0;
    fill(q, total, sl->seed);
}

static void op_aligned(unsigned s, size_t align, int expect, size_t n)
{
    release(s, 0);
    errno = 0;
    unsigned char *p = alloc_aligned(align, n);
    if (expect == EINVAL) {
        expect_failure(p, EINVAL, "aligned", n);
        return;
    }
    if (expect == ENOMEM || n >= ABSURD || n > (size_t)PTRDIFF_MAX - 8 * MiB) {
        /* An absurd size with a good alignment is ENOMEM. */
        expect_failure(p, ENOMEM, "aligned", n);
        return;
    }
    CHECK(p != NULL, "aligned(%zu, %zu) failed: errno %d", align, n, errno);
    check_fresh(p, n, align, "aligned");
    adopt(s, p, n, align);
}

static void op_usable(unsigned s)
{
    slot_t *sl = &slots[s];
    if (sl->p == NULL) {
        CHECK(alloc_usable_size(NULL) == 0, "usable_size(NULL) is not 0");
        return;
    }
    size_t u = alloc_usable_size(sl->p);
    CHECK(u >= sl->n, "usable size %zu < requested %zu", u, sl->n);
    /* The slack is the caller's to use: writing it must hurt nobody (the
     * neighbours' patterns are checked when they are freed). */
    size_t end = u < sl->n + 64 * KiB ? u : sl->n + 64 * KiB;
    memset(sl->p + sl->n, 0xa5, end - sl->n);
}

static void op_remote_free(unsigned s)
{
    slot_t *sl = &slots[s];
    if (sl->p == NULL)
        return;
    check_slot(sl, "before a free on another thread");
    on_helper(FREE_IT, sl->p, 0);
    sl->p = NULL;
}

static void op_remote_malloc(unsigned s, size_t n)
{
    if (n > MAX_SERVED)
        return;
    release(s, 0);
    unsigned char *p = on_helper(MALLOC_IT, NULL, n);
    CHECK(p != NULL, "malloc(%zu) on another thread failed", n);
    check_fresh(p, n, 0, "malloc on another thread");
    adopt(s, p, n, 0);
}

/* Every block is freed at the end of an input (and the helper thread is
 * idle): the allocator's own counters must agree. */
static void check_nothing_live(void)
{
    static alloc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    CHECK(alloc_stats_get(&st) == 0, "alloc_stats_get failed");
    size_t live = 0;
    for (unsigned c = 0; c < ALLOC_STATS_CLASSES; c++)
        live += st.classes[c].live_blocks;
    CHECK(live == 0 && st.large_live == 0 && st.huge_live == 0,
          "every block was freed, yet the statistics count %zu small, %zu large and %zu huge "
          "live blocks", live, st.large_live, st.huge_live);
    /* A mapping the kernel refused (an absurd size) is in no peak. */
    CHECK(st.committed_peak < ABSURD, "committed peak %zu bytes: more than any request can "
          "be served", st.committed_peak);
}

/* Heap profiling on at a mean of `rate` bytes between samples, or off:
 * the sampled blocks come from the sampled heap, and their frees, from
 * any thread, take the remote path (src/profile.c); the rate of every
 * input's start comes back when it goes off. */
static long prof_sample;

static void set_profiling(bool on, long rate)
{
    if (prof_sample == 0)
        prof_sample = alloc_option_get(ALLOC_OPTION_PROF_SAMPLE);
    CHECK(alloc_option_set(ALLOC_OPTION_PROF_SAMPLE, on ? rate : prof_sample) == 0,
          "setting PROF_SAMPLE");
    CHECK(alloc_option_set(ALLOC_OPTION_PROF, on) == 0, "setting PROF");
}

__attribute__((visibility("default")))
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_t in = { data, size };
    next_seed = 1;
    static const long delays[] = { 0, 1, 10, 1000 };
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    while (in.left != 0) {
        unsigned op = (unsigned)take(&in, 1) % 16;
        unsigned s = (unsigned)take(&in, 1) % SLOTS;
        switch (op) {
        case 0:
        case 1:
            op_malloc(s, take_size(&in));
            break;
        case 2: {
            size_t count = (size_t)take(&in, 2);
            op_calloc(s, count, take_size(&in));
            break;
        }
        case 3:
            resize(s, 1, take_size(&in), false);
            break;
        case 4: {
            size_t count = (size_t)take(&in, 2);
            resize(s, count, take_size(&in), true);
            break;
        }
        case 5: {
            int expect;
            size_t align = take_align(&in, &expect);
            op_aligned(s, align, expect, take_size(&in));
            break;
        }
        case 6:
            release(s, 0);
            break;
        case 7:
            release(s, 1);
            break;
        case 8:
            op_usable(s);
            break;
        case 9:
            alloc_collect((s & 1) != 0);
            break;
        case 10:
            op_remote_free(s);
            break;
        case 11:
            op_remote_malloc(s, take_size(&in));
            break;
        case 12:
            if (slots[s].p != NULL)
                check_slot(&slots[s], "check");
            break;
        case 13:
            if (s & 32)
                set_profiling(alloc_option_get(ALLOC_OPTION_PROF) == 0, 1024L << (s / 4 % 8));
            else
                CHECK(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delays[s % 4]) == 0,
                      "setting PURGE_DELAY_MS");
            break;
        default: {
            op_malloc(s, take_size(&in));
            resize(s, 1, take_size(&in), false);
            break;
        }
        }
    }
    for (unsigned s = 0; s < SLOTS; s++)
        release(s, (int)(s & 1));
    CHECK(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, delay) == 0, "restoring PURGE_DELAY_MS");
    if (alloc_option_get(ALLOC_OPTION_PROF) != 0)
        set_profiling(false, 0);
    check_nothing_live();
    return 0;
}
