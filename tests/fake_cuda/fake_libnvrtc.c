/* fake_libnvrtc.c -- a stand-in libnvrtc.so.13 beside the fake libcuda (tests/
 * test_cuda_failure_paths.py), so that CudaKernel's compile path runs without a CUDA toolkit:
 * a source holding "#error" fails to compile (NVRTC_ERROR_COMPILATION, with a log that quotes
 * the line), anything else compiles to a dummy CUBIN, which the fake driver loads.
 * FAKE_NVRTC_FAIL=<name> makes every call of that NVRTC function fail (NVRTC_ERROR_INTERNAL_ERROR).
 * fake_nvrtc_programs() tells how many programs were created and not destroyed.
 *
 * Build: gcc -shared -fPIC -o libnvrtc.so.13 fake_libnvrtc.c
 */
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct {
    int failed;
    char log[256];
} program;

static int programs;
int fake_nvrtc_programs(void) { return programs; }

static int fails(const char *name)
{
    const char *f = getenv("FAKE_NVRTC_FAIL");
    return f != NULL && strcmp(f, name) == 0;
}
#define F(name)                                                                                \
    if (fails(name))                                                                           \
        return 11;                                  /* NVRTC_ERROR_INTERNAL_ERROR */

nvrtcResult nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
const char *nvrtcGetErrorString(nvrtcResult r) { return r ? "NVRTC_ERROR_FAKE" : "NVRTC_SUCCESS"; }
nvrtcResult nvrtcCreateProgram(program **p, const char *src, const char *name, int n,
                               const char *const *headers, const char *const *names)
{
    F("nvrtcCreateProgram");
    *p = calloc(1, sizeof **p);
    const char *e = strstr(src, "#error");
    if (e != NULL) {
        (*p)->failed = 1;
        size_t len = strcspn(e, "\n");
        strcpy((*p)->log, "fake.cu(1): error: ");
        strncat((*p)->log, e, len < 200 ? len : 200);
    }
    programs++;
    return 0;
}
nvrtcResult nvrtcCompileProgram(program *p, int n, const char *const *opts)
{
    F("nvrtcCompileProgram");
    return p->failed ? 6 : 0;                       /* NVRTC_ERROR_COMPILATION */
}
nvrtcResult nvrtcGetProgramLogSize(program *p, size_t *n) { *n = strlen(p->log) + 1; return 0; }
nvrtcResult nvrtcGetProgramLog(program *p, char *log) { strcpy(log, p->log); return 0; }
nvrtcResult nvrtcGetCUBINSize(program *p, size_t *n) { F("nvrtcGetCUBINSize"); *n = 16; return 0; }
nvrtcResult nvrtcGetCUBIN(program *p, char *c) { F("nvrtcGetCUBIN"); memset(c, 0, 16); return 0; }
nvrtcResult nvrtcGetPTXSize(program *p, size_t *n) { *n = 1; return 0; }
nvrtcResult nvrtcGetPTX(program *p, char *c) { c[0] = 0; return 0; }
nvrtcResult nvrtcDestroyProgram(program **p)
{
    free(*p);
    *p = NULL;
    programs--;
    return 0;
}
