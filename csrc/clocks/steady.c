/* steady.c -- when is a GPU in the state a figure claims? The rules of the two clock regimes.
 *
 * Sustained (regime="sustained"; burst is the default): the kernel under its own continuous load,
 * once the SM clock and the board power have settled -- what a serving system sees. A GPU held
 * back by a power limit does not get there at once. On the H200
 * (shared/data/h200_gemm_power_ramp.json) a bf16 GEMM's instantaneous power jumps to 720-860 W
 * within 0.1 s of load, the clock falls from 1980 to ~1470 MHz and sw_power_cap is raised by 0.4
 * s; nvmlDeviceGetPowerUsage, a one-second running average, climbs from 123 W to 690 W over the
 * first second. A rule that reads the average alone sees "low power, full clock" while the clock
 * has already dropped, and a rule judged over readings from before the load (a first call that
 * blocked the host) sees an idle GPU. So the load is settled, judged at the latest reading,
 * when:
 *   - the callable has loaded the GPU for at least min_load_s and two SM clock windows inside
 *     that load agree (rel_tol, at least one 15 MHz step); and
 *   - with instantaneous power (its mean over the load's last averaging window): either it
 *     stays under `headroom` of the power limit with no limit reason (the average converges
 *     under the limit: nothing will cap), or the averaged power has caught up with it (within
 *     power_tol or 15 W), so the controller acts on the load itself, not on the idle before it.
 *     The mean, not the median: a load with gaps (events mode, host turnarounds) reads bimodal,
 *     and an average catches up with its mean (a 576 W add never settled against a median);
 *   - under a limit, the load (with a capped load it continues) has run two averaging windows
 *     (capped_min_load_s): the average fills with the load in the first, and the clock the
 *     controller then holds comes in the second. On an H200 a bf16 GEMM 4000x4096x11008 ran
 *     541-545 us until 1.9 s of load and 550-555 us from 2 s to 19 s (after 6 s idle, the
 *     same again), while the two clock windows agreed and the average had caught up at 1.2 s:
 *     sampled from there, the figure was 1-2% faster than after 8 s of load;
 *   - without it: the load has lasted a whole averaging window and the average is not rising.
 * Sooner, on one short window of the load's own readings (kb_clock_settled_carried): the state
 * the previous measurement settled in, carried, or the board's maximum SM clock with nothing
 * limiting it and the power under the headroom (a clock at its maximum has no ramp left; the
 * H200 reads it between loads and reaches it within one update of a light one, so a light
 * load's first bench need not wait for two windows).
 *
 * Burst (opt-in): reproducible peak-clock figures. Each short batch starts only once the GPU has
 * recovered: no limit reason over the last readings, instantaneous power under the headroom and
 * the average well under the limit (nvbench's throttle-recovery idea, judged on power).
 *
 * The rules are pure (no NVML, no Python) so they are tested on the CPU over recorded traces.
 */
#include "kbench.h"
#include "kb_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CLOCK_STEP_MHZ 15.0     /* NVIDIA SM clocks move in 15 MHz steps */
#define POWER_TOL_MIN_W 15.0

/* Median of the finite v[i] with t[i] in (lo, hi]; NAN when there is none (or no memory to
 * sort them). `scratch` holds n. */
static double window_median(const double *t, const double *v, size_t n, double lo, double hi,
                            double *scratch)
{
    size_t k = 0;
    if (v == NULL)
        return NAN;
    for (size_t i = 0; i < n; i++)
        if (t[i] > lo && t[i] <= hi && isfinite(v[i]))
            scratch[k++] = v[i];
    if (k == 0 || kb_sort_doubles(scratch, (Py_ssize_t)k) < 0)
        return NAN;
    return kb_quantile_sorted(scratch, (Py_ssize_t)k, 0.5);
}

/* Mean of the finite v[i] with t[i] in (lo, hi]; NAN when there is none. The board's averaged
 * power is a mean over its window, so this is what it converges to. */
static double window_mean(const double *t, const double *v, size_t n, double lo, double hi)
{
    double sum = 0.0;
    size_t k = 0;
    if (v == NULL)
        return NAN;
    for (size_t i = 0; i < n; i++)
        if (t[i] > lo && t[i] <= hi && isfinite(v[i])) {
            sum += v[i];
            k++;
        }
    return k ? sum / (double)k : NAN;
}

uint64_t kb_clock_reasons_since(const kb_clock_trace *tr, double lo)
{
    uint64_t seen = 0;
    for (size_t i = tr->n; i-- > 0 && tr->t[i] > lo;)     /* t is non-decreasing */
        seen |= tr->reasons[i];
    return seen;
}

int kb_clock_settled(const kb_clock_trace *tr, double load_start_s, double power_limit_w,
                     const kb_settle_rule *rule, double prior_load_s, double *scratch,
                     double *median_last)
{
    *median_last = NAN;
    if (tr->n == 0)
        return KB_UNSETTLED;
    const double *t = tr->t;
    size_t n = tr->n;
    double now = t[n - 1], w = rule->window_s, loaded = now - load_start_s;
    *median_last = window_median(t, tr->sm_mhz, n, now - w, now, scratch);
    /* Both clock windows inside the load, so neither is from before it began. */
    if (loaded < rule->min_load_s || loaded < 2 * w || !isfinite(*median_last))
        return KB_UNSETTLED;
    double before = window_median(t, tr->sm_mhz, n, now - 2 * w, now - w, scratch);
    double tol = rule->rel_tol * before;
    if (!isfinite(before) ||
        fabs(*median_last - before) > (tol > CLOCK_STEP_MHZ ? tol : CLOCK_STEP_MHZ))
        return KB_UNSETTLED;
    int limited = (kb_clock_reasons_since(tr, now - w) & KB_CLOCK_LIMIT_REASONS) != 0;
    int settled = limited ? KB_SETTLED_UNDER_LIMIT : KB_SETTLED;
    if (limited && loaded + prior_load_s < rule->capped_min_load_s)
        return KB_UNSETTLED;
    double from = now - rule->avg_window_s > load_start_s ? now - rule->avg_window_s
                                                           : load_start_s;
    double inst = window_mean(t, tr->power_inst_w, n, from, now);
    double avg = window_median(t, tr->power_avg_w, n, now - w, now, scratch);
    if (isfinite(inst)) {
        if (!limited && isfinite(power_limit_w) && inst < rule->headroom * power_limit_w)
            return KB_SETTLED;
        if (!isfinite(avg))
            return loaded >= rule->avg_window_s ? settled : KB_UNSETTLED;
        double ptol = rule->power_tol * inst;
        return fabs(avg - inst) <= (ptol > POWER_TOL_MIN_W ? ptol : POWER_TOL_MIN_W)
                   ? settled : KB_UNSETTLED;
    }
    /* No instantaneous power: a whole averaging window of load, and the average not rising. */
    if (loaded < rule->avg_window_s)
        return KB_UNSETTLED;
    double avg0 = window_median(t, tr->power_avg_w, n, now - 2 * w, now - w, scratch);
    if (isfinite(avg) && isfinite(avg0)) {
        double rise = 0.03 * avg0 > 10.0 ? 0.03 * avg0 : 10.0;
        if (avg > avg0 + rise)
            return KB_UNSETTLED;
    }
    return settled;
}

/* Whether v changed between readings i - 1 and i (both read: a failed read is no change). */
static int changed(const double *v, size_t i)
{
    return v != NULL && isfinite(v[i - 1]) && isfinite(v[i]) && v[i] != v[i - 1];
}

/* The first reading i >= from (and >= 1) that shows an NVML refresh after reading i - 1, taken
 * at or after after_s; tr->n where none does. NVML refreshes its values together about every
 * 0.1 s on the H200 (the recorded GEMM ramp: SM clock, both powers and the reasons change at
 * the same reading); the averaged power moves at nearly every refresh, so a change of either
 * power between readings i - 1 and i shows one between them. */
static size_t next_refresh(const kb_clock_trace *tr, double after_s, size_t from)
{
    for (size_t i = from > 1 ? from : 1; i < tr->n; i++)
        if (tr->t[i - 1] >= after_s &&
            (changed(tr->power_avg_w, i) || changed(tr->power_inst_w, i)))
            return i;
    return tr->n;
}

/* The first reading wholly of an NVML snapshot taken after after_s, or tr->n where none shows
 * yet: the one after the refresh shows (a tick reads the fields one after another, so the
 * reading at the refresh may mix the old snapshot's and the new one's). */
static size_t first_fresh_reading(const kb_clock_trace *tr, double after_s)
{
    size_t i = next_refresh(tr, after_s, 1);
    return i + 1 < tr->n ? i + 1 : tr->n;
}

/* The one-window rule of kb_clock_settled_carried (see kbench.h): this load's readings of the
 * window show the known state `carry` (a carried one, or the board's maximum clock), every SM
 * reading within rel_tol of its clock. carry is valid here. lo NaN: the window is the last
 * window_s, once the load has run carry_response_s + window_s; else the readings after lo (a
 * fresh snapshot's on, first_fresh_reading), however long the load has run. */
static int window_verdict(const kb_clock_trace *tr, double load_start_s, double power_limit_w,
                          const kb_settle_rule *rule, const kb_settle_carry *carry,
                          double rel_tol, double window_s, double lo, double *scratch,
                          double *median)
{
    const double *t = tr->t;
    size_t n = tr->n;
    double now = t[n - 1];
    if (tr->power_inst_w == NULL || tr->sm_mhz == NULL)    /* no readings to judge */
        return KB_UNSETTLED;
    if (isnan(lo)) {
        if (now - load_start_s < rule->carry_response_s + window_s)
            return KB_UNSETTLED;
        lo = now - window_s;
    }
    double tol = rel_tol * carry->sm_mhz > CLOCK_STEP_MHZ ? rel_tol * carry->sm_mhz
                                                          : CLOCK_STEP_MHZ;
    double inst_sum = 0.0, inst_max = -INFINITY;
    size_t clocks = 0, powers = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(t[i] > lo && t[i] <= now))
            continue;
        if (isfinite(tr->sm_mhz[i])) {          /* a failed read is no reading */
            if (fabs(tr->sm_mhz[i] - carry->sm_mhz) > tol)
                return KB_UNSETTLED;
            clocks++;
        }
        if (isfinite(tr->power_inst_w[i])) {
            inst_sum += tr->power_inst_w[i];
            inst_max = tr->power_inst_w[i] > inst_max ? tr->power_inst_w[i] : inst_max;
            powers++;
        }
    }
    if (clocks == 0 || powers == 0)
        return KB_UNSETTLED;
    *median = window_median(t, tr->sm_mhz, n, lo, now, scratch);
    if (!carry->under_limit) {
        /* nothing limited the clock since this load began, nor will at this power: readings
         * from a response time on are the load's own, so less of the headroom is margin */
        double share = lo >= load_start_s + rule->carry_response_s ? rule->late_headroom
                                                                   : rule->headroom;
        if ((kb_clock_reasons_since(tr, load_start_s) & KB_CLOCK_LIMIT_REASONS) ||
            !isfinite(power_limit_w) || !(inst_max < share * power_limit_w))
            return KB_UNSETTLED;
        return KB_SETTLED;
    }
    /* under a limit: still limited, and the averaged power (mostly the previous load's) is
     * this load's power: the controller acts on the same power it settled on */
    if (!(kb_clock_reasons_since(tr, lo) & KB_CLOCK_LIMIT_REASONS) ||
        now - load_start_s + kb_settle_continued_s(rule, carry) < rule->capped_min_load_s)
        return KB_UNSETTLED;
    double avg = window_median(t, tr->power_avg_w, n, lo, now, scratch);
    double inst = inst_sum / (double)powers, ptol = rule->power_tol * inst;
    if (!isfinite(avg))
        return KB_UNSETTLED;
    return fabs(avg - inst) <= (ptol > POWER_TOL_MIN_W ? ptol : POWER_TOL_MIN_W)
               ? KB_SETTLED_UNDER_LIMIT : KB_UNSETTLED;
}

double kb_settle_continued_s(const kb_settle_rule *rule, const kb_settle_carry *carry)
{
    /* the averaged power's test (either rule) cannot tell a continued capped load from one
     * that began after a gap: it has filled again by the time the rule judges it */
    return carry != NULL && isfinite(carry->sm_mhz) && carry->under_limit &&
                   carry->ago_s >= 0 && carry->ago_s <= rule->capped_continue_gap_s &&
                   carry->loaded_s > 0
               ? carry->loaded_s : 0.0;
}

/* rule->end_vs_carry's verdict: the last window_s of a load too short for two of them against
 * the capped state it continued. Medians, not every reading: a capped clock swings with its
 * controller within one window (eight H200 GEMM traces, four GPUs: two adjacent 1 s windows'
 * medians differed by over 2% at 4 of 794 points, two 0.5 s windows at up to 69%). */
static int end_verdict(const kb_clock_trace *tr, double load_start_s, const kb_settle_rule *rule,
                       const kb_settle_carry *carry, double *scratch, double *median)
{
    const double *t = tr->t;
    size_t n = tr->n;
    double now = t[n - 1], w = rule->window_s;
    if (now - load_start_s < w || now - load_start_s >= 2 * w || tr->power_inst_w == NULL)
        return KB_UNSETTLED;
    double med = window_median(t, tr->sm_mhz, n, now - w, now, scratch);
    double tol = rule->rel_tol * carry->sm_mhz > CLOCK_STEP_MHZ ? rule->rel_tol * carry->sm_mhz
                                                                : CLOCK_STEP_MHZ;
    if (!isfinite(med) || fabs(med - carry->sm_mhz) > tol ||
        !(kb_clock_reasons_since(tr, now - w) & KB_CLOCK_LIMIT_REASONS))
        return KB_UNSETTLED;
    double avg = window_median(t, tr->power_avg_w, n, now - w, now, scratch);
    double inst = window_mean(t, tr->power_inst_w, n, now - w, now), ptol = rule->power_tol * inst;
    if (!isfinite(avg) || !isfinite(inst) ||
        fabs(avg - inst) > (ptol > POWER_TOL_MIN_W ? ptol : POWER_TOL_MIN_W))
        return KB_UNSETTLED;
    *median = med;
    return KB_SETTLED_UNDER_LIMIT;
}

int kb_clock_settled_carried(const kb_clock_trace *tr, double load_start_s, double power_limit_w,
                             const kb_settle_rule *rule, const kb_settle_carry *carry,
                             double *scratch, double *median_last, int *by)
{
    *by = KB_SETTLED_BY_RULE;
    int valid = carry != NULL && isfinite(carry->sm_mhz) &&
                carry->ago_s >= 0 && carry->ago_s <= rule->carry_max_gap_s;
    double prior = valid ? kb_settle_continued_s(rule, carry) : 0.0;
    int how = kb_clock_settled(tr, load_start_s, power_limit_w, rule, prior, scratch,
                               median_last);
    if (how != KB_UNSETTLED || tr->n == 0)
        return how;
    double med = NAN;
    if (valid && rule->end_vs_carry && prior > 0) {
        how = end_verdict(tr, load_start_s, rule, carry, scratch, &med);
        if (how != KB_UNSETTLED) {
            *by = KB_SETTLED_BY_CARRY;
            *median_last = med;
        }
        return how;
    }
    if (valid) {
        /* sooner where a snapshot taken after the margin shows (carry_update_margin_s) */
        size_t k = isfinite(rule->carry_update_margin_s)
                       ? first_fresh_reading(tr, load_start_s + rule->carry_update_margin_s)
                       : tr->n;
        if (k < tr->n)
            how = window_verdict(tr, load_start_s, power_limit_w, rule, carry, rule->rel_tol,
                                 rule->carry_window_s, tr->t[k - 1], scratch, &med);
        if (how == KB_UNSETTLED)
            how = window_verdict(tr, load_start_s, power_limit_w, rule, carry, rule->rel_tol,
                                 rule->carry_window_s, NAN, scratch, &med);
        if (how != KB_UNSETTLED) {
            *by = KB_SETTLED_BY_CARRY;
            *median_last = med;
            return how;
        }
    }
    /* the board's maximum clock: no ramp left, and unlimited at this power, as carried */
    if (isfinite(tr->max_sm_mhz) && tr->max_sm_mhz > 0) {
        kb_settle_carry top = {.sm_mhz = tr->max_sm_mhz, .under_limit = 0, .ago_s = 0.0,
                               .loaded_s = 0.0};
        how = window_verdict(tr, load_start_s, power_limit_w, rule, &top, rule->at_max_tol,
                             rule->at_max_window_s, NAN, scratch, &med);
        if (how != KB_UNSETTLED) {
            *by = KB_SETTLED_AT_MAX;
            *median_last = med;
        }
        return how;
    }
    return KB_UNSETTLED;
}

double kb_clock_settled_since(const kb_clock_trace *tr, double load_start_s, double sm_mhz,
                              int how, const kb_settle_rule *rule)
{
    if (how == KB_UNSETTLED || !isfinite(sm_mhz) || tr->n == 0)
        return INFINITY;
    if (how == KB_SETTLED_UNDER_LIMIT)
        return tr->t[tr->n - 1];
    double tol = rule->rel_tol * sm_mhz > CLOCK_STEP_MHZ ? rule->rel_tol * sm_mhz
                                                          : CLOCK_STEP_MHZ;
    for (size_t i = tr->n; i-- > 0;) {
        if (tr->t[i] <= load_start_s)
            break;
        int off = isfinite(tr->sm_mhz[i]) && fabs(tr->sm_mhz[i] - sm_mhz) > tol;
        if (how == KB_SETTLED && (tr->reasons[i] & KB_CLOCK_LIMIT_REASONS))
            off = 1;
        if (off)
            return tr->t[i];
    }
    return load_start_s;
}

int kb_power_recovered(const kb_clock_trace *tr, double power_limit_w,
                       const kb_settle_rule *rule)
{
    if (tr->n == 0)
        return 0;
    double now = tr->t[tr->n - 1];
    if (kb_clock_reasons_since(tr, now - rule->recover_window_s) & KB_CLOCK_LIMIT_REASONS)
        return 0;
    if (!isfinite(power_limit_w))
        return 1;
    /* the last finite reading of each power */
    double inst = NAN, avg = NAN;
    for (size_t i = tr->n; i-- > 0 && (!isfinite(inst) || !isfinite(avg));) {
        if (!isfinite(inst) && tr->power_inst_w && isfinite(tr->power_inst_w[i]))
            inst = tr->power_inst_w[i];
        if (!isfinite(avg) && tr->power_avg_w && isfinite(tr->power_avg_w[i]))
            avg = tr->power_avg_w[i];
    }
    if (isfinite(inst) && inst > rule->headroom * power_limit_w)
        return 0;
    return !(isfinite(avg) && avg > rule->recover_avg_frac * power_limit_w);
}

/* The arrays of a trace given from Python, converted and checked: one length, t_s
 * non-decreasing. Owned references in `held` (5 slots), released by trace_release. */
static int trace_from_python(PyObject *t_obj, PyObject *mhz_obj, PyObject *r_obj,
                             PyObject *p_obj, PyObject *pi_obj, kb_clock_trace *tr,
                             PyObject **held)
{
    memset(tr, 0, sizeof *tr);
    PyArrayObject *t = (PyArrayObject *)kb_as_double_array(t_obj, "t_s");
    held[0] = (PyObject *)t;
    if (t == NULL)
        return -1;
    npy_intp n = PyArray_SIZE(t);
    tr->t = PyArray_DATA(t);
    tr->n = (size_t)n;
    PyObject *objs[] = {mhz_obj, p_obj, pi_obj};
    const char *names[] = {"sm_mhz", "power_w", "power_inst_w"};
    const double **dst[] = {&tr->sm_mhz, &tr->power_avg_w, &tr->power_inst_w};
    for (int k = 0; k < 3; k++) {
        if (objs[k] == Py_None)
            continue;
        PyArrayObject *a = (PyArrayObject *)kb_as_double_array(objs[k], names[k]);
        held[1 + k] = (PyObject *)a;
        if (a == NULL)
            return -1;
        if (PyArray_SIZE(a) != n) {
            PyErr_Format(PyExc_ValueError, "t_s and %s must have one length, got %zd and %zd",
                         names[k], (Py_ssize_t)n, (Py_ssize_t)PyArray_SIZE(a));
            return -1;
        }
        *dst[k] = PyArray_DATA(a);
    }
    if (r_obj != NULL) {        /* NULL: a binding that reads no reasons */
        PyArrayObject *r = (PyArrayObject *)PyArray_FROMANY(r_obj, NPY_UINT64, 1, 1,
                                                            NPY_ARRAY_CARRAY_RO);
        held[4] = (PyObject *)r;
        if (r == NULL)
            return -1;
        if (PyArray_SIZE(r) != n) {
            PyErr_Format(PyExc_ValueError,
                         "t_s and reasons must have one length, got %zd and %zd",
                         (Py_ssize_t)n, (Py_ssize_t)PyArray_SIZE(r));
            return -1;
        }
        tr->reasons = PyArray_DATA(r);
    }
    for (npy_intp i = 1; i < n; i++)
        if (!(tr->t[i] >= tr->t[i - 1])) {
            PyErr_Format(PyExc_ValueError, "t_s must be non-decreasing (index %zd)",
                         (Py_ssize_t)i);
            return -1;
        }
    return 0;
}

static void trace_release(PyObject **held)
{
    for (int k = 0; k < 5; k++)
        Py_CLEAR(held[k]);
}

/* O& converter: a float, or None for NaN ("not given / unknown"). */
static int optional_double(PyObject *o, void *out)
{
    if (o == Py_None) {
        *(double *)out = NAN;
        return 1;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred())
        return 0;
    *(double *)out = d;
    return 1;
}

static int rule_check(const kb_settle_rule *r)
{
    if (!(r->window_s > 0) || !(r->rel_tol >= 0) || !(r->min_load_s >= 0) ||
        !(r->avg_window_s > 0) || !(r->power_tol >= 0) || !(r->headroom > 0) ||
        !(r->late_headroom > 0) || !(r->recover_window_s >= 0) || !(r->recover_avg_frac > 0) ||
        !(r->carry_max_gap_s >= 0) || !(r->carry_response_s >= 0) || !(r->carry_window_s > 0) ||
        !(isnan(r->carry_update_margin_s) || r->carry_update_margin_s >= 0) ||
        !(r->capped_min_load_s >= 0) || !(r->capped_continue_gap_s >= 0)) {
        PyErr_SetString(PyExc_ValueError, "need window_s > 0, rel_tol >= 0, min_load_s >= 0, "
                                          "avg_window_s > 0, power_tol >= 0, headroom > 0, "
                                          "late_headroom > 0, recover_window_s >= 0, "
                                          "recover_avg_frac > 0, "
                                          "carry_max_gap_s >= 0, carry_response_s >= 0, "
                                          "carry_window_s > 0, carry_update_margin_s >= 0 "
                                          "or None, capped_min_load_s >= 0, "
                                          "capped_continue_gap_s >= 0");
        return -1;
    }
    return 0;
}

/* The bindings' shared scan: the first reading at which the rule, applied to the readings up
 * to it, calls the load settled; carry NULL for the plain rule. (index, median, under_limit) or,
 * with a carry, (index, median, under_limit, by) -- by: KB_SETTLED_BY_*. */
static PyObject *settled_scan(PyObject *t_obj, PyObject *mhz_obj, PyObject *r_obj,
                              PyObject *p_obj, PyObject *pi_obj, double load_start, double limit,
                              double max_mhz, const kb_settle_rule *rule,
                              const kb_settle_carry *carry)
{
    if (rule_check(rule) < 0)
        return NULL;
    kb_clock_trace tr;
    PyObject *out = NULL, *held[5] = {NULL};
    double *scratch = NULL;
    if (trace_from_python(t_obj, mhz_obj, r_obj, p_obj, pi_obj, &tr, held) < 0)
        goto done;
    tr.max_sm_mhz = max_mhz;
    if (!isfinite(load_start))
        load_start = tr.n ? tr.t[0] : 0.0;      /* the load began with the first reading */
    if ((scratch = malloc((tr.n + 1) * sizeof *scratch)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = -1;
    double med = NAN;
    int how = KB_UNSETTLED, by_carry = 0;
    kb_clock_trace upto = tr;
    for (size_t i = 0; i < tr.n && at < 0; i++) {
        /* every prefix is judged again (n^2 over a long recorded trace): Ctrl-C is seen */
        if ((i & 1023) == 1023 && PyErr_CheckSignals() < 0)
            goto done;
        upto.n = i + 1;
        how = carry ? kb_clock_settled_carried(&upto, load_start, limit, rule, carry, scratch,
                                               &med, &by_carry)
                    : kb_clock_settled(&upto, load_start, limit, rule, 0.0, scratch, &med);
        if (how)
            at = (Py_ssize_t)i;
    }
    PyObject *under = how == KB_SETTLED_UNDER_LIMIT ? Py_True : Py_False;
    out = carry ? Py_BuildValue("(ndOi)", at, med, under, by_carry)
                : Py_BuildValue("(ndO)", at, med, under);
done:
    free(scratch);
    trace_release(held);
    return out;
}

/* clock_settled_at(t_s, sm_mhz, reasons, power_w=None, power_inst_w=None, *, load_start_s=None,
 *                  power_limit_w=None, <rule>) -> (index, median, under_limit)
 * The first reading at which the sustained rule, applied to the readings up to it, calls the
 * load settled (-1 if none), and the last window's median there (or at the end). For tests and
 * for reading recorded traces. */
static PyObject *clock_settled_at(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"t_s", "sm_mhz", "reasons", "power_w", "power_inst_w",
                             "load_start_s", "power_limit_w", "window_s", "rel_tol",
                             "min_load_s", "avg_window_s", "power_tol", "headroom",
                             "capped_min_load_s", NULL};
    PyObject *t_obj, *mhz_obj, *r_obj, *p_obj = Py_None, *pi_obj = Py_None;
    kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double load_start = NAN, limit = NAN;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO$O&O&ddddddd:clock_settled_at", kwlist,
                                     &t_obj, &mhz_obj, &r_obj, &p_obj, &pi_obj, optional_double,
                                     &load_start, optional_double, &limit, &rule.window_s,
                                     &rule.rel_tol, &rule.min_load_s, &rule.avg_window_s,
                                     &rule.power_tol, &rule.headroom, &rule.capped_min_load_s))
        return NULL;
    return settled_scan(t_obj, mhz_obj, r_obj, p_obj, pi_obj, load_start, limit, NAN, &rule,
                        NULL);
}

/* clock_settled_carried_at(t_s, sm_mhz, reasons, power_w=None, power_inst_w=None, *,
 *     carried_mhz, carried_under_limit=False, carried_ago_s=0.0, carried_loaded_s=0.0,
 *     load_start_s=None, power_limit_w=None, max_sm_mhz=None, <rule>)
 *     -> (index, median, under_limit, by)
 * clock_settled_at with a state carried from a previous measurement, or the board's maximum
 * clock (kb_clock_settled_carried). */
static PyObject *clock_settled_carried_at(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"t_s", "sm_mhz", "reasons", "power_w", "power_inst_w",
                             "carried_mhz", "carried_under_limit", "carried_ago_s",
                             "carried_loaded_s", "load_start_s", "power_limit_w",
                             "max_sm_mhz", "carry_max_gap_s", "carry_response_s",
                             "carry_window_s", "carry_update_margin_s", "late_headroom",
                             "capped_continue_gap_s", NULL};
    PyObject *t_obj, *mhz_obj, *r_obj, *p_obj = Py_None, *pi_obj = Py_None;
    kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    kb_settle_carry carry = {.sm_mhz = NAN, .under_limit = 0, .ago_s = 0.0, .loaded_s = 0.0};
    double load_start = NAN, limit = NAN;
    double max_mhz = NAN;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     "OOO|OO$O&pddO&O&O&dddO&dd:clock_settled_carried_at",
                                     kwlist, &t_obj, &mhz_obj, &r_obj, &p_obj, &pi_obj,
                                     optional_double, &carry.sm_mhz, &carry.under_limit,
                                     &carry.ago_s, &carry.loaded_s, optional_double,
                                     &load_start, optional_double, &limit, optional_double,
                                     &max_mhz, &rule.carry_max_gap_s, &rule.carry_response_s,
                                     &rule.carry_window_s, optional_double,
                                     &rule.carry_update_margin_s, &rule.late_headroom,
                                     &rule.capped_continue_gap_s))
        return NULL;
    if (!(carry.loaded_s >= 0)) {
        PyErr_SetString(PyExc_ValueError, "carried_loaded_s must be >= 0");
        return NULL;
    }
    return settled_scan(t_obj, mhz_obj, r_obj, p_obj, pi_obj, load_start, limit, max_mhz, &rule,
                        &carry);
}

/* clock_settled_since(t_s, sm_mhz, reasons, *, settled_mhz, under_limit=False,
 *                     load_start_s=None, rel_tol=0.02) -> float
 * kb_clock_settled_since over these readings: the time after which samples ran in the state
 * the load settled in (settled_mhz None: unsettled, inf). */
static PyObject *clock_settled_since(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"t_s", "sm_mhz", "reasons", "settled_mhz", "under_limit",
                             "load_start_s", "rel_tol", NULL};
    PyObject *t_obj, *mhz_obj, *r_obj, *held[5] = {NULL};
    kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double settled_mhz = NAN, load_start = NAN;
    int under = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$O&pO&d:clock_settled_since", kwlist,
                                     &t_obj, &mhz_obj, &r_obj, optional_double, &settled_mhz,
                                     &under, optional_double, &load_start, &rule.rel_tol))
        return NULL;
    if (rule_check(&rule) < 0)
        return NULL;
    kb_clock_trace tr;
    PyObject *out = NULL;
    if (trace_from_python(t_obj, mhz_obj, r_obj, Py_None, Py_None, &tr, held) == 0) {
        if (tr.sm_mhz == NULL)
            PyErr_SetString(PyExc_TypeError, "sm_mhz must be an array, not None");
        else {
            if (!isfinite(load_start))
                load_start = tr.n ? tr.t[0] : 0.0;
            int how = !isfinite(settled_mhz) ? KB_UNSETTLED
                      : under                ? KB_SETTLED_UNDER_LIMIT
                                             : KB_SETTLED;
            out = PyFloat_FromDouble(
                kb_clock_settled_since(&tr, load_start, settled_mhz, how, &rule));
        }
    }
    trace_release(held);
    return out;
}

/* power_recovered(t_s, reasons, power_w=None, power_inst_w=None, *, power_limit_w=None,
 *                 recover_window_s, recover_avg_frac, headroom) -> bool
 * Whether the burst rule would start a batch after the last of these readings. */
static PyObject *power_recovered(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"t_s", "reasons", "power_w", "power_inst_w", "power_limit_w",
                             "recover_window_s", "recover_avg_frac", "headroom", NULL};
    PyObject *t_obj, *r_obj, *p_obj = Py_None, *pi_obj = Py_None;
    PyObject *held[5] = {NULL};
    kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double limit = NAN;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO$O&ddd:power_recovered", kwlist, &t_obj,
                                     &r_obj, &p_obj, &pi_obj, optional_double, &limit, &rule.recover_window_s,
                                     &rule.recover_avg_frac, &rule.headroom))
        return NULL;
    if (rule_check(&rule) < 0)
        return NULL;
    kb_clock_trace tr;
    PyObject *out = NULL;
    if (trace_from_python(t_obj, Py_None, r_obj, p_obj, pi_obj, &tr, held) == 0)
        out = PyBool_FromLong(kb_power_recovered(&tr, limit, &rule));
    trace_release(held);
    return out;
}

/* nvml_refreshes(t_s, power_w=None, power_inst_w=None, *, after_s=None) -> int64 array
 * The readings that show an NVML refresh (next_refresh): i where either power changed from
 * reading i - 1, taken at or after after_s; reading i + 1 is wholly of the new snapshot. For
 * reading recorded traces (benchmarks/settle_replay.py) by the rule the carried settle uses. */
static PyObject *nvml_refreshes(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"t_s", "power_w", "power_inst_w", "after_s", NULL};
    PyObject *t_obj, *p_obj = Py_None, *pi_obj = Py_None, *held[5] = {NULL};
    double after = NAN;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO$O&:nvml_refreshes", kwlist, &t_obj, &p_obj,
                                     &pi_obj, optional_double, &after))
        return NULL;
    kb_clock_trace tr;
    PyObject *out = NULL;
    if (trace_from_python(t_obj, Py_None, NULL, p_obj, pi_obj, &tr, held) == 0) {
        int64_t *at = malloc((tr.n + 1) * sizeof *at);
        size_t k = 0;
        if (at == NULL)
            PyErr_NoMemory();
        else {
            double lo = isnan(after) ? -INFINITY : after;
            for (size_t i = next_refresh(&tr, lo, 1); i < tr.n; i = next_refresh(&tr, lo, i + 1))
                at[k++] = (int64_t)i;
            out = kb_array_copy(at, (Py_ssize_t)k, NPY_INT64, sizeof *at);
            free(at);
        }
    }
    trace_release(held);
    return out;
}

static PyMethodDef steady_methods[] = {
    {"nvml_refreshes", (PyCFunction)(void (*)(void))nvml_refreshes, METH_VARARGS | METH_KEYWORDS,
     "nvml_refreshes(t_s, power_w=None, power_inst_w=None, *, after_s=None) -> numpy.ndarray\n\n"
     "Indices i of the readings that show an NVML refresh: either power changed from reading "
     "i - 1 (both read), taken at or after after_s (None: any). Reading i + 1 is the first wholly "
     "of the new snapshot: what the carried settle rule starts from after its margin."},
    {"clock_settled_at", (PyCFunction)(void (*)(void))clock_settled_at,
     METH_VARARGS | METH_KEYWORDS,
     "clock_settled_at(t_s, sm_mhz, reasons, power_w=None, power_inst_w=None, *, "
     "load_start_s=t_s[0], power_limit_w=None, window_s=0.25, rel_tol=0.02, min_load_s=0.3, "
     "avg_window_s=1.0, power_tol=0.05, headroom=0.8, capped_min_load_s=2.0) -> "
     "(index, median_mhz, under_limit)\n\n"
     "The first reading at which kbench's sustained regime would call the load that began at "
     "load_start_s settled (-1: never), the median SM clock of the last window there, and "
     "whether it settled under a power/thermal limit. power_w is NVML's averaged board power, "
     "power_inst_w its instantaneous power (NVML_FI_DEV_POWER_INSTANT)."},
    {"clock_settled_carried_at", (PyCFunction)(void (*)(void))clock_settled_carried_at,
     METH_VARARGS | METH_KEYWORDS,
     "clock_settled_carried_at(t_s, sm_mhz, reasons, power_w=None, power_inst_w=None, *, "
     "carried_mhz, carried_under_limit=False, carried_ago_s=0.0, carried_loaded_s=0.0, "
     "load_start_s=t_s[0], power_limit_w=None, max_sm_mhz=None, "
     "carry_max_gap_s=1.0, carry_response_s=0.1, carry_window_s=0.05, "
     "carry_update_margin_s=0.05, late_headroom=0.9, capped_continue_gap_s=0.25) "
     "-> (index, median_mhz, under_limit, by)\n\n"
     "clock_settled_at when the previous measurement on the GPU ended carried_ago_s before "
     "this load began, settled at carried_mhz (under a limit or not): the load may settle on "
     "one short window of its own readings that agrees with the carried state (by=1; with "
     "carry_update_margin_s, also on the readings from NVML's first snapshot taken that long "
     "after the load began: a change of either power between two readings; None: not), or, "
     "with the board's maximum SM clock known (max_sm_mhz), that shows that clock with "
     "nothing limiting it and the power under the headroom (by=2; 0.8 of the limit, "
     "late_headroom for a window a response time into the load); else by the two-window "
     "rule (by=0). A load carried under a limit that began within capped_continue_gap_s of "
     "its end continues the previous one, which had run carried_loaded_s: that counts toward "
     "the capped rule's two averaging windows of load. carried_mhz=None carries nothing."},
    {"clock_settled_since", (PyCFunction)(void (*)(void))clock_settled_since,
     METH_VARARGS | METH_KEYWORDS,
     "clock_settled_since(t_s, sm_mhz, reasons, *, settled_mhz, under_limit=False, "
     "load_start_s=t_s[0], rel_tol=0.02) -> float\n\n"
     "The time after which a sample ran in the state the load settled in (SM clock "
     "settled_mhz), as the readings show: settled unlimited, the last reading after "
     "load_start_s with its SM clock beyond rel_tol of settled_mhz or a limit reason, else "
     "load_start_s; settled under a limit, the last reading (nothing before the settle). "
     "kbench's sustained regime keeps the samples taken while it settled from there on. "
     "settled_mhz=None: inf."},
    {"power_recovered", (PyCFunction)(void (*)(void))power_recovered,
     METH_VARARGS | METH_KEYWORDS,
     "power_recovered(t_s, reasons, power_w=None, power_inst_w=None, *, power_limit_w=None, "
     "recover_window_s=0.03, recover_avg_frac=0.6, headroom=0.8) -> bool\n\n"
     "Whether kbench's burst regime would start a batch after the last of these readings."},
    {NULL, NULL, 0, NULL},
};

int kb_steady_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, steady_methods);
}
