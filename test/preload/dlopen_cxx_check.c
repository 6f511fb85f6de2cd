/* dlopen_cxx_check.c PLUGIN - a C program (no C++ runtime of its own)
 * that loads a C++ library with dlopen(RTLD_LOCAL) and makes its new
 * fail: std::bad_alloc must be thrown and caught in the library, and
 * the nothrow new return NULL - with shoal preloaded as without (where
 * shoal found no C++ runtime after itself to throw, it aborted). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    int (*throws)(size_t) = (int (*)(size_t))dlsym(lib, "plugin_new_throws");
    int (*nothrow)(size_t) = (int (*)(size_t))dlsym(lib, "plugin_new_nothrow");
    if (throws == NULL || nothrow == NULL)
        return 2;
    const size_t vast = (size_t)1 << 62;
    int fails = 0;
    if (throws(100) != 1 || nothrow(100) != 1) {
        fprintf(stderr, "FAIL: a small new did not succeed\n");
        fails++;
    }
    if (throws(vast) != 0) {
        fprintf(stderr, "FAIL: new of 2^62 bytes did not throw std::bad_alloc\n");
        fails++;
    }
    if (nothrow(vast) != 0) {
        fprintf(stderr, "FAIL: new (nothrow) of 2^62 bytes did not return NULL\n");
        fails++;
    }
    if (fails == 0)
        puts("dlopen_cxx_check: bad_alloc reaches a library loaded RTLD_LOCAL");
    return fails != 0;
}
