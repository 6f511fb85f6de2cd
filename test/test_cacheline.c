/* CACHELINE_ALIGN (set in the environment by ctest): every block is
 * 64-byte aligned and at least as large as asked, contents stay intact,
 * and the option cannot change once blocks exist. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include "shoal.h"
#include "test_util.h"

static void test_every_block_on_a_cache_line(void **state)
{
    (void)state;
    enum { MAX = 9000 };
    static unsigned char *blocks[MAX];
    assert_int_equal(alloc_option_get(ALLOC_OPTION_CACHELINE_ALIGN), 1);
    for (size_t n = 1; n < MAX; n++) {
        unsigned char *p = blocks[n] = n % 2 ? alloc_malloc(n) : alloc_calloc(1, n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        assert_true(alloc_usable_size(p) >= n);
        memset(p, (int)(n & 0xff), n);
    }
    for (size_t n = 1; n < MAX; n++) {
        assert_int_equal(blocks[n][0], n & 0xff);
        assert_int_equal(blocks[n][n - 1], n & 0xff);
        blocks[n] = alloc_realloc(blocks[n], n + 10);
        assert_int_equal((uintptr_t)blocks[n] % 64, 0);
        assert_int_equal(blocks[n][n - 1], n & 0xff);
        alloc_free(blocks[n]);
    }
}

/* An aligned request below a cache line is served on one too, and the
 * sized free takes it back at the size and alignment asked: the fast
 * path's class and free_aligned_sized's check agree. */
static void test_aligned_below_a_line_freed_sized(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_WARN), 0);
    for (size_t align = 16; align <= 64; align *= 2) {
        for (size_t n = 1; n <= 1100; n += 7) {
            unsigned char *p = alloc_aligned(align, n);
            assert_non_null(p);
            assert_int_equal((uintptr_t)p % 64, 0);
            memset(p, 0x5a, n);
            char msg[512];
            capture_begin();
            alloc_free_aligned_sized(p, align, n);
            if (capture_end(msg, sizeof msg))
                fail_msg("free_aligned_sized(aligned_alloc(%zu, %zu), %zu, %zu): %s", align, n,
                         align, n, msg);
        }
    }
    assert_int_equal(alloc_option_set(ALLOC_OPTION_ON_ERROR, ALLOC_ON_ERROR_ABORT), 0);
}

static void test_fixed_after_first_allocation(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_CACHELINE_ALIGN, 0), EBUSY);
    assert_int_equal(alloc_option_set(ALLOC_OPTION_CACHELINE_ALIGN, 1), 0);    /* no change */
    assert_int_equal(alloc_option_get(ALLOC_OPTION_CACHELINE_ALIGN), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_block_on_a_cache_line),
        cmocka_unit_test(test_aligned_below_a_line_freed_sized),
        cmocka_unit_test(test_fixed_after_first_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
