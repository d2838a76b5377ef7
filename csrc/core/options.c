/* options.c -- a backend's keyword options, one at a time (kb_options.h). */
#include "kb_options.h"
#include "kbench.h"

#include <math.h>
#include <stdio.h>

int kb_opt_take(PyObject *opts, const char *key, PyObject **v)
{
    *v = PyDict_GetItemString(opts, key);
    if (*v == NULL)
        return 0;
    Py_INCREF(*v);
    if (PyDict_DelItemString(opts, key) < 0) {
        Py_CLEAR(*v);
        return -1;
    }
    return 1;
}

int kb_as_count(PyObject *v, const char *what, Py_ssize_t *out, int clip)
{
    if (PyBool_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", what,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    *out = PyNumber_AsSsize_t(v, clip ? NULL : PyExc_OverflowError);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

int kb_opt_count(PyObject *opts, const char *who, const char *key, Py_ssize_t *out,
                 Py_ssize_t lo, Py_ssize_t hi)
{
    PyObject *v;
    char what[96];
    int present = kb_opt_take(opts, key, &v);
    if (present <= 0)
        return present;
    Py_ssize_t n;
    snprintf(what, sizeof what, "%s: %s", who, key);
    int rc = kb_as_count(v, what, &n, 0);
    if (rc == 0 && (n < lo || n > hi)) {
        if (hi == PY_SSIZE_T_MAX)
            PyErr_Format(PyExc_ValueError, "%s must be >= %zd, got %R", what, lo, v);
        else
            PyErr_Format(PyExc_ValueError, "%s must be %zd..%zd, got %R", what, lo, hi, v);
        rc = -1;
    }
    if (rc == 0)
        *out = n;
    Py_DECREF(v);
    return rc;
}

int kb_opt_float(PyObject *opts, const char *who, const char *key, double *out, double lo,
                 int open, double hi)
{
    PyObject *v;
    int present = kb_opt_take(opts, key, &v);
    if (present <= 0 || v == Py_None) {
        Py_XDECREF(v);
        return present < 0 ? -1 : 0;
    }
    int rc = -1;
    /* a bool is no number here, as in the loop's options (gate_timeout_s=True ran at 1 s) */
    double d = PyBool_Check(v) ? -1.0 : PyFloat_AsDouble(v);
    if (PyBool_Check(v))
        PyErr_Format(PyExc_TypeError, "%s: %s must be a number, got bool", who, key);
    else if (d == -1.0 && PyErr_Occurred()) {
        if (kb_err_is_refusal()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: %s must be a number, got %.100s", who, key,
                         Py_TYPE(v)->tp_name);
        }
    }
    else if (!isfinite(d) || (open ? d <= lo : d < lo) || d > hi) {
        char bound[96];   /* PyErr_Format has no %g */
        int n = snprintf(bound, sizeof bound, "%s %g and finite", open ? ">" : ">=", lo);
        if (isfinite(hi) && n > 0 && (size_t)n < sizeof bound)
            snprintf(bound + n, sizeof bound - (size_t)n, ", at most %g", hi);
        PyErr_Format(PyExc_ValueError, "%s: %s must be %s, got %R", who, key, bound, v);
    }
    else {
        *out = d;
        rc = 0;
    }
    Py_DECREF(v);
    return rc;
}

int kb_opt_bool(PyObject *opts, const char *key, int *out)
{
    PyObject *v;
    int present = kb_opt_take(opts, key, &v);
    if (present <= 0)
        return present;
    int b = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (b < 0)
        return -1;
    *out = b;
    return 0;
}

int kb_opt_callable(PyObject *opts, const char *who, const char *key, PyObject **out)
{
    PyObject *v;
    *out = NULL;
    int present = kb_opt_take(opts, key, &v);
    if (present < 0)
        return -1;
    if (!present || v == Py_None) {
        Py_XDECREF(v);
        return 0;
    }
    if (!PyCallable_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a callable or None, got %.100s", who, key,
                     Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    *out = v;       /* the reference taken is the caller's */
    return 0;
}
