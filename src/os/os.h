/* os.h - the only layer that talks to the kernel about memory.
 *
 * Memory is reserved as private anonymous read-write mappings: on Linux
 * that is reservation and lazy commit in one step, since a page costs RSS
 * only once it is touched.  The pool's are MAP_NORESERVE; a huge block's
 * is charged to the kernel's overcommit account (enum shoal_os_charge).
 * Purging gives pages back (they read as zero afterwards with
 * MADV_DONTNEED); prefaulting populates them up front.  Every call
 * reports failure by return value and errno, never by crashing.
 */
#ifndef SHOAL_OS_H
#define SHOAL_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Zeroed buffers that only a report, a dump, heap profiling or huge
 * blocks write: kept together in a section of their own, apart from
 * the variables every process touches, so that those share as few
 * pages as can be and the buffers' pages stay untouched (and cost no
 * memory) where nobody asks for them. */
#define SHOAL_SELDOM_BSS __attribute__((section(".bss.shoal_seldom")))

/* Zeroed tables indexed by address or superpage, of which a process
 * touches only the entries of the memory it uses: a section of their
 * own too, placed after the rest (the link sorts .bss by section name),
 * so that no variable every process touches lies on a page of theirs
 * and each page of theirs that is resident holds entries in use. */
#define SHOAL_SPARSE_BSS __attribute__((section(".bss.shoal_sparse")))

/* How the kernel's overcommit policy sees a reservation. */
enum shoal_os_charge {
    /* MAP_NORESERVE: address space, whose memory counts as it is
     * touched (the pool's superpages, metadata). */
    SHOAL_OS_LAZY,
    /* Counted whole at once, as the C library's mmap of a large block
     * is: a block the machine could never back (malloc(1 << 46) on a
     * machine of some GiB, under the default heuristic) is refused here
     * with ENOMEM, where a lazy reservation would succeed and the
     * process be killed by the OOM killer when it touched the block. */
    SHOAL_OS_CHARGED,
};

/* Reserve `size` bytes aligned to `align` (a power of two, at least the
 * OS page size).  NULL with errno ENOMEM on failure. */
void *shoal_os_reserve(size_t size, size_t align, enum shoal_os_charge charge);

/* Give a whole reservation back to the kernel. */
void shoal_os_release(void *addr, size_t size);

/* Return the physical pages under [addr, addr+size); the range stays
 * reserved.  With `lazy` the kernel may take them when it likes
 * (MADV_FREE) and the contents are undefined until then; otherwise they
 * go now (MADV_DONTNEED) and the range reads as zero.  Returns true when
 * the range is known to read as zero afterwards. */
bool shoal_os_purge(void *addr, size_t size, bool lazy);

/* Make [addr, addr+size) read as zero, rounded up to whole pages (addr
 * on a page boundary), keeping what
 * is resident resident: resident pages are written with zeros, the
 * others purged (a page swapped out still holds its bytes). */
void shoal_os_zero(void *addr, size_t size);

/* Populate [addr, addr+size) now (MADV_POPULATE_WRITE, falling back to
 * touching each page).  Best effort. */
void shoal_os_prefault(void *addr, size_t size);

/* Ask for transparent huge pages on a range (HUGE_PAGES=1).  Best effort. */
void shoal_os_huge_hint(void *addr, size_t size);

/* Read a small file (a /proc one) whole into buf, NUL-terminated: its
 * length, or -1.  No allocation; async-signal-safe. */
long shoal_os_read_small_file(const char *path, char *buf, size_t cap);

/* Whether a seccomp filter may refuse the calling thread's system calls
 * - and kill the process for one it does not list.  A program may
 * install one at any time, on any thread (a daemon that sandboxes itself
 * once started, with a list of the calls it makes), and it never goes:
 * so each caller asks before a call that such lists lack (mincore,
 * membarrier, clone for a thread of shoal's own), and once one is seen
 * no thread asks again.  The kernel's answer is read from /proc with
 * open and read, which such lists hold, or refuse with an errno
 * (OpenSSH's sandbox answers EACCES), rather than asked with prctl,
 * which one that kills may lack; where it cannot be read, the answer is
 * yes. */
bool shoal_os_filtered(void);

/* The process's live threads, from /proc/self/stat (field 20, less a
 * main thread that ended with pthread_exit); -1 if it cannot be read.
 * No allocation. */
long shoal_os_threads(void);

/* A full memory barrier on every running thread of the process
 * (membarrier(2), PRIVATE_EXPEDITED), for a fence that one side of a
 * protocol pays for the other (core/sync.h).  _offered: whether the
 * kernel offers it and its registration (MEMBARRIER_CMD_QUERY: no
 * registration, no wait).  _register asks for it once: false where the
 * kernel or a sandbox refuses.  _all is false if no barrier was made.
 * All three say no, without the call, in a thread under a seccomp
 * filter (shoal_os_filtered).  errno is kept. */
bool shoal_os_barrier_offered(void);
bool shoal_os_barrier_register(void);
bool shoal_os_barrier_all(void);

/* Monotonic milliseconds, cheap (coarse clock). */
uint64_t shoal_os_now_ms(void);

/* Bytes currently mapped by shoal (reservations minus releases). */
size_t shoal_os_mapped(void);
size_t shoal_os_mapped_peak(void);

/* Resize a reservation.  With new_addr NULL only in place; otherwise the
 * pages move (without copying) to new_addr, a reservation of new_size
 * that this call replaces.  Returns the new address or NULL. */
void *shoal_os_remap(void *addr, size_t old_size, size_t new_size, void *new_addr);

#endif

