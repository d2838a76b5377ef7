/* hip_options.c -- measure_hip's options (kb_hip_options): defaults written here, each option
 * checked once with a message naming it, by the helpers measure_cuda's use too (kb_options.h):
 * counts are ints (anything with __index__, never a bool), floats finite and in range, None
 * keeps a float's default. The loop's options (warmup_s, max_time_s, ranks, ...) are
 * measure.c's.
 */
#include "hip_backend.h"
#include "kb_options.h"

#define W "measure_hip"     /* who the options' messages name */

#include <math.h>
#include <stdio.h>

int kb_hip_device_arg(PyObject *v, const char *func, int *out)
{
    char what[80];
    Py_ssize_t d;
    snprintf(what, sizeof what, "%s: device", func);
    if (kb_as_count(v, what, &d, 1) < 0)
        return -1;
    if (d < 0 || d > KB_HIP_MAX_DEVICE) {
        PyErr_Format(PyExc_ValueError, "%s: device must be a HIP ordinal 0..%d, got %R", func,
                     KB_HIP_MAX_DEVICE, v);
        return -1;
    }
    *out = (int)d;
    return 0;
}

static int opt_stream(PyObject *opts, kb_hip_options *o)
{
    PyObject *v;
    int present = kb_opt_take(opts, "stream", &v);
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
    int present = kb_opt_take(opts, "device", &v);
    if (present <= 0)
        return present;
    int rc = kb_hip_device_arg(v, "measure_hip", &o->device);
    Py_DECREF(v);
    return rc;
}

/* pre_sample: None or a callable, called before every replay (kbench.distributed's barrier). */
static int opt_pre_sample(PyObject *opts, kb_hip_options *o)
{
    return kb_opt_callable(opts, W, "pre_sample", &o->pre_sample);
}

int kb_hip_options_parse(PyObject *opts, kb_hip_options *o)
{
    /* the schema's defaults and ranges (kb_schema.h), as measure_cuda's */
    *o = (kb_hip_options){.stream = 0, .device = (int)KB_DEFAULT(device),
                          .flush_bytes = (Py_ssize_t)KB_DEFAULT(flush_bytes),
                          .gate_batch = (Py_ssize_t)KB_DEFAULT(gate_batch),
                          .gate_timeout_s = KB_DEFAULT(gate_timeout_s),
                          .unroll = KB_DEFAULT(unroll), .gate = KB_DEFAULT(gate) != 0.0,
                          .pre_sample = NULL};
    const kb_opt_spec *fb = KB_SPEC(flush_bytes), *gb = KB_SPEC(gate_batch),
                      *gt = KB_SPEC(gate_timeout_s), *un = KB_SPEC(unroll);
    if (opt_stream(opts, o) < 0 || opt_device(opts, o) < 0 ||
        kb_opt_count(opts, W, fb->name, &o->flush_bytes, (Py_ssize_t)fb->lo,
                     kb_spec_count_hi(fb)) < 0 ||
        kb_opt_count(opts, W, gb->name, &o->gate_batch, (Py_ssize_t)gb->lo,
                     kb_spec_count_hi(gb)) < 0 ||
        kb_opt_float(opts, W, gt->name, &o->gate_timeout_s, gt->lo,
                     (gt->bounds & KB_LO_OPEN) != 0, gt->hi) < 0 ||
        kb_opt_float(opts, W, un->name, &o->unroll, un->lo, (un->bounds & KB_LO_OPEN) != 0,
                     un->hi) < 0 ||
        kb_opt_bool(opts, "gate", &o->gate) < 0 || opt_pre_sample(opts, o) < 0) {
        kb_hip_options_fini(o);
        return -1;
    }
    return 0;
}

void kb_hip_options_fini(kb_hip_options *o) { Py_CLEAR(o->pre_sample); }
