/* stats.c - alloc_stats_get, the peaks, the dump on a signal and the
 * report at exit (report.c formats the reports).
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
#include "core/sync.h"
#include "os/os.h"
#include "figures.h"
#include "profile.h"
#include "report.h"
#include "stats.h"
#include "thread/heap.h"

_Static_assert(ALLOC_STATS_CLASSES == SHOAL_CLASSES, "one row per size class");

static uint64_t start_ms;
/* SHOAL_STATS_FILE, or "": stderr */
static char stats_path[4096] SHOAL_SELDOM_BSS;
static atomic_flag dumping = ATOMIC_FLAG_INIT;
/* Relaxed: counts, and a number kept for the report; the report's buffer
 * is guarded by `dumping` (acquire to take, release to give). */
static _Atomic uint64_t n_dumps, n_skipped;
static _Atomic int installed_signal;            /* ours, 0 if none */
static struct sigaction previous;               /* what we replaced */
/* The report's figures and text, guarded by `dumping`. */
static alloc_stats_t report_stats SHOAL_SELDOM_BSS;
static char report_buf[32768] SHOAL_SELDOM_BSS;

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
    size_t allocated, active, mapped, committed, dirty, large, large_bytes, abandoned;
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
    /* A huge mapping is charged before it is mapped and unmapped before
     * it is uncharged: read in between, the account would pass the
     * mappings for a moment. */
    sum->committed = shoal_commit_charged();
    sum->mapped = shoal_os_mapped();
    if (sum->committed > sum->mapped)
        sum->committed = sum->mapped;
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
    sample(heaps, &pool, &huge, &sum);
    struct rusage ru;
    bool ru_ok = getrusage(RUSAGE_SELF, &ru) == 0;
    uint64_t minor = ru_ok ? (uint64_t)ru.ru_minflt : 0, major = ru_ok ? (uint64_t)ru.ru_majflt : 0;
    size_t rss_peak = ru_ok ? (size_t)ru.ru_maxrss * 1024 : 0;
    *st = (alloc_stats_t){ .size = sizeof *st, .version = ALLOC_STATS_VERSION };
    st->elapsed_ms = start_ms != 0 ? shoal_os_now_ms() - start_ms : 0;
#define FILL(group, key, kind, field, value) st->field = (value);
#define FILL_PEAK(group, key, kind, field, value, peak) \
    st->field = (value);                                  \
    st->field##_peak = (peak);
#define NO_FILL(group, key, a, b)
    SHOAL_FIGURES(FILL, FILL_PEAK, NO_FILL)
#undef FILL
#undef FILL_PEAK
#undef NO_FILL
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
        bin->live_bytes = heaps->large_bin_bytes[o];
        bin->live_peak = max_of(peak_of(&peak_large_bin[o]), bin->live);
    }
    for (unsigned i = 0; i < ALLOC_STATS_HUGE_BINS; i++)
        st->huge_bins[i] = (alloc_bin_stats_t){ huge.bin_live[i], huge.bin_bytes[i],
                                                huge.bin_peak[i] };
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

/* Format and write one report.  `wait`: an explicit call waits for a
 * report in progress; a signal handler must not, and drops its dump. */
static bool report(int fd, bool json, bool wait, _Atomic uint64_t *count)
{
    if (!shoal_turn_take(&dumping, wait))
        return false;
    /* Counted before the figures are read: a dump shows itself. */
    if (count != NULL)
        atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
    stats_fill(&report_stats);
    size_t len = shoal_report_format(report_buf, sizeof report_buf, &report_stats, json);
    shoal_write_all(fd, report_buf, len);
    shoal_turn_give(&dumping);
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
    if (!shoal_opt(ALLOC_OPTION_SHOW_STATS) || stats_path[0] != '\0' || fstat(2, &st) != 0)
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

/* Give the signal our handler held back what was there before - unless
 * the program has put a handler of its own there since, which stays. */
static void give_back_signal(int sig)
{
    struct sigaction cur;
    if (sigaction(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == on_signal)
        sigaction(sig, &previous, NULL);
}

/* STATS_SIGNAL changed (or start-up): move our handler to the new signal.
 * A signal the program handles already is left alone, with a warning. */
static void apply_stats_signal(long sig)
{
    /* Relaxed: it only names the signal; sigaction orders the rest. */
    int old = atomic_exchange_explicit(&installed_signal, 0, memory_order_relaxed);
    if (old != 0 && old == sig) {
        atomic_store_explicit(&installed_signal, old, memory_order_relaxed);
        return;                 /* the same signal: nothing moves */
    }
    if (old != 0)
        give_back_signal(old);
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
        if (fd < 0) {
            /* The error's name (a static string: strerror may allocate). */
            const char *why = strerrorname_np(errno);
            shoal_warning("SHOAL_STATS_FILE=%s cannot be opened (%s); reports go to stderr", path,
                          why != NULL ? why : "?");
        } else if (strlen(path) >= sizeof stats_path) {
            shoal_warning("SHOAL_STATS_FILE=%s is longer than %zu bytes; reports go to stderr",
                          path, sizeof stats_path - 1);
        } else
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
