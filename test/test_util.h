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

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

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

#endif
