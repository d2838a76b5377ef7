/* loader_nvrtc.c -- libnvrtc, the runtime CUDA C++ compiler (kbench's own kernels: the gate,
 * the cache flush). Any NVRTC that knows the GPU's architecture will do, so a copy already in the
 * process (torch, cupy) is used first, then the versioned sonames, then $CUDA_HOME, then the pip
 * wheels on sys.path (nvidia-cuda-nvrtc: nvidia/cu13/lib for CUDA 13, nvidia/cuda_nvrtc/lib for
 * CUDA 12), then the directories of CUDA libraries already loaded and the default toolkit. */
#define _GNU_SOURCE
#include "loader_impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const nvrtc_sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
#define N_SONAMES (sizeof nvrtc_sonames / sizeof nvrtc_sonames[0])

static const struct {
    const char *name, *desc;
} nvrtc_errors[] = {
    [NVRTC_SUCCESS] = {"NVRTC_SUCCESS", "success"},
    [NVRTC_ERROR_OUT_OF_MEMORY] = {"NVRTC_ERROR_OUT_OF_MEMORY", "out of memory"},
    [NVRTC_ERROR_PROGRAM_CREATION_FAILURE] = {"NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
                                              "the program could not be created"},
    [NVRTC_ERROR_INVALID_INPUT] = {"NVRTC_ERROR_INVALID_INPUT", "invalid input"},
    [NVRTC_ERROR_INVALID_PROGRAM] = {"NVRTC_ERROR_INVALID_PROGRAM", "invalid program handle"},
    [NVRTC_ERROR_INVALID_OPTION] = {"NVRTC_ERROR_INVALID_OPTION",
                                    "a compile option is not recognized"},
    [NVRTC_ERROR_COMPILATION] = {"NVRTC_ERROR_COMPILATION",
                                 "the source did not compile; see the program log"},
    [NVRTC_ERROR_BUILTIN_OPERATION_FAILURE] = {"NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
                                               "a builtin operation failed"},
    [NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION] =
        {"NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
         "name expressions must be added before compiling"},
    [NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION] =
        {"NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
         "lowered names exist only after compiling"},
    [NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID] = {"NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
                                               "invalid name expression"},
    [NVRTC_ERROR_INTERNAL_ERROR] = {"NVRTC_ERROR_INTERNAL_ERROR", "NVRTC internal error"},
    [NVRTC_ERROR_TIME_FILE_WRITE_FAILED] = {"NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
                                            "the -time file could not be written"},
    [NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED] = {"NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED",
                                             "no precompiled header was attempted"},
    [NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED] = {"NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED",
                                               "precompiled header heap exhausted"},
    [NVRTC_ERROR_PCH_CREATE] = {"NVRTC_ERROR_PCH_CREATE", "precompiled header creation failed"},
    [NVRTC_ERROR_CANCELLED] = {"NVRTC_ERROR_CANCELLED", "compilation cancelled"},
    [NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED] = {"NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED",
                                                  "the time trace file could not be written"},
};
#define N_NVRTC_ERRORS (sizeof nvrtc_errors / sizeof nvrtc_errors[0])

/* Try every soname in dir. */
static void *open_in_dir(const char *dir, kb_strbuf *tried)
{
    const char *dirs[] = {dir};
    for (size_t i = 0; i < N_SONAMES; i++) {
        void *h = kb_try_dirs(dirs, 1, nvrtc_sonames[i], KB_DLOPEN_FLAGS, tried);
        if (h != NULL)
            return h;
    }
    return NULL;
}

/* Where the nvidia-cuda-nvrtc wheels put libnvrtc, under a sys.path entry. */
static const char *const wheel_dirs[] = {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"};
#define N_WHEEL_DIRS (sizeof wheel_dirs / sizeof wheel_dirs[0])

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Try the wheels' directories under each sys.path entry; only those that exist are tried (and
 * listed). Called with the GIL held, as every kb_nvrtc caller is; a sys.path entry that is not
 * a str, or not encodable, is skipped. */
static void *open_in_wheels(kb_strbuf *tried)
{
    PyObject *path = PySys_GetObject("path");            /* borrowed; NULL: no sys.path */
    if (path == NULL || !PyList_Check(path))
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(path); i++) {
        PyObject *entry = PyList_GET_ITEM(path, i);
        const char *base = PyUnicode_Check(entry) ? PyUnicode_AsUTF8(entry) : NULL;
        if (base == NULL) {
            PyErr_Clear();
            continue;
        }
        for (size_t k = 0; k < N_WHEEL_DIRS; k++) {
            char dir[4096];
            int n = snprintf(dir, sizeof dir, "%s%s%s", base, base[0] ? "/" : "", wheel_dirs[k]);
            if (n <= 0 || (size_t)n >= sizeof dir || !is_dir(dir))
                continue;
            void *h = open_in_dir(dir, tried);
            if (h != NULL)
                return h;
        }
    }
    return NULL;
}

/* Try the directory of an already-loaded CUDA library (kb_find_loaded's stem). */
static void *open_beside_loaded(const char *stem, kb_strbuf *tried)
{
    char path[4096];
    if (!kb_find_loaded(stem, path, sizeof path))
        return NULL;
    char *slash = strrchr(path, '/');
    if (slash == NULL)
        return NULL;
    *slash = '\0';
    return open_in_dir(path, tried);
}

static void *nvrtc_search(kb_strbuf *tried, int *from_process)
{
    char path[4096];
    void *h = NULL;
    *from_process = 0;
    if (kb_find_loaded("libnvrtc", path, sizeof path)) {
        h = kb_try_dlopen(path, RTLD_NOLOAD | RTLD_NOW, tried);
        if (h != NULL) {
            *from_process = 1;
            return h;
        }
    }
    for (size_t i = 0; i < N_SONAMES && h == NULL; i++)
        h = kb_try_dlopen(nvrtc_sonames[i], KB_DLOPEN_FLAGS, tried);
    if (h != NULL)
        return h;

    char dir[4096];
    const char *home = getenv("CUDA_HOME");
    if (home != NULL && home[0] != '\0') {
        snprintf(dir, sizeof dir, "%s/lib64", home);
        if ((h = open_in_dir(dir, tried)) != NULL)
            return h;
    }
    if ((h = open_in_wheels(tried)) != NULL)
        return h;
    if ((h = open_beside_loaded("libcudart", tried)) != NULL)
        return h;
    if ((h = open_beside_loaded("libcupti", tried)) != NULL)
        return h;
    return open_in_dir("/usr/local/cuda/lib64", tried);
}

static int nvrtc_resolve(kb_gpu_libs *g, void *h, const char *path, kb_strbuf *msg)
{
    kb_nvrtc_api *api = &g->nvrtc;
    kb_strbuf missing = {0};
    KB_NVRTC_REQUIRED(KB_DLSYM_REQUIRED_)
    KB_NVRTC_OPTIONAL(KB_DLSYM_OPTIONAL_)
    if (missing.len > 0 || missing.oom) {
        kb_sb_printf(msg, "%s lacks NVRTC functions kbench needs: %s. Install NVRTC from CUDA "
                     "12 or newer.", path, missing.s ? missing.s : "(out of memory listing them)");
        kb_sb_free(&missing);
        return -1;
    }
    kb_sb_free(&missing);
    int major = 0, minor = 0;
    if (api->nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) {
        g->nvrtc_major = major;
        g->nvrtc_minor = minor;
    }
    return 0;
}

static void nvrtc_open(kb_gpu_libs *g)
{
    kb_strbuf tried = {0}, msg = {0};
    int from_process = 0;
    void *h = nvrtc_search(&tried, &from_process);
    if (h == NULL) {
        kb_sb_printf(&msg,
                     "libnvrtc (NVIDIA's runtime CUDA compiler, needed to build kbench's own "
                     "kernels) could not be opened. Tried:\n%s"
                     "Install the CUDA toolkit's NVRTC (e.g. the cuda-nvrtc package) or the "
                     "nvidia-cuda-nvrtc pip package into this Python (nvidia-cuda-nvrtc-cu12 for "
                     "CUDA 12; kbench looks in nvidia/cu13/lib and nvidia/cuda_nvrtc/lib under "
                     "each sys.path entry), set CUDA_HOME to a toolkit holding "
                     "lib64/libnvrtc.so, or import torch first.",
                     tried.s ? tried.s : "  (out of memory recording the attempts)\n");
        kb_sb_free(&tried);
        kb_lib_failed(&g->nvrtc_lib, &msg);
        return;
    }
    kb_sb_free(&tried);
    const char *path = kb_handle_path(h);
    if (nvrtc_resolve(g, h, path ? path : "libnvrtc.so", &msg) < 0) {
        dlclose(h);
        memset(&g->nvrtc, 0, sizeof g->nvrtc);
        kb_lib_failed(&g->nvrtc_lib, &msg);
        return;
    }
    kb_lib_loaded(&g->nvrtc_lib, h, "libnvrtc.so");
    g->nvrtc_lib.from_process = from_process;
}

const kb_nvrtc_api *kb_nvrtc(PyObject *m)
{
    kb_gpu_libs *g = kb_gpu_libs_get(m);
    if (g == NULL)
        return NULL;
    if (g->nvrtc_lib.state == KB_LIB_UNTRIED)
        nvrtc_open(g);
    if (g->nvrtc_lib.state != KB_LIB_LOADED)
        return kb_lib_raise(m, &g->nvrtc_lib);
    return &g->nvrtc;
}

int kb_nvrtc_check(PyObject *m, nvrtcResult r, const char *expr, const char *file, int line)
{
    if (r == NVRTC_SUCCESS)
        return 0;
    kb_state *st = kb_get_state(m);
    const kb_gpu_libs *g = st->gpu;
    const char *name = NULL, *desc = NULL;
    char fallback[48];
    if ((size_t)r < N_NVRTC_ERRORS && nvrtc_errors[r].name != NULL) {
        name = nvrtc_errors[r].name;
        desc = nvrtc_errors[r].desc;
    } else if (g != NULL && g->nvrtc.nvrtcGetErrorString != NULL) {
        name = g->nvrtc.nvrtcGetErrorString(r);   /* a code newer than this table */
    }
    if (name == NULL || strstr(name, "unknown") != NULL) {   /* NVRTC says "NVRTC_ERROR unknown" */
        snprintf(fallback, sizeof fallback, "NVRTC error %d", (int)r);
        name = fallback;
    }
    return kb_raise_call_error(st->NvrtcError, expr, (long)r, name, desc, file, line);
}
