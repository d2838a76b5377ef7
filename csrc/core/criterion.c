/* criterion.c -- the stopping rules behind kb_criterion.
 *
 *   "ci"       the relative half-width of the order-statistic CI of the median (the one
 *              kb_summarize reports, widened where the samples' order shows dependence) is at
 *              most `target`.
 *   "entropy"  nvbench's entropy criterion: the Shannon entropy of the samples' value histogram
 *              has stopped changing -- over the entropies after each of the last 299 samples,
 *              the least-squares slope is at most `target` in magnitude (bits per sample;
 *              nvbench's 0.048 degrees is a slope of 8.4e-4) and R^2 >= 0.36.
 *
 * The timing loop calls is_finished every few samples with the whole sample array, perhaps
 * without the GIL. Each rule remembers what it has consumed and only looks at the new tail, so a
 * call costs O(new samples + sqrt n), not a sort of everything; "ci" adds one O(n) pass over the
 * samples in order (their dependence), which the loop's checks at every n/16 keep to about 17
 * visits a sample in all. A caller that drops its samples says so (kb_criterion_reset); fewer
 * samples than last time, or a different first sample, also starts the rule over (a safety net:
 * a new run can begin with the same first value, on a timer's coarse steps).
 */
#include "kbench.h"
#include "kb_numpy.h"
#include "kb_stats.h"
#include "kb_array.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KB_NOGIL_MIN 4096  /* criterion_check releases the GIL from this many samples */

const char *kb_stop_name(kb_stop s)
{
    switch (s) {
    case KB_STOP_RUNNING:
        return "running";
    case KB_STOP_PRECISION:
        return "precision";
    case KB_STOP_TIME_CAP:
        return "time_cap";
    case KB_STOP_BUDGET:
        return "budget";
    case KB_STOP_ITER_CAP:
        return "iter_cap";
    }
    return "unknown";
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Grow *buf (of *cap doubles) to hold at least `need`. -1 on allocation failure. */
static int reserve(double **buf, Py_ssize_t *cap, Py_ssize_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = kb_grown_capacity((size_t)*cap, (size_t)need, 64, sizeof **buf);
    double *p = kb_resize(*buf, c, sizeof *p);
    if (p == NULL)
        return -1;
    *buf = p;
    *cap = (Py_ssize_t)c;
    return 0;
}

/* ------------------------------------------------------------------ "ci" */

/* The samples seen so far, sorted, as two runs: a large merged one and a small recent one that
 * takes insertions. Merging when recent reaches ~sqrt(2 merged) balances the O(recent) insert
 * against the O(merged) merge: O(sqrt n) a sample. Order statistics of the union come from a
 * binary search over both runs, so nothing is ever re-sorted. */
typedef struct {
    double *merged, *recent;
    Py_ssize_t n_merged, cap_merged, n_recent, cap_recent;
    Py_ssize_t consumed;    /* samples[0..consumed) are in merged + recent */
    double first;           /* samples[0] of this run */
    Py_ssize_t rank_hint;   /* last CI rank: it only grows with n */
} ci_rule;

static void ci_reset(ci_rule *r)
{
    r->n_merged = r->n_recent = r->consumed = r->rank_hint = 0;
}

static int ci_merge(ci_rule *r)
{
    if (reserve(&r->merged, &r->cap_merged, r->n_merged + r->n_recent) < 0)
        return -1;
    /* backwards, so merged can be its own output */
    Py_ssize_t i = r->n_merged - 1, j = r->n_recent - 1, w = r->n_merged + r->n_recent - 1;
    while (j >= 0) {
        if (i >= 0 && r->merged[i] > r->recent[j])
            r->merged[w--] = r->merged[i--];
        else
            r->merged[w--] = r->recent[j--];
    }
    r->n_merged += r->n_recent;
    r->n_recent = 0;
    return 0;
}

static int ci_add(ci_rule *r, double v)
{
    if (reserve(&r->recent, &r->cap_recent, r->n_recent + 1) < 0)
        return -1;
    Py_ssize_t lo = 0, hi = r->n_recent;  /* first position with recent[pos] > v */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (r->recent[mid] > v)
            hi = mid;
        else
            lo = mid + 1;
    }
    memmove(r->recent + lo + 1, r->recent + lo, (size_t)(r->n_recent - lo) * sizeof(double));
    r->recent[lo] = v;
    r->n_recent++;
    if (r->n_recent >= 32 && (double)r->n_recent * (double)r->n_recent >= 2.0 * (double)r->n_merged)
        return ci_merge(r);
    return 0;
}

/* The value of 0-based rank k in the union of the sorted runs a[0..na) and b[0..nb): binary
 * search for how many (i) of the k+1 smallest come from a, then the answer is the larger of the
 * last one taken from each run. */
static double select_union(const double *a, Py_ssize_t na, const double *b, Py_ssize_t nb,
                           Py_ssize_t k)
{
    Py_ssize_t take = k + 1;
    Py_ssize_t lo = take > nb ? take - nb : 0, hi = take < na ? take : na;
    while (lo < hi) {  /* smallest i with i == na, or j == 0, or b[j-1] <= a[i] (j = take-i) */
        Py_ssize_t i = lo + (hi - lo) / 2, j = take - i;
        if (j > 0 && b[j - 1] > a[i])
            lo = i + 1;
        else
            hi = i;
    }
    Py_ssize_t i = lo, j = take - lo;
    if (i == 0)
        return b[j - 1];
    if (j == 0)
        return a[i - 1];
    return a[i - 1] > b[j - 1] ? a[i - 1] : b[j - 1];
}

static int ci_is_finished(kb_criterion *c, const double *samples, Py_ssize_t n)
{
    ci_rule *r = c->impl;
    if (n < r->consumed || (r->consumed > 0 && !same_bits(samples[0], r->first)))
        ci_reset(r);
    if (r->consumed == 0 && n > 0)
        r->first = samples[0];
    for (; r->consumed < n; r->consumed++)
        if (ci_add(r, samples[r->consumed]) < 0)
            return -1;

    Py_ssize_t d = kb_median_ci_rank(n, c->ci_level, r->rank_hint);
    if (d == 0) {  /* too few samples for any CI at this level */
        c->achieved = INFINITY;
        return 0;
    }
    r->rank_hint = d;
    const double *a = r->merged, *b = r->recent;
    Py_ssize_t na = r->n_merged, nb = r->n_recent;
    double mid_lo = select_union(a, na, b, nb, (n - 1) / 2);
    double median = n % 2 ? mid_lo : kb_lerp(mid_lo, select_union(a, na, b, nb, n / 2), 0.5);
    /* samples whose order shows dependence count for less (kb_serial_vif): one O(n) pass a
     * check, and the loop checks every n/16 samples */
    double vif = kb_serial_vif(samples, n, median);
    d = kb_inflated_rank(n, d, kb_ci_inflation(vif));
    if (d == 0) {
        c->achieved = INFINITY;
        return 0;
    }
    double lo = select_union(a, na, b, nb, d - 1), hi = select_union(a, na, b, nb, n - d);
    c->achieved = kb_rel_halfwidth(lo, hi, median);
    /* A CI no wider than one timer step is the most such samples can say: it stops the rule,
     * and a narrower one (samples that agree because they sit on one step: zero width) is
     * reported as one step wide, never as a precision the timer cannot read. */
    double step = c->resolution > 0 && median > 0 ? 0.5 * c->resolution / median : 0.0;
    if (c->resolution > 0 && median == 0.0)
        step = INFINITY;    /* a median under one step: the step is all the timer can say */
    double floor = step * (1.0 + 1e-9);     /* rounding */
    /* a CI is trusted once its samples' order can be judged: ten samples of a slow swing
     * agree closely on a figure that is not the swing's median, and a run whose dependence
     * is as long as its batches can show has not seen the swing's length yet */
    int done = n >= KB_VIF_MIN_N && !kb_vif_saturated(vif, n) &&
               c->achieved <= (floor > c->target ? floor : c->target);
    if (c->achieved < step)
        c->achieved = step;
    return done;
}

static void ci_destroy(kb_criterion *c)
{
    ci_rule *r = c->impl;
    free(r->merged);
    free(r->recent);
}

/* ------------------------------------------------------------------ "entropy" */

#define ENTROPY_WINDOW 299   /* nvbench's window of entropies */
#define ENTROPY_MIN_R2 0.36  /* nvbench's min-r2 */

/* The histogram of exact values is an open-addressing hash table (value bits -> count), so a
 * sample costs O(1); the entropy follows from S = sum c log2 c as log2 N - S / N. */
typedef struct {
    uint64_t *keys;
    int64_t *counts;                /* 0 marks an empty slot */
    size_t cap, used;               /* cap is a power of two, used <= cap / 2 */
    double sum_clogc;
    double ring[ENTROPY_WINDOW];    /* entropy after each of the last samples */
    Py_ssize_t ring_len, ring_head; /* ring_head: the oldest entry once full */
    Py_ssize_t consumed;
    double first;
} entropy_rule;

static void entropy_reset(entropy_rule *r)
{
    if (r->counts != NULL)
        memset(r->counts, 0, r->cap * sizeof *r->counts);
    r->used = 0;
    r->sum_clogc = 0.0;
    r->ring_len = r->ring_head = r->consumed = 0;
}

static inline size_t hash_bits(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* The slot of key, or of the empty slot where it would go. */
static size_t slot_of(const entropy_rule *r, uint64_t key)
{
    size_t mask = r->cap - 1, s = hash_bits(key) & mask;
    while (r->counts[s] != 0 && r->keys[s] != key)
        s = (s + 1) & mask;
    return s;
}

static int entropy_grow(entropy_rule *r)
{
    size_t new_cap = r->cap ? 2 * r->cap : 1024;
    uint64_t *old_keys = r->keys;
    int64_t *old_counts = r->counts;
    size_t old_cap = r->cap;
    if (new_cap > SIZE_MAX / sizeof(uint64_t))
        return -1;
    uint64_t *keys = malloc(new_cap * sizeof *keys);
    int64_t *counts = calloc(new_cap, sizeof *counts);
    if (keys == NULL || counts == NULL) {
        free(keys);
        free(counts);
        return -1;
    }
    r->keys = keys;
    r->counts = counts;
    r->cap = new_cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old_counts[i] != 0) {
            size_t s = slot_of(r, old_keys[i]);
            keys[s] = old_keys[i];
            counts[s] = old_counts[i];
        }
    }
    free(old_keys);
    free(old_counts);
    return 0;
}

static inline double clog2c(int64_t c) { return c > 1 ? (double)c * log2((double)c) : 0.0; }

static int entropy_add(entropy_rule *r, double v)
{
    if (v == 0.0)
        v = 0.0;  /* -0.0 and 0.0 are one value */
    uint64_t key;
    memcpy(&key, &v, sizeof key);
    if ((r->used + 1) * 2 > r->cap && entropy_grow(r) < 0)
        return -1;
    size_t s = slot_of(r, key);
    if (r->counts[s] == 0) {
        r->keys[s] = key;
        r->used++;
    }
    r->sum_clogc += clog2c(r->counts[s] + 1) - clog2c(r->counts[s]);
    r->counts[s]++;

    double total = (double)(r->consumed + 1);
    /* one distinct value has zero entropy; the formula leaves a rounding residue there */
    double h = r->used > 1 ? log2(total) - r->sum_clogc / total : 0.0;
    if (h < 0.0)
        h = 0.0;
    if (r->ring_len < ENTROPY_WINDOW) {
        r->ring[r->ring_len++] = h;
    } else {
        r->ring[r->ring_head] = h;
        r->ring_head = (r->ring_head + 1) % ENTROPY_WINDOW;
    }
    return 0;
}

static int entropy_is_finished(kb_criterion *c, const double *samples, Py_ssize_t n)
{
    entropy_rule *r = c->impl;
    if (n < r->consumed || (r->consumed > 0 && !same_bits(samples[0], r->first)))
        entropy_reset(r);
    if (r->consumed == 0 && n > 0)
        r->first = samples[0];
    for (; r->consumed < n; r->consumed++)
        if (entropy_add(r, samples[r->consumed]) < 0)
            return -1;

    Py_ssize_t m = r->ring_len;
    if (m < 2) {
        c->achieved = INFINITY;
        return 0;
    }
    /* least squares of entropy on x = 0..m-1, oldest first; two passes over <= 299 values */
    double mean_x = (double)(m - 1) / 2.0, mean_y = 0.0;
    for (Py_ssize_t i = 0; i < m; i++)
        mean_y += r->ring[i];
    mean_y /= (double)m;
    double sxx = 0.0, sxy = 0.0, syy = 0.0;
    for (Py_ssize_t i = 0; i < m; i++) {
        double dx = (double)i - mean_x, dy = r->ring[(r->ring_head + i) % ENTROPY_WINDOW] - mean_y;
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    double slope = sxy / sxx;
    /* a flat line fits perfectly (nvbench's convention) */
    double r2 = syy < 1e-9 ? 1.0 : 1.0 - (syy - slope * sxy) / syy;
    c->achieved = fabs(slope);
    /* nvbench tests the signed slope: entropy that falls (samples repeating values already
     * seen) is as finished as entropy that stays */
    return slope <= c->target && r2 >= ENTROPY_MIN_R2;
}

static void ci_reset_rule(kb_criterion *c)
{
    ci_reset(c->impl);
}

static void entropy_reset_rule(kb_criterion *c)
{
    entropy_reset(c->impl);
}

static void entropy_destroy(kb_criterion *c)
{
    entropy_rule *r = c->impl;
    free(r->keys);
    free(r->counts);
}

/* ------------------------------------------------------------------ the rules */

static const struct {
    const char *name;
    size_t impl_size;
    int (*is_finished)(kb_criterion *, const double *, Py_ssize_t);
    void (*destroy)(kb_criterion *);
    void (*reset)(kb_criterion *);
} rules[] = {
    {"ci", sizeof(ci_rule), ci_is_finished, ci_destroy, ci_reset_rule},
    {"entropy", sizeof(entropy_rule), entropy_is_finished, entropy_destroy, entropy_reset_rule},
};
#define N_RULES (sizeof rules / sizeof rules[0])

int kb_criterion_init(kb_criterion *c, const char *name, double target, double ci_level)
{
    char buf[64];
    memset(c, 0, sizeof *c);
    size_t k = 0;
    while (k < N_RULES && (name == NULL || strcmp(name, rules[k].name) != 0))
        k++;
    if (k == N_RULES) {
        PyErr_Format(PyExc_ValueError, "unknown stopping rule '%s'; known rules: 'ci', 'entropy'",
                     name ? name : "(null)");
        return -1;
    }
    if (!(target > 0.0 && isfinite(target))) {
        PyOS_snprintf(buf, sizeof buf, "%.17g", target);
        PyErr_Format(PyExc_ValueError,
                     "target of the '%s' stopping rule must be a positive finite number, got %s",
                     rules[k].name, buf);
        return -1;
    }
    if (!(ci_level > 0.0 && ci_level < 1.0)) {
        PyOS_snprintf(buf, sizeof buf, "%.17g", ci_level);
        PyErr_Format(PyExc_ValueError, "ci_level must be in (0, 1), got %s", buf);
        return -1;
    }
    if ((c->impl = calloc(1, rules[k].impl_size)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->name = rules[k].name;
    c->target = target;
    c->ci_level = ci_level;
    c->achieved = INFINITY;
    c->is_finished = rules[k].is_finished;
    c->destroy = rules[k].destroy;
    c->reset = rules[k].reset;
    return 0;
}

void kb_criterion_reset(kb_criterion *c)
{
    if (c->impl != NULL)
        c->reset(c);
    c->achieved = INFINITY;
}

void kb_criterion_fini(kb_criterion *c)
{
    if (c->impl != NULL && c->destroy != NULL)
        c->destroy(c);
    free(c->impl);
    c->impl = NULL;
}

/* ------------------------------------------------------------------ Python */

PyDoc_STRVAR(stop_rules_doc,
"stop_rules()\n--\n\n"
"The names of the stopping rules: 'ci' (relative half-width of the CI of the median <=\n"
"target) and 'entropy' (nvbench's: |slope| of the sample entropy <= target, R^2 >= 0.36).");

static PyObject *py_stop_rules(PyObject *self, PyObject *unused)
{
    PyObject *names = PyList_New(N_RULES);
    if (names == NULL)
        return NULL;
    for (size_t k = 0; k < N_RULES; k++) {
        PyObject *s = PyUnicode_FromString(rules[k].name);
        if (s == NULL) {
            Py_DECREF(names);
            return NULL;
        }
        PyList_SET_ITEM(names, (Py_ssize_t)k, s);
    }
    return names;
}

/* Feed samples to c as the timing loop would: prefixes of step, 2 step, ... and finally all n
 * (step 0: all at once). The last call's answer, or -1 (no memory) or -2 (an exception:
 * Ctrl-C, checked every 10 ms, since a small step over many samples is O(n^2 / step)). Each
 * check runs without the GIL where n is large. */
static int feed(kb_criterion *c, const double *x, Py_ssize_t n, Py_ssize_t step)
{
    int done = 0;
    uint64_t checked = kb_now_ns();
    for (Py_ssize_t k = step > 0 && step < n ? step : n;; k = k + step < n ? k + step : n) {
        if (n >= KB_NOGIL_MIN) {
            Py_BEGIN_ALLOW_THREADS
            done = c->is_finished(c, x, k);
            Py_END_ALLOW_THREADS
        } else
            done = c->is_finished(c, x, k);
        if (done < 0 || k == n)
            return done;
        if (kb_now_ns() - checked > 10000000u) {
            if (PyErr_CheckSignals() < 0)
                return -2;
            checked = kb_now_ns();
        }
    }
}

PyDoc_STRVAR(criterion_check_doc,
"criterion_check(name, samples, target, ci_level=0.95, step=0, resolution=0.0)\n--\n\n"
"Apply the stopping rule `name` to samples: (finished, achieved), where achieved is the\n"
"rule's measured value (relative CI half-width for 'ci', |entropy slope| for 'entropy';\n"
"inf when there are too few samples). 'ci' reads summarize's CI of the samples in this order\n"
"(widened where the order shows dependence) and stops from 128 samples on. With step > 0\n"
"the rule first sees the prefixes of step, 2*step, ... samples, as in the timing loop; the\n"
"answer must not depend on step.\n"
"resolution: the step the samples come in (0: none); 'ci' then stops at a CI one step wide,\n"
"and reports a narrower CI as half a step relative to the median.");

static PyObject *py_criterion_check(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "samples", "target", "ci_level", "step", "resolution",
                             NULL};
    const char *name;
    PyObject *obj;
    double target, ci_level = 0.95, resolution = 0.0;
    Py_ssize_t step = 0;
    kb_criterion c;
    int done;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOd|dnd:criterion_check", kwlist, &name, &obj,
                                     &target, &ci_level, &step, &resolution))
        return NULL;
    if (!(resolution >= 0.0 && isfinite(resolution))) {
        PyErr_SetString(PyExc_ValueError, "resolution must be a finite number >= 0");
        return NULL;
    }
    if (step < 0) {
        PyErr_Format(PyExc_ValueError, "step must be >= 0, got %zd", step);
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)kb_as_double_array(obj, "samples");
    if (arr == NULL)
        return NULL;
    const double *x = PyArray_DATA(arr);
    Py_ssize_t n = PyArray_SIZE(arr);
    Py_ssize_t at = kb_find_nan(x, n);
    if (at >= 0) {
        PyErr_Format(PyExc_ValueError, "samples contain NaN (first at index %zd)", at);
        Py_DECREF(arr);
        return NULL;
    }
    if (kb_criterion_init(&c, name, target, ci_level) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    c.resolution = resolution;
    done = feed(&c, x, n, step);
    double achieved = c.achieved;
    kb_criterion_fini(&c);
    Py_DECREF(arr);
    if (done == -2)
        return NULL;
    if (done < 0)
        return PyErr_NoMemory();
    return Py_BuildValue("(Nd)", PyBool_FromLong(done), achieved);
}

static PyMethodDef criterion_methods[] = {
    {"stop_rules", py_stop_rules, METH_NOARGS, stop_rules_doc},
    {"criterion_check", (PyCFunction)(void (*)(void))py_criterion_check,
     METH_VARARGS | METH_KEYWORDS, criterion_check_doc},
    {NULL, NULL, 0, NULL},
};

int kb_criterion_module_init(PyObject *m)
{
    /* the 'ci' rule's floor: the fewest samples whose order it judges (kb_serial_vif) */
    if (PyModule_AddIntConstant(m, "CI_MIN_SAMPLES", KB_VIF_MIN_N) < 0)
        return -1;
    return PyModule_AddFunctions(m, criterion_methods);
}
