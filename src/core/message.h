/* message.h - one-line messages on stderr without malloc or stdio.
 *
 * A tiny formatter into a caller's buffer: %s %d %ld %u %lu %zu %x %lx
 * %p and %%, with an optional width and '-' for left alignment.  It is async-signal-safe, so the statistics dump can use it
 * from a signal handler, and it never allocates, so the allocator can use
 * it while its own state is broken.
 */
#ifndef SHOAL_MESSAGE_H
#define SHOAL_MESSAGE_H

#include <stdarg.h>
#include <stddef.h>

/* Format into buf (always NUL-terminated); returns the length written. */
size_t shoal_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
size_t shoal_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Write all of buf to fd, retrying on EINTR and short writes. */
void shoal_write_all(int fd, const char *buf, size_t len);

/* "shoal: ..." on stderr (what VERBOSE shows). */
void shoal_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "shoal: warning: ..." on stderr. */
void shoal_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A fault in the caller's use of the allocator (double free, foreign
 * pointer, ...): "shoal: error: <what> (<fn>, address 0x...)".  Aborts,
 * unless ON_ERROR is warn: then it returns and the call is ignored. */
void shoal_fault(const char *fn, const void *ptr, const char *what);

#endif
