/* clock.c -- the host clock: monotonic nanoseconds, the step it reads in, its read cost. */
#include "kbench.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

uint64_t kb_now_ns(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC is served by the vDSO (no syscall) and never jumps. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The step the host clock reads in, in seconds, probed from back-to-back reads (~50 us):
 *  - when reads repeat, the clock is coarser than a read: the smallest move is its step;
 *  - else the moves sit on levels one step apart (a VM's clock at 10 ns steps read in ~25 ns
 *    moves by 20 or 30 ns): the smallest gap between levels that hold at least 1/256 of the
 *    moves (values within 2 ns are one level: conversions round), each level at the mean of
 *    its moves, the gap rounded to the ns. A level's smallest value depends on which roundings
 *    showed up (a 9.6 ns step reads 19 or 20 for two steps, 28 or 29 for three: 9 or 10 ns),
 *    and two probes of the CI machine's clock read 9 and 10 ns; the means (19.2, 28.8) do not;
 *  - a clock whose moves spread without gaps reads in 1 ns, the unit of the samples; so does
 *    one with any populated run of moves wider than a level (2 ns: a stepped clock's moves
 *    all sit within a rounding of a multiple of its step). Without that, a fine clock's
 *    read-cost spread (18-35 ns on the 2-core Xeon VM) beside a cluster of slow reads was
 *    taken for levels 18 ns apart, now and then (an ASan run). A fine clock whose reads all
 *    fall within 2 ns, beside a populated cluster of slow reads, still reads as stepped: the
 *    moves cannot tell it from one.
 * 0 when the clock never moved. Samples on such steps can agree exactly, and a CI of zero
 * width from them says nothing finer than one step (kb_criterion.resolution). */
/* The step from n consecutive reads t (the rule above); d: room for n - 1 moves. */
static double step_from_reads(const uint64_t *t, size_t n_reads, uint64_t *d)
{
    size_t n = 0, repeats = 0;
    for (size_t i = 0; i + 1 < n_reads; i++) {
        if (t[i + 1] > t[i])
            d[n++] = t[i + 1] - t[i];
        else
            repeats++;
    }
    if (n == 0)
        return 0.0;
    qsort(d, n, sizeof d[0], cmp_u64);
    if (repeats > 0)
        return (double)d[0] * 1e-9;
    size_t min_count = n / 256 > 4 ? n / 256 : 4;
    double level = 0.0, gap = 0.0;
    for (size_t i = 0, j; i < n; i = j) {
        double sum = (double)d[i];
        for (j = i + 1; j < n && d[j] - d[j - 1] <= 2; j++)
            sum += (double)d[j];
        if (j - i < min_count)
            continue;
        if (d[j - 1] - d[i] > 2)        /* wider than a level: a run, so the clock is fine */
            return 1e-9;
        double mean = sum / (double)(j - i);
        if (level > 0 && (gap == 0 || mean - level < gap))
            gap = mean - level;
        level = mean;
    }
    gap = floor(gap + 0.5);
    return (gap >= 1 ? gap : 1) * 1e-9;
}

double kb_clock_step_s(PyObject *m)
{
    enum { READS = 2049 };
    kb_state *st = kb_get_state(m);
    if (st->clock_step_probed)
        return st->clock_step_s;
    uint64_t t[READS], d[READS - 1];
    for (int i = 0; i < READS; i++)
        t[i] = kb_now_ns();
    st->clock_step_s = step_from_reads(t, READS, d);
    st->clock_step_probed = 1;
    return st->clock_step_s;
}

/* _clock_step_from_reads(reads) -> seconds: the step rule on given clock readings (ns), for
 * tests (a real probe reads whatever clock the machine has). */
static PyObject *clock_step_from_reads(PyObject *self, PyObject *arg)
{
    /* a tuple: an item's __index__ cannot shrink it under the loop, as it could a list */
    PyObject *seq = PySequence_Check(arg) ? PySequence_Tuple(arg) : NULL;
    if (seq == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "_clock_step_from_reads needs a sequence of ints");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    uint64_t *t = PyMem_Calloc((size_t)n + 1, sizeof *t);
    uint64_t *d = PyMem_Calloc((size_t)n + 1, sizeof *d);
    PyObject *out = NULL;
    if (t == NULL || d == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyNumber_Index(PyTuple_GET_ITEM(seq, i));   /* numpy ints too */
        if (v == NULL)
            goto done;
        t[i] = PyLong_AsUnsignedLongLong(v);
        Py_DECREF(v);
        if (PyErr_Occurred())
            goto done;
    }
    out = PyFloat_FromDouble(step_from_reads(t, (size_t)n, d));
done:
    PyMem_Free(t);
    PyMem_Free(d);
    Py_DECREF(seq);
    return out;
}

/* Smallest positive move between two consecutive reads (a fine clock's read cost, a coarse
 * clock's step), and the mean cost of one read. */
static void measure_clock(uint64_t *min_move_ns, double *read_cost_ns)
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
    *min_move_ns = best == UINT64_MAX ? 0 : best;
}

static PyObject *now_ns(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(kb_now_ns());
}

/* host_timer_info(fn=None, calls=100000): the step the clock reads in (kb_clock_step_s, what
 * measure_host's loop uses), the smallest move between reads and the read cost, and when a
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

    uint64_t min_move;
    double read_cost, step_s = kb_clock_step_s(self);
    Py_BEGIN_ALLOW_THREADS
    measure_clock(&min_move, &read_cost);
    Py_END_ALLOW_THREADS

    /* resolution_ns: the step the loop's samples sit on (the process's one probe) */
    PyObject *out = Py_BuildValue("{s:K,s:K,s:d,s:s}", "resolution_ns",
                                  (unsigned long long)(step_s * 1e9 + 0.5), "min_move_ns",
                                  (unsigned long long)min_move, "read_cost_ns", read_cost,
                                  "clock", "CLOCK_MONOTONIC");
    if (out == NULL || fn == Py_None)
        return out;
    if (!PyCallable_Check(fn)) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_TypeError, "fn must be callable, got %.100s",
                            Py_TYPE(fn)->tp_name);
    }
    /* The loop of measure_host.c in miniature: two reads around a vectorcall. The minimum
     * over the calls is the floor a host-timed sample cannot go under. */
    uint64_t best = UINT64_MAX, total = 0, checked = kb_now_ns(), last = checked;
    for (Py_ssize_t i = 0; i < calls; i++) {
        /* a C callable never runs the eval breaker: every 10 ms (by the last call's end, no
         * read of its own) Ctrl-C is checked and other threads get the GIL (a signal sent from
         * one needs it) */
        if (last - checked > 10000000u) {
            Py_BEGIN_ALLOW_THREADS
            Py_END_ALLOW_THREADS
            if (PyErr_CheckSignals() < 0) {
                Py_DECREF(out);
                return NULL;
            }
            checked = last = kb_now_ns();
        }
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
        last = t1;
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
    {"_clock_step_from_reads", clock_step_from_reads, METH_O,
     "_clock_step_from_reads($module, reads, /)\n--\n\n"
     "_clock_step_from_reads(reads) -> float: the clock-step rule on given readings (ns)."},
    {"host_timer_info", (PyCFunction)(void (*)(void))host_timer_info, METH_VARARGS | METH_KEYWORDS,
     "host_timer_info(fn=None, calls=100000) -> dict: the step the clock reads in (the loop's),\n"
     "the smallest move between reads and the read cost; with fn, the host loop's per-sample\n"
     "overhead around calls of fn()."},
    {NULL, NULL, 0, NULL},
};

int kb_clock_module_init(PyObject *m) { return PyModule_AddFunctions(m, clock_methods); }
