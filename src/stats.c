/* stats.c - alloc_stats_get and the text and JSON reports.
 *
 * Everything here is read from counters the slow paths keep and from the
 * pool's bitmaps, so the fast paths pay nothing.  Reports are formatted
 * into a stack buffer and written with write(2): no malloc, no stdio.
 */
#include "shoal.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "core/huge.h"
#include "core/message.h"
#include "core/pool.h"
#include "os/os.h"
#include "thread/heap.h"

static size_t resident_bytes(void)
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
    const char *s = buf;
    while (*s != ' ' && *s != '\0')     /* skip total size */
        s++;
    size_t pages = 0;
    while (*s == ' ')
        s++;
    while (*s >= '0' && *s <= '9')
        pages = pages * 10 + (size_t)(*s++ - '0');
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

int alloc_stats_get(alloc_stats_t *st)
{
    if (st == NULL || st->size < sizeof(alloc_stats_t))
        return EINVAL;
    shoal_pool_stats_t pool;
    shoal_huge_stats_t huge;
    shoal_heap_stats_t heaps;
    shoal_pool_stats(&pool);
    shoal_huge_stats(&huge);
    shoal_heap_stats(&heaps);
    st->version = ALLOC_STATS_VERSION;
    st->mapped = shoal_os_mapped();
    st->committed = ((pool.slots_claimed + pool.slots_dirty_free) << SHOAL_SLOT_SHIFT) +
                    huge.live_bytes + huge.cached_bytes;
    st->resident = resident_bytes();
    st->purged = pool.purged_bytes;
    st->superpages = pool.superpages;
    st->pool_slots_used = pool.slots_claimed;
    st->pool_claims = pool.claims;
    st->pool_releases = pool.releases;
    st->huge_live = huge.live;
    st->huge_live_bytes = huge.live_bytes;
    st->huge_cached = huge.cached;
    st->heaps_live = heaps.live;
    st->heaps_abandoned_pages = heaps.abandoned_pages;
    st->heaps_created = heaps.created;
    st->pages_adopted = heaps.adopted;
    return 0;
}

static void report(int fd, bool json)
{
    alloc_stats_t st = { .size = sizeof st };
    char buf[2048];
    size_t n;
    alloc_stats_get(&st);
    if (json)
        n = shoal_format(buf, sizeof buf,
                         "{\"version\":%u,\"mapped\":%zu,\"committed\":%zu,\"resident\":%zu,"
                         "\"purged\":%zu,\"superpages\":%zu,\"pool_slots_used\":%zu,"
                         "\"pool_claims\":%lu,\"pool_releases\":%lu,\"huge_live\":%zu,"
                         "\"huge_live_bytes\":%zu,\"huge_cached\":%zu,\"heaps_live\":%zu,"
                         "\"heaps_created\":%lu,\"abandoned_pages\":%zu,"
                         "\"pages_adopted\":%lu}\n",
                         st.version, st.mapped, st.committed, st.resident, st.purged,
                         st.superpages, st.pool_slots_used, (unsigned long)st.pool_claims,
                         (unsigned long)st.pool_releases, st.huge_live, st.huge_live_bytes,
                         st.huge_cached, st.heaps_live, (unsigned long)st.heaps_created,
                         st.heaps_abandoned_pages, (unsigned long)st.pages_adopted);
    else
        n = shoal_format(buf, sizeof buf,
                         "shoal statistics\n"
                         "  mapped           %zu\n  committed        %zu\n"
                         "  resident         %zu\n  purged           %zu\n"
                         "  superpages       %zu\n  pool slots used  %zu\n"
                         "  pool claims      %lu\n  pool releases    %lu\n"
                         "  huge blocks      %zu (%zu bytes), %zu cached\n"
                         "  heaps            %zu live, %lu created\n"
                         "  abandoned pages  %zu, %lu adopted\n",
                         st.mapped, st.committed, st.resident, st.purged, st.superpages,
                         st.pool_slots_used, (unsigned long)st.pool_claims,
                         (unsigned long)st.pool_releases, st.huge_live, st.huge_live_bytes,
                         st.huge_cached, st.heaps_live, (unsigned long)st.heaps_created,
                         st.heaps_abandoned_pages, (unsigned long)st.pages_adopted);
    shoal_write_all(fd, buf, n);
}

void alloc_stats_print(int fd)
{
    report(fd, false);
}

void alloc_stats_print_json(int fd)
{
    report(fd, true);
}
