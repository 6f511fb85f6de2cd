/* kv_cache.c - workload 15: a key-value cache in one thread.
 *
 * --live values of 64..4000 B (sizes spread evenly, as a cache of
 * serialized records holds them) stand in a table; each of --steps
 * steps picks a key at random, checks the value there still holds its
 * stamp, frees it and stores a new value of a new random size.  The
 * live set (about 200 MiB at full size) is far larger than the CPU's
 * caches, so what a step costs beyond its two calls is the memory the
 * allocator itself touches: the pattern of caches and key-value stores
 * whose values are overwritten, and the one where an allocator that
 * keeps a free list per page finds only a block or two free in each.
 * Reports ns per step.
 *
 *   kv_cache [--live 100000] [--steps 2000000] [--seed 1]
 */
#include "bench.h"

typedef struct {
    unsigned char *value;
    uint32_t size;
    uint64_t tag;
} entry_t;

int main(int argc, char **argv)
{
    long live = bench_arg_long(argc, argv, "--live", 100000);
    long steps = bench_arg_long(argc, argv, "--steps", 2000000);
    long seed = bench_arg_long(argc, argv, "--seed", 1);
    BENCH_CHECK(live > 0 && steps > 0, "bad --live or --steps");
    entry_t *table = calloc((size_t)live, sizeof *table);
    BENCH_CHECK(table != NULL, "calloc of the table failed");
    bench_rng_t rng;
    bench_rng_seed(&rng, (uint64_t)seed);
    uint64_t tag = 1;
    for (long k = 0; k < live; k++) {
        entry_t *e = &table[k];
        e->size = (uint32_t)bench_rng_range(&rng, 64, 4000);
        e->value = malloc(e->size);
        BENCH_CHECK(e->value != NULL, "malloc(%u) failed", e->size);
        e->tag = tag++;
        bench_stamp(e->value, e->size, e->tag);
    }
    double t0 = bench_now();
    for (long i = 0; i < steps; i++) {
        entry_t *e = &table[bench_rng_range(&rng, 0, (uint64_t)live - 1)];
        BENCH_CHECK(bench_stamp_ok(e->value, e->size, e->tag), "value of tag %llu overwritten",
                    (unsigned long long)e->tag);
        free(e->value);
        e->size = (uint32_t)bench_rng_range(&rng, 64, 4000);
        e->value = malloc(e->size);
        BENCH_CHECK(e->value != NULL, "malloc(%u) failed", e->size);
        e->tag = tag++;
        bench_stamp(e->value, e->size, e->tag);
    }
    double t = bench_now() - t0;
    for (long k = 0; k < live; k++) {
        BENCH_CHECK(bench_stamp_ok(table[k].value, table[k].size, table[k].tag),
                    "value of tag %llu overwritten", (unsigned long long)table[k].tag);
        free(table[k].value);
    }
    free(table);
    bench_metric("step_ns", t * 1e9 / (double)steps, "ns");
    bench_info("%ld values of 64-4000 B, %ld replacements", live, steps);
    bench_ok();
    return 0;
}
