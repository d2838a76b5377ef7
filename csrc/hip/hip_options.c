/* hip_options.c -- measure_hip's options (kb_hip_options): defaults written here, each option
 * checked once with a message naming it, the same way as measure_cuda's (csrc/cuda/
 * cuda_options.c, whose helpers are private to that file: mirrored here): counts are ints
 * (anything with __index__, never a bool), floats finite and in range, None keeps a float's
 * default. The loop's options (warmup_s, max_time_s, ranks, ...) are measure.c's.
 */
#include "hip_backend.h"

#include <math.h>
#include <stdio.h>

/* Take opts[key] out of opts into *v (a new reference the caller releases): 1 when present,
 * 0 when absent, -1 with an exception. */
static int take(PyObject *opts, const char *key, PyObject **v)
{
    *v = PyDict_GetItemString(opts, key);
    if (*v == NULL)
        return 0;
    Py_INCREF(*v);
    if (PyDict_DelItemString(opts, key) < 0) {
        Py_CLEAR(*v);
        return -1;
    }
    return 1;
}

/* v as a Py_ssize_t: an int (anything with __index__), not a bool; TypeError naming `what`
 * otherwise. clip: a value past Py_ssize_t is clipped (for a range check after) instead of
 * raising OverflowError. */
static int as_count(PyObject *v, const char *what, Py_ssize_t *out, int clip)
{
    if (PyBool_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", what,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    *out = PyNumber_AsSsize_t(v, clip ? NULL : PyExc_OverflowError);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

int kb_hip_device_arg(PyObject *v, const char *func, int *out)
{
    char what[80];
    Py_ssize_t d;
    snprintf(what, sizeof what, "%s: device", func);
    if (as_count(v, what, &d, 1) < 0)
        return -1;
    if (d < 0 || d > KB_HIP_MAX_DEVICE) {
        PyErr_Format(PyExc_ValueError, "%s: device must be a HIP ordinal 0..%d, got %R", func,
                     KB_HIP_MAX_DEVICE, v);
        return -1;
    }
    *out = (int)d;
    return 0;
}

/* An integer option in lo..hi. */
static int opt_count(PyObject *opts, const char *key, Py_ssize_t *out, Py_ssize_t lo,
                     Py_ssize_t hi)
{
    PyObject *v;
    char what[64];
    int present = take(opts, key, &v);
    if (present <= 0)
        return present;
    Py_ssize_t n;
    snprintf(what, sizeof what, "measure_hip: %s", key);
    int rc = as_count(v, what, &n, 0);
    if (rc == 0 && (n < lo || n > hi)) {
        if (hi == PY_SSIZE_T_MAX)
            PyErr_Format(PyExc_ValueError, "measure_hip: %s must be >= %zd, got %R", key, lo, v);
        else
            PyErr_Format(PyExc_ValueError, "measure_hip: %s must be %zd..%zd, got %R", key, lo,
                         hi, v);
        rc = -1;
    }
    if (rc == 0)
        *out = n;
    Py_DECREF(v);
    return rc;
}

/* A float option: finite, > lo (>= lo when !open) and <= hi; None keeps the default. */
static int opt_float(PyObject *opts, const char *key, double *out, double lo, int open, double hi)
{
    PyObject *v;
    int present = take(opts, key, &v);
    if (present <= 0 || v == Py_None) {
        Py_XDECREF(v);
        return present < 0 ? -1 : 0;
    }
    int rc = -1;
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "measure_hip: %s must be a number, got %.100s", key,
                     Py_TYPE(v)->tp_name);
    }
    else if (!isfinite(d) || (open ? d <= lo : d < lo) || d > hi) {
        char bound[96];   /* PyErr_Format has no %g */
        int n = snprintf(bound, sizeof bound, "%s %g and finite", open ? ">" : ">=", lo);
        if (isfinite(hi) && n > 0 && (size_t)n < sizeof bound)
            snprintf(bound + n, sizeof bound - (size_t)n, ", at most %g", hi);
        PyErr_Format(PyExc_ValueError, "measure_hip: %s must be %s, got %R", key, bound, v);
    }
    else {
        *out = d;
        rc = 0;
    }
    Py_DECREF(v);
    return rc;
}

/* A truth value (CUDA's rule: any object's truth; None is false). */
static int opt_bool(PyObject *opts, const char *key, int *out)
{
    PyObject *v;
    int present = take(opts, key, &v);
    if (present <= 0)
        return present;
    int b = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (b < 0)
        return -1;
    *out = b;
    return 0;
}

static int opt_stream(PyObject *opts, kb_hip_options *o)
{
    PyObject *v;
    int present = take(opts, "stream", &v);
    if (present < 0)
        return -1;
    if (!present) {
        PyErr_SetString(PyExc_TypeError, "measure_hip needs stream= (a hipStream_t handle)");
        return -1;
    }
    o->stream = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (o->stream == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    return 0;
}

static int opt_device(PyObject *opts, kb_hip_options *o)
{
    PyObject *v;
    int present = take(opts, "device", &v);
    if (present <= 0)
        return present;
    int rc = kb_hip_device_arg(v, "measure_hip", &o->device);
    Py_DECREF(v);
    return rc;
}

/* pre_sample: None or a callable, called before every replay (kbench.distributed's barrier). */
static int opt_pre_sample(PyObject *opts, kb_hip_options *o)
{
    PyObject *v;
    int present = take(opts, "pre_sample", &v);
    if (present < 0)
        return -1;
    if (!present || v == Py_None) {
        Py_XDECREF(v);
        return 0;
    }
    if (!PyCallable_Check(v)) {
        PyErr_Format(PyExc_TypeError, "measure_hip: pre_sample must be a callable or None, "
                                      "got %.100s", Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    o->pre_sample = v;      /* the reference taken is the option's */
    return 0;
}

int kb_hip_options_parse(PyObject *opts, kb_hip_options *o)
{
    *o = (kb_hip_options){.stream = 0, .device = 0, .flush_bytes = 0, .gate_batch = 32,
                          .gate_timeout_s = 1.0, .unroll = 1.0, .gate = 1, .pre_sample = NULL};
    if (opt_stream(opts, o) < 0 || opt_device(opts, o) < 0 ||
        opt_count(opts, "flush_bytes", &o->flush_bytes, 0, PY_SSIZE_T_MAX) < 0 ||
        opt_count(opts, "gate_batch", &o->gate_batch, 1, KB_HIP_GATE_BATCH_MAX) < 0 ||
        opt_float(opts, "gate_timeout_s", &o->gate_timeout_s, 0.0, 1,
                  KB_HIP_GATE_TIMEOUT_MAX_S) < 0 ||
        opt_float(opts, "unroll", &o->unroll, 1.0, 0, INFINITY) < 0 ||
        opt_bool(opts, "gate", &o->gate) < 0 || opt_pre_sample(opts, o) < 0) {
        kb_hip_options_fini(o);
        return -1;
    }
    return 0;
}

void kb_hip_options_fini(kb_hip_options *o) { Py_CLEAR(o->pre_sample); }
