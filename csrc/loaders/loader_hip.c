/* loader_hip.c -- libamdhip64, the HIP runtime (AMD ROCm), opened lazily.
 *
 * Order: KBENCH_HIP_LIBRARY when set (a test-only setting: exactly that file, e.g. the
 * HIP-on-CUDA forwarder of tests/hip_forward/, and nothing else); else the copy already mapped
 * in the process (RTLD_NOLOAD: PyTorch-ROCm's, so kbench and torch share one runtime, one set
 * of streams and one device context); else the usual names and ROCm's directories.
 */
#define _GNU_SOURCE
#include "loader_impl.h"
#include "hip_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIP_STEM "libamdhip64"
#define HIP_ENV "KBENCH_HIP_LIBRARY"

static const char *const hip_names[] = {
    "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5",
};

kb_hip_libs *kb_hip_libs_get(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    if (st->hip == NULL) {
        st->hip = calloc(1, sizeof *st->hip);
        if (st->hip == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    return st->hip;
}

static void free_lib(kb_lib *lib)
{
    free(lib->path);
    free(lib->error);
    lib->path = lib->error = NULL;
    lib->state = KB_LIB_UNTRIED;
}

void kb_hip_state_free(kb_state *st)
{
    kb_hip_libs *g = st->hip;
    if (g == NULL)
        return;
    st->hip = NULL;
    if (g->rsmi_initialized && g->rsmi.rsmi_shut_down != NULL)
        g->rsmi.rsmi_shut_down();
    /* both stay mapped: the HIP runtime keeps threads and callbacks until process exit */
    free_lib(&g->hip_lib);
    free_lib(&g->rsmi_lib);
    free(g);
}

/* The copy already in the process, if any. */
static void *hip_from_process(void)
{
    char path[4096];
    for (size_t i = 0; i < sizeof hip_names / sizeof hip_names[0]; i++) {
        void *h = dlopen(hip_names[i], RTLD_NOW | RTLD_NOLOAD);
        if (h != NULL)
            return h;
    }
    if (kb_find_loaded(HIP_STEM, path, sizeof path))
        return dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    return NULL;
}

static void *hip_search(kb_strbuf *tried)
{
    char dir[4096];
    const char *rocm = getenv("ROCM_PATH");
    const char *dirs[] = {NULL, "/opt/rocm/lib", "/opt/rocm/lib64", KB_MULTIARCH_LIBDIR};
    if (rocm != NULL && rocm[0] != '\0' &&
        snprintf(dir, sizeof dir, "%s/lib", rocm) < (int)sizeof dir)
        dirs[0] = dir;
    for (size_t i = 0; i < sizeof hip_names / sizeof hip_names[0]; i++) {
        void *h = kb_try_dlopen(hip_names[i], KB_DLOPEN_FLAGS, tried);
        if (h != NULL)
            return h;
    }
    return kb_try_dirs(dirs, sizeof dirs / sizeof dirs[0], "libamdhip64.so", KB_DLOPEN_FLAGS,
                       tried);
}

static int hip_resolve(kb_hip_libs *g, void *h, const char *path, kb_strbuf *msg)
{
    kb_hip_api *api = &g->hip;
    kb_strbuf missing = {0};
#define KB_HIP_DLSYM_REQ_(name, ret, params)                                                   \
    if ((api->name = (kb_##name##_fn)dlsym(h, #name)) == NULL)                                 \
        kb_sb_printf(&missing, "%s%s", missing.len ? ", " : "", #name);
#define KB_HIP_DLSYM_OPT_(name, ret, params) api->name = (kb_##name##_fn)dlsym(h, #name);
    KB_HIP_REQUIRED(KB_HIP_DLSYM_REQ_)
    KB_HIP_OPTIONAL(KB_HIP_DLSYM_OPT_)
#undef KB_HIP_DLSYM_REQ_
#undef KB_HIP_DLSYM_OPT_
    if (missing.len > 0 || missing.oom) {
        kb_sb_printf(msg, "%s lacks HIP functions kbench needs: %s. kbench needs HIP 5.2 or newer "
                     "(ROCm 5.2+).", path, missing.s ? missing.s : "(out of memory listing them)");
        kb_sb_free(&missing);
        return -1;
    }
    kb_sb_free(&missing);
    return 0;
}

static void hip_open(kb_hip_libs *g)
{
    kb_strbuf tried = {0}, msg = {0};
    const char *forced = getenv(HIP_ENV);
    void *h = NULL;
    int from_process = 0;
    if (forced != NULL && forced[0] != '\0') {
        snprintf(g->hip_requested, sizeof g->hip_requested, "%s", HIP_ENV);
        h = kb_try_dlopen(forced, KB_DLOPEN_FLAGS, &tried);
        if (h == NULL) {
            kb_sb_printf(&msg, HIP_ENV "=%s (a test-only setting that names the HIP library to "
                         "load) could not be opened:\n%sUnset " HIP_ENV " to load libamdhip64.",
                         forced, tried.s ? tried.s : "");
            kb_sb_free(&tried);
            kb_lib_failed(&g->hip_lib, &msg);
            return;
        }
    } else {
        h = hip_from_process();
        from_process = h != NULL;
        if (h == NULL)
            h = hip_search(&tried);
    }
    if (h == NULL) {
        kb_sb_printf(&msg,
                     "libamdhip64.so (the HIP runtime of AMD ROCm) could not be opened. Tried:\n"
                     "%sInstall ROCm (which provides /opt/rocm/lib/libamdhip64.so), import a "
                     "ROCm build of PyTorch first, or put the directory holding libamdhip64.so "
                     "on LD_LIBRARY_PATH before starting Python.",
                     tried.s ? tried.s : "  (out of memory recording the attempts)\n");
        kb_sb_free(&tried);
        kb_lib_failed(&g->hip_lib, &msg);
        return;
    }
    kb_sb_free(&tried);
    const char *path = kb_handle_path(h);
    if (hip_resolve(g, h, path ? path : (forced && forced[0] ? forced : "libamdhip64.so"),
                    &msg) < 0) {
        memset(&g->hip, 0, sizeof g->hip);
        kb_lib_failed(&g->hip_lib, &msg);
        dlclose(h);
        return;
    }
    kb_lib_loaded(&g->hip_lib, h, "libamdhip64.so");
    g->hip_lib.from_process = from_process;
}

const kb_hip_api *kb_hip(PyObject *m)
{
    kb_hip_libs *g = kb_hip_libs_get(m);
    kb_hipError_t r;
    if (g == NULL)
        return NULL;
    if (g->hip_initialized)
        return &g->hip;
    if (g->hip_lib.state == KB_LIB_UNTRIED)
        hip_open(g);
    if (g->hip_lib.state != KB_LIB_LOADED)
        return kb_lib_raise(m, &g->hip_lib);
    Py_BEGIN_ALLOW_THREADS
    r = g->hip.hipInit(0);
    Py_END_ALLOW_THREADS
    g->hip_init_result = r;
    if (kb_hip_check(m, r, "hipInit(0)", __FILE__, __LINE__) < 0) {
        if (r == KB_hipErrorNoDevice || r == KB_hipErrorInvalidDevice)
            kb_add_exception_note("no AMD GPU is visible to the HIP runtime (check "
                                  "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES and /dev/kfd)");
        return NULL;
    }
    if (KB_HIP(m, g->hip.hipRuntimeGetVersion(&g->runtime_version)) < 0)
        return NULL;
    g->hip_initialized = 1;
    return &g->hip;
}

int kb_hip_check(PyObject *m, kb_hipError_t r, const char *expr, const char *file, int line)
{
    if (r == KB_hipSuccess)
        return 0;
    kb_state *st = kb_get_state(m);
    const kb_hip_libs *g = st->hip;
    const char *name = NULL, *desc = NULL;
    char fallback[48];
    if (g != NULL && g->hip.hipGetErrorName != NULL)
        name = g->hip.hipGetErrorName(r);
    if (g != NULL && g->hip.hipGetErrorString != NULL)
        desc = g->hip.hipGetErrorString(r);
    if (name == NULL) {
        snprintf(fallback, sizeof fallback, "HIP error %u", r);
        name = fallback;
    }
    return kb_raise_call_error(st->HipError, expr, (long)r, name, desc, file, line);
}
