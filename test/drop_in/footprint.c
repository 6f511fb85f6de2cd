/* footprint.c - the memory a small single-threaded program costs.
 *
 *   footprint
 *
 * A few hundred live blocks of 1..8000 B (so most small size classes
 * hold one to a few blocks at a time), each replaced by a new block of a
 * random size, 200,000 times; every block is pattern-filled and checked
 * when freed.  Segregated size classes cost at most one partly used page
 * per class beyond the live bytes; what a heap keeps beside them is its
 * page cache.  So shoal's committed memory at its peak, and (outside the
 * sanitizers) the growth of the process's peak RSS, must stay within
 *
 *   peak live bytes + (classes used + page cache) x 64 KiB
 *
 * Releasing empty pages to be re-made for other classes too soon broke
 * this: every slot ended up wholly resident (7.9 MiB of RSS for 0.9 MiB
 * live, where the bound is 5.0).
 */
#define _GNU_SOURCE
#include <sys/resource.h>
#include "drop_in.h"

#define LIVE 200
#define STEPS 200000
#define MAX_SIZE 8000
#define PAGE ((size_t)64 << 10)
#define PAGE_CACHE 5            /* SHOAL_PAGE_CACHE in src/thread/heap.h */

static size_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss << 10;
}

int main(void)
{
    static void *live[LIVE];
    static size_t sizes[LIVE];
    static bool class_used[MAX_SIZE + 1];       /* by usable size */
    size_t rss_base = rss_bytes(), bytes = 0, peak = 0, classes = 0;
    uint32_t s = 12345;
    for (unsigned i = 0; i < STEPS; i++) {
        unsigned k = rnd(&s) % LIVE;
        if (live[k] != NULL) {
            const char *why = block_check(live[k]);
            if (why != NULL)
                die("block %p: %s", live[k], why);
            alloc_free(live[k]);
            bytes -= sizes[k];
        }
        size_t n = sizeof(block_hdr_t) + rnd(&s) % (MAX_SIZE - sizeof(block_hdr_t));
        if ((live[k] = block_make(n, i)) == NULL)
            die("out of memory");
        sizes[k] = n;
        bytes += n;
        if (bytes > peak)
            peak = bytes;
        size_t u = alloc_usable_size(live[k]);
        if (u <= MAX_SIZE && !class_used[u]) {
            class_used[u] = true;
            classes++;
        }
    }
    alloc_stats_t st = stats_now();
    size_t rss_growth = peak_rss() - rss_base;
    size_t bound = peak + (classes + PAGE_CACHE) * PAGE;
    printf("footprint: %d live blocks of 1..%d B, %u replaced\n", LIVE, MAX_SIZE, STEPS);
    printf("  peak live %zu KiB in %zu classes: bound %zu KiB\n", peak >> 10, classes,
           bound >> 10);
    printf("  shoal committed at its peak %zu KiB, process peak RSS grew by %zu KiB%s\n",
           st.committed_peak >> 10, rss_growth >> 10, CHECK_RSS ? "" : " (not checked)");
    for (unsigned k = 0; k < LIVE; k++)
        alloc_free(live[k]);
    if (st.committed_peak > bound)
        die("committed memory peaked at %zu KiB for %zu KiB live in %zu classes "
            "(bound %zu KiB)", st.committed_peak >> 10, peak >> 10, classes, bound >> 10);
    if (CHECK_RSS && rss_growth > bound)
        die("peak RSS grew by %zu KiB for %zu KiB live in %zu classes (bound %zu KiB)",
            rss_growth >> 10, peak >> 10, classes, bound >> 10);
    printf("footprint: ok\n");
    return 0;
}
