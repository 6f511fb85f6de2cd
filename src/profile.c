/* profile.c - heap profiles: sampling at the entry points, and the
 * profiles in the heap-profile format of gperftools, which google-pprof
 * and jeprof read (docs/profiling.md).
 *
 * Small blocks are sampled by their page's traps (core/page.h), which
 * send the allocation here; the blocks no trap sees - large and huge
 * ones, whose mallocs take the slow path while profiling is on
 * (thread/sampled.h), and small ones the stash hands out
 * (thread/stash.h) - by a count of the bytes each thread was handed of
 * them (profile.h, shoal_prof_untrapped_left): the same Poisson process
 * over bytes, drawn per thread.
 *
 * A profile holds, for every stack that allocated a sampled block, the
 * estimated objects and bytes live now and allocated since profiling
 * began, already scaled (the header says "heapprofile", so pprof shows
 * the figures as they are), then the process's memory map, from which
 * pprof finds the binaries to symbolise the addresses.
 */
#define _GNU_SOURCE
#include "profile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shoal.h"
#include "core/message.h"
#include "os/os.h"
#include "thread/sampled.h"

__thread int64_t shoal_prof_untrapped_left __attribute__((tls_model("initial-exec"))) = -1;

SHOAL_ALLOC_PATH void *shoal_prof_sample_block(unsigned cls, bool zero, const void *frame)
{
    size_t rate = shoal_prof_rate();
    void *pcs[SHOAL_PROF_DEPTH];
    unsigned depth = rate != 0 ? shoal_prof_backtrace(pcs, frame) : 0;
    if (depth == 0)
        return NULL;
    return shoal_sampled_alloc(cls, zero, rate, pcs, depth);
}

/* Mark the large or huge block c sampled, or no more: its free takes the
 * slow way while it is. */
static void mark_sampled(const shoal_ptr_t *c, bool sampled)
{
    if (c->kind == SHOAL_PTR_LARGE)
        shoal_large_mark_sampled(c->pg, sampled);
    else
        shoal_huge_mark_sampled(c->huge, sampled);
}

/* The count's next interval (a count never drawn is negative). */
static int64_t untrapped_draw(void)
{
    uint64_t x = shoal_prof_interval(shoal_prof_rate());
    return x > INT64_MAX ? INT64_MAX : (int64_t)x;
}

bool shoal_prof_point_falls(size_t size)
{
    if (shoal_prof_untrapped_left < 0) {
        shoal_prof_untrapped_left = untrapped_draw();
        if (shoal_prof_pass(size))
            return false;
    }
    /* A sample point falls in this block: the next point is a fresh
     * draw from its end (the process has no memory). */
    shoal_prof_untrapped_left = untrapped_draw();
    return true;
}

SHOAL_ALLOC_PATH void shoal_prof_sample_big(void *p)
{
    size_t rate = shoal_prof_rate();
    shoal_ptr_t c = shoal_classify(p);
    size_t size = shoal_usable(p, &c, "malloc");
    if (shoal_prof_pass(size) || !shoal_prof_point_falls(size))
        return;
    void *pcs[SHOAL_PROF_DEPTH];
    unsigned depth = shoal_prof_backtrace(pcs, __builtin_frame_address(0));
    if (depth == 0)
        return;
    shoal_prof_lock();
    shoal_prof_record(p, size, rate, pcs, depth);
    shoal_prof_unlock();
    mark_sampled(&c, true);
}

void shoal_prof_unsample(const void *p, const shoal_ptr_t *c)
{
    shoal_prof_lock();
    shoal_prof_forget(p);
    shoal_prof_unlock();
    mark_sampled(c, false);
}

/* ---- writing a profile ------------------------------------------------
 * Everything below runs holding the dump's turn (shoal_prof_dump_begin),
 * which guards the buffer, and is async-signal-safe (open, read, write,
 * close).  The sites are read without the profiling lock, so a dump
 * never holds up a thread that samples or frees a sampled block, however
 * long it takes to write. */

typedef struct writer_s {
    int fd;
    size_t len;
    uint64_t live_bytes, live_objs, total_bytes, total_objs;
    unsigned sites;
    char buf[16384];
} writer_t;

static writer_t out SHOAL_SELDOM_BSS;

static void flush(writer_t *w)
{
    shoal_write_all(w->fd, w->buf, w->len);
    w->len = 0;
}

/* Append one formatted piece (shorter than a line of 64 frames). */
static void put(writer_t *w, const char *fmt, ...)
{
    if (sizeof w->buf - w->len < 128)   /* the longest piece is about 90 bytes */
        flush(w);
    va_list ap;
    va_start(ap, fmt);
    w->len += shoal_vformat(w->buf + w->len, sizeof w->buf - w->len, fmt, ap);
    va_end(ap);
}

static uint64_t objects(uint64_t fixed)
{
    return (fixed + SHOAL_PROF_OBJ_ONE / 2) / SHOAL_PROF_OBJ_ONE;
}

static uint64_t figure(const _Atomic uint64_t *f)
{
    return atomic_load_explicit(f, memory_order_relaxed);
}

static void add_site(const shoal_prof_site_t *s, void *arg)
{
    writer_t *w = arg;
    uint64_t live = figure(&s->live_bytes);
    w->live_bytes += live;
    w->live_objs += figure(&s->live_objs);
    w->total_bytes += figure(&s->total_bytes);
    w->total_objs += figure(&s->total_objs);
    w->sites += live != 0;
}

static void put_site(const shoal_prof_site_t *s, void *arg)
{
    writer_t *w = arg;
    put(w, "%lu: %lu [%lu: %lu] @", (unsigned long)objects(figure(&s->live_objs)),
        (unsigned long)figure(&s->live_bytes), (unsigned long)objects(figure(&s->total_objs)),
        (unsigned long)figure(&s->total_bytes));
    for (unsigned i = 0; i < s->depth; i++)
        put(w, " 0x%lx", (unsigned long)(uintptr_t)s->pcs[i]);
    put(w, "\n");
}

/* pprof finds the binaries to symbolise the addresses with in the
 * process's map, appended after the stacks. */
static void put_maps(writer_t *w)
{
    put(w, "\nMAPPED_LIBRARIES:\n");
    flush(w);
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n;
    while ((n = read(fd, w->buf, sizeof w->buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            shoal_write_all(w->fd, w->buf, (size_t)n);
    close(fd);
}

static void write_profile(int fd)
{
    writer_t *w = &out;
    w->fd = fd;
    w->len = 0;
    w->live_bytes = w->live_objs = w->total_bytes = w->total_objs = 0;
    w->sites = 0;
    shoal_prof_each_site(add_site, w);
    put(w, "heap profile: %lu: %lu [%lu: %lu] @ heapprofile\n",
        (unsigned long)objects(w->live_objs), (unsigned long)w->live_bytes,
        (unsigned long)objects(w->total_objs), (unsigned long)w->total_bytes);
    shoal_prof_each_site(put_site, w);
    put_maps(w);
}

static char prefix[256] = "shoal";
static _Atomic unsigned next_seq;       /* relaxed: only distinct numbers are asked of it */

/* <prefix>.<pid>.<seq>.heap, or <prefix>.<pid>.<what>.heap. */
static void profile_name(char *buf, size_t cap, const char *what)
{
    if (what != NULL)
        shoal_format(buf, cap, "%s.%d.%s.heap", prefix, (int)getpid(), what);
    else
        shoal_format(buf, cap, "%s.%d.%u.heap", prefix, (int)getpid(),
                     atomic_fetch_add_explicit(&next_seq, 1, memory_order_relaxed));
}

/* Write a profile to `path`, holding the dump's turn: 0 or open's errno. */
static int dump_to(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    write_profile(fd);
    close(fd);
    return 0;
}

int alloc_prof_dump(const char *path)
{
    if (shoal_prof_rate() == 0)
        return EINVAL;
    char name[sizeof prefix + 64];
    if (path == NULL) {
        profile_name(name, sizeof name, NULL);
        path = name;
    }
    int saved = errno;
    shoal_prof_dump_begin(true);
    int err = dump_to(path);
    shoal_prof_dump_end();
    errno = saved;
    return err;
}

void shoal_prof_signal(void)
{
    if (shoal_prof_rate() == 0 || !shoal_prof_dump_begin(false))
        return;
    char name[sizeof prefix + 64];
    profile_name(name, sizeof name, NULL);
    dump_to(name);
    shoal_prof_dump_end();
}

/* ---- start-up, options and the leak report at exit -------------------- */

/* PROF or PROF_SAMPLE changed (or start-up).  Without a stack walk in
 * this build (os/unwind.h), PROF goes back to 0. */
static void apply(long value)
{
    (void)value;
    size_t rate = shoal_opt(ALLOC_OPTION_PROF) ? (size_t)shoal_opt(ALLOC_OPTION_PROF_SAMPLE) : 0;
    if (!shoal_prof_set_rate(rate))
        alloc_option_set(ALLOC_OPTION_PROF, 0);
}

__attribute__((constructor(102))) static void profile_start(void)
{
    shoal_process_init();
    const char *p = getenv("SHOAL_PROF_PREFIX");
    if (p != NULL && *p != '\0') {
        if (strlen(p) < sizeof prefix)
            memcpy(prefix, p, strlen(p) + 1);
        else
            shoal_warning("SHOAL_PROF_PREFIX is too long; profiles go to %s.<pid>.<seq>.heap",
                          prefix);
    }
    apply(0);
    shoal_option_on_change(ALLOC_OPTION_PROF, apply);
    shoal_option_on_change(ALLOC_OPTION_PROF_SAMPLE, apply);
}

/* The sampled blocks still live at exit: the leak report. */
__attribute__((destructor)) static void profile_exit(void)
{
    if (!shoal_opt(ALLOC_OPTION_PROF_LEAKS) || shoal_prof_rate() == 0)
        return;
    char name[sizeof prefix + 64];
    profile_name(name, sizeof name, "leaks");
    shoal_prof_dump_begin(true);
    int err = dump_to(name);
    writer_t w = out;           /* its totals */
    shoal_prof_dump_end();
    if (err != 0)
        shoal_warning("the leak report cannot be written to %s (errno %d)", name, err);
    else
        shoal_info("leak report: about %lu bytes in %lu blocks from %u stacks still live "
                   "at exit, in %s (google-pprof --text <program> %s)",
                   (unsigned long)w.live_bytes, (unsigned long)objects(w.live_objs),
                   w.sites, name, name);
}
