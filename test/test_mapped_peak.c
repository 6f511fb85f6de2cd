/* The peak of mapped bytes counts a huge block grown in place (mremap
 * without a move) as it counts a new mapping: freed, the block leaves the
 * peak where it was.  A process of its own, whose peak before the growth
 * is the little this test maps: in a process that mapped more before, a
 * peak left behind would not show. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>
#include <sys/mman.h>
#include "shoal.h"

#define MiB ((size_t)1 << 20)

static alloc_stats_t stats(void)
{
    alloc_stats_t st = { .size = sizeof st };
    assert_int_equal(alloc_stats_get(&st), 0);
    return st;
}

static void test_growth_in_place_raises_mapped_peak(void **state)
{
    (void)state;
    assert_int_equal(alloc_option_set(ALLOC_OPTION_PURGE_DELAY_MS, -1), 0);
    /* The addresses above the block are kept free for its growth: a
     * reservation made first (mappings go downward), given back after
     * the block is made. */
    void *room = mmap(NULL, 256 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(room != MAP_FAILED);
    unsigned char *p = alloc_malloc(8 * MiB);
    assert_non_null(p);
    memset(p, 0x4d, 8 * MiB);
    assert_int_equal(munmap(room, 256 * MiB), 0);
    unsigned char *q = alloc_realloc(p, 200 * MiB);
    assert_non_null(q);
    assert_int_equal(q[8 * MiB - 1], 0x4d);
    size_t live = stats().mapped;
    print_message("grown %s, %zu MiB mapped\n", q == p ? "in place" : "by a move", live >> 20);
    alloc_free(q);
    alloc_collect(true);
    alloc_stats_t st = stats();
    assert_true(st.mapped + 190 * MiB <= live);         /* it went back */
    assert_true(st.mapped_peak >= live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth_in_place_raises_mapped_peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
