/* without_membarrier PROGRAM ARGS... - run PROGRAM with membarrier(2)
 * refused (ENOSYS), as an old kernel or a sandbox would: a seccomp
 * filter on that one call, kept across the exec.  shoal then has no
 * asymmetric barrier: a thread's huge slot and outbox fall back to
 * atomic exchanges (core/huge.c, thread/remote.c), and its calloc to
 * purging (os.c: under a filter it does not ask mincore). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: without_membarrier PROGRAM ARGS...\n");
        return 2;
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("without_membarrier: seccomp");
        return 2;
    }
    execv(argv[1], argv + 1);
    perror("without_membarrier: exec");
    return 2;
}
