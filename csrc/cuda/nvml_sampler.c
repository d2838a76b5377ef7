/* nvml_sampler.c -- a background thread that records one GPU's SM and memory clocks, power,
 * temperature and clock event reasons every few milliseconds while a measurement runs, so a
 * result can show whether the clocks held (or the GPU throttled) during it.
 *
 * The thread never touches Python: it appends to growable C arrays, records NaN (0 for reasons)
 * for a read that failed and counts failures; stop joins it and turns the arrays into numpy.
 * Ticks are on a fixed grid from the start (no drift); a tick missed because reads were slow
 * is skipped rather than bunched up.
 */
#define _GNU_SOURCE
#include "loader.h"
#include "kb_numpy.h"
#include "kb_array.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KB_SAMPLER_MIN_PERIOD_S 0.0005  /* NVML reads take tens of us; faster only burns a core */
#define KB_SAMPLER_MAX_PERIOD_S 3600.0
#define KB_SAMPLER_INITIAL_CAP 1024     /* 5 s at the default 5 ms */
#define CAPSULE_NAME "kbench._core.nvml_sampler"

struct kb_nvml_sampler {
    const kb_nvml_api *nv;      /* owned by the module state */
    nvmlDevice_t dev;
    int ordinal;                /* CUDA ordinal, for the report */
    double period_s;
    uint64_t period_ns;
    uint64_t start_ns;          /* CLOCK_MONOTONIC at start */
    uint64_t stop_ns;           /* CLOCK_MONOTONIC once the thread has ended */

    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;        /* signalled by stop, waited on between ticks (CLOCK_MONOTONIC) */
    int sync_ready;             /* lock and wake were initialized */
    int stop;                   /* guarded by lock */

    /* The arrays: appended by the thread under `lock` (so the measuring thread can judge the
     * warm-up from them while it runs), everything else read only after it is joined. */
    size_t n, cap;
    double *t_s, *sm_mhz, *mem_mhz, *power_w, *power_inst_w, *temp_c;
    uint64_t *reasons;
    int inst_unsupported;       /* NVML has no NVML_FI_DEV_POWER_INSTANT here: NaN, not asked */
    double power_limit_w;       /* enforced limit, read at start; NaN when unknown */
    unsigned int app_mhz, app_default_mhz;  /* application SM clock and its default; 0 unknown */
    unsigned int max_sm_mhz;    /* the board's maximum SM clock; 0 unknown */
    double *scratch;            /* kb_nvml_sampler_settled's, n doubles; measuring thread only */
    size_t scratch_cap;
    size_t keep_from;           /* kb_nvml_sampler_mark: samples before it are the warm-up's */
    uint64_t keep_from_ns;
    size_t errors;              /* failed reads */
    nvmlReturn_t first_error;   /* NVML_SUCCESS when none failed */
    const char *first_error_call;
    int truncated;              /* growing the arrays failed: sampling ended early */
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Double the arrays. 0, or -1 (nothing lost: the old arrays stay valid at the old capacity). */
static int sampler_grow(kb_nvml_sampler *s)
{
    size_t cap = kb_grown_capacity(s->cap, s->cap + 1, KB_SAMPLER_INITIAL_CAP, sizeof(double));
#define GROW_(field)                                                                           \
    do {                                                                                       \
        void *p_ = kb_resize(s->field, cap, sizeof *s->field);                                 \
        if (p_ == NULL)                                                                        \
            return -1;                                                                         \
        s->field = p_;                                                                         \
    } while (0)
    GROW_(t_s);
    GROW_(sm_mhz);
    GROW_(mem_mhz);
    GROW_(power_w);
    GROW_(power_inst_w);
    GROW_(temp_c);
    GROW_(reasons);
#undef GROW_
    s->cap = cap;
    return 0;
}

static void note_failure(kb_nvml_sampler *s, nvmlReturn_t r, const char *call)
{
    s->errors++;
    if (s->first_error == NVML_SUCCESS) {
        s->first_error = r;
        s->first_error_call = call;
    }
}

static void take_sample(kb_nvml_sampler *s)
{
    const kb_nvml_api *nv = s->nv;
    unsigned int v = 0;
    unsigned long long reasons = 0;
    nvmlReturn_t r;
    double t, sm, mem, pw, pi = NAN, tc;
    int unsupported = 0;

    t = (double)(mono_ns() - s->start_ns) * 1e-9;
    r = nv->nvmlDeviceGetClockInfo(s->dev, NVML_CLOCK_SM, &v);
    sm = r == NVML_SUCCESS ? (double)v : NAN;
    if (r != NVML_SUCCESS)
        note_failure(s, r, "nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &mhz)");

    r = nv->nvmlDeviceGetClockInfo(s->dev, NVML_CLOCK_MEM, &v);
    mem = r == NVML_SUCCESS ? (double)v : NAN;
    if (r != NVML_SUCCESS)
        note_failure(s, r, "nvmlDeviceGetClockInfo(dev, NVML_CLOCK_MEM, &mhz)");

    r = nv->nvmlDeviceGetPowerUsage(s->dev, &v);
    pw = r == NVML_SUCCESS ? (double)v / 1000.0 : NAN;
    if (r != NVML_SUCCESS)
        note_failure(s, r, "nvmlDeviceGetPowerUsage(dev, &milliwatts)");

    if (!s->inst_unsupported) {
        nvmlFieldValue_t fv;
        memset(&fv, 0, sizeof fv);
        fv.fieldId = NVML_FI_DEV_POWER_INSTANT;
        r = nv->nvmlDeviceGetFieldValues(s->dev, 1, &fv);
        if (r == NVML_SUCCESS)
            r = fv.nvmlReturn;
        if (r == NVML_SUCCESS)
            pi = fv.valueType == NVML_VALUE_TYPE_DOUBLE ? fv.value.dVal
                 : fv.valueType == NVML_VALUE_TYPE_UNSIGNED_LONG_LONG ? (double)fv.value.ullVal
                 : fv.valueType == NVML_VALUE_TYPE_UNSIGNED_LONG ? (double)fv.value.ulVal
                 : (double)fv.value.uiVal;
        if (r == NVML_SUCCESS)
            pi /= 1000.0;          /* milliwatts */
        else if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
            unsupported = 1;            /* an older driver or board: averaged power only */
        else
            note_failure(s, r, "nvmlDeviceGetFieldValues(dev, 1, {NVML_FI_DEV_POWER_INSTANT})");
    }

    r = nv->nvmlDeviceGetTemperature(s->dev, NVML_TEMPERATURE_GPU, &v);
    tc = r == NVML_SUCCESS ? (double)v : NAN;
    if (r != NVML_SUCCESS)
        note_failure(s, r, "nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &celsius)");

    r = nv->nvmlDeviceGetCurrentClocksEventReasons(s->dev, &reasons);
    if (r != NVML_SUCCESS) {
        reasons = 0;
        note_failure(s, r, "nvmlDeviceGetCurrentClocksEventReasons(dev, &reasons)");
    }

    pthread_mutex_lock(&s->lock);
    if (unsupported)            /* under the lock: sampler_trace reads it on the caller's thread */
        s->inst_unsupported = 1;
    if (s->n == s->cap && sampler_grow(s) < 0)
        s->truncated = 1;
    else {
        size_t i = s->n++;
        s->t_s[i] = t;
        s->sm_mhz[i] = sm;
        s->mem_mhz[i] = mem;
        s->power_w[i] = pw;
        s->power_inst_w[i] = pi;
        s->temp_c[i] = tc;
        s->reasons[i] = (uint64_t)reasons;
    }
    pthread_mutex_unlock(&s->lock);
}

static void *sampler_main(void *arg)
{
    kb_nvml_sampler *s = arg;
    uint64_t next = s->start_ns;
    pthread_setname_np(pthread_self(), "kb-nvml");  /* for ps, gdb, py-spy and the tests */

    take_sample(s);     /* at least one sample, even when stopped at once */
    pthread_mutex_lock(&s->lock);
    while (!s->stop && !s->truncated) {
        uint64_t now = mono_ns();
        next += s->period_ns;
        if (next <= now)            /* reads overran the tick: go to the next grid point */
            next += ((now - next) / s->period_ns + 1) * s->period_ns;
        struct timespec deadline = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
        while (!s->stop) {
            if (pthread_cond_timedwait(&s->wake, &s->lock, &deadline) != 0)
                break;              /* ETIMEDOUT: next tick (any other error: do not spin) */
        }
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->lock);
        take_sample(s);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Ask the thread to stop and wait for it. No Python; safe to call on a half-built sampler. */
static void sampler_join(kb_nvml_sampler *s)
{
    if (!s->thread_started)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    s->stop_ns = mono_ns();         /* after the last sample: every t_s <= duration_s */
    s->thread_started = 0;
}

double kb_nvml_sampler_elapsed_s(const kb_nvml_sampler *s)
{
    return (double)(mono_ns() - s->start_ns) * 1e-9;
}

/* The arrays so far as a trace; call with the lock held. */
static kb_clock_trace sampler_trace(const kb_nvml_sampler *s)
{
    kb_clock_trace tr = {.t = s->t_s, .sm_mhz = s->sm_mhz, .power_avg_w = s->power_w,
                         .power_inst_w = s->inst_unsupported ? NULL : s->power_inst_w,
                         .reasons = s->reasons, .n = s->n,
                         .max_sm_mhz = s->max_sm_mhz ? (double)s->max_sm_mhz : NAN};
    return tr;
}

int kb_nvml_sampler_settled(kb_nvml_sampler *s, const kb_settle_rule *rule, double load_start_s,
                            const kb_settle_carry *carry, double *median, int *by)
{
    int settled = -1;
    *by = KB_SETTLED_BY_RULE;
    pthread_mutex_lock(&s->lock);
    if (s->scratch_cap < s->n + 1) {
        size_t cap = kb_grown_capacity(s->scratch_cap, s->n + 1, KB_SAMPLER_INITIAL_CAP,
                                       sizeof(double));
        double *p = kb_resize(s->scratch, cap, sizeof *p);
        if (p != NULL) {
            s->scratch = p;
            s->scratch_cap = cap;
        }
    }
    if (s->scratch_cap >= s->n + 1) {
        kb_clock_trace tr = sampler_trace(s);
        settled = kb_clock_settled_carried(&tr, load_start_s, s->power_limit_w, rule, carry,
                                           s->scratch, median, by);
    }
    pthread_mutex_unlock(&s->lock);
    return settled;
}

double kb_nvml_sampler_settled_since(kb_nvml_sampler *s, const kb_settle_rule *rule,
                                     double load_start_s, double sm_mhz, int how)
{
    pthread_mutex_lock(&s->lock);
    kb_clock_trace tr = sampler_trace(s);
    double since = kb_clock_settled_since(&tr, load_start_s, sm_mhz, how, rule);
    pthread_mutex_unlock(&s->lock);
    return since;
}

int kb_nvml_sampler_limited_since(kb_nvml_sampler *s, double t_s)
{
    uint64_t reasons;
    double scanned;
    return isfinite(kb_nvml_sampler_first_limit(s, t_s, &reasons, &scanned));
}

double kb_nvml_sampler_first_limit(kb_nvml_sampler *s, double t_s, uint64_t *reasons,
                                   double *scanned_s)
{
    double at = NAN;
    *reasons = 0;
    pthread_mutex_lock(&s->lock);
    size_t k = s->n;
    while (k > 0 && s->t_s[k - 1] > t_s)   /* t is non-decreasing; only the new readings */
        k--;
    for (; k < s->n; k++)
        if (s->reasons[k] & KB_CLOCK_LIMIT_REASONS) {
            at = s->t_s[k];
            *reasons = s->reasons[k] & KB_CLOCK_LIMIT_REASONS;
            break;
        }
    if (s->n > 0)
        *scanned_s = s->t_s[s->n - 1];
    pthread_mutex_unlock(&s->lock);
    return at;
}

int kb_nvml_sampler_recovered(kb_nvml_sampler *s, const kb_settle_rule *rule)
{
    pthread_mutex_lock(&s->lock);
    kb_clock_trace tr = sampler_trace(s);
    int ok = kb_power_recovered(&tr, s->power_limit_w, rule);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

double kb_nvml_sampler_last_sm(kb_nvml_sampler *s)
{
    pthread_mutex_lock(&s->lock);
    double v = s->n ? s->sm_mhz[s->n - 1] : NAN;
    pthread_mutex_unlock(&s->lock);
    return v;
}

int kb_nvml_sampler_clocks_locked(kb_nvml_sampler *s)
{
    if (s->app_mhz && s->app_default_mhz && s->app_mhz != s->app_default_mhz)
        return 1;
    pthread_mutex_lock(&s->lock);
    uint64_t r = s->n ? s->reasons[s->n - 1] : 0;
    pthread_mutex_unlock(&s->lock);
    return (r & KB_NVML_REASON_APPLICATIONS_CLOCKS) && !(r & KB_NVML_REASON_GPU_IDLE);
}

void kb_nvml_sampler_mark(kb_nvml_sampler *s)
{
    pthread_mutex_lock(&s->lock);
    s->keep_from = s->n;
    s->keep_from_ns = mono_ns();
    pthread_mutex_unlock(&s->lock);
}

void kb_nvml_sampler_mark_at(kb_nvml_sampler *s, double t_s)
{
    pthread_mutex_lock(&s->lock);
    size_t k = s->n;
    while (k > 0 && s->t_s[k - 1] > t_s)
        k--;
    s->keep_from = k;
    s->keep_from_ns = s->start_ns + (uint64_t)(t_s > 0 ? t_s * 1e9 : 0.0);
    pthread_mutex_unlock(&s->lock);
}

static void sampler_free(kb_nvml_sampler *s)
{
    if (s->sync_ready) {
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
    }
    free(s->t_s);
    free(s->sm_mhz);
    free(s->mem_mhz);
    free(s->power_w);
    free(s->power_inst_w);
    free(s->temp_c);
    free(s->reasons);
    free(s->scratch);
    free(s);
}

/* Called with the GIL held (a failed start, a measurement's teardown, a dropped capsule); the
 * join waits out the thread's current round of NVML reads, so the GIL is let go for it. */
void kb_nvml_sampler_abort(kb_nvml_sampler *s)
{
    if (s == NULL)
        return;
    Py_BEGIN_ALLOW_THREADS
    sampler_join(s);
    Py_END_ALLOW_THREADS
    sampler_free(s);
}

/* lock + a condition variable on CLOCK_MONOTONIC (wall-clock jumps must not stretch a tick).
 * 0 or an errno value. */
static int sampler_init_sync(kb_nvml_sampler *s)
{
    pthread_condattr_t attr;
    int rc = pthread_mutex_init(&s->lock, NULL);
    if (rc != 0)
        return rc;
    if ((rc = pthread_condattr_init(&attr)) != 0)
        goto fail_mutex;
    if ((rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)) == 0)
        rc = pthread_cond_init(&s->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        goto fail_mutex;
    s->sync_ready = 1;
    return 0;

fail_mutex:
    pthread_mutex_destroy(&s->lock);
    return rc;
}

kb_nvml_sampler *kb_nvml_sampler_start(PyObject *m, int cuda_ordinal, double period_s)
{
    kb_nvml_sampler *s = NULL;
    nvmlDevice_t dev;
    sigset_t all, old;
    int rc;

    if (!(period_s >= KB_SAMPLER_MIN_PERIOD_S && period_s <= KB_SAMPLER_MAX_PERIOD_S)) {
        char msg[160];   /* PyErr_Format has no float conversions */
        snprintf(msg, sizeof msg, "NVML sampler period_s must be between %g and %g seconds, got %g",
                 KB_SAMPLER_MIN_PERIOD_S, KB_SAMPLER_MAX_PERIOD_S, period_s);
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    if (kb_nvml_device_of_cuda(m, cuda_ordinal, &dev, NULL, 0) < 0)
        return NULL;
    if ((s = calloc(1, sizeof *s)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    s->nv = &kb_get_state(m)->gpu->nvml;
    s->dev = dev;
    s->ordinal = cuda_ordinal;
    s->period_s = period_s;
    s->period_ns = (uint64_t)(period_s * 1e9 + 0.5);
    s->power_limit_w = NAN;
    s->inst_unsupported = s->nv->nvmlDeviceGetFieldValues == NULL;
    {
        /* once, before the thread: both optional, unknown when they fail */
        unsigned int mw = 0, mhz = 0;
        if (s->nv->nvmlDeviceGetEnforcedPowerLimit &&
            s->nv->nvmlDeviceGetEnforcedPowerLimit(dev, &mw) == NVML_SUCCESS && mw > 0)
            s->power_limit_w = mw / 1000.0;
        if (s->nv->nvmlDeviceGetClock &&
            s->nv->nvmlDeviceGetClock(dev, NVML_CLOCK_SM, NVML_CLOCK_ID_APP_CLOCK_TARGET,
                                      &mhz) == NVML_SUCCESS)
            s->app_mhz = mhz;
        if (s->nv->nvmlDeviceGetClock &&
            s->nv->nvmlDeviceGetClock(dev, NVML_CLOCK_SM, NVML_CLOCK_ID_APP_CLOCK_DEFAULT,
                                      &mhz) == NVML_SUCCESS)
            s->app_default_mhz = mhz;
        /* the clock summary's "at full clock" (regime.c) */
        if (s->nv->nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS)
            s->max_sm_mhz = mhz;
    }
    if (sampler_grow(s) < 0) {
        PyErr_NoMemory();
        goto error;
    }
    if ((rc = sampler_init_sync(s)) != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    /* The thread inherits a full signal mask, so signals (Ctrl-C) go to Python's threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    s->start_ns = mono_ns();
    rc = pthread_create(&s->thread, NULL, sampler_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    s->thread_started = 1;
    return s;

error:
    kb_nvml_sampler_abort(s);
    return NULL;
}



/* {"t_s", "sm_mhz", "mem_mhz", "power_w", "power_inst_w", "temp_c", "reasons"} of samples
 * [from, to) as numpy arrays; NULL with the error set. */
static PyObject *sampler_arrays(const kb_nvml_sampler *s, size_t from, size_t to)
{
    Py_ssize_t n = (Py_ssize_t)(to - from);
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (kb_dict_set_steal(d, "t_s", kb_array_copy(s->t_s + from, n, NPY_FLOAT64, sizeof(double))) < 0 ||
        kb_dict_set_steal(d, "sm_mhz", kb_array_copy(s->sm_mhz + from, n, NPY_FLOAT64, sizeof(double))) < 0 ||
        kb_dict_set_steal(d, "mem_mhz", kb_array_copy(s->mem_mhz + from, n, NPY_FLOAT64, sizeof(double))) < 0 ||
        kb_dict_set_steal(d, "power_w", kb_array_copy(s->power_w + from, n, NPY_FLOAT64, sizeof(double))) < 0 ||
        kb_dict_set_steal(d, "power_inst_w", kb_array_copy(s->power_inst_w + from, n, NPY_FLOAT64, sizeof(double))) < 0 ||
        kb_dict_set_steal(d, "temp_c", kb_array_copy(s->temp_c + from, n, NPY_FLOAT64, sizeof(double))) < 0 ||
        kb_dict_set_steal(d, "reasons", kb_array_copy(s->reasons + from, n, NPY_UINT64, sizeof(uint64_t))) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

PyObject *kb_nvml_sampler_stop(PyObject *m, kb_nvml_sampler *s)
{
    PyObject *out = NULL, *first = NULL;
    (void)m;

    Py_BEGIN_ALLOW_THREADS
    sampler_join(s);
    Py_END_ALLOW_THREADS

    if (s->first_error == NVML_SUCCESS) {
        Py_INCREF(Py_None);
        first = Py_None;
    } else {
        const char *name = kb_nvml_error_name((int)s->first_error);
        first = name ? PyUnicode_FromString(name)
                     : PyUnicode_FromFormat("NVML error %d", (int)s->first_error);
        if (first == NULL)
            goto error;
    }
    /* The timed part is the samples from the mark on; times count from the mark (the warm-up's
     * readings, before it, at negative times). */
    size_t k0 = s->keep_from <= s->n ? s->keep_from : s->n;
    Py_ssize_t kept = (Py_ssize_t)(s->n - k0);
    uint64_t from_ns = k0 > 0 || s->keep_from_ns ? s->keep_from_ns : s->start_ns;
    double shift = (double)(from_ns - s->start_ns) * 1e-9;
    for (size_t i = 0; i < s->n; i++)
        s->t_s[i] = i < k0 || s->t_s[i] - shift > 0 ? s->t_s[i] - shift : 0.0;
    if ((out = PyDict_New()) == NULL)
        goto error;
    PyObject *timed = sampler_arrays(s, k0, s->n);
    int merged = timed != NULL ? PyDict_Update(out, timed) : -1;
    Py_XDECREF(timed);
    if (merged < 0 ||
        kb_dict_set_steal(out, "warmup", sampler_arrays(s, 0, k0)) < 0 ||
        kb_dict_set_steal(out, "mark_s", PyFloat_FromDouble(shift)) < 0 ||
        kb_dict_set_steal(out, "power_limit_w", isfinite(s->power_limit_w)
                                                    ? PyFloat_FromDouble(s->power_limit_w)
                                                    : Py_NewRef(Py_None)) < 0 ||
        kb_dict_set_steal(out, "app_clock_mhz", s->app_mhz ? PyLong_FromUnsignedLong(s->app_mhz)
                                                           : Py_NewRef(Py_None)) < 0 ||
        kb_dict_set_steal(out, "app_clock_default_mhz",
                          s->app_default_mhz ? PyLong_FromUnsignedLong(s->app_default_mhz)
                                             : Py_NewRef(Py_None)) < 0 ||
        kb_dict_set_steal(out, "max_sm_clock_mhz",
                          s->max_sm_mhz ? PyLong_FromUnsignedLong(s->max_sm_mhz)
                                        : Py_NewRef(Py_None)) < 0 ||
        kb_dict_set_steal(out, "n", PyLong_FromSsize_t(kept)) < 0 ||
        kb_dict_set_steal(out, "before_mark", PyLong_FromSize_t(k0)) < 0 ||
        kb_dict_set_steal(out, "ordinal", PyLong_FromLong(s->ordinal)) < 0 ||
        kb_dict_set_steal(out, "period_s", PyFloat_FromDouble(s->period_s)) < 0 ||
        kb_dict_set_steal(out, "start_s", PyFloat_FromDouble((double)from_ns * 1e-9)) < 0 ||
        kb_dict_set_steal(out, "duration_s",
                  PyFloat_FromDouble((double)(s->stop_ns - from_ns) * 1e-9)) < 0 ||
        kb_dict_set_steal(out, "errors", PyLong_FromSize_t(s->errors)) < 0 ||
        PyDict_SetItemString(out, "first_error", first) < 0 ||
        kb_dict_set_steal(out, "first_error_code",
                  s->first_error == NVML_SUCCESS ? (Py_INCREF(Py_None), Py_None)
                                                 : PyLong_FromLong((long)s->first_error)) < 0 ||
        kb_dict_set_steal(out, "first_error_call",
                  s->first_error_call ? PyUnicode_FromString(s->first_error_call)
                                      : (Py_INCREF(Py_None), Py_None)) < 0 ||
        kb_dict_set_steal(out, "truncated", PyBool_FromLong(s->truncated)) < 0)
        goto error;
    Py_DECREF(first);
    sampler_free(s);
    return out;

error:
    Py_XDECREF(first);
    Py_XDECREF(out);
    sampler_free(s);
    return NULL;
}

/* ------------------------------------------------------------------ Python: capsule pair */

typedef struct {
    kb_nvml_sampler *sampler;   /* NULL once stopped */
    PyObject *module;           /* strong: the NVML table the thread uses lives in its state */
} sampler_box;

static void box_destructor(PyObject *capsule)
{
    PyObject *et, *ev, *etb;            /* a destructor keeps the exception being raised */
    PyErr_Fetch(&et, &ev, &etb);
    sampler_box *box = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (box == NULL) {
        PyErr_Clear();
    } else {
        kb_nvml_sampler_abort(box->sampler);    /* dropped without stop: join and discard */
        Py_XDECREF(box->module);
        free(box);
    }
    PyErr_Restore(et, ev, etb);
}

static PyObject *nvml_sampler_start(PyObject *m, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"ordinal", "period_s", NULL};
    int ordinal = 0;
    double period_s = 0.005;
    sampler_box *box = NULL;
    PyObject *capsule;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|id:nvml_sampler_start", kwlist, &ordinal,
                                     &period_s))
        return NULL;
    if ((box = calloc(1, sizeof *box)) == NULL)
        return PyErr_NoMemory();
    if ((box->sampler = kb_nvml_sampler_start(m, ordinal, period_s)) == NULL) {
        free(box);
        return NULL;
    }
    Py_INCREF(m);
    box->module = m;
    capsule = PyCapsule_New(box, CAPSULE_NAME, box_destructor);
    if (capsule == NULL) {
        kb_nvml_sampler_abort(box->sampler);
        Py_DECREF(m);
        free(box);
        return NULL;
    }
    return capsule;
}

static PyObject *nvml_sampler_stop(PyObject *m, PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, CAPSULE_NAME)) {
        PyErr_Format(PyExc_TypeError,
                     "nvml_sampler_stop() expects the object nvml_sampler_start() returned, "
                     "got %.100s", Py_TYPE(capsule)->tp_name);
        return NULL;
    }
    sampler_box *box = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (box == NULL)
        return NULL;
    if (box->sampler == NULL) {
        PyErr_SetString(PyExc_ValueError, "this NVML sampler was already stopped");
        return NULL;
    }
    kb_nvml_sampler *s = box->sampler;
    box->sampler = NULL;                /* stop frees it, whatever happens */
    return kb_nvml_sampler_stop(m, s);
}

static PyMethodDef sampler_methods[] = {
    {"nvml_sampler_start", (PyCFunction)(void (*)(void))nvml_sampler_start,
     METH_VARARGS | METH_KEYWORDS,
     "nvml_sampler_start(ordinal=0, period_s=0.005) -> sampler\n\n"
     "Start a background thread sampling CUDA device `ordinal`'s SM and memory clocks, power, "
     "(averaged and instantaneous), temperature and clock event reasons every period_s seconds. Pass the returned object to "
     "nvml_sampler_stop(); dropping it stops and discards the samples."},
    {"nvml_sampler_stop", nvml_sampler_stop, METH_O,
     "nvml_sampler_stop($module, sampler, /)\n--\n\n"
     "nvml_sampler_stop(sampler) -> dict\n\n"
     "Stop the sampler and return numpy arrays t_s (seconds since start), sm_mhz, mem_mhz, "
     "power_w (averaged), power_inst_w (instantaneous, NaN where unsupported), temp_c (float64; NaN where a read failed) and reasons (uint64 NVML clock event "
     "bitmask; decode with nvml_clock_event_reason_names), with max_sm_clock_mhz (NVML's "
     "maximum SM clock, None when unknown), n, period_s, start_s "
     "(CLOCK_MONOTONIC), duration_s, errors, first_error, first_error_code, first_error_call, "
     "truncated, and warmup (the same seven arrays of samples before a measurement's mark, "
     "empty here) with mark_s."},
    {NULL, NULL, 0, NULL},
};

int kb_nvml_sampler_module_init(PyObject *m) { return PyModule_AddFunctions(m, sampler_methods); }
