/* os.c - mmap, munmap, madvise and membarrier, and nothing else calls
 * them. */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000    /* Linux 4.17 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23          /* Linux 5.14 */
#endif

/* What every mapping is aligned to: the smallest page of any kernel
 * shoal runs on. */
#define MAP_ALIGN_MIN 4096

/* Bytes reserved, for stats: relaxed, nothing is published through them. */
static _Atomic size_t os_mapped, os_mapped_peak;

/* `size` more bytes reserved (it may wrap, to count fewer), the peak
 * raised with them. */
static void count_mapped(size_t size)
{
    size_t now = atomic_fetch_add_explicit(&os_mapped, size, memory_order_relaxed) + size;
    size_t peak = atomic_load_explicit(&os_mapped_peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&os_mapped_peak, &peak, now,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
}

/* At `at` (MAP_FIXED: a range of our own reservation) or anywhere. */
static void *map_anon(void *at, size_t size, enum shoal_os_charge charge)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (charge == SHOAL_OS_LAZY ? MAP_NORESERVE : 0) |
                (at != NULL ? MAP_FIXED : 0);
    void *p = mmap(at, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The base of the last aligned reservation, below which the next one
 * is asked for first (0: none yet, or the range below it was taken).  The
 * kernel hands out address space from the top down, so the range just
 * below our newest mapping is mostly free, and asked for there an
 * aligned reservation takes one mmap: without the hint it took five
 * (a try anywhere, unaligned but by chance and so unmapped, a
 * reservation of size + align, the mapping inside it, two trims).
 * Relaxed: a hint, never trusted - MAP_FIXED_NOREPLACE fails with
 * EEXIST where anything is mapped, and two threads that read the same
 * hint get one range each or one EEXIST. */
static _Atomic uintptr_t aligned_low;

/* size bytes aligned to align just below the last aligned reservation,
 * or NULL (and the hint dropped) if that range is not free. */
static void *map_below_last(size_t size, size_t align, enum shoal_os_charge charge)
{
    uintptr_t low = atomic_load_explicit(&aligned_low, memory_order_relaxed);
    if (low < size + align)
        return NULL;                    /* none, or no room below it */
    char *at = (char *)((low - size) & ~(uintptr_t)(align - 1));
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE |
                (charge == SHOAL_OS_LAZY ? MAP_NORESERVE : 0);
    char *p = mmap(at, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == at)
        return p;
    /* Taken (EEXIST), or, on a kernel before 4.17, which reads the flag
     * as no more than a hint, placed elsewhere: kept if aligned anyway. */
    if (p != MAP_FAILED && ((uintptr_t)p & (align - 1)) == 0)
        return p;
    if (p != MAP_FAILED)
        munmap(p, size);
    atomic_store_explicit(&aligned_low, 0, memory_order_relaxed);
    return NULL;
}

/* size bytes aligned to align anywhere: reserve size + align as address
 * space only, map the aligned size inside it as asked (so the
 * overcommit policy judges `size`, not the margin), and trim both ends.
 * The trimmed mapping stays one VMA and usually merges with its
 * neighbours. */
static void *map_trimmed(size_t size, size_t align, enum shoal_os_charge charge)
{
    if (size + align < size)
        return NULL;
    char *raw = map_anon(NULL, size + align, SHOAL_OS_LAZY);
    if (raw == NULL)
        return NULL;
    char *aligned = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    if (charge != SHOAL_OS_LAZY && map_anon(aligned, size, charge) == NULL) {
        munmap(raw, size + align);
        return NULL;
    }
    size_t head = (size_t)(aligned - raw);
    size_t tail = align - head;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(aligned + size, tail);
    return aligned;
}

void *shoal_os_reserve(size_t size, size_t align, enum shoal_os_charge charge)
{
    int saved = errno;
    void *p;
    if (align <= MAP_ALIGN_MIN) {
        p = map_anon(NULL, size, charge);
    } else {
        p = map_below_last(size, align, charge);
        if (p == NULL)
            p = map_trimmed(size, align, charge);
        if (p != NULL)
            atomic_store_explicit(&aligned_low, (uintptr_t)p, memory_order_relaxed);
    }
    if (p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    count_mapped(size);
    errno = saved;
    return p;
}

void shoal_os_release(void *addr, size_t size)
{
    if (munmap(addr, size) == 0)
        atomic_fetch_sub_explicit(&os_mapped, size, memory_order_relaxed);
}

bool shoal_os_purge(void *addr, size_t size, bool lazy)
{
    int saved = errno;
    bool zero;
    if (lazy && madvise(addr, size, MADV_FREE) == 0)
        zero = false;           /* contents undefined until the kernel acts */
    else
        zero = madvise(addr, size, MADV_DONTNEED) == 0;
    errno = saved;
    return zero;
}

/* Zeroing memory that is resident costs a memset; purging it costs as
 * much again in page faults when it is used, and in a process whose
 * other threads run, a read of a purged page maps the shared zero page,
 * so its first write takes a second fault and a TLB shootdown to every
 * CPU the process runs on (a calloc'd table read before it is written:
 * 2 threads, 2-40 MiB blocks, 15.8 s against 7.7 with the memset).  So
 * mincore(2) says which pages are resident, a window at a time: those
 * are memset, the rest purged, which costs little where nothing is
 * mapped.  Where mincore fails, everything is purged (memset where the
 * kernel refuses: memory locked by mlock).
 *
 * Not in a thread under a seccomp filter (shoal_os_filtered): mincore is
 * in none of systemd's system-call groups, so a service hardened with
 * SystemCallFilter=@system-service would be killed by it (SIGSYS), and
 * so would a daemon that sandboxes itself once started with a list of
 * the calls it makes.  Such a thread purges all instead. */
void shoal_os_zero(void *addr, size_t size)
{
    enum { WINDOW = 512 };      /* pages asked about at once */
    unsigned char vec[WINDOW];
    int saved = errno;
    bool look = !shoal_os_filtered();
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    char *p = addr, *end = p + (size + ps - 1) / ps * ps;
    while (p < end) {
        size_t pages = (size_t)(end - p) / ps;
        if (pages > WINDOW)
            pages = WINDOW;
        if (!look || mincore(p, pages * ps, vec) != 0)
            memset(vec, 0, pages);
        for (size_t i = 0, j; i < pages; i = j) {
            bool resident = vec[i] & 1;
            for (j = i + 1; j < pages && (bool)(vec[j] & 1) == resident; j++) {
            }
            char *run = p + i * ps;
            size_t len = (j - i) * ps;
            if (resident || !shoal_os_purge(run, len, false))
                memset(run, 0, len);
        }
        p += pages * ps;
    }
    errno = saved;
}

void shoal_os_prefault(void *addr, size_t size)
{
    int saved = errno;
    if (madvise(addr, size, MADV_POPULATE_WRITE) != 0) {
        /* Older kernel: touch one byte a page.  Reading would map the
         * shared zero page, so write; the memory is known to be zero. */
        long ps = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < size; off += (size_t)ps)
            ((volatile char *)addr)[off] = 0;
    }
    errno = saved;
}

void shoal_os_huge_hint(void *addr, size_t size)
{
    int saved = errno;
    (void)madvise(addr, size, MADV_HUGEPAGE);
    errno = saved;
}

long shoal_os_read_small_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return (long)n;
}

/* The calling thread's seccomp mode (0: no filter), from the kernel:
 * the Seccomp field of /proc/thread-self/status (a kernel without
 * seccomp has none: 0), or, where /proc is not mounted, prctl; -1 if
 * neither answers. */
static long seccomp_mode(void)
{
    char buf[4096];
    errno = 0;
    if (shoal_os_read_small_file("/proc/thread-self/status", buf, sizeof buf) > 0) {
        const char *f = strstr(buf, "\nSeccomp:");
        return f != NULL ? strtol(f + strlen("\nSeccomp:"), NULL, 10) : 0;
    }
    return errno == ENOENT ? prctl(PR_GET_SECCOMP, 0, 0, 0, 0) : -1;
}

bool shoal_os_filtered(void)
{
    static _Atomic bool seen;
    /* Relaxed: a hint that only ever turns true; each thread's own
     * answer comes from the kernel. */
    if (atomic_load_explicit(&seen, memory_order_relaxed))
        return true;
    int saved = errno;
    bool filtered = seccomp_mode() != 0;
    errno = saved;
    if (filtered)
        atomic_store_explicit(&seen, true, memory_order_relaxed);
    return filtered;
}

long shoal_os_threads(void)
{
    char buf[512];
    if (shoal_os_read_small_file("/proc/self/stat", buf, sizeof buf) < 0)
        return -1;
    const char *p = strrchr(buf, ')');      /* the name may hold spaces */
    if (p == NULL || p[1] == '\0')
        return -1;
    /* A main thread that ended with pthread_exit stays counted (a
     * zombie, field 3) until the process ends. */
    long zombie_main = p[2] == 'Z';
    for (int field = 2; p != NULL && field < 20; field++)
        p = strchr(p + 1, ' ');
    return p != NULL ? strtol(p + 1, NULL, 10) - zombie_main : -1;
}

/* membarrier(2) is on few sandboxes' lists (a daemon's list of the calls
 * it makes has no need of it): a thread under a filter does without it,
 * as where the kernel has none. */
bool shoal_os_barrier_offered(void)
{
    if (shoal_os_filtered())
        return false;
    int saved = errno;
    long r = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    errno = saved;
    long need = MEMBARRIER_CMD_PRIVATE_EXPEDITED | MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED;
    return r > 0 && (r & need) == need;
}

bool shoal_os_barrier_register(void)
{
    if (shoal_os_filtered())
        return false;
    int saved = errno;
    long r = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0);
    errno = saved;
    return r == 0;
}

bool shoal_os_barrier_all(void)
{
    if (shoal_os_filtered())
        return false;
    int saved = errno;
    long r = syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    errno = saved;
    return r == 0;
}

uint64_t shoal_os_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

size_t shoal_os_mapped(void)
{
    return atomic_load_explicit(&os_mapped, memory_order_relaxed);
}

size_t shoal_os_mapped_peak(void)
{
    return atomic_load_explicit(&os_mapped_peak, memory_order_relaxed);
}

void *shoal_os_remap(void *addr, size_t old_size, size_t new_size, void *new_addr)
{
    int saved = errno;
    void *p = new_addr == NULL
                  ? mremap(addr, old_size, new_size, 0)
                  : mremap(addr, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, new_addr);
    errno = saved;
    if (p == MAP_FAILED)
        return NULL;
    /* A move replaced new_addr's reservation, which was counted already;
     * in place, a growth raises the peak too (a shrink wraps the add). */
    if (new_addr == NULL)
        count_mapped(new_size - old_size);
    else
        atomic_fetch_sub_explicit(&os_mapped, old_size, memory_order_relaxed);
    return p;
}
