/* loader_common.c -- what the four GPU library loaders share: the library state in the module,
 * finding a copy already mapped in the process, dlopen with a record of every path tried, the
 * remembered failure, and the exception that names a failed call. */
#define _GNU_SOURCE
#include "loader_impl.h"

#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ string buffer */

void kb_sb_printf(kb_strbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->len;
        if (b->s != NULL) {
            va_list ap;
            va_start(ap, fmt);
            int n = vsnprintf(b->s + b->len, room, fmt, ap);
            va_end(ap);
            if (n < 0) {            /* encoding error: keep what we have */
                b->s[b->len] = '\0';
                return;
            }
            if ((size_t)n < room) {
                b->len += (size_t)n;
                return;
            }
            b->s[b->len] = '\0';    /* vsnprintf wrote a truncated copy; grow and redo */
            room = (size_t)n + 1;
        } else {
            room = 256;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < room)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) {
            b->oom = 1;
            return;
        }
        if (b->s == NULL)
            s[0] = '\0';
        b->s = s;
        b->cap = cap;
    }
}

char *kb_sb_steal(kb_strbuf *b)
{
    char *s = NULL;
    if (b->oom)
        free(b->s);
    else
        s = b->s != NULL ? b->s : strdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    return s;
}

void kb_sb_free(kb_strbuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

/* ------------------------------------------------------------------ finding and opening */

typedef struct {
    const char *stem;
    char *path;
    size_t path_len;
    int found;
} find_loaded_ctx;

static int find_loaded_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    find_loaded_ctx *c = arg;
    const char *name = info->dlpi_name;
    if (name == NULL || name[0] == '\0')
        return 0;                       /* the main program */
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    size_t stem = strlen(c->stem);
    /* libcupti.so.13, and the hash-renamed copies wheels carry (libcupti-1a2b3c4d.so.12); never
     * NVRTC's helper libnvrtc-builtins */
    if (strncmp(base, c->stem, stem) != 0 || (base[stem] != '.' && base[stem] != '-') ||
        strstr(base, ".so") == NULL || strstr(base, "builtins") != NULL)
        return 0;
    if (strlen(name) >= c->path_len)
        return 0;
    strcpy(c->path, name);
    c->found = 1;
    return 1;                           /* stop iterating */
}

int kb_find_loaded(const char *stem, char *path, size_t path_len)
{
    find_loaded_ctx c = {stem, path, path_len, 0};
    /* dlopen must not run inside the callback (the loader lock is held): only copy the path. */
    dl_iterate_phdr(find_loaded_cb, &c);
    return c.found;
}

void *kb_try_dlopen(const char *path, int flags, kb_strbuf *tried)
{
    dlerror();
    void *h = dlopen(path, flags);
    if (h == NULL) {
        const char *why = dlerror();
        kb_sb_printf(tried, "  %s: %s\n", path, why ? why : "not found");
    }
    return h;
}

void *kb_try_dirs(const char *const *dirs, size_t ndirs, const char *file, int flags,
                  kb_strbuf *tried)
{
    char path[4096];
    for (size_t i = 0; i < ndirs; i++) {
        if (dirs[i] == NULL || dirs[i][0] == '\0')
            continue;
        int n = snprintf(path, sizeof path, "%s/%s", dirs[i], file);
        if (n < 0 || (size_t)n >= sizeof path)
            continue;
        void *h = kb_try_dlopen(path, flags, tried);
        if (h != NULL)
            return h;
    }
    return NULL;
}

/* ------------------------------------------------------------------ library state */

const char *kb_handle_path(void *handle)
{
    struct link_map *lm = NULL;
    if (handle != NULL && dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL &&
        lm->l_name != NULL && lm->l_name[0] != '\0')
        return lm->l_name;
    return NULL;
}

void kb_lib_loaded(kb_lib *lib, void *handle, const char *name)
{
    const char *path = kb_handle_path(handle);
    if (path == NULL)
        path = name;
    lib->handle = handle;
    free(lib->path);
    lib->path = strdup(path);          /* NULL on oom only costs the status report its path */
    free(lib->error);
    lib->error = NULL;
    lib->state = KB_LIB_LOADED;
}

void kb_lib_failed(kb_lib *lib, kb_strbuf *msg)
{
    free(lib->error);
    lib->error = kb_sb_steal(msg);     /* NULL on oom: kb_lib_raise then says so */
    lib->state = KB_LIB_FAILED;
}

void *kb_lib_raise(PyObject *m, const kb_lib *lib)
{
    kb_state *st = kb_get_state(m);
    if (lib->error == NULL)
        PyErr_SetString(st->LibraryNotFound,
                        "a GPU library could not be opened (out of memory writing the reason)");
    else
        PyErr_SetString(st->LibraryNotFound, lib->error);
    return NULL;
}

kb_gpu_libs *kb_gpu_libs_get(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    if (st->gpu == NULL) {
        st->gpu = calloc(1, sizeof *st->gpu);
        if (st->gpu == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    return st->gpu;
}

static void lib_free(kb_lib *lib, int unload)
{
    if (unload && lib->handle != NULL)
        dlclose(lib->handle);
    lib->handle = NULL;
    free(lib->path);
    free(lib->error);
    lib->path = lib->error = NULL;
    lib->state = KB_LIB_UNTRIED;
}

void kb_gpu_state_free(kb_state *st)
{
    kb_gpu_libs *g = st->gpu;
    if (g == NULL)
        return;
    st->gpu = NULL;
    if (g->nvml_initialized && g->nvml.nvmlShutdown != NULL)
        g->nvml.nvmlShutdown();         /* reference-counted by NVML: other users keep theirs */
    /* libcuda and libcupti stay mapped: the driver and CUPTI keep hooks into each other and
     * into callbacks until process exit. */
    lib_free(&g->cuda_lib, 0);
    lib_free(&g->cupti_lib, 0);
    lib_free(&g->nvml_lib, 1);
    lib_free(&g->nvrtc_lib, 1);
    free(g->cupti_preferred);
    free(g);
}

/* ------------------------------------------------------------------ errors */

int kb_raise_call_error(PyObject *type, const char *expr, long code, const char *name,
                        const char *desc, const char *file, int line)
{
    PyObject *msg = NULL, *exc = NULL, *val = NULL;
    /* __FILE__ is "csrc/x.c" under setup.py; keep only the file name */
    const char *slash = file ? strrchr(file, '/') : NULL;
    const char *fname = slash ? slash + 1 : (file ? file : "?");

    /* The source line is for developers (.where), not the message users read (kbench info). */
    /* some libraries (CUPTI 13) answer the description query with the name again */
    if (desc != NULL && desc[0] != '\0' && strcmp(desc, name) != 0)
        msg = PyUnicode_FromFormat("%s failed: %s (%s)", expr, name, desc);
    else
        msg = PyUnicode_FromFormat("%s failed: %s", expr, name);
    if (msg == NULL)
        goto error;
    exc = PyObject_CallOneArg(type, msg);
    if (exc == NULL)
        goto error;
    if ((val = PyUnicode_FromString(expr)) == NULL || PyObject_SetAttrString(exc, "call", val) < 0)
        goto error;
    Py_CLEAR(val);
    if ((val = PyLong_FromLong(code)) == NULL || PyObject_SetAttrString(exc, "code", val) < 0)
        goto error;
    Py_CLEAR(val);
    if ((val = PyUnicode_FromString(name)) == NULL || PyObject_SetAttrString(exc, "name", val) < 0)
        goto error;
    Py_CLEAR(val);
    if ((val = PyUnicode_FromFormat("%s:%d", fname, line)) == NULL ||
        PyObject_SetAttrString(exc, "where", val) < 0)
        goto error;
    Py_CLEAR(val);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    Py_DECREF(msg);
    return -1;

error:
    Py_XDECREF(val);
    Py_XDECREF(exc);
    Py_XDECREF(msg);
    return -1;
}
