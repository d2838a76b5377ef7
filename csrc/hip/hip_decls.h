/* hip_decls.h -- the HIP and ROCm SMI declarations kbench uses, written by hand (no HIP header
 * at build time). Only <stddef.h> and <stdint.h>: tests/test_hip_headers.py compiles this file
 * next to the real hip/hip_runtime_api.h and checks every function type and value against it.
 *
 * Handles keep HIP's own struct tags (struct ihipStream_t * ...), so they are the same types
 * as HIP's wherever both are visible. hipError_t and HIP's enums are declared as unsigned int:
 * the underlying type C compilers give those enums (all their values are non-negative), which
 * the test checks too.
 */
#ifndef KBENCH_HIP_DECLS_H
#define KBENCH_HIP_DECLS_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ HIP types and values */

typedef unsigned int kb_hipError_t;
typedef unsigned int kb_hipDeviceAttribute_t;
typedef unsigned int kb_hipStreamCaptureMode;
typedef unsigned int kb_hipStreamCaptureStatus;
typedef int kb_hipDevice_t;
typedef struct ihipStream_t *kb_hipStream_t;
typedef struct ihipEvent_t *kb_hipEvent_t;
typedef struct ihipGraph *kb_hipGraph_t;
typedef struct hipGraphNode *kb_hipGraphNode_t;
typedef struct hipGraphExec *kb_hipGraphExec_t;

enum {
    KB_hipSuccess = 0,
    KB_hipErrorInvalidValue = 1,
    KB_hipErrorOutOfMemory = 2,
    KB_hipErrorNotInitialized = 3,
    KB_hipErrorNoDevice = 100,
    KB_hipErrorInvalidDevice = 101,
    KB_hipErrorNotSupported = 801,
    KB_hipErrorUnknown = 999,
};

/* hipDeviceAttribute_t values (HIP >= 5.0; the AMD-specific ones from 10000). */
enum {
    KB_hipDeviceAttributeClockRate = 5,
    KB_hipDeviceAttributeL2CacheSize = 19,
    KB_hipDeviceAttributeMemoryBusWidth = 59,
    KB_hipDeviceAttributeMemoryClockRate = 60,
    KB_hipDeviceAttributeMultiprocessorCount = 63,
    KB_hipDeviceAttributeCanUseStreamWaitValue = 10013,
};

enum { KB_hipStreamCaptureModeGlobal = 0, KB_hipStreamCaptureModeThreadLocal = 1,
       KB_hipStreamCaptureModeRelaxed = 2 };
enum { KB_hipStreamCaptureStatusNone = 0, KB_hipStreamCaptureStatusActive = 1,
       KB_hipStreamCaptureStatusInvalidated = 2 };
#define KB_hipStreamWaitValueGte 0x0
#define KB_hipHostMallocPortable 0x1
#define KB_hipHostMallocMapped 0x2
#define KB_hipStreamNonBlocking 0x1

/* The function types, one per entry point: X(name, return type, parameter list). */
#define KB_HIP_REQUIRED(X)                                                                     \
    X(hipInit, kb_hipError_t, (unsigned int flags))                                            \
    X(hipGetErrorName, const char *, (kb_hipError_t e))                                        \
    X(hipGetErrorString, const char *, (kb_hipError_t e))                                      \
    X(hipRuntimeGetVersion, kb_hipError_t, (int *v))                                           \
    X(hipDriverGetVersion, kb_hipError_t, (int *v))                                            \
    X(hipGetDeviceCount, kb_hipError_t, (int *n))                                              \
    X(hipSetDevice, kb_hipError_t, (int dev))                                                  \
    X(hipGetDevice, kb_hipError_t, (int *dev))                                                 \
    X(hipDeviceGetAttribute, kb_hipError_t, (int *pi, kb_hipDeviceAttribute_t a, int dev))     \
    X(hipDeviceGetName, kb_hipError_t, (char *name, int len, kb_hipDevice_t dev))              \
    X(hipDeviceTotalMem, kb_hipError_t, (size_t *bytes, kb_hipDevice_t dev))                   \
    X(hipMemGetInfo, kb_hipError_t, (size_t *free_b, size_t *total_b))                         \
    X(hipDeviceSynchronize, kb_hipError_t, (void))                                             \
    X(hipStreamCreateWithFlags, kb_hipError_t, (kb_hipStream_t *s, unsigned int flags))        \
    X(hipStreamDestroy, kb_hipError_t, (kb_hipStream_t s))                                     \
    X(hipStreamSynchronize, kb_hipError_t, (kb_hipStream_t s))                                 \
    X(hipStreamBeginCapture, kb_hipError_t, (kb_hipStream_t s, kb_hipStreamCaptureMode mode))  \
    X(hipStreamEndCapture, kb_hipError_t, (kb_hipStream_t s, kb_hipGraph_t *g))                \
    X(hipStreamIsCapturing, kb_hipError_t, (kb_hipStream_t s, kb_hipStreamCaptureStatus *st))  \
    X(hipGraphInstantiate, kb_hipError_t, (kb_hipGraphExec_t *e, kb_hipGraph_t g,              \
                                           kb_hipGraphNode_t *err_node, char *log, size_t n))  \
    X(hipGraphLaunch, kb_hipError_t, (kb_hipGraphExec_t e, kb_hipStream_t s))                  \
    X(hipGraphExecDestroy, kb_hipError_t, (kb_hipGraphExec_t e))                               \
    X(hipGraphDestroy, kb_hipError_t, (kb_hipGraph_t g))                                       \
    X(hipEventCreate, kb_hipError_t, (kb_hipEvent_t *e))                                       \
    X(hipEventDestroy, kb_hipError_t, (kb_hipEvent_t e))                                       \
    X(hipEventRecord, kb_hipError_t, (kb_hipEvent_t e, kb_hipStream_t s))                      \
    X(hipEventSynchronize, kb_hipError_t, (kb_hipEvent_t e))                                   \
    X(hipEventElapsedTime, kb_hipError_t, (float *ms, kb_hipEvent_t a, kb_hipEvent_t b))       \
    X(hipMalloc, kb_hipError_t, (void **p, size_t n))                                          \
    X(hipFree, kb_hipError_t, (void *p))                                                       \
    X(hipMemsetAsync, kb_hipError_t, (void *p, int v, size_t n, kb_hipStream_t s))

/* Optional: the device gate (a runtime without them times ungated, and says so), and the PCI
 * bus id that finds the device's ROCm SMI index (without it the index is assumed). */
#define KB_HIP_OPTIONAL(X)                                                                     \
    X(hipDeviceGetPCIBusId, kb_hipError_t, (char *bus_id, int len, int dev))                   \
    X(hipHostMalloc, kb_hipError_t, (void **p, size_t n, unsigned int flags))                  \
    X(hipHostFree, kb_hipError_t, (void *p))                                                   \
    X(hipHostGetDevicePointer, kb_hipError_t, (void **dev, void *host, unsigned int flags))    \
    X(hipStreamWaitValue32, kb_hipError_t, (kb_hipStream_t s, void *p, uint32_t v,             \
                                            unsigned int flags, uint32_t mask))

#define KB_HIP_FN_TYPE_(name, ret, params) typedef ret(*kb_##name##_fn) params;
KB_HIP_REQUIRED(KB_HIP_FN_TYPE_)
KB_HIP_OPTIONAL(KB_HIP_FN_TYPE_)
#undef KB_HIP_FN_TYPE_

/* ------------------------------------------------------------------ ROCm SMI */

typedef unsigned int kb_rsmi_status_t;      /* RSMI_STATUS_SUCCESS = 0 */
#define KB_RSMI_CLK_TYPE_SYS 0x0            /* the shader clock (sclk) */
#define KB_RSMI_CLK_TYPE_MEM 0x4
#define KB_RSMI_TEMP_TYPE_EDGE 0
#define KB_RSMI_TEMP_TYPE_JUNCTION 1
#define KB_RSMI_TEMP_CURRENT 0

/* rsmi_frequencies_t changed layout (ROCm 6 put a bool has_deep_sleep first), so the clock
 * query writes into a buffer big enough for either and loader_rocm_smi.c reads whichever layout
 * gives a consistent answer. */
#define KB_RSMI_FREQ_BUF_BYTES 512

#define KB_RSMI_REQUIRED(X)                                                                    \
    X(rsmi_init, kb_rsmi_status_t, (uint64_t flags))                                           \
    X(rsmi_shut_down, kb_rsmi_status_t, (void))                                                \
    X(rsmi_status_string, kb_rsmi_status_t, (kb_rsmi_status_t s, const char **str))           \
    X(rsmi_num_monitor_devices, kb_rsmi_status_t, (uint32_t *n))                               \
    X(rsmi_dev_gpu_clk_freq_get, kb_rsmi_status_t, (uint32_t dv, unsigned int clk, void *f))   \
    X(rsmi_dev_temp_metric_get, kb_rsmi_status_t, (uint32_t dv, uint32_t sensor,              \
                                                   unsigned int metric, int64_t *t))
#define KB_RSMI_OPTIONAL(X)                                                                    \
    X(rsmi_dev_power_ave_get, kb_rsmi_status_t, (uint32_t dv, uint32_t sensor, uint64_t *uw))  \
    X(rsmi_dev_current_socket_power_get, kb_rsmi_status_t, (uint32_t dv, uint64_t *uw))      \
    X(rsmi_dev_pci_id_get, kb_rsmi_status_t, (uint32_t dv, uint64_t *bdfid))

#define KB_RSMI_FN_TYPE_(name, ret, params) typedef ret(*kb_##name##_fn) params;
KB_RSMI_REQUIRED(KB_RSMI_FN_TYPE_)
KB_RSMI_OPTIONAL(KB_RSMI_FN_TYPE_)
#undef KB_RSMI_FN_TYPE_

#endif /* KBENCH_HIP_DECLS_H */
