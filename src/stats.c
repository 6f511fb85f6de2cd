/* stats.c - alloc_stats_get, the text and JSON reports, the dump on a
 * signal and the report at exit.
 *
 * Everything here is async-signal-safe: figures are read from atomic
 * counters and bitmaps (no lock is taken), reports are formatted by
 * message.c into a static buffer and written with one write(2).  A
 * `dumping` flag guards the buffer: a signal that arrives while a report
 * is being written (in any thread) is counted in dumps_skipped and
 * dropped rather than waited for, so a dump never deadlocks and every
 * report that is written is whole.
 */
#define _GNU_SOURCE
#include "shoal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/commit.h"
#include "core/huge.h"
#include "core/message.h"
#include "core/options.h"
#include "core/purge.h"
#include "core/size_class.h"
#include "os/os.h"
#include "profile.h"
#include "stats.h"
#include "thread/heap.h"

_Static_assert(ALLOC_STATS_CLASSES == SHOAL_CLASSES, "one row per size class");

static uint64_t start_ms;
static char stats_path[4096];                   /* SHOAL_STATS_FILE, or "": stderr */
static atomic_flag dumping = ATOMIC_FLAG_INIT;
/* Relaxed: counts, and a number kept for the report; the report's buffer
 * is guarded by `dumping` (acquire to take, release to give). */
static _Atomic uint64_t n_dumps, n_skipped;
static _Atomic int installed_signal;            /* ours, 0 if none */
static struct sigaction previous;               /* what we replaced */
static alloc_stats_t report_stats;              /* guarded by `dumping` */
static char report_buf[32768];                  /* guarded by `dumping` */

static size_t read_resident(void)
{
    char buf[128];
    if (shoal_os_read_small_file("/proc/self/statm", buf, sizeof buf) < 0)
        return 0;
    const char *s = buf;
    while (*s != ' ' && *s != '\0')     /* skip the total size */
        s++;
    size_t pages = 0;
    while (*s == ' ')
        s++;
    while (*s >= '0' && *s <= '9')
        pages = pages * 10 + (size_t)(*s++ - '0');
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- current values and their peaks ---------------------------------- *
 *
 * A value that changes where a global atomic already counts it keeps an
 * exact peak, updated where it changes: mapped (os.c), pool slots in use
 * (pool.c), live heaps (heap.c), huge blocks live and cached (huge.c);
 * resident's comes from the kernel (getrusage's maxrss).
 *
 * The others are sums of per-thread counters that no fast path may add
 * up, so their peaks are sampled: at every alloc_stats_get (and so every
 * report and dump), and when a heap needs a fresh page or a large or huge
 * block is made from new memory - the moments a thread's live memory is
 * at a high - if
 * PEAK_SAMPLE_MS per live heap have passed since the last sample.  A
 * sample reads about 250 counters per heap, so the interval keeps its
 * cost a small, fixed share of one thread's time however many threads
 * there are; what it can miss is a rise and fall shorter than that.  The
 * clock is the coarse one (a few ns, where the precise one costs 30 or
 * more on a slow path that may run every few hundred allocations), so
 * the interval is also at least one kernel tick (1-4 ms).
 */
#define PEAK_SAMPLE_MS 1

typedef struct summary_s {
    size_t allocated, active, committed, dirty, large, large_bytes, abandoned;
} summary_t;

/* Sampled peaks: relaxed, raised by a compare-exchange loop (counter.h). */
static _Atomic size_t peak_allocated, peak_active, peak_dirty;
static _Atomic size_t peak_large, peak_large_bytes, peak_abandoned;
static _Atomic size_t peak_class_blocks[SHOAL_CLASSES], peak_class_pages[SHOAL_CLASSES];
static _Atomic size_t peak_large_bin[ALLOC_STATS_LARGE_BINS];
_Static_assert(ALLOC_STATS_LARGE_BINS == SHOAL_MAX_ORDER + 1, "a large bin per order");
_Static_assert(ALLOC_STATS_HUGE_BINS == SHOAL_HUGE_BINS, "the huge bins of huge.c");
/* Relaxed: a time; the sample buffer is guarded by `sampling` (acquire to
 * take, release to give). */
static _Atomic uint64_t next_sample_ms;
static atomic_flag sampling = ATOMIC_FLAG_INIT;
static shoal_heap_stats_t sample_heaps;         /* guarded by `sampling` */

/* A class's live blocks.  A block freed between our reads of the two
 * sums could make frees run ahead of allocs for a moment: clamp at 0. */
static size_t live_blocks(const shoal_heap_stats_t *heaps, unsigned c)
{
    return heaps->allocs[c] > heaps->frees[c] ? (size_t)(heaps->allocs[c] - heaps->frees[c]) : 0;
}

/* A sum of counters that go up in one heap and down in another (pages,
 * large blocks by order): read while they change, it may dip below 0 for
 * a moment; clamp it. */
static size_t clamped(uint64_t sum)
{
    return (int64_t)sum > 0 ? (size_t)sum : 0;
}

/* Read every counter once, update the sampled peaks, and sum up. */
static void sample(shoal_heap_stats_t *heaps, shoal_pool_stats_t *pool, shoal_huge_stats_t *huge,
                   summary_t *sum)
{
    shoal_pool_stats(pool);
    shoal_huge_stats(huge);
    shoal_heap_huge_stats(huge);        /* after: see shoal_huge_slot_stats */
    shoal_heap_stats(heaps);
    sum->large_bytes = (size_t)heaps->large_bytes;
    sum->allocated = sum->large_bytes + huge->live_bytes;
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        size_t n = live_blocks(heaps, c);
        sum->allocated += n * shoal_class_size(c);
        shoal_peak_update(&peak_class_blocks[c], n);
        shoal_peak_update(&peak_class_pages[c], clamped(heaps->pages[c]));
    }
    for (unsigned o = 0; o < ALLOC_STATS_LARGE_BINS; o++)
        shoal_peak_update(&peak_large_bin[o], clamped(heaps->large_live[o]));
    sum->active = (pool->slots_claimed << SHOAL_SLOT_SHIFT) + huge->live_bytes;
    sum->dirty = pool->slots_dirty_free;
    sum->committed = shoal_commit_charged();
    sum->large = (size_t)(heaps->large_allocs - heaps->large_frees);
    sum->abandoned = heaps->abandoned_pages;
    shoal_peak_update(&peak_allocated, sum->allocated);
    shoal_peak_update(&peak_active, sum->active);
    shoal_peak_update(&peak_dirty, sum->dirty);
    shoal_peak_update(&peak_large, sum->large);
    shoal_peak_update(&peak_large_bytes, sum->large_bytes);
    shoal_peak_update(&peak_abandoned, sum->abandoned);
}

void shoal_stats_tick(void)
{
    if (!SHOAL_STATS_ENABLED)
        return;
    uint64_t now = shoal_os_now_ms();
    uint64_t due = atomic_load_explicit(&next_sample_ms, memory_order_relaxed);
    /* One thread wins the sample; the others go on at once. */
    if (now < due || atomic_flag_test_and_set_explicit(&sampling, memory_order_acquire))
        return;
    shoal_pool_stats_t pool;
    shoal_huge_stats_t huge;
    summary_t sum;
    sample(&sample_heaps, &pool, &huge, &sum);
    size_t heaps = sample_heaps.live > 0 ? sample_heaps.live : 1;
    atomic_store_explicit(&next_sample_ms, now + PEAK_SAMPLE_MS * heaps, memory_order_relaxed);
    atomic_flag_clear_explicit(&sampling, memory_order_release);
}

void shoal_stats_fork_child(void)
{
    /* A thread that was sampling or writing a report when another forked
     * does not exist here: its flags would hold every report of the
     * child (its exit report included) for ever. */
    atomic_flag_clear_explicit(&sampling, memory_order_relaxed);
    atomic_flag_clear_explicit(&dumping, memory_order_relaxed);
}

static size_t peak_of(_Atomic size_t *peak)
{
    return atomic_load_explicit(peak, memory_order_relaxed);
}

static size_t max_of(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Everything, into a struct of the current version. */
static void stats_fill(alloc_stats_t *st)
{
    shoal_heap_stats_t heaps_local, *heaps = &heaps_local;
    shoal_pool_stats_t pool;
    shoal_huge_stats_t huge;
    summary_t sum;
    struct rusage ru;
    sample(heaps, &pool, &huge, &sum);
    *st = (alloc_stats_t){ .size = sizeof *st, .version = ALLOC_STATS_VERSION };
    st->elapsed_ms = start_ms != 0 ? shoal_os_now_ms() - start_ms : 0;
    for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
        alloc_class_stats_t *k = &st->classes[c];
        alloc_class_peaks_t *kp = &st->class_peaks[c];
        k->block_size = shoal_class_size(c);
        k->requests = heaps->allocs[c];
        k->live_blocks = live_blocks(heaps, c);
        k->live_bytes = k->live_blocks * k->block_size;
        k->pages = clamped(heaps->pages[c]);
        kp->live_blocks = peak_of(&peak_class_blocks[c]);
        kp->live_bytes = kp->live_blocks * k->block_size;
        kp->pages = peak_of(&peak_class_pages[c]);
    }
    for (unsigned o = 0; o < ALLOC_STATS_LARGE_BINS; o++) {
        alloc_bin_stats_t *bin = &st->large_bins[o];
        bin->live = clamped(heaps->large_live[o]);
        bin->live_bytes = bin->live * (SHOAL_SLOT_SIZE << o);
        bin->live_peak = max_of(peak_of(&peak_large_bin[o]), bin->live);
    }
    for (unsigned i = 0; i < ALLOC_STATS_HUGE_BINS; i++)
        st->huge_bins[i] = (alloc_bin_stats_t){ huge.bin_live[i], huge.bin_bytes[i],
                                                huge.bin_peak[i] };
    st->allocated = sum.allocated;
    st->active = sum.active;
    st->committed = sum.committed;
    st->resident = read_resident();
    st->mapped = shoal_os_mapped();
    st->purged = pool.purged_bytes;
    st->allocated_peak = peak_of(&peak_allocated);
    st->active_peak = max_of(peak_of(&peak_active), pool.slots_claimed_peak << SHOAL_SLOT_SHIFT);
    st->committed_peak = max_of(shoal_commit_peak(), st->committed);
    st->mapped_peak = max_of(shoal_os_mapped_peak(), st->mapped);
    st->superpages = pool.superpages;
    st->purge_due_ms = shoal_purge_due_in_ms();
    st->metadata = pool.superpages * sizeof(shoal_superpage_t) +
                   heaps->structs * heaps->struct_bytes;
    st->pool_slots_used = pool.slots_claimed;
    st->pool_slots_used_peak = max_of(pool.slots_claimed_peak, pool.slots_claimed);
    st->pool_slots_dirty = sum.dirty;
    st->pool_slots_dirty_peak = peak_of(&peak_dirty);
    st->pool_claims = pool.claims;
    st->pool_releases = pool.releases;
    st->large_requests = heaps->large_allocs;
    st->large_live = sum.large;
    st->large_live_bytes = sum.large_bytes;
    st->large_live_peak = peak_of(&peak_large);
    st->large_live_bytes_peak = peak_of(&peak_large_bytes);
    st->huge_requests = huge.requests;
    st->huge_live = huge.live;
    st->huge_live_bytes = huge.live_bytes;
    st->huge_cached = huge.cached;
    st->huge_cached_bytes = huge.cached_bytes;
    /* An exact peak is raised just after its value: a read in between
     * must not show the value above its peak. */
    st->huge_live_peak = max_of(huge.live_peak, huge.live);
    st->huge_live_bytes_peak = max_of(huge.live_bytes_peak, huge.live_bytes);
    st->huge_cached_peak = max_of(huge.cached_peak, huge.cached);
    st->huge_cached_bytes_peak = max_of(huge.cached_bytes_peak, huge.cached_bytes);
    st->heaps_live = heaps->live;
    st->heaps_live_peak = max_of(heaps->live_peak, heaps->live);
    st->heaps_created = heaps->created;
    st->heaps_exited = heaps->exited;
    st->heaps_abandoned_pages = sum.abandoned;
    st->heaps_abandoned_pages_peak = peak_of(&peak_abandoned);
    st->pages_adopted = heaps->adopted;
    st->remote_frees = heaps->remote_frees;
    st->remote_in_flight = (size_t)(heaps->remote_frees - heaps->remote_received);
    st->remote_atomics = heaps->remote_atomics;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        st->minor_faults = (uint64_t)ru.ru_minflt;
        st->major_faults = (uint64_t)ru.ru_majflt;
        st->resident_peak = (size_t)ru.ru_maxrss * 1024;
    }
    if (st->resident_peak < st->resident)      /* the kernel updates maxrss lazily */
        st->resident_peak = st->resident;
    st->dumps = atomic_load_explicit(&n_dumps, memory_order_relaxed);
    st->dumps_skipped = atomic_load_explicit(&n_skipped, memory_order_relaxed);
}

/* A caller built against an older shoal.h passes a smaller size: it gets
 * the prefix it knows, and the version that prefix is. */
int alloc_stats_get(alloc_stats_t *st)
{
    if (st == NULL || st->size < ALLOC_STATS_SIZE_V2)
        return EINVAL;
    size_t size = st->size;
    if (size >= sizeof *st) {
        stats_fill(st);
    } else {
        alloc_stats_t full;
        stats_fill(&full);
        full.version = size >= ALLOC_STATS_SIZE_V3 ? 3 : 2;
        memcpy(st, &full, size);
    }
    st->size = size;
    return 0;
}

/* ---- formatting ------------------------------------------------------- */

/* The block size a large (huge) bin's blocks have (at most). */
static size_t bin_size(bool huge, unsigned i)
{
    return huge ? SHOAL_HUGE_BIN_MIN << i : SHOAL_SLOT_SIZE << i;
}

/* Blocks the class's pages can hold: what live blocks are a share of
 * (their utilisation, the figure that names fragmentation). */
static size_t class_capacity(unsigned c, const alloc_class_stats_t *k)
{
    return k->pages * ((SHOAL_SLOT_SIZE << shoal_class_page_order(c)) / k->block_size);
}

/* Live blocks as a percentage of capacity, or 100 with no pages. */
static size_t class_used_pct(unsigned c, const alloc_class_stats_t *k)
{
    size_t cap = class_capacity(c, k);
    return cap == 0 ? 100 : k->live_blocks * 100 / cap;
}

typedef struct out_s {
    char *buf;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    o->len += shoal_vformat(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
}

/* The options in effect (options.c formats them, for VERBOSE too). */
static void put_options(out_t *o, bool json)
{
    o->len += shoal_options_format(o->buf + o->len, o->cap - o->len, json);
}

/* "12.3 MiB": one decimal, binary units. */
static const char *human(char *b, size_t cap, size_t v)
{
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    unsigned u = 0;
    size_t whole = v, tenth = 0;
    while (whole >= 1024 && u < 4) {
        tenth = (whole % 1024) * 10 / 1024;
        whole /= 1024;
        u++;
    }
    if (u == 0)
        shoal_format(b, cap, "%zu B", v);
    else
        shoal_format(b, cap, "%zu.%zu %s", whole, tenth, unit[u]);
    return b;
}

/* The bins that ever held a block: in text, one line of "up to size:
 * live (peak N)" entries; in JSON, a "bins" array of objects whose
 * "up_to" is the bin's biggest block (null for the last huge bin, which
 * takes everything bigger than the one before). */
static void put_bins(out_t *o, bool json, const alloc_bin_stats_t *bins, unsigned n, bool huge)
{
    char a[24];
    bool any = false;
    if (json)
        put(o, "\"bins\":[");
    for (unsigned i = 0; i < n; i++) {
        const alloc_bin_stats_t *bin = &bins[i];
        if (bin->live_peak == 0)
            continue;
        bool open = huge && i + 1 == n;
        size_t size = bin_size(huge, open ? i - 1 : i);
        if (json) {
            char up_to[24] = "null";
            if (!open)
                shoal_format(up_to, sizeof up_to, "%zu", size);
            put(o, "%s{\"up_to\":%s,\"live\":%zu,\"live_bytes\":%zu,\"live_peak\":%zu}",
                any ? "," : "", up_to, bin->live, bin->live_bytes, bin->live_peak);
        } else {
            put(o, "%s%s %s: %zu (peak %zu)",
                any ? "," : huge ? "huge by size  " : "large by size ", open ? " >" : "",
                human(a, sizeof a, size), bin->live, bin->live_peak);
        }
        any = true;
    }
    if (json)
        put(o, "]");
    else if (any)
        put(o, "\n");
}


/* a / b with two decimals, "-" when b is 0. */
static const char *ratio(char *b, size_t cap, size_t a, size_t d)
{
    if (d == 0)
        return shoal_format(b, cap, "-"), b;
    uint64_t r = (uint64_t)((__uint128_t)a * 100 / d);
    shoal_format(b, cap, "%lu.%lu%lu", (unsigned long)(r / 100),
                 (unsigned long)(r / 10 % 10), (unsigned long)(r % 10));
    return b;
}

/* ---- the reports' fields ------------------------------------------------
 * One table for the text and the JSON report: the groups of figures in
 * the order both show them, each figure with the alloc_stats_t field
 * that holds it and the one that holds its peak.  JSON writes a group as
 * an object of its figures (a figure's peak as KEY_peak) - the first and
 * the last group's at the top level - and text as a line, the memory
 * group as a table of current and peak.  What is no field (the bins, the
 * options, the classes) comes after its group's figures in both. */

enum figure_kind {
    FIG_COUNT,          /* a number */
    FIG_BYTES,          /* bytes: "12.3 MiB" in text */
    FIG_DUE,            /* ms to the next purge pass, -1: none due */
    FIG_RATIO,          /* at / of: two decimals; null (JSON) or "-" with of = 0 */
};

typedef struct figure_s {
    const char *key;
    const char *label;  /* its name in text, if not the key */
    enum figure_kind kind;
    size_t at;          /* offset of its field in alloc_stats_t */
    size_t peak;        /* of its peak's field, NO_FIELD if none; FIG_RATIO: the divisor */
} figure_t;

typedef struct group_s {
    const char *key;            /* NULL: JSON puts its figures at the top level */
    const char *title;          /* its name in the text report */
    const figure_t *figs;
    unsigned n;
    bool rows;                  /* text: a table of current and peak */
    void (*after)(out_t *, bool json, const alloc_stats_t *);
} group_t;

#define NO_FIELD SIZE_MAX
#define AT(m) offsetof(alloc_stats_t, m)
#define FIG(key, kind, m) { key, NULL, kind, AT(m), NO_FIELD }
#define FIG_PEAK(key, kind, m) { key, NULL, kind, AT(m), AT(m##_peak) }
#define FIG_RATIO(key, a, b) { key, NULL, FIG_RATIO, AT(a), AT(b) }
#define GROUP(key, title, figs, rows, after) { key, title, figs, sizeof figs / sizeof figs[0], rows, after }

/* Every figure's field is one word (size_t, uint64_t or long). */
_Static_assert(sizeof(size_t) == 8 && sizeof(long) == 8, "figures are read as 64-bit words");

static const figure_t memory_figs[] = {
    FIG_PEAK("allocated", FIG_BYTES, allocated), FIG_PEAK("active", FIG_BYTES, active),
    FIG_PEAK("resident", FIG_BYTES, resident),   FIG_PEAK("mapped", FIG_BYTES, mapped),
    FIG_PEAK("committed", FIG_BYTES, committed), FIG("purged", FIG_BYTES, purged),
    FIG("metadata", FIG_BYTES, metadata),
};
static const figure_t fragmentation_figs[] = {
    FIG_RATIO("active_allocated", active, allocated),
    FIG_RATIO("resident_active", resident, active),
    FIG_RATIO("resident_allocated", resident, allocated),
};
static const figure_t pool_figs[] = {
    FIG("superpages", FIG_COUNT, superpages),
    FIG_PEAK("slots_used", FIG_COUNT, pool_slots_used),
    FIG_PEAK("slots_dirty", FIG_COUNT, pool_slots_dirty),
    FIG("claims", FIG_COUNT, pool_claims),
    FIG("releases", FIG_COUNT, pool_releases),
    { "purge_due_ms", "next purge pass", FIG_DUE, AT(purge_due_ms), NO_FIELD },
};
static const figure_t large_figs[] = {
    FIG("requests", FIG_COUNT, large_requests),
    FIG_PEAK("live", FIG_COUNT, large_live),
    FIG_PEAK("live_bytes", FIG_BYTES, large_live_bytes),
};
static const figure_t huge_figs[] = {
    FIG("requests", FIG_COUNT, huge_requests),
    FIG_PEAK("live", FIG_COUNT, huge_live),
    FIG_PEAK("live_bytes", FIG_BYTES, huge_live_bytes),
    FIG_PEAK("cached", FIG_COUNT, huge_cached),
    FIG_PEAK("cached_bytes", FIG_BYTES, huge_cached_bytes),
};
static const figure_t threads_figs[] = {
    FIG_PEAK("heaps_live", FIG_COUNT, heaps_live),
    FIG("heaps_created", FIG_COUNT, heaps_created),
    FIG("heaps_exited", FIG_COUNT, heaps_exited),
    FIG_PEAK("abandoned_pages", FIG_COUNT, heaps_abandoned_pages),
    FIG("pages_adopted", FIG_COUNT, pages_adopted),
    FIG("remote_frees", FIG_COUNT, remote_frees),
    FIG("remote_in_flight", FIG_COUNT, remote_in_flight),
    FIG("remote_atomics", FIG_COUNT, remote_atomics),
};
static const figure_t faults_figs[] = {
    FIG("minor", FIG_COUNT, minor_faults),
    FIG("major", FIG_COUNT, major_faults),
};
static const figure_t dumps_figs[] = {
    FIG("dumps", FIG_COUNT, dumps),
    FIG("dumps_skipped", FIG_COUNT, dumps_skipped),
};

static void put_large_bins(out_t *o, bool json, const alloc_stats_t *s)
{
    put_bins(o, json, s->large_bins, ALLOC_STATS_LARGE_BINS, false);
}

static void put_huge_bins(out_t *o, bool json, const alloc_stats_t *s)
{
    put_bins(o, json, s->huge_bins, ALLOC_STATS_HUGE_BINS, true);
}

static const group_t groups[] = {
    GROUP(NULL, "memory", memory_figs, true, NULL),
    GROUP("fragmentation", "fragmentation", fragmentation_figs, false, NULL),
    GROUP("pool", "pool", pool_figs, false, NULL),
    GROUP("large", "large", large_figs, false, put_large_bins),
    GROUP("huge", "huge", huge_figs, false, put_huge_bins),
    GROUP("threads", "threads", threads_figs, false, NULL),
    GROUP("faults", "page faults", faults_figs, false, NULL),
    GROUP(NULL, "reports", dumps_figs, false, NULL),
};

static uint64_t field(const alloc_stats_t *s, size_t at)
{
    uint64_t v;
    memcpy(&v, (const char *)s + at, sizeof v);
    return v;
}

/* A figure's value (or its peak's) as the report shows it. */
static const char *figure_text(char *b, size_t cap, const alloc_stats_t *s, const figure_t *f,
                               size_t at, bool json)
{
    uint64_t v = field(s, at);
    switch (f->kind) {
    case FIG_BYTES:
        if (!json)
            return human(b, cap, (size_t)v);
        break;
    case FIG_DUE:
        if (!json && (long)v < 0)
            return shoal_format(b, cap, "none due"), b;
        shoal_format(b, cap, json ? "%ld" : "in %ld ms", (long)v);
        return b;
    case FIG_RATIO:
        if (json && field(s, f->peak) == 0)
            return shoal_format(b, cap, "null"), b;
        return ratio(b, cap, (size_t)v, (size_t)field(s, f->peak));
    case FIG_COUNT:
        break;
    }
    shoal_format(b, cap, "%lu", (unsigned long)v);
    return b;
}

static bool has_peak(const figure_t *f)
{
    return f->kind != FIG_RATIO && f->peak != NO_FIELD;
}

static void text_group(out_t *o, const group_t *g, const alloc_stats_t *s)
{
    char a[32], b[32];
    if (g->rows) {
        put(o, "%-22s %12s %12s\n", g->title, "current", "peak");
        for (unsigned i = 0; i < g->n; i++) {
            const figure_t *f = &g->figs[i];
            put(o, "  %-18s %12s %12s\n", f->key, figure_text(a, sizeof a, s, f, f->at, false),
                has_peak(f) ? figure_text(b, sizeof b, s, f, f->peak, false) : "");
        }
    } else {
        put(o, "%-14s", g->title);
        for (unsigned i = 0; i < g->n; i++) {
            const figure_t *f = &g->figs[i];
            put(o, "%s %s %s", i ? "," : "", f->label != NULL ? f->label : f->key,
                figure_text(a, sizeof a, s, f, f->at, false));
            if (has_peak(f))
                put(o, " (peak %s)", figure_text(b, sizeof b, s, f, f->peak, false));
        }
        put(o, "\n");
    }
    if (g->after != NULL)
        g->after(o, false, s);
}

static void json_group(out_t *o, const group_t *g, const alloc_stats_t *s)
{
    char a[32];
    if (g->key != NULL)
        put(o, "\"%s\":{", g->key);
    for (unsigned i = 0; i < g->n; i++) {
        const figure_t *f = &g->figs[i];
        put(o, "%s\"%s\":%s", i ? "," : "", f->key, figure_text(a, sizeof a, s, f, f->at, true));
        if (has_peak(f))
            put(o, ",\"%s_peak\":%s", f->key, figure_text(a, sizeof a, s, f, f->peak, true));
    }
    if (g->after != NULL) {
        put(o, ",");
        g->after(o, true, s);
    }
    put(o, g->key != NULL ? "}," : ",");
}

static void text_report(out_t *o, const alloc_stats_t *s)
{
    char a[24], b[24];
    put(o, "shoal %d.%d statistics, pid %d, %lu.%lu s since start\n", SHOAL_VERSION_MAJOR,
        SHOAL_VERSION_MINOR, (int)getpid(), (unsigned long)(s->elapsed_ms / 1000),
        (unsigned long)(s->elapsed_ms / 100 % 10));
    for (unsigned g = 0; g < sizeof groups / sizeof groups[0]; g++)
        text_group(o, &groups[g], s);
    put(o, "options       ");
    put_options(o, false);
    put(o, "\n");
    put(o, "                                            live                    "
           "            peak\n");
    put(o, "class   block      requests        blocks        bytes  pages  used        blocks"
           "        bytes  pages\n");
    for (unsigned i = 0; i < ALLOC_STATS_CLASSES; i++) {
        const alloc_class_stats_t *k = &s->classes[i];
        const alloc_class_peaks_t *kp = &s->class_peaks[i];
        if (k->requests == 0 && k->pages == 0)
            continue;
        put(o, "%5u %7zu %13lu %13zu %12s %6zu %4zu%% %13zu %12s %6zu\n", i, k->block_size,
            (unsigned long)k->requests, k->live_blocks, human(a, sizeof a, k->live_bytes),
            k->pages, class_used_pct(i, k), kp->live_blocks, human(b, sizeof b, kp->live_bytes),
            kp->pages);
    }
}

static void json_report(out_t *o, const alloc_stats_t *s)
{
    put(o, "{\"shoal\":\"%d.%d\",\"version\":%u,\"pid\":%d,\"elapsed_ms\":%lu,",
        SHOAL_VERSION_MAJOR, SHOAL_VERSION_MINOR, s->version, (int)getpid(),
        (unsigned long)s->elapsed_ms);
    for (unsigned g = 0; g < sizeof groups / sizeof groups[0]; g++)
        json_group(o, &groups[g], s);
    put(o, "\"options\":{");
    put_options(o, true);
    put(o, "},\"classes\":[");
    const char *sep = "";
    for (unsigned i = 0; i < ALLOC_STATS_CLASSES; i++) {
        const alloc_class_stats_t *k = &s->classes[i];
        const alloc_class_peaks_t *kp = &s->class_peaks[i];
        if (k->requests == 0 && k->pages == 0)
            continue;
        put(o, "%s{\"class\":%u,\"block_size\":%zu,\"requests\":%lu,\"live_blocks\":%zu,"
               "\"live_bytes\":%zu,\"pages\":%zu,\"capacity_blocks\":%zu,"
               "\"live_blocks_peak\":%zu,\"live_bytes_peak\":%zu,\"pages_peak\":%zu}",
            sep, i, k->block_size, (unsigned long)k->requests, k->live_blocks, k->live_bytes,
            k->pages, class_capacity(i, k), kp->live_blocks, kp->live_bytes, kp->pages);
        sep = ",";
    }
    put(o, "]}\n");
}

/* Format and write one report.  `wait`: an explicit call waits for a
 * report in progress; a signal handler must not, and drops its dump. */
static bool report(int fd, bool json, bool wait, _Atomic uint64_t *count)
{
    while (atomic_flag_test_and_set_explicit(&dumping, memory_order_acquire)) {
        if (!wait)
            return false;
        sched_yield();
    }
    /* Counted before the figures are read: a dump shows itself. */
    if (count != NULL)
        atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
    out_t o = { report_buf, 0, sizeof report_buf };
    stats_fill(&report_stats);
    if (json)
        json_report(&o, &report_stats);
    else
        text_report(&o, &report_stats);
    shoal_write_all(fd, o.buf, o.len);
    atomic_flag_clear_explicit(&dumping, memory_order_release);
    return true;
}

const char *alloc_version(void)
{
    return SHOAL_VERSION;
}

void alloc_stats_print(int fd)
{
    report(fd, false, true, NULL);
}

void alloc_stats_print_json(int fd)
{
    report(fd, true, true, NULL);
}

/* ---- the signal dump and the report at exit --------------------------- */

/* With SHOW_STATS and no SHOAL_STATS_FILE, the exit report goes to stderr,
 * and many programs close it before they exit (coreutils do, to catch
 * write errors): the report was lost without a trace.  So shoal keeps a
 * copy of stderr from start-up, with the file it named, and writes there
 * when descriptor 2 is closed - but only while the copy still names that
 * file, so that a daemon that closed every descriptor and opened others
 * under the same numbers never finds a report in a file of its own. */
static int saved_stderr = -1;
static dev_t saved_dev;
static ino_t saved_ino;

static void keep_stderr(void)
{
    struct stat st;
    if (stats_path[0] != '\0' || !shoal_opt(ALLOC_OPTION_SHOW_STATS) || fstat(2, &st) != 0)
        return;
    saved_stderr = fcntl(2, F_DUPFD_CLOEXEC, 3);
    saved_dev = st.st_dev;
    saved_ino = st.st_ino;
}

/* Where a report for stderr goes: descriptor 2 while it is open, else the
 * copy if it is still the same file, else nowhere (-1: write fails). */
static int stderr_fd(void)
{
    struct stat st;
    if (fcntl(2, F_GETFD) != -1 || saved_stderr < 0)
        return 2;
    if (fstat(saved_stderr, &st) == 0 && st.st_dev == saved_dev && st.st_ino == saved_ino)
        return saved_stderr;
    return -1;
}

/* A report to SHOAL_STATS_FILE (or stderr).  The file is opened for each
 * report, never held: a daemon that closes every descriptor, or reuses
 * their numbers, neither loses its reports nor finds them in a file of
 * its own.  open(2) and close(2) are async-signal-safe. */
static bool dump(bool wait, _Atomic uint64_t *count)
{
    int fd = stats_path[0] != '\0'
                 ? open(stats_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    bool done = report(fd >= 0 ? fd : stderr_fd(), shoal_opt(ALLOC_OPTION_STATS_JSON) != 0,
                       wait, count);
    if (fd >= 0)
        close(fd);
    return done;
}

static void on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    if (!dump(false, &n_dumps))
        atomic_fetch_add_explicit(&n_skipped, 1, memory_order_relaxed);
    shoal_prof_signal();
    errno = saved;
}

/* STATS_SIGNAL changed (or start-up): move our handler to the new signal.
 * A signal the program handles already is left alone, with a warning. */
static void apply_stats_signal(long sig)
{
    /* Relaxed: it only names the signal; sigaction orders the rest. */
    int old = atomic_exchange_explicit(&installed_signal, 0, memory_order_relaxed);
    if (old != 0)
        sigaction(old, &previous, NULL);
    if (sig <= 0)
        return;
    struct sigaction cur, sa = { 0 };
    if (sigaction((int)sig, NULL, &cur) != 0) {
        shoal_warning("STATS_SIGNAL=%ld is not a signal shoal can handle", sig);
        return;
    }
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)) {
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction((int)sig, &sa, &previous) == 0)
            atomic_store_explicit(&installed_signal, (int)sig, memory_order_relaxed);
        return;
    }
    shoal_warning("signal %ld already has a handler in this program; "
                  "STATS_SIGNAL leaves it alone", sig);
}

__attribute__((constructor(101))) static void stats_start(void)
{
    shoal_process_init();
    shoal_heap_set_hooks(shoal_stats_tick, shoal_stats_fork_child);
    start_ms = shoal_os_now_ms();
    const char *path = getenv("SHOAL_STATS_FILE");
    if (path != NULL && *path != '\0') {
        /* Try it now, so that a bad path is reported at start-up. */
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0 || strlen(path) >= sizeof stats_path)
            shoal_warning("SHOAL_STATS_FILE=%s cannot be opened; reports go to stderr", path);
        else
            memcpy(stats_path, path, strlen(path) + 1);
        if (fd >= 0)
            close(fd);
    }
    keep_stderr();
    apply_stats_signal(shoal_opt(ALLOC_OPTION_STATS_SIGNAL));
    shoal_option_on_change(ALLOC_OPTION_STATS_SIGNAL, apply_stats_signal);
}

__attribute__((destructor)) static void stats_exit(void)
{
    if (shoal_opt(ALLOC_OPTION_SHOW_STATS))
        dump(true, NULL);
}
