/* options.h - option values, read with one relaxed load. */
#ifndef SHOAL_OPTIONS_H
#define SHOAL_OPTIONS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "shoal.h"

/* Options whose default is not 0 (the table in options.c has them all). */
#define SHOAL_DEFAULT_PURGE_DELAY_MS 1000
#define SHOAL_DEFAULT_PURGE_THREAD (-1)
#define SHOAL_DEFAULT_PROF_SAMPLE (512L << 10)

extern _Atomic long shoal_option_values[ALLOC_OPTION_COUNT_];

static inline long shoal_opt(alloc_option_t o)
{
    return atomic_load_explicit(&shoal_option_values[o], memory_order_relaxed);
}

/* Read every SHOAL_<NAME> variable, once (later calls return at once);
 * warn about bad values. */
void shoal_options_init(void);

/* Parse one environment value for an option.  Returns 0 and sets *out,
 * or EINVAL.  Exposed for the unit tests. */
int shoal_option_parse(alloc_option_t o, const char *text, long *out);

/* Have fn(value) called after alloc_option_set changes option o (a
 * higher layer reacting to a setting, e.g. installing a signal handler). */
void shoal_option_on_change(alloc_option_t o, void (*fn)(long value));

/* Every option in effect into buf, as " NAME=value" each, or with `json`
 * as "NAME":"value" members separated by commas (words as words: auto,
 * dontneed).  Async-signal-safe; returns the length written. */
size_t shoal_options_format(char *buf, size_t cap, bool json);

/* The option's name without prefix ("PURGE_DELAY_MS"), or NULL. */
const char *shoal_option_name(alloc_option_t o);

#endif
