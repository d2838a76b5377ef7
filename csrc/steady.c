/* steady.c -- when has a GPU's SM clock settled? The stopping rule of the CUDA warm-up.
 *
 * A GPU held back by a power or thermal limit does not run at one clock: after a load starts,
 * its controller trims the SM clock over hundreds of milliseconds. A kernel timed inside that
 * transient (after kbench's clock-ramp kernel, FMA chains drawing far less power than a
 * tensor-core GEMM, or after an idle gap) runs faster than it will under continuous load: on
 * the H200 a bf16 8192^3 GEMM read 1405 us after the ramp and 1580 us back to back. So the
 * warm-up goes on with the measured callable until, judged at the latest reading:
 *   - no limit reason (power cap, thermal or hardware slowdown) was set during the last window
 *     and the board power is not rising (the median of the last power window is at most 3% or
 *     10 W above the one before): nothing holds the clock back and nothing is about to. NVML's
 *     power is a running average, so a heavy kernel shows a rising power well before the cap
 *     engages; on the H200 a GEMM read at 1980 MHz 0.13 s in, and the cap came later; or
 *   - a limit was set at least a window ago, and the median SM clock of the last window is
 *     within rel_tol (at least one 15 MHz step) of the median of the window before it.
 * The rule is pure (no NVML, no Python) so it is tested on the CPU over recorded clock traces.
 */
#include "kbench.h"
#include "kb_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CLOCK_STEP_MHZ 15.0     /* NVIDIA SM clocks move in 15 MHz steps */

/* Median of the finite mhz[i] with t[i] in (lo, hi]; NAN when there is none (or no memory to
 * sort them). `scratch` holds n. */
static double window_median(const double *t, const double *mhz, size_t n, double lo, double hi,
                            double *scratch)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] > lo && t[i] <= hi && isfinite(mhz[i]))
            scratch[k++] = mhz[i];
    if (k == 0 || kb_sort_doubles(scratch, (Py_ssize_t)k) < 0)
        return NAN;
    return kb_quantile_sorted(scratch, (Py_ssize_t)k, 0.5);
}

int kb_clock_settled(const double *t, const double *mhz, const double *power_w,
                     const uint64_t *reasons, size_t n, const kb_settle_rule *rule,
                     double *scratch, double *median_last)
{
    *median_last = NAN;
    if (n == 0)
        return 0;
    double now = t[n - 1];
    if (now - t[0] < rule->min_s)
        return 0;
    double w = rule->window_s;
    *median_last = window_median(t, mhz, n, now - w, now, scratch);
    if (!isfinite(*median_last))
        return 0;
    uint64_t seen = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] > now - w)
            seen |= reasons[i];
    if ((seen & KB_CLOCK_LIMIT_REASONS) == 0) {
        double pw = rule->power_window_s;
        if (power_w == NULL || now - t[0] < 2 * pw)
            return power_w == NULL ? KB_SETTLED : KB_UNSETTLED;
        double p1 = window_median(t, power_w, n, now - pw, now, scratch);
        double p0 = window_median(t, power_w, n, now - 2 * pw, now - pw, scratch);
        if (!isfinite(p1) || !isfinite(p0))
            return KB_SETTLED;  /* power unreadable: the clock alone says settled */
        double rise = 0.03 * p0 > 10.0 ? 0.03 * p0 : 10.0;
        return p1 <= p0 + rise ? KB_SETTLED : KB_UNSETTLED;
    }
    /* Under a limit: only once it has held for a whole window, so the two windows compared are
     * not both from before it engaged. */
    double first_limit = now;
    for (size_t i = 0; i < n; i++)
        if (reasons[i] & KB_CLOCK_LIMIT_REASONS) {
            first_limit = t[i];
            break;
        }
    if (now - t[0] < 2 * w || now - first_limit < w)
        return 0;
    double before = window_median(t, mhz, n, now - 2 * w, now - w, scratch);
    if (!isfinite(before))
        return 0;
    double tol = rule->rel_tol * before;
    return fabs(*median_last - before) <= (tol > CLOCK_STEP_MHZ ? tol : CLOCK_STEP_MHZ)
               ? KB_SETTLED_UNDER_LIMIT
               : KB_UNSETTLED;
}

/* clock_settled_at(t_s, sm_mhz, reasons, power_w=None, *, min_s, window_s, power_window_s,
 *                  rel_tol) -> (index, median, under_limit)
 * The first reading at which the rule, applied to the readings up to it, calls the clock
 * settled (-1 if none), and the last window's median there (or at the end). For tests and for
 * reading recorded traces. */
static PyObject *clock_settled_at(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"t_s", "sm_mhz", "reasons", "power_w", "min_s", "window_s",
                             "power_window_s", "rel_tol", NULL};
    PyObject *t_obj, *mhz_obj, *r_obj, *p_obj = Py_None;
    kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O$dddd:clock_settled_at", kwlist, &t_obj,
                                     &mhz_obj, &r_obj, &p_obj, &rule.min_s, &rule.window_s,
                                     &rule.power_window_s, &rule.rel_tol))
        return NULL;
    if (!(rule.min_s >= 0) || !(rule.window_s > 0) || !(rule.power_window_s > 0) ||
        !(rule.rel_tol >= 0)) {
        PyErr_SetString(PyExc_ValueError, "need min_s >= 0, window_s > 0, power_window_s > 0, "
                                          "rel_tol >= 0");
        return NULL;
    }
    PyObject *out = NULL;
    PyArrayObject *t = (PyArrayObject *)kb_as_double_array(t_obj, "t_s");
    PyArrayObject *mhz = t ? (PyArrayObject *)kb_as_double_array(mhz_obj, "sm_mhz") : NULL;
    PyArrayObject *r = mhz ? (PyArrayObject *)PyArray_FROMANY(r_obj, NPY_UINT64, 1, 1,
                                                              NPY_ARRAY_CARRAY_RO) : NULL;
    PyArrayObject *pw = NULL;
    double *scratch = NULL;
    if (r == NULL)
        goto done;
    if (p_obj != Py_None && (pw = (PyArrayObject *)kb_as_double_array(p_obj, "power_w")) == NULL)
        goto done;
    npy_intp n = PyArray_SIZE(t);
    if (PyArray_SIZE(mhz) != n || PyArray_SIZE(r) != n || (pw && PyArray_SIZE(pw) != n)) {
        PyErr_Format(PyExc_ValueError, "t_s, sm_mhz, reasons (and power_w) must have one length, "
                     "got %zd, %zd, %zd (and %zd)", (Py_ssize_t)n,
                     (Py_ssize_t)PyArray_SIZE(mhz), (Py_ssize_t)PyArray_SIZE(r),
                     pw ? (Py_ssize_t)PyArray_SIZE(pw) : (Py_ssize_t)n);
        goto done;
    }
    const double *tv = PyArray_DATA(t);
    for (npy_intp i = 1; i < n; i++)
        if (!(tv[i] >= tv[i - 1])) {
            PyErr_Format(PyExc_ValueError, "t_s must be non-decreasing (index %zd)",
                         (Py_ssize_t)i);
            goto done;
        }
    if ((scratch = malloc(((size_t)n + 1) * sizeof *scratch)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = -1;
    double med = NAN;
    int how = KB_UNSETTLED;
    for (npy_intp i = 0; i < n && at < 0; i++)
        if ((how = kb_clock_settled(tv, PyArray_DATA(mhz), pw ? PyArray_DATA(pw) : NULL,
                                    PyArray_DATA(r), (size_t)i + 1, &rule, scratch, &med)))
            at = (Py_ssize_t)i;
    out = Py_BuildValue("(ndO)", at, med, how == KB_SETTLED_UNDER_LIMIT ? Py_True : Py_False);
done:
    free(scratch);
    Py_XDECREF(t);
    Py_XDECREF(mhz);
    Py_XDECREF(r);
    Py_XDECREF(pw);
    return out;
}

static PyMethodDef steady_methods[] = {
    {"clock_settled_at", (PyCFunction)(void (*)(void))clock_settled_at,
     METH_VARARGS | METH_KEYWORDS,
     "clock_settled_at(t_s, sm_mhz, reasons, power_w=None, *, min_s=0.2, window_s=0.2, "
     "power_window_s=0.1, rel_tol=0.015) -> (index, median_mhz, under_limit)\n\nThe first reading "
     "at which kbench's warm-up would call the SM clock settled (-1: never), the median SM clock "
     "of the last window there, and whether it settled under a power/thermal limit."},
    {NULL, NULL, 0, NULL},
};

int kb_steady_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, steady_methods);
}
