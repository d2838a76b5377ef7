/* regime.c -- what a CUDA measurement's clock record says, settled where it is measured:
 *   - the clock summary of the timed part's NVML samples: SM median, minimum and 95th
 *     percentile, the reasons seen, the limit reasons, whether the clock held steady, and the
 *     one line the Result prints;
 *   - the GPU's timed and busy fractions of the sampling time;
 *   - whether a power cap moved the clock;
 *   - whether the sustained or burst regime held, and why not, as the text the warning quotes.
 * cuda_result.c puts these into the CUDA record (kb_regime.h); kbench.backends.cuda_report copies
 * them.
 *
 * The judging functions are pure (no Python, no NVML) and cannot fail: every record NVML can
 * produce -- no samples, all reads failed, no power, an unknown maximum clock, one sample --
 * gives a verdict, with "unknown" (steady -1, NaN) where the data says nothing. The record's
 * dicts and the thin _core wrappers the tests use are at the end.
 */
#include "kb_regime.h"
#include "kb_numpy.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Steady: the timed part's lowest SM sample within 3% of its 95th percentile, and no limit
 * reason flagged -- unless every sample stayed within 1% of the board's maximum SM clock: a cap
 * flagged while the clock never left its maximum cost nothing (seen on the H200: sw_power_cap
 * raised at 167 W with every sample at 1980 MHz). */
#define STEADY_MIN_OVER_P95 0.97
#define AT_MAX_CLOCK 0.99
/* A regime holds while its SM clock stays within 5% of where it settled (sustained) or of the
 * fastest batch start (burst). A capped H200 GEMM's 0.25 s clock medians swing 1410-1470 MHz
 * (its controller dips about once a second) while its figure holds to 0.6%. */
#define REGIME_CLOCK_TOL 0.95
/* Sustained: the timed part's SM median against the 0.25 s window the warm-up settled on. A
 * window can fall on one of the controller's dips (1425 vs 1500 MHz on the H200, the figure
 * within 0.26% across states), so only a different state (1980 vs 1470 MHz) breaks the regime. */
#define SUSTAINED_CLOCK_TOL 0.90
/* Sustained, hot: a power cap moved the clock while the GPU was busy (timed iterations and
 * keep-busy bridges) under this share of the sampling time. An idle GPU runs a capped kernel
 * cooler, so faster: under continuous load the kernel may run slower than measured. */
#define BUSY_MIN_UNDER_CAP 0.9

/* The power-cap reasons: sw_power_cap, hw_power_brake_slowdown. */
#define POWER_CAP_REASONS 0x84ULL

/* ------------------------------------------------------------------ reason names */

static const struct {
    uint64_t bit;
    const char *name;
} reason_names[] = {
    {0x001, "gpu_idle"},
    {0x002, "applications_clocks_setting"},
    {0x004, "sw_power_cap"},
    {0x008, "hw_slowdown"},
    {0x010, "sync_boost"},
    {0x020, "sw_thermal_slowdown"},
    {0x040, "hw_thermal_slowdown"},
    {0x080, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
};

/* The limit reasons (KB_CLOCK_LIMIT_REASONS), in the order of their names. */
static const uint64_t limit_bits_by_name[] = {0x080, 0x008, 0x040, 0x004, 0x020};

const char *kb_clock_reason_name(uint64_t bit)
{
    for (size_t i = 0; i < sizeof reason_names / sizeof reason_names[0]; i++)
        if (reason_names[i].bit == bit)
            return reason_names[i].name;
    return NULL;
}

PyObject *kb_clock_event_reason_names(uint64_t mask)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (int b = 0; b < 64; b++) {    /* the documented bits are the lowest: they come first */
        uint64_t bit = (uint64_t)1 << b;
        if (!(mask & bit))
            continue;
        char unknown[32];             /* PyUnicode_FromFormat lacks %llx before 3.12 */
        const char *name = kb_clock_reason_name(bit);
        if (name == NULL) {
            snprintf(unknown, sizeof unknown, "unknown_0x%llx", (unsigned long long)bit);
            name = unknown;
        }
        PyObject *s = PyUnicode_FromString(name);
        if (s == NULL || PyList_Append(list, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(s);
    }
    return list;
}

/* "a, b" of the limit reasons in mask, in name order. */
static void limit_names(uint64_t mask, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof limit_bits_by_name / sizeof limit_bits_by_name[0]; i++) {
        if (!(mask & limit_bits_by_name[i]) || at >= len)
            continue;
        int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
                         kb_clock_reason_name(limit_bits_by_name[i]));
        at += w > 0 ? (size_t)w : 0;
    }
}

/* ------------------------------------------------------------------ clock summary */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The finite v[0..n) sorted into scratch; how many. */
static size_t finite_sorted(const double *v, size_t n, double *scratch)
{
    size_t k = 0;
    for (size_t i = 0; v != NULL && i < n; i++)
        if (isfinite(v[i]))
            scratch[k++] = v[i];
    qsort(scratch, k, sizeof *scratch, cmp_double);
    return k;
}

static double finite_median(const double *v, size_t n, double *scratch)
{
    size_t k = finite_sorted(v, n, scratch);
    return k ? kb_quantile_sorted(scratch, (Py_ssize_t)k, 0.5) : NAN;
}

static double finite_max(const double *v, size_t n)
{
    double m = NAN;
    for (size_t i = 0; v != NULL && i < n; i++)
        if (isfinite(v[i]) && !(m >= v[i]))
            m = v[i];
    return m;
}

/* The one line: "SM 1980 MHz / mem 3201 MHz / 650 W (steady, 20 samples)". */
static void clock_summary_text(kb_clock_verdict *v, size_t n)
{
    char names[160], state[256], mem[48] = "", pw[32] = "";
    limit_names(v->limited, names, sizeof names);
    if (v->steady && v->limited)
        snprintf(state, sizeof state, "steady; %s flagged at full clock", names);
    else if (v->steady)
        snprintf(state, sizeof state, "steady");
    else
        snprintf(state, sizeof state, "MOVED: SM fell to %.0f MHz (p95 %.0f)%s%s", v->sm_min,
                 v->sm_p95, v->limited ? ", throttled by " : "", v->limited ? names : "");
    if (isfinite(v->mem_median) && v->mem_median != 0)
        snprintf(mem, sizeof mem, " / mem %.0f MHz", v->mem_median);
    if (isfinite(v->power_median))
        snprintf(pw, sizeof pw, " / %.0f W", v->power_median);
    snprintf(v->summary, sizeof v->summary, "SM %.0f MHz%s%s (%s, %zu samples)", v->sm_median,
             mem, pw, state, n);
}

void kb_clock_summary(const kb_clock_samples *s, kb_clock_verdict *out)
{
    memset(out, 0, sizeof *out);
    out->steady = -1;
    out->sm_median = out->sm_min = out->sm_p95 = NAN;
    out->mem_median = out->power_median = out->temp_max = NAN;
    if (s == NULL || s->n_samples == 0) {
        snprintf(out->summary, sizeof out->summary, "%s",
                 s != NULL && s->sampler_ran
                     ? "no NVML reading inside the timed part (shorter than the sampler's "
                       "period)"
                     : "not sampled (NVML unavailable)");
        return;
    }
    out->state = KB_CLOCKS_READS_FAILED;
    size_t most = s->n_sm > s->n_mem ? s->n_sm : s->n_mem;
    most = most > s->n_power ? most : s->n_power;
    double *scratch = malloc((most + 1) * sizeof *scratch);
    size_t k = scratch ? finite_sorted(s->sm_mhz, s->n_sm, scratch) : 0;
    if (k == 0) {
        snprintf(out->summary, sizeof out->summary,
                 scratch ? "NVML reads failed" : "not summarised (out of memory)");
        free(scratch);
        return;
    }
    out->state = KB_CLOCKS_READ;
    out->sm_min = scratch[0];
    out->sm_median = kb_quantile_sorted(scratch, (Py_ssize_t)k, 0.5);
    out->sm_p95 = kb_quantile_sorted(scratch, (Py_ssize_t)k, 0.95);
    out->mem_median = finite_median(s->mem_mhz, s->n_mem, scratch);
    out->power_median = finite_median(s->power_w, s->n_power, scratch);
    out->temp_max = finite_max(s->temp_c, s->n_temp);
    free(scratch);
    for (size_t i = 0; s->reasons != NULL && i < s->n_reasons; i++)
        out->reasons_seen |= s->reasons[i];
    out->limited = out->reasons_seen & KB_CLOCK_LIMIT_REASONS;
    double spec = s->spec_max_sm_mhz;
    int at_max = isfinite(spec) && spec > 0 && out->sm_min >= AT_MAX_CLOCK * spec;
    out->steady = out->sm_min >= STEADY_MIN_OVER_P95 * out->sm_p95 && (!out->limited || at_max);
    clock_summary_text(out, s->n_samples);
}

int kb_clock_power_capped(const kb_clock_verdict *v)
{
    return (v->limited & POWER_CAP_REASONS) && v->steady == 0;
}

/* ------------------------------------------------------------------ duty cycle */

double kb_timed_fraction(const double *events_s, size_t n, double unroll, double sampling_s)
{
    if (events_s == NULL || n == 0 || !(sampling_s > 0) || !isfinite(sampling_s))
        return NAN;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += events_s[i];
    double busy = sum * (unroll > 1.0 ? unroll : 1.0);     /* NaN unroll: 1 */
    if (!isfinite(busy))
        return NAN;
    return busy / sampling_s < 1.0 ? busy / sampling_s : 1.0;
}

double kb_busy_fraction(double timed, double keep_busy_gpu_s, double sampling_s)
{
    if (!isfinite(timed) || !(sampling_s > 0) || !isfinite(sampling_s))
        return timed;
    double bridges = isfinite(keep_busy_gpu_s) && keep_busy_gpu_s > 0 ? keep_busy_gpu_s : 0.0;
    double busy = timed + bridges / sampling_s;
    return busy < 1.0 ? busy : 1.0;
}

/* ------------------------------------------------------------------ regime */

/* Append one reason to v->why, "; " between reasons; truncated, never overrun. */
static void why_add(kb_regime_verdict *v, const char *fmt, ...)
{
    size_t at = strlen(v->why);
    if (at + 3 >= sizeof v->why)
        return;
    if (at) {
        memcpy(v->why + at, "; ", 3);
        at += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why + at, sizeof v->why - at, fmt, ap);
    va_end(ap);
}

/* A value Python would print as truthy and finite: read, and not zero. */
static int known(double x) { return isfinite(x) && x != 0; }

/* Python's repr of a float (the settle_max_s the caller gave, as they wrote it), "None" when
 * it is not finite. */
static void float_repr(double x, char *buf, size_t len)
{
    if (!isfinite(x)) {
        snprintf(buf, len, "None");
        return;
    }
    int p = 1;
    for (; p < 17; p++) {           /* the fewest digits that read back as x */
        snprintf(buf, len, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    int exp = x == 0 ? 0 : (int)floor(log10(fabs(x)));
    snprintf(buf, len, "%.*e", p - 1, x);
    const char *e = strchr(buf, 'e');
    if (e != NULL)
        exp = atoi(e + 1);          /* the exponent as printed (log10 can be off by one) */
    if (exp < -4 || exp >= 16)
        return;                     /* "1e+16", "1.5e-05": as Python writes them */
    int decimals = p - 1 - exp > 0 ? p - 1 - exp : 0;
    if (decimals)
        snprintf(buf, len, "%.*f", decimals, x);
    else
        snprintf(buf, len, "%.0f.0", x);
}

static void judge_burst(const kb_regime_inputs *in, kb_regime_verdict *v)
{
    if (in->unrecovered) {
        char waited[64] = "";
        if (known(in->recover_max_s))
            snprintf(waited, sizeof waited, " (waited at most %g s each)", in->recover_max_s);
        why_add(v, "%lld of %lld batches started before the GPU had recovered%s",
                in->unrecovered, in->batches, waited);
    }
    double lo = in->start_sm_min, hi = in->start_sm_max;
    if (known(lo) && known(hi)) {
        if (lo < REGIME_CLOCK_TOL * hi)
            why_add(v, "batches started at SM %.0f-%.0f MHz", lo, hi);
        /* between batches the clock may idle down: what counts is where batches start */
        v->clocks_steady = lo >= REGIME_CLOCK_TOL * hi;
    }
}

static void judge_sustained(const kb_regime_inputs *in, kb_regime_verdict *v)
{
    if (!in->clocks_locked) {
        if (in->settled == 0) {
            char max_s[40], sm[32] = "nan";
            float_repr(in->settle_max_s, max_s, sizeof max_s);
            if (known(in->settle_sm_mhz))
                snprintf(sm, sizeof sm, "%.0f", in->settle_sm_mhz);
            why_add(v, "the load had not settled after %.1f s of warm-up (settle_max_s=%s; last "
                       "window median %s MHz)",
                    isfinite(in->settle_at_s) ? in->settle_at_s : 0.0, max_s, sm);
        }
        else if (in->settled < 0 && in->clocks_read)
            why_add(v, "the settle rule had no clock readings to judge");
    }
    if (in->power_capped && !in->cold && isfinite(in->busy_fraction) &&
        in->busy_fraction < BUSY_MIN_UNDER_CAP)
        why_add(v, "power capped the SM clock while the GPU was busy only %.0f%% of the sampling "
                   "time (idle between batches): under continuous load this kernel may run "
                   "slower than measured",
                in->busy_fraction * 100.0);
    /* The rules settle a load as unlimited when nothing limits it and nothing will at its
     * power; a load drawing more while timed than while it settled (a duty cycle that grows
     * with the batches: a bf16 GEMM 2048^3 read 446-590 W settling at the H200's maximum
     * clock and 690-750 W, sw_power_cap, from 1 s of sampling) proves the verdict wrong. The
     * CUDA loop then settles again (kb_cuda_resettle); what reaches here is a limit it could
     * not act on: with ranks, or one NVML showed only after the last batch. */
    if (in->settled == 1 && in->settled_unlimited && (in->timed_limits & KB_CLOCK_LIMIT_REASONS)) {
        uint64_t bits = in->timed_limits & KB_CLOCK_LIMIT_REASONS;
        why_add(v, "the load settled with nothing limiting its clock, but %s limited it while "
                   "it was timed: the figure mixes the two states (its sustained state is the "
                   "limited one)",
                kb_clock_reason_name(bits & (~bits + 1)));
    }
    double settled = in->settle_sm_mhz, timed = in->timed_sm_median;
    if (known(settled) && known(timed) && fabs(timed - settled) > (1 - SUSTAINED_CLOCK_TOL) * settled)
        why_add(v, "the SM clock moved from %.0f MHz (settled) to %.0f MHz (timed part)", settled,
                timed);
}

void kb_regime_judge(const kb_regime_inputs *in, kb_regime_verdict *out)
{
    memset(out, 0, sizeof *out);
    out->clocks_steady = -1;
    if (in->clocks_locked)
        out->note = "clocks set or locked by the user: no settling needed";
    if (in->burst)
        judge_burst(in, out);
    else
        judge_sustained(in, out);
    out->held = out->why[0] == '\0';
    if (out->held)
        snprintf(out->why, sizeof out->why, "held");
}

/* ------------------------------------------------------------------ the record's dicts */

static PyObject *finite_or_none(double v)
{
    return isfinite(v) ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

/* The limit reasons of mask, by name, in name order. */
static PyObject *limit_name_list(uint64_t mask)
{
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i < sizeof limit_bits_by_name / sizeof(uint64_t); i++) {
        if (!(mask & limit_bits_by_name[i]))
            continue;
        PyObject *s = PyUnicode_FromString(kb_clock_reason_name(limit_bits_by_name[i]));
        if (s == NULL || PyList_Append(list, s) < 0)
            Py_CLEAR(list);
        Py_XDECREF(s);
    }
    return list;
}

/* clocks[key], or None when clocks is not a dict or has no such key. New reference. */
static PyObject *clocks_item(PyObject *clocks, const char *key)
{
    PyObject *v = clocks != NULL && PyDict_Check(clocks) ? PyDict_GetItemString(clocks, key)
                                                          : NULL;
    return Py_NewRef(v != NULL ? v : Py_None);
}

PyObject *kb_clock_verdict_dict(const kb_clock_verdict *v, const kb_clock_samples *s,
                                PyObject *clocks)
{
    if (v->state != KB_CLOCKS_READ)
        return Py_BuildValue("{s:s,s:O}", "summary", v->summary, "steady", Py_None);
    double spec = s->spec_max_sm_mhz;
    PyObject *spec_obj = !(isfinite(spec) && spec > 0) ? Py_NewRef(Py_None)
                         : spec == floor(spec) && spec < 1e15 ? PyLong_FromDouble(spec)
                                                              : PyFloat_FromDouble(spec);
    return Py_BuildValue(
        "{s:d,s:d,s:d,s:N,s:N,s:N,s:n,s:N,s:N,s:N,s:N,s:O,s:N,s:s}", "sm_mhz_median",
        v->sm_median, "sm_mhz_min", v->sm_min, "sm_mhz_p95", v->sm_p95, "mem_mhz_median",
        finite_or_none(v->mem_median), "power_w_median", finite_or_none(v->power_median),
        "temp_c_max", finite_or_none(v->temp_max), "n", (Py_ssize_t)s->n_samples, "period_s",
        clocks_item(clocks, "period_s"), "warmup_samples", clocks_item(clocks, "before_mark"),
        "reasons_seen", kb_clock_event_reason_names(v->reasons_seen), "throttle_reasons",
        limit_name_list(v->limited), "steady", v->steady > 0 ? Py_True : Py_False,
        "sm_mhz_max_spec", spec_obj, "summary", v->summary);
}

int kb_regime_verdict_into(const kb_regime_verdict *v, PyObject *regime)
{
    if (regime == NULL || !PyDict_Check(regime)) {
        PyErr_SetString(PyExc_SystemError, "kb_regime_verdict_into: no regime dict");
        return -1;
    }
    if (kb_dict_set_steal(regime, "held", PyBool_FromLong(v->held)) < 0 ||
        kb_dict_set_steal(regime, "why", PyUnicode_FromString(v->why)) < 0)
        return -1;
    return v->note ? kb_dict_set_steal(regime, "note", PyUnicode_FromString(v->note)) : 0;
}

void kb_clock_samples_release(PyObject **held)
{
    for (int k = 0; k < KB_CLOCK_SAMPLES_HELD; k++)
        Py_CLEAR(held[k]);
}

/* None (NaN), or a real number. 0 or -1 with TypeError naming `what`. */
static int read_optional_double(PyObject *o, const char *what, double *out)
{
    *out = NAN;
    if (o == NULL || o == Py_None)
        return 0;
    Py_INCREF(o);       /* borrowed from a dict that __float__ may change */
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) {
        if (kb_err_is_refusal())
            PyErr_Format(PyExc_TypeError, "%s must be a real number or None, got %.100s", what,
                         Py_TYPE(o)->tp_name);
        Py_DECREF(o);
        return -1;
    }
    Py_DECREF(o);
    *out = d;
    return 0;
}

/* clocks[key] as a 1-D array of `type` into *held (None or absent: none). */
static int clocks_array(PyObject *clocks, const char *key, int type, PyObject **held,
                        const void **data, size_t *n)
{
    PyObject *o = PyDict_GetItemString(clocks, key);
    *data = NULL;
    *n = 0;
    if (o == NULL || o == Py_None)
        return 0;
    Py_INCREF(o);       /* the conversion may run code that changes the dict */
    *held = PyArray_FROMANY(o, type, 1, 1, NPY_ARRAY_CARRAY_RO | NPY_ARRAY_FORCECAST);
    Py_DECREF(o);
    if (*held == NULL)
        return -1;
    *data = PyArray_DATA((PyArrayObject *)*held);
    *n = (size_t)PyArray_SIZE((PyArrayObject *)*held);
    return 0;
}

/* clocks["n"]: a count; None, absent or below 1 reads as 0. */
static int clocks_count(PyObject *clocks, size_t *n)
{
    PyObject *o = PyDict_GetItemString(clocks, "n");
    *n = 0;
    if (o == NULL || o == Py_None)
        return 0;
    Py_INCREF(o);
    Py_ssize_t v = PyNumber_AsSsize_t(o, PyExc_OverflowError);
    Py_DECREF(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *n = v > 0 ? (size_t)v : 0;
    return 0;
}

int kb_clock_samples_from_dict(PyObject *clocks, double spec_mhz, kb_clock_samples *s,
                               PyObject **held)
{
    memset(s, 0, sizeof *s);
    for (int k = 0; k < KB_CLOCK_SAMPLES_HELD; k++)
        held[k] = NULL;
    s->spec_max_sm_mhz = spec_mhz;
    if (clocks == NULL || clocks == Py_None)
        return 0;
    if (!PyDict_Check(clocks)) {
        PyErr_Format(PyExc_TypeError, "clocks must be the NVML sampler's dict or None, got "
                                      "%.100s", Py_TYPE(clocks)->tp_name);
        return -1;
    }
    s->sampler_ran = PyDict_GET_SIZE(clocks) > 0;
    if (isnan(spec_mhz) &&
        read_optional_double(PyDict_GetItemString(clocks, "max_sm_clock_mhz"),
                             "clocks['max_sm_clock_mhz']", &s->spec_max_sm_mhz) < 0)
        return -1;
    if (clocks_count(clocks, &s->n_samples) < 0 ||
        clocks_array(clocks, "sm_mhz", NPY_DOUBLE, &held[0], (const void **)&s->sm_mhz,
                     &s->n_sm) < 0 ||
        clocks_array(clocks, "mem_mhz", NPY_DOUBLE, &held[1], (const void **)&s->mem_mhz,
                     &s->n_mem) < 0 ||
        clocks_array(clocks, "power_w", NPY_DOUBLE, &held[2], (const void **)&s->power_w,
                     &s->n_power) < 0 ||
        clocks_array(clocks, "temp_c", NPY_DOUBLE, &held[3], (const void **)&s->temp_c,
                     &s->n_temp) < 0 ||
        clocks_array(clocks, "reasons", NPY_UINT64, &held[4], (const void **)&s->reasons,
                     &s->n_reasons) < 0) {
        kb_clock_samples_release(held);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ _core wrappers */

/* clock_summary(clocks, max_sm_clock_mhz=None) -> dict */
static PyObject *clock_summary(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"clocks", "max_sm_clock_mhz", NULL};
    PyObject *clocks, *spec_obj = Py_None, *held[KB_CLOCK_SAMPLES_HELD];
    double spec;
    kb_clock_samples s;
    kb_clock_verdict v;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:clock_summary", kwlist, &clocks,
                                     &spec_obj) ||
        read_optional_double(spec_obj, "max_sm_clock_mhz", &spec) < 0 ||
        kb_clock_samples_from_dict(clocks, spec, &s, held) < 0)
        return NULL;
    kb_clock_summary(&s, &v);
    PyObject *out = kb_clock_verdict_dict(&v, &s, clocks);
    if (out != NULL && kb_dict_set_steal(out, "power_capped",
                                         PyBool_FromLong(kb_clock_power_capped(&v))) < 0)
        Py_CLEAR(out);
    kb_clock_samples_release(held);
    return out;
}

/* timed_fraction(events_s, sampling_s, unroll=1.0) -> float | None */
static PyObject *timed_fraction(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"events_s", "sampling_s", "unroll", NULL};
    PyObject *ev_obj, *s_obj, *u_obj = Py_None;
    double sampling_s, unroll;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:timed_fraction", kwlist, &ev_obj, &s_obj,
                                     &u_obj) ||
        read_optional_double(s_obj, "sampling_s", &sampling_s) < 0 ||
        read_optional_double(u_obj, "unroll", &unroll) < 0)
        return NULL;
    PyArrayObject *ev = (PyArrayObject *)PyArray_FROMANY(
        ev_obj, NPY_DOUBLE, 1, 1, NPY_ARRAY_CARRAY_RO | NPY_ARRAY_FORCECAST);
    if (ev == NULL)
        return NULL;
    double f = kb_timed_fraction(PyArray_DATA(ev), (size_t)PyArray_SIZE(ev), unroll,
                                 sampling_s);
    Py_DECREF(ev);
    return finite_or_none(f);
}

/* busy_fraction(timed, keep_busy_gpu_s, sampling_s) -> float | None */
static PyObject *busy_fraction(PyObject *m, PyObject *args)
{
    PyObject *o[3];
    double v[3];
    static const char *const what[] = {"timed", "keep_busy_gpu_s", "sampling_s"};
    (void)m;
    if (!PyArg_ParseTuple(args, "OOO:busy_fraction", &o[0], &o[1], &o[2]))
        return NULL;
    for (int i = 0; i < 3; i++)
        if (read_optional_double(o[i], what[i], &v[i]) < 0)
            return NULL;
    return finite_or_none(kb_busy_fraction(v[0], v[1], v[2]));
}

/* True/False/None as 1/0/-1. */
static int tristate(PyObject *o, void *out)
{
    if (o == Py_None) {
        *(int *)out = -1;
        return 1;
    }
    int t = PyObject_IsTrue(o);
    if (t < 0)
        return 0;
    *(int *)out = t;
    return 1;
}

/* A real number or None (NaN), for PyArg's O&. */
static int optional_double_arg(PyObject *o, void *out)
{
    return read_optional_double(o, "a clock or time argument", out) == 0;
}

/* regime_verdict(*, regime='sustained', ...) -> {"held", "why", "note", "clocks_steady"} */
static PyObject *regime_verdict(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"regime", "clocks_locked", "settled", "settle_at_s",
                             "settle_max_s", "settle_sm_mhz", "clocks_read", "timed_sm_mhz",
                             "power_capped", "cold", "busy_fraction", "batches", "unrecovered",
                             "recover_max_s", "start_sm_mhz_min", "start_sm_mhz_max",
                             "settled_unlimited", "timed_limits", NULL};
    const char *regime = "sustained";
    unsigned long long timed_limits = 0;
    kb_regime_inputs in = {.settled = -1, .settle_at_s = NAN, .settle_max_s = NAN,
                           .settle_sm_mhz = NAN, .timed_sm_median = NAN, .busy_fraction = NAN,
                           .start_sm_min = NAN, .start_sm_max = NAN};
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "|$spO&O&O&O&pO&ppO&LLdO&O&pK:regime_verdict", kwlist, &regime,
            &in.clocks_locked, tristate, &in.settled, optional_double_arg, &in.settle_at_s,
            optional_double_arg, &in.settle_max_s, optional_double_arg, &in.settle_sm_mhz,
            &in.clocks_read, optional_double_arg, &in.timed_sm_median, &in.power_capped,
            &in.cold, optional_double_arg, &in.busy_fraction, &in.batches, &in.unrecovered,
            &in.recover_max_s, optional_double_arg, &in.start_sm_min, optional_double_arg,
            &in.start_sm_max, &in.settled_unlimited, &timed_limits))
        return NULL;
    in.timed_limits = (uint64_t)timed_limits;
    if (strcmp(regime, "sustained") != 0 && strcmp(regime, "burst") != 0) {
        PyErr_Format(PyExc_ValueError, "regime must be 'sustained' or 'burst', got '%s'", regime);
        return NULL;
    }
    in.burst = strcmp(regime, "burst") == 0;
    kb_regime_verdict v;
    kb_regime_judge(&in, &v);
    return Py_BuildValue("{s:O,s:s,s:z,s:O}", "held", v.held ? Py_True : Py_False, "why", v.why,
                         "note", v.note, "clocks_steady",
                         v.clocks_steady < 0 ? Py_None : v.clocks_steady ? Py_True : Py_False);
}

static PyMethodDef regime_methods[] = {
    {"clock_summary", (PyCFunction)(void (*)(void))clock_summary, METH_VARARGS | METH_KEYWORDS,
     "clock_summary(clocks, max_sm_clock_mhz=None) -> dict\n\n"
     "What a CUDA record's clocks[\"summary\"] says, from the NVML sampler's dict (None: not "
     "sampled): SM median/min/p95, reasons seen, the limit reasons, steady, the one-line "
     "summary; plus power_capped (a power cap that moved the clock). max_sm_clock_mhz=None: the "
     "dict's own max_sm_clock_mhz."},
    {"timed_fraction", (PyCFunction)(void (*)(void))timed_fraction, METH_VARARGS | METH_KEYWORDS,
     "timed_fraction(events_s, sampling_s, unroll=1.0) -> float | None\n\n"
     "Share of the sampling time inside timed iterations (sum(events_s) x unroll / "
     "sampling_s, at most 1); None when there is nothing to divide."},
    {"busy_fraction", busy_fraction, METH_VARARGS,
     "busy_fraction(timed, keep_busy_gpu_s, sampling_s) -> float | None\n\n"
     "timed plus the keep-busy bridges' GPU time over sampling_s, at most 1."},
    {"regime_verdict", (PyCFunction)(void (*)(void))regime_verdict,
     METH_VARARGS | METH_KEYWORDS,
     "regime_verdict(*, regime='sustained', clocks_locked=False, settled=None, "
     "settle_at_s=None, settle_max_s=None, settle_sm_mhz=None, clocks_read=False, "
     "timed_sm_mhz=None, power_capped=False, cold=False, busy_fraction=None, batches=0, "
     "unrecovered=0, recover_max_s=0.0, start_sm_mhz_min=None, start_sm_mhz_max=None, "
     "settled_unlimited=False, timed_limits=0) -> dict\n\n"
     "Whether the clock regime held: held, why ('held' or the reasons), note, and "
     "clocks_steady (burst: steady judged at the batches' starts; None: unchanged)."},
    {NULL, NULL, 0, NULL},
};

int kb_regime_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, regime_methods);
}
