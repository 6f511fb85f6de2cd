/* unwind.h - the calling thread's stack, for heap profiles.
 *
 * shoal's own unwinder for x86-64 Linux: it reads the DWARF call frame
 * information of the .eh_frame sections that every object built for
 * this ABI carries (programs without frame pointers, as Debian builds
 * them, included), finds an object's section with glibc's
 * _dl_find_object, and keeps what it derives for each return address in
 * one table for the whole process.  Inside malloc that matters: it
 * allocates nothing, takes no lock (the table is read and written with
 * atomics only), so neither a fork nor a signal can leave anything of it
 * held, and a thread's first stack costs what its thousandth does (no
 * per-thread cache to build, as libunwind's unw_backtrace builds one of
 * 256 KiB for every thread it walks). */
#ifndef SHOAL_UNWIND_H
#define SHOAL_UNWIND_H

#include <stdbool.h>

/* Whether this build has the unwinder (x86-64 with glibc 2.35 or later). */
bool shoal_os_unwind_supported(void);

/* Up to `max` return addresses of the calling thread's stack, the
 * caller's first, less the caller's own: a return address in
 * [own_lo, own_hi) drops it and every one before it (NULL, NULL: none
 * is the caller's).  Returns how many.  The walk stops at the outermost
 * frame, or early at a frame it cannot read: code with no call frame
 * information (generated at run time), a signal frame, a frame whose
 * rules are DWARF expressions.
 *
 * `frame`, where not NULL, is __builtin_frame_address(0) of a function
 * on the calling thread's stack (which so keeps rbp as its frame
 * pointer): the walk starts at that function's return address instead,
 * and steps through none of the frames below it - each step costs a
 * look-up of its rule. */
unsigned shoal_os_unwind(void **pcs, unsigned max, const void *own_lo, const void *own_hi,
                         const void *frame);

#endif
