/* report.h - the text and the JSON report of a filled alloc_stats_t. */
#ifndef SHOAL_REPORT_H
#define SHOAL_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include "shoal.h"

/* Format the report of s into buf (cap bytes; async-signal-safe, no
 * allocation); returns its length. */
size_t shoal_report_format(char *buf, size_t cap, const alloc_stats_t *s, bool json);

#endif
