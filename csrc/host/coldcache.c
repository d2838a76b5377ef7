/* coldcache.c -- CPU cache sizes and the CPU flush buffer.
 *
 * The flush writes every byte of every cache line of a buffer of at least twice the
 * last-level cache, with ordinary stores: glibc's memset switches to non-temporal stores on
 * large sizes, and those bypass the cache, so they would not evict anything. Whole lines
 * rather than one byte a line: the same lines end up in the cache, dirty, either way, and on
 * the 2-core CI machine (AMD EPYC, 32 MB L3) a 64 MB sweep took 2.6-2.9 ms in whole lines
 * against 2.9-3.4 ms a byte a line (41 interleaved runs each); a 16 MB read after either ran
 * equally slow (it came from memory).
 */
#include "kbench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KB_LINE 64

/* Parse sysfs sizes like "48K", "2048K", "300M". 0 when unparseable. */
static size_t parse_size(const char *s)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    default: break;
    }
    return (size_t)v;
}

static int read_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *ok = fgets(buf, (int)n, f);
    fclose(f);
    if (ok == NULL)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

typedef struct {
    int level;
    char type[32];
    size_t bytes;
} cache_level;

/* Caches of cpu0 from sysfs; returns how many were found (at most cap). */
static int sysfs_caches(cache_level *out, int cap)
{
    int n = 0;
    for (int i = 0; i < 16 && n < cap; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_line(path, buf, sizeof buf) < 0)
            break;
        out[n].level = atoi(buf);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (read_line(path, out[n].type, sizeof out[n].type) < 0)
            strcpy(out[n].type, "Unknown");
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        out[n].bytes = read_line(path, buf, sizeof buf) < 0 ? 0 : parse_size(buf);
        n++;
    }
    return n;
}

#define KB_LLC_MAX_BYTES (1ull << 40)   /* 1 TiB: past any cache, and 2x it still fits */

/* $KBENCH_LLC_BYTES: digits with an optional K, M or G suffix (powers of 1024), 1 B .. 1 TiB.
 * No sign, no fraction, no other suffix: a value that does not parse exactly would size the
 * flush wrongly and still be called cold. */
static int parse_llc_env(const char *s, size_t *bytes)
{
    unsigned long long v = 0;
    const char *p = s;
    int digits = 0, shift = 0, ok = 1;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > KB_LLC_MAX_BYTES)   /* already too big: stop before it can overflow */
            ok = 0;
        else
            v = v * 10 + (unsigned long long)(*p - '0');
    }
    switch (*p) {
    case 'K': case 'k': shift = 10; p++; break;
    case 'M': case 'm': shift = 20; p++; break;
    case 'G': case 'g': shift = 30; p++; break;
    default: break;
    }
    if (digits == 0 || *p != '\0' || !ok || v == 0 || v > (KB_LLC_MAX_BYTES >> shift)) {
        PyErr_Format(PyExc_ValueError,
                     "KBENCH_LLC_BYTES='%.100s' is not a cache size: give a whole number of "
                     "bytes from 1 to 1 TiB, optionally with a K, M or G suffix (e.g. 33554432 "
                     "or 32M), or unset it to read the size from sysfs", s);
        return -1;
    }
    *bytes = (size_t)(v << shift);
    return 0;
}

int kb_cpu_llc_bytes(size_t *bytes)
{
    *bytes = 0;
    const char *env = getenv("KBENCH_LLC_BYTES");
    if (env != NULL && *env)
        return parse_llc_env(env, bytes);
    cache_level lv[16];
    int n = sysfs_caches(lv, 16), best_level = 0;
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(lv[i].type, "Instruction") == 0)
            continue;
        if (lv[i].level > best_level || (lv[i].level == best_level && lv[i].bytes > best)) {
            best_level = lv[i].level;
            best = lv[i].bytes;
        }
    }
    if (best > 0) {
        *bytes = best;
        return 0;
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) {
        *bytes = (size_t)l3;
        return 0;
    }
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0)
        *bytes = (size_t)l2;
#endif
    return 0;
}

int kb_cpu_flusher_init(kb_cpu_flusher *f, size_t bytes)
{
    f->buf = NULL;
    f->bytes = 0;
    f->seed = 1;
    if (bytes == 0) {
        PyErr_SetString(PyExc_ValueError, "flush buffer size must be positive "
                                          "(the last-level cache size is unknown: set "
                                          "KBENCH_LLC_BYTES or pass flush_bytes)");
        return -1;
    }
    bytes = (bytes + KB_LINE - 1) / KB_LINE * KB_LINE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes) != 0 || p == NULL) {
        PyErr_Format(PyExc_MemoryError, "cannot allocate the %zu-byte CPU cache flush buffer",
                     bytes);
        return -1;
    }
    f->buf = p;
    f->bytes = bytes;
    return 0;
}

/* Write every line of buf[from, to) with s. */
static void write_lines(unsigned char *b, size_t from, size_t to, uint64_t s)
{
    for (size_t i = from; i < to; i += KB_LINE) {
        uint64_t *line = (uint64_t *)(void *)(b + i);     /* 64-byte aligned */
        line[0] = s, line[1] = s, line[2] = s, line[3] = s;
        line[4] = s, line[5] = s, line[6] = s, line[7] = s;
        /* A barrier per line: the compiler must neither drop the stores (the buffer is never
         * read) nor turn the loop into a call to memset, whose large-size path stores
         * non-temporally and would evict nothing. */
        __asm__ __volatile__("" : : "r"(line) : "memory");
    }
}

void kb_cpu_flush(kb_cpu_flusher *f)
{
    write_lines(f->buf, 0, f->bytes, (uint64_t)++f->seed * 0x0101010101010101ull);
}

int kb_cpu_flush_first(kb_cpu_flusher *f)
{
    const size_t chunk = (size_t)64 << 20;     /* ~0.1 s of page faults: Ctrl-C within that */
    uint64_t s = (uint64_t)++f->seed * 0x0101010101010101ull;
    for (size_t at = 0; at < f->bytes; at += chunk) {
        size_t end = f->bytes - at > chunk ? at + chunk : f->bytes;
        Py_BEGIN_ALLOW_THREADS
        write_lines(f->buf, at, end, s);
        Py_END_ALLOW_THREADS
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
    return 0;
}

void kb_cpu_flusher_fini(kb_cpu_flusher *f)
{
    free(f->buf);
    f->buf = NULL;
    f->bytes = 0;
}

/* cpu_cache_info() -> {"levels": [{"level", "type", "bytes"}...], "llc_bytes", "source"} */
static PyObject *cpu_cache_info(PyObject *self, PyObject *unused)
{
    cache_level lv[16];
    int n = sysfs_caches(lv, 16);
    PyObject *levels = PyList_New(0), *out = NULL;
    if (levels == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *d = Py_BuildValue("{s:i,s:s,s:n}", "level", lv[i].level, "type", lv[i].type,
                                    "bytes", (Py_ssize_t)lv[i].bytes);
        if (d == NULL || PyList_Append(levels, d) < 0) {
            Py_XDECREF(d);
            goto error;
        }
        Py_DECREF(d);
    }
    const char *env = getenv("KBENCH_LLC_BYTES");
    size_t llc;
    if (kb_cpu_llc_bytes(&llc) < 0)
        goto error;
    out = Py_BuildValue("{s:O,s:n,s:s}", "levels", levels, "llc_bytes", (Py_ssize_t)llc, "source",
                        (env && *env) ? "KBENCH_LLC_BYTES" : (n ? "sysfs" : "sysconf"));
error:
    Py_DECREF(levels);
    return out;
}

/* cpu_flush(nbytes) -> None: one flush pass, for tests and for callers that flush themselves. */
static PyObject *cpu_flush(PyObject *self, PyObject *arg)
{
    Py_ssize_t bytes = PyLong_AsSsize_t(arg);
    if (bytes == -1 && PyErr_Occurred())
        return NULL;
    if (bytes <= 0)
        return PyErr_Format(PyExc_ValueError, "bytes must be positive, got %zd", bytes);
    kb_cpu_flusher f;
    if (kb_cpu_flusher_init(&f, (size_t)bytes) < 0)
        return NULL;
    int rc = kb_cpu_flush_first(&f);
    kb_cpu_flusher_fini(&f);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef coldcache_methods[] = {
    {"cpu_cache_info", cpu_cache_info, METH_NOARGS,
     "cpu_cache_info() -> dict: CPU cache levels from sysfs and the last-level cache size."},
    {"cpu_flush", cpu_flush, METH_O,
     "cpu_flush(nbytes, /): write every cache line of a buffer of nbytes."},
    {NULL, NULL, 0, NULL},
};

int kb_coldcache_module_init(PyObject *m) { return PyModule_AddFunctions(m, coldcache_methods); }
