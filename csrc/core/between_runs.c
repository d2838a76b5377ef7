/* What moves a figure between runs: the spread of one benchmark's medians over its runs.
 *
 * A run's CI of the median says how well that run pinned its own median. It cannot see what
 * moves between runs -- where the allocator placed the arrays, the host's load that second,
 * the GPU's temperature -- because all of its samples share them. Given the medians of the
 * runs of one benchmark on one machine (the current run last), between_runs() gives the
 * half-width, relative to a median, that one run's figure needs to hold the centre of the
 * runs at ci_level: Student's t with k - 1 degrees of freedom times the sample standard
 * deviation of the log medians. The log: a figure's movement is multiplicative. One run: no
 * figure (NaN). Two give t = 12.7 at 95% from their one difference: wide, as two runs know
 * little of what moves between runs. */
#include "kbench.h"
#include "kb_numpy.h"

#include <math.h>

/* The continued fraction of the regularized incomplete beta function I_x(a, b) (Lentz's
 * method); converges fast for x < (a + 1) / (a + b + 2). */
static double beta_fraction(double a, double b, double x)
{
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny)
        d = tiny;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 300; m++) {
        for (int odd = 0; odd < 2; odd++) {
            double num = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                             : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
            d = 1.0 + num * d;
            c = 1.0 + num / c;
            if (fabs(d) < tiny)
                d = tiny;
            if (fabs(c) < tiny)
                c = tiny;
            d = 1.0 / d;
            h *= d * c;
            if (odd && fabs(d * c - 1.0) < 1e-15)
                return h;
        }
    }
    return h;
}

/* I_x(a, b), the regularized incomplete beta function, for 0 <= x <= 1. */
static double incomplete_beta(double a, double b, double x)
{
    if (x <= 0.0)
        return 0.0;
    if (x >= 1.0)
        return 1.0;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0))
        return front * beta_fraction(a, b, x) / a;
    return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

/* P(|T| <= t) for Student's t with df degrees of freedom. */
static double t_central(double t, double df)
{
    return 1.0 - incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

static double t_quantile_two_sided(double level, double df)
{
    double lo = 0.0, hi = 1.0;
    while (t_central(hi, df) < level && hi < 1e12)
        hi *= 2.0;
    for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; i++) {
        double mid = 0.5 * (lo + hi);
        if (t_central(mid, df) < level)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* The sample standard deviation (ddof=1) of log(x[0..n-1]); x positive, n >= 2. */
static double log_sd(const double *x, Py_ssize_t n)
{
    double mean = 0.0, ss = 0.0;
    for (Py_ssize_t i = 0; i < n; i++)
        mean += log(x[i]);
    mean /= (double)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        double d = log(x[i]) - mean;
        ss += d * d;
    }
    return sqrt(ss / (double)(n - 1));
}

/* ValueError unless every median is finite and positive. */
static int check_medians(const double *x, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(isfinite(x[i]) && x[i] > 0.0)) {
            char buf[64];
            PyOS_snprintf(buf, sizeof buf, "%.17g", x[i]);
            PyErr_Format(PyExc_ValueError, "between_runs: medians must be finite and "
                         "positive, got %s at index %zd", buf, i);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(between_runs_doc,
"between_runs($module, medians, ci_level=0.95)\n--\n\n"
"The spread of one benchmark's medians over its runs on one machine (the current run last),\n"
"as a dict: runs, log_sd (the sample standard deviation of their logs), t (Student's t at\n"
"ci_level, two-sided, runs - 1 degrees of freedom) and rel_halfwidth (exp(t * log_sd) - 1:\n"
"how far, relative to a median, one run's figure may lie from the centre of the runs).\n"
"One run: log_sd, t and rel_halfwidth are NaN.");

static PyObject *py_between_runs(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"medians", "ci_level", NULL};
    PyObject *obj;
    double level = 0.95;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|d:between_runs", kwlist, &obj, &level))
        return NULL;
    if (kb_check_level(level, "between_runs: ci_level") < 0)
        return NULL;
    PyArrayObject *arr = (PyArrayObject *)kb_as_double_array(obj, "medians");
    if (arr == NULL)
        return NULL;
    const double *x = PyArray_DATA(arr);
    Py_ssize_t n = PyArray_SIZE(arr);
    double sd = NAN, t = NAN, rel = NAN;
    if (check_medians(x, n) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    if (n >= 2) {
        sd = log_sd(x, n);
        t = t_quantile_two_sided(level, (double)(n - 1));
        rel = expm1(t * sd);
    }
    Py_DECREF(arr);
    return Py_BuildValue("{s:n,s:d,s:d,s:d}", "runs", n, "log_sd", sd, "t", t,
                         "rel_halfwidth", rel);
}

PyDoc_STRVAR(t_quantile_doc,
"t_quantile($module, level, df)\n--\n\n"
"Student's t quantile, two-sided: the t with P(|T| <= t) = level for df degrees of freedom\n"
"(df > 0; 4.303 at level 0.95 and df 2).");

static PyObject *py_t_quantile(PyObject *self, PyObject *args)
{
    double level, df;
    (void)self;
    if (!PyArg_ParseTuple(args, "dd:t_quantile", &level, &df))
        return NULL;
    if (kb_check_level(level, "t_quantile: level") < 0)
        return NULL;
    if (!(df > 0.0 && isfinite(df))) {
        char buf[64];
        PyOS_snprintf(buf, sizeof buf, "%.17g", df);
        PyErr_Format(PyExc_ValueError, "t_quantile: df must be a finite positive number, got %s",
                     buf);
        return NULL;
    }
    return PyFloat_FromDouble(t_quantile_two_sided(level, df));
}

static PyMethodDef between_runs_methods[] = {
    {"t_quantile", (PyCFunction)py_t_quantile, METH_VARARGS, t_quantile_doc},
    {"between_runs", (PyCFunction)(void (*)(void))py_between_runs,
     METH_VARARGS | METH_KEYWORDS, between_runs_doc},
    {NULL, NULL, 0, NULL},
};

int kb_between_runs_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, between_runs_methods);
}
