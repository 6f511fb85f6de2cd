/* report.c - the text and the JSON report (report.h), from one table of
 * figures (figures.h), formatted by message.c without malloc. */
#include "report.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "core/huge.h"
#include "core/layout.h"
#include "core/message.h"
#include "core/options.h"
#include "core/size_class.h"
#include "figures.h"

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

/* ---- the reports' table ------------------------------------------------
 * Made from SHOAL_FIGURES (above): each figure with its group and the
 * alloc_stats_t fields of its value and its peak.  JSON writes a group as
 * an object of its figures (a figure's peak as KEY_peak) - the memory
 * and report groups' at the top level - and text as a line, the memory
 * group as a table of current and peak.  What is no field (the bins, the
 * options, the classes) comes after its group's figures in both. */

enum figure_kind {
    FIG_COUNT,          /* a number */
    FIG_BYTES,          /* bytes: "12.3 MiB" in text */
    FIG_DUE,            /* ms to the next purge pass, -1: none due */
    FIG_RATIO,          /* at / of: two decimals; null (JSON) or "-" with of = 0 */
};

enum figure_group {
    GROUP_MEMORY, GROUP_FRAGMENTATION, GROUP_POOL, GROUP_LARGE, GROUP_HUGE, GROUP_THREADS,
    GROUP_FAULTS, GROUP_REPORTS, GROUPS
};

typedef struct figure_s {
    enum figure_group group;
    const char *key;
    enum figure_kind kind;
    size_t at;          /* offset of its field in alloc_stats_t */
    size_t peak;        /* of its peak's field, NO_FIELD if none; FIG_RATIO: the divisor */
} figure_t;

#define NO_FIELD SIZE_MAX
#define AT(m) offsetof(alloc_stats_t, m)

/* Every figure's field is one word (size_t, uint64_t or long). */
_Static_assert(sizeof(size_t) == 8 && sizeof(long) == 8, "figures are read as 64-bit words");

static const figure_t figures[] = {
#define ROW(group, key, kind, field, value) { GROUP_##group, key, FIG_##kind, AT(field), NO_FIELD },
#define ROW_PEAK(group, key, kind, field, value, peak) \
    { GROUP_##group, key, FIG_##kind, AT(field), AT(field##_peak) },
#define ROW_RATIO(group, key, a, b) { GROUP_##group, key, FIG_RATIO, AT(a), AT(b) },
    SHOAL_FIGURES(ROW, ROW_PEAK, ROW_RATIO)
#undef ROW
#undef ROW_PEAK
#undef ROW_RATIO
};

static void put_large_bins(out_t *o, bool json, const alloc_stats_t *s)
{
    put_bins(o, json, s->large_bins, ALLOC_STATS_LARGE_BINS, false);
}

static void put_huge_bins(out_t *o, bool json, const alloc_stats_t *s)
{
    put_bins(o, json, s->huge_bins, ALLOC_STATS_HUGE_BINS, true);
}

/* How each group is shown: its JSON object (NULL: its figures stand at
 * the document's top level), its name in text, whether text shows it as
 * a table of current and peak, and what comes after its figures. */
static const struct group_s {
    const char *key, *title;
    bool rows;
    void (*after)(out_t *, bool json, const alloc_stats_t *);
} groups[GROUPS] = {
    [GROUP_MEMORY] = { NULL, "memory", true, NULL },
    [GROUP_FRAGMENTATION] = { "fragmentation", "fragmentation", false, NULL },
    [GROUP_POOL] = { "pool", "pool", false, NULL },
    [GROUP_LARGE] = { "large", "large", false, put_large_bins },
    [GROUP_HUGE] = { "huge", "huge", false, put_huge_bins },
    [GROUP_THREADS] = { "threads", "threads", false, NULL },
    [GROUP_FAULTS] = { "faults", "page faults", false, NULL },
    [GROUP_REPORTS] = { NULL, "reports", false, NULL },
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

static void text_group(out_t *o, enum figure_group grp, const alloc_stats_t *s)
{
    const struct group_s *g = &groups[grp];
    char a[32], b[32];
    if (g->rows)
        put(o, "%-22s %12s %12s\n", g->title, "current", "peak");
    else
        put(o, "%-14s", g->title);
    bool first = true;
    for (const figure_t *f = figures; f < figures + sizeof figures / sizeof figures[0]; f++) {
        if (f->group != grp)
            continue;
        const char *value = figure_text(a, sizeof a, s, f, f->at, false);
        const char *peak = has_peak(f) ? figure_text(b, sizeof b, s, f, f->peak, false) : NULL;
        if (g->rows) {
            put(o, "  %-18s %12s %12s\n", f->key, value, peak != NULL ? peak : "");
            continue;
        }
        /* The purge pass's time says its own name. */
        put(o, "%s %s %s", first ? "" : ",", f->kind == FIG_DUE ? "next purge pass" : f->key,
            value);
        if (peak != NULL)
            put(o, " (peak %s)", peak);
        first = false;
    }
    if (!g->rows)
        put(o, "\n");
    if (g->after != NULL)
        g->after(o, false, s);
}

static void json_group(out_t *o, enum figure_group grp, const alloc_stats_t *s)
{
    const struct group_s *g = &groups[grp];
    char a[32];
    if (g->key != NULL)
        put(o, "\"%s\":{", g->key);
    const char *sep = "";
    for (const figure_t *f = figures; f < figures + sizeof figures / sizeof figures[0]; f++) {
        if (f->group != grp)
            continue;
        put(o, "%s\"%s\":%s", sep, f->key, figure_text(a, sizeof a, s, f, f->at, true));
        if (has_peak(f))
            put(o, ",\"%s_peak\":%s", f->key, figure_text(a, sizeof a, s, f, f->peak, true));
        sep = ",";
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
    for (enum figure_group g = 0; g < GROUPS; g++)
        text_group(o, g, s);
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
    for (enum figure_group g = 0; g < GROUPS; g++)
        json_group(o, g, s);
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

size_t shoal_report_format(char *buf, size_t cap, const alloc_stats_t *s, bool json)
{
    out_t o = { buf, 0, cap };
    if (json)
        json_report(&o, s);
    else
        text_report(&o, s);
    return o.len;
}
