// cxx_plugin.cpp - a C++ library that a C program loads with
// dlopen(RTLD_LOCAL), as Python loads extension modules: its libstdc++
// is then in no scope of the program's own.  Its operator new must
// still throw std::bad_alloc when no memory can be had, and the nothrow
// form return NULL, with shoal preloaded as without.
#include <cstddef>
#include <new>

// 0 thrown and caught, 1 not thrown (a block came back).
extern "C" __attribute__((visibility("default"))) int plugin_new_throws(size_t n)
{
    try {
        char *p = new char[n];
        asm volatile("" ::"r"(p) : "memory");
        delete[] p;
        return 1;
    } catch (std::bad_alloc &) {
        return 0;
    }
}

// 0 NULL, 1 a block.
extern "C" __attribute__((visibility("default"))) int plugin_new_nothrow(size_t n)
{
    char *p = new (std::nothrow) char[n];
    asm volatile("" ::"r"(p) : "memory");
    delete[] p;
    return p != nullptr;
}
