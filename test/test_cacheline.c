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
        cmocka_unit_test(test_fixed_after_first_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
