/* loader_impl.h -- helpers shared by loader_{common,cuda,cupti,nvml,nvrtc}.c; not for other files.
 *
 * A load attempt writes one line per path tried ("  <path>: <dlerror()>") into a kb_strbuf; when
 * nothing opens, the lines become the remembered LibraryNotFound message. None of these helpers
 * touches Python except kb_lib_raise and kb_raise_call_error.
 */
#ifndef KBENCH_LOADER_IMPL_H
#define KBENCH_LOADER_IMPL_H

#include "loader.h"

/* A growable, always NUL-terminated string (malloc); `oom` sticks after a failed allocation. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} kb_strbuf;

void kb_sb_printf(kb_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *kb_sb_steal(kb_strbuf *b);    /* the string (caller frees) or NULL after oom; resets b */
void kb_sb_free(kb_strbuf *b);

/* The path of a shared object already mapped in this process whose file name is `stem` followed
 * by '.' or '-' (stem "libcupti": libcupti.so.13, libcupti-1a2b3c4d.so.12), found with
 * dl_iterate_phdr. 1 and path filled, or 0. */
int kb_find_loaded(const char *stem, char *path, size_t path_len);

/* dlopen(path, flags); on failure appends "  <path>: <dlerror()>\n" to tried. */
void *kb_try_dlopen(const char *path, int flags, kb_strbuf *tried);

/* Try `file` in each of the ndirs directories (NULL or empty entries are skipped, so
 * getenv() results may be passed directly); the first that opens wins. */
void *kb_try_dirs(const char *const *dirs, size_t ndirs, const char *file, int flags,
                  kb_strbuf *tried);

/* The file a dlopen handle maps (from its link map), or NULL. */
const char *kb_handle_path(void *handle);

/* Mark lib loaded from handle; the path comes from the link map (falls back to `name`). */
void kb_lib_loaded(kb_lib *lib, void *handle, const char *name);
/* Mark lib failed with the message in msg (consumed). */
void kb_lib_failed(kb_lib *lib, kb_strbuf *msg);
/* Raise st->LibraryNotFound with the remembered message. Always returns NULL. */
void *kb_lib_raise(PyObject *m, const kb_lib *lib);

/* Raise `type` with "<expr> failed: <name> (<desc>)" (desc may be NULL) and set .call, .code,
 * .name and .where ("<file>.c:<line>", for developers: kept out of the message) on the
 * instance. Always -1. */
int kb_raise_call_error(PyObject *type, const char *expr, long code, const char *name,
                        const char *desc, const char *file, int line);

/* What to do when a library of the NVIDIA driver (libcuda, libnvidia-ml) is missing: one text
 * for both, so that a report listing both says it once. */
#define KB_DRIVER_FIX                                                                          \
    "Install the NVIDIA driver, which provides libcuda.so.1 and libnvidia-ml.so.1; in a "       \
    "container, start it with the NVIDIA Container Toolkit (e.g. docker run --gpus all); or "  \
    "put the directory holding them on LD_LIBRARY_PATH before starting Python."

/* dlopen flags for every library: resolve now so a broken install fails at load, and keep the
 * symbols private to kbench. */
#define KB_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)

/* The Debian-style multiarch library directory of this machine, where distributions put the
 * driver's libraries (libcuda.so.1, libnvidia-ml.so.1). */
#if defined(__x86_64__)
#define KB_MULTIARCH_LIBDIR "/usr/lib/x86_64-linux-gnu"
#elif defined(__aarch64__)
#define KB_MULTIARCH_LIBDIR "/usr/lib/aarch64-linux-gnu"
#elif defined(__powerpc64__)
#define KB_MULTIARCH_LIBDIR "/usr/lib/powerpc64le-linux-gnu"
#else
#define KB_MULTIARCH_LIBDIR "/usr/lib"
#endif

/* Fill api->name with dlsym(h, "name"); a missing required one is appended to the kb_strbuf
 * `missing` (used by the CUPTI, NVML and NVRTC loaders, which export plain C symbols). */
#define KB_DLSYM_REQUIRED_(name)                                                               \
    if ((api->name = (__typeof__(api->name))dlsym(h, #name)) == NULL)                          \
        kb_sb_printf(&missing, "%s%s", missing.len ? ", " : "", #name);
#define KB_DLSYM_OPTIONAL_(name) api->name = (__typeof__(api->name))dlsym(h, #name);

#endif /* KBENCH_LOADER_IMPL_H */
