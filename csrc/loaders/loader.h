/* loader.h -- the GPU libraries, opened lazily with dlopen (CUDA build only).
 *
 * kbench never links against a GPU library: importing kbench._core maps none of them. The first
 * call that needs one opens it, fills a table of function pointers and remembers the outcome:
 *
 *     const kb_cuda_api *cu = kb_cuda(m);        // libcuda.so.1, runs cuInit(0) once
 *     if (cu == NULL) return NULL;               // LibraryNotFound / CudaError is set
 *     if (KB_CU(m, cu->cuStreamWaitValue32(stream, addr, 1, CU_STREAM_WAIT_VALUE_GEQ)) < 0)
 *         goto error;                            // CudaError: "cu->cuStreamWaitValue32(...)
 *                                                //  failed: CUDA_ERROR_... (...) [file:line]"
 *
 * Table fields carry the plain API names. cuda.h #defines some names to versioned symbols
 * (cuMemAlloc -> cuMemAlloc_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags,
 * cuStreamWaitValue32 -> cuStreamWaitValue32_v2, ...); the same macros rename the field and the
 * call, so `cu->cuMemAlloc(...)` and `cu->cuMemAlloc_v2(...)` both name the one field, typed from
 * the header's prototype. libcuda symbols are resolved through cuGetProcAddress by their base name
 * at cudaVersion = min(CUDA_VERSION, driver version), so every pointer has the ABI of the
 * prototype it is called through (the PyTorch c10/cuda/driver_api approach).
 *
 * Every function here expects the GIL to be held unless its comment says otherwise. The tables
 * live until the module is freed; a pointer to one may be used from any thread without the GIL.
 * Optional fields are NULL when the library lacks them: test before calling.
 */
#ifndef KBENCH_LOADER_H
#define KBENCH_LOADER_H

#include "kbench.h"
#include <cuda.h>
#include <cupti.h>

/* ================================================================== CUDA driver (libcuda.so.1) */

/* X(name, abi_since): abi_since is the CUDA version (1000*major + 10*minor) from which the driver
 * hands out the ABI that this header's prototype of `name` has; a driver older than that does not
 * get the function (required -> LibraryNotFound, optional -> NULL). 0: any driver with
 * cuGetProcAddress_v2 (CUDA >= 12.0) has it. */
#define KB_CUDA_REQUIRED(X)                                                                    \
    X(cuInit, 0) X(cuDriverGetVersion, 0) X(cuGetErrorName, 0) X(cuGetErrorString, 0)          \
    X(cuDeviceGet, 0) X(cuDeviceGetCount, 0) X(cuDeviceGetName, 0)                             \
    X(cuDeviceGetAttribute, 0) X(cuDeviceTotalMem, 0) X(cuDeviceGetUuid, 0)                    \
    X(cuDeviceGetPCIBusId, 0) X(cuDevicePrimaryCtxRetain, 0) X(cuDevicePrimaryCtxRelease, 0)   \
    X(cuCtxGetCurrent, 0) X(cuCtxSetCurrent, 0) X(cuCtxPushCurrent, 0) X(cuCtxPopCurrent, 0)   \
    X(cuCtxGetLimit, 0) X(cuCtxSetLimit, 0)                                                    \
    X(cuCtxResetPersistingL2Cache, 0)                                                          \
    X(cuStreamCreate, 0) X(cuStreamDestroy, 0) X(cuStreamSynchronize, 0) X(cuStreamQuery, 0)   \
    X(cuStreamGetCtx, 0) X(cuStreamWaitValue32, 0) X(cuStreamWriteValue32, 0)                  \
    X(cuStreamBeginCapture, 0) X(cuStreamEndCapture, 0) X(cuStreamIsCapturing, 0)              \
    X(cuThreadExchangeStreamCaptureMode, 0)                                                    \
    X(cuEventCreate, 0) X(cuEventDestroy, 0) X(cuEventRecord, 0) X(cuEventSynchronize, 0)      \
    X(cuEventElapsedTime, 0) /* _v2 (12.8) has the v1 signature */ X(cuEventQuery, 0)          \
    X(cuMemAlloc, 0) X(cuMemFree, 0) X(cuMemGetInfo, 0) X(cuMemsetD8Async, 0)                  \
    X(cuMemsetD32Async, 0) X(cuMemcpyDtoH, 0) X(cuMemcpyHtoD, 0) X(cuMemcpyDtoHAsync, 0)       \
    X(cuMemHostAlloc, 0) X(cuMemFreeHost, 0) X(cuMemHostGetDevicePointer, 0)                   \
    X(cuGraphInstantiateWithFlags, 0) X(cuGraphLaunch, 0) X(cuGraphExecDestroy, 0)             \
    X(cuGraphDestroy, 0) X(cuGraphGetNodes, 0) X(cuGraphNodeGetType, 0)                        \
    X(cuModuleLoadData, 0) X(cuModuleGetFunction, 0) X(cuModuleUnload, 0)                      \
    X(cuLaunchKernel, 0) X(cuFuncGetAttribute, 0)

/* Required functions whose prototype in cuda.h is the ABI from before CUDA 13.0, while the
 * driver hands out a new ABI at 13.0 under the same name: cuGetProcAddress at 13000 returns
 * cuCtxSynchronize_v13000(CUcontext) and cuCtxGetDevice_v13000(CUdevice *, CUcontext), which
 * called with the old arguments read a garbage context (CUDA_ERROR_CONTEXT_IS_DESTROYED from
 * cuCtxSynchronize once torch.profiler had run). These are looked up at no later than
 * KB_CUDA_PRE13_LOOKUP; loader_cuda.c asserts the prototypes against cudaTypedefs.h, and
 * tests/test_gpu_loaders.py fails when a listed function gains a new ABI no list accounts for. */
#define KB_CUDA_PRE13_LOOKUP 12090
#define KB_CUDA_REQUIRED_PRE13(X) X(cuCtxGetDevice, 0) X(cuCtxSynchronize, 0)

#define KB_CUDA_OPTIONAL(X)                                                                    \
    X(cuStreamGetCaptureInfo, 12030) /* _v3: 7 arguments since CUDA 12.3 */                    \
    X(cuDevicePrimaryCtxGetState, 0) X(cuCtxGetStreamPriorityRange, 0)                         \
    X(cuStreamCreateWithPriority, 0) X(cuLaunchHostFunc, 0) X(cuEventRecordWithFlags, 0)       \
    X(cuMemcpyHtoDAsync, 0) X(cuMemcpyDtoDAsync, 0) X(cuMemsetD8, 0) X(cuFuncSetAttribute, 0)  \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 0) X(cuModuleGetGlobal, 0)                  \
    X(cuProfilerStart, 0) X(cuProfilerStop, 0) /* profile.c: the range ncu/nsys capture */

/* cudaProfiler.h's two functions (that header is not in the nvidia-cuda-* header packages):
 * declared here only to type the table. */
CUresult CUDAAPI cuProfilerStart(void);
CUresult CUDAAPI cuProfilerStop(void);

#define KB_CUDA_FIELD_(name, abi_since) __typeof__(&name) name;
typedef struct {
    KB_CUDA_REQUIRED(KB_CUDA_FIELD_)
    KB_CUDA_REQUIRED_PRE13(KB_CUDA_FIELD_)
    KB_CUDA_OPTIONAL(KB_CUDA_FIELD_)
    /* the entry point itself, for files that need a symbol not listed above: call it with
     * the base name, kb_gpu_libs.cuda_lookup_version and CU_GET_PROC_ADDRESS_LEGACY_STREAM */
    __typeof__(&cuGetProcAddress) cuGetProcAddress;
} kb_cuda_api;

/* ================================================================== CUPTI (libcupti.so) */

#define KB_CUPTI_REQUIRED(X)                                                                   \
    X(cuptiGetVersion) X(cuptiGetResultString) X(cuptiSubscribe) X(cuptiUnsubscribe)           \
    X(cuptiActivityEnable) X(cuptiActivityDisable) X(cuptiActivityRegisterCallbacks)           \
    X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord)                                     \
    X(cuptiActivityGetNumDroppedRecords) X(cuptiActivityPushExternalCorrelationId)             \
    X(cuptiActivityPopExternalCorrelationId) X(cuptiGetTimestamp)

#define KB_CUPTI_OPTIONAL(X)                                                                   \
    X(cuptiActivityEnableLatencyTimestamps) X(cuptiFinalize) X(cuptiEnableCallback)            \
    X(cuptiEnableDomain) X(cuptiGetErrorMessage)

#define KB_LIB_FIELD_(name) __typeof__(&name) name;
typedef struct {
    KB_CUPTI_REQUIRED(KB_LIB_FIELD_)
    KB_CUPTI_OPTIONAL(KB_LIB_FIELD_)
} kb_cupti_api;

/* ================================================================== NVML (libnvidia-ml.so.1) */

/* nvml.h is not on the build machine: the handful of types and values kbench uses, as NVML
 * defines them (NVML API version 12/13). */
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef enum nvmlClockType_enum {
    NVML_CLOCK_GRAPHICS = 0,
    NVML_CLOCK_SM = 1,
    NVML_CLOCK_MEM = 2,
    NVML_CLOCK_VIDEO = 3
} nvmlClockType_t;

typedef enum nvmlTemperatureSensors_enum {
    NVML_TEMPERATURE_GPU = 0
} nvmlTemperatureSensors_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;              /* % of the last sample period a kernel was running */
    unsigned int memory;           /* % of the last sample period device memory was accessed */
} nvmlUtilization_t;

typedef struct nvmlMemory_st {     /* v1, as nvmlDeviceGetMemoryInfo fills it */
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlProcessInfo_st { /* the layout nvmlDeviceGetComputeRunningProcesses_v3 fills */
    unsigned int pid;
    unsigned long long usedGpuMemory;   /* bytes; NVML_VALUE_NOT_AVAILABLE when unknown */
    unsigned int gpuInstanceId;         /* 0xFFFFFFFF unless MIG */
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_VALUE_NOT_AVAILABLE (-1)

/* nvmlDeviceGetFieldValues: one query per field. NVML_FI_DEV_POWER_INSTANT is the board power
 * now (milliwatts), where nvmlDeviceGetPowerUsage is a one-second average on Ampere and later. */
#define NVML_FI_DEV_POWER_INSTANT 186
typedef enum nvmlValueType_enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
} nvmlValueType_t;
typedef union nvmlValue_st {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct nvmlFieldValue_st {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;            /* us since 1970 when the value was read */
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* nvmlDeviceGetClock's clock ids: application clocks differ from their default, or the
 * APPLICATIONS_CLOCKS event reason is set, when someone set or locked the clocks. */
typedef enum nvmlClockId_enum {
    NVML_CLOCK_ID_CURRENT = 0,
    NVML_CLOCK_ID_APP_CLOCK_TARGET = 1,
    NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2,
    NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3
} nvmlClockId_t;

/* nvmlDeviceGetP2PStatus's capabilities and answers, nvmlDeviceGetTopologyCommonAncestor's
 * levels (NVML's values; kbench/distributed/_topology.py names them). */
typedef enum nvmlGpuP2PCapsIndex_enum {
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_CAPS_INDEX_WRITE = 1,
    NVML_P2P_CAPS_INDEX_NVLINK = 2,
    NVML_P2P_CAPS_INDEX_ATOMICS = 3,
    NVML_P2P_CAPS_INDEX_PROP = 4,
    NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;
typedef enum nvmlGpuP2PStatus_enum {
    NVML_P2P_STATUS_OK = 0,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
    NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
    NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
    NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
    NVML_P2P_STATUS_NOT_SUPPORTED = 5,
    NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;
typedef enum nvmlGpuLevel_enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

/* Clock event ("throttle") reason bits of nvmlDeviceGetCurrentClocksEventReasons (NVML's
 * nvmlClocksEventReason* / nvmlClocksThrottleReason* values). */
#define KB_NVML_REASON_GPU_IDLE                0x0000000000000001ULL
#define KB_NVML_REASON_APPLICATIONS_CLOCKS     0x0000000000000002ULL
#define KB_NVML_REASON_SW_POWER_CAP            0x0000000000000004ULL
#define KB_NVML_REASON_HW_SLOWDOWN             0x0000000000000008ULL
#define KB_NVML_REASON_SYNC_BOOST              0x0000000000000010ULL
#define KB_NVML_REASON_SW_THERMAL_SLOWDOWN     0x0000000000000020ULL
#define KB_NVML_REASON_HW_THERMAL_SLOWDOWN     0x0000000000000040ULL
#define KB_NVML_REASON_HW_POWER_BRAKE_SLOWDOWN 0x0000000000000080ULL
#define KB_NVML_REASON_DISPLAY_CLOCK_SETTING   0x0000000000000100ULL

/* Prototypes, only to type the table (never called directly, so never linked). */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int *clock);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp);
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *clocksEventReasons);
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *clocksThrottleReasons);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit);
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values);
nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                nvmlClockId_t clockId, unsigned int *clockMHz);
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus);
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo);

#define KB_NVML_REQUIRED(X)                                                                    \
    X(nvmlInit_v2) X(nvmlShutdown) X(nvmlErrorString) X(nvmlSystemGetDriverVersion)            \
    X(nvmlDeviceGetHandleByPciBusId_v2) X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetName)  \
    X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetMaxClockInfo) X(nvmlDeviceGetPowerUsage)          \
    X(nvmlDeviceGetTemperature) X(nvmlDeviceGetUtilizationRates) X(nvmlDeviceGetMemoryInfo)

/* nvmlDeviceGetCurrentClocksEventReasons is the newer name (driver 535+) of
 * nvmlDeviceGetCurrentClocksThrottleReasons; the loader fills the first with the second when
 * only the old name exists, so callers use nvmlDeviceGetCurrentClocksEventReasons. One of the
 * two must exist. */
#define KB_NVML_OPTIONAL(X)                                                                    \
    X(nvmlDeviceGetCurrentClocksEventReasons) X(nvmlDeviceGetCurrentClocksThrottleReasons)     \
    X(nvmlDeviceGetComputeRunningProcesses_v3) X(nvmlDeviceGetEnforcedPowerLimit)              \
    X(nvmlDeviceGetFieldValues) X(nvmlDeviceGetClock) X(nvmlDeviceGetP2PStatus)                \
    X(nvmlDeviceGetTopologyCommonAncestor)

typedef struct {
    KB_NVML_REQUIRED(KB_LIB_FIELD_)
    KB_NVML_OPTIONAL(KB_LIB_FIELD_)
} kb_nvml_api;

/* ================================================================== NVRTC (libnvrtc.so) */

typedef struct _nvrtcProgram *nvrtcProgram;

typedef enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8,
    NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
    NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
    NVRTC_ERROR_TIME_FILE_WRITE_FAILED = 12,
    NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED = 13,
    NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED = 14,
    NVRTC_ERROR_PCH_CREATE = 15,
    NVRTC_ERROR_CANCELLED = 16,
    NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED = 17
} nvrtcResult;

nvrtcResult nvrtcVersion(int *major, int *minor);
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);

#define KB_NVRTC_REQUIRED(X)                                                                   \
    X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcCompileProgram)        \
    X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)      \
    X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcDestroyProgram)

#define KB_NVRTC_OPTIONAL(X)

typedef struct {
    KB_NVRTC_REQUIRED(KB_LIB_FIELD_)
    KB_NVRTC_OPTIONAL(KB_LIB_FIELD_)
} kb_nvrtc_api;

/* ================================================================== loaded-library state */

typedef enum { KB_LIB_UNTRIED = 0, KB_LIB_LOADED = 1, KB_LIB_FAILED = -1 } kb_lib_state;

typedef struct {
    kb_lib_state state;
    void *handle;               /* dlopen handle; NULL unless loaded (libcuda's: kept on failure) */
    char *path;                 /* malloc'd: the file it was loaded from; NULL unless loaded */
    char *error;                /* malloc'd: the remembered LibraryNotFound message, or NULL */
    int from_process;           /* 1 when the copy already mapped in the process was used */
} kb_lib;

struct kb_gpu_libs {
    kb_lib cuda_lib, cupti_lib, nvml_lib, nvrtc_lib;
    kb_cuda_api cuda;           /* valid when cuda_lib.state == KB_LIB_LOADED */
    kb_cupti_api cupti;
    kb_nvml_api nvml;
    kb_nvrtc_api nvrtc;
    int cuda_driver_version;    /* cuDriverGetVersion, e.g. 13000 */
    int cuda_lookup_version;    /* min(CUDA_VERSION, driver): the cudaVersion of every lookup */
    int cuda_initialized;       /* cuInit(0) succeeded */
    CUresult cuda_init_result;  /* the last cuInit(0) result (CUDA_ERROR_NO_DEVICE: no GPU) */
    int nvml_initialized;       /* nvmlInit_v2 succeeded; nvmlShutdown runs at module free */
    uint32_t cupti_version;     /* cuptiGetVersion (CUPTI API version of the loaded copy) */
    char *cupti_preferred;      /* malloc'd: the libcupti file the caller prefers (kb_cupti_
                                 * prefer; kbench.backends.cuda: the copy PyTorch ships), or
                                 * NULL */
    int nvrtc_major, nvrtc_minor;
};
typedef struct kb_gpu_libs kb_gpu_libs;

/* Accessors: open the library on first use, then return the same table. NULL with an exception:
 * LibraryNotFound naming the library, every path tried with dlerror() for each and how to fix it
 * (or a missing required symbol); the failure is remembered and raised again, same message, on
 * every later call. kb_cuda also runs cuInit(0) until it succeeds (CudaError when it fails, e.g.
 * CUDA_ERROR_NO_DEVICE); kb_nvml runs nvmlInit_v2 until it succeeds (NvmlError when it fails). */
const kb_cuda_api *kb_cuda(PyObject *m);
const kb_cupti_api *kb_cupti(PyObject *m);
const kb_nvml_api *kb_nvml(PyObject *m);
const kb_nvrtc_api *kb_nvrtc(PyObject *m);

/* Prefer the libcupti file `path` (NULL: none) when CUPTI is first opened: it is tried after a
 * copy already mapped in the process and $KBENCH_CUPTI_PATH (the user's choice), before the
 * default search, which still runs if it cannot be opened. Returns 1 when stored, 0 when CUPTI
 * was opened (or failed) already, so the preference can no longer apply (nothing changes), -1
 * with MemoryError. */
int kb_cupti_prefer(PyObject *m, const char *path);

/* The library state, allocated on first use (MemoryError). Never NULL after a successful
 * accessor call. */
kb_gpu_libs *kb_gpu_libs_get(PyObject *m);

/* ================================================================== error checks */

/* Each returns 0 when r is the library's success code, else raises and returns -1. The exception
 * (CudaError, CuptiError, NvmlError, NvrtcError) says
 *     "<expr> failed: <ERROR_NAME> (<description>) [file:line]"
 * and carries .call (str: expr), .code (int: r) and .name (str: ERROR_NAME). Callable whether or
 * not the library loaded (then the name is "CUDA error <code>" etc.). CUPTI's
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED raises CuptiBusy (a CuptiError): another profiler
 * owns CUPTI. GIL held. */
int kb_cu_check(PyObject *m, CUresult r, const char *expr, const char *file, int line);
int kb_cupti_check(PyObject *m, CUptiResult r, const char *expr, const char *file, int line);
int kb_nvml_check(PyObject *m, nvmlReturn_t r, const char *expr, const char *file, int line);
int kb_nvrtc_check(PyObject *m, nvrtcResult r, const char *expr, const char *file, int line);

#define KB_CU(m, expr) kb_cu_check((m), (expr), #expr, __FILE__, __LINE__)
#define KB_CUPTI(m, expr) kb_cupti_check((m), (expr), #expr, __FILE__, __LINE__)
#define KB_NVML(m, expr) kb_nvml_check((m), (expr), #expr, __FILE__, __LINE__)
#define KB_NVRTC(m, expr) kb_nvrtc_check((m), (expr), #expr, __FILE__, __LINE__)

/* Checks without the GIL: inside Py_BEGIN/END_ALLOW_THREADS record the first failure, raise it
 * after the GIL is back. All four libraries use 0 for success.
 *
 *     kb_deferred d = KB_DEFERRED_INIT;
 *     Py_BEGIN_ALLOW_THREADS
 *     KB_DEFER(&d, cu->cuStreamSynchronize(s));        // skipped once something failed
 *     KB_DEFER_ALWAYS(&d, cu->cuCtxPopCurrent(&ctx));  // cleanup: always runs
 *     Py_END_ALLOW_THREADS
 *     if (KB_CU_RAISE(m, &d) < 0) goto error;
 */
typedef struct {
    int code;                   /* 0: nothing failed */
    const char *expr;
    const char *file;
    int line;
} kb_deferred;
#define KB_DEFERRED_INIT {0, NULL, NULL, 0}

static inline int kb_defer_record_(kb_deferred *d, int code, const char *expr, const char *file,
                                   int line)
{
    if (code != 0 && d->code == 0) {
        d->code = code;
        d->expr = expr;
        d->file = file;
        d->line = line;
    }
    return code != 0 ? -1 : 0;
}
/* Evaluates expr only if nothing failed yet. 0 ok, -1 failed now or before. */
#define KB_DEFER(d, expr)                                                                      \
    ((d)->code != 0 ? -1 : kb_defer_record_((d), (int)(expr), #expr, __FILE__, __LINE__))
/* Always evaluates expr; records it if it is the first failure. 0 ok, -1 this call failed. */
#define KB_DEFER_ALWAYS(d, expr) kb_defer_record_((d), (int)(expr), #expr, __FILE__, __LINE__)
#define KB_CU_RAISE(m, d)                                                                      \
    ((d)->code == 0 ? 0 : kb_cu_check((m), (CUresult)(d)->code, (d)->expr, (d)->file, (d)->line))
#define KB_CUPTI_RAISE(m, d)                                                                   \
    ((d)->code == 0 ? 0                                                                        \
                    : kb_cupti_check((m), (CUptiResult)(d)->code, (d)->expr, (d)->file, (d)->line))
#define KB_NVML_RAISE(m, d)                                                                    \
    ((d)->code == 0 ? 0                                                                        \
                    : kb_nvml_check((m), (nvmlReturn_t)(d)->code, (d)->expr, (d)->file, (d)->line))

/* NVML's name for a return code ("NVML_ERROR_NOT_SUPPORTED"); NULL when unknown. */
const char *kb_nvml_error_name(int code);

/* ================================================================== devices (cuda_device.c) */

/* ValueError unless 0 <= ordinal < cuDeviceGetCount() (the message names CUDA_VISIBLE_DEVICES).
 * 0 or -1; opens libcuda. */
int kb_cuda_check_ordinal(PyObject *m, int ordinal);

/* The NVML handle of CUDA device `ordinal` (CUDA numbering, so CUDA_VISIBLE_DEVICES holds),
 * found through its PCI bus id. pci_bus_id (may be NULL) receives "0000:1B:00.0". Opens libcuda
 * and NVML. 0, or -1 with ValueError (bad ordinal), LibraryNotFound, CudaError or NvmlError. */
int kb_nvml_device_of_cuda(PyObject *m, int ordinal, nvmlDevice_t *dev, char *pci_bus_id,
                           size_t pci_bus_id_len);

/* ================================================================== NVML sampler */

/* A background thread that samples one device's SM/memory clocks, power, temperature and clock
 * event reasons every period_s into growable arrays. The thread never touches Python; a read that
 * fails stores NaN (0 for reasons) and is counted. */
typedef struct kb_nvml_sampler kb_nvml_sampler;

/* Start sampling CUDA device `cuda_ordinal`. NULL with ValueError/LibraryNotFound/NvmlError/
 * MemoryError/OSError. The module must outlive the sampler. */
kb_nvml_sampler *kb_nvml_sampler_start(PyObject *m, int cuda_ordinal, double period_s);
/* Stop, join and free s (always, even on error). A dict of numpy arrays t_s (seconds since start,
 * float64), sm_mhz, mem_mhz, power_w (the averaged board power), power_inst_w (instantaneous;
 * NaN where NVML has no such field), temp_c (float64, NaN where a read failed), reasons (uint64),
 * plus power_limit_w, app_clock_mhz / app_clock_default_mhz (None where unknown), n, period_s, start_s (CLOCK_MONOTONIC seconds, the clock of kb_now_ns), duration_s, ordinal,
 * errors, first_error, first_error_code, first_error_call, truncated, before_mark (samples
 * before kb_nvml_sampler_mark, left out of the arrays), warmup (those samples' seven arrays, their
 * t_s negative: before the mark) and mark_s (the mark, in seconds since start). NULL with an
 * exception. */
PyObject *kb_nvml_sampler_stop(PyObject *m, kb_nvml_sampler *s);
/* From now on is the part stop reports: samples before the mark go to its "warmup" and
 * its times count from the mark (a warm-up sampled for kb_nvml_sampler_settled, then the timed
 * part). Without a mark stop reports everything. */
void kb_nvml_sampler_mark(kb_nvml_sampler *s);
/* kb_nvml_sampler_mark as of sampler time t_s (kb_nvml_sampler_elapsed_s then), for a timed
 * part that began earlier: samples taken after t_s are kept. */
void kb_nvml_sampler_mark_at(kb_nvml_sampler *s, double t_s);
/* Seconds since the sampler started, on the clock of its t_s: where a load began. */
double kb_nvml_sampler_elapsed_s(const kb_nvml_sampler *s);
/* kb_clock_settled_carried over the samples so far (all of them, from the start), for the load
 * that began at load_start_s (kb_nvml_sampler_elapsed_s then) with the state carried from the
 * previous measurement (NULL: none): its KB_* answer, the last window's median SM clock and
 * which rule settled it (KB_SETTLED_BY_*); -1 when scratch memory could not be had. No Python. */
int kb_nvml_sampler_settled(kb_nvml_sampler *s, const kb_settle_rule *rule, double load_start_s,
                            const kb_settle_carry *carry, double *median, int *by);
/* kb_clock_settled_since over the samples so far: the sampler time after which the load of
 * load_start_s has shown the state it settled in (how, median SM clock sm_mhz); INFINITY when
 * unsettled. No Python. */
double kb_nvml_sampler_settled_since(kb_nvml_sampler *s, const kb_settle_rule *rule,
                                     double load_start_s, double sm_mhz, int how);
/* Whether any reading taken after sampler time t_s showed a power/thermal limit reason
 * (KB_CLOCK_LIMIT_REASONS). No Python. */
int kb_nvml_sampler_limited_since(kb_nvml_sampler *s, double t_s);
/* The first reading taken after sampler time t_s that shows a limit reason: its time (NaN:
 * none), its limit reasons into *reasons; *scanned_s gets the last reading's time, from which a
 * later call may go on. No Python. */
double kb_nvml_sampler_first_limit(kb_nvml_sampler *s, double t_s, uint64_t *reasons,
                                   double *scanned_s);
/* kb_power_recovered over the samples so far. No Python. */
int kb_nvml_sampler_recovered(kb_nvml_sampler *s, const kb_settle_rule *rule);
/* The last reading's SM clock (NaN before the first) and whether the clocks are set by the user:
 * application clocks away from their default, or the APPLICATIONS_CLOCKS event reason (also
 * raised for clocks locked with nvidia-smi -lgc) in the last reading while not idle. */
double kb_nvml_sampler_last_sm(kb_nvml_sampler *s);
int kb_nvml_sampler_clocks_locked(kb_nvml_sampler *s);
/* Stop, join and free without Python (error paths). NULL is a no-op. */
void kb_nvml_sampler_abort(kb_nvml_sampler *s);


/* kb_gpu_module_init (cuda_device.c) and kb_gpu_state_free (loader_common.c) are declared in
 * kbench.h. kb_gpu_state_free: nvmlShutdown if initialized, dlclose NVML and NVRTC, free the
 * state; libcuda and libcupti stay mapped (unloading either while the driver or a profiler holds
 * hooks into it crashes at exit). */

#endif /* KBENCH_LOADER_H */
