/* loader_cupti.c -- libcupti, NVIDIA's profiling interface (kernel start/end timestamps).
 *
 * Two CUPTI copies in one process fight over the driver's profiling hooks, and PyTorch (kineto)
 * loads its own. So the copy already mapped in the process wins; only without one do we look at
 * $KBENCH_CUPTI_PATH (the user's choice, read here and nowhere else), then the file the caller
 * prefers (kb_cupti_prefer: kbench.backends.cuda hands over the copy PyTorch ships, so that a
 * later torch.profiler maps the same file), then the default search path and the CUDA toolkit
 * directories.
 */
#define _GNU_SOURCE
#include "loader_impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CUPTI_FIX                                                                              \
    "Set KBENCH_CUPTI_PATH to a libcupti.so file or the directory holding it. CUPTI ships with " \
    "the CUDA toolkit (<cuda>/lib64 or <cuda>/extras/CUPTI/lib64) and in the nvidia-cuda-cupti " \
    "pip package (nvidia-cuda-cupti-cu12 for CUDA 12); importing torch first also works (kbench " \
    "then shares torch's copy)."

/* Open the file or directory named by $KBENCH_CUPTI_PATH. */
static void *open_env_path(const char *env, kb_strbuf *tried)
{
    struct stat sb;
    if (stat(env, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char soname[32];
        snprintf(soname, sizeof soname, "libcupti.so.%d", CUDA_VERSION / 1000);
        const char *dirs[] = {env};
        void *h = kb_try_dirs(dirs, 1, soname, KB_DLOPEN_FLAGS, tried);
        if (h == NULL)
            h = kb_try_dirs(dirs, 1, "libcupti.so", KB_DLOPEN_FLAGS, tried);
        return h;
    }
    return kb_try_dlopen(env, KB_DLOPEN_FLAGS, tried);
}

static void *open_default(kb_strbuf *tried)
{
    char soname[32];
    snprintf(soname, sizeof soname, "libcupti.so.%d", CUDA_VERSION / 1000);
    void *h = kb_try_dlopen(soname, KB_DLOPEN_FLAGS, tried);
    if (h == NULL)
        h = kb_try_dlopen("libcupti.so", KB_DLOPEN_FLAGS, tried);
    if (h != NULL)
        return h;

    char home_lib[4096] = "", home_extras[4096] = "";
    const char *home = getenv("CUDA_HOME");
    if (home != NULL && home[0] != '\0') {
        snprintf(home_lib, sizeof home_lib, "%s/lib64", home);
        snprintf(home_extras, sizeof home_extras, "%s/extras/CUPTI/lib64", home);
    }
    const char *dirs[] = {home_lib, home_extras, "/usr/local/cuda/lib64",
                          "/usr/local/cuda/extras/CUPTI/lib64"};
    const size_t ndirs = sizeof dirs / sizeof dirs[0];
    h = kb_try_dirs(dirs, ndirs, soname, KB_DLOPEN_FLAGS, tried);
    if (h == NULL)
        h = kb_try_dirs(dirs, ndirs, "libcupti.so", KB_DLOPEN_FLAGS, tried);
    return h;
}

static int cupti_resolve(kb_gpu_libs *g, void *h, const char *path, kb_strbuf *msg)
{
    kb_cupti_api *api = &g->cupti;
    kb_strbuf missing = {0};
    KB_CUPTI_REQUIRED(KB_DLSYM_REQUIRED_)
    KB_CUPTI_OPTIONAL(KB_DLSYM_OPTIONAL_)
    if (missing.len > 0 || missing.oom) {
        kb_sb_printf(msg, "%s lacks CUPTI functions kbench needs: %s. It is too old or not "
                     "CUPTI; " CUPTI_FIX, path,
                     missing.s ? missing.s : "(out of memory listing them)");
        kb_sb_free(&missing);
        return -1;
    }
    kb_sb_free(&missing);
    uint32_t version = 0;
    if (api->cuptiGetVersion(&version) == CUPTI_SUCCESS)
        g->cupti_version = version;
    return 0;
}

static void cupti_open(kb_gpu_libs *g)
{
    kb_strbuf tried = {0}, msg = {0};
    char loaded[4096];
    void *h = NULL;
    int from_process = 0;
    const char *env = getenv("KBENCH_CUPTI_PATH");

    if (kb_find_loaded("libcupti", loaded, sizeof loaded)) {
        h = kb_try_dlopen(loaded, RTLD_NOLOAD | RTLD_NOW, &tried);
        from_process = h != NULL;
    }
    if (h == NULL && env != NULL && env[0] != '\0') {
        /* an explicit choice: do not fall back to some other copy behind the user's back */
        h = open_env_path(env, &tried);
        if (h == NULL) {
            kb_sb_printf(&msg,
                         "libcupti could not be opened from KBENCH_CUPTI_PATH=%s. Tried:\n%s"
                         "Point KBENCH_CUPTI_PATH at an existing libcupti.so (file or "
                         "directory), or unset it to search the default places.",
                         env, tried.s ? tried.s : "  (out of memory recording the attempts)\n");
            goto fail;
        }
    }
    if (h == NULL && g->cupti_preferred != NULL)
        h = kb_try_dlopen(g->cupti_preferred, KB_DLOPEN_FLAGS, &tried);   /* else: default */
    if (h == NULL)
        h = open_default(&tried);
    if (h == NULL) {
        kb_sb_printf(&msg,
                     "libcupti (NVIDIA CUPTI, needed for kernel timestamps) could not be opened "
                     "(no copy is loaded in this process and KBENCH_CUPTI_PATH is not set). "
                     "Tried:\n%s" CUPTI_FIX,
                     tried.s ? tried.s : "  (out of memory recording the attempts)\n");
        goto fail;
    }
    kb_sb_free(&tried);

    const char *path = kb_handle_path(h);
    if (cupti_resolve(g, h, path ? path : "libcupti", &msg) < 0) {
        dlclose(h);                     /* nothing was enabled through it yet */
        memset(&g->cupti, 0, sizeof g->cupti);
        kb_lib_failed(&g->cupti_lib, &msg);
        return;
    }
    kb_lib_loaded(&g->cupti_lib, h, "libcupti.so");
    g->cupti_lib.from_process = from_process;
    return;

fail:
    kb_sb_free(&tried);
    kb_lib_failed(&g->cupti_lib, &msg);
}

int kb_cupti_prefer(PyObject *m, const char *path)
{
    kb_gpu_libs *g = kb_gpu_libs_get(m);
    if (g == NULL)
        return -1;
    if (g->cupti_lib.state != KB_LIB_UNTRIED)
        return 0;                       /* the process's CUPTI is chosen once */
    char *copy = NULL;
    if (path != NULL && (copy = strdup(path)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    free(g->cupti_preferred);
    g->cupti_preferred = copy;
    return 1;
}

const kb_cupti_api *kb_cupti(PyObject *m)
{
    kb_gpu_libs *g = kb_gpu_libs_get(m);
    if (g == NULL)
        return NULL;
    if (g->cupti_lib.state == KB_LIB_UNTRIED)
        cupti_open(g);
    if (g->cupti_lib.state != KB_LIB_LOADED)
        return kb_lib_raise(m, &g->cupti_lib);
    return &g->cupti;
}

int kb_cupti_check(PyObject *m, CUptiResult r, const char *expr, const char *file, int line)
{
    if (r == CUPTI_SUCCESS)
        return 0;
    kb_state *st = kb_get_state(m);
    const kb_gpu_libs *g = st->gpu;
    const char *name = NULL, *desc = NULL;
    char fallback[48];
    if (g != NULL && g->cupti.cuptiGetResultString != NULL &&
        g->cupti.cuptiGetResultString(r, &name) != CUPTI_SUCCESS)
        name = NULL;
    if (g != NULL && g->cupti.cuptiGetErrorMessage != NULL &&
        g->cupti.cuptiGetErrorMessage(r, &desc) != CUPTI_SUCCESS)
        desc = NULL;
    if (name == NULL) {
        snprintf(fallback, sizeof fallback, "CUPTI error %d", (int)r);
        name = fallback;
    }
    /* another subscriber (torch.profiler, nsys, ncu) owns CUPTI: a distinct, catchable case */
    PyObject *type = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? st->CuptiBusy
                                                                          : st->CuptiError;
    return kb_raise_call_error(type, expr, (long)r, name, desc, file, line);
}
