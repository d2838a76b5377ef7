/* hip_forward.c -- a test library that exports the hip* entry points kbench's HIP loader
 * resolves (csrc/hip/hip_api.h: KB_HIP_REQUIRED and KB_HIP_OPTIONAL), each forwarding to the
 * CUDA driver API, so that kbench's HIP code path runs for real on an NVIDIA GPU:
 *
 *     KBENCH_HIP_LIBRARY=/path/to/libhip_forward.so python -m pytest tests/test_hip.py
 *
 * It needs no header: libcuda.so.1 is opened with dlopen and every driver function is looked up
 * with cuGetProcAddress_v2 at CUDA 12.0 (the ABIs written below). hipStream_t is a CUstream,
 * hipEvent_t a CUevent, hipGraph_t a CUgraph, hipGraphExec_t a CUgraphExec, device pointers are
 * CUdeviceptr, so PyTorch's CUDA streams are valid hip streams here. The calling thread gets the
 * device's primary context made current, as the HIP/CUDA runtimes do. CUDA error codes map to
 * the HIP codes of the same meaning (most share the number); the last CUDA code is kept so the
 * error string can name it. Not an AMD figure: it only runs kbench's HIP path on real hardware.
 *
 * Build: gcc -shared -fPIC -O2 -o libhip_forward.so hip_forward.c -ldl -lpthread
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef unsigned long long CUdeviceptr;
typedef unsigned int hipError_t;

enum { hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2,
       hipErrorNotInitialized = 3, hipErrorDeinitialized = 4, hipErrorInvalidDevice = 101,
       hipErrorNoDevice = 100, hipErrorInvalidContext = 201, hipErrorInvalidHandle = 400,
       hipErrorNotReady = 600, hipErrorLaunchFailure = 719, hipErrorNotSupported = 801,
       hipErrorStreamCaptureUnsupported = 900, hipErrorStreamCaptureInvalidated = 901,
       hipErrorStreamCaptureMerge = 902, hipErrorStreamCaptureUnmatched = 903,
       hipErrorStreamCaptureUnjoined = 904, hipErrorStreamCaptureIsolation = 905,
       hipErrorStreamCaptureImplicit = 906, hipErrorCapturedEvent = 907,
       hipErrorStreamCaptureWrongThread = 908, hipErrorIllegalAddress = 700,
       hipErrorUnknown = 999 };

/* CUDA driver codes whose HIP code has the same number and meaning. */
static const int same_number[] = {0, 1, 2, 3, 4, 100, 101, 201, 400, 600, 700, 719, 801,
                                  900, 901, 902, 903, 904, 905, 906, 907, 908};

static __thread int last_cuda_error;

static hipError_t map_error(CUresult r)
{
    if (r == 0)
        return hipSuccess;
    last_cuda_error = r;
    for (size_t i = 0; i < sizeof same_number / sizeof same_number[0]; i++)
        if (same_number[i] == r)
            return (hipError_t)r;
    if (r == 34)                        /* CUDA_ERROR_STUB_LIBRARY */
        return hipErrorNoDevice;
    if (r == 800 || r == 802)           /* NOT_PERMITTED, SYSTEM_NOT_READY */
        return hipErrorNotSupported;
    return hipErrorUnknown;
}

/* ------------------------------------------------------------------ the driver table */

#define DRIVER(X)                                                                              \
    X(cuInit, (unsigned int))                                                                  \
    X(cuDriverGetVersion, (int *))                                                             \
    X(cuGetErrorName, (CUresult, const char **))                                               \
    X(cuGetErrorString, (CUresult, const char **))                                             \
    X(cuDeviceGet, (CUdevice *, int))                                                          \
    X(cuDeviceGetCount, (int *))                                                               \
    X(cuDeviceGetName, (char *, int, CUdevice))                                                \
    X(cuDeviceGetPCIBusId, (char *, int, CUdevice))                                            \
    X(cuDeviceGetAttribute, (int *, int, CUdevice))                                            \
    X(cuDeviceTotalMem, (size_t *, CUdevice))                                                  \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                       \
    X(cuCtxGetCurrent, (CUcontext *))                                                          \
    X(cuCtxSetCurrent, (CUcontext))                                                            \
    X(cuCtxGetDevice, (CUdevice *))                                                            \
    X(cuCtxSynchronize, (void))                                                                \
    X(cuMemGetInfo, (size_t *, size_t *))                                                      \
    X(cuStreamCreate, (CUstream *, unsigned int))                                              \
    X(cuStreamDestroy, (CUstream))                                                             \
    X(cuStreamSynchronize, (CUstream))                                                         \
    X(cuStreamBeginCapture, (CUstream, int))                                                   \
    X(cuStreamEndCapture, (CUstream, CUgraph *))                                               \
    X(cuStreamIsCapturing, (CUstream, unsigned int *))                                         \
    X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))               \
    X(cuGraphLaunch, (CUgraphExec, CUstream))                                                  \
    X(cuGraphExecDestroy, (CUgraphExec))                                                       \
    X(cuGraphDestroy, (CUgraph))                                                               \
    X(cuEventCreate, (CUevent *, unsigned int))                                                \
    X(cuEventDestroy, (CUevent))                                                               \
    X(cuEventRecord, (CUevent, CUstream))                                                      \
    X(cuEventSynchronize, (CUevent))                                                           \
    X(cuEventElapsedTime, (float *, CUevent, CUevent))                                         \
    X(cuMemAlloc, (CUdeviceptr *, size_t))                                                     \
    X(cuMemFree, (CUdeviceptr))                                                                \
    X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                         \
    X(cuMemHostAlloc, (void **, size_t, unsigned int))                                         \
    X(cuMemFreeHost, (void *))                                                                 \
    X(cuMemHostGetDevicePointer, (CUdeviceptr *, void *, unsigned int))                        \
    X(cuStreamWaitValue32, (CUstream, CUdeviceptr, unsigned int, unsigned int))

#define FIELD_(name, params) CUresult (*name) params;
static struct { DRIVER(FIELD_) } cu;
#undef FIELD_

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static CUresult load_result = 999;
static char load_error[256];

typedef CUresult (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);

static void load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(load_error, sizeof load_error, "hip_forward: libcuda.so.1: %s", dlerror());
        load_result = 100;              /* -> hipErrorNoDevice */
        return;
    }
    get_proc_fn get_proc = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (get_proc == NULL) {
        snprintf(load_error, sizeof load_error, "hip_forward: the driver predates CUDA 12");
        load_result = 3;
        return;
    }
#define RESOLVE_(name, params)                                                                 \
    {                                                                                          \
        int status = 0;                                                                        \
        void *fn = NULL;                                                                       \
        if (get_proc(#name, &fn, 12000, 1 /* LEGACY_STREAM */, &status) != 0 || fn == NULL) {  \
            snprintf(load_error, sizeof load_error, "hip_forward: no %s in the driver", #name);\
            load_result = 3;                                                                   \
            return;                                                                            \
        }                                                                                      \
        memcpy(&cu.name, &fn, sizeof fn);                                                      \
    }
    DRIVER(RESOLVE_)
#undef RESOLVE_
    load_result = cu.cuInit(0);
}

static CUresult ready(void)
{
    pthread_once(&load_once, load_driver);
    return load_result;
}

static __thread int current_device = -1;

/* The primary context of `dev` current on this thread (what the runtimes do implicitly). */
static CUresult use_device(int dev)
{
    CUresult r = ready();
    CUdevice d;
    CUcontext ctx = NULL;
    if (r != 0)
        return r;
    if ((r = cu.cuDeviceGet(&d, dev)) != 0 || (r = cu.cuDevicePrimaryCtxRetain(&ctx, d)) != 0 ||
        (r = cu.cuCtxSetCurrent(ctx)) != 0)
        return r;
    current_device = dev;
    return 0;
}

/* A context current before any call that needs one: the thread's own, else device 0's. */
static CUresult ctx(void)
{
    CUresult r = ready();
    CUcontext c = NULL;
    if (r != 0)
        return r;
    if ((r = cu.cuCtxGetCurrent(&c)) != 0)
        return r;
    return c != NULL ? 0 : use_device(current_device >= 0 ? current_device : 0);
}

#define FWD(call)                                                                              \
    do {                                                                                       \
        CUresult r_ = ctx();                                                                   \
        if (r_ == 0)                                                                           \
            r_ = (call);                                                                       \
        return map_error(r_);                                                                  \
    } while (0)

/* ------------------------------------------------------------------ the HIP entry points */

EXPORT hipError_t hipInit(unsigned int flags) { return map_error(ready()); }

static const char *hip_name(hipError_t e)
{
    switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNotInitialized: return "hipErrorNotInitialized";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidContext: return "hipErrorInvalidContext";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorIllegalAddress: return "hipErrorIllegalAddress";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    case hipErrorStreamCaptureUnsupported: return "hipErrorStreamCaptureUnsupported";
    case hipErrorStreamCaptureInvalidated: return "hipErrorStreamCaptureInvalidated";
    case hipErrorStreamCaptureUnjoined: return "hipErrorStreamCaptureUnjoined";
    case hipErrorStreamCaptureImplicit: return "hipErrorStreamCaptureImplicit";
    case hipErrorStreamCaptureWrongThread: return "hipErrorStreamCaptureWrongThread";
    default: return "hipErrorUnknown";
    }
}

EXPORT const char *hipGetErrorName(hipError_t e) { return hip_name(e); }

EXPORT const char *hipGetErrorString(hipError_t e)
{
    static __thread char buf[320];
    const char *s = NULL;
    if (load_error[0] != '\0')
        return load_error;
    if (last_cuda_error != 0 && cu.cuGetErrorString != NULL &&
        cu.cuGetErrorString(last_cuda_error, &s) == 0 && s != NULL) {
        snprintf(buf, sizeof buf, "forwarded from CUDA error %d: %s", last_cuda_error, s);
        return buf;
    }
    return hip_name(e);
}

EXPORT hipError_t hipRuntimeGetVersion(int *v)
{
    CUresult r = ready();
    return map_error(r ? r : cu.cuDriverGetVersion(v));
}
EXPORT hipError_t hipDriverGetVersion(int *v) { return hipRuntimeGetVersion(v); }
EXPORT hipError_t hipGetDeviceCount(int *n)
{
    CUresult r = ready();
    return map_error(r ? r : cu.cuDeviceGetCount(n));
}
EXPORT hipError_t hipSetDevice(int dev) { return map_error(use_device(dev)); }
EXPORT hipError_t hipGetDevice(int *dev)
{
    CUdevice d = 0;
    CUresult r = ctx();
    if (r == 0 && (r = cu.cuCtxGetDevice(&d)) == 0)
        *dev = d;
    return map_error(r);
}

/* HIP attribute -> CUDA attribute, for the ones kbench reads. */
static int cuda_attribute(unsigned int a)
{
    switch (a) {
    case 5: return 13;      /* ClockRate */
    case 19: return 38;     /* L2CacheSize */
    case 59: return 37;     /* MemoryBusWidth */
    case 60: return 36;     /* MemoryClockRate */
    case 63: return 16;     /* MultiprocessorCount */
    default: return -1;
    }
}

EXPORT hipError_t hipDeviceGetAttribute(int *pi, unsigned int a, int dev)
{
    CUresult r = ready();
    CUdevice d;
    if (r != 0)
        return map_error(r);
    if (a == 10013) {       /* CanUseStreamWaitValue: CUDA 12+ always has stream memory ops */
        *pi = 1;
        return hipSuccess;
    }
    int ca = cuda_attribute(a);
    if (ca < 0)
        return hipErrorInvalidValue;
    if ((r = cu.cuDeviceGet(&d, dev)) != 0)
        return map_error(r);
    return map_error(cu.cuDeviceGetAttribute(pi, ca, d));
}

EXPORT hipError_t hipDeviceGetName(char *name, int len, int dev)
{
    CUresult r = ready();
    CUdevice d;
    if (r == 0 && (r = cu.cuDeviceGet(&d, dev)) == 0)
        r = cu.cuDeviceGetName(name, len, d);
    return map_error(r);
}
EXPORT hipError_t hipDeviceGetPCIBusId(char *id, int len, int dev)
{
    CUresult r = ready();
    CUdevice d;
    if (r == 0 && (r = cu.cuDeviceGet(&d, dev)) == 0)
        r = cu.cuDeviceGetPCIBusId(id, len, d);
    return map_error(r);
}
EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, int dev)
{
    CUresult r = ready();
    CUdevice d;
    if (r == 0 && (r = cu.cuDeviceGet(&d, dev)) == 0)
        r = cu.cuDeviceTotalMem(bytes, d);
    return map_error(r);
}
EXPORT hipError_t hipMemGetInfo(size_t *f, size_t *t) { FWD(cu.cuMemGetInfo(f, t)); }
EXPORT hipError_t hipDeviceSynchronize(void) { FWD(cu.cuCtxSynchronize()); }
EXPORT hipError_t hipStreamCreateWithFlags(void **s, unsigned int flags)
{
    FWD(cu.cuStreamCreate(s, flags));   /* hipStreamNonBlocking == CU_STREAM_NON_BLOCKING == 1 */
}
EXPORT hipError_t hipStreamDestroy(void *s) { FWD(cu.cuStreamDestroy(s)); }
EXPORT hipError_t hipStreamSynchronize(void *s) { FWD(cu.cuStreamSynchronize(s)); }
/* hipStreamCaptureMode{Global,ThreadLocal,Relaxed} = CU_STREAM_CAPTURE_MODE_* = 0, 1, 2 */
EXPORT hipError_t hipStreamBeginCapture(void *s, unsigned int mode)
{
    FWD(cu.cuStreamBeginCapture(s, (int)mode));
}
EXPORT hipError_t hipStreamEndCapture(void *s, void **g) { FWD(cu.cuStreamEndCapture(s, g)); }
EXPORT hipError_t hipStreamIsCapturing(void *s, unsigned int *st)
{
    FWD(cu.cuStreamIsCapturing(s, st));
}
EXPORT hipError_t hipGraphInstantiate(void **e, void *g, void **err_node, char *log, size_t n)
{
    if (log != NULL && n > 0)
        log[0] = '\0';
    FWD(cu.cuGraphInstantiateWithFlags(e, g, 0));
}
EXPORT hipError_t hipGraphLaunch(void *e, void *s) { FWD(cu.cuGraphLaunch(e, s)); }
EXPORT hipError_t hipGraphExecDestroy(void *e) { FWD(cu.cuGraphExecDestroy(e)); }
EXPORT hipError_t hipGraphDestroy(void *g) { FWD(cu.cuGraphDestroy(g)); }
EXPORT hipError_t hipEventCreate(void **e) { FWD(cu.cuEventCreate(e, 0)); }
EXPORT hipError_t hipEventDestroy(void *e) { FWD(cu.cuEventDestroy(e)); }
EXPORT hipError_t hipEventRecord(void *e, void *s) { FWD(cu.cuEventRecord(e, s)); }
EXPORT hipError_t hipEventSynchronize(void *e) { FWD(cu.cuEventSynchronize(e)); }
EXPORT hipError_t hipEventElapsedTime(float *ms, void *a, void *b)
{
    FWD(cu.cuEventElapsedTime(ms, a, b));
}
EXPORT hipError_t hipMalloc(void **p, size_t n)
{
    CUdeviceptr d = 0;
    CUresult r = ctx();
    if (r == 0 && (r = cu.cuMemAlloc(&d, n)) == 0)
        *p = (void *)(uintptr_t)d;
    return map_error(r);
}
EXPORT hipError_t hipFree(void *p)
{
    if (p == NULL)
        return hipSuccess;
    FWD(cu.cuMemFree((CUdeviceptr)(uintptr_t)p));
}
EXPORT hipError_t hipMemsetAsync(void *p, int v, size_t n, void *s)
{
    FWD(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n, s));
}
/* hipHostMallocPortable/Mapped == CU_MEMHOSTALLOC_PORTABLE/DEVICEMAP == 1/2 */
EXPORT hipError_t hipHostMalloc(void **p, size_t n, unsigned int flags)
{
    FWD(cu.cuMemHostAlloc(p, n, flags & 0x3u));
}
EXPORT hipError_t hipHostFree(void *p) { FWD(cu.cuMemFreeHost(p)); }
EXPORT hipError_t hipHostGetDevicePointer(void **dev, void *host, unsigned int flags)
{
    CUdeviceptr d = 0;
    CUresult r = ctx();
    if (r == 0 && (r = cu.cuMemHostGetDevicePointer(&d, host, 0)) == 0)
        *dev = (void *)(uintptr_t)d;
    return map_error(r);
}
/* hipStreamWaitValue{Gte,Eq,And,Nor} == CU_STREAM_WAIT_VALUE_{GEQ,EQ,AND,NOR} == 0..3; CUDA has
 * no mask, so only the full mask is forwarded. */
EXPORT hipError_t hipStreamWaitValue32(void *s, void *p, uint32_t v, unsigned int flags,
                                       uint32_t mask)
{
    if (mask != 0xFFFFFFFFu || flags > 3)
        return hipErrorNotSupported;
    FWD(cu.cuStreamWaitValue32(s, (CUdeviceptr)(uintptr_t)p, v, flags));
}
