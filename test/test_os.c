/* Aligned reservations (src/os/os.c): each is aligned and whole, the next
 * one is asked for just below the last with one mmap, and a hint whose
 * range something else took costs that mapping nothing.
 *
 * Linked with --wrap=mmap and --wrap=munmap: every call shoal's objects
 * make goes through the counting wrappers below (the C library's own
 * calls, and the sanitizers' interceptors, are untouched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "core/layout.h"
#include "os/os.h"

#define MiB ((size_t)1 << 20)
#define ALIGN SHOAL_SP_SIZE

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);

static unsigned calls;          /* mmap and munmap calls shoal made */

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    calls++;
    return __real_mmap(addr, len, prot, flags, fd, off);
}

int __wrap_munmap(void *addr, size_t len)
{
    calls++;
    return __real_munmap(addr, len);
}

/* A stamp at both ends of [p, p + size), and its check. */
static void stamp(unsigned char *p, size_t size, unsigned char v)
{
    p[0] = v;
    p[size / 2] = v;
    p[size - 1] = v;
}

static void check_stamp(const unsigned char *p, size_t size, unsigned char v)
{
    assert_int_equal(p[0], v);
    assert_int_equal(p[size / 2], v);
    assert_int_equal(p[size - 1], v);
}

/* Eight reservations of sizes that are no multiple of the alignment, as
 * huge blocks' are (3 MiB + 64 KiB ...): each aligned, writable and
 * apart from the others; after the first, the eight together took at
 * most two calls each (one where the range below the last was free, as
 * it is here but where another thread mapped there meanwhile).  Without
 * the hint each took five: an unaligned try, undone, then a reservation
 * with room to align, the mapping in it and two trims. */
static void test_aligned_reservations_take_one_mmap(void **state)
{
    (void)state;
    enum { N = 8 };
    unsigned char *p[N];
    size_t size[N];
    for (int i = 0; i < N; i++) {
        size[i] = (size_t)(i + 3) * MiB + 64 * 1024;
        unsigned before = calls;
        p[i] = shoal_os_reserve(size[i], ALIGN, SHOAL_OS_CHARGED);
        assert_non_null(p[i]);
        assert_true(calls > before);                    /* the wrappers count */
        assert_int_equal((uintptr_t)p[i] & (ALIGN - 1), 0);
        stamp(p[i], size[i], (unsigned char)(0xa0 + i));
        if (i == 0)
            calls = 0;
    }
    print_message("calls for 7 reservations: %u\n", calls);
    assert_true(calls <= 2 * (N - 1));
    for (int i = 0; i < N; i++) {
        check_stamp(p[i], size[i], (unsigned char)(0xa0 + i));
        shoal_os_release(p[i], size[i]);
    }
}

/* Where the hint's range is taken (here by a mapping of the test's own,
 * made just below the last reservation), the reservation is made
 * elsewhere, aligned, and the mapping there keeps its contents: the
 * hint is asked for without replacing anything. */
static void test_taken_hint_replaces_nothing(void **state)
{
    (void)state;
    unsigned char *a = shoal_os_reserve(4 * MiB, ALIGN, SHOAL_OS_LAZY);
    assert_non_null(a);
    stamp(a, 4 * MiB, 0x11);
    /* Where the next 4 MiB would go: taken by us first. */
    unsigned char *below = a - 4 * MiB;
    unsigned char *ours = __real_mmap(below, 4 * MiB, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (ours != below) {
        /* Taken already by something else, which the hint must spare
         * just the same; our own stamp then goes nowhere. */
        if (ours != MAP_FAILED)
            __real_munmap(ours, 4 * MiB);
        ours = NULL;
    } else {
        memset(ours, 0x5c, 4 * MiB);
    }
    unsigned char *b = shoal_os_reserve(4 * MiB, ALIGN, SHOAL_OS_LAZY);
    assert_non_null(b);
    assert_int_equal((uintptr_t)b & (ALIGN - 1), 0);
    assert_true(b != below);
    stamp(b, 4 * MiB, 0x22);
    check_stamp(a, 4 * MiB, 0x11);
    if (ours != NULL) {
        for (size_t off = 0; off < 4 * MiB; off += 4096)
            assert_int_equal(ours[off], 0x5c);
        __real_munmap(ours, 4 * MiB);
    }
    check_stamp(b, 4 * MiB, 0x22);
    shoal_os_release(a, 4 * MiB);
    shoal_os_release(b, 4 * MiB);
}

/* A reservation aligned only to the page is one mmap, hint or none. */
static void test_page_aligned_reservation(void **state)
{
    (void)state;
    unsigned before = calls;
    unsigned char *p = shoal_os_reserve(3 * 4096, 4096, SHOAL_OS_LAZY);
    assert_non_null(p);
    assert_int_equal(calls - before, 1);
    stamp(p, 3 * 4096, 0x33);
    check_stamp(p, 3 * 4096, 0x33);
    shoal_os_release(p, 3 * 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aligned_reservations_take_one_mmap),
        cmocka_unit_test(test_taken_hint_replaces_nothing),
        cmocka_unit_test(test_page_aligned_reservation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
