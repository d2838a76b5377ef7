/* measure.c -- the backend-independent timing loop.
 *
 * Warm up (until per-call times are stable, or by time, or until the backend has settled), then
 * ask the backend for batches of samples, growing the batch while the stopping rule is not met,
 * until the rule is satisfied or a cap is reached. Backends (host,
 * CUDA events, CUPTI, graph replay) only time batches; everything about when to stop lives here,
 * so every backend stops by the same rules and reports the same way.
 */
#include "kbench.h"
#include "kb_numpy.h"
#include "kb_array.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The loop's options, their defaults and ranges: the option schema's rows (kb_schema.h). */

/* Pop kw[spec's name] as a finite double in the row's range. Absent: *out untouched. */
static int pop_double(PyObject *kw, const kb_opt_spec *spec, double *out)
{
    const char *key = spec->name;
    if (kw == NULL)
        return 0;
    PyObject *v = PyDict_GetItemString(kw, key); /* borrowed */
    if (v == NULL)
        return 0;
    if (PyBool_Check(v)) {      /* target=True ran at 1.0, warmup_s=True for 1 s */
        PyErr_Format(PyExc_TypeError, "%s must be a number, got bool", key);
        return -1;
    }
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Format(PyExc_ValueError, "%s must be finite, got an int beyond a float's range",
                     key);
        return -1;
    }
    if (d == -1.0 && PyErr_Occurred()) {
        if (kb_err_is_refusal())
            PyErr_Format(PyExc_TypeError, "%s must be a number, got %.100s", key,
                         Py_TYPE(v)->tp_name);
        return -1;
    }
    int lo_open = (spec->bounds & KB_LO_OPEN) != 0, hi_open = (spec->bounds & KB_HI_OPEN) != 0;
    double lo = spec->lo, hi = spec->hi;
    if (!isfinite(d) || (lo_open ? d <= lo : d < lo) || (hi_open ? d >= hi : d > hi)) {
        char bounds[64];   /* PyErr_Format has no %g */
        if (isfinite(hi))
            snprintf(bounds, sizeof bounds, "%s %g and %s %g", lo_open ? ">" : ">=", lo,
                     hi_open ? "<" : "<=", hi);
        else
            snprintf(bounds, sizeof bounds, "%s %g and finite", lo_open ? ">" : ">=", lo);
        PyErr_Format(PyExc_ValueError, "%s must be %s, got %R", key, bounds, v);
        return -1;
    }
    *out = d;
    return PyDict_DelItemString(kw, key);
}

/* Pop kw[spec's name] as an integer >= the row's lowest: a Python int or anything with
 * __index__ (numpy integers), never a bool or a float. Absent: *out untouched. */
static int pop_count(PyObject *kw, const kb_opt_spec *spec, Py_ssize_t *out)
{
    const char *key = spec->name;
    Py_ssize_t lo = (Py_ssize_t)spec->lo;
    if (kw == NULL)
        return 0;
    PyObject *v = PyDict_GetItemString(kw, key);
    if (v == NULL)
        return 0;
    if (PyBool_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", key, Py_TYPE(v)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyNumber_AsSsize_t(v, NULL);   /* clamps past the range: the bound says it */
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < lo) {
        PyErr_Format(PyExc_ValueError, "%s must be >= %zd, got %R", key, lo, v);
        return -1;
    }
    *out = n;
    return PyDict_DelItemString(kw, key);
}

/* The loop's defaults: the schema's, so Python's _core.LOOP_DEFAULTS reads the same. */
static void loop_config_defaults(kb_loop_config *cfg)
{
    cfg->warmup_s = KB_DEFAULT(warmup_s);
    cfg->warmup_min = (Py_ssize_t)KB_DEFAULT(warmup_min);
    cfg->warmup_tol = KB_DEFAULT(warmup_tol);
    cfg->min_samples = (Py_ssize_t)KB_DEFAULT(min_samples);
    cfg->max_samples = (Py_ssize_t)KB_DEFAULT(max_samples);
    cfg->max_time_s = KB_DEFAULT(max_time_s);
    cfg->budget = 1;
    cfg->target = KB_DEFAULT(target);
    cfg->ci_level = KB_DEFAULT(ci_level);
    snprintf(cfg->criterion, sizeof cfg->criterion, "%s", KB_SPEC(criterion)->text);
    cfg->batch_max = (Py_ssize_t)KB_DEFAULT(batch_max);
}

/* _after_fork_in_child(): a forked child starts with the lock free. A thread of the parent
 * that was measuring at the fork does not exist in the child, and the lock it held would never
 * be released: every bench of the child waited forever. kbench/__init__.py registers this with
 * os.register_at_fork. The old lock is left allocated (freeing a held lock is not defined). */
static PyObject *after_fork_in_child(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    kb_state *st = kb_get_state(m);
    if (st->measure_owner != 0 && kb_measure_lock_init(st) < 0)
        return NULL;
    st->measure_owner = 0;
    Py_RETURN_NONE;
}

static PyMethodDef loop_methods[] = {
    {"_after_fork_in_child", after_fork_in_child, METH_NOARGS,
     "Reset kbench's measurement lock in a forked child (os.register_at_fork)."},
    {NULL, NULL, 0, NULL},
};

int kb_loop_module_init(PyObject *m)
{
    PyObject *d = kb_schema_defaults(KB_ON_ALL, 1);
    if (d == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "LOOP_DEFAULTS", d);
    Py_DECREF(d);
    return rc < 0 ? rc : PyModule_AddFunctions(m, loop_methods);
}

int kb_loop_config_parse(PyObject *kw, kb_loop_config *cfg)
{
    loop_config_defaults(cfg);

    int target_given = kw != NULL && PyDict_GetItemString(kw, "target") != NULL;
    if (target_given) {     /* a precision asked for: waited for, up to the old cap */
        cfg->budget = 0;
        cfg->max_time_s = KB_SPEC(max_time_s)->with_target;
        cfg->warmup_s = KB_SPEC(warmup_s)->with_target;
    }
    if (kb_ranks_parse(kw, cfg) < 0 ||
        pop_double(kw, KB_SPEC(warmup_s), &cfg->warmup_s) < 0 ||
        pop_count(kw, KB_SPEC(warmup_min), &cfg->warmup_min) < 0 ||
        pop_double(kw, KB_SPEC(warmup_tol), &cfg->warmup_tol) < 0 ||
        pop_count(kw, KB_SPEC(min_samples), &cfg->min_samples) < 0 ||
        pop_count(kw, KB_SPEC(max_samples), &cfg->max_samples) < 0 ||
        pop_double(kw, KB_SPEC(max_time_s), &cfg->max_time_s) < 0 ||
        pop_double(kw, KB_SPEC(target), &cfg->target) < 0 ||
        pop_double(kw, KB_SPEC(ci_level), &cfg->ci_level) < 0 ||
        pop_count(kw, KB_SPEC(batch_max), &cfg->batch_max) < 0)
        return -1;
    if (cfg->min_samples > cfg->max_samples) {
        PyErr_Format(PyExc_ValueError, "min_samples (%zd) must not exceed max_samples (%zd)",
                     cfg->min_samples, cfg->max_samples);
        return -1;
    }
    if (kw != NULL) {
        PyObject *v = PyDict_GetItemString(kw, "criterion");
        if (v != NULL) {
            Py_ssize_t len = 0;
            const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &len) : NULL;
            if (s == NULL) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "criterion must be a str, got %.100s",
                                 Py_TYPE(v)->tp_name);
                return -1;
            }
            /* "ci\0garbage" ran as 'ci' */
            if ((size_t)len != strlen(s) || strlen(s) >= sizeof cfg->criterion) {
                PyErr_Format(PyExc_ValueError, "unknown criterion %R", v);
                return -1;
            }
            strcpy(cfg->criterion, s);
            if (PyDict_DelItemString(kw, "criterion") < 0)
                return -1;
        }
    }
    /* nvbench's entropy rule stops when the entropy's slope is under ~0.048 degrees. */
    if (!target_given && strcmp(cfg->criterion, "entropy") == 0)
        cfg->target = 8.4e-4;
    /* Validate the rule's name now, before any work is done. */
    kb_criterion probe;
    if (kb_criterion_init(&probe, cfg->criterion, cfg->target, cfg->ci_level) < 0)
        return -1;
    kb_criterion_fini(&probe);
    return 0;
}

int kb_check_arg_sets(PyObject *arg_sets, PyObject *kwargs)
{
    if (!PyTuple_Check(arg_sets) || PyTuple_GET_SIZE(arg_sets) == 0) {
        PyErr_SetString(PyExc_TypeError, "arg_sets must be a non-empty tuple of tuples");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(arg_sets); i++)
        if (!PyTuple_Check(PyTuple_GET_ITEM(arg_sets, i))) {
            PyErr_Format(PyExc_TypeError, "arg_sets[%zd] must be a tuple, got %.100s", i,
                         Py_TYPE(PyTuple_GET_ITEM(arg_sets, i))->tp_name);
            return -1;
        }
    if (kwargs != Py_None && kwargs != NULL && !PyDict_Check(kwargs)) {
        PyErr_Format(PyExc_TypeError, "kwargs must be a dict or None, got %.100s",
                     Py_TYPE(kwargs)->tp_name);
        return -1;
    }
    return 0;
}

int kb_pop_cold_mode(PyObject *opts, kb_cold_mode *cold)
{
    PyObject *v = PyDict_GetItemString(opts, "cold");   /* borrowed; opts is the caller's copy */
    *cold = KB_COLD_NONE;
    if (v == NULL)
        return 0;
    if (kb_cold_mode_parse(v, "cold", cold) < 0)        /* the one list (plan.c) */
        return -1;
    return PyDict_DelItemString(opts, "cold");
}

void kb_warm_every_set(kb_loop_config *cfg, Py_ssize_t n_sets)
{
    /* A callable that pays once per new input (an lru_cache, a dict filled key by key) is
     * slow on each set's first call, and a run of such first calls reads as a settled warm-up:
     * over 3000 sets an lru_cache read 5.8-6.0 us +-0.4% against 0.03-0.05 us once warm (4 of
     * 5 runs, a review's). A full pass first: the samples then cycle through warm sets. */
    if (n_sets > cfg->warmup_min)
        cfg->warmup_min = n_sets;
}

int kb_finish_options(PyObject *opts, const char *func, kb_loop_config *cfg)
{
    if (kb_loop_config_parse(opts, cfg) < 0)
        return -1;
    if (PyDict_GET_SIZE(opts) == 0)
        return 0;
    PyObject *keys = PyDict_Keys(opts);
    if (keys != NULL) {
        PyErr_Format(PyExc_TypeError, "%s got unexpected keyword arguments %R", func, keys);
        Py_DECREF(keys);
    }
    return -1;
}

/* ------------------------------------------------------------------ one loop at a time */

int kb_measure_lock_init(kb_state *st)
{
    st->measure_lock = PyThread_allocate_lock();
    if (st->measure_lock == NULL) {
        PyErr_SetString(PyExc_MemoryError, "cannot allocate kbench's measurement lock");
        return -1;
    }
    st->measure_owner = 0;
    return 0;
}

void kb_measure_lock_free(kb_state *st)
{
    if (st->measure_lock != NULL)
        PyThread_free_lock(st->measure_lock);
    st->measure_lock = NULL;
}

int kb_measure_lock_acquire(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    unsigned long me = PyThread_get_thread_ident();
    /* measure_owner is read and written with the GIL held only. */
    if (st->measure_owner == me) {
        PyErr_SetString(st->KbenchError,
                        "kbench cannot measure inside a measurement: the benchmarked callable "
                        "(or its check) started another kbench bench in the same thread");
        return -1;
    }
    if (!PyThread_acquire_lock(st->measure_lock, NOWAIT_LOCK)) {
        /* Another thread is measuring: wait for it with the GIL released, and stay
         * interruptible (a timed wait, then a signal check). */
        for (;;) {
            PyLockStatus got;
            Py_BEGIN_ALLOW_THREADS
            got = PyThread_acquire_lock_timed(st->measure_lock, 50000, 0);   /* 50 ms */
            Py_END_ALLOW_THREADS
            if (got == PY_LOCK_ACQUIRED)
                break;
            if (PyErr_CheckSignals() < 0)
                return -1;
        }
    }
    st->measure_owner = me;
    return 0;
}

void kb_measure_lock_release(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    st->measure_owner = 0;
    PyThread_release_lock(st->measure_lock);
}

static int reserve(kb_loop_result *res, Py_ssize_t need)
{
    if (need <= res->cap)
        return 0;
    size_t cap = kb_grown_capacity((size_t)res->cap, (size_t)need, 64, sizeof(double));
    double *p = kb_resize(res->samples, cap, sizeof *p);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    res->samples = p;
    res->cap = (Py_ssize_t)cap;
    return 0;
}

/* The clock every decision reads: the backend's own where it has one (a rank wrapper's agreed
 * clock, ranks.c), else the host's. */
static double loop_now(const kb_backend *b)
{
    return b->now != NULL ? b->now((kb_backend *)b) : kb_now_s();
}

/* The timed warm-up's windows: after the first call, batches of at least this many calls and
 * this long, each compared with the one before. */
#define KB_WARM_WINDOW_MIN 5
#define KB_WARM_WINDOW_S 0.005
/* Settling again, a batch of the sampling's size takes at most this long: the backend's clock
 * readings refresh about this often (NVML: 0.1 s), so asking it more often sees nothing new,
 * and less often delays its verdict. A sampling batch sized for a faster load ran ~1 s once a
 * 40x slower one took over (light adds, then a capped GEMM), and a capped load's two clock
 * windows, asked once a second, missed their agreement past settle_max_s. */
#define KB_RESETTLE_BATCH_S 0.1

/* The fastest call of a window: interference (preemption, another process) only adds time,
 * so a window's minimum is its cost without it. A window's median moved with a loaded machine:
 * two CPU hogs on two cores ended the warm-up of a still-falling callable after 11 calls. */
static double window_min(const double *x, Py_ssize_t n)
{
    double m = x[0];
    for (Py_ssize_t i = 1; i < n; i++)
        m = x[i] < m ? x[i] : m;
    return m;
}

/* The samples timed while settling (res->samples[0..*n)): the backend's settled_keep says how
 * many of the latest (at most max_keep) to keep (final: once settled, and from when, into
 * *from_s; else only a bound on what a long settle holds); they move to the front. */
static int keep_tentative(kb_backend *b, Py_ssize_t max_keep, kb_loop_result *res, int final,
                          Py_ssize_t *n, double *from_s)
{
    double from = NAN;
    Py_ssize_t kept = b->settled_keep(b, *n, max_keep, final, &from);
    if (kept < 0)
        return -1;
    kept = kept < *n ? kept : *n;
    memmove(res->samples, res->samples + (*n - kept), (size_t)kept * sizeof(double));
    res->tentative_dropped += *n - kept;
    *n = kept;
    if (from_s != NULL && kept > 0)
        *from_s = from;
    return 0;
}

/* Warm-up, samples discarded (but see settled_keep). It ends once the loop's own rule is met
 * and the backend's keep_warming (if any) says done. The loop's rule: warmup_min iterations,
 * and either warmup_s has passed or -- for a backend whose warm-up calls are timed
 * (warmup_timed) -- the per-call
 * times have stopped falling: the fastest call of a window is no more than warmup_tol below
 * the fastest of the window before it. Warm-up makes calls faster (page faults, lazy set-up,
 * cold code, clocks ramping up); a window that is not faster than the last is past that, and
 * one that is slower is noise or a slowdown that more warming would not cure.
 * Untimed warm-up batches grow 1, 2, 4, ... so a slow callable is not overrun and a fast one
 * does not pay a clock read per call; timed ones are windows of >= 5 calls and >= 5 ms after a
 * first call of its own (first calls pay for page faults, lazy set-up and cold code).
 * With a backend's settled_keep, the batches run while keep_warming says "more" are timed as
 * samples, and those it keeps open the sampling (res->n, from *kept_from_s).
 * resettle_batch > 0: the backend's resettle said the device left its settled state while
 * sampling, at resettle_pace_s a call; the loop's own rule is behind it, and the batches stay
 * the sampling's size (the duty cycle that left the state is the one to settle in), but no
 * longer than KB_RESETTLE_BATCH_S. res->warmup_s adds this time. */
static int warm_up(kb_backend *b, const kb_loop_config *cfg, kb_loop_result *res,
                   Py_ssize_t resettle_batch, double resettle_pace_s, double *per_call_out,
                   double *kept_from_s)
{
    int again = resettle_batch > 0;
    int judge = b->warmup_timed && cfg->warmup_tol > 0 && cfg->warmup_s > 0 && !again;
    /* Settling batches timed as samples, kept once the backend has shown them settled. */
    int tentative = b->settled_keep != NULL;
    Py_ssize_t batch = again ? resettle_batch : 1, scratch_cap = 0, tentative_n = 0;
    double *scratch = NULL;
    double t_start = loop_now(b);
    int settling = 0;   /* past the loop's own rule, warming on until the backend settles */
    double per_call = again ? resettle_pace_s : 0.0, last_min = -1.0;
    for (;;) {
        double elapsed = loop_now(b) - t_start;
        if (again || (res->warmup_iters >= cfg->warmup_min &&
                      (res->warmup_stable || elapsed >= cfg->warmup_s))) {
            if (b->keep_warming == NULL)
                break;
            int more = b->keep_warming(b, elapsed);
            if (more < 0)
                goto error;
            if (more == KB_WARM_DONE)
                break;
            if (more == KB_WARM_MORE_UNTIMED && tentative) {
                /* nothing timed while settling can be kept now: drop it, time no more */
                if (tentative_n > 0 &&
                    keep_tentative(b, 0, res, 1, &tentative_n, NULL) < 0)
                    goto error;
                tentative = 0;
            }
            /* While settling, keep batches short (~20 ms) so the backend is asked often. */
            settling = 1;
            if (!again && per_call > 0 && (double)batch * per_call > 0.02)
                batch = (Py_ssize_t)(0.02 / per_call) + 1;
            if (again && per_call > 0 && (double)resettle_batch * per_call > KB_RESETTLE_BATCH_S)
                batch = (Py_ssize_t)(KB_RESETTLE_BATCH_S / per_call) + 1;
        }
        if (batch > scratch_cap) {
            double *p = realloc(scratch, (size_t)batch * sizeof(double));
            if (p == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            scratch = p;
            scratch_cap = batch;
        }
        double *dst = scratch;
        int kind = KB_BATCH_WARMUP;
        if (settling && tentative) {
            if (reserve(res, tentative_n + batch) < 0)
                goto error;
            dst = res->samples + tentative_n;
            kind = KB_BATCH_TENTATIVE;
        }
        double tb = loop_now(b);
        if (b->run_batch(b, batch, dst, kind) < 0 || PyErr_CheckSignals() < 0)
            goto error;
        double t_end = loop_now(b);
        if (kind == KB_BATCH_TENTATIVE &&
            (tentative_n += batch) > 2 * cfg->max_samples &&
            keep_tentative(b, cfg->max_samples, res, 0, &tentative_n, NULL) < 0)
            goto error;
        per_call = (t_end - tb) / (double)batch;
        res->warmup_iters += batch;
        if (again)
            continue;
        if (cfg->warmup_s <= 0 && res->warmup_iters >= cfg->warmup_min)
            break;
        if (judge && !res->warmup_stable && batch >= KB_WARM_WINDOW_MIN) {
            double m = window_min(dst, batch);
            if (last_min > 0 && m >= (1.0 - cfg->warmup_tol) * last_min)
                res->warmup_stable = 1;
            last_min = m;
        }
        if (judge && !settling) {
            double want = per_call > 0 ? ceil(KB_WARM_WINDOW_S / per_call) : 4096.0;
            batch = want < KB_WARM_WINDOW_MIN      ? KB_WARM_WINDOW_MIN
                    : want > (double)cfg->batch_max ? cfg->batch_max
                                                    : (Py_ssize_t)want;
        }
        else if (batch < cfg->batch_max && batch < 4096)
            batch *= 2;
        if (batch > cfg->batch_max)
            batch = cfg->batch_max;
        /* Never plan past the warm-up budget: a slow callable would overrun it by a batch. */
        double left = settling ? 0.02 : cfg->warmup_s - (loop_now(b) - t_start);
        if (per_call > 0 && left > 0 && (double)batch * per_call > left) {
            Py_ssize_t fit = (Py_ssize_t)(left / per_call) + 1;
            batch = fit < batch ? fit : batch;
        }
    }
    res->warmup_s += loop_now(b) - t_start;
    *per_call_out = per_call;
    *kept_from_s = NAN;
    if (tentative_n > 0 &&
        keep_tentative(b, cfg->max_samples, res, 1, &tentative_n, kept_from_s) < 0)
        goto error;
    res->n = tentative_n;
    res->warmup_iters -= tentative_n;
    free(scratch);
    return 0;

error:
    free(scratch);
    return -1;
}

/* The batch of k samples, cut to end about when the sampling floor (b->min_sampling_s) is
 * reached, at the pace of the n samples taken in `elapsed` so far; at least 1. */
static Py_ssize_t floor_fit(const kb_backend *b, Py_ssize_t n, double elapsed, Py_ssize_t k)
{
    if (n == 0 || !(b->min_sampling_s > elapsed) || !(elapsed > 0))
        return k;
    double fit = ceil((b->min_sampling_s - elapsed) / (elapsed / (double)n));
    return fit < 1 ? 1 : fit < (double)k ? (Py_ssize_t)fit : k;
}

/* The sampling's first batch: 1 call, or with a backend's min_batch_s that long at per_call,
 * the pace of the warm-up's (or the second settle's) last batch. */
static Py_ssize_t first_batch(const kb_backend *b, const kb_loop_config *cfg, double per_call)
{
    if (!(b->min_batch_s > 0) || !(per_call > 0))
        return 1;
    double want = floor(b->min_batch_s / per_call);
    return want < 1 ? 1 : want > (double)cfg->batch_max ? cfg->batch_max : (Py_ssize_t)want;
}

/* Sampling begins now, or where the samples kept from the settle began (res->n of them, from
 * kept_from_s): *t0 is its start, and the stop rule is asked at once of those samples (the
 * floor and min_samples permitting), which may already meet it. */
static int begin_sampling(const kb_backend *b, const kb_loop_config *cfg, kb_criterion *crit,
                          kb_loop_result *res, double kept_from_s, double *t0,
                          Py_ssize_t *next_check)
{
    *t0 = loop_now(b);
    *next_check = cfg->min_samples;
    res->stop = KB_STOP_RUNNING;
    res->overlap_s = 0.0;
    if (res->n == 0)
        return 0;
    /* Samples kept from the settle: the sampling began with them, and may be done. */
    res->overlap_s = *t0 - kept_from_s > 0 ? *t0 - kept_from_s : 0.0;
    *t0 = kept_from_s < *t0 ? kept_from_s : *t0;
    crit->resolution = res->resolution_s = b->resolution_s;
    if (res->n >= cfg->min_samples && loop_now(b) - *t0 >= b->min_sampling_s) {
        int fin = crit->is_finished(crit, res->samples, res->n);
        if (fin < 0) {
            PyErr_NoMemory();
            return -1;
        }
        res->achieved = crit->achieved;
        if (fin)
            res->stop = KB_STOP_PRECISION;
        else
            *next_check = res->n + (res->n / 16 > 0 ? res->n / 16 : 1);
    }
    if (res->stop == KB_STOP_RUNNING && res->n >= cfg->max_samples)
        res->stop = KB_STOP_ITER_CAP;
    return 0;
}

/* After a sampling batch of k: the backend's resettle says whether the device has left the
 * state it settled in. If so, the samples so far are dropped, the load settles again (warm_up,
 * in batches of k) and sampling begins anew: 1, with the second settle's last pace in
 * *per_call; 0 where it held; -1 with an exception. */
static int settle_again(kb_backend *b, const kb_loop_config *cfg, kb_criterion *crit,
                        kb_loop_result *res, Py_ssize_t k, double batch_s, double *t0,
                        Py_ssize_t *next_check, double *per_call)
{
    if (b->resettle == NULL || res->resettled)
        return 0;
    int left = b->resettle(b);
    if (left <= 0)
        return left;
    double kept_from_s = NAN;
    res->resettled = 1;
    res->resettle_dropped = res->n;
    res->resettle_sampled_s = loop_now(b) - *t0;
    /* what warm_up already counted (the kept samples' overlap) is not counted twice */
    res->warmup_s += res->resettle_sampled_s - res->overlap_s;
    res->n = 0;
    kb_criterion_reset(crit);  /* its samples are gone: what it consumed must not count */
    if (warm_up(b, cfg, res, k, batch_s / (double)k, per_call, &kept_from_s) < 0)
        return -1;
    return begin_sampling(b, cfg, crit, res, kept_from_s, t0, next_check) < 0 ? -1 : 1;
}

/* Ctrl-C: the loop checks for signals after every batch (a flag test, no syscall), so a
 * KeyboardInterrupt ends it between batches; a backend whose batches run long checks inside them
 * too (measure_host.c). Either way the loop returns -1 with the exception set, and the backend's
 * caller releases what it holds as on any other error. */
int kb_loop_run(kb_backend *backend, const kb_loop_config *cfg, kb_loop_result *res)
{
    /* With a rank reducer, the loop runs the backend behind it, and every decision below reads
     * agreed numbers (ranks.c). */
    kb_rank_wrapper ranked;
    kb_backend *b = kb_ranks_wrap(cfg, backend, &ranked);
    kb_criterion crit;
    memset(res, 0, sizeof *res);
    if (kb_criterion_init(&crit, cfg->criterion, cfg->target, cfg->ci_level) < 0)
        return -1;
    double warm_per_call = 0.0, kept_from_s = NAN;
    if (warm_up(b, cfg, res, 0, 0.0, &warm_per_call, &kept_from_s) < 0)
        goto error;

    /* Sampling. The rule is checked when the count has grown by ~1/16 since the last check,
     * so its O(n log n) cost stays a small fraction of the loop. */
    /* Batches grow while they take under 1% of the time budget, or the backend's own minimum.
     * With one, the first batch is that long at the warm-up's last pace,
     * not 1, 2, 4, ... calls, each a collection. */
    Py_ssize_t batch = first_batch(b, cfg, warm_per_call), next_check;
    double grow_below_s = cfg->max_time_s * 0.01;
    if (b->min_batch_s > grow_below_s)
        grow_below_s = b->min_batch_s;
    double t0;
    if (begin_sampling(b, cfg, &crit, res, kept_from_s, &t0, &next_check) < 0)
        goto error;
    while (res->stop == KB_STOP_RUNNING) {
        Py_ssize_t k = batch;
        if (k > cfg->max_samples - res->n)
            k = cfg->max_samples - res->n;
        if (res->n < cfg->min_samples && k > cfg->min_samples - res->n && res->n > 0)
            k = cfg->min_samples - res->n;
        /* A backend that starts batches for free never runs one past the rule's next check. */
        if (b->prompt_stop && res->n >= cfg->min_samples && k > next_check - res->n)
            k = next_check - res->n > 1 ? next_check - res->n : 1;
        /* Under a sampling floor the rule is first asked at the floor: a batch planned at the
         * doubled size would run far past it (stepped CUPTI figures sampled 0.32-0.37 s
         * against a 0.2 s floor), so it ends near the floor at the pace so far. */
        double so_far = loop_now(b) - t0;
        k = floor_fit(b, res->n, so_far, k);
        /* Batches past 1% of the budget: the last one ends about at the time cap. */
        if (b->min_batch_s > 0 && res->n >= cfg->min_samples && so_far > 0) {
            double end = cfg->budget && b->min_sampling_s > cfg->max_time_s
                             ? b->min_sampling_s : cfg->max_time_s;
            double fit = ceil((end - so_far) / (so_far / (double)res->n));
            k = fit < 1 ? 1 : fit < (double)k ? (Py_ssize_t)fit : k;
        }
        if (reserve(res, res->n + k) < 0)
            goto error;
        double batch_start = loop_now(b);
        if (b->run_batch(b, k, res->samples + res->n, KB_BATCH_SAMPLE) < 0 ||
            PyErr_CheckSignals() < 0)
            goto error;
        double batch_s = loop_now(b) - batch_start;
        res->n += k;
        int again = settle_again(b, cfg, &crit, res, k, batch_s, &t0, &next_check,
                                 &warm_per_call);
        if (again < 0)
            goto error;
        if (again) {
            /* Sampling anew starts from a first batch, as sampling did: the old size was
             * grown on the old pace (on the host, too, far past the n/16 it ran), and at
             * n = 0 neither min_samples nor the floor cuts it. */
            batch = first_batch(b, cfg, warm_per_call);
            continue;
        }
        /* the backend may raise its step and floor while sampling (the stepped floor of a
         * figure under 2 us) */
        double elapsed = loop_now(b) - t0;
        crit.resolution = res->resolution_s = b->resolution_s;
        if (res->n >= cfg->min_samples && res->n >= next_check &&
            elapsed >= b->min_sampling_s) {
            int fin = crit.is_finished(&crit, res->samples, res->n);
            if (fin < 0) {
                PyErr_NoMemory();
                goto error;
            }
            res->achieved = crit.achieved;
            if (fin) {
                res->stop = KB_STOP_PRECISION;
                break;
            }
            next_check = res->n + (res->n / 16 > 0 ? res->n / 16 : 1);
        }
        if (res->n >= cfg->max_samples)
            res->stop = KB_STOP_ITER_CAP;
        else if (cfg->budget && elapsed >= cfg->max_time_s && res->n >= cfg->min_samples &&
                 elapsed >= b->min_sampling_s)
            res->stop = KB_STOP_BUDGET;     /* the regime's sampling floor holds */
        else if (!cfg->budget && elapsed >= cfg->max_time_s && res->n >= cfg->min_samples)
            res->stop = KB_STOP_TIME_CAP;
        /* Grow the batch while a batch takes under grow_below_s. */
        if (batch < cfg->batch_max && elapsed < grow_below_s * (double)res->n / batch)
            batch *= 2;
        if (batch > cfg->batch_max)
            batch = cfg->batch_max;
    }
    if (res->stop != KB_STOP_PRECISION && res->n >= 1) {
        /* Report the precision reached even when a cap stopped the loop. */
        if (crit.is_finished(&crit, res->samples, res->n) >= 0)
            res->achieved = crit.achieved;
    }
    res->sampling_s = loop_now(b) - t0;
    res->at_resolution = res->stop == KB_STOP_PRECISION && res->resolution_s > 0 &&
                         strcmp(cfg->criterion, "ci") == 0 && res->achieved > cfg->target;
    kb_criterion_fini(&crit);
    return 0;

error:
    kb_criterion_fini(&crit);
    kb_loop_result_free(res);
    return -1;
}

void kb_loop_result_free(kb_loop_result *res)
{
    free(res->samples);
    res->samples = NULL;
    res->n = res->cap = 0;
}

PyObject *kb_loop_result_to_dict(const kb_loop_result *res, const kb_loop_config *cfg)
{
    PyObject *arr = kb_array_copy(res->samples, res->n, NPY_FLOAT64, sizeof(double));
    if (arr == NULL)
        return NULL;
    PyObject *out = Py_BuildValue(
        "{s:N,s:s,s:n,s:d,s:O,s:d,s:d,s:s,s:d,s:d,s:d,s:n,s:n,s:d,s:O,s:d,s:O,s:d,s:n,s:n,s:N}",
        "samples", arr, "stop", kb_stop_name(res->stop), "warmup_iters", res->warmup_iters,
        "warmup_s", res->warmup_s, "warmup_stable", res->warmup_stable ? Py_True : Py_False, "warmup_tol",
        cfg->warmup_tol, "sampling_s", res->sampling_s, "criterion", cfg->criterion, "target", cfg->target,
        "achieved", res->achieved, "ci_level", cfg->ci_level, "min_samples", cfg->min_samples,
        "max_samples", cfg->max_samples, "max_time_s", cfg->max_time_s, "budget",
        cfg->budget ? Py_True : Py_False, "resolution_s",
        res->resolution_s, "at_resolution", res->at_resolution ? Py_True : Py_False,
        "sampling_overlap_s", res->overlap_s, "tentative_dropped", res->tentative_dropped,
        "resettle_dropped", res->resettle_dropped, "resettle_sampled_s",
        res->resettled ? PyFloat_FromDouble(res->resettle_sampled_s) : Py_NewRef(Py_None));
    return out;
}
