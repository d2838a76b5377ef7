/* evict.c -- cold by eviction: flush the cache lines of the arrays a call reads, instead of
 * writing a buffer twice the last-level cache.
 *
 * The write flush costs its bytes every sample: 2x a 1 GiB cache is a 2.1 GB write (140 ms
 * on the 2-core VM), and a 16 MB np.add bench took 7.4 s for 10 samples (CI +-7%). A line
 * flush (clflushopt, clflush; dc civac on arm64) costs the operands' bytes whatever the
 * cache's size (1.4 ms for the add's 50 MB): 0.43 s, 82 samples, +-1.9%. It leaves no dirty
 * flush lines for the timed call to write back: a cold 1 MB add read 0.13 ms evicted, 0.17-0.20
 * ms after a write flush, 0.044 ms hot (benchmarks/results/cpu_cold_methods.md). It only reaches the memory kbench
 * can see, so kbench.measure.coldcache.visible_operands hands over the arrays only when fn reads
 * nothing else; otherwise the write flush runs.
 */
#include "kbench.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

static int has_clflushopt(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 23) & 1u;
}

__attribute__((target("clflushopt"))) static void flush_opt(const char *p, const char *end)
{
    for (; p < end; p += 64)
        _mm_clflushopt((void *)p);
    _mm_sfence();       /* clflushopt is weakly ordered: done before the timed call starts */
}

static void flush_plain(const char *p, const char *end)
{
    for (; p < end; p += 64)
        _mm_clflush(p);
    _mm_mfence();
}

/* cpuid once; a race between two first callers writes the same answer */
static int use_clflushopt(void)
{
    static int have = -1;
    if (have < 0)
        have = has_clflushopt();
    return have;
}

const char *kb_cpu_evict_instruction(void)
{
    return use_clflushopt() ? "clflushopt" : "clflush";
}

static void evict_range(const char *p, const char *end)
{
    if (use_clflushopt())
        flush_opt(p, end);
    else
        flush_plain(p, end);
}
#elif defined(__aarch64__)
const char *kb_cpu_evict_instruction(void) { return "dc civac"; }

static void evict_range(const char *p, const char *end)
{
    /* clean and invalidate to the point of coherency; Linux lets EL0 run it (SCTLR_EL1.UCI).
     * 64-byte steps cover any line of 64 bytes or more. */
    for (; p < end; p += 64)
        __asm__ volatile("dc civac, %0" : : "r"(p) : "memory");
    __asm__ volatile("dsb ish" : : : "memory");
}
#else
const char *kb_cpu_evict_instruction(void) { return NULL; }

static void evict_range(const char *p, const char *end)
{
    (void)p;
    (void)end;
}
#endif

int kb_cpu_evict_check(PyObject *per_set, Py_ssize_t n_sets)
{
    if (!PyTuple_Check(per_set) || PyTuple_GET_SIZE(per_set) != n_sets) {
        PyErr_Format(PyExc_TypeError, "evict must be a tuple of one tuple of arrays per "
                                      "argument set (%zd), got %.100s", n_sets,
                     Py_TYPE(per_set)->tp_name);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n_sets; k++)
        if (!PyTuple_Check(PyTuple_GET_ITEM(per_set, k))) {
            PyErr_Format(PyExc_TypeError, "evict[%zd] must be a tuple of arrays, got %.100s", k,
                         Py_TYPE(PyTuple_GET_ITEM(per_set, k))->tp_name);
            return -1;
        }
    return 0;
}

int kb_cpu_evictor_init(kb_cpu_evictor *e, PyObject *per_set, Py_ssize_t n_sets)
{
    memset(e, 0, sizeof *e);
    if (kb_cpu_evict_check(per_set, n_sets) < 0)
        return -1;
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < n_sets; k++)
        total += PyTuple_GET_SIZE(PyTuple_GET_ITEM(per_set, k));
    e->views = PyMem_Calloc((size_t)total + 1, sizeof *e->views);
    e->first = PyMem_Calloc((size_t)n_sets + 1, sizeof *e->first);
    if (e->views == NULL || e->first == NULL) {
        kb_cpu_evictor_fini(e);
        PyErr_NoMemory();
        return -1;
    }
    e->n_sets = n_sets;
    for (Py_ssize_t k = 0; k < n_sets; k++) {
        PyObject *t = PyTuple_GET_ITEM(per_set, k);
        size_t set_bytes = 0;
        e->first[k] = e->n_views;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
            /* contiguous, or the line flush would miss the gaps' neighbours' lines and walk
             * memory the array does not own */
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(t, i), &e->views[e->n_views],
                                   PyBUF_ANY_CONTIGUOUS) < 0) {
                kb_add_exception_note("evict[%zd][%zd]: an operand to evict must be a "
                                      "contiguous buffer", k, i);
                kb_cpu_evictor_fini(e);
                return -1;
            }
            set_bytes += (size_t)e->views[e->n_views++].len;
        }
        if (set_bytes > e->bytes)
            e->bytes = set_bytes;
    }
    e->first[n_sets] = e->n_views;
    return 0;
}

void kb_cpu_evict_set(const kb_cpu_evictor *e, Py_ssize_t k)
{
    for (Py_ssize_t i = e->first[k]; i < e->first[k + 1]; i++) {
        const char *p = e->views[i].buf;
        const char *start = (const char *)((uintptr_t)p & ~(uintptr_t)63);
        evict_range(start, p + e->views[i].len);
    }
}

void kb_cpu_evictor_fini(kb_cpu_evictor *e)
{
    for (Py_ssize_t i = 0; e->views != NULL && i < e->n_views; i++)
        PyBuffer_Release(&e->views[i]);
    PyMem_Free(e->views);
    PyMem_Free(e->first);
    memset(e, 0, sizeof *e);
}

/* _core.cpu_evict(obj): flush a contiguous buffer's lines from every cache level (tests and
 * benchmarks: the same primitive the host backend runs before each sample). */
static PyObject *cpu_evict(PyObject *self, PyObject *obj)
{
    (void)self;
    if (kb_cpu_evict_instruction() == NULL) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "cpu_evict: this CPU architecture has no line-flush instruction kbench "
                        "uses (x86 clflush, arm64 dc civac)");
        return NULL;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_ANY_CONTIGUOUS) < 0)
        return NULL;
    const char *p = v.buf;
    Py_BEGIN_ALLOW_THREADS
    evict_range((const char *)((uintptr_t)p & ~(uintptr_t)63), p + v.len);
    Py_END_ALLOW_THREADS
    Py_ssize_t n = v.len;
    PyBuffer_Release(&v);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef evict_methods[] = {
    {"cpu_evict", cpu_evict, METH_O,
     "cpu_evict($module, buffer, /)\n--\n\n"
     "cpu_evict(buffer) -> int\n\nFlush a contiguous buffer's cache lines from every cache "
     "level (the host backend's cold_cache='flush' by eviction); returns the bytes covered."},
    {NULL, NULL, 0, NULL},
};

int kb_evict_module_init(PyObject *m)
{
    PyObject *ins = kb_cpu_evict_instruction() ? PyUnicode_FromString(kb_cpu_evict_instruction())
                                               : Py_NewRef(Py_None);
    if (ins == NULL || PyModule_AddObjectRef(m, "CPU_EVICT_INSTRUCTION", ins) < 0) {
        Py_XDECREF(ins);
        return -1;
    }
    Py_DECREF(ins);
    PyObject *from = PyLong_FromSize_t(KB_EVICT_FROM_BYTES);
    int rc = from == NULL ? -1 : PyModule_AddObjectRef(m, "CPU_EVICT_FROM_BYTES", from);
    Py_XDECREF(from);
    if (rc < 0)
        return -1;
    return PyModule_AddFunctions(m, evict_methods);
}
