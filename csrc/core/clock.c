/* clock.c -- the host clock: monotonic nanoseconds, its resolution and its read cost. */
#include "kbench.h"

#include <time.h>

uint64_t kb_now_ns(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC is served by the vDSO (no syscall) and never jumps. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Smallest positive step between two consecutive reads, and the mean cost of one read. */
static void measure_clock(uint64_t *resolution_ns, double *read_cost_ns)
{
    enum { READS = 200000 };
    uint64_t best = UINT64_MAX;
    uint64_t prev = kb_now_ns(), start = prev;
    for (int i = 0; i < READS; i++) {
        uint64_t t = kb_now_ns();
        if (t > prev && t - prev < best)
            best = t - prev;
        prev = t;
    }
    *read_cost_ns = (double)(prev - start) / READS;
    *resolution_ns = best == UINT64_MAX ? 0 : best;
}

static PyObject *now_ns(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(kb_now_ns());
}

/* host_timer_info(fn=None, calls=100000): the clock's resolution and read cost, and when a
 * callable is given, the per-sample overhead of the host loop around an empty call of it. */
static PyObject *host_timer_info(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fn", "calls", NULL};
    PyObject *fn = Py_None;
    Py_ssize_t calls = 100000;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|On:host_timer_info", kwlist, &fn, &calls))
        return NULL;
    if (calls <= 0)
        return PyErr_Format(PyExc_ValueError, "calls must be positive, got %zd", calls);

    uint64_t resolution;
    double read_cost;
    Py_BEGIN_ALLOW_THREADS
    measure_clock(&resolution, &read_cost);
    Py_END_ALLOW_THREADS

    PyObject *out = Py_BuildValue("{s:K,s:d,s:s}", "resolution_ns", (unsigned long long)resolution,
                                  "read_cost_ns", read_cost, "clock", "CLOCK_MONOTONIC");
    if (out == NULL || fn == Py_None)
        return out;
    if (!PyCallable_Check(fn)) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_TypeError, "fn must be callable, got %.100s",
                            Py_TYPE(fn)->tp_name);
    }
    /* The loop of measure_host.c in miniature: two reads around a vectorcall. The minimum
     * over the calls is the floor a host-timed sample cannot go under. */
    uint64_t best = UINT64_MAX, total = 0;
    for (Py_ssize_t i = 0; i < calls; i++) {
        uint64_t t0 = kb_now_ns();
        PyObject *r = PyObject_CallNoArgs(fn);
        uint64_t t1 = kb_now_ns();
        if (r == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(r);
        total += t1 - t0;
        if (t1 - t0 < best)
            best = t1 - t0;
    }
    PyObject *v = PyFloat_FromDouble((double)total / (double)calls);
    PyObject *m = PyLong_FromUnsignedLongLong(best);
    if (v == NULL || m == NULL || PyDict_SetItemString(out, "call_overhead_mean_ns", v) < 0 ||
        PyDict_SetItemString(out, "call_overhead_min_ns", m) < 0) {
        Py_XDECREF(v);
        Py_XDECREF(m);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(v);
    Py_DECREF(m);
    return out;
}

static PyMethodDef clock_methods[] = {
    {"now_ns", now_ns, METH_NOARGS, "now_ns() -> int: the host monotonic clock in nanoseconds."},
    {"host_timer_info", (PyCFunction)(void (*)(void))host_timer_info, METH_VARARGS | METH_KEYWORDS,
     "host_timer_info(fn=None, calls=100000) -> dict: clock resolution and read cost; with fn, "
     "the host loop's per-sample overhead around calls of fn()."},
    {NULL, NULL, 0, NULL},
};

int kb_clock_module_init(PyObject *m) { return PyModule_AddFunctions(m, clock_methods); }
