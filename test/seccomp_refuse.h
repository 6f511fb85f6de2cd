/* seccomp_refuse.h - a seccomp filter on one system call, for the tests
 * that show what shoal does where a sandbox refuses that call: an old
 * kernel's ENOSYS, a refusal with another errno, or a kill. */
#ifndef SHOAL_SECCOMP_REFUSE_H
#define SHOAL_SECCOMP_REFUSE_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* What the filter answers the call. */
#define SECCOMP_ANSWER_ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))
#define SECCOMP_ANSWER_KILL SECCOMP_RET_KILL_PROCESS

/* From now on, and across exec, system call `nr` of the calling thread
 * (and of the threads it starts) gets `answer`; every other call is
 * allowed.  0, or -1 with errno where no filter can be installed. */
static inline int seccomp_refuse(int nr, unsigned int answer)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned int)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, answer),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -1;
    return 0;
}

#endif
