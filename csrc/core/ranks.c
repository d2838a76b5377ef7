/* ranks.c -- the timing loop's multi-rank agreement.
 *
 * A benchmark that spans ranks (processes of a torchrun or mpirun job) is timed on every rank;
 * the figure of a sample is the slowest rank's (the collective is done when the last rank is).
 * The loop (measure.c) hands each batch to the rank reducer, a Python object that
 * kbench.distributed builds over an existing engine (torch.distributed, mpi4py): its
 * reduce(stage, samples, values) gathers the batch from every rank, keeps the per-rank samples
 * and returns the per-sample maxima and the maxima of the loop's decision values. All ranks then
 * decide on the same numbers, so they take the same decisions and call fn equally often.
 */
#include "kbench.h"
#include "kb_numpy.h"

#include <string.h>

int kb_ranks_parse(PyObject *kw, kb_loop_config *cfg)
{
    cfg->ranks = NULL;
    if (kw == NULL)
        return 0;
    PyObject *v = PyDict_GetItemString(kw, "ranks");   /* borrowed */
    if (v == NULL)
        return 0;
    if (v != Py_None) {
        PyObject *reduce = PyObject_GetAttrString(v, "reduce");
        int ok = reduce != NULL && PyCallable_Check(reduce);
        Py_XDECREF(reduce);
        if (!ok) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "ranks must be None or a rank reducer with a reduce(stage, samples, "
                         "values) method (kbench.distributed builds one), got %.100s",
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        /* Borrowed: the caller's keyword dict holds it for the whole call (opts is a copy). */
        cfg->ranks = v;
    }
    return PyDict_DelItemString(kw, "ranks");
}

/* Copy a reducer's answer (any float64 sequence of exactly n values) into out. */
static int read_back(PyObject *obj, double *out, Py_ssize_t n, const char *what)
{
    if (n == 0)     /* nothing to read (kb_as_double_array refuses an empty array) */
        return 0;
    PyObject *arr = kb_as_double_array(obj, what);
    if (arr == NULL)
        return -1;
    Py_ssize_t got = PyArray_SIZE((PyArrayObject *)arr);
    if (got != n) {
        PyErr_Format(PyExc_ValueError, "the rank reducer returned %zd %s, expected %zd", got,
                     what, n);
        Py_DECREF(arr);
        return -1;
    }
    memcpy(out, PyArray_DATA((PyArrayObject *)arr), (size_t)n * sizeof(double));
    Py_DECREF(arr);
    return 0;
}

int kb_ranks_agree(const kb_loop_config *cfg, const char *stage, Py_ssize_t index,
                   double *samples, Py_ssize_t n, double *vals, int nv)
{
    if (cfg->ranks == NULL)
        return 0;
    PyObject *s = kb_array_copy(samples, n, NPY_FLOAT64, sizeof(double));
    PyObject *v = kb_array_copy(vals, nv, NPY_FLOAT64, sizeof(double));
    PyObject *r = NULL;
    if (s != NULL && v != NULL)
        r = PyObject_CallMethod(cfg->ranks, "reduce", "(s#nOO)", stage, (Py_ssize_t)strlen(stage),
                                index, s, v);
    Py_XDECREF(s);
    Py_XDECREF(v);
    if (r == NULL)
        return -1;
    int rc = -1;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2)
        PyErr_Format(PyExc_TypeError, "the rank reducer's reduce() must return (maxima, values), "
                     "got %.100s", Py_TYPE(r)->tp_name);
    else if (read_back(PyTuple_GET_ITEM(r, 0), samples, n, "per-sample maxima") == 0 &&
             read_back(PyTuple_GET_ITEM(r, 1), vals, nv, "decision values") == 0)
        rc = 0;
    Py_DECREF(r);
    return rc;
}
