/* fake_libcuda.c -- a stand-in libcuda.so.1 for running measure_cuda's pipeline without a GPU
 * (tests/test_cuda_pipeline_fake_driver.py and tests/test_cuda_failure_paths.py build it and run
 * kbench against it in a subprocess). Every call succeeds and does nothing, except those that
 * hand something back: one device with a 1 MiB L2, a context stack, events that read 1 ms
 * apart, real host memory for the gate's flag, a graph from every capture.
 *
 * FAKE_FAIL="name:N[:code]" makes the Nth call of the driver function `name` fail (N < 0: every
 * call from the -Nth on; code defaults to 999). The fake_* functions report what a failure
 * path left behind: the context stack's depth, events / pinned / device memory / graphs still
 * alive, host waits that would hang behind a closed gate, the gate's flag freed while the GPU
 * still waited on it, a capture left open, cuProfilerStop calls, work queued and never waited
 * for (fake_unwaited), host waits, device-synchronizing frees and module loads/unloads (a PTX
 * load JIT-compiles) made with the GIL held (fake_waits_with_gil: PyGILState_Check of the
 * Python that loaded kbench).
 * The primary context counts its references (cuDevicePrimaryCtxRetain / Release):
 * cuDevicePrimaryCtxGetState reports it active while any are held, fake_primary_refs() how many.
 * FAKE_CUDA_END_CAPTURE_ERROR=<code>: cuStreamEndCapture fails with it (an invalidated capture).
 * FAKE_CUDA_END_CAPTURE_STUCK=<n>: its first n failures leave the stream capturing (n < 0: all
 * of them); cuStreamIsCapturing reports whether the stream captures.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdint.h>
static int fail_check(const char *name)
{
    static int counts[64]; static const char *names[64]; int i;
    const char *f = getenv("FAKE_FAIL");
    for (i = 0; i < 64 && names[i]; i++) if (strcmp(names[i], name) == 0) break;
    if (i == 64) return 0;
    if (!names[i]) names[i] = name;
    int n = ++counts[i];
    if (!f) return 0;
    size_t L = strlen(name);
    if (strncmp(f, name, L) == 0 && f[L] == ':') {
        char *end; long want = strtol(f + L + 1, &end, 10);
        int code = *end == ':' ? atoi(end + 1) : 999;
        if (n == want || (want < 0 && n >= -want)) return code;
    }
    return 0;
}
/* Host waits (synchronizations, and the frees that synchronize the device as cudaFree does)
 * made by a thread that holds the GIL: PyGILState_Check of the Python that loaded kbench. */
static int waits_with_gil;
int fake_waits_with_gil(void) { return waits_with_gil; }
static void wait_check(void)
{
    static int (*held)(void);
    static int looked;
    if (!looked) { held = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check"); looked = 1; }
    if (held && held()) waits_with_gil++;
}
#define F(name) do { int _c = fail_check(name); if (_c) return (CUresult)_c; } while (0)
static int ok(void) { return 0; }
/* Work queued (event records, launches, memsets, gate waits) since the last host wait: what a
 * caller that returned without draining its stream left running. */
static long unwaited;
long fake_unwaited(void) { return unwaited; }
static CUresult gDriverGetVersion(int *v) { *v = 13000; return 0; }
static CUresult gDeviceGet(CUdevice *d, int o) { *d = o; return 0; }
static CUresult gDeviceGetCount(int *n) { *n = 1; return 0; }
static CUresult gDeviceGetName(char *n, int len, CUdevice d) { snprintf(n, len, "Fake GPU"); return 0; }
static CUresult gDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { *v = a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE ? (1<<20) : 8; return 0; }
static CUresult gDeviceTotalMem(size_t *b, CUdevice d) { *b = 1ull<<34; return 0; }
static int ctx_dummy;
static CUcontext stack[64]; static int depth;
int fake_ctx_depth(void) { return depth; }
void *fake_ctx_current(void) { return depth ? stack[depth-1] : NULL; }
/* the primary context's references: it is active while any are held (fake_primary_refs) */
static int primary_refs;
int fake_primary_refs(void) { return primary_refs; }
static CUresult gPrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (CUcontext)&ctx_dummy; primary_refs++; return 0; }
static CUresult gPrimaryCtxRelease(CUdevice d) { if (primary_refs > 0) primary_refs--; return 0; }
static CUresult gCtxGetCurrent(CUcontext *c) { *c = depth ? stack[depth-1] : NULL; return 0; }
static CUresult gCtxSetCurrent(CUcontext c) { if (depth) stack[depth-1] = c; else if (c) stack[depth++] = c; return 0; }
static CUresult gCtxPushCurrent(CUcontext c) { F("cuCtxPushCurrent"); stack[depth++] = c; return 0; }
static CUresult gCtxPopCurrent(CUcontext *c) { if (!depth) return 201; if (c) *c = stack[depth-1]; depth--; return 0; }
static CUresult gCtxGetDevice(CUdevice *d) { *d = 0; return 0; }
static CUresult gCtxGetLimit(size_t *v, CUlimit l) { F("cuCtxGetLimit"); *v = 0; return 0; }
static int capturing;
int fake_capturing(void) { return capturing; }
static CUresult gStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { *st = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE; return 0; }
static int n_events;
int fake_events_alive(void) { return n_events; }
static CUresult gEventCreate(CUevent *e, unsigned f) { F("cuEventCreate"); *e = (CUevent)malloc(8); n_events++; return 0; }
static CUresult gEventDestroy(CUevent e) { free(e); n_events--; return 0; }
static CUresult gEventElapsedTime(float *ms, CUevent a, CUevent b) { F("cuEventElapsedTime"); *ms = 1.0f; return 0; }
static CUresult gEventRecord(CUevent e, CUstream s) { F("cuEventRecord"); unwaited++; return 0; }
static int n_dev;
int fake_dev_alive(void) { return n_dev; }
static CUresult gMemAlloc(CUdeviceptr *p, size_t n) { F("cuMemAlloc"); *p = (CUdeviceptr)malloc(16); n_dev++; return 0; }
static CUresult gMemFree(CUdeviceptr p) { wait_check(); free((void *)p); n_dev--; return 0; }
static CUresult gMemcpyDtoH(void *d, CUdeviceptr s, size_t n) { wait_check(); F("cuMemcpyDtoH"); memset(d, 0xab, n); return 0; }
static CUresult gMemGetInfo(size_t *f, size_t *t) { F("cuMemGetInfo"); *f = 1ull<<33; *t = 1ull<<34; return 0; }
static int n_pinned;
int fake_pinned_alive(void) { return n_pinned; }
/* the gate: waits queued on the flag, checked at every host wait and at the flag's free */
static volatile uint32_t *wait_addr; static uint32_t wait_val; static int hung_syncs, freed_while_waiting;
int fake_hung_syncs(void) { return hung_syncs; }
int fake_freed_while_waiting(void) { return freed_while_waiting; }
static int gate_closed(void) { return wait_addr && *wait_addr < wait_val; }
static CUresult gMemHostAlloc(void **p, size_t n, unsigned f) { F("cuMemHostAlloc"); *p = calloc(1, n); n_pinned++; return 0; }
static CUresult gMemFreeHost(void *p) { wait_check(); if (p == (void *)wait_addr) { if (gate_closed()) freed_while_waiting++; wait_addr = NULL; } free(p); n_pinned--; return 0; }
static CUresult gMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned f) { F("cuMemHostGetDevicePointer"); *d = (CUdeviceptr)p; return 0; }
static CUresult gStreamWaitValue32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f) { F("cuStreamWaitValue32"); unwaited++; wait_addr = (volatile uint32_t *)a; wait_val = v; return 0; }
static CUresult gStreamSynchronize(CUstream s) { wait_check(); if (gate_closed()) hung_syncs++; F("cuStreamSynchronize"); unwaited = 0; return 0; }
static CUresult gEventSynchronize(CUevent e) { wait_check(); if (gate_closed()) hung_syncs++; F("cuEventSynchronize"); unwaited = 0; return 0; }
static int n_stop, n_start;
int fake_profiler_stops(void) { return n_stop; }
static CUresult gCtxSynchronize(void) { wait_check(); if (gate_closed()) hung_syncs++; F("cuCtxSynchronize"); unwaited = 0; return 0; }
static CUresult gProfilerStart(void) { F("cuProfilerStart"); n_start++; return 0; }
static CUresult gProfilerStop(void) { F("cuProfilerStop"); n_stop++; return 0; }
static CUresult gLaunchKernel(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned sh, CUstream s, void **p, void **x) { F("cuLaunchKernel"); unwaited++; return 0; }
static CUresult gMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) { F("cuMemsetD32Async"); unwaited++; return 0; }
static CUresult gStreamBeginCapture(CUstream s, CUstreamCaptureMode m) { F("cuStreamBeginCapture"); capturing = 1; return 0; }
static int graph_dummy, exec_dummy, n_graphs, n_execs;
int fake_graphs_alive(void) { return n_graphs + n_execs; }
static CUresult gStreamEndCapture(CUstream s, CUgraph *g)
{
    static int stuck_so_far;
    const char *e = getenv("FAKE_CUDA_END_CAPTURE_ERROR"), *k = getenv("FAKE_CUDA_END_CAPTURE_STUCK");
    if (e) {
        int n = k ? atoi(k) : 0;
        if (n < 0 || stuck_so_far < n) stuck_so_far++; else capturing = 0;
        *g = NULL; return (CUresult)atoi(e);
    }
    capturing = 0;
    *g = (CUgraph)&graph_dummy; n_graphs++; return 0;
}
static CUresult gGraphDestroy(CUgraph g) { n_graphs--; return 0; }
static CUresult gGraphInstantiate(CUgraphExec *e, CUgraph g, unsigned long long f) { F("cuGraphInstantiate"); *e = (CUgraphExec)&exec_dummy; n_execs++; return 0; }
static CUresult gGraphExecDestroy(CUgraphExec e) { n_execs--; return 0; }
static CUresult gGraphGetNodes(CUgraph g, CUgraphNode *n, size_t *c) { *c = 0; return 0; }
static CUresult gGraphLaunch(CUgraphExec e, CUstream s) { F("cuGraphLaunch"); unwaited++; return 0; }
static int mod_dummy, fn_dummy;
static CUresult gModuleLoadData(CUmodule *m, const void *img) { wait_check(); F("cuModuleLoadData"); *m = (CUmodule)&mod_dummy; return 0; }
static CUresult gModuleUnload(CUmodule m) { wait_check(); return 0; }
static CUresult gModuleGetFunction(CUfunction *f, CUmodule m, const char *n) { *f = (CUfunction)&fn_dummy; return 0; }
static CUresult gModuleGetGlobal(CUdeviceptr *p, size_t *b, CUmodule m, const char *n) { static char g[64]; *p = (CUdeviceptr)g; if (b) *b = 64; return 0; }
static CUresult gGetErrorName(CUresult r, const char **s) { *s = "CUDA_ERROR_FAKE"; return 0; }
static CUresult gFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) { *v = 1; return 0; }
static CUresult gCtxGetStreamPriorityRange(int *lo, int *hi) { *lo = 0; *hi = -1; return 0; }
static CUresult gOcc(int *n, CUfunction f, int b, size_t s) { *n = 1; return 0; }
static CUresult gPrimaryCtxGetState(CUdevice d, unsigned *f, int *a) { F("cuDevicePrimaryCtxGetState"); *f = 0; *a = primary_refs > 0; return 0; }
static CUresult gPCI(char *p, int len, CUdevice d) { snprintf(p, len, "0000:01:00.0"); return 0; }
static const struct { const char *n; void *f; } table[] = {
    {"cuDriverGetVersion", gDriverGetVersion}, {"cuDeviceGet", gDeviceGet},
    {"cuDeviceGetCount", gDeviceGetCount}, {"cuDeviceGetName", gDeviceGetName},
    {"cuDeviceGetAttribute", gDeviceGetAttribute}, {"cuDeviceTotalMem", gDeviceTotalMem},
    {"cuDevicePrimaryCtxRetain", gPrimaryCtxRetain}, {"cuCtxGetCurrent", gCtxGetCurrent},
    {"cuDevicePrimaryCtxRelease", gPrimaryCtxRelease},
    {"cuCtxSetCurrent", gCtxSetCurrent}, {"cuCtxPushCurrent", gCtxPushCurrent},
    {"cuCtxPopCurrent", gCtxPopCurrent}, {"cuCtxGetDevice", gCtxGetDevice},
    {"cuCtxGetLimit", gCtxGetLimit}, {"cuStreamIsCapturing", gStreamIsCapturing},
    {"cuEventCreate", gEventCreate}, {"cuEventDestroy", gEventDestroy},
    {"cuEventElapsedTime", gEventElapsedTime}, {"cuEventRecord", gEventRecord},
    {"cuMemAlloc", gMemAlloc}, {"cuMemFree", gMemFree},
    {"cuMemGetInfo", gMemGetInfo}, {"cuMemHostAlloc", gMemHostAlloc},
    {"cuMemcpyDtoH", gMemcpyDtoH},
    {"cuMemFreeHost", gMemFreeHost}, {"cuMemHostGetDevicePointer", gMemHostGetDevicePointer},
    {"cuStreamWaitValue32", gStreamWaitValue32}, {"cuStreamSynchronize", gStreamSynchronize},
    {"cuEventSynchronize", gEventSynchronize}, {"cuCtxSynchronize", gCtxSynchronize},
    {"cuProfilerStart", gProfilerStart}, {"cuProfilerStop", gProfilerStop},
    {"cuLaunchKernel", gLaunchKernel}, {"cuMemsetD32Async", gMemsetD32Async},
    {"cuStreamBeginCapture", gStreamBeginCapture}, {"cuStreamEndCapture", gStreamEndCapture},
    {"cuGraphDestroy", gGraphDestroy}, {"cuGraphInstantiateWithFlags", gGraphInstantiate},
    {"cuGraphExecDestroy", gGraphExecDestroy}, {"cuGraphGetNodes", gGraphGetNodes},
    {"cuGraphLaunch", gGraphLaunch},
    {"cuModuleLoadData", gModuleLoadData}, {"cuModuleUnload", gModuleUnload},
    {"cuModuleGetFunction", gModuleGetFunction},
    {"cuModuleGetGlobal", gModuleGetGlobal}, {"cuGetErrorName", gGetErrorName},
    {"cuGetErrorString", gGetErrorName}, {"cuFuncGetAttribute", gFuncGetAttribute},
    {"cuCtxGetStreamPriorityRange", gCtxGetStreamPriorityRange},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", gOcc},
    {"cuDevicePrimaryCtxGetState", gPrimaryCtxGetState}, {"cuDeviceGetPCIBusId", gPCI},
};
CUresult cuGetProcAddress_v2(const char *name, void **fn, int v, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *st)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(table[i].n, name) == 0) { *fn = table[i].f; if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS; return 0; }
    *fn = (void *)ok;
    if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS;
    return 0;
}
