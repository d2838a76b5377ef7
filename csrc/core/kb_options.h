/* kb_options.h -- a backend's keyword options, one at a time (options.c): each is taken out of
 * the options dict (so what is left is unknown to the backend), checked once, and refused with
 * a message naming the function and the option. measure_cuda and measure_hip parse theirs with
 * these, so the two backends accept and refuse alike. */
#ifndef KB_OPTIONS_H
#define KB_OPTIONS_H

#include <Python.h>

/* Take opts[key] out of opts into *v (a new reference the caller releases): 1 when present,
 * 0 when absent, -1 with an exception. */
int kb_opt_take(PyObject *opts, const char *key, PyObject **v);
/* v as a Py_ssize_t: an int (anything with __index__), never a bool; TypeError naming `what`
 * otherwise. clip: a value past Py_ssize_t is clipped (for a range check after) instead of
 * raising OverflowError. */
int kb_as_count(PyObject *v, const char *what, Py_ssize_t *out, int clip);
/* An integer option in lo..hi (hi PY_SSIZE_T_MAX: no upper bound); absent: *out untouched. */
int kb_opt_count(PyObject *opts, const char *who, const char *key, Py_ssize_t *out,
                 Py_ssize_t lo, Py_ssize_t hi);
/* A float option: finite, > lo (>= lo when !open) and <= hi; None or absent keeps *out. */
int kb_opt_float(PyObject *opts, const char *who, const char *key, double *out, double lo,
                 int open, double hi);
/* A truth value (any object's truth; None is false); absent keeps *out. */
int kb_opt_bool(PyObject *opts, const char *key, int *out);
/* None or a callable: *out a new reference, or NULL for None or absent. */
int kb_opt_callable(PyObject *opts, const char *who, const char *key, PyObject **out);

#endif /* KB_OPTIONS_H */
