/* Size classes: every request maps to the smallest class that holds it,
 * classes are at most 12.5% apart above 128 bytes, aligned requests
 * land on classes whose size is a multiple of the alignment, and the
 * direct table's entries lead every request up to 1 KiB to its class. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "core/size_class.h"

static void test_class_is_smallest_fit(void **state)
{
    (void)state;
    for (size_t n = 1; n <= SHOAL_MEDIUM_MAX; n++) {
        unsigned c = shoal_size_to_class(n);
        assert_true(c < SHOAL_CLASSES);
        assert_true(shoal_class_size(c) >= n);
        if (c > 0)
            assert_true(shoal_class_size(c - 1) < n);
    }
}

static void test_classes_are_close(void **state)
{
    (void)state;
    for (unsigned c = 1; c < SHOAL_CLASSES; c++) {
        size_t prev = shoal_class_size(c - 1), size = shoal_class_size(c);
        assert_true(size > prev);
        assert_int_equal(size % 16, 0);
        if (prev >= 128)
            assert_true(size * 8 <= prev * 9);      /* at most 12.5% apart */
        else
            assert_int_equal(size - prev, 16);
        assert_int_equal(shoal_size_to_class(size), c);
    }
    /* Order-0 pages end at 8 KiB blocks, medium pages at 64 KiB. */
    assert_int_equal(shoal_class_size(SHOAL_SMALL_CLASSES - 1), 8u << 10);
    assert_int_equal(shoal_class_page_order(SHOAL_SMALL_CLASSES - 1), 0);
    assert_int_equal(shoal_class_page_order(SHOAL_SMALL_CLASSES), 1);
    assert_int_equal(shoal_class_size(SHOAL_CLASSES - 1), SHOAL_MEDIUM_MAX);
}

static void test_aligned_classes(void **state)
{
    (void)state;
    for (size_t align = 16; align <= SHOAL_SLOT_SIZE; align <<= 1) {
        for (size_t n = 1; n <= SHOAL_MEDIUM_MAX; n += (n < 4096 ? 1 : 61)) {
            unsigned c = shoal_class_for_aligned(n, align);
            if (c == SHOAL_CLASSES) {
                assert_true(shoal_align_up(n, align) > SHOAL_MEDIUM_MAX);
                continue;
            }
            assert_true(shoal_class_size(c) >= n);
            assert_int_equal(shoal_class_size(c) % align, 0);
        }
    }
}

/* Each direct index, in 16-byte steps to 1 KiB, 128-byte ones to 8 KiB
 * and 1 KiB ones to 64 KiB, belongs to exactly one class's range, and
 * that class is the one every request with that index takes: its own
 * class, or with CACHELINE_ALIGN the class of the request rounded to 64
 * bytes. */
static void test_direct_ranges(void **state)
{
    (void)state;
    for (int cacheline = 0; cacheline <= 1; cacheline++) {
        unsigned owner[SHOAL_DIRECT_ENTRIES];
        for (size_t i = 0; i < SHOAL_DIRECT_ENTRIES; i++)
            owner[i] = SHOAL_CLASSES;
        for (unsigned c = 0; c < SHOAL_CLASSES; c++) {
            size_t lo, hi;
            shoal_direct_range(c, cacheline, &lo, &hi);
            for (size_t i = lo; i <= hi; i++) {
                assert_true(i < SHOAL_DIRECT_ENTRIES);
                assert_int_equal(owner[i], SHOAL_CLASSES);      /* no overlap */
                owner[i] = c;
            }
        }
        for (size_t n = 0; n <= SHOAL_MEDIUM_MAX; n++) {
            unsigned want = cacheline ? shoal_class_for_aligned(n, 64) : shoal_size_to_class(n);
            size_t i = n <= SHOAL_DIRECT_MAX ? shoal_direct_index(n) : shoal_direct_med_index(n);
            assert_true(i < SHOAL_DIRECT_ENTRIES);
            assert_int_equal(owner[i], want);
        }
        for (size_t i = 0; i < SHOAL_DIRECT_ENTRIES; i++)
            assert_int_not_equal(owner[i], SHOAL_CLASSES);      /* every entry has its class */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_is_smallest_fit),
        cmocka_unit_test(test_classes_are_close),
        cmocka_unit_test(test_aligned_classes),
        cmocka_unit_test(test_direct_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
