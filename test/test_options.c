/* Options: parsing of SHOAL_<NAME> values (src/core/options.h) for every
 * option, alloc_option_set's range checks, alloc_option_get, and reading
 * the environment at start-up (in a fresh copy of this program). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shoal.h"
#include "core/options.h"

static const char *const names[ALLOC_OPTION_COUNT_] = {
    [ALLOC_OPTION_PREFAULT] = "PREFAULT",
    [ALLOC_OPTION_PURGE_DELAY_MS] = "PURGE_DELAY_MS",
    [ALLOC_OPTION_PURGE_MODE] = "PURGE_MODE",
    [ALLOC_OPTION_MAX_MEMORY] = "MAX_MEMORY",
    [ALLOC_OPTION_CACHELINE_ALIGN] = "CACHELINE_ALIGN",
    [ALLOC_OPTION_HUGE_PAGES] = "HUGE_PAGES",
    [ALLOC_OPTION_STATS_SIGNAL] = "STATS_SIGNAL",
    [ALLOC_OPTION_STATS_JSON] = "STATS_JSON",
    [ALLOC_OPTION_SHOW_STATS] = "SHOW_STATS",
    [ALLOC_OPTION_ON_ERROR] = "ON_ERROR",
    [ALLOC_OPTION_VERBOSE] = "VERBOSE",
    [ALLOC_OPTION_PURGE_THREAD] = "PURGE_THREAD",
    [ALLOC_OPTION_PROF] = "PROF",
    [ALLOC_OPTION_PROF_SAMPLE] = "PROF_SAMPLE",
    [ALLOC_OPTION_PROF_LEAKS] = "PROF_LEAKS",
};

static const alloc_option_t booleans[] = {
    ALLOC_OPTION_PREFAULT, ALLOC_OPTION_CACHELINE_ALIGN, ALLOC_OPTION_HUGE_PAGES,
    ALLOC_OPTION_STATS_JSON, ALLOC_OPTION_SHOW_STATS, ALLOC_OPTION_PROF_LEAKS,
};
#define N_BOOLEANS (sizeof booleans / sizeof booleans[0])

static long defaults[ALLOC_OPTION_COUNT_];

static int setup(void **state)
{
    (void)state;
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++)
        defaults[o] = alloc_option_get((alloc_option_t)o);
    return 0;
}

/* Every test leaves the options as it found them. */
static int restore(void **state)
{
    (void)state;
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++)
        alloc_option_set((alloc_option_t)o, defaults[o]);
    return 0;
}

/* Parses to `want`. */
static void ok(alloc_option_t o, const char *text, long want)
{
    long v = 0x5a5a5a5a;
    int rc = shoal_option_parse(o, text, &v);
    if (rc != 0)
        fail_msg("%s=\"%s\" rejected (%d)", names[o], text, rc);
    if (v != want)
        fail_msg("%s=\"%s\" gave %ld, not %ld", names[o], text, v, want);
}

/* Rejected with EINVAL, and *out left alone. */
static void bad(alloc_option_t o, const char *text)
{
    long v = 0x5a5a5a5a;
    int rc = shoal_option_parse(o, text, &v);
    if (rc != EINVAL)
        fail_msg("%s=\"%s\" accepted (%d, value %ld)", names[o], text, rc, v);
    assert_int_equal(v, 0x5a5a5a5a);
}

static void test_names_and_defaults(void **state)
{
    (void)state;
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++) {
        assert_non_null(shoal_option_name((alloc_option_t)o));
        assert_string_equal(shoal_option_name((alloc_option_t)o), names[o]);
    }
    assert_null(shoal_option_name(ALLOC_OPTION_COUNT_));
    assert_null(shoal_option_name((alloc_option_t)-1));
    /* The defaults are checked in a clean environment: test_environment. */
}

static void test_parse_booleans(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_BOOLEANS; i++) {
        alloc_option_t o = booleans[i];
        ok(o, "1", 1);
        ok(o, "0", 0);
        ok(o, "on", 1);
        ok(o, "off", 0);
        ok(o, "ON", 1);
        ok(o, "Off", 0);
        ok(o, "true", 1);
        ok(o, "false", 0);
        ok(o, "TRUE", 1);
        ok(o, "yes", 1);
        ok(o, "no", 0);
        bad(o, "");
        bad(o, "2");
        bad(o, "-1");
        bad(o, "onn");
        bad(o, "o");
        bad(o, "1k");
        bad(o, "truex");
        bad(o, "enable");
        bad(o, " 1x");
        ok(o, " 1", 1);                 /* blanks around a value go */
        ok(o, "off \t", 0);
        bad(o, "o n");
    }
}

static void test_parse_numbers(void **state)
{
    (void)state;
    alloc_option_t d = ALLOC_OPTION_PURGE_DELAY_MS;
    ok(d, "0", 0);
    ok(d, "10", 10);
    ok(d, "-1", -1);                        /* never */
    ok(d, "250", 250);
    ok(d, "1k", 1024);
    ok(d, "3K", 3072);
    ok(d, "1m", 1L << 20);
    ok(d, "3600000", 3600000);              /* an hour: the maximum */
    bad(d, "3600001");
    bad(d, "4m");
    bad(d, "-2");
    bad(d, "");
    bad(d, "ten");
    bad(d, "10x");
    ok(d, "10 ", 10);                       /* an env file's trailing blank */
    ok(d, " 64k", 65536);
    bad(d, "1 0");
    bad(d, "1.5");
    bad(d, "1kk");
    bad(d, "k");
    ok(d, "010", 10);                       /* decimal, as an operator means it */
    ok(d, "0100", 100);
    bad(d, "0x10");

    alloc_option_t m = ALLOC_OPTION_MAX_MEMORY;
    ok(m, "0", 0);                          /* unlimited */
    ok(m, "4096", 4096);
    ok(m, "64k", 64L << 10);
    ok(m, "64K", 64L << 10);
    ok(m, "64kb", 64L << 10);
    ok(m, "512m", 512L << 20);
    ok(m, "512M", 512L << 20);
    ok(m, "1g", 1L << 30);
    ok(m, "8G", 8L << 30);
    ok(m, "8GB", 8L << 30);
    ok(m, "8589934591g", 8589934591L << 30);   /* the largest that fits */
    char big[32];
    snprintf(big, sizeof big, "%ld", LONG_MAX);
    ok(m, big, LONG_MAX);
    bad(m, "8589934592g");                  /* overflows a long */
    bad(m, "99999999999999999999");         /* overflows strtol */
    bad(m, "-1");
    bad(m, "-1g");
    bad(m, "1t");
    bad(m, "1 g");
    bad(m, "g");
    bad(m, "");
    bad(m, "lots");

    alloc_option_t v = ALLOC_OPTION_VERBOSE;   /* on or off: 2 meant nothing more */
    ok(v, "0", 0);
    ok(v, "1", 1);
    ok(v, "on", 1);
    bad(v, "2");
    bad(v, "-1");
    bad(v, "loud");
}

static void test_parse_words(void **state)
{
    (void)state;
    alloc_option_t p = ALLOC_OPTION_PURGE_MODE;
    ok(p, "dontneed", ALLOC_PURGE_DONTNEED);
    ok(p, "DONTNEED", ALLOC_PURGE_DONTNEED);
    ok(p, "free", ALLOC_PURGE_FREE);
    ok(p, "Free", ALLOC_PURGE_FREE);
    ok(p, "0", 0);
    ok(p, "1", 1);
    bad(p, "2");
    bad(p, "madvise");
    bad(p, "dont");
    bad(p, "freee");
    bad(p, "");

    alloc_option_t t = ALLOC_OPTION_PURGE_THREAD;
    ok(t, "auto", -1);
    ok(t, "never", 0);
    ok(t, "always", 1);
    ok(t, "-1", -1);
    bad(t, "2");
    bad(t, "sometimes");
    bad(ALLOC_OPTION_PURGE_MODE, "auto");       /* only where -1 is allowed */

    alloc_option_t e = ALLOC_OPTION_ON_ERROR;
    ok(e, "abort", ALLOC_ON_ERROR_ABORT);
    ok(e, "warn", ALLOC_ON_ERROR_WARN);
    ok(e, "WARN", ALLOC_ON_ERROR_WARN);
    ok(e, "0", 0);
    ok(e, "1", 1);
    bad(e, "2");
    bad(e, "ignore");
    bad(e, "abortx");
    bad(e, "");
}

static void test_parse_signals(void **state)
{
    (void)state;
    alloc_option_t s = ALLOC_OPTION_STATS_SIGNAL;
    ok(s, "USR2", SIGUSR2);
    ok(s, "usr2", SIGUSR2);
    ok(s, "SIGUSR1", SIGUSR1);
    ok(s, "sigusr2", SIGUSR2);
    ok(s, "USR1", SIGUSR1);
    ok(s, "HUP", SIGHUP);
    ok(s, "SIGHUP", SIGHUP);
    ok(s, "WINCH", SIGWINCH);
    ok(s, "PROF", SIGPROF);
    ok(s, "QUIT", SIGQUIT);
    ok(s, "RTMIN+3", SIGRTMIN + 3);
    ok(s, "SIGRTMIN+3", SIGRTMIN + 3);
    ok(s, "rtmin+0", SIGRTMIN);
    char top[32];
    snprintf(top, sizeof top, "RTMIN+%d", SIGRTMAX - SIGRTMIN);
    ok(s, top, SIGRTMAX);
    ok(s, "12", 12);
    ok(s, "0", 0);
    ok(s, "off", 0);
    ok(s, "64", 64);
    bad(s, "65");
    bad(s, "-1");
    snprintf(top, sizeof top, "RTMIN+%d", SIGRTMAX - SIGRTMIN + 1);
    bad(s, top);
    bad(s, "RTMIN+");
    bad(s, "RTMIN+x");
    bad(s, "FOO");
    bad(s, "SIGFOO");
    bad(s, "SIG");
    bad(s, "USR3");
    bad(s, "");
    /* Faults, abort's and the uncatchable: by number as by name.  A
     * handler that returns from SIGSEGV makes the fault repeat for ever. */
    static const int refused[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
                                   SIGABRT, SIGKILL, SIGSTOP };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", refused[i]);
        bad(s, num);
        assert_int_equal(alloc_option_set(s, refused[i]), EINVAL);
        assert_int_equal(alloc_option_get(s), 0);
    }
    bad(s, "SEGV");
    bad(s, "SIGKILL");
    /* Every name a number may name: the names agree with the numbers. */
    ok(s, "TERM", SIGTERM);
    ok(s, "SIGINT", SIGINT);
    ok(s, "alrm", SIGALRM);
    ok(s, "CHLD", SIGCHLD);
    ok(s, "PIPE", SIGPIPE);
    ok(s, "RTMIN", SIGRTMIN);
    ok(s, "RTMAX", SIGRTMAX);
    ok(s, "RTMAX-1", SIGRTMAX - 1);
    ok(s, " USR2 ", SIGUSR2);
    bad(s, "RTMIN+-22");
    bad(s, "RTMIN-1");
    bad(s, "RTMAX+1");
    bad(s, "RTMIN+1k");
    /* The C library's own, below SIGRTMIN (glibc: 32 and 33). */
    for (int sig = SIGSYS + 1; sig < SIGRTMIN; sig++) {
        char num[16];
        snprintf(num, sizeof num, "%d", sig);
        bad(s, num);
        assert_int_equal(alloc_option_set(s, sig), EINVAL);
    }
}

static void test_parse_bad_arguments(void **state)
{
    (void)state;
    long v = 7;
    assert_int_equal(shoal_option_parse(ALLOC_OPTION_COUNT_, "1", &v), EINVAL);
    assert_int_equal(shoal_option_parse((alloc_option_t)-1, "1", &v), EINVAL);
    assert_int_equal(shoal_option_parse((alloc_option_t)1000, "1", &v), EINVAL);
    assert_int_equal(shoal_option_parse(ALLOC_OPTION_PREFAULT, NULL, &v), EINVAL);
    assert_int_equal(v, 7);
}

/* alloc_option_set accepts exactly the documented range of each option
 * and leaves the value alone when it refuses. */
static void test_set_get_ranges(void **state)
{
    (void)state;
    static const struct { alloc_option_t o; long min, max; } ranges[] = {
        { ALLOC_OPTION_PREFAULT, 0, 1 },
        { ALLOC_OPTION_PURGE_DELAY_MS, -1, 3600L * 1000 },
        { ALLOC_OPTION_PURGE_MODE, 0, 1 },
        { ALLOC_OPTION_MAX_MEMORY, 0, LONG_MAX },
        { ALLOC_OPTION_CACHELINE_ALIGN, 0, 1 },
        { ALLOC_OPTION_HUGE_PAGES, 0, 1 },
        { ALLOC_OPTION_STATS_JSON, 0, 1 },
        { ALLOC_OPTION_SHOW_STATS, 0, 1 },
        { ALLOC_OPTION_ON_ERROR, 0, 1 },
        { ALLOC_OPTION_VERBOSE, 0, 1 },
        { ALLOC_OPTION_PURGE_THREAD, -1, 1 },
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        alloc_option_t o = ranges[i].o;
        long before = alloc_option_get(o);
        assert_int_equal(alloc_option_set(o, ranges[i].min), 0);
        assert_int_equal(alloc_option_get(o), ranges[i].min);
        assert_int_equal(alloc_option_set(o, ranges[i].max), 0);
        assert_int_equal(alloc_option_get(o), ranges[i].max);
        if (ranges[i].min > LONG_MIN) {
            assert_int_equal(alloc_option_set(o, ranges[i].min - 1), EINVAL);
            assert_int_equal(alloc_option_get(o), ranges[i].max);
        }
        if (ranges[i].max < LONG_MAX) {
            assert_int_equal(alloc_option_set(o, ranges[i].max + 1), EINVAL);
            assert_int_equal(alloc_option_get(o), ranges[i].max);
        }
        assert_int_equal(alloc_option_set(o, LONG_MIN), EINVAL);
        assert_int_equal(alloc_option_get(o), ranges[i].max);
        assert_int_equal(alloc_option_set(o, before), 0);
        assert_int_equal(alloc_option_get(o), before);
    }
    /* A value in the middle of a range. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, 1234), 0);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS), 1234);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_MAX_MEMORY, 3L << 30), 0);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_MAX_MEMORY), 3L << 30);
    /* STATS_SIGNAL: only the range, not the handler (another suite owns
     * signal dumps), so just the refusals. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, -1), EINVAL);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_STATS_SIGNAL, 65), EINVAL);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_STATS_SIGNAL), 0);
    /* Unknown options. */
    assert_int_equal(alloc_option_set(ALLOC_OPTION_COUNT_, 0), EINVAL);
    assert_int_equal(alloc_option_set((alloc_option_t)-1, 0), EINVAL);
    assert_int_equal(alloc_option_set((alloc_option_t)99, 1), EINVAL);
    assert_int_equal(alloc_option_get(ALLOC_OPTION_COUNT_), -1);
    assert_int_equal(alloc_option_get((alloc_option_t)-1), -1);
}

/* Every parsed value of every option is one alloc_option_set accepts. */
static void test_parsed_values_are_settable(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "0", "1", "2", "-1", "on", "off", "free", "warn", "USR2", "RTMIN+1", "64k", "1g", "10",
    };
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++) {
        if (o == ALLOC_OPTION_STATS_SIGNAL)
            continue;           /* setting it installs a handler; range is checked above */
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            long v;
            if (shoal_option_parse((alloc_option_t)o, texts[i], &v) != 0)
                continue;
            if (alloc_option_set((alloc_option_t)o, v) != 0)
                fail_msg("%s: \"%s\" parses to %ld, which set refuses", names[o], texts[i], v);
            assert_int_equal(alloc_option_get((alloc_option_t)o), v);
        }
        alloc_option_set((alloc_option_t)o, defaults[o]);
    }
}

/* With a size, the child allocates it instead of printing the options. */
static const char *child_malloc;

/* The environment is read once, before the first allocation or option
 * call; this process read it long ago.  So each case runs this program
 * again with SHOAL_* set, and the child prints every option's value
 * (main, --print-options).  Its stdout and stderr come back in out/err. */
static pid_t run_child(const char *const *env, size_t nenv, char *out, size_t outcap, char *err,
                       size_t errcap)
{
    int po[2], pe[2];
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        char var[64];
        for (int o = 0; o < ALLOC_OPTION_COUNT_; o++) {
            snprintf(var, sizeof var, "SHOAL_%s", names[o]);
            unsetenv(var);
        }
        for (size_t i = 0; i < nenv; i += 2)
            setenv(env[i], env[i + 1], 1);
        char *argv[] = { (char *)"test_options", (char *)(child_malloc != NULL ? "--malloc"
                                                                   : "--print-options"),
                         (char *)child_malloc, NULL };
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    /* The outputs are a few hundred bytes: reading one pipe after the
     * other cannot block the child. */
    size_t n = 0;
    ssize_t r;
    while (n < outcap - 1 && (r = read(po[0], out + n, outcap - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    n = 0;
    while (n < errcap - 1 && (r = read(pe[0], err + n, errcap - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(po[0]);
    close(pe[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child failed (status %d): %s", status, err);
    return pid;
}

/* The value the child printed for option o. */
static long child_value(const char *out, alloc_option_t o)
{
    char key[64];
    snprintf(key, sizeof key, "%s=", names[o]);
    for (const char *line = out; line != NULL && *line != '\0';) {
        if (strncmp(line, key, strlen(key)) == 0)
            return strtol(line + strlen(key), NULL, 10);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    fail_msg("the child did not print %s: %s", names[o], out);
    return 0;
}

/* SHOAL_<NAME> sets every option at start-up; an invalid value keeps the
 * default and is named in a warning; unset ones keep their defaults. */
static void test_environment(void **state)
{
    (void)state;
    static const struct { alloc_option_t o; const char *text; long want; } env[] = {
        { ALLOC_OPTION_PREFAULT, "on", 1 },
        { ALLOC_OPTION_PURGE_DELAY_MS, "2k", 2048 },
        { ALLOC_OPTION_PURGE_MODE, "free", ALLOC_PURGE_FREE },
        { ALLOC_OPTION_MAX_MEMORY, "3g", 3L << 30 },
        { ALLOC_OPTION_CACHELINE_ALIGN, "1", 1 },
        { ALLOC_OPTION_HUGE_PAGES, "true", 1 },
        { ALLOC_OPTION_STATS_JSON, "1", 1 },
        { ALLOC_OPTION_SHOW_STATS, "on", 1 },
        { ALLOC_OPTION_ON_ERROR, "warn", ALLOC_ON_ERROR_WARN },
        { ALLOC_OPTION_VERBOSE, "on", 1 },
        { ALLOC_OPTION_PURGE_THREAD, "never", 0 },
        { ALLOC_OPTION_PROF, "on", 1 },
        { ALLOC_OPTION_PROF_SAMPLE, "64k", 65536 },
        { ALLOC_OPTION_PROF_LEAKS, "1", 1 },
    };
    enum { N = sizeof env / sizeof env[0] };
    char var[N][64];
    const char *kv[2 * N];
    static char out[8192], err[8192];

    for (size_t i = 0; i < N; i++) {
        snprintf(var[i], sizeof var[i], "SHOAL_%s", names[env[i].o]);
        kv[2 * i] = var[i];
        kv[2 * i + 1] = env[i].text;
    }
    /* The child's leak report (PROF_LEAKS) lands in the working
     * directory: not left there. */
    char report[64];
    snprintf(report, sizeof report, "shoal.%d.leaks.heap",
             (int)run_child(kv, 2 * N, out, sizeof out, err, sizeof err));
    unlink(report);
    for (size_t i = 0; i < N; i++)
        if (child_value(out, env[i].o) != env[i].want)
            fail_msg("SHOAL_%s=%s gave %ld", names[env[i].o], env[i].text,
                     child_value(out, env[i].o));
    assert_int_equal(child_value(out, ALLOC_OPTION_STATS_SIGNAL), 0);     /* unset */

    /* Invalid values: defaults kept, each named in a warning. */
    for (size_t i = 0; i < N; i++)
        kv[2 * i + 1] = "bogus-value";
    long clean[ALLOC_OPTION_COUNT_];
    run_child(NULL, 0, out, sizeof out, err, sizeof err);
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++)
        clean[o] = child_value(out, (alloc_option_t)o);
    run_child(kv, 2 * N, out, sizeof out, err, sizeof err);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(child_value(out, env[i].o), clean[env[i].o]);
        if (strstr(err, var[i]) == NULL)
            fail_msg("no warning names %s: \"%s\"", var[i], err);
    }

    /* A signal by name, and nothing set at all. */
    const char *sig[] = { "SHOAL_STATS_SIGNAL", "RTMIN+2" };
    run_child(sig, 2, out, sizeof out, err, sizeof err);
    assert_int_equal(child_value(out, ALLOC_OPTION_STATS_SIGNAL), SIGRTMIN + 2);

    /* A fault signal by number: refused, with one warning that says why. */
    const char *fault[] = { "SHOAL_STATS_SIGNAL", "11" };
    run_child(fault, 2, out, sizeof out, err, sizeof err);
    assert_int_equal(child_value(out, ALLOC_OPTION_STATS_SIGNAL), 0);
    const char *why = strstr(err, "SHOAL_STATS_SIGNAL=11: signal 11 is a fault");
    if (why == NULL || strstr(why + 1, "SHOAL_STATS_SIGNAL") != NULL)
        fail_msg("not one warning for STATS_SIGNAL=11: \"%s\"", err);

    /* The C library's own signal: refused, and the warning says so. */
    const char *libc_sig[] = { "SHOAL_STATS_SIGNAL", "32" };
    run_child(libc_sig, 2, out, sizeof out, err, sizeof err);
    assert_int_equal(child_value(out, ALLOC_OPTION_STATS_SIGNAL), 0);
    assert_non_null(strstr(err, "signal 32 is a fault, abort's, KILL, STOP or the C library's own"));

    /* A value that holds control characters: still one line, each
     * written as '?'. */
    const char *ctl[] = { "SHOAL_PURGE_MODE", "some\nthing\033[2J" };
    run_child(ctl, 2, out, sizeof out, err, sizeof err);
    assert_non_null(strstr(err, "SHOAL_PURGE_MODE=some?thing?[2J is not a valid value"));
    int ctl_lines = 0;
    for (const char *c = err; *c != '\0'; c++)
        ctl_lines += *c == '\n' || *c == '\033';
    assert_int_equal(ctl_lines, 1);

    /* A MAX_MEMORY too small for a first block is kept, and said, once. */
    const char *small[] = { "SHOAL_MAX_MEMORY", "100k" };
    run_child(small, 2, out, sizeof out, err, sizeof err);
    assert_int_equal(child_value(out, ALLOC_OPTION_MAX_MEMORY), 100 << 10);
    const char *said = strstr(err, "MAX_MEMORY 102400 is below");
    if (said == NULL || strstr(said + 1, "MAX_MEMORY") != NULL)
        fail_msg("not one warning for a limit below a first block: \"%s\"", err);

    /* Unknown SHOAL_ variables: one warning each, with the closest name;
     * case counts. */
    const char *typos[] = { "SHOAL_PURGE_DELAY", "5", "SHOAL_purge_mode", "free",
                            "SHOAL_FROBNICATE", "1" };
    run_child(typos, 6, out, sizeof out, err, sizeof err);
    assert_int_equal(child_value(out, ALLOC_OPTION_PURGE_DELAY_MS), SHOAL_DEFAULT_PURGE_DELAY_MS);
    assert_int_equal(child_value(out, ALLOC_OPTION_PURGE_MODE), ALLOC_PURGE_DONTNEED);
    assert_non_null(strstr(err, "SHOAL_PURGE_DELAY is not a shoal setting (did you mean "
                                "SHOAL_PURGE_DELAY_MS?)"));
    assert_non_null(strstr(err, "SHOAL_purge_mode is not a shoal setting (did you mean "
                                "SHOAL_PURGE_MODE?)"));
    assert_non_null(strstr(err, "SHOAL_FROBNICATE is not a shoal setting; ignored"));
    int lines = 0;
    for (const char *c = err; *c != '\0'; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 3);

    /* A bad value: the warning gives the range, and the value kept as
     * it would be written. */
    const char *bad_values[] = { "SHOAL_PURGE_MODE", "sometimes", "SHOAL_PURGE_DELAY_MS", "1.5s" };
    run_child(bad_values, 4, out, sizeof out, err, sizeof err);
    assert_non_null(strstr(err, "SHOAL_PURGE_MODE=sometimes is not a valid value (dontneed or "
                                "free); keeping dontneed"));
    assert_non_null(strstr(err, "SHOAL_PURGE_DELAY_MS=1.5s is not a valid value (a decimal "
                                "number from -1 to 3600000"));
    assert_non_null(strstr(err, "keeping 1000"));

    /* VERBOSE says when MAX_MEMORY refuses memory, a huge block's and a
     * pool block's. */
    const char *limited[] = { "SHOAL_VERBOSE", "1", "SHOAL_MAX_MEMORY", "1m" };
    child_malloc = "8388608";
    run_child(limited, 4, out, sizeof out, err, sizeof err);
    assert_non_null(strstr(out, "malloc=refused"));
    assert_non_null(strstr(err, "no memory for a huge block of"));
    child_malloc = "1048576";
    run_child(limited, 4, out, sizeof out, err, sizeof err);
    assert_non_null(strstr(out, "malloc=refused"));
    assert_non_null(strstr(err, "MAX_MEMORY 1048576"));
    child_malloc = NULL;

    /* Nothing set: the documented defaults. */
    run_child(NULL, 0, out, sizeof out, err, sizeof err);
    static const long documented[ALLOC_OPTION_COUNT_] = {
        [ALLOC_OPTION_PREFAULT] = 0,
        [ALLOC_OPTION_PURGE_DELAY_MS] = SHOAL_DEFAULT_PURGE_DELAY_MS,
        [ALLOC_OPTION_PURGE_MODE] = ALLOC_PURGE_DONTNEED,
        [ALLOC_OPTION_MAX_MEMORY] = 0,
        [ALLOC_OPTION_CACHELINE_ALIGN] = 0,
        [ALLOC_OPTION_HUGE_PAGES] = 0,
        [ALLOC_OPTION_STATS_SIGNAL] = 0,
        [ALLOC_OPTION_STATS_JSON] = 0,
        [ALLOC_OPTION_SHOW_STATS] = 0,
        [ALLOC_OPTION_ON_ERROR] = ALLOC_ON_ERROR_ABORT,
        [ALLOC_OPTION_VERBOSE] = 0,
        [ALLOC_OPTION_PURGE_THREAD] = SHOAL_DEFAULT_PURGE_THREAD,
        [ALLOC_OPTION_PROF] = 0,
        [ALLOC_OPTION_PROF_SAMPLE] = 512 << 10,
        [ALLOC_OPTION_PROF_LEAKS] = 0,
    };
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++)
        if (child_value(out, (alloc_option_t)o) != documented[o])
            fail_msg("default %s=%ld, documented %ld", names[o],
                     child_value(out, (alloc_option_t)o), documented[o]);
    assert_string_equal(err, "");                   /* nothing to warn about */
}

/* The child: print every option as the environment left it. */
static int print_options(void)
{
    for (int o = 0; o < ALLOC_OPTION_COUNT_; o++)
        printf("%s=%ld\n", shoal_option_name((alloc_option_t)o),
               alloc_option_get((alloc_option_t)o));
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--print-options") == 0)
        return print_options();
    if (argc > 2 && strcmp(argv[1], "--malloc") == 0) {
        /* The child: try one allocation, say whether it was refused. */
        void *p = alloc_malloc((size_t)strtoul(argv[2], NULL, 10));
        printf("malloc=%s\n", p != NULL ? "ok" : "refused");
        alloc_free(p);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_names_and_defaults, restore),
        cmocka_unit_test_teardown(test_parse_booleans, restore),
        cmocka_unit_test_teardown(test_parse_numbers, restore),
        cmocka_unit_test_teardown(test_parse_words, restore),
        cmocka_unit_test_teardown(test_parse_signals, restore),
        cmocka_unit_test_teardown(test_parse_bad_arguments, restore),
        cmocka_unit_test_teardown(test_set_get_ranges, restore),
        cmocka_unit_test_teardown(test_parsed_values_are_settable, restore),
        cmocka_unit_test_teardown(test_environment, restore),
    };
    /* TEST_FILTER=name runs the tests whose names match (a glob). */
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, NULL);
}
