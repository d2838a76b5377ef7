/* cuda_options.c -- measure_cuda's options: one typed struct (kb_cuda_options), its defaults
 * written here and only here (Python reads them as _core.CUDA_DEFAULTS), each option checked
 * once, with a message naming it. The loop's options (warmup_s, max_time_s, ...) are measure.c's.
 */
#include "cuda_backend.h"

#include <math.h>
#include <stdio.h>

static void cuda_options_defaults(kb_cuda_options *o)
{
    *o = (kb_cuda_options){.stream = NULL, .device = 0, .mode = KB_GPU_EVENTS,
                           .cold = KB_COLD_NONE, .flush_bytes = 0, .unroll = 1.0, .gate = 1,
                           .keep_busy = 1, .gate_batch = 32, .gate_timeout_s = 1.0,
                           .busy_warmup_s = -1.0, .cupti_allow_foreign = 0, .sample_clocks = 1,
                           .clock_period_s = 0.005, .settle_max_s = 4.0,
                           .regime = KB_REGIME_SUSTAINED, .pre_sample = NULL};
}

int kb_cuda_options_module_init(PyObject *m)
{
    kb_cuda_options o;
    cuda_options_defaults(&o);
    PyObject *d = Py_BuildValue(
        "{s:i,s:s,s:O,s:n,s:d,s:O,s:O,s:n,s:d,s:O,s:O,s:O,s:d,s:d,s:s,s:O,s:d,s:n}", "device",
        o.device, "mode", "events", "cold", Py_None, "flush_bytes", o.flush_bytes, "unroll",
        o.unroll, "gate", o.gate ? Py_True : Py_False, "keep_busy",
        o.keep_busy ? Py_True : Py_False, "gate_batch", o.gate_batch, "gate_timeout_s",
        o.gate_timeout_s, "busy_warmup_s", Py_None, "cupti_allow_foreign",
        o.cupti_allow_foreign ? Py_True : Py_False, "sample_clocks",
        o.sample_clocks ? Py_True : Py_False, "clock_period_s", o.clock_period_s,
        "settle_max_s", o.settle_max_s, "regime", "sustained", "pre_sample", Py_None,
        "callable_warmup_max_s", KB_CUDA_CALLABLE_WARMUP_MAX_S, "callable_warmup_min",
        (Py_ssize_t)KB_CUDA_CALLABLE_WARMUP_MIN);
    if (d == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "CUDA_DEFAULTS", d);
    Py_DECREF(d);
    return rc;
}

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

/* An integer option >= lo (anything with __index__; a bool is refused). */
static int opt_count(PyObject *opts, const char *key, Py_ssize_t *out, Py_ssize_t lo)
{
    PyObject *v;
    int present = take(opts, key, &v);
    if (present <= 0)
        return present;
    int rc = -1;
    if (PyBool_Check(v) || !PyIndex_Check(v))
        PyErr_Format(PyExc_TypeError, "measure_cuda: %s must be an int, got %.100s", key,
                     Py_TYPE(v)->tp_name);
    else {
        Py_ssize_t n = PyNumber_AsSsize_t(v, PyExc_OverflowError);
        if (!(n == -1 && PyErr_Occurred())) {
            if (n < lo)
                PyErr_Format(PyExc_ValueError, "measure_cuda: %s must be >= %zd, got %R", key,
                             lo, v);
            else {
                *out = n;
                rc = 0;
            }
        }
    }
    Py_DECREF(v);
    return rc;
}

/* A float option: finite and > lo (>= lo when !open); None keeps the default. */
static int opt_float(PyObject *opts, const char *key, double *out, double lo, int open)
{
    PyObject *v;
    int present = take(opts, key, &v);
    if (present <= 0)
        return present;
    int rc = 0;
    if (v != Py_None) {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "measure_cuda: %s must be a number, got %.100s", key,
                         Py_TYPE(v)->tp_name);
            rc = -1;
        }
        else if (!isfinite(d) || (open ? d <= lo : d < lo)) {
            char bound[48];   /* PyErr_Format has no %g */
            snprintf(bound, sizeof bound, "%s %g and finite", open ? ">" : ">=", lo);
            PyErr_Format(PyExc_ValueError, "measure_cuda: %s must be %s, got %R", key, bound, v);
            rc = -1;
        }
        else
            *out = d;
    }
    Py_DECREF(v);
    return rc;
}

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

/* One of two names: *out = 0 for a, 1 for b; None keeps the default when none_ok. */
static int opt_choice(PyObject *opts, const char *key, const char *a, const char *b, int none_ok,
                      int *out)
{
    PyObject *v;
    int present = take(opts, key, &v);
    if (present <= 0)
        return present;
    int rc = 0;
    if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, a) == 0)
        *out = 0;
    else if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, b) == 0)
        *out = 1;
    else if (!(none_ok && v == Py_None)) {
        PyErr_Format(PyExc_ValueError, "%s must be '%s' or '%s', got %R", key, a, b, v);
        rc = -1;
    }
    Py_DECREF(v);
    return rc;
}

static int opt_stream(PyObject *opts, kb_cuda_options *o)
{
    PyObject *v;
    int present = take(opts, "stream", &v);
    if (present < 0)
        return -1;
    if (!present) {
        PyErr_SetString(PyExc_TypeError, "measure_cuda needs stream= (the stream handle the "
                                         "callable launches on; 0 for the legacy default)");
        return -1;
    }
    unsigned long long h = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (h == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    o->stream = (CUstream)(uintptr_t)h;
    return 0;
}

static int opt_pre_sample(PyObject *opts, kb_cuda_options *o)
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
        PyErr_Format(PyExc_TypeError, "measure_cuda: pre_sample must be a callable or None, "
                                      "got %.100s", Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    o->pre_sample = v;      /* the reference taken is the option's */
    return 0;
}

int kb_cuda_options_parse(PyObject *opts, int fn_is_graph, Py_ssize_t n_sets,
                          kb_cuda_options *o)
{
    cuda_options_defaults(o);
    Py_ssize_t device = o->device;
    int mode = o->mode, regime = o->regime;
    if (opt_stream(opts, o) < 0 || opt_count(opts, "device", &device, 0) < 0 ||
        opt_count(opts, "flush_bytes", &o->flush_bytes, 0) < 0 ||
        opt_count(opts, "gate_batch", &o->gate_batch, 1) < 0 ||
        opt_float(opts, "gate_timeout_s", &o->gate_timeout_s, 0.0, 1) < 0 ||
        opt_float(opts, "busy_warmup_s", &o->busy_warmup_s, 0.0, 0) < 0 ||
        opt_float(opts, "unroll", &o->unroll, 1.0, 0) < 0 ||
        opt_float(opts, "clock_period_s", &o->clock_period_s, 0.0, 1) < 0 ||
        opt_float(opts, "settle_max_s", &o->settle_max_s, 0.0, 0) < 0 ||
        opt_bool(opts, "gate", &o->gate) < 0 || opt_bool(opts, "keep_busy", &o->keep_busy) < 0 ||
        opt_bool(opts, "cupti_allow_foreign", &o->cupti_allow_foreign) < 0 ||
        opt_bool(opts, "sample_clocks", &o->sample_clocks) < 0 ||
        opt_choice(opts, "mode", "events", "cupti", 0, &mode) < 0 ||
        opt_choice(opts, "regime", "sustained", "burst", 1, &regime) < 0 ||
        opt_pre_sample(opts, o) < 0 || kb_pop_cold_mode(opts, &o->cold) < 0)
        return -1;
    if (device > 63) {
        PyErr_Format(PyExc_ValueError, "measure_cuda: device must be a CUDA ordinal 0..63, "
                                       "got %zd", device);
        return -1;
    }
    if (o->gate_timeout_s > KB_GATE_TIMEOUT_MAX_S) {
        /* a deadline past time_t's range made the watchdog spin (1e20 hung a bench) */
        char got[48];   /* PyErr_Format has no %g */
        snprintf(got, sizeof got, "%g", o->gate_timeout_s);
        PyErr_Format(PyExc_ValueError, "measure_cuda: gate_timeout_s must be at most %d s, "
                     "got %s", (int)KB_GATE_TIMEOUT_MAX_S, got);
        return -1;
    }
    o->device = (int)device;
    o->mode = (kb_gpu_mode)mode;
    o->regime = (kb_regime)regime;
    if (o->regime == KB_REGIME_BURST)
        o->keep_busy = 0;       /* bridges would keep the GPU loaded between bursts */
    if (o->pre_sample != NULL)
        o->keep_busy = 0;       /* a bridge is extra calls of fn: every rank must call fn the
                                 * same number of times, each after its pre_sample */
    if (o->cold == KB_COLD_ROTATE && n_sets < 2 && !fn_is_graph) {
        PyErr_SetString(PyExc_ValueError,
                        "cold='rotate' needs at least 2 argument sets to rotate through");
        return -1;
    }
    return 0;
}

void kb_cuda_options_fini(kb_cuda_options *o) { Py_CLEAR(o->pre_sample); }
