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

#endif
