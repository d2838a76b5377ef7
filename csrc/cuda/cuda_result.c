/* cuda_result.c -- measure_cuda()'s "cuda" dict: the per-sample arrays, clocks, gate, settle,
 * gaps, bridges and regime of one measurement, the verdicts on them (regime.c), then the timer
 * chain's own fields.
 */
#include "cuda_loop.h"
#include "kb_array.h"
#include "kb_numpy.h"

#include <math.h>

/* The regime's part of the result: how the clock/power state was reached and held. */
static PyObject *regime_dict(const cuda_ctx *c)
{
    return Py_BuildValue(
        "{s:s,s:O,s:d,s:n,s:{s:n,s:n,s:d,s:d,s:d,s:d,s:N,s:N,s:N}}", "name",
        c->opt.regime == KB_REGIME_BURST ? "burst" : "sustained", "clocks_locked",
        c->clocks_locked ? Py_True : Py_False, "loaded_s", c->loaded_s, "warmup_watchdog_fired",
        c->warmup_fired, "burst", "batches", c->burst_batches, "unrecovered",
        c->burst_unrecovered, "wait_s", c->burst_wait_s, "batch_s", BURST_BATCH_S, "rest",
        BURST_REST, "recover_max_s", BURST_RECOVER_MAX_S, "sm_mhz_min",
        c->burst_sm_n ? PyFloat_FromDouble(c->burst_sm_min) : Py_NewRef(Py_None), "sm_mhz_mean",
        c->burst_sm_n ? PyFloat_FromDouble(c->burst_sm_sum / (double)c->burst_sm_n)
                      : Py_NewRef(Py_None),
        "sm_mhz_max", c->burst_sm_n ? PyFloat_FromDouble(c->burst_sm_max) : Py_NewRef(Py_None));
}

static PyObject *finite_or_none(double v)
{
    return isfinite(v) ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

/* The settle dict's carry fields: what this measurement carried from the last one on the device
 * (carried_from_s_ago None: nothing; continued_s: the capped load time it continued), whether
 * that settled it, and what it leaves. */
static int settle_carry_fields(const cuda_ctx *c, PyObject *settle)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    if (settle == NULL)
        return -1;
    int carried = isfinite(c->carried_from_s_ago);
    return kb_dict_set_steal(settle, "carried_from_s_ago", finite_or_none(c->carried_from_s_ago)) ||
                   kb_dict_set_steal(settle, "carried_sm_mhz", finite_or_none(c->carry.sm_mhz)) ||
                   kb_dict_set_steal(settle, "carried_under_limit",
                                     carried ? PyBool_FromLong(c->carry.under_limit)
                                             : Py_NewRef(Py_None)) ||
                   kb_dict_set_steal(settle, "carried_loaded_s",
                                     finite_or_none(carried ? c->carry.loaded_s : NAN)) ||
                   kb_dict_set_steal(settle, "continued_s",
                                     finite_or_none(carried ? kb_settle_continued_s(&rule,
                                                                                    &c->carry)
                                                            : NAN)) ||
                   kb_dict_set_steal(settle, "by_carry",
                                     PyBool_FromLong(c->settled_by == KB_SETTLED_BY_CARRY)) ||
                   kb_dict_set_steal(settle, "at_max_clock",
                                     PyBool_FromLong(c->settled_by == KB_SETTLED_AT_MAX)) ||
                   kb_dict_set_steal(settle, "end_settled",
                                     PyBool_FromLong(c->end_settled != KB_UNSETTLED)) ||
                   kb_dict_set_steal(settle, "end_sm_mhz", finite_or_none(c->end_sm_mhz)) ||
                   kb_dict_set_steal(settle, "samples_while_settling",
                                     PyLong_FromSsize_t(c->tentative_kept)) ||
                   kb_dict_set_steal(settle, "kept_from_load_s",
                                     finite_or_none(c->tentative_kept > 0
                                                        ? c->tentative_from_s - c->load_start_s
                                                        : NAN))
               ? -1 : 0;
}

/* The settle dict's account of a second settle (kb_cuda_resettle): the limit reason that
 * ended the first settled state, and how far into the timed part it showed; None where the
 * first held. */
static int settle_again_fields(const cuda_ctx *c, PyObject *settle)
{
    uint64_t lowest = c->resettle_reasons & (~c->resettle_reasons + 1);
    if (settle == NULL)
        return -1;
    return kb_dict_set_steal(settle, "resettle_reason",
                             c->resettled ? PyUnicode_FromString(kb_clock_reason_name(lowest))
                                          : Py_NewRef(Py_None)) ||
                   kb_dict_set_steal(settle, "resettle_timed_s",
                                     finite_or_none(c->resettled ? c->resettle_timed_s : NAN))
               ? -1 : 0;
}

/* The regime's inputs from what the measurement recorded, and the clock summary's verdict. */
static kb_regime_inputs regime_inputs(const cuda_ctx *c, const kb_clock_verdict *cv, double busy)
{
    return (kb_regime_inputs){
        .burst = c->opt.regime == KB_REGIME_BURST, .clocks_locked = c->clocks_locked,
        .settled = c->settled, .settled_unlimited = c->settled_unlimited,
        .timed_limits = cv->limited, .settle_at_s = c->settled_at_s,
        .settle_max_s = c->opt.settle_max_s, .settle_sm_mhz = c->settled_mhz,
        .clocks_read = cv->state == KB_CLOCKS_READ, .timed_sm_median = cv->sm_median,
        .power_capped = kb_clock_power_capped(cv), .cold = c->opt.cold != KB_COLD_NONE,
        .busy_fraction = busy, .batches = c->burst_batches, .unrecovered = c->burst_unrecovered,
        .recover_max_s = BURST_RECOVER_MAX_S,
        .start_sm_min = c->burst_sm_n ? c->burst_sm_min : NAN,
        .start_sm_max = c->burst_sm_n ? c->burst_sm_max : NAN};
}

/* The record's verdicts (regime.c), added to `cuda`: clocks_summary (the timed part's NVML
 * samples summarised), gpu_timed_fraction, gpu_busy_fraction, power_capped, and regime's held,
 * why (and note). */
static int add_verdicts(const cuda_ctx *c, PyObject *cuda, double sampling_s)
{
    PyObject *held[KB_CLOCK_SAMPLES_HELD];
    PyObject *clocks = PyDict_GetItemString(cuda, "clocks");
    kb_clock_samples samples;
    kb_clock_verdict cv;
    kb_regime_verdict rv;
    if (kb_clock_samples_from_dict(clocks, NAN, &samples, held) < 0)
        return -1;
    kb_clock_summary(&samples, &cv);
    PyObject *summary = kb_clock_verdict_dict(&cv, &samples, clocks);
    kb_clock_samples_release(held);
    double timed = kb_timed_fraction(c->side.events_s, (size_t)c->side.n, c->opt.unroll,
                                     sampling_s);
    double busy = kb_busy_fraction(timed, c->bridge_gpu_s, sampling_s);
    kb_regime_inputs in = regime_inputs(c, &cv, busy);
    kb_regime_judge(&in, &rv);
    if (summary == NULL ||
        (rv.clocks_steady >= 0 &&
         kb_dict_set_steal(summary, "steady", PyBool_FromLong(rv.clocks_steady)) < 0)) {
        Py_XDECREF(summary);
        return -1;
    }
    return kb_dict_set_steal(cuda, "clocks_summary", summary) < 0 ||
                   kb_dict_set_steal(cuda, "gpu_timed_fraction", finite_or_none(timed)) < 0 ||
                   kb_dict_set_steal(cuda, "gpu_busy_fraction", finite_or_none(busy)) < 0 ||
                   kb_dict_set_steal(cuda, "power_capped",
                                     PyBool_FromLong(in.power_capped)) < 0 ||
                   kb_regime_verdict_into(&rv, PyDict_GetItemString(cuda, "regime")) < 0
               ? -1 : 0;
}

/* The "cuda" dict of the result: per-sample arrays, clocks, gate, settle, gaps, bridges,
 * regime, the verdicts on them (add_verdicts), then the timer's own fields (CUPTI's names,
 * flushes, ...). */
PyObject *kb_cuda_result_dict(cuda_ctx *c, const char *backend, double sampling_s)
{
    PyObject *clocks = Py_None;
    if (c->sampler != NULL) {
        clocks = kb_nvml_sampler_stop(c->m, c->sampler);
        c->sampler = NULL;
        if (clocks == NULL) {
            PyErr_Clear();
            clocks = Py_None;
        }
    }
    else
        Py_INCREF(clocks);
    const side_arrays *sd = &c->side;
    PyObject *cuda = Py_BuildValue(
        "{s:s,s:N,s:N,s:N,s:N,s:N,s:O,s:N,s:{s:O,s:n,s:n,s:n,s:n,s:d,s:n},s:n,s:n,s:d,s:K,s:O,s:d,s:d,"
        "s:i,s:K,s:{s:O,s:d,s:d,s:d,s:d,s:d},s:{s:n,s:d,s:d}}",
        "backend", backend,
        "events_s", kb_array_copy(sd->events_s, sd->n, NPY_FLOAT64, sizeof(double)),
        "span_s", kb_array_copy(sd->span_s, sd->n, NPY_FLOAT64, sizeof(double)),
        "summed_s", kb_array_copy(sd->summed_s, sd->n, NPY_FLOAT64, sizeof(double)),
        "kernels_per_iter", kb_array_copy(sd->kernels, sd->n, NPY_UINT32, sizeof(uint32_t)),
        "copies_per_iter", kb_array_copy(sd->copies, sd->n, NPY_UINT32, sizeof(uint32_t)),
        "names", Py_None, "clocks", clocks,
        "gate", "enabled", c->opt.gate ? Py_True : Py_False, "batch", c->gate_cap_initial,
        "batch_final", c->gate_cap, "watchdog_fired", c->gate_fired, "fired_kept",
        c->gate_fired_kept, "timeout_s", c->opt.gate_timeout_s, "sub_batches", c->sub_batches,
        "flush_bytes", (Py_ssize_t)c->flusher.bytes, "arg_sets", c->n_sets,
        "unroll", c->opt.unroll, "persisting_l2_limit_bytes",
        (unsigned long long)c->persisting_limit, "cupti_foreign_subscriber", Py_False,
        "cupti_ticks_per_ns", 1.0, "busy_warmup_s", c->busy_s_done, "device", c->opt.device,
        "cupti_dropped", 0ULL,
        "settle", "settled", c->settled < 0 ? Py_None : c->settled ? Py_True : Py_False,
        "at_s", c->settled_at_s, "sm_mhz", c->settled_mhz, "max_s", c->opt.settle_max_s,
        "min_sampling_s", c->settle_min_sampling_s,
        /* where the callable's load (last) began, in the NVML sampler's time, as its mark_s */
        "load_start_s", c->load_started ? c->load_start_s : NAN,
        "between_batches", "n", c->gaps, "total_s", c->gap_sum_s, "max_s", c->gap_max_s);
    if (cuda == NULL)
        return NULL;
    if (kb_dict_set_steal(cuda, "keep_busy",
                          Py_BuildValue("{s:O,s:n,s:n,s:d,s:d,s:d}", "enabled",
                                        c->opt.keep_busy ? Py_True : Py_False, "bridges",
                                        c->bridges, "iterations", c->bridge_iters, "gpu_s",
                                        c->bridge_gpu_s, "turnaround_s", c->turnaround_s,
                                        "turnaround_end_s", c->turnaround_end_s)) < 0 ||
        kb_dict_set_steal(cuda, "regime", regime_dict(c)) < 0 ||
        kb_dict_set_steal(cuda, "stepped_min_sampling_s",
                          PyFloat_FromDouble(c->stepped ? KB_STEPPED_MIN_SAMPLING_S : 0.0)) < 0 ||
        kb_dict_set_steal(cuda, "callable_warmup_max_s",
                          PyFloat_FromDouble(c->callable_warmup_max_s)) < 0 ||
        settle_carry_fields(c, PyDict_GetItemString(cuda, "settle")) < 0 ||
        settle_again_fields(c, PyDict_GetItemString(cuda, "settle")) < 0 ||
        kb_dict_set_steal(cuda, "cupti_setup",
                          c->cupti ? Py_BuildValue("{s:d,s:d,s:d}", "begin_s", c->cupti_begin_s,
                                                   "first_read_s", c->cupti_first_read_s,
                                                   "total_s", c->cupti_begin_s +
                                                                  c->cupti_first_read_s)
                                   : Py_NewRef(Py_None)) < 0 ||
        kb_dict_set_steal(cuda, "pre_sample", PyBool_FromLong(c->opt.pre_sample != NULL)) < 0 ||
        add_verdicts(c, cuda, sampling_s) < 0 || c->timer->report(c->timer, cuda) < 0) {
        Py_DECREF(cuda);
        return NULL;
    }
    return cuda;
}
