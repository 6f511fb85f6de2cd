/* test_util.h - what several tests need. */
#ifndef SHOAL_TEST_UTIL_H
#define SHOAL_TEST_UTIL_H

/* UNDER_TSAN: built with ThreadSanitizer, which is slower and keeps
 * shadow memory of its own (RSS and mapping counts mean little there). */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* UNDER_ASAN: built with AddressSanitizer. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Capture what shoal writes on stderr (its fault messages, with
 * ON_ERROR=warn), between capture_begin and capture_end. */
static int saved_stderr = -1;
static FILE *capture;

static inline void capture_begin(void)
{
    capture = tmpfile();
    saved_stderr = dup(2);
    if (capture == NULL || saved_stderr < 0 || dup2(fileno(capture), 2) < 0)
        abort();
}

/* Ends the capture; returns whether anything was written, and copies it. */
static inline bool capture_end(char *buf, size_t cap)
{
    if (dup2(saved_stderr, 2) < 0)
        abort();
    close(saved_stderr);
    rewind(capture);
    size_t n = fread(buf, 1, cap - 1, capture);
    buf[n] = '\0';
    fclose(capture);
    return n != 0;
}

/* Resident set size in bytes, read from /proc/self/statm by the test
 * itself (not from shoal's own report) and without malloc. */
static inline size_t rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long size = 0, resident = 0;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Block i's pattern over its n bytes: written, and whether it is all
 * still there. */
static inline void pattern_fill(char *p, size_t n, int i)
{
    memset(p, 'a' + i % 26, n);
}

static inline bool pattern_ok(const char *p, size_t n, int i)
{
    for (size_t k = 0; k < n; k++)
        if (p[k] != 'a' + i % 26)
            return false;
    return true;
}

#endif
