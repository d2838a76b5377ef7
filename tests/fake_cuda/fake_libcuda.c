/* fake_libcuda.c -- a stand-in libcuda.so.1 for running measure_cuda's pipeline without a GPU
 * (tests/test_cuda_pipeline_fake_driver.py builds it and runs kbench against it in a
 * subprocess). Every call succeeds and does nothing, except those that hand something back:
 * one device with a 1 MiB L2, a context, events that read 1 ms apart, real host memory for the
 * gate's flag. fake_events_alive() counts events created and not destroyed. */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
static int ok(void) { return 0; }
static CUresult gDriverGetVersion(int *v) { *v = 13000; return 0; }
static CUresult gDeviceGet(CUdevice *d, int o) { *d = o; return 0; }
static CUresult gDeviceGetCount(int *n) { *n = 1; return 0; }
static CUresult gDeviceGetName(char *n, int len, CUdevice d) { snprintf(n, len, "Fake GPU"); return 0; }
static CUresult gDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { *v = a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE ? (1<<20) : 8; return 0; }
static CUresult gDeviceTotalMem(size_t *b, CUdevice d) { *b = 1ull<<34; return 0; }
static int ctx_dummy;
static CUcontext cur;
static CUresult gPrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (CUcontext)&ctx_dummy; return 0; }
static CUresult gCtxGetCurrent(CUcontext *c) { *c = cur; return 0; }
static CUresult gCtxSetCurrent(CUcontext c) { cur = c; return 0; }
static CUresult gCtxPushCurrent(CUcontext c) { cur = c; return 0; }
static CUresult gCtxPopCurrent(CUcontext *c) { if (c) *c = cur; cur = NULL; return 0; }
static CUresult gCtxGetDevice(CUdevice *d) { *d = 0; return 0; }
static CUresult gCtxGetLimit(size_t *v, CUlimit l) { *v = 0; return 0; }
static CUresult gStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { *st = CU_STREAM_CAPTURE_STATUS_NONE; return 0; }
static int n_events;
static CUresult gEventCreate(CUevent *e, unsigned f) { *e = (CUevent)malloc(8); n_events++; return 0; }
static CUresult gEventDestroy(CUevent e) { free(e); n_events--; return 0; }
static CUresult gEventElapsedTime(float *ms, CUevent a, CUevent b) { *ms = 1.0f; return 0; }
static CUresult gMemAlloc(CUdeviceptr *p, size_t n) { *p = (CUdeviceptr)malloc(16); return 0; }
static CUresult gMemFree(CUdeviceptr p) { free((void *)p); return 0; }
static CUresult gMemGetInfo(size_t *f, size_t *t) { *f = 1ull<<33; *t = 1ull<<34; return 0; }
static CUresult gMemHostAlloc(void **p, size_t n, unsigned f) { *p = calloc(1, n); return 0; }
static CUresult gMemFreeHost(void *p) { free(p); return 0; }
static CUresult gMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned f) { *d = (CUdeviceptr)p; return 0; }
static int mod_dummy, fn_dummy;
static CUresult gModuleLoadData(CUmodule *m, const void *img) { *m = (CUmodule)&mod_dummy; return 0; }
static CUresult gModuleGetFunction(CUfunction *f, CUmodule m, const char *n) { *f = (CUfunction)&fn_dummy; return 0; }
static CUresult gModuleGetGlobal(CUdeviceptr *p, size_t *b, CUmodule m, const char *n) { static char g[64]; *p = (CUdeviceptr)g; if (b) *b = 64; return 0; }
static CUresult gGetErrorName(CUresult r, const char **s) { *s = "CUDA_ERROR_FAKE"; return 0; }
static CUresult gFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) { *v = 1; return 0; }
static CUresult gCtxGetStreamPriorityRange(int *lo, int *hi) { *lo = 0; *hi = -1; return 0; }
static CUresult gOcc(int *n, CUfunction f, int b, size_t s) { *n = 1; return 0; }
static CUresult gPrimaryCtxGetState(CUdevice d, unsigned *f, int *a) { *f = 0; *a = 1; return 0; }
/* FAKE_CUDA_END_CAPTURE_ERROR=<code>: cuStreamEndCapture fails with it (an invalidated capture) */
static CUresult gStreamEndCapture(CUstream s, CUgraph *g)
{
    const char *e = getenv("FAKE_CUDA_END_CAPTURE_ERROR");
    *g = NULL;
    return e ? (CUresult)atoi(e) : 0;
}
int fake_events_alive(void) { return n_events; }
static const struct { const char *n; void *f; } table[] = {
    {"cuDriverGetVersion", gDriverGetVersion}, {"cuDeviceGet", gDeviceGet},
    {"cuDeviceGetCount", gDeviceGetCount}, {"cuDeviceGetName", gDeviceGetName},
    {"cuDeviceGetAttribute", gDeviceGetAttribute}, {"cuDeviceTotalMem", gDeviceTotalMem},
    {"cuDevicePrimaryCtxRetain", gPrimaryCtxRetain}, {"cuCtxGetCurrent", gCtxGetCurrent},
    {"cuCtxSetCurrent", gCtxSetCurrent}, {"cuCtxPushCurrent", gCtxPushCurrent},
    {"cuCtxPopCurrent", gCtxPopCurrent}, {"cuCtxGetDevice", gCtxGetDevice},
    {"cuCtxGetLimit", gCtxGetLimit}, {"cuStreamIsCapturing", gStreamIsCapturing},
    {"cuEventCreate", gEventCreate}, {"cuEventDestroy", gEventDestroy},
    {"cuEventElapsedTime", gEventElapsedTime}, {"cuMemAlloc", gMemAlloc}, {"cuMemFree", gMemFree},
    {"cuMemGetInfo", gMemGetInfo}, {"cuMemHostAlloc", gMemHostAlloc},
    {"cuMemFreeHost", gMemFreeHost}, {"cuMemHostGetDevicePointer", gMemHostGetDevicePointer},
    {"cuModuleLoadData", gModuleLoadData}, {"cuModuleGetFunction", gModuleGetFunction},
    {"cuModuleGetGlobal", gModuleGetGlobal}, {"cuGetErrorName", gGetErrorName},
    {"cuGetErrorString", gGetErrorName}, {"cuFuncGetAttribute", gFuncGetAttribute},
    {"cuCtxGetStreamPriorityRange", gCtxGetStreamPriorityRange},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", gOcc},
    {"cuDevicePrimaryCtxGetState", gPrimaryCtxGetState},
    {"cuStreamEndCapture", gStreamEndCapture},
};
CUresult cuGetProcAddress_v2(const char *name, void **fn, int v, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *st)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(table[i].n, name) == 0) { *fn = table[i].f; if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS; return 0; }
    *fn = (void *)ok;      /* the rest: CUDA_SUCCESS, no output (measure_cuda reads none) */
    if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS;
    return 0;
}
