/* vm_check.c - the address space shoal takes, for a process that runs
 * under a limit on it (RLIMIT_AS: `ulimit -v`, systemd's LimitAS=),
 * where every mapping counts, touched or not.
 *
 *   vm_check LIBSHOAL   runs itself twice, with LD_PRELOAD=LIBSHOAL and
 *                       without, and checks that shoal adds at most
 *                       VM_BUDGET_MB of address space to a process at its
 *                       first malloc (the chunk map, the pool's tables, a
 *                       superpage: about 41 MiB on x86-64); then, preloaded,
 *                       that a process limited to what it has plus
 *                       HEADROOM_MB allocates 32 MiB in 100-byte blocks and,
 *                       after freeing them, one block of 16 MiB, contents
 *                       checked.
 *   vm_check --size     prints this process's VmSize in KiB after a malloc
 *   vm_check --limited  the limited run (preloaded)
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define VM_BUDGET_MB 48
/* The limited run's room: its blocks take about 60 MiB of it (the pool's
 * superpages stay mapped after their blocks are freed, so the 16 MiB
 * block needs room of its own). */
#define HEADROOM_MB 96
#define SMALL 100
#define SMALL_TOTAL ((size_t)32 << 20)
#define BIG ((size_t)16 << 20)

extern char **environ;

static long vm_size_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmSize:", 7) == 0)
            kb = strtol(line + 7, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kb;
}

static void fail(const char *what)
{
    fprintf(stderr, "vm_check: FAIL: %s\n", what);
    exit(1);
}

static unsigned char pattern(size_t block, size_t i)
{
    return (unsigned char)(block * 31 + i * 7 + 1);
}

static int limited(void)
{
    free(malloc(1));
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = ((rlim_t)vm_size_kb() << 10) + ((rlim_t)HEADROOM_MB << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        fail("setrlimit(RLIMIT_AS)");
    size_t n = SMALL_TOTAL / SMALL;
    unsigned char **b = malloc(n * sizeof *b);
    if (b == NULL)
        fail("the table of blocks");
    for (size_t k = 0; k < n; k++) {
        if ((b[k] = malloc(SMALL)) == NULL) {
            fprintf(stderr, "vm_check: FAIL: block %zu of %zu: no memory under the limit\n", k, n);
            return 1;
        }
        for (size_t i = 0; i < SMALL; i++)
            b[k][i] = pattern(k, i);
    }
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < SMALL; i++)
            if (b[k][i] != pattern(k, i))
                fail("a small block was overwritten");
        free(b[k]);
    }
    free(b);
    unsigned char *big = malloc(BIG);
    if (big == NULL)
        fail("16 MiB after the small blocks were freed: no memory under the limit");
    for (size_t i = 0; i < BIG; i += 4096)
        big[i] = pattern(i, 3);
    for (size_t i = 0; i < BIG; i += 4096)
        if (big[i] != pattern(i, 3))
            fail("the 16 MiB block was overwritten");
    free(big);
    printf("vm_check: 32 MiB of small blocks and a 16 MiB block under the limit\n");
    return 0;
}

/* Run this program with `mode`, LD_PRELOAD set to lib (NULL: unset);
 * its first output line, as a number (for --size). */
static long run(const char *self, const char *mode, const char *lib)
{
    int fd[2];
    if (pipe(fd) != 0)
        fail("pipe");
    size_t ne = 0;
    while (environ[ne] != NULL)
        ne++;
    char **env = calloc(ne + 2, sizeof *env), preload[4096];
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    if (lib != NULL) {
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
        env[k++] = preload;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    char *argv[] = { (char *)self, (char *)mode, NULL };
    pid_t pid;
    if (posix_spawn(&pid, self, &fa, NULL, argv, env) != 0)
        fail("posix_spawn");
    close(fd[1]);
    char out[256] = "";
    FILE *f = fdopen(fd[0], "r");
    if (fgets(out, sizeof out, f) == NULL)
        out[0] = '\0';
    fclose(f);
    int st;
    waitpid(pid, &st, 0);
    free(env);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return strcmp(mode, "--size") == 0 ? strtol(out, NULL, 10) : 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--size") == 0) {
        free(malloc(1));
        printf("%ld\n", vm_size_kb());
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--limited") == 0)
        return limited();
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBSHOAL | --size | --limited\n", argv[0]);
        return 2;
    }
    long plain = run(argv[0], "--size", NULL), shoal = run(argv[0], "--size", argv[1]);
    if (plain <= 0 || shoal <= 0)
        fail("a --size run failed");
    long added = (shoal - plain) >> 10;
    printf("vm_check: VmSize %ld KiB without shoal, %ld with it: +%ld MiB (budget %d)\n",
           plain, shoal, added, VM_BUDGET_MB);
    if (added > VM_BUDGET_MB)
        fail("shoal adds more address space than its budget");
    if (run(argv[0], "--limited", argv[1]) != 0)
        fail("the run under RLIMIT_AS");
    printf("vm_check: ok\n");
    return 0;
}
