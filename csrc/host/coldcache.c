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
#define _GNU_SOURCE     /* sched_getaffinity, CPU_ALLOC */
#include "kbench.h"

#include <errno.h>
#include <sched.h>
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
    if (fclose(f) != 0 || ok == NULL)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* ------------------------------------------------------------------ which cache to flush
 *
 * The flush must evict the last-level cache of every CPU the process may run on, so the size
 * is read for the CPUs of its affinity mask (sched_getaffinity), not for cpu0: on an AMD X3D
 * part one CCD has 3x the L3 of the other (32 MB vs 96 MB), and a cpuset may not include cpu0
 * at all. The answer is the largest last-level cache among those CPUs. When any of them has a
 * last-level cache whose size sysfs does not give, sysfs cannot answer and glibc's sysconf is
 * asked, and the answer says so: sysconf's size can be far off (on the 2-core CI VM it
 * reports a 320 MiB L3 where sysfs has 32 MiB). */

#define KB_CACHE_LEVELS 16
#define KB_SYSFS_CPU_ROOT "/sys/devices/system/cpu"

typedef struct {
    int level;
    char type[32];
    size_t bytes;               /* 0: size unknown (file missing or unparseable) */
} cache_level;

typedef struct {
    size_t bytes;               /* largest last-level cache among the CPUs; 0 if any unknown */
    int cpu;                    /* bytes > 0: the lowest-numbered CPU with that cache; else the
                                 * first CPU whose last-level size is unknown; -1: no CPU */
    int n;                      /* levels of `cpu` in lv */
    cache_level lv[KB_CACHE_LEVELS];
} sysfs_llc;

typedef struct {
    cpu_set_t *set;             /* CPU_ALLOC'd */
    size_t size;                /* bytes of set */
    int ncpus;                  /* CPUs set can hold */
} cpu_mask;

/* Where sysfs keeps cpuN/cache/indexM/. $KBENCH_SYSFS_CPU_ROOT is a TEST HOOK, not a setting:
 * tests/test_cpu_cache_info.py points it at a fake tree to check, without root, which CPUs'
 * caches are read and which source is reported. */
static const char *sysfs_cpu_root(void)
{
    const char *root = getenv("KBENCH_SYSFS_CPU_ROOT");
    return root != NULL && *root ? root : KB_SYSFS_CPU_ROOT;
}

/* One line of <root>/cpu<cpu>/cache/index<index>/<name> into buf; -1 if it cannot be read. */
static int read_index(const char *root, int cpu, int index, const char *name, char *buf,
                      size_t n)
{
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/cpu%d/cache/index%d/%s", root, cpu, index, name);
    if (len < 0 || (size_t)len >= sizeof path)
        return -1;
    return read_line(path, buf, n);
}

/* Caches of one CPU from sysfs; returns how many were found (at most cap). */
static int sysfs_caches(const char *root, int cpu, cache_level *out, int cap)
{
    int n = 0;
    for (int i = 0; i < KB_CACHE_LEVELS && n < cap; i++) {
        char buf[64];
        if (read_index(root, cpu, i, "level", buf, sizeof buf) < 0)
            break;
        out[n].level = atoi(buf);
        if (read_index(root, cpu, i, "type", out[n].type, sizeof out[n].type) < 0)
            strcpy(out[n].type, "Unknown");
        out[n].bytes = read_index(root, cpu, i, "size", buf, sizeof buf) < 0 ? 0 : parse_size(buf);
        n++;
    }
    return n;
}

/* A CPU's last-level cache among its levels: the highest level that holds data, the largest
 * at that level. 0 when it has none or its size is unknown (a smaller level is no answer). */
static size_t levels_llc(const cache_level *lv, int n)
{
    int best_level = 0;
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(lv[i].type, "Instruction") == 0)
            continue;
        if (lv[i].level > best_level || (lv[i].level == best_level && lv[i].bytes > best)) {
            best_level = lv[i].level;
            best = lv[i].bytes;
        }
    }
    return best;
}

/* The CPUs this thread may run on into *m (free with mask_free); -1 with OSError. */
static int mask_get(cpu_mask *m)
{
    for (int ncpus = CPU_SETSIZE; ncpus <= (1 << 22); ncpus *= 2) {
        m->set = CPU_ALLOC(ncpus);
        if (m->set == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->size = CPU_ALLOC_SIZE(ncpus);
        m->ncpus = ncpus;
        if (sched_getaffinity(0, m->size, m->set) == 0)
            return 0;
        int err = errno;
        CPU_FREE(m->set);
        m->set = NULL;
        if (err != EINVAL) {     /* EINVAL: the kernel's mask is larger; try a larger set */
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    PyErr_SetString(PyExc_OSError, "sched_getaffinity: the CPU mask is larger than 4M CPUs");
    return -1;
}

static void mask_free(cpu_mask *m)
{
    if (m->set != NULL)
        CPU_FREE(m->set);
    m->set = NULL;
}

/* Read the caches of every CPU of m under root into *out (see sysfs_llc). */
static void scan_llc(const char *root, const cpu_mask *m, sysfs_llc *out)
{
    cache_level lv[KB_CACHE_LEVELS];
    out->bytes = 0, out->cpu = -1, out->n = 0;
    for (int cpu = 0; cpu < m->ncpus; cpu++) {
        if (!CPU_ISSET_S(cpu, m->size, m->set))
            continue;
        int n = sysfs_caches(root, cpu, lv, KB_CACHE_LEVELS);
        size_t llc = levels_llc(lv, n);
        if (llc > 0 && llc <= out->bytes)
            continue;
        out->bytes = llc, out->cpu = cpu, out->n = n;
        memcpy(out->lv, lv, (size_t)n * sizeof lv[0]);
        if (llc == 0)       /* a CPU whose last-level size sysfs does not give: no answer */
            return;
    }
}

/* The last scan and what it was for (a mask of up to CPU_SETSIZE CPUs and a root), kept in
 * the module's state (kb_state.llc_memo), read and written under the GIL. Reading sysfs costs
 * about 115 us a CPU on the CI VM (13 files; 230 us for its 2 CPUs, measured with timeit over
 * cpu_cache_info), so 30 ms on a 256-thread server, paid twice a bench (kbench.bench asks
 * cpu_cache_info, the flush asks kb_cpu_llc_bytes); remembered, a call costs the
 * sched_getaffinity and a compare. CPU caches do not change while a process runs; a CPU taken
 * offline leaves the masks, so a changed mask reads afresh. */
struct kb_llc_memo {
    cpu_set_t set;
    char root[512];
    sysfs_llc llc;
};

/* The scan for the CPUs of m under sysfs_cpu_root(), remembered for the last mask (not where
 * the memo cannot be allocated: then every call scans). */
static void affinity_llc(kb_state *st, const cpu_mask *m, sysfs_llc *out)
{
    const char *root = sysfs_cpu_root();
    struct kb_llc_memo *memo = st->llc_memo;
    int fits = m->size == sizeof memo->set && strlen(root) < sizeof memo->root;
    if (fits && memo != NULL && CPU_EQUAL_S(m->size, m->set, &memo->set)
        && strcmp(root, memo->root) == 0) {
        *out = memo->llc;
        return;
    }
    scan_llc(root, m, out);
    if (!fits)
        return;
    if (memo == NULL && (memo = st->llc_memo = PyMem_RawMalloc(sizeof *memo)) == NULL)
        return;
    memcpy(&memo->set, m->set, m->size);
    strcpy(memo->root, root);
    memo->llc = *out;
}

/* The plausible range of a last-level cache. Below 64 KiB no CPU kbench runs on has one, and
 * a tiny value (KBENCH_LLC_BYTES=1) would flush 64 B and still call the figure cold. 64 GiB is
 * past the largest (1152 MiB of L3 on a 3D V-Cache EPYC; 64 GB of HBM as a memory-side cache
 * on a Xeon Max), and twice it still fits the flush buffer's 1 TiB ceiling. */
#define KB_LLC_MIN_BYTES (1ull << 16)
#define KB_LLC_MAX_BYTES (1ull << 36)

/* $KBENCH_LLC_BYTES: digits with an optional K, M or G suffix (powers of 1024), 64 KiB ..
 * 64 GiB. No sign, no fraction, no other suffix: a value that does not parse exactly would
 * size the flush wrongly and still be called cold. */
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
    if (digits == 0 || *p != '\0') {
        PyErr_Format(PyExc_ValueError,
                     "KBENCH_LLC_BYTES='%.100s' is not a cache size: give a whole number of "
                     "bytes, optionally with a K, M or G suffix (e.g. 33554432 or 32M), or unset "
                     "it to read the size from sysfs", s);
        return -1;
    }
    if (!ok || v > (KB_LLC_MAX_BYTES >> shift) || (v << shift) < KB_LLC_MIN_BYTES) {
        PyErr_Format(PyExc_ValueError,
                     "KBENCH_LLC_BYTES='%.100s' is not a cache size a CPU has: give 64K to 64G "
                     "(a flush sized from it would not evict the cache, or would not fit), or "
                     "unset it to read the size from sysfs", s);
        return -1;
    }
    *bytes = (size_t)(v << shift);
    return 0;
}

/* Where a last-level cache size came from: "KBENCH_LLC_BYTES", "sysfs", "sysconf", or "none"
 * (bytes 0: unknown). */
typedef struct {
    size_t bytes;
    const char *source;
} llc_answer;

/* Without $KBENCH_LLC_BYTES: sysfs's answer, else glibc's sysconf (L3, else L2), else none. */
static void llc_choose(const sysfs_llc *sys, llc_answer *out)
{
    out->bytes = sys->bytes, out->source = "sysfs";
    if (out->bytes > 0)
        return;
    out->source = "sysconf";
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) {
        out->bytes = (size_t)l3;
        return;
    }
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0) {
        out->bytes = (size_t)l2;
        return;
    }
#endif
    out->source = "none";
}

/* $KBENCH_LLC_BYTES, else the largest last-level cache among the CPUs this thread may run on
 * (see "which cache to flush"), else sysconf; 0 when unknown. -1: ValueError (a malformed
 * $KBENCH_LLC_BYTES) or OSError (sched_getaffinity failed). */
int kb_cpu_llc_bytes(kb_state *st, size_t *bytes)
{
    *bytes = 0;
    const char *env = getenv("KBENCH_LLC_BYTES");
    if (env != NULL && *env)
        return parse_llc_env(env, bytes);
    cpu_mask m;
    sysfs_llc sys;
    llc_answer a;
    if (mask_get(&m) < 0)
        return -1;
    affinity_llc(st, &m, &sys);
    mask_free(&m);
    llc_choose(&sys, &a);
    *bytes = a.bytes;
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

/* [{"level", "type", "bytes"}...] of the CPU the scan settled on. */
static PyObject *levels_list(const sysfs_llc *sys)
{
    PyObject *levels = PyList_New(0);
    if (levels == NULL)
        return NULL;
    for (int i = 0; i < sys->n; i++) {
        const cache_level *c = &sys->lv[i];
        PyObject *d = Py_BuildValue("{s:i,s:s,s:n}", "level", c->level, "type", c->type,
                                    "bytes", (Py_ssize_t)c->bytes);
        if (d == NULL || PyList_Append(levels, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(levels);
            return NULL;
        }
        Py_DECREF(d);
    }
    return levels;
}

/* The CPUs of m, in order. */
static PyObject *cpus_list(const cpu_mask *m)
{
    PyObject *cpus = PyList_New(0);
    if (cpus == NULL)
        return NULL;
    for (int cpu = 0; cpu < m->ncpus; cpu++) {
        if (!CPU_ISSET_S(cpu, m->size, m->set))
            continue;
        PyObject *v = PyLong_FromLong(cpu);
        if (v == NULL || PyList_Append(cpus, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(cpus);
            return NULL;
        }
        Py_DECREF(v);
    }
    return cpus;
}

/* A CPU number, or None for -1 (new reference). */
static PyObject *cpu_or_none(int cpu)
{
    if (cpu >= 0)
        return PyLong_FromLong(cpu);
    Py_RETURN_NONE;
}

/* cpu_cache_info() -> {"llc_bytes", "source", "llc_cpu", "cpus", "levels", "levels_cpu"}: see
 * kbench/_core.pyi. */
static PyObject *cpu_cache_info(PyObject *self, PyObject *unused)
{
    cpu_mask m;
    sysfs_llc sys;
    llc_answer a;
    PyObject *levels = NULL, *cpus = NULL, *llc_cpu = NULL, *levels_cpu = NULL, *out = NULL;
    if (mask_get(&m) < 0)
        return NULL;
    affinity_llc(kb_get_state(self), &m, &sys);
    const char *env = getenv("KBENCH_LLC_BYTES");
    if (env != NULL && *env) {
        a.source = "KBENCH_LLC_BYTES";
        if (parse_llc_env(env, &a.bytes) < 0)
            goto done;
    } else {
        llc_choose(&sys, &a);
    }
    /* llc_cpu only where llc_bytes is that CPU's cache */
    int from_sysfs = strcmp(a.source, "sysfs") == 0;
    if ((levels = levels_list(&sys)) == NULL || (cpus = cpus_list(&m)) == NULL
        || (llc_cpu = cpu_or_none(from_sysfs ? sys.cpu : -1)) == NULL
        || (levels_cpu = cpu_or_none(sys.cpu)) == NULL)
        goto done;
    out = Py_BuildValue("{s:n,s:s,s:O,s:O,s:O,s:O}", "llc_bytes", (Py_ssize_t)a.bytes,
                        "source", a.source, "llc_cpu", llc_cpu, "cpus", cpus,
                        "levels", levels, "levels_cpu", levels_cpu);
done:
    Py_XDECREF(levels);
    Py_XDECREF(cpus);
    Py_XDECREF(llc_cpu);
    Py_XDECREF(levels_cpu);
    mask_free(&m);
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
     "cpu_cache_info() -> dict: the last-level cache size for the CPUs this thread may run on, "
     "where it came from, and one CPU's cache levels from sysfs."},
    {"cpu_flush", cpu_flush, METH_O,
     "cpu_flush($module, nbytes, /)\n--\n\n"
     "cpu_flush(nbytes, /): write every cache line of a buffer of nbytes."},
    {NULL, NULL, 0, NULL},
};

int kb_coldcache_module_init(PyObject *m) { return PyModule_AddFunctions(m, coldcache_methods); }
