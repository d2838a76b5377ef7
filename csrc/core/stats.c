/* stats.c -- order statistics, summaries and confidence intervals of the median.
 *
 * The C half (kb_quantile_sorted .. kb_summarize, the bootstrap) never touches Python, so the
 * Python-visible functions at the bottom copy their input into a private float64 array and
 * release the GIL around the sorting and resampling of large inputs.
 *
 * Quantiles follow numpy's default 'linear' method. The confidence interval of the median is
 * the distribution-free one from order statistics: [x_(d), x_(n+1-d)] covers the true median
 * with probability 1 - 2 P(B <= d-1), B ~ Binomial(n, 1/2), whatever the distribution.
 */
#include "kbench.h"
#include "kb_numpy.h"
#include "kb_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Inputs at least this long are processed with the GIL released. */
#define KB_NOGIL_MIN 4096

/* ------------------------------------------------------------------ sorting */

/* Order-preserving map of a double's bits to an unsigned key (negatives reversed). */
static inline uint64_t sort_key(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (u >> 63) ? ~u : u | 0x8000000000000000ULL;
}

static inline double from_sort_key(uint64_t k)
{
    uint64_t u = (k >> 63) ? k & ~0x8000000000000000ULL : ~k;
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Sort x[0..n) ascending. LSD radix sort on the keys, 8 passes of one byte, skipping bytes that
 * every key shares (timings share their sign and exponent bytes): O(n), and NaNs just land at
 * an end instead of breaking a comparison sort. 0, or -1 on allocation failure (x unchanged). */
int kb_sort_doubles(double *x, Py_ssize_t n)
{
    if (n < 2)
        return 0;
    if (n <= 32) {  /* insertion sort: cheaper than clearing 2048 counters */
        for (Py_ssize_t i = 1; i < n; i++) {
            double v = x[i];
            uint64_t kv = sort_key(v);
            Py_ssize_t j = i;
            for (; j > 0 && sort_key(x[j - 1]) > kv; j--)
                x[j] = x[j - 1];
            x[j] = v;
        }
        return 0;
    }
    if ((size_t)n > SIZE_MAX / (2 * sizeof(uint64_t)))
        return -1;
    uint64_t *a = malloc(2 * (size_t)n * sizeof *a);
    if (a == NULL)
        return -1;
    uint64_t *b = a + n, *base = a;
    size_t count[8][256];
    memset(count, 0, sizeof count);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t k = sort_key(x[i]);
        a[i] = k;
        for (int p = 0; p < 8; p++)
            count[p][(k >> (8 * p)) & 0xff]++;
    }
    for (int p = 0; p < 8; p++) {
        int shift = 8 * p;
        if (count[p][(a[0] >> shift) & 0xff] == (size_t)n)
            continue;  /* every key has this byte: the pass would not move anything */
        size_t offset[256], sum = 0;
        for (int d = 0; d < 256; d++) {
            offset[d] = sum;
            sum += count[p][d];
        }
        for (Py_ssize_t i = 0; i < n; i++)
            b[offset[(a[i] >> shift) & 0xff]++] = a[i];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        x[i] = from_sort_key(a[i]);
    free(base);
    return 0;
}

/* ------------------------------------------------------------------ quantiles and the CI */

double kb_quantile_sorted(const double *sorted, Py_ssize_t n, double q)
{
    if (n < 1)
        return NAN;
    double pos = q * (double)(n - 1);
    if (!(pos > 0.0))  /* also NaN q: the minimum rather than an out-of-range index */
        return sorted[0];
    if (pos >= (double)(n - 1))
        return sorted[n - 1];
    Py_ssize_t i = (Py_ssize_t)floor(pos);
    return kb_lerp(sorted[i], sorted[i + 1], pos - (double)i);
}

/* Whether P(B <= k) <= bound for B ~ Binomial(n, 1/2). Sums the pmf from k downwards and stops
 * as soon as the answer is certain: the sum already exceeds the bound, or the sum plus a
 * geometric bound on the rest stays under it (below the mean the ratio pmf(j-1)/pmf(j) only
 * shrinks). Only near-ties need the full O(sqrt n) terms. */
static int binom_half_cdf_at_most(Py_ssize_t n, Py_ssize_t k, double bound)
{
    if (k < 0)
        return 0.0 <= bound;
    if (k >= n)
        return 1.0 <= bound;
    int sign;  /* lgamma_r: lgamma's sign global is a data race without the GIL */
    double log_pmf = lgamma_r((double)n + 1.0, &sign) - lgamma_r((double)k + 1.0, &sign) -
                     lgamma_r((double)(n - k) + 1.0, &sign) - (double)n * M_LN2;
    double term = exp(log_pmf), sum = 0.0;
    for (Py_ssize_t j = k; j >= 0; j--) {
        sum += term;
        if (sum > bound)
            return 0;
        double ratio = (double)j / (double)(n - j + 1);  /* pmf(j-1) / pmf(j) */
        double next = term * ratio;
        if (ratio < 1.0 && sum + next / (1.0 - ratio) <= bound)
            return 1;
        if (next <= sum * 1e-17)  /* the rest cannot change the sum */
            return 1;
        term = next;
    }
    return 1;
}

Py_ssize_t kb_median_ci_rank(Py_ssize_t n, double level, Py_ssize_t hint)
{
    /* rank d covers when P(B <= d-1) <= alpha/2 */
    double half_alpha = (1.0 - level) / 2.0;
    if (n < 1 || isnan(level) || !binom_half_cdf_at_most(n, 0, half_alpha))
        return 0;
    /* lo covers; hi does not, or is past the middle where the two ranks would cross */
    Py_ssize_t lo = 1, hi = (n + 1) / 2 + 1;
    if (hint > 1 && hint < hi)
        lo = hint;
    /* gallop up from lo: a hint from a slightly smaller n is usually right or close */
    for (Py_ssize_t step = 1; lo + step < hi; step *= 2) {
        if (binom_half_cdf_at_most(n, lo + step - 1, half_alpha)) {
            lo += step;
        } else {
            hi = lo + step;
            break;
        }
    }
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (binom_half_cdf_at_most(n, mid - 1, half_alpha))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int kb_median_ci_sorted(const double *sorted, Py_ssize_t n, double level, double inflation,
                        double *lo, double *hi)
{
    if (n < 1) {
        *lo = *hi = NAN;
        return 1;
    }
    Py_ssize_t d = kb_inflated_rank(n, kb_median_ci_rank(n, level, 0), inflation);
    if (d == 0) {
        *lo = sorted[0];
        *hi = sorted[n - 1];
        return 1;
    }
    *lo = sorted[d - 1];
    *hi = sorted[n - d];
    return 0;
}

/* ------------------------------------------------------------------ serial dependence */

/* The order-statistic CI assumes independent samples. Samples taken one after another are not
 * always: a power controller's swings, a neighbour's burst on a shared host or a drift hold
 * runs of them on one side of the median. On a power-capped H200 GEMM the CI of 1 s of
 * samples read 0.11-0.15% while 1 s medians moved by 1.4%.
 *
 * The sample median's variance is, to first order, that of the fraction of samples below it
 * (over the density there squared), so the inflation is that fraction's variance against
 * p(1-p)/n: the long-run variance of y_i = 1[x_i < m] (1/2 at a tie) from overlapping batch
 * means (batches of n/16 consecutive samples, Meketon and Schmeiser's estimator, which has
 * about 1.5x the degrees of freedom of 16 separate batches) over y's own variance. Batches a
 * fixed fraction of the run long see correlations up to that length: a longer run sees
 * slower swings.
 *
 * Independent samples' estimate (n 200-2000, with and without ties on few values) scatters
 * about 1 and exceeds 1.85-1.93 in 1% of runs. Every estimate above 1 widens the CI: gated at
 * 2, the mild dependence of AR(1) paths with rho 0.3-0.5 (inflation 1.55-2.31) was left
 * unwidened and its CI covered 85-91% at the stop; widened from 1, 90-94%, for 6% more
 * samples on independent ones. From 2 the result says the order shows dependence. */

double kb_serial_vif(const double *x, Py_ssize_t n, double median)
{
    Py_ssize_t len = n / KB_VIF_BATCHES;
    if (n < KB_VIF_MIN_N || isnan(median))
        return NAN;
#define Y(v) ((v) < median ? 1.0 : (v) == median ? 0.5 : 0.0)
    double sum = 0.0, sum2 = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double y = Y(x[i]);
        sum += y;
        sum2 += y * y;
    }
    double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
    if (!(var > 1e-12))         /* every sample at the median: nothing varies */
        return 1.0;
    /* window sums of y over [j, j + len), slid one sample at a time; y takes values in
     * {0, 1/2, 1}, so the running sum is exact */
    double win = 0.0, ss = 0.0;
    for (Py_ssize_t i = 0; i < len; i++)
        win += Y(x[i]);
    for (Py_ssize_t j = 0;; j++) {
        double dev = win / (double)len - mean;
        ss += dev * dev;
        if (j + len >= n)
            break;
        win += Y(x[j + len]) - Y(x[j]);
    }
#undef Y
    double nn = (double)n, l = (double)len;
    double long_run = nn * l / ((nn - l) * (nn - l + 1.0)) * ss;
    return long_run / var;
}

double kb_ci_inflation(double vif)
{
    return vif > 1.0 ? vif : 1.0;
}

int kb_vif_saturated(double vif, Py_ssize_t n)
{
    /* batches of len samples cannot show an inflation much above len (a monotone path of 128
     * reads 8.2), and read a slow swing's low long before: AR(1) rho 0.9 (inflation 13.3)
     * reads 4.7 at n 128. Past a quarter of len the estimate says only that the run is too
     * short to see how slow the swing is: stopped there, such runs' CIs covered 78%; held to
     * a quarter, 92% (stopping at n 675 instead of 194), independent runs unchanged. */
    return n >= KB_VIF_MIN_N && vif > 0.25 * (double)(n / KB_VIF_BATCHES);
}

Py_ssize_t kb_inflated_rank(Py_ssize_t n, Py_ssize_t d, double inflation)
{
    if (d == 0 || !(inflation > 1.0))
        return d;
    /* the ranks' distance from the middle, (n + 1) / 2 - d, grows with the standard error */
    double mid = 0.5 * ((double)n + 1.0), r = floor(mid - (mid - (double)d) * sqrt(inflation));
    return r >= 1.0 ? (Py_ssize_t)r : 0;
}

/* ------------------------------------------------------------------ summary */

/* Sum with Neumaier's compensation: the mean of 1e5 samples stays within an ulp or two of
 * numpy's pairwise sum. */
static double compensated_sum(const double *x, Py_ssize_t n, int shift)
{
    double sum = 0.0, comp = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = shift ? ldexp(x[i], -shift) : x[i];
        double t = sum + v;
        comp += fabs(sum) >= fabs(v) ? (sum - t) + v : (v - t) + sum;
        sum = t;
    }
    return isfinite(sum) ? sum + comp : sum;  /* an inf sum would turn comp into NaN */
}

int kb_summarize(const double *x, Py_ssize_t n, double ci_level, int ordered, kb_summary *out)
{
    double *sorted = NULL, *dev = NULL;

    memset(out, 0, sizeof *out);
    out->n = n;
    out->ci_level = ci_level;
    if (n < 1) {  /* nothing to summarize: every statistic undefined */
        out->min = out->max = out->mean = out->median = out->std = NAN;
        out->q1 = out->q3 = out->iqr = out->mad = out->cv = NAN;
        out->ci_low = out->ci_high = out->serial_vif = NAN;
        out->rel_ci_halfwidth = INFINITY;
        out->ci_inflation = 1.0;
        return 0;
    }
    if ((size_t)n > SIZE_MAX / sizeof(double))
        goto error;
    sorted = malloc((size_t)n * sizeof *sorted);
    dev = malloc((size_t)n * sizeof *dev);
    if (sorted == NULL || dev == NULL)
        goto error;
    memcpy(sorted, x, (size_t)n * sizeof *sorted);
    if (kb_sort_doubles(sorted, n) < 0)
        goto error;

    out->min = sorted[0];
    out->max = sorted[n - 1];
    out->median = kb_quantile_sorted(sorted, n, 0.5);
    out->q1 = kb_quantile_sorted(sorted, n, 0.25);
    out->q3 = kb_quantile_sorted(sorted, n, 0.75);
    out->iqr = out->q3 - out->q1;

    /* Sums and squared deviations of values near DBL_MAX overflow, of values near DBL_MIN lose
     * precision: work on values scaled by a power of two (exact) when the data are extreme. */
    double largest = fmax(fabs(out->min), fabs(out->max));
    int shift = 0;
    if (isfinite(largest) && largest > 0.0) {
        int e;
        frexp(largest, &e);
        if (e > 500 || e < -500)
            shift = e;
    }
    double mean_s = compensated_sum(sorted, n, shift) / (double)n;
    out->mean = ldexp(mean_s, shift);
    if (n >= 2) {
        double ss = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double d = (shift ? ldexp(sorted[i], -shift) : sorted[i]) - mean_s;
            ss += d * d;
        }
        out->std = ldexp(sqrt(ss / (double)(n - 1)), shift);
    }
    out->cv = out->mean == 0.0 ? NAN : out->std / out->mean;

    /* |x - median| of sorted data is two ascending runs walking out from the median (left:
     * median - x, right: x - median); merging them sorts the deviations in O(n). */
    double med_s = ldexp(out->median, -shift);
    Py_ssize_t split = 0;
    while (split < n && sorted[split] < out->median)
        split++;
    Py_ssize_t l = split - 1, r = split, w = 0;
    while (l >= 0 || r < n) {
        double dl = l >= 0 ? med_s - (shift ? ldexp(sorted[l], -shift) : sorted[l]) : INFINITY;
        double dr = r < n ? (shift ? ldexp(sorted[r], -shift) : sorted[r]) - med_s : INFINITY;
        if (r >= n || (l >= 0 && dl <= dr)) {
            dev[w++] = dl;
            l--;
        } else {
            dev[w++] = dr;
            r++;
        }
    }
    out->mad = ldexp(kb_quantile_sorted(dev, n, 0.5), shift);

    double fence_low = out->q1 - 1.5 * out->iqr, fence_high = out->q3 + 1.5 * out->iqr;
    for (Py_ssize_t i = 0; i < n && sorted[i] < fence_low; i++)
        out->outliers_low++;
    for (Py_ssize_t i = n - 1; i >= 0 && sorted[i] > fence_high; i--)
        out->outliers_high++;

    out->serial_vif = ordered ? kb_serial_vif(x, n, out->median) : NAN;
    out->ci_inflation = kb_ci_inflation(out->serial_vif);
    out->vif_saturated = kb_vif_saturated(out->serial_vif, n);
    if (kb_median_ci_sorted(sorted, n, ci_level, out->ci_inflation, &out->ci_low,
                            &out->ci_high) == 0)
        out->rel_ci_halfwidth = kb_rel_halfwidth(out->ci_low, out->ci_high, out->median);
    else
        out->rel_ci_halfwidth = INFINITY;

    free(sorted);
    free(dev);
    return 0;

error:
    free(sorted);
    free(dev);
    return -1;
}

PyObject *kb_summary_to_dict(const kb_summary *s)
{
    return Py_BuildValue("{s:n,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,"
                         "s:O,s:O,s:n,s:n}",
                         "n", s->n, "min", s->min, "max", s->max, "mean", s->mean,
                         "median", s->median, "std", s->std, "q1", s->q1, "q3", s->q3,
                         "iqr", s->iqr, "mad", s->mad, "cv", s->cv, "ci_level", s->ci_level,
                         "ci_low", s->ci_low, "ci_high", s->ci_high,
                         "rel_ci_halfwidth", s->rel_ci_halfwidth, "serial_vif", s->serial_vif,
                         "ci_inflation", s->ci_inflation,
                         "dependent", s->serial_vif > KB_VIF_SHOWS_DEPENDENCE ? Py_True : Py_False,
                         "vif_saturated", s->vif_saturated ? Py_True : Py_False,
                         "outliers_low", s->outliers_low, "outliers_high", s->outliers_high);
}

/* ------------------------------------------------------------------ bootstrap */

/* xoshiro256** seeded through splitmix64: small, fast, and the same stream on every platform,
 * so a bootstrap is reproducible from its seed. */
typedef struct {
    uint64_t s[4];
} boot_rng;

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(boot_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(boot_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject). */
static uint64_t rng_below(boot_rng *r, uint64_t bound)
{
    __uint128_t m = (__uint128_t)rng_next(r) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = (0 - bound) % bound;
        while (low < threshold) {
            m = (__uint128_t)rng_next(r) * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* The medians of resamples [b0, b1) of sorted[0..n) into medians[b0..b1). A resample is drawn
 * as counts per index (counts: n of them), so its median is a walk over the counts (O(n)), no
 * sort. No Python. */
static void bootstrap_medians(const double *sorted, Py_ssize_t n, boot_rng *rng,
                              Py_ssize_t *counts, double *medians, Py_ssize_t b0, Py_ssize_t b1)
{
    Py_ssize_t rank_lo = (n - 1) / 2, rank_hi = n / 2;  /* equal for odd n */
    for (Py_ssize_t b = b0; b < b1; b++) {
        memset(counts, 0, (size_t)n * sizeof *counts);
        for (Py_ssize_t i = 0; i < n; i++)
            counts[rng_below(rng, (uint64_t)n)]++;
        Py_ssize_t seen = 0, i = 0;
        while (seen + counts[i] <= rank_lo)
            seen += counts[i++];
        double v_lo = sorted[i];
        while (seen + counts[i] <= rank_hi)
            seen += counts[i++];
        medians[b] = kb_lerp(v_lo, sorted[i], rank_lo == rank_hi ? 0.0 : 0.5);
    }
}

/* Percentile-bootstrap CI of the median of sorted[0..n): n_boot resamples, in chunks of about
 * 2^22 draws with the GIL released, so Ctrl-C is honoured between chunks (n_boot x n draws can
 * run for minutes). -1 with an exception set. */
static int bootstrap_median_ci(const double *sorted, Py_ssize_t n, double level, Py_ssize_t n_boot,
                               uint64_t seed, double *lo, double *hi)
{
    Py_ssize_t *counts = NULL;
    double *medians = NULL;
    boot_rng rng;
    int rc = -1;

    if ((size_t)n > SIZE_MAX / sizeof *counts || (size_t)n_boot > SIZE_MAX / sizeof *medians) {
        PyErr_NoMemory();
        return -1;
    }
    counts = malloc((size_t)n * sizeof *counts);
    medians = malloc((size_t)n_boot * sizeof *medians);
    if (counts == NULL || medians == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    rng_seed(&rng, seed);
    Py_ssize_t chunk = (Py_ssize_t)(((Py_ssize_t)1 << 22) / n) + 1;
    for (Py_ssize_t b0 = 0; b0 < n_boot; b0 += chunk) {
        Py_ssize_t b1 = n_boot - b0 > chunk ? b0 + chunk : n_boot;
        Py_BEGIN_ALLOW_THREADS
        bootstrap_medians(sorted, n, &rng, counts, medians, b0, b1);
        Py_END_ALLOW_THREADS
        if (PyErr_CheckSignals() < 0)
            goto done;
    }
    if (kb_sort_doubles(medians, n_boot) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    double half_alpha = (1.0 - level) / 2.0;
    *lo = kb_quantile_sorted(medians, n_boot, half_alpha);
    *hi = kb_quantile_sorted(medians, n_boot, 1.0 - half_alpha);
    rc = 0;

done:
    free(counts);
    free(medians);
    return rc;
}

/* ------------------------------------------------------------------ Python helpers */

/* Raise `type` with a formatted message, chaining the pending exception as its __cause__. */
static void raise_from_current(PyObject *type, const char *fmt, ...)
{
    PyObject *cause_type, *cause, *cause_tb;
    PyErr_Fetch(&cause_type, &cause, &cause_tb);
    PyErr_NormalizeException(&cause_type, &cause, &cause_tb);
    if (cause_tb != NULL && cause != NULL)
        PyException_SetTraceback(cause, cause_tb);
    Py_XDECREF(cause_type);
    Py_XDECREF(cause_tb);

    va_list va;
    va_start(va, fmt);
    PyErr_FormatV(type, fmt, va);
    va_end(va);
    if (cause == NULL)
        return;
    PyObject *exc_type, *exc, *exc_tb;
    PyErr_Fetch(&exc_type, &exc, &exc_tb);
    PyErr_NormalizeException(&exc_type, &exc, &exc_tb);
    if (exc != NULL) {
        PyException_SetContext(exc, Py_NewRef(cause));
        PyException_SetCause(exc, cause);  /* steals */
    } else {
        Py_DECREF(cause);
    }
    PyErr_Restore(exc_type, exc, exc_tb);
}

/* numpy parses text into numbers ("0.5" -> 0.5): samples given as strings are a mistake to
 * name, not data. New reference to obj as an array (obj itself for an ndarray); NULL with
 * *text set and a TypeError for text, NULL with *text 0 and numpy's error otherwise. */
static PyObject *not_text(PyObject *obj, const char *what, int *text)
{
    *text = 0;
    PyObject *arr = PyArray_Check(obj) ? (Py_INCREF(obj), obj)
                                       : PyArray_FROMANY(obj, NPY_NOTYPE, 0, 0, 0);
    if (arr == NULL)
        return NULL;
    char kind = PyArray_DESCR((PyArrayObject *)arr)->kind;
    if (kind == 'U' || kind == 'S') {
        PyErr_Format(PyExc_TypeError, "%s must be real numbers, not text (got %.200s)", what,
                     PyUnicode_Check(obj) || PyBytes_Check(obj) ? Py_TYPE(obj)->tp_name
                                                                : "strings");
        Py_DECREF(arr);
        *text = 1;
        return NULL;
    }
    return arr;
}

PyObject *kb_as_double_array(PyObject *obj, const char *what)
{
    int text;
    PyObject *any = not_text(obj, what, &text);
    if (any == NULL) {
        if (text || !kb_err_is_refusal())
            return NULL;
        /* numpy could not read it as is (a device array refusing host conversion): the
         * float64 conversion below fails too, and says so in kbench's words */
        PyErr_Clear();
        Py_INCREF(obj);
        any = obj;
    }
    /* ENSURECOPY: the result is private, so callers may sort it in place or read it with the
     * GIL released while other threads run. */
    PyArrayObject *arr = (PyArrayObject *)PyArray_FROMANY(any, NPY_DOUBLE, 0, 0,
                                                         NPY_ARRAY_CARRAY | NPY_ARRAY_ENSURECOPY);
    Py_DECREF(any);
    if (arr == NULL) {
        if (kb_err_is_refusal())
            raise_from_current(PyExc_TypeError,
                               "%s must be a 1-D sequence of real numbers convertible to float64 "
                               "(got %.200s)", what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (PyArray_NDIM(arr) != 1) {
        PyErr_Format(PyExc_ValueError, "%s must be 1-D, got a %d-D array", what,
                     PyArray_NDIM(arr));
        goto error;
    }
    if (PyArray_SIZE(arr) == 0) {
        PyErr_Format(PyExc_ValueError, "%s is empty", what);
        goto error;
    }
    return (PyObject *)arr;

error:
    Py_DECREF(arr);
    return NULL;
}

/* `samples` as a private float64 array without NaNs. New reference or NULL. */
static PyArrayObject *samples_arg(PyObject *obj)
{
    PyArrayObject *arr = (PyArrayObject *)kb_as_double_array(obj, "samples");
    if (arr == NULL)
        return NULL;
    Py_ssize_t at = kb_find_nan(PyArray_DATA(arr), PyArray_SIZE(arr));
    if (at >= 0) {
        PyErr_Format(PyExc_ValueError, "samples contain NaN (first at index %zd)", at);
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

int kb_check_level(double level, const char *what)
{
    if (level > 0.0 && level < 1.0)
        return 0;
    char buf[64];
    PyOS_snprintf(buf, sizeof buf, "%.17g", level);
    PyErr_Format(PyExc_ValueError, "%s must be in (0, 1), got %s", what, buf);
    return -1;
}

/* Sort arr's (private) data in place, without the GIL when it is long. MemoryError on failure. */
static int sort_array(PyArrayObject *arr)
{
    double *x = PyArray_DATA(arr);
    Py_ssize_t n = PyArray_SIZE(arr);
    int rc;
    if (n >= KB_NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        rc = kb_sort_doubles(x, n);
        Py_END_ALLOW_THREADS
    } else {
        rc = kb_sort_doubles(x, n);
    }
    if (rc < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ Python functions */

PyDoc_STRVAR(summarize_doc,
"summarize(samples, ci_level=0.95, ordered=True)\n--\n\n"
"Summary statistics of a 1-D sequence of numbers, as a dict: n, min, max, mean, median,\n"
"std (ddof=1; 0 for one sample), q1, q3, iqr (numpy's linear quantiles), mad (median\n"
"absolute deviation from the median, unscaled), cv (std / mean; NaN when the mean is 0),\n"
"ci_level, ci_low, ci_high (distribution-free order-statistic CI of the median; min and max\n"
"when there are too few samples for the level), rel_ci_halfwidth ((ci_high - ci_low) / 2 /\n"
"|median|; inf when there are too few samples), outliers_low, outliers_high (samples\n"
"outside the 1.5 IQR fences), serial_vif, ci_inflation.\n\n"
"ordered: the samples are in the order they were taken. serial_vif is then how much more\n"
"their median varies than that of as many independent samples, from overlapping batch means\n"
"of 1[x < median] over batches of n/16 samples (NaN below 128 samples); where it shows\n"
"dependence (above 2) the CI's ranks move away from the middle by sqrt(serial_vif), and\n"
"ci_inflation says by what (else 1). ordered=False: an independent CI, serial_vif NaN.");

static PyObject *py_summarize(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"samples", "ci_level", "ordered", NULL};
    PyObject *obj;
    double level = 0.95;
    int ordered = 1;
    kb_summary s;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dp:summarize", kwlist, &obj, &level,
                                     &ordered))
        return NULL;
    if (kb_check_level(level, "ci_level") < 0)
        return NULL;
    PyArrayObject *arr = samples_arg(obj);
    if (arr == NULL)
        return NULL;
    const double *x = PyArray_DATA(arr);
    Py_ssize_t n = PyArray_SIZE(arr);
    if (n >= KB_NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        rc = kb_summarize(x, n, level, ordered, &s);
        Py_END_ALLOW_THREADS
    } else {
        rc = kb_summarize(x, n, level, ordered, &s);
    }
    Py_DECREF(arr);
    if (rc < 0)
        return PyErr_NoMemory();
    return kb_summary_to_dict(&s);
}

/* q as a probability in [0, 1]; ValueError otherwise. */
static int check_q(double q)
{
    if (q >= 0.0 && q <= 1.0)
        return 0;
    char buf[64];
    PyOS_snprintf(buf, sizeof buf, "%.17g", q);
    PyErr_Format(PyExc_ValueError, "q must be in [0, 1], got %s", buf);
    return -1;
}

PyDoc_STRVAR(quantile_doc,
"quantile(samples, q)\n--\n\n"
"The q-quantile of samples with numpy's default ('linear') method, 0 <= q <= 1.\n"
"q may be a sequence: then a list of quantiles, one per q.");

static PyObject *py_quantile(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"samples", "q", NULL};
    PyObject *obj, *q_obj, *result = NULL;
    PyArrayObject *arr = NULL, *q_arr = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:quantile", kwlist, &obj, &q_obj))
        return NULL;
    int scalar_q = PyArray_Check(q_obj) ? PyArray_NDIM((PyArrayObject *)q_obj) == 0
                                        : !PySequence_Check(q_obj);
    double q = 0.0;
    if (scalar_q) {
        q = PyFloat_AsDouble(q_obj);
        if (q == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError))
                raise_from_current(PyExc_TypeError,
                                   "q must be a real number or a sequence of them (got %.200s)",
                                   Py_TYPE(q_obj)->tp_name);
            return NULL;
        }
        if (check_q(q) < 0)
            return NULL;
    } else {
        if ((q_arr = (PyArrayObject *)kb_as_double_array(q_obj, "q")) == NULL)
            return NULL;
        const double *qs = PyArray_DATA(q_arr);
        for (Py_ssize_t i = 0; i < PyArray_SIZE(q_arr); i++)
            if (check_q(qs[i]) < 0)
                goto error;
    }
    if ((arr = samples_arg(obj)) == NULL || sort_array(arr) < 0)
        goto error;
    const double *sorted = PyArray_DATA(arr);
    Py_ssize_t n = PyArray_SIZE(arr);
    if (scalar_q) {
        result = PyFloat_FromDouble(kb_quantile_sorted(sorted, n, q));
    } else {
        const double *qs = PyArray_DATA(q_arr);
        Py_ssize_t nq = PyArray_SIZE(q_arr);
        if ((result = PyList_New(nq)) == NULL)
            goto error;
        for (Py_ssize_t i = 0; i < nq; i++) {
            PyObject *v = PyFloat_FromDouble(kb_quantile_sorted(sorted, n, qs[i]));
            if (v == NULL)
                goto error;
            PyList_SET_ITEM(result, i, v);
        }
    }
    Py_DECREF(arr);
    Py_XDECREF(q_arr);
    return result;

error:
    Py_XDECREF(result);
    Py_XDECREF(arr);
    Py_XDECREF(q_arr);
    return NULL;
}

PyDoc_STRVAR(median_ci_doc,
"median_ci(samples, level=0.95)\n--\n\n"
"Distribution-free confidence interval (lo, hi) of the median: the order statistics\n"
"x_(d) and x_(n+1-d) with the largest d whose binomial coverage is at least level.\n"
"ValueError when samples are too few for the level (n >= 6 for 0.95).");

/* ValueError: n samples cannot give a CI of the median at this level (an order-statistic
 * one, nor a bootstrap's, whose percentiles would claim a coverage it does not have). */
static void too_few_for_ci(const char *fn, Py_ssize_t n, double level)
{
    /* [min, max] covers with 1 - 2^(1-n): the smallest n for which that reaches level */
    Py_ssize_t need = n + 1;
    while (ldexp(1.0, (int)(1 - need)) > 1.0 - level)
        need++;
    char buf[64];
    PyOS_snprintf(buf, sizeof buf, "%g", level);
    PyErr_Format(PyExc_ValueError,
                 "%s: %zd samples are too few for a %s confidence interval of the median (need "
                 "at least %zd)", fn, n, buf, need);
}

static PyObject *py_median_ci(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"samples", "level", NULL};
    PyObject *obj;
    double level = 0.95, lo, hi;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|d:median_ci", kwlist, &obj, &level))
        return NULL;
    if (kb_check_level(level, "level") < 0)
        return NULL;
    PyArrayObject *arr = samples_arg(obj);
    if (arr == NULL)
        return NULL;
    if (sort_array(arr) < 0)
        goto error;
    Py_ssize_t n = PyArray_SIZE(arr);
    if (kb_median_ci_sorted(PyArray_DATA(arr), n, level, 1.0, &lo, &hi) != 0) {
        too_few_for_ci("median_ci", n, level);
        goto error;
    }
    Py_DECREF(arr);
    return Py_BuildValue("(dd)", lo, hi);

error:
    Py_DECREF(arr);
    return NULL;
}

PyDoc_STRVAR(bootstrap_median_ci_doc,
"bootstrap_median_ci(samples, level=0.95, n_boot=2000, seed=0)\n--\n\n"
"Percentile-bootstrap confidence interval (lo, hi) of the median from n_boot resamples.\n"
"Deterministic: the same seed gives the same interval on every platform. Refuses the samples\n"
"too few for median_ci at this level (ValueError), whose interval would not cover as stated.");

static PyObject *py_bootstrap_median_ci(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"samples", "level", "n_boot", "seed", NULL};
    PyObject *obj;
    double level = 0.95, lo, hi;
    Py_ssize_t n_boot = 2000;
    unsigned long long seed = 0;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dnK:bootstrap_median_ci", kwlist, &obj, &level,
                                     &n_boot, &seed))
        return NULL;
    if (kb_check_level(level, "level") < 0)
        return NULL;
    if (n_boot < 1) {
        PyErr_Format(PyExc_ValueError, "n_boot must be >= 1, got %zd", n_boot);
        return NULL;
    }
    PyArrayObject *arr = samples_arg(obj);
    if (arr == NULL)
        return NULL;
    if (sort_array(arr) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    const double *sorted = PyArray_DATA(arr);
    Py_ssize_t n = PyArray_SIZE(arr);
    if (kb_median_ci_rank(n, level, 0) == 0) {  /* 2 samples' "95%" interval covered 50% */
        too_few_for_ci("bootstrap_median_ci", n, level);
        Py_DECREF(arr);
        return NULL;
    }
    rc = bootstrap_median_ci(sorted, n, level, n_boot, (uint64_t)seed, &lo, &hi);
    Py_DECREF(arr);
    if (rc < 0)
        return NULL;
    return Py_BuildValue("(dd)", lo, hi);
}

static PyMethodDef stats_methods[] = {
    {"summarize", (PyCFunction)(void (*)(void))py_summarize, METH_VARARGS | METH_KEYWORDS,
     summarize_doc},
    {"quantile", (PyCFunction)(void (*)(void))py_quantile, METH_VARARGS | METH_KEYWORDS,
     quantile_doc},
    {"median_ci", (PyCFunction)(void (*)(void))py_median_ci, METH_VARARGS | METH_KEYWORDS,
     median_ci_doc},
    {"bootstrap_median_ci", (PyCFunction)(void (*)(void))py_bootstrap_median_ci,
     METH_VARARGS | METH_KEYWORDS, bootstrap_median_ci_doc},
    {NULL, NULL, 0, NULL},
};

int kb_stats_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, stats_methods);
}
