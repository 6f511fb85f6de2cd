/* message.c - formatting and reporting without malloc. */
#include "message.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include "options.h"

static size_t put_unsigned(char *out, uint64_t v, unsigned base)
{
    char tmp[24];
    size_t n = 0;
    do {
        unsigned d = (unsigned)(v % base);
        tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        v /= base;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

size_t shoal_vformat(char *buf, size_t cap, const char *fmt, va_list ap)
{
    size_t len = 0;
    char num[32];
    if (cap == 0)
        return 0;
    for (const char *f = fmt; *f != '\0' && len + 1 < cap; f++) {
        const char *piece = num;
        size_t n = 0;
        if (*f != '%') {
            buf[len++] = *f;
            continue;
        }
        f++;
        bool left = *f == '-';
        if (left)
            f++;
        size_t width = 0;
        while (*f >= '0' && *f <= '9')
            width = width * 10 + (size_t)(*f++ - '0');
        int is_long = 0;
        while (*f == 'l' || *f == 'z') {
            is_long = 1;
            f++;
        }
        switch (*f) {
        case 's':
            piece = va_arg(ap, const char *);
            if (piece == NULL)
                piece = "(null)";
            while (piece[n] != '\0')
                n++;
            break;
        case 'd': {
            int64_t v = is_long ? va_arg(ap, long) : va_arg(ap, int);
            uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
            if (v < 0)
                num[n++] = '-';
            n += put_unsigned(num + n, mag, 10);
            break;
        }
        case 'u':
            n = put_unsigned(num, is_long ? va_arg(ap, unsigned long) : va_arg(ap, unsigned), 10);
            break;
        case 'x':
            n = put_unsigned(num, is_long ? va_arg(ap, unsigned long) : va_arg(ap, unsigned), 16);
            break;
        case 'p':
            num[0] = '0';
            num[1] = 'x';
            n = 2 + put_unsigned(num + 2, (uintptr_t)va_arg(ap, void *), 16);
            break;
        case '%':
            num[n++] = '%';
            break;
        default:                /* unknown conversion: print it as is */
            num[n++] = '%';
            if (*f != '\0')
                num[n++] = *f;
            else
                f--;
            break;
        }
        size_t pad = width > n ? width - n : 0;
        for (; !left && pad > 0 && len + 1 < cap; pad--)
            buf[len++] = ' ';
        for (size_t i = 0; i < n && len + 1 < cap; i++)
            buf[len++] = piece[i];
        for (; pad > 0 && len + 1 < cap; pad--)
            buf[len++] = ' ';
    }
    buf[len] = '\0';
    return len;
}

size_t shoal_format(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = shoal_vformat(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

void shoal_write_all(int fd, const char *buf, size_t len)
{
    int saved = errno;
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        buf += w;
        len -= (size_t)w;
    }
    errno = saved;
}

/* One line, whatever the values put in it hold: a control character
 * that came with one (an environment variable's value, a path) is
 * written as '?', so it can neither split the line nor act on a
 * terminal. */
static void emit(const char *prefix, const char *fmt, va_list ap)
{
    char line[512];
    size_t n = shoal_format(line, sizeof line, "%s", prefix);
    n += shoal_vformat(line + n, sizeof line - n - 1, fmt, ap);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = '?';
    line[n++] = '\n';
    shoal_write_all(2, line, n);
}

void shoal_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("shoal: ", fmt, ap);
    va_end(ap);
}

void shoal_warning(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("shoal: warning: ", fmt, ap);
    va_end(ap);
}

static void fault_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("shoal: error: ", fmt, ap);
    va_end(ap);
}

void shoal_fault(const char *fn, const void *ptr, const char *what)
{
    fault_line("%s (%s, address %p)", what, fn, ptr);
    if (shoal_opt(ALLOC_OPTION_ON_ERROR) != ALLOC_ON_ERROR_WARN)
        abort();
}
