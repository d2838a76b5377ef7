/* Version entry points of GPU libraries, for tests/test_gpu_libraries.py: built once per
 * library name with -DVERSION=..., loaded by a subprocess so that they show in its memory map
 * as libcublas.so.13, libcudnn.so.9 and so on. Nothing else of those libraries is here. */
#include <stddef.h>

#ifndef VERSION
#define VERSION 0
#endif
#ifndef MAJOR
#define MAJOR 0
#endif
#ifndef MINOR
#define MINOR 0
#endif
#ifndef PATCH
#define PATCH 0
#endif

int cublasGetProperty(int type, int *value)
{
    int v[3] = {MAJOR, MINOR, PATCH};
    if (type < 0 || type > 2)
        return 7;
    *value = v[type];
    return 0;
}
size_t cudnnGetVersion(void) { return VERSION; }
int ncclGetVersion(int *version) { *version = VERSION; return 0; }
int cudaRuntimeGetVersion(int *version) { *version = VERSION; return 0; }
