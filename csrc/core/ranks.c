/* ranks.c -- the multi-rank agreement, a wrapper around a backend.
 *
 * A benchmark that spans ranks (processes of a torchrun or mpirun job) is timed on every rank;
 * the figure of a sample is the slowest rank's (the collective is done when the last rank is).
 * The rank reducer is a Python object that kbench.distributed builds over an existing engine
 * (torch.distributed, mpi4py): its reduce(stage, index, samples, values) gathers one step
 * from every rank, keeps the per-rank samples and returns the per-sample maxima and the
 * maxima of the values.
 *
 * kb_ranks_wrap puts a backend behind a rank wrapper (a kb_backend too): each batch's samples
 * become their per-sample maxima, keep_warming's answer is agreed, the backend's timer step and
 * sampling floor are agreed after every batch, and the wrapper's clock (now) is the agreed
 * one: the slowest rank's elapsed time at the last agreed step. Every decision the loop
 * (measure.c) takes reads the wrapper's numbers, so all ranks take the same decisions and
 * call fn equally often, and the loop knows nothing of ranks. Settling on kept samples and
 * settling again (settled_keep, resettle) are per-rank decisions: the wrapper offers neither.
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

/* Hand one step to ranks.reduce(stage, index, samples, values): samples[0..n) (n may be 0)
 * become their per-sample MAX across ranks, vals[0..nv) their MAX (an OR of 0/1 flags;
 * elapsed times agree on the slowest rank's). `stage` ("warmup batch", "sample batch", ...)
 * and `index` name the step in the reducer's stage markers and errors. */
static int agree(PyObject *ranks, const char *stage, Py_ssize_t index, double *samples,
                 Py_ssize_t n, double *vals, int nv)
{
    PyObject *s = kb_array_copy(samples, n, NPY_FLOAT64, sizeof(double));
    PyObject *v = kb_array_copy(vals, nv, NPY_FLOAT64, sizeof(double));
    PyObject *r = NULL;
    if (s != NULL && v != NULL)
        r = PyObject_CallMethod(ranks, "reduce", "(s#nOO)", stage, (Py_ssize_t)strlen(stage),
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

/* ------------------------------------------------------------------ the wrapper */

#define WRAPPER(b) ((kb_rank_wrapper *)(b)->ctx)

/* After a step: the inner backend's timer step and floor, agreed (vals[1], vals[2]), and the
 * agreed clock (vals[0]). */
static void take_agreed(kb_backend *b, const double vals[3])
{
    kb_rank_wrapper *w = WRAPPER(b);
    if (vals[0] > w->agreed_now)    /* a clock: never back (each rank's own runs forward) */
        w->agreed_now = vals[0];
    b->resolution_s = vals[1];
    b->min_sampling_s = vals[2];
}

static void local_values(const kb_rank_wrapper *w, double vals[3])
{
    vals[0] = kb_now_s() - w->origin;
    vals[1] = w->inner->resolution_s;
    vals[2] = w->inner->min_sampling_s;
}

static int rank_run_batch(kb_backend *b, Py_ssize_t n, double *out, int kind)
{
    kb_rank_wrapper *w = WRAPPER(b);
    double vals[3];
    if (kind == KB_BATCH_SAMPLE && !w->sampling) {
        /* the warm-up is over on every rank (the reducer names the barriers by phase) */
        w->sampling = 1;
        local_values(w, vals);
        if (agree(w->ranks, "warmup end", w->steps++, NULL, 0, vals, 3) < 0)
            return -1;
        take_agreed(b, vals);
    }
    memset(out, 0, (size_t)n * sizeof(double));   /* an untimed batch leaves them unwritten */
    if (w->inner->run_batch(w->inner, n, out, kind) < 0)
        return -1;
    local_values(w, vals);
    if (agree(w->ranks, kind == KB_BATCH_SAMPLE ? "sample batch" : "warmup batch", w->steps++,
              out, n, vals, 3) < 0)
        return -1;
    take_agreed(b, vals);
    return 0;
}

static int rank_keep_warming(kb_backend *b, double elapsed_s)
{
    kb_rank_wrapper *w = WRAPPER(b);
    double more = w->inner->keep_warming(w->inner, elapsed_s);
    if (more < 0 || agree(w->ranks, "keep_warming", w->steps++, NULL, 0, &more, 1) < 0)
        return -1;
    return (int)more;
}

static double rank_now(kb_backend *b) { return WRAPPER(b)->agreed_now; }

kb_backend *kb_ranks_wrap(const kb_loop_config *cfg, kb_backend *inner, kb_rank_wrapper *w)
{
    if (cfg->ranks == NULL)
        return inner;
    *w = (kb_rank_wrapper){.inner = inner, .ranks = cfg->ranks, .origin = kb_now_s()};
    w->backend = (kb_backend){
        .name = inner->name, .ctx = w, .run_batch = rank_run_batch,
        .keep_warming = inner->keep_warming ? rank_keep_warming : NULL, .now = rank_now,
        .min_sampling_s = inner->min_sampling_s, .resolution_s = inner->resolution_s,
        .warmup_timed = inner->warmup_timed, .prompt_stop = inner->prompt_stop,
        .min_batch_s = inner->min_batch_s};
    return &w->backend;
}
