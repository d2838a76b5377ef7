/* busy_time.c -- a call's GPU busy time: the union of the intervals of its activities.
 *
 * A call's kernels, memcpys and memsets run one after another on one stream, but not always:
 * a callable that forks work onto a second stream and joins it, a kernel launched with
 * programmatic dependent launch (it starts while its predecessor drains and waits inside), a
 * copy beside a kernel. Summing their durations counts the overlapped time twice; the span
 * (first start to last end) counts the idle gaps between dependent launches. The union counts
 * each nanosecond the device worked for the call once: the sum when nothing overlaps, the span
 * when nothing idles.
 */
#include "cuda_backend.h"

#include <stdlib.h>

static int cmp_span(const void *a, const void *b)
{
    const kb_span *x = a, *y = b;
    if (x->key != y->key)
        return (x->key > y->key) - (x->key < y->key);
    return (x->start > y->start) - (x->start < y->start);
}

size_t kb_busy_time(kb_span *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_span);
    size_t i = 0, out = 0;
    while (i < n) {
        uint64_t key = v[i].key, total = 0, lo = v[i].start, hi = v[i].end;
        for (i++; i < n && v[i].key == key; i++) {
            if (v[i].start > hi) {      /* a gap: close the merged run */
                total += hi - lo;
                lo = v[i].start;
                hi = v[i].end;
            } else if (v[i].end > hi) {
                hi = v[i].end;
            }
        }
        /* out < i: the compacted entries never overtake the group being read */
        v[out++] = (kb_span){.key = key, .start = 0, .end = total + (hi - lo)};
    }
    return out;
}

/* busy_time(keys, starts, ends) -> dict: for tests and for reading recorded activity: each key's
 * union of [start, end), in the units given. */
static PyObject *busy_time(PyObject *m, PyObject *args)
{
    PyObject *objs[3], *seqs[3] = {NULL, NULL, NULL}, *out = NULL;
    static const char *what[3] = {"keys", "starts", "ends"};
    kb_span *v = NULL;
    (void)m;
    if (!PyArg_ParseTuple(args, "OOO:busy_time", &objs[0], &objs[1], &objs[2]))
        return NULL;
    for (int k = 0; k < 3; k++)
        if ((seqs[k] = PySequence_Fast(objs[k], "busy_time: keys, starts and ends must be "
                                                "sequences of non-negative integers")) == NULL)
            goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seqs[0]);
    if (PySequence_Fast_GET_SIZE(seqs[1]) != n || PySequence_Fast_GET_SIZE(seqs[2]) != n) {
        PyErr_SetString(PyExc_ValueError, "busy_time: keys, starts and ends differ in length");
        goto done;
    }
    if ((v = calloc(n > 0 ? (size_t)n : 1, sizeof *v)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t x[3];
        for (int k = 0; k < 3; k++) {
            x[k] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seqs[k], i));
            if (x[k] == (uint64_t)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "busy_time: %s[%zd] is not a non-negative integer", what[k], i);
                goto done;
            }
        }
        if (x[2] < x[1]) {
            PyErr_Format(PyExc_ValueError, "busy_time: interval %zd ends before it starts", i);
            goto done;
        }
        v[i] = (kb_span){.key = x[0], .start = x[1], .end = x[2]};
    }
    size_t n_keys = kb_busy_time(v, (size_t)n);
    if ((out = PyDict_New()) == NULL)
        goto done;
    for (size_t k = 0; k < n_keys; k++) {
        PyObject *key = PyLong_FromUnsignedLongLong(v[k].key);
        PyObject *val = key ? PyLong_FromUnsignedLongLong(v[k].end) : NULL;
        int rc = val ? PyDict_SetItem(out, key, val) : -1;
        Py_XDECREF(key);
        Py_XDECREF(val);
        if (rc < 0) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    for (int k = 0; k < 3; k++)
        Py_XDECREF(seqs[k]);
    free(v);
    return out;
}

static PyMethodDef busy_time_methods[] = {
    {"busy_time", busy_time, METH_VARARGS,
     "busy_time(keys, starts, ends) -> dict\n\n"
     "Each key's busy time: the length of the union of its intervals [start, end), the way a "
     "CUPTI sample counts the activities of one call (overlapping ones once, the gaps between "
     "them not at all)."},
    {NULL, NULL, 0, NULL},
};

int kb_busy_time_module_init(PyObject *m) { return PyModule_AddFunctions(m, busy_time_methods); }
