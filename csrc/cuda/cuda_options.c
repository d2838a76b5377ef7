/* cuda_options.c -- measure_cuda's options: one typed struct (kb_cuda_options), its defaults
 * written here and only here (Python reads them as _core.CUDA_DEFAULTS), each option checked
 * once, with a message naming it. The loop's options (warmup_s, max_time_s, ...) are measure.c's.
 */
#include "cuda_backend.h"
#include "kb_options.h"

#define W "measure_cuda"     /* who the options' messages name */

#include <math.h>
#include <stdio.h>

static void cuda_options_defaults(kb_cuda_options *o)
{
    *o = (kb_cuda_options){.stream = NULL, .device = 0, .mode = KB_GPU_EVENTS,
                           .cold = KB_COLD_NONE, .flush_bytes = 0, .unroll = 1.0, .gate = 1,
                           .keep_busy = 1, .gate_batch = 32, .gate_timeout_s = 1.0,
                           .busy_warmup_s = -1.0, .cupti_allow_foreign = 0, .sample_clocks = 1,
                           .clock_period_s = 0.005, .settle_max_s = 4.0,
                           .regime = KB_REGIME_BURST, .pre_sample = NULL};
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
        "settle_max_s", o.settle_max_s, "regime",
        o.regime == KB_REGIME_BURST ? "burst" : "sustained", "pre_sample", Py_None,
        "callable_warmup_max_s", KB_CUDA_CALLABLE_WARMUP_MAX_S, "callable_warmup_min",
        (Py_ssize_t)KB_CUDA_CALLABLE_WARMUP_MIN);
    if (d == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "CUDA_DEFAULTS", d);
    Py_DECREF(d);
    return rc;
}

/* One of two names: *out = 0 for a, 1 for b; None keeps the default when none_ok. */
static int opt_choice(PyObject *opts, const char *key, const char *a, const char *b, int none_ok,
                      int *out)
{
    PyObject *v;
    int present = kb_opt_take(opts, key, &v);
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
    int present = kb_opt_take(opts, "stream", &v);
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
    return kb_opt_callable(opts, "measure_cuda", "pre_sample", &o->pre_sample);
}

int kb_cuda_options_parse(PyObject *opts, int fn_is_graph, Py_ssize_t n_sets,
                          kb_cuda_options *o)
{
    cuda_options_defaults(o);
    Py_ssize_t device = o->device;
    int mode = o->mode, regime = o->regime;
    if (opt_stream(opts, o) < 0 ||
        kb_opt_count(opts, W, "device", &device, 0, PY_SSIZE_T_MAX) < 0 ||
        kb_opt_count(opts, W, "flush_bytes", &o->flush_bytes, 0, PY_SSIZE_T_MAX) < 0 ||
        kb_opt_count(opts, W, "gate_batch", &o->gate_batch, 1, KB_GATE_BATCH_MAX) < 0 ||
        /* past 1e6 s the watchdog's deadline overflowed time_t and the thread spun */
        kb_opt_float(opts, W, "gate_timeout_s", &o->gate_timeout_s, 0.0, 1,
                     KB_GATE_TIMEOUT_MAX_S) < 0 ||
        kb_opt_float(opts, W, "busy_warmup_s", &o->busy_warmup_s, 0.0, 0,
                     KB_BUSY_WARMUP_MAX_S) < 0 ||
        kb_opt_float(opts, W, "unroll", &o->unroll, 1.0, 0, INFINITY) < 0 ||
        kb_opt_float(opts, W, "clock_period_s", &o->clock_period_s, 0.0, 1, INFINITY) < 0 ||
        kb_opt_float(opts, W, "settle_max_s", &o->settle_max_s, 0.0, 0, INFINITY) < 0 ||
        kb_opt_bool(opts, "gate", &o->gate) < 0 || kb_opt_bool(opts, "keep_busy", &o->keep_busy) < 0 ||
        kb_opt_bool(opts, "cupti_allow_foreign", &o->cupti_allow_foreign) < 0 ||
        kb_opt_bool(opts, "sample_clocks", &o->sample_clocks) < 0 ||
        opt_choice(opts, "mode", "events", "cupti", 0, &mode) < 0 ||
        opt_choice(opts, "regime", "sustained", "burst", 1, &regime) < 0 ||
        opt_pre_sample(opts, o) < 0 || kb_pop_cold_mode(opts, &o->cold) < 0)
        return -1;
    if (device > 63) {
        PyErr_Format(PyExc_ValueError, "measure_cuda: device must be a CUDA ordinal 0..63, "
                                       "got %zd", device);
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
