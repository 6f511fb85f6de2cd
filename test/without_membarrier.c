/* without_membarrier PROGRAM ARGS... - run PROGRAM with membarrier(2)
 * refused (ENOSYS), as an old kernel or a sandbox would: a seccomp
 * filter on that one call, kept across the exec.  shoal then has no
 * asymmetric barrier: a thread's huge slot and outbox fall back to
 * atomic exchanges (core/huge.c, thread/remote.c), and its calloc to
 * purging (os.c: under a filter it does not ask mincore). */
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#include "seccomp_refuse.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: without_membarrier PROGRAM ARGS...\n");
        return 2;
    }
    if (seccomp_refuse(__NR_membarrier, SECCOMP_ANSWER_ERRNO(ENOSYS)) != 0) {
        perror("without_membarrier: seccomp");
        return 2;
    }
    execv(argv[1], argv + 1);
    perror("without_membarrier: exec");
    return 2;
}
