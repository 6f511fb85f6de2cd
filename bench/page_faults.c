/* page_faults.c - workload 8: a page-fault-heavy load.
 *
 * --rounds times: allocate about --mb MiB in blocks of random size
 * (--min-kb..--max-kb KiB), write one word in every 4 KiB page of each
 * block as it is allocated (the first touch is what faults), then check
 * every written word and free all the blocks.  Between rounds it sleeps
 * --pause-ms so an allocator with a purge delay gives the memory back and
 * the next round faults again, as a server between bursts would.
 * The fault counts come from the runner (getrusage of the child); run it
 * under shoal with SHOAL_PREFAULT=0 and 1 to compare.  Reports seconds
 * (excluding the pauses) and ns per page.
 *
 *   page_faults [--mb 512] [--rounds 6] [--min-kb 64] [--max-kb 8192]
 *               [--pause-ms 50]
 */
#include "bench.h"

#include <unistd.h>

#define PAGE 4096

int main(int argc, char **argv)
{
    size_t mb = (size_t)bench_arg_long(argc, argv, "--mb", 512);
    int rounds = (int)bench_arg_long(argc, argv, "--rounds", 6);
    size_t min_kb = (size_t)bench_arg_long(argc, argv, "--min-kb", 64);
    size_t max_kb = (size_t)bench_arg_long(argc, argv, "--max-kb", 8192);
    long pause_ms = bench_arg_long(argc, argv, "--pause-ms", 50);
    if (mb < 1 || rounds < 1 || min_kb < 4 || max_kb < min_kb)
        bench_fail("bad arguments");

    size_t target = mb << 20;
    size_t maxblocks = target / (min_kb << 10) + 2;
    unsigned char **blk = malloc(maxblocks * sizeof *blk);
    size_t *len = malloc(maxblocks * sizeof *len);
    BENCH_CHECK(blk && len, "out of memory");
    bench_rng_t rng;
    bench_rng_seed(&rng, 42);

    double busy = 0;
    uint64_t pages = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now();
        size_t n = 0, total = 0;
        while (total < target && n < maxblocks) {
            size_t size = (size_t)bench_rng_range(&rng, min_kb, max_kb) << 10;
            size -= (size_t)bench_rng_range(&rng, 0, 63) * 16;     /* not page-exact */
            unsigned char *p = malloc(size);
            if (p == NULL)
                bench_fail("malloc(%zu) returned NULL", size);
            uint64_t tag = ((uint64_t)r << 32) ^ n;
            for (size_t off = 0; off + sizeof(uint64_t) <= size; off += PAGE) {
                uint64_t v = tag ^ off;
                memcpy(p + off, &v, sizeof v);
                pages++;
            }
            p[size - 1] = (unsigned char)tag;
            blk[n] = p;
            len[n] = size;
            n++;
            total += size;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t tag = ((uint64_t)r << 32) ^ i;
            for (size_t off = 0; off + sizeof(uint64_t) <= len[i]; off += PAGE) {
                uint64_t v;
                memcpy(&v, blk[i] + off, sizeof v);
                if (v != (tag ^ off))
                    bench_fail("round %d block %zu offset %zu: overwritten", r, i, off);
            }
            if (blk[i][len[i] - 1] != (unsigned char)tag)
                bench_fail("round %d block %zu: last byte overwritten", r, i);
            free(blk[i]);
        }
        busy += bench_now() - t0;
        if (pause_ms > 0 && r + 1 < rounds)
            usleep((useconds_t)pause_ms * 1000);
    }
    free(blk);
    free(len);
    bench_metric("total_s", busy, "s");
    bench_metric("page_ns", busy * 1e9 / (double)pages, "ns");
    bench_ok();
    return 0;
}
