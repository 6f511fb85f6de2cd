/* interpose_check.c - is shoal the malloc of this process?
 *
 *   interpose_check preload        run with LD_PRELOAD=libshoal.so
 *   interpose_check linked-shared  built with -lshoal
 *   interpose_check linked-static  built with libshoal.a
 *   interpose_check static-exe     built with -static and libshoal.a
 *   interpose_check glibc          plain build, no shoal: the control,
 *                                  which must see glibc's malloc
 *
 * The evidence, in every shoal mode:
 *   - the program break never moves (sbrk(0) before and after thousands
 *     of allocations of all sizes; glibc's main arena grows with brk),
 *   - shoal's own counters move (alloc_stats_get: a heap was created and
 *     pool claims went up),
 *   - memory that libc allocates internally (strdup, asprintf, getline,
 *     open_memstream, realpath, getcwd, scandir, qsort's buffer) belongs
 *     to shoal: alloc_usable_size accepts it (shoal aborts on a pointer
 *     it did not hand out) and free takes it back,
 *   - where symbols are looked up dynamically, every malloc-family name
 *     resolves into libshoal, and in libshoal.so those that are an
 *     alloc_* function under another name are that function itself (its
 *     address: an alias, src/override.h, not a wrapper),
 *   - aligned allocation, realloc chains, a second thread and a fork work.
 *
 * The program itself never names shoal's symbols unless SHOAL_LINKED is
 * defined (the linked builds): a plain build finds them with dlsym.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "shoal.h"

typedef int (*stats_fn)(alloc_stats_t *);
typedef size_t (*usable_fn)(const void *);

static stats_fn get_stats;
static usable_fn get_usable;
static int failures;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            fprintf(stderr, "FAIL (%s:%d): ", __FILE__, __LINE__);    \
            fprintf(stderr, __VA_ARGS__);                             \
            fputc('\n', stderr);                                      \
            failures++;                                               \
        }                                                             \
    } while (0)

static const char *const family[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "malloc_usable_size",
    "aligned_alloc", "posix_memalign", "memalign", "valloc", "pvalloc", "cfree",
    "free_sized", "free_aligned_sized", "malloc_stats",
    "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
    "__libc_memalign", "__posix_memalign", "__libc_valloc", "__libc_pvalloc",
    "__libc_mallopt", "__libc_mallinfo",
    "malloc_trim", "mallinfo", "mallinfo2", "mallopt", "malloc_info",
};

/* The names glibc itself has (the control checks only these). */
#define GLIBC_NAMES 4

#ifdef SHOAL_STATIC_EXE
/* A static executable has no dynamic symbols to look up. */
static const char *object_of(void *addr)
{
    (void)addr;
    return "the executable";
}
static void check_symbols(const char *want, size_t count)
{
    (void)want;
    (void)count;
    (void)family;
}
static void check_aliases(void)
{
}
#define dlsym(handle, name) NULL
#else
static const char *object_of(void *addr)
{
    Dl_info info;
    if (addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL)
        return "?";
    return info.dli_fname;
}

/* The first `count` malloc-family names must come from `want` (part of
 * the defining object's path), or at least not from libc (`want` NULL). */
static void check_symbols(const char *want, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        void *sym = dlsym(RTLD_DEFAULT, family[i]);
        const char *obj = object_of(sym);
        if (want != NULL)
            CHECK(sym != NULL && strstr(obj, want) != NULL,
                  "%s resolves to %s, not to %s", family[i], sym ? obj : "nothing", want);
        else if (sym != NULL)
            CHECK(strstr(obj, "libc.so") == NULL, "%s resolves to %s", family[i], obj);
    }
}

/* libshoal.so's aliases: each C name and the alloc_* function it is. */
static const char *const aliases[][2] = {
    { "malloc", "alloc_malloc" }, { "__libc_malloc", "alloc_malloc" },
    { "calloc", "alloc_calloc" }, { "__libc_calloc", "alloc_calloc" },
    { "realloc", "alloc_realloc" }, { "__libc_realloc", "alloc_realloc" },
    { "reallocarray", "alloc_reallocarray" }, { "aligned_alloc", "alloc_aligned" },
    { "free", "alloc_free" }, { "cfree", "alloc_free" }, { "__libc_free", "alloc_free" },
    { "free_sized", "alloc_free_sized" }, { "free_aligned_sized", "alloc_free_aligned_sized" },
};

static void check_aliases(void)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        void *name = dlsym(RTLD_DEFAULT, aliases[i][0]), *fn = dlsym(RTLD_DEFAULT, aliases[i][1]);
        CHECK(name != NULL && name == fn, "%s is at %p, %s at %p: not one function",
              aliases[i][0], name, aliases[i][1], fn);
    }
}
#endif

static void find_shoal(void)
{
#if defined(SHOAL_LINKED) || defined(SHOAL_STATIC_EXE)
    get_stats = alloc_stats_get;
    get_usable = alloc_usable_size;
#else
    get_stats = (stats_fn)dlsym(RTLD_DEFAULT, "alloc_stats_get");
    get_usable = (usable_fn)dlsym(RTLD_DEFAULT, "alloc_usable_size");
#endif
}

static void check_owned(const void *p, size_t len, const char *what)
{
    CHECK(p != NULL, "%s returned NULL", what);
    if (p != NULL && get_usable != NULL)
        CHECK(get_usable(p) >= len, "%s: alloc_usable_size %zu < %zu", what, get_usable(p), len);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Memory that libc allocates on the program's behalf. */
static void libc_internal(void)
{
    char *s = strdup("shoal drop-in");
    check_owned(s, 14, "strdup");
    free(s);

    char *a = NULL;
    int n = asprintf(&a, "%d-%s-%0500d", 42, "x", 7);
    CHECK(n > 500, "asprintf returned %d", n);
    check_owned(a, (size_t)n + 1, "asprintf");
    free(a);

    char *buf = NULL;
    size_t cap = 0;
    FILE *f = fmemopen("first line\nsecond\n", 18, "r");
    CHECK(f != NULL, "fmemopen failed");
    if (f != NULL) {
        ssize_t len = getline(&buf, &cap, f);
        CHECK(len == 11, "getline returned %zd", len);
        check_owned(buf, cap, "getline");
        fclose(f);
    }
    free(buf);

    char *mem = NULL;
    size_t memlen = 0;
    FILE *ms = open_memstream(&mem, &memlen);
    CHECK(ms != NULL, "open_memstream failed");
    if (ms != NULL) {
        for (int i = 0; i < 2000; i++)
            fprintf(ms, "line %d\n", i);
        fclose(ms);
        check_owned(mem, memlen + 1, "open_memstream");
        free(mem);
    }

    char *rp = realpath("/", NULL);
    check_owned(rp, 2, "realpath");
    free(rp);
    char *cwd = getcwd(NULL, 0);
    check_owned(cwd, 2, "getcwd");
    free(cwd);

    struct dirent **names = NULL;
    int count = scandir("/", &names, NULL, alphasort);
    CHECK(count > 0, "scandir returned %d", count);
    for (int i = 0; i < count; i++) {
        check_owned(names[i], 1, "scandir entry");
        free(names[i]);
    }
    check_owned(names, (size_t)(count > 0 ? count : 1) * sizeof *names, "scandir array");
    free(names);

    /* qsort takes a malloc'ed buffer for big arrays. */
    size_t big = 1 << 20;
    int *v = malloc(big * sizeof *v);
    CHECK(v != NULL, "malloc for qsort");
    if (v != NULL) {
        for (size_t i = 0; i < big; i++)
            v[i] = (int)((i * 2654435761u) % 1000003);
        qsort(v, big, sizeof *v, cmp_int);
        for (size_t i = 1; i < big; i++)
            if (v[i - 1] > v[i]) {
                CHECK(0, "qsort result out of order at %zu", i);
                break;
            }
        free(v);
    }
}

static void aligned(void)
{
    void *p = NULL;
    CHECK(posix_memalign(&p, 4096, 10000) == 0 && ((uintptr_t)p & 4095) == 0,
          "posix_memalign(4096)");
    check_owned(p, 10000, "posix_memalign");
    free(p);
    CHECK(posix_memalign(&p, 3, 8) == EINVAL, "posix_memalign(3) should be EINVAL");
    p = aligned_alloc(64, 640);
    CHECK(p != NULL && ((uintptr_t)p & 63) == 0, "aligned_alloc(64)");
    check_owned(p, 640, "aligned_alloc");
    free(p);
    p = memalign(1 << 16, 100);
    CHECK(p != NULL && ((uintptr_t)p & 0xffff) == 0, "memalign(64 KiB)");
    check_owned(p, 100, "memalign");
    free(p);
    /* Rounded up to 2^63, which no block has; above that, not a size. */
    errno = 0;
    CHECK(memalign(((size_t)1 << 62) + 1, 1) == NULL && errno == ENOMEM,
          "memalign(2^62 + 1) should be ENOMEM");
    errno = 0;
    CHECK(memalign(SIZE_MAX, 1) == NULL && errno == EINVAL, "memalign(SIZE_MAX) should be EINVAL");
    long ps = sysconf(_SC_PAGESIZE);
    p = valloc(100);
    CHECK(p != NULL && ((uintptr_t)p & (uintptr_t)(ps - 1)) == 0, "valloc");
    free(p);
    p = pvalloc(100);
    CHECK(p != NULL && ((uintptr_t)p & (uintptr_t)(ps - 1)) == 0, "pvalloc");
    CHECK(p == NULL || malloc_usable_size(p) >= (size_t)ps, "pvalloc rounds up to a page");
    free(p);
}

static void realloc_chain(void)
{
    unsigned char *p = NULL;
    size_t len = 0;
    for (size_t n = 1; n <= ((size_t)16 << 20); n = n * 3 / 2 + 1) {
        unsigned char *q = realloc(p, n);
        CHECK(q != NULL, "realloc to %zu", n);
        if (q == NULL)
            break;
        for (size_t i = 0; i < len; i++)
            if (q[i] != (unsigned char)(i * 7)) {
                CHECK(0, "realloc to %zu lost byte %zu", n, i);
                break;
            }
        for (size_t i = len; i < n; i++)
            q[i] = (unsigned char)(i * 7);
        p = q;
        len = n;
    }
    free(p);
    void *z = calloc(1000, 1000);
    CHECK(z != NULL, "calloc");
    for (size_t i = 0; z != NULL && i < 1000000; i++)
        if (((unsigned char *)z)[i] != 0) {
            CHECK(0, "calloc memory not zero at %zu", i);
            break;
        }
    free(z);
    volatile size_t too_big = SIZE_MAX / 2 + 1;
    errno = 0;
    CHECK(malloc(too_big) == NULL && errno == ENOMEM, "malloc(SIZE_MAX/2+1) gives ENOMEM");
}

/* Thousands of blocks of every size class and then some. */
/* glibc's malloc.h extras answer from the malloc in use: with shoal, a
 * live 1 MiB block and a 5 MiB one show in mallinfo2, malloc_info writes
 * its XML, and a trim after freeing them works.  (In a fully static
 * program they only link if shoal defines them.) */
static void malloc_h_extras(bool shoal)
{
    char *mid = malloc(1 << 20), *big = malloc(5 << 20);
    CHECK(mid != NULL && big != NULL, "malloc for the extras");
    memset(mid, 1, 1 << 20);
    memset(big, 2, 5 << 20);
    struct mallinfo2 m = mallinfo2();
    CHECK(m.uordblks + m.hblkhd >= (6u << 20), "mallinfo2: %zu + %zu bytes in use, "
          "with 6 MiB live", m.uordblks, m.hblkhd);
    if (shoal)
        CHECK(m.hblks >= 1 && m.hblkhd >= (5u << 20), "mallinfo2: the 5 MiB block is not "
              "among the mmapped ones (%zu, %zu bytes)", m.hblks, m.hblkhd);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"     /* still called */
    CHECK(mallinfo().uordblks > 0, "mallinfo: nothing in use");
#pragma GCC diagnostic pop
    CHECK(mallopt(M_ARENA_MAX, 2) == 1, "mallopt(M_ARENA_MAX) refused");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL && malloc_info(0, f) == 0, "malloc_info failed");
    CHECK(f != NULL && malloc_info(1, f) == EINVAL, "malloc_info(1) should be EINVAL");
    if (f != NULL)
        fclose(f);
    CHECK(text != NULL && strncmp(text, "<malloc version=", 16) == 0 &&
          strstr(text, "</malloc>") != NULL, "malloc_info wrote: %s", text ? text : "(nothing)");
    if (shoal)
        CHECK(strstr(text, "shoal") != NULL, "malloc_info is not shoal's: %s", text);
    free(text);
    CHECK(mid[12345] == 1 && big[(5 << 20) - 1] == 2, "blocks damaged by the extras");
    free(mid);
    free(big);
    int r = malloc_trim(0);
    CHECK(r == 0 || r == 1, "malloc_trim returned %d", r);
    if (shoal)
        CHECK(mallinfo2().hblkhd + (5u << 20) <= m.hblkhd + (1u << 20),
              "the 5 MiB block still counts after free and trim");
}

static void workload(void)
{
    enum { N = 20000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        size_t n = (i % 97 == 0) ? 65536 + (size_t)i * 13 : (size_t)(i % 4000) + 1;
        p[i] = malloc(n);
        CHECK(p[i] != NULL, "malloc(%zu)", n);
        if (p[i] != NULL)
            memset(p[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i += 2)
        free(p[i]);
    for (int i = 0; i < N; i += 2)
        p[i] = calloc(1, (size_t)(i % 300) + 1);
    for (int i = 0; i < N; i++)
        free(p[i]);
    void *huge = malloc((size_t)64 << 20);
    CHECK(huge != NULL, "malloc(64 MiB)");
    free(huge);
}

static void *thread_alloc(void *arg)
{
    (void)arg;
    void **v = malloc(1000 * sizeof *v);
    for (int i = 0; v != NULL && i < 1000; i++)
        v[i] = malloc((size_t)i + 1);
    return v;
}

static void other_thread(void)
{
    pthread_t t;
    void **v = NULL;
    CHECK(pthread_create(&t, NULL, thread_alloc, NULL) == 0, "pthread_create");
    pthread_join(t, (void **)&v);
    CHECK(v != NULL, "thread's malloc");
    for (int i = 0; v != NULL && i < 1000; i++) {
        check_owned(v[i], (size_t)i + 1, "other thread's block");
        free(v[i]);             /* freed by another thread than its maker's */
    }
    free(v);
}

static void fork_child(void)
{
    char *keep = strdup("made before fork");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = strcmp(keep, "made before fork") != 0;
        free(keep);
        for (int i = 0; i < 10000; i++)
            free(malloc((size_t)i % 5000 + 1));
        _exit(bad);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child after fork failed (status %d)", st);
    free(keep);
}

int main(int argc, char **argv)
{
    const char *mode = argc == 2 ? argv[1] : "";
    bool glibc = strcmp(mode, "glibc") == 0;
    if (!glibc && strcmp(mode, "preload") != 0 && strcmp(mode, "linked-shared") != 0 &&
        strcmp(mode, "linked-static") != 0 && strcmp(mode, "static-exe") != 0) {
        fprintf(stderr, "usage: %s preload|linked-shared|linked-static|static-exe|glibc\n",
                argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    find_shoal();
    alloc_stats_t st0 = { .size = sizeof st0 }, st1 = { .size = sizeof st1 };

    if (glibc) {
        CHECK(get_stats == NULL, "alloc_stats_get is present in a program without shoal");
        check_symbols("libc.so", GLIBC_NAMES);
    } else {
        CHECK(get_stats != NULL && get_usable != NULL, "shoal's alloc_* symbols are not there");
        if (strcmp(mode, "preload") == 0 || strcmp(mode, "linked-shared") == 0) {
            check_symbols("libshoal", sizeof family / sizeof family[0]);
            check_aliases();
        }
        else if (strcmp(mode, "linked-static") == 0)
            check_symbols(NULL, GLIBC_NAMES);
        if (get_stats != NULL)
            CHECK(get_stats(&st0) == 0, "alloc_stats_get failed");
    }

    void *brk0 = sbrk(0);
    libc_internal();
    aligned();
    realloc_chain();
    workload();
    other_thread();
    fork_child();
    void *brk1 = sbrk(0);
    malloc_h_extras(!glibc);

    if (glibc) {
        CHECK(brk1 != brk0, "without shoal the program break should have moved");
    } else {
        CHECK(brk1 == brk0, "the program break moved from %p to %p: something used brk",
              brk0, brk1);
        if (get_stats != NULL) {
            CHECK(get_stats(&st1) == 0, "alloc_stats_get failed");
            CHECK(st1.heaps_created >= 2, "heaps_created is %lu after two threads allocated",
                  (unsigned long)st1.heaps_created);
            CHECK(st1.pool_claims > st0.pool_claims, "pool claims did not move (%lu -> %lu)",
                  (unsigned long)st0.pool_claims, (unsigned long)st1.pool_claims);
        }
    }
    if (failures != 0) {
        fprintf(stderr, "interpose_check %s: %d failures\n", mode, failures);
        return 1;
    }
    printf("interpose_check %s: ok (malloc from %s, break %s)\n", mode,
           object_of(dlsym(RTLD_DEFAULT, "malloc")), brk0 == brk1 ? "unchanged" : "moved");
    return 0;
}
