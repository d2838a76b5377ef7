/* loader_cuda.c -- libcuda.so.1, the CUDA driver API.
 *
 * Only cuGetProcAddress_v2 is taken with dlsym; every other function is resolved through it by
 * its base name at cudaVersion = min(CUDA_VERSION, driver version). That yields the ABI the
 * prototype in this build's cuda.h has (cuMemAlloc -> cuMemAlloc_v2, cuStreamGetCaptureInfo ->
 * _v3, ...) rather than whatever version a plain dlsym of the base name happens to return.
 */
#define _GNU_SOURCE
#include "loader_impl.h"
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CUDA_LIB "libcuda.so.1"

/* cuGetProcAddress refuses a cudaVersion newer than the driver; every driver that has
 * cuGetProcAddress_v2 serves 12.0, so the version query itself is looked up at 12.0. */
#define KB_CUDA_BOOTSTRAP_VERSION 12000

static const char *const cuda_dirs[] = {
    KB_MULTIARCH_LIBDIR, "/usr/lib64", "/usr/lib", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib",
};

typedef __typeof__(&cuGetProcAddress) get_proc_fn;

/* The pre-13.0 ABIs that KB_CUDA_REQUIRED_PRE13 looks up (loader.h). */
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuCtxSynchronize),
                                            PFN_cuCtxSynchronize_v2000),
               "cuda.h's cuCtxSynchronize is not the pre-13.0 ABI: revisit KB_CUDA_REQUIRED_PRE13");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuCtxGetDevice),
                                            PFN_cuCtxGetDevice_v2000),
               "cuda.h's cuCtxGetDevice is not the pre-13.0 ABI: revisit KB_CUDA_REQUIRED_PRE13");

/* Resolve one driver function into *slot (NULL when unavailable); a required one that is
 * unavailable is added to `missing` with the reason. */
static void resolve_one(get_proc_fn get_proc, const char *name, int lookup_version,
                        int abi_since, int required, void *slot, kb_strbuf *missing)
{
    void *fn = NULL;
    char reason[96];
    reason[0] = '\0';
    if (abi_since > lookup_version) {
        snprintf(reason, sizeof reason, "this build needs a driver for CUDA %d.%d for it",
                 abi_since / 1000, abi_since % 1000 / 10);
    } else {
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = get_proc(name, &fn, lookup_version, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                              &status);
        if (r != CUDA_SUCCESS) {
            fn = NULL;
            snprintf(reason, sizeof reason, "cuGetProcAddress returned CUresult %d", (int)r);
        } else if (fn == NULL) {
            snprintf(reason, sizeof reason, "%s",
                     status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                         ? "not available at this CUDA version"
                         : "symbol not found");
        }
    }
    memcpy(slot, &fn, sizeof fn);
    if (fn == NULL && required)
        kb_sb_printf(missing, "%s%s (%s)", missing->len ? ", " : "", name, reason);
}

/* Fill g->cuda from the opened handle h. 0, or -1 with the reason in msg. */
static int cuda_resolve(kb_gpu_libs *g, void *h, const char *path, kb_strbuf *msg)
{
    kb_cuda_api *api = &g->cuda;
    kb_strbuf missing = {0};
    void *fn;
    CUdriverProcAddressQueryResult status;
    CUresult r;
    int driver = 0;

    dlerror();
    fn = dlsym(h, "cuGetProcAddress_v2");
    if (fn == NULL) {
        kb_sb_printf(msg,
                     "%s has no cuGetProcAddress_v2: this NVIDIA driver predates CUDA 12.0. "
                     "kbench needs a driver for CUDA 12.0 or newer (%d.%d, the version it was "
                     "built with, for every feature); update the NVIDIA driver.",
                     path, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        return -1;
    }
    memcpy(&api->cuGetProcAddress, &fn, sizeof fn);

    fn = NULL;
    r = api->cuGetProcAddress("cuDriverGetVersion", &fn, KB_CUDA_BOOTSTRAP_VERSION,
                              CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    if (r != CUDA_SUCCESS || fn == NULL) {
        kb_sb_printf(msg, "%s: cuGetProcAddress(\"cuDriverGetVersion\") failed (CUresult %d); "
                     "the NVIDIA driver installation looks broken.", path, (int)r);
        return -1;
    }
    memcpy(&api->cuDriverGetVersion, &fn, sizeof fn);
    r = api->cuDriverGetVersion(&driver);
    if (r != CUDA_SUCCESS) {
        kb_sb_printf(msg, "%s: cuDriverGetVersion failed (CUresult %d); the NVIDIA driver "
                     "installation looks broken.", path, (int)r);
        return -1;
    }
    g->cuda_driver_version = driver;
    g->cuda_lookup_version = driver < CUDA_VERSION ? driver : CUDA_VERSION;

    /* #name is the base name as written in the list (stringized before cuda.h's renaming
     * macros apply); api->name is the renamed field, typed from the renamed prototype. */
#define KB_RESOLVE_REQUIRED_(name, abi_since)                                                 \
    resolve_one(api->cuGetProcAddress, #name, g->cuda_lookup_version, abi_since, 1,           \
                &api->name, &missing);
#define KB_RESOLVE_OPTIONAL_(name, abi_since)                                                 \
    resolve_one(api->cuGetProcAddress, #name, g->cuda_lookup_version, abi_since, 0,           \
                &api->name, &missing);
    KB_CUDA_REQUIRED(KB_RESOLVE_REQUIRED_)
    KB_CUDA_OPTIONAL(KB_RESOLVE_OPTIONAL_)
#define KB_RESOLVE_PRE13_(name, abi_since)                                                    \
    resolve_one(api->cuGetProcAddress, #name,                                                 \
                g->cuda_lookup_version < KB_CUDA_PRE13_LOOKUP ? g->cuda_lookup_version        \
                                                              : KB_CUDA_PRE13_LOOKUP,         \
                abi_since, 1, &api->name, &missing);
    KB_CUDA_REQUIRED_PRE13(KB_RESOLVE_PRE13_)
#undef KB_RESOLVE_PRE13_
#undef KB_RESOLVE_REQUIRED_
#undef KB_RESOLVE_OPTIONAL_

    if (missing.len > 0 || missing.oom) {
        kb_sb_printf(msg,
                     "%s (driver for CUDA %d.%d) lacks functions kbench needs: %s. Update the "
                     "NVIDIA driver (kbench was built against CUDA %d.%d headers).",
                     path, driver / 1000, driver % 1000 / 10,
                     missing.s ? missing.s : "(out of memory listing them)",
                     CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        kb_sb_free(&missing);
        return -1;
    }
    kb_sb_free(&missing);
    return 0;
}

/* Open libcuda and fill the table; the outcome is recorded in g->cuda_lib. */
static void cuda_open(kb_gpu_libs *g)
{
    kb_strbuf tried = {0}, msg = {0};
    void *h = kb_try_dlopen(CUDA_LIB, KB_DLOPEN_FLAGS, &tried);
    if (h == NULL)
        h = kb_try_dirs(cuda_dirs, sizeof cuda_dirs / sizeof cuda_dirs[0], CUDA_LIB,
                        KB_DLOPEN_FLAGS, &tried);
    if (h == NULL) {
        kb_sb_printf(&msg,
                     CUDA_LIB " (the NVIDIA driver's CUDA library) could not be opened. Tried:\n"
                     "%s"
                     KB_DRIVER_FIX,
                     tried.s ? tried.s : "  (out of memory recording the attempts)\n");
        kb_sb_free(&tried);
        kb_lib_failed(&g->cuda_lib, &msg);
        return;
    }
    kb_sb_free(&tried);

    const char *path = kb_handle_path(h);
    if (cuda_resolve(g, h, path ? path : CUDA_LIB, &msg) < 0) {
        memset(&g->cuda, 0, sizeof g->cuda);
        kb_lib_failed(&g->cuda_lib, &msg);
        g->cuda_lib.handle = h;        /* never dlclose'd: unloading the driver is not safe */
        return;
    }
    kb_lib_loaded(&g->cuda_lib, h, CUDA_LIB);
}

const kb_cuda_api *kb_cuda(PyObject *m)
{
    kb_gpu_libs *g = kb_gpu_libs_get(m);
    CUresult r;
    if (g == NULL)
        return NULL;
    if (g->cuda_initialized)
        return &g->cuda;
    if (g->cuda_lib.state == KB_LIB_UNTRIED)
        cuda_open(g);
    if (g->cuda_lib.state != KB_LIB_LOADED)
        return kb_lib_raise(m, &g->cuda_lib);

    /* cuInit can take seconds on a many-GPU host; concurrent callers just call it too */
    Py_BEGIN_ALLOW_THREADS
    r = g->cuda.cuInit(0);
    Py_END_ALLOW_THREADS
    g->cuda_init_result = r;
    if (kb_cu_check(m, r, "cuInit(0)", __FILE__, __LINE__) < 0)
        return NULL;
    g->cuda_initialized = 1;
    return &g->cuda;
}

int kb_cu_check(PyObject *m, CUresult r, const char *expr, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return 0;
    kb_state *st = kb_get_state(m);
    const kb_gpu_libs *g = st->gpu;
    const char *name = NULL, *desc = NULL;
    char fallback[48];
    /* The table may be empty (libcuda failed to load): then only the number is known. */
    if (g != NULL && g->cuda.cuGetErrorName != NULL &&
        g->cuda.cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (g != NULL && g->cuda.cuGetErrorString != NULL &&
        g->cuda.cuGetErrorString(r, &desc) != CUDA_SUCCESS)
        desc = NULL;
    if (name == NULL) {
        snprintf(fallback, sizeof fallback, "CUDA error %d", (int)r);
        name = fallback;
    }
    return kb_raise_call_error(st->CudaError, expr, (long)r, name, desc, file, line);
}
