/* hip_api.h -- the HIP runtime (libamdhip64) and ROCm SMI (librocm_smi64) as kbench uses them.
 *
 * No HIP or ROCm header is needed to build: the few types, values and prototypes kbench uses
 * are declared in hip_decls.h, under kb_-prefixed names, so that a test can include that file
 * next to the real hip/hip_runtime_api.h and check, with _Static_assert, that every function
 * type is compatible with the real prototype and every value matches
 * (tests/test_hip_headers.py; it needs Debian's libamdhip64-dev and skips without it).
 *
 * The libraries are opened lazily (csrc/loaders/loader_hip.c, loader_rocm_smi.c): importing
 * kbench._core maps neither. KBENCH_HIP_LIBRARY=/path/to/lib.so (test-only) makes the HIP loader
 * open that file instead, e.g. the HIP-on-CUDA forwarder in tests/hip_forward/.
 */
#ifndef KBENCH_HIP_API_H
#define KBENCH_HIP_API_H

#include "kbench.h"
#include "loader.h"     /* kb_lib, kb_deferred */

#include "hip_decls.h"

#define KB_HIP_FIELD_(name, ret, params) kb_##name##_fn name;
typedef struct {
    KB_HIP_REQUIRED(KB_HIP_FIELD_)
    KB_HIP_OPTIONAL(KB_HIP_FIELD_)
} kb_hip_api;

typedef struct {
    KB_RSMI_REQUIRED(KB_HIP_FIELD_)
    KB_RSMI_OPTIONAL(KB_HIP_FIELD_)
} kb_rsmi_api;

/* ------------------------------------------------------------------ library state */

struct kb_hip_libs {
    kb_lib hip_lib, rsmi_lib;
    kb_hip_api hip;             /* valid when hip_lib.state == KB_LIB_LOADED */
    kb_rsmi_api rsmi;
    int hip_initialized;        /* hipInit(0) succeeded */
    kb_hipError_t hip_init_result;
    int runtime_version;        /* hipRuntimeGetVersion */
    int rsmi_initialized;       /* rsmi_init succeeded; rsmi_shut_down at module free */
    char hip_requested[32];     /* "KBENCH_HIP_LIBRARY" when that setting chose the file */
};
typedef struct kb_hip_libs kb_hip_libs;

/* Open libamdhip64 on first use (the copy already in the process first: PyTorch-ROCm's), fill
 * the table and run hipInit(0). NULL with LibraryNotFound (paths tried, or the missing symbols
 * named) or HipError (hipInit failed: hipErrorNoDevice when there is no AMD GPU). */
const kb_hip_api *kb_hip(PyObject *m);
/* librocm_smi64, rsmi_init(0) once. NULL with LibraryNotFound or RocmSmiError. */
const kb_rsmi_api *kb_rsmi(PyObject *m);
kb_hip_libs *kb_hip_libs_get(PyObject *m);      /* MemoryError */
void kb_hip_state_free(kb_state *st);           /* module free */

/* 0 when r is hipSuccess, else HipError "<expr> failed: <hipErrorName> (<string>) [file:line]"
 * with .call, .code, .name, and -1. */
int kb_hip_check(PyObject *m, kb_hipError_t r, const char *expr, const char *file, int line);
int kb_rsmi_check(PyObject *m, kb_rsmi_status_t r, const char *expr, const char *file, int line);
#define KB_HIP(m, expr) kb_hip_check((m), (expr), #expr, __FILE__, __LINE__)
#define KB_RSMI(m, expr) kb_rsmi_check((m), (expr), #expr, __FILE__, __LINE__)
#define KB_HIP_RAISE(m, d)                                                                     \
    ((d)->code == 0 ? 0 : kb_hip_check((m), (kb_hipError_t)(d)->code, (d)->expr, (d)->file,    \
                                       (d)->line))

/* The status of both libraries for gpu_library_status-like reports: {"hip": {...},
 * "rocm_smi": {...}} with state, path, error. Opens nothing. */
PyObject *kb_hip_library_status(PyObject *m);
/* Open ROCm SMI and read device `index`: {"sclk_mhz", "mclk_mhz", "power_w", "temp_c",
 * "pci_bus_id"}, each None when its read failed, with "index" and "devices" (the count). NULL
 * with an exception when the library cannot be used. */
PyObject *kb_rsmi_snapshot(PyObject *m, uint32_t index);

/* ------------------------------------------------------------------ module parts */
int kb_hip_device_module_init(PyObject *m);     /* hip_device.c */
int kb_hip_graph_module_init(PyObject *m);      /* hip_graph.c */
int kb_measure_hip_module_init(PyObject *m);    /* measure_hip.c */

/* hip_graph.c: the HipGraph object, for measure_hip.c. */
int kb_hip_graph_unpack(PyObject *m, PyObject *obj, kb_hipGraphExec_t *exec, int *device);

/* hip_device.c: make `ordinal` the calling thread's device (ValueError when out of range);
 * *prev (may be NULL) gets the device that was current, for kb_hip_restore_device: a ROCm
 * torch shares this runtime and its current device must not move under it. */
int kb_hip_use_device(PyObject *m, const kb_hip_api *hip, int ordinal, int *prev);
/* Make `prev` current again (prev < 0: nothing to do); a failure is ignored (no exception). */
void kb_hip_restore_device(const kb_hip_api *hip, int prev);
/* hip_options.c: a device argument of `func` (measure_hip, hip_graph_capture,
 * hip_device_info): an int, not a bool, in 0..KB_HIP_MAX_DEVICE (CUDA's range), else TypeError
 * or ValueError naming func and device: a value past int is refused, never truncated. */
#define KB_HIP_MAX_DEVICE KB_MAX_DEVICE     /* the option schema's (kb_schema.h) */
int kb_hip_device_arg(PyObject *v, const char *func, int *out);

#endif /* KBENCH_HIP_API_H */
