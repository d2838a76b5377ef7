/* cuda_options.c -- measure_cuda's options: one typed struct (kb_cuda_options), its defaults
 * written here and only here (Python reads them as _core.CUDA_DEFAULTS), each option checked
 * once, with a message naming it. The loop's options (warmup_s, max_time_s, ...) are measure.c's.
 */
#include "cuda_backend.h"
#include "kb_options.h"

#define W "measure_cuda"     /* who the options' messages name */

#include <math.h>
#include <stdio.h>

/* The schema's defaults (kb_schema.h), so _core.CUDA_DEFAULTS and the parser agree. */
static void cuda_options_defaults(kb_cuda_options *o)
{
    *o = (kb_cuda_options){
        .stream = NULL, .device = (int)KB_DEFAULT(device), .mode = (kb_gpu_mode)KB_DEFAULT(mode),
        .cold = KB_COLD_NONE, .flush_bytes = (Py_ssize_t)KB_DEFAULT(flush_bytes),
        .unroll = KB_DEFAULT(unroll), .gate = KB_DEFAULT(gate) != 0.0,
        .keep_busy = KB_DEFAULT(keep_busy) != 0.0,
        .gate_batch = (Py_ssize_t)KB_DEFAULT(gate_batch),
        .gate_timeout_s = KB_DEFAULT(gate_timeout_s), .busy_warmup_s = -1.0 /* None */,
        .cupti_allow_foreign = KB_DEFAULT(cupti_allow_foreign) != 0.0,
        .sample_clocks = KB_DEFAULT(sample_clocks) != 0.0,
        .clock_period_s = KB_DEFAULT(clock_period_s), .settle_max_s = KB_DEFAULT(settle_max_s),
        .regime = (kb_regime)KB_DEFAULT(regime), .pre_sample = NULL};
}

int kb_cuda_options_module_init(PyObject *m)
{
    PyObject *d = kb_schema_defaults(KB_ON_CUDA, 0);
    if (d == NULL)
        return -1;
    /* the callable path's warm-up bounds: constants of the backend, not options */
    PyObject *wmax = PyFloat_FromDouble(KB_CUDA_CALLABLE_WARMUP_MAX_S);
    PyObject *wmin = PyLong_FromSsize_t((Py_ssize_t)KB_CUDA_CALLABLE_WARMUP_MIN);
    int rc = (wmax && wmin && PyDict_SetItemString(d, "cold", Py_None) == 0 &&
              PyDict_SetItemString(d, "pre_sample", Py_None) == 0 &&
              PyDict_SetItemString(d, "callable_warmup_max_s", wmax) == 0 &&
              PyDict_SetItemString(d, "callable_warmup_min", wmin) == 0)
                 ? PyModule_AddObjectRef(m, "CUDA_DEFAULTS", d) : -1;
    Py_XDECREF(wmax);
    Py_XDECREF(wmin);
    Py_DECREF(d);
    return rc;
}

/* A choice option, by the schema's row: *out = the index of the name given among the row's
 * choices; None keeps the default when none_ok. */
static int opt_choice(PyObject *opts, const kb_opt_spec *spec, int none_ok, int *out)
{
    PyObject *v;
    int present = kb_opt_take(opts, spec->name, &v);
    if (present <= 0)
        return present;
    int rc = 0, k = -1;
    if (PyUnicode_Check(v)) {
        const char *text = PyUnicode_AsUTF8(v);
        if (text == NULL)
            rc = -1;
        else
            k = kb_spec_choice(spec, text);
    }
    if (k >= 0)
        *out = k;
    else if (rc == 0 && !(none_ok && v == Py_None)) {
        char names[96];
        kb_spec_choices_text(spec, names, sizeof names);
        PyErr_Format(PyExc_ValueError, "%s must be %s, got %R", spec->name, names, v);
        rc = -1;
    }
    Py_DECREF(v);
    return rc;
}

/* A number option by the schema's row: its name and range. */
static int opt_float(PyObject *opts, const kb_opt_spec *s, double *out)
{
    return kb_opt_float(opts, W, s->name, out, s->lo, (s->bounds & KB_LO_OPEN) != 0, s->hi);
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

/* plan= (kbench.bench's, _core.plan) decides the timer and the cold cache; without it the
 * low-level mode= and cold= do. Both at once is a TypeError: a plan is never re-decided. */
static int opt_plan(PyObject *m, PyObject *opts, int mode_given, int *mode, kb_cuda_options *o)
{
    int planned;
    if (kb_pop_plan(m, opts, KB_BACKEND_CUDA, W, &o->plan, &planned) < 0)
        return -1;
    if (!planned) {
        o->plan.measurement = *mode == KB_GPU_CUPTI ? KB_MEASURE_CUPTI : KB_MEASURE_EVENTS;
        o->plan.timer = *mode == KB_GPU_CUPTI ? KB_TIMER_CUPTI : KB_TIMER_EVENTS;
        return 0;
    }
    if (mode_given) {
        PyErr_SetString(PyExc_TypeError, "measure_cuda: mode= comes from plan=: give one or the "
                                         "other");
        return -1;
    }
    *mode = o->plan.timer == KB_TIMER_CUPTI ? KB_GPU_CUPTI : KB_GPU_EVENTS;
    return 0;
}

int kb_cuda_options_parse(PyObject *m, PyObject *opts, int fn_is_graph, Py_ssize_t n_sets,
                          kb_cuda_options *o)
{
    cuda_options_defaults(o);
    int mode_given = PyDict_GetItemString(opts, "mode") != NULL;
    Py_ssize_t device = o->device;
    int mode = o->mode, regime = o->regime;
    if (opt_stream(opts, o) < 0 ||
        kb_opt_count(opts, W, "device", &device, 0, PY_SSIZE_T_MAX) < 0 ||
        kb_opt_count(opts, W, "flush_bytes", &o->flush_bytes, (Py_ssize_t)KB_SPEC(flush_bytes)->lo,
                     kb_spec_count_hi(KB_SPEC(flush_bytes))) < 0 ||
        kb_opt_count(opts, W, "gate_batch", &o->gate_batch, (Py_ssize_t)KB_SPEC(gate_batch)->lo,
                     kb_spec_count_hi(KB_SPEC(gate_batch))) < 0 ||
        opt_float(opts, KB_SPEC(gate_timeout_s), &o->gate_timeout_s) < 0 ||
        opt_float(opts, KB_SPEC(busy_warmup_s), &o->busy_warmup_s) < 0 ||
        opt_float(opts, KB_SPEC(unroll), &o->unroll) < 0 ||
        opt_float(opts, KB_SPEC(clock_period_s), &o->clock_period_s) < 0 ||
        opt_float(opts, KB_SPEC(settle_max_s), &o->settle_max_s) < 0 ||
        kb_opt_bool(opts, "gate", &o->gate) < 0 || kb_opt_bool(opts, "keep_busy", &o->keep_busy) < 0 ||
        kb_opt_bool(opts, "cupti_allow_foreign", &o->cupti_allow_foreign) < 0 ||
        kb_opt_bool(opts, "sample_clocks", &o->sample_clocks) < 0 ||
        opt_choice(opts, KB_SPEC(mode), 0, &mode) < 0 ||
        opt_choice(opts, KB_SPEC(regime), 1, &regime) < 0 ||
        opt_pre_sample(opts, o) < 0 || opt_plan(m, opts, mode_given, &mode, o) < 0)
        return -1;
    o->cold = o->plan.cold;
    if (device > kb_spec_count_hi(KB_SPEC(device))) {
        PyErr_Format(PyExc_ValueError, "measure_cuda: device must be a CUDA ordinal 0..%zd, "
                                       "got %zd", kb_spec_count_hi(KB_SPEC(device)), device);
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
    /* under graph replays, the sets were captured into the graphs */
    if (o->cold == KB_COLD_ROTATE && n_sets < 2 && !fn_is_graph &&
        o->plan.measurement != KB_MEASURE_GRAPH) {
        PyErr_SetString(PyExc_ValueError,
                        "cold='rotate' needs at least 2 argument sets to rotate through");
        return -1;
    }
    return 0;
}

void kb_cuda_options_fini(kb_cuda_options *o) { Py_CLEAR(o->pre_sample); }
