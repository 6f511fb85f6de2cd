/* options.c - the option table, alloc_option_set/get and SHOAL_* parsing.
 *
 * Options are read where they are used, with one relaxed load, so a new
 * value applies to the next operation that consults it (new superpages
 * for HUGE_PAGES, new blocks for PREFAULT, the next purge for PURGE_*).
 * CACHELINE_ALIGN is the exception: it decides which pages blocks come
 * from, so it can only change before the first allocation (EBUSY after).
 */
#include "options.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "commit.h"
#include "message.h"
#include "pool.h"
#include "sync.h"

enum value_kind { V_BOOL, V_NUMBER, V_SIGNAL, V_WORD };

typedef struct option_desc_s {
    const char *name;
    long min, max;
    enum value_kind kind;
    const char *words[3];       /* V_WORD: names of 0, 1, ... ("auto" is -1) */
} option_desc_t;

static const option_desc_t options[ALLOC_OPTION_COUNT_] = {
    [ALLOC_OPTION_PREFAULT]        = { "PREFAULT", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_PURGE_DELAY_MS]  = { "PURGE_DELAY_MS", -1, 3600L * 1000, V_NUMBER, { 0 } },
    [ALLOC_OPTION_PURGE_MODE]      = { "PURGE_MODE", 0, 1, V_WORD,
                                       { "dontneed", "free", 0 } },
    [ALLOC_OPTION_MAX_MEMORY]      = { "MAX_MEMORY", 0, LONG_MAX, V_NUMBER, { 0 } },
    [ALLOC_OPTION_CACHELINE_ALIGN] = { "CACHELINE_ALIGN", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_HUGE_PAGES]      = { "HUGE_PAGES", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_STATS_SIGNAL]    = { "STATS_SIGNAL", 0, 64, V_SIGNAL, { 0 } },
    [ALLOC_OPTION_STATS_JSON]      = { "STATS_JSON", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_SHOW_STATS]      = { "SHOW_STATS", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_ON_ERROR]        = { "ON_ERROR", 0, 1, V_WORD,
                                       { "abort", "warn", 0 } },
    [ALLOC_OPTION_VERBOSE]         = { "VERBOSE", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_PURGE_THREAD]    = { "PURGE_THREAD", -1, 1, V_WORD, { "never", "always", 0 } },
    [ALLOC_OPTION_PROF]            = { "PROF", 0, 1, V_BOOL, { 0 } },
    [ALLOC_OPTION_PROF_SAMPLE]     = { "PROF_SAMPLE", 1, 1L << 40, V_NUMBER, { 0 } },
    [ALLOC_OPTION_PROF_LEAKS]      = { "PROF_LEAKS", 0, 1, V_BOOL, { 0 } },
};

/* Relaxed everywhere: an option is one word, and nothing else is
 * published through it (what a change must reach runs in on_change). */
_Atomic long shoal_option_values[ALLOC_OPTION_COUNT_] = {
    [ALLOC_OPTION_PURGE_DELAY_MS] = SHOAL_DEFAULT_PURGE_DELAY_MS,
    [ALLOC_OPTION_PURGE_THREAD] = SHOAL_DEFAULT_PURGE_THREAD,
    [ALLOC_OPTION_PROF_SAMPLE] = SHOAL_DEFAULT_PROF_SAMPLE,
};

static bool known(alloc_option_t o)
{
    return (unsigned)o < ALLOC_OPTION_COUNT_;
}

const char *shoal_option_name(alloc_option_t o)
{
    return known(o) ? options[o].name : NULL;
}

/* Release at registration, acquire at the call: the function's module is
 * set up before it registers. */
static void (*_Atomic on_change[ALLOC_OPTION_COUNT_])(long);

void shoal_option_on_change(alloc_option_t o, void (*fn)(long))
{
    if (known(o))
        atomic_store_explicit(&on_change[o], fn, memory_order_release);
}

/* A MAX_MEMORY too small for a first block makes every allocation that
 * needs memory shoal does not hold yet fail (at start-up, every one):
 * say so, once. */
static void warn_small_limit(long value)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    /* Relaxed: it only keeps the warning to one. */
    if (!atomic_flag_test_and_set_explicit(&said, memory_order_relaxed))
        shoal_warning("MAX_MEMORY %ld is below the %zu bytes shoal needs for a first block: "
                      "every allocation that needs memory shoal does not hold yet will fail",
                      value, SHOAL_COMMIT_MIN);
}

/* Signals a statistics dump must never be tied to: the synchronous
 * faults (a handler that returns makes the fault happen again, for ever),
 * abort's, the two that no handler can catch, and the C library's own
 * (32 and 33 in glibc, below SIGRTMIN: no program may handle them). */
static bool signal_refused(long sig)
{
    switch (sig) {
    case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGTRAP: case SIGSYS:
    case SIGABRT: case SIGKILL: case SIGSTOP:
        return true;
    default:
        return sig > SIGSYS && sig < SIGRTMIN;
    }
}

static int set_option(alloc_option_t o, long value)
{
    if (!known(o) || value < options[o].min || value > options[o].max)
        return EINVAL;
    if (o == ALLOC_OPTION_STATS_SIGNAL && signal_refused(value))
        return EINVAL;
    /* Blocks already handed out keep their alignment: this one can only
     * be chosen before the first allocation. */
    if (o == ALLOC_OPTION_CACHELINE_ALIGN && value != shoal_opt(o) && shoal_pool_count() != 0)
        return EBUSY;
    atomic_store_explicit(&shoal_option_values[o], value, memory_order_relaxed);
    if (o == ALLOC_OPTION_MAX_MEMORY && value != 0 && (size_t)value < SHOAL_COMMIT_MIN)
        warn_small_limit(value);
    void (*fn)(long) = atomic_load_explicit(&on_change[o], memory_order_acquire);
    if (fn != NULL)
        fn(value);
    return 0;
}

int alloc_option_set(alloc_option_t o, long value)
{
    shoal_options_init();       /* the environment first, then the program */
    return set_option(o, value);
}

long alloc_option_get(alloc_option_t o)
{
    shoal_options_init();
    return known(o) ? shoal_opt(o) : -1;
}

static bool word_is(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

/* "123", "-1", "64k", "2m", "1g" (binary multiples), in decimal: "010"
 * is ten, as an operator means it, not eight. */
static int parse_number(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno != 0)
        return EINVAL;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0')
        return EINVAL;
    if (shift && (v > (LONG_MAX >> shift) || v < (LONG_MIN >> shift)))
        return EINVAL;
    *out = v * (1L << shift);
    return 0;
}

static int parse_bool(const char *s, long *out)
{
    if (word_is(s, "1") || word_is(s, "on") || word_is(s, "true") || word_is(s, "yes"))
        *out = 1;
    else if (word_is(s, "0") || word_is(s, "off") || word_is(s, "false") || word_is(s, "no"))
        *out = 0;
    else
        return EINVAL;
    return 0;
}

/* RTMIN+n or RTMAX-n, n a plain count (no sign, no suffix). */
static int parse_rt_signal(const char *s, long *out)
{
    bool max = strncasecmp(s, "RTMAX", 5) == 0;
    if (!max && strncasecmp(s, "RTMIN", 5) != 0)
        return EINVAL;
    long n = 0;
    if (s[5] != '\0') {
        char *end;
        if (s[5] != (max ? '-' : '+') || s[6] < '0' || s[6] > '9')
            return EINVAL;
        n = strtol(s + 6, &end, 10);
        if (*end != '\0' || n > SIGRTMAX - SIGRTMIN)
            return EINVAL;
    }
    *out = max ? SIGRTMAX - n : SIGRTMIN + n;
    return 0;
}

/* A signal's name (with or without SIG, any case) or number.  Every
 * signal a number may name has its name here, the refused ones too, so
 * that both are refused alike (signal_refused). */
static int parse_signal(const char *s, long *out)
{
    static const struct { const char *name; int sig; } names[] = {
        { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "ILL", SIGILL },
        { "TRAP", SIGTRAP }, { "ABRT", SIGABRT }, { "IOT", SIGIOT }, { "BUS", SIGBUS },
        { "FPE", SIGFPE }, { "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "SEGV", SIGSEGV },
        { "USR2", SIGUSR2 }, { "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM },
        { "STKFLT", SIGSTKFLT }, { "CHLD", SIGCHLD }, { "CONT", SIGCONT }, { "STOP", SIGSTOP },
        { "TSTP", SIGTSTP }, { "TTIN", SIGTTIN }, { "TTOU", SIGTTOU }, { "URG", SIGURG },
        { "XCPU", SIGXCPU }, { "XFSZ", SIGXFSZ }, { "VTALRM", SIGVTALRM }, { "PROF", SIGPROF },
        { "WINCH", SIGWINCH }, { "IO", SIGIO }, { "POLL", SIGPOLL }, { "PWR", SIGPWR },
        { "SYS", SIGSYS },
    };
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (word_is(s, names[i].name)) {
            *out = names[i].sig;
            return 0;
        }
    }
    if (parse_rt_signal(s, out) == 0)
        return 0;
    if (word_is(s, "off")) {
        *out = 0;
        return 0;
    }
    return parse_number(s, out);
}

int shoal_option_parse(alloc_option_t o, const char *raw, long *out)
{
    if (!known(o) || raw == NULL)
        return EINVAL;
    /* Blanks around the value go (an env file's trailing space). */
    char text[64];
    while (*raw == ' ' || *raw == '\t')
        raw++;
    size_t len = strlen(raw);
    while (len > 0 && (raw[len - 1] == ' ' || raw[len - 1] == '\t' || raw[len - 1] == '\r'))
        len--;
    if (len >= sizeof text)
        return EINVAL;
    memcpy(text, raw, len);
    text[len] = '\0';
    const option_desc_t *d = &options[o];
    long v = 0;
    int rc = EINVAL;
    switch (d->kind) {
    case V_BOOL:
        rc = parse_bool(text, &v);
        break;
    case V_NUMBER:
        rc = parse_number(text, &v);
        break;
    case V_SIGNAL:
        rc = parse_signal(text, &v);
        break;
    case V_WORD:
        for (long i = 0; d->words[i] != NULL; i++) {
            if (word_is(text, d->words[i])) {
                v = i;
                rc = 0;
            }
        }
        if (rc != 0 && d->min == -1 && word_is(text, "auto")) {      /* -1 is "auto" */
            v = -1;
            rc = 0;
        }
        if (rc != 0)
            rc = parse_number(text, &v);
        break;
    }
    if (rc != 0 || v < d->min || v > d->max)
        return EINVAL;
    if (d->kind == V_SIGNAL && signal_refused(v))
        return EINVAL;
    *out = v;
    return 0;
}

/* The value option o has now, as an operator would write it. */
static void format_value(alloc_option_t o, char *buf, size_t cap)
{
    const option_desc_t *d = &options[o];
    long v = shoal_opt(o);
    if (d->kind == V_WORD && v == -1)
        shoal_format(buf, cap, "auto");
    else if (d->kind == V_WORD)
        shoal_format(buf, cap, "%s", d->words[v]);
    else
        shoal_format(buf, cap, "%ld", v);
}

size_t shoal_options_format(char *buf, size_t cap, bool json)
{
    size_t n = 0;
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++) {
        char value[32];
        format_value((alloc_option_t)o, value, sizeof value);
        if (json)
            n += shoal_format(buf + n, cap - n, "%s\"%s\":\"%s\"", o > 0 ? "," : "",
                              options[o].name, value);
        else
            n += shoal_format(buf + n, cap - n, " %s=%s", options[o].name, value);
    }
    return n;
}

/* The values an option takes, for a warning. */
static void format_range(alloc_option_t o, char *buf, size_t cap)
{
    const option_desc_t *d = &options[o];
    size_t n = 0;
    switch (d->kind) {
    case V_BOOL:
        shoal_format(buf, cap, "0/1, on/off, true/false, yes/no");
        return;
    case V_NUMBER:
        shoal_format(buf, cap, "a decimal number from %ld to %ld, with an optional k, m or g",
                     d->min, d->max);
        return;
    case V_SIGNAL:
        shoal_format(buf, cap, "a signal number or name such as USR2, HUP or RTMIN+1, or off");
        return;
    case V_WORD:
        if (d->min == -1)
            n += shoal_format(buf + n, cap - n, "auto, ");
        for (int i = 0; d->words[i] != NULL; i++)
            n += shoal_format(buf + n, cap - n, "%s%s", i ? " or " : "", d->words[i]);
        return;
    }
}

static void warn_bad_value(alloc_option_t o, const char *var, const char *text)
{
    char range[128], now[32];
    long v;
    format_range(o, range, sizeof range);
    format_value(o, now, sizeof now);
    if (options[o].kind == V_SIGNAL && parse_signal(text, &v) == 0 && signal_refused(v))
        shoal_warning("%s=%s: signal %ld is a fault, abort's, KILL, STOP or the C library's "
                      "own, which cannot carry statistics dumps; keeping %s", var, text, v, now);
    else
        shoal_warning("%s=%s is not a valid value (%s); keeping %s", var, text, range, now);
}

/* Edit distance between two short names, case-insensitive. */
static unsigned distance(const char *a, const char *b)
{
    unsigned row[64], la = (unsigned)strlen(a), lb = (unsigned)strlen(b);
    if (la >= 63 || lb >= 63)
        return 64;
    for (unsigned j = 0; j <= lb; j++)
        row[j] = j;
    for (unsigned i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = i;
        for (unsigned j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned same = (a[i - 1] | 32) == (b[j - 1] | 32);
            unsigned best = diag + !same;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* A SHOAL_ variable shoal does not know is most likely a typo (SHOAL_PURGE_DELAY
 * for SHOAL_PURGE_DELAY_MS) that would otherwise leave the default in
 * force without a word: one warning each, with the closest known name. */
static void warn_unknown_variables(void)
{
    extern char **environ;
    static const char *const strings[] = { "STATS_FILE", "PROF_PREFIX" };      /* environment-only */
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "SHOAL_", 6) != 0)
            continue;
        char name[64];
        size_t len = strcspn(*e + 6, "=");
        if (len >= sizeof name)
            len = sizeof name - 1;
        memcpy(name, *e + 6, len);
        name[len] = '\0';
        bool known = false;
        const char *closest = strings[0];
        unsigned best = UINT_MAX;
        for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
            unsigned d = distance(name, strings[i]);
            known = known || strcmp(name, strings[i]) == 0;
            if (d < best) {
                best = d;
                closest = strings[i];
            }
        }
        for (int o = 0; o < ALLOC_OPTION_COUNT_ && !known; o++) {
            unsigned d = distance(name, options[o].name);
            known = strcmp(name, options[o].name) == 0;
            if (d < best) {
                best = d;
                closest = options[o].name;
            }
        }
        if (known)
            continue;
        /* Case counts (the names are read as written): shoal_purge_delay_ms
         * is a distance of 0 from its option, and deserves the hint. */
        if (best <= 3 || best * 3 <= (unsigned)len)
            shoal_warning("SHOAL_%s is not a shoal setting (did you mean SHOAL_%s?); ignored",
                          name, closest);
        else
            shoal_warning("SHOAL_%s is not a shoal setting; ignored", name);
    }
}

static void read_environment(void)
{
    char var[64];
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++) {
        shoal_format(var, sizeof var, "SHOAL_%s", options[o].name);
        const char *text = getenv(var);
        long v;
        if (text == NULL)
            continue;
        if (shoal_option_parse((alloc_option_t)o, text, &v) == 0)
            set_option((alloc_option_t)o, v);
        else
            warn_bad_value((alloc_option_t)o, var, text);
    }
    warn_unknown_variables();
    if (shoal_opt(ALLOC_OPTION_VERBOSE)) {
        char line[512];
        shoal_options_format(line, sizeof line, false);
        shoal_info("options:%s", line);
    }
}

void shoal_options_init(void)
{
    static _Atomic int state;   /* enum shoal_once */
    if (shoal_once_begin(&state, true)) {
        read_environment();
        shoal_once_end(&state);
    }
}
