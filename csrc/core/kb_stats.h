/* kb_stats.h -- private to stats.c and criterion.c: the pieces of the order statistics that the
 * "ci" stopping rule shares with kb_summarize, so both give the same numbers for the same data.
 * Everything here is GIL-free and never sets a Python exception. */
#ifndef KB_STATS_H
#define KB_STATS_H

#include "kbench.h"
#include <math.h>

/* numpy's linear interpolation (numpy.lib._function_base_impl._lerp): from the nearer end, so
 * t = 0 and t = 1 give a and b exactly and the result matches np.quantile bit for bit. Where
 * b - a overflows (finite a, b of opposite signs near DBL_MAX) numpy returns +-inf; the
 * weighted sum is finite there, so it is used instead. */
static inline double kb_lerp(double a, double b, double t)
{
    if (t == 0.0)
        return a;
    double diff = b - a;
    if (isinf(diff) && isfinite(a) && isfinite(b))
        return a * (1.0 - t) + b * t;
    return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

/* (hi - lo) / 2 / |median|: 0 for a zero-width interval (even around a zero median), inf for a
 * non-zero width around a zero median. Halves first so hi - lo cannot overflow. */
static inline double kb_rel_halfwidth(double lo, double hi, double median)
{
    double half = hi * 0.5 - lo * 0.5;
    if (half == 0.0)
        return 0.0;
    if (median == 0.0)
        return INFINITY;
    return half / fabs(median);
}

/* Index of the first NaN in x[0..n), or -1. */
static inline Py_ssize_t kb_find_nan(const double *x, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (isnan(x[i]))
            return i;
    return -1;
}

/* The 1-based rank d of the order-statistic confidence interval [x_(d), x_(n+1-d)] of the
 * median: the largest d whose coverage 1 - 2 P(B <= d-1), B ~ Binomial(n, 1/2), is >= level.
 * 0 when even [min, max] covers less than level (n too small) or level is NaN. `hint` is 0 or a
 * rank known to cover at this n and level -- it is trusted, not checked -- e.g. the answer for
 * a smaller n at the same level (d only grows with n). With a good hint a call is one or two
 * binomial tail evaluations instead of a binary search. */
Py_ssize_t kb_median_ci_rank(Py_ssize_t n, double level, Py_ssize_t hint);

/* kb_serial_vif's batches: n/16 samples long, at least 8 of them (fewer samples cannot show
 * their order's dependence, so the "ci" rule does not stop before it has this many). */
#define KB_VIF_BATCHES 16
#define KB_VIF_MIN_N (KB_VIF_BATCHES * 8)

/* The rank d of n samples' CI (kb_median_ci_rank) for samples whose median varies `inflation`
 * times as much as independent ones': d's distance from the middle grown by sqrt(inflation).
 * 0 when that passes the first sample (or d is 0); d itself for inflation <= 1. */
Py_ssize_t kb_inflated_rank(Py_ssize_t n, Py_ssize_t d, double inflation);

#endif /* KB_STATS_H */
