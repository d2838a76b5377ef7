/* loader_nvml.c -- libnvidia-ml.so.1, the NVIDIA management library (clocks, power, temperature,
 * clock event reasons). It comes with the driver, like libcuda. */
#define _GNU_SOURCE
#include "loader_impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define NVML_LIB "libnvidia-ml.so.1"

static const char *const nvml_dirs[] = {
    "/usr/lib", KB_MULTIARCH_LIBDIR, "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib",
};

static const char *const nvml_error_names[] = {
    [NVML_SUCCESS] = "NVML_SUCCESS",
    [NVML_ERROR_UNINITIALIZED] = "NVML_ERROR_UNINITIALIZED",
    [NVML_ERROR_INVALID_ARGUMENT] = "NVML_ERROR_INVALID_ARGUMENT",
    [NVML_ERROR_NOT_SUPPORTED] = "NVML_ERROR_NOT_SUPPORTED",
    [NVML_ERROR_NO_PERMISSION] = "NVML_ERROR_NO_PERMISSION",
    [NVML_ERROR_ALREADY_INITIALIZED] = "NVML_ERROR_ALREADY_INITIALIZED",
    [NVML_ERROR_NOT_FOUND] = "NVML_ERROR_NOT_FOUND",
    [NVML_ERROR_INSUFFICIENT_SIZE] = "NVML_ERROR_INSUFFICIENT_SIZE",
    [NVML_ERROR_INSUFFICIENT_POWER] = "NVML_ERROR_INSUFFICIENT_POWER",
    [NVML_ERROR_DRIVER_NOT_LOADED] = "NVML_ERROR_DRIVER_NOT_LOADED",
    [NVML_ERROR_TIMEOUT] = "NVML_ERROR_TIMEOUT",
    [NVML_ERROR_IRQ_ISSUE] = "NVML_ERROR_IRQ_ISSUE",
    [NVML_ERROR_LIBRARY_NOT_FOUND] = "NVML_ERROR_LIBRARY_NOT_FOUND",
    [NVML_ERROR_FUNCTION_NOT_FOUND] = "NVML_ERROR_FUNCTION_NOT_FOUND",
    [NVML_ERROR_CORRUPTED_INFOROM] = "NVML_ERROR_CORRUPTED_INFOROM",
    [NVML_ERROR_GPU_IS_LOST] = "NVML_ERROR_GPU_IS_LOST",
    [NVML_ERROR_RESET_REQUIRED] = "NVML_ERROR_RESET_REQUIRED",
    [NVML_ERROR_OPERATING_SYSTEM] = "NVML_ERROR_OPERATING_SYSTEM",
    [NVML_ERROR_LIB_RM_VERSION_MISMATCH] = "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    [NVML_ERROR_IN_USE] = "NVML_ERROR_IN_USE",
    [NVML_ERROR_MEMORY] = "NVML_ERROR_MEMORY",
    [NVML_ERROR_NO_DATA] = "NVML_ERROR_NO_DATA",
    [NVML_ERROR_VGPU_ECC_NOT_SUPPORTED] = "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
    [NVML_ERROR_INSUFFICIENT_RESOURCES] = "NVML_ERROR_INSUFFICIENT_RESOURCES",
    [NVML_ERROR_FREQ_NOT_SUPPORTED] = "NVML_ERROR_FREQ_NOT_SUPPORTED",
    [NVML_ERROR_ARGUMENT_VERSION_MISMATCH] = "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    [NVML_ERROR_DEPRECATED] = "NVML_ERROR_DEPRECATED",
    [NVML_ERROR_NOT_READY] = "NVML_ERROR_NOT_READY",
    [NVML_ERROR_GPU_NOT_FOUND] = "NVML_ERROR_GPU_NOT_FOUND",
    [NVML_ERROR_INVALID_STATE] = "NVML_ERROR_INVALID_STATE",
    [NVML_ERROR_RESET_TYPE_NOT_SUPPORTED] = "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
};

const char *kb_nvml_error_name(int code)
{
    if (code == NVML_ERROR_UNKNOWN)
        return "NVML_ERROR_UNKNOWN";
    if (code >= 0 && (size_t)code < sizeof nvml_error_names / sizeof nvml_error_names[0])
        return nvml_error_names[code];
    return NULL;
}

static int nvml_resolve(kb_gpu_libs *g, void *h, const char *path, kb_strbuf *msg)
{
    kb_nvml_api *api = &g->nvml;
    kb_strbuf missing = {0};
    KB_NVML_REQUIRED(KB_DLSYM_REQUIRED_)
    KB_NVML_OPTIONAL(KB_DLSYM_OPTIONAL_)
    /* the event-reasons name arrived with driver 535; older drivers only have the old name */
    if (api->nvmlDeviceGetCurrentClocksEventReasons == NULL)
        api->nvmlDeviceGetCurrentClocksEventReasons =
            api->nvmlDeviceGetCurrentClocksThrottleReasons;
    if (api->nvmlDeviceGetCurrentClocksEventReasons == NULL)
        kb_sb_printf(&missing, "%snvmlDeviceGetCurrentClocksEventReasons (or "
                     "nvmlDeviceGetCurrentClocksThrottleReasons)", missing.len ? ", " : "");
    if (missing.len > 0 || missing.oom) {
        kb_sb_printf(msg, "%s lacks NVML functions kbench needs: %s. Update the NVIDIA driver.",
                     path, missing.s ? missing.s : "(out of memory listing them)");
        kb_sb_free(&missing);
        return -1;
    }
    kb_sb_free(&missing);
    return 0;
}

static void nvml_open(kb_gpu_libs *g)
{
    kb_strbuf tried = {0}, msg = {0};
    void *h = kb_try_dlopen(NVML_LIB, KB_DLOPEN_FLAGS, &tried);
    if (h == NULL)
        h = kb_try_dirs(nvml_dirs, sizeof nvml_dirs / sizeof nvml_dirs[0], NVML_LIB,
                        KB_DLOPEN_FLAGS, &tried);
    if (h == NULL) {
        kb_sb_printf(&msg,
                     NVML_LIB " (the NVIDIA management library: clocks, power, temperature) "
                     "could not be opened. Tried:\n%s"
                     KB_DRIVER_FIX,
                     tried.s ? tried.s : "  (out of memory recording the attempts)\n");
        kb_sb_free(&tried);
        kb_lib_failed(&g->nvml_lib, &msg);
        return;
    }
    kb_sb_free(&tried);
    const char *path = kb_handle_path(h);
    if (nvml_resolve(g, h, path ? path : NVML_LIB, &msg) < 0) {
        dlclose(h);
        memset(&g->nvml, 0, sizeof g->nvml);
        kb_lib_failed(&g->nvml_lib, &msg);
        return;
    }
    kb_lib_loaded(&g->nvml_lib, h, NVML_LIB);
}

const kb_nvml_api *kb_nvml(PyObject *m)
{
    kb_gpu_libs *g = kb_gpu_libs_get(m);
    nvmlReturn_t r;
    if (g == NULL)
        return NULL;
    if (g->nvml_initialized)
        return &g->nvml;
    if (g->nvml_lib.state == KB_LIB_UNTRIED)
        nvml_open(g);
    if (g->nvml_lib.state != KB_LIB_LOADED)
        return kb_lib_raise(m, &g->nvml_lib);

    Py_BEGIN_ALLOW_THREADS
    r = g->nvml.nvmlInit_v2();
    Py_END_ALLOW_THREADS
    if (kb_nvml_check(m, r, "nvmlInit_v2()", __FILE__, __LINE__) < 0)
        return NULL;
    if (g->nvml_initialized)            /* another thread got there while the GIL was free */
        g->nvml.nvmlShutdown();         /* NVML counts inits: keep exactly one */
    g->nvml_initialized = 1;
    return &g->nvml;
}

int kb_nvml_check(PyObject *m, nvmlReturn_t r, const char *expr, const char *file, int line)
{
    if (r == NVML_SUCCESS)
        return 0;
    kb_state *st = kb_get_state(m);
    const kb_gpu_libs *g = st->gpu;
    const char *name = kb_nvml_error_name((int)r);
    const char *desc = NULL;
    char fallback[48];
    if (g != NULL && g->nvml.nvmlErrorString != NULL)
        desc = g->nvml.nvmlErrorString(r);
    if (name == NULL) {
        snprintf(fallback, sizeof fallback, "NVML error %d", (int)r);
        name = fallback;
    }
    return kb_raise_call_error(st->NvmlError, expr, (long)r, name, desc, file, line);
}
