/* schema.c -- the option schema's rows (kb_schema.h) as a table, and as Python objects:
 * _core.OPTION_SCHEMA (one dict per option) and the defaults dicts built from it. */
#include "kbench.h"

#include <string.h>

#define KB_OPT_ROW(name_, type_, num_, text_, choices_, lo_, hi_, bounds_, target_, on_, doc_) \
    [KB_OPT_##name_] = {.name = #name_, .type = type_, .num = (double)(num_), .text = text_,   \
                        .choices = choices_, .lo = lo_, .hi = hi_, .bounds = bounds_,          \
                        .with_target = target_, .backends = on_, .doc = doc_},
const kb_opt_spec kb_option_schema[KB_N_OPTIONS] = {
    KB_LOOP_OPTIONS(KB_OPT_ROW) KB_GPU_OPTIONS(KB_OPT_ROW)
};
#undef KB_OPT_ROW

Py_ssize_t kb_spec_count_hi(const kb_opt_spec *s)
{
    return isfinite(s->hi) && s->hi < (double)PY_SSIZE_T_MAX ? (Py_ssize_t)s->hi
                                                              : PY_SSIZE_T_MAX;
}

int kb_spec_choice(const kb_opt_spec *s, const char *text)
{
    size_t n = strlen(text);
    int k = 0;
    for (const char *c = s->choices; c != NULL && *c; k++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, text, n) == 0)
            return k;
        c = bar ? bar + 1 : NULL;
    }
    return -1;
}

void kb_spec_choices_text(const kb_opt_spec *s, char *buf, size_t size)
{
    size_t used = 0;
    int n = 0, total = 1;
    for (const char *c = s->choices; c && *c; c++)
        total += *c == '|';
    buf[0] = '\0';
    for (const char *c = s->choices; c != NULL && *c && used + 1 < size; n++) {
        const char *bar = strchr(c, '|');
        int len = bar ? (int)(bar - c) : (int)strlen(c);
        const char *sep = n == 0 ? "" : (n == total - 1 ? " or " : ", ");
        int w = snprintf(buf + used, size - used, "%s'%.*s'", sep, len, c);
        if (w < 0)
            break;
        used += (size_t)w < size - used ? (size_t)w : size - used - 1;
        c = bar ? bar + 1 : NULL;
    }
}

static const char *type_name(kb_opt_type t)
{
    switch (t) {
    case KB_T_FLOAT: return "float";
    case KB_T_FLOAT_OR_NONE: return "float or None";
    case KB_T_COUNT: return "int";
    case KB_T_BOOL: return "bool";
    case KB_T_CHOICE: return "str";
    }
    return "?";
}

/* A row's default as Python sees it. */
static PyObject *default_of(const kb_opt_spec *s, double num)
{
    switch (s->type) {
    case KB_T_FLOAT: return PyFloat_FromDouble(num);
    case KB_T_FLOAT_OR_NONE: Py_RETURN_NONE;
    case KB_T_COUNT: return PyLong_FromSsize_t((Py_ssize_t)num);
    case KB_T_BOOL: return PyBool_FromLong(num != 0.0);
    case KB_T_CHOICE: return PyUnicode_FromString(s->text);
    }
    Py_RETURN_NONE;
}

static PyObject *bound(const kb_opt_spec *s, double x)
{
    if (s->type == KB_T_CHOICE || s->type == KB_T_BOOL || !isfinite(x))
        Py_RETURN_NONE;
    return s->type == KB_T_COUNT ? PyLong_FromSsize_t((Py_ssize_t)x) : PyFloat_FromDouble(x);
}

static PyObject *backends_of(unsigned on)
{
    PyObject *t = PyList_New(0);
    const char *names[] = {"host", "cuda", "hip"};
    for (unsigned k = 0; t != NULL && k < 3; k++) {
        if (!(on & (1u << k)))
            continue;
        PyObject *n = PyUnicode_FromString(names[k]);
        if (n == NULL || PyList_Append(t, n) < 0)
            Py_CLEAR(t);
        Py_XDECREF(n);
    }
    return t;
}

static PyObject *row_dict(const kb_opt_spec *s, int loop)
{
    PyObject *choices = s->choices ? PyUnicode_FromString(s->choices) : Py_NewRef(Py_None);
    if (choices != NULL && s->choices) {
        PyObject *sep = PyUnicode_FromString("|");
        PyObject *parts = sep ? PyUnicode_Split(choices, sep, -1) : NULL;
        Py_XDECREF(sep);
        Py_SETREF(choices, parts);
    }
    PyObject *dflt = default_of(s, s->num);
    PyObject *with_target = isnan(s->with_target) ? Py_NewRef(Py_None)
                                                  : default_of(s, s->with_target);
    PyObject *lo = bound(s, s->lo), *hi = bound(s, s->hi), *on = backends_of(s->backends);
    PyObject *d = NULL;
    if (choices && dflt && with_target && lo && hi && on)
        d = Py_BuildValue("{s:s,s:s,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:s,s:s}", "name", s->name,
                          "type", type_name(s->type), "default", dflt, "with_target",
                          with_target, "choices", choices, "min", lo, "max", hi, "min_open",
                          (s->bounds & KB_LO_OPEN) ? Py_True : Py_False, "max_open",
                          (s->bounds & KB_HI_OPEN) ? Py_True : Py_False, "backends", on,
                          "layer", loop ? "loop" : "backend", "doc", s->doc);
    Py_XDECREF(choices);
    Py_XDECREF(dflt);
    Py_XDECREF(with_target);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(on);
    return d;
}

/* The loop's rows come first in the table (KB_LOOP_OPTIONS, then KB_GPU_OPTIONS). */
#define KB_COUNT_ROW(...) +1
static const int n_loop_rows = 0 KB_LOOP_OPTIONS(KB_COUNT_ROW);
#undef KB_COUNT_ROW

PyObject *kb_schema_defaults(unsigned backends, int loop)
{
    PyObject *d = PyDict_New();
    for (int k = 0; d != NULL && k < KB_N_OPTIONS; k++) {
        const kb_opt_spec *s = &kb_option_schema[k];
        if ((k < n_loop_rows) != (loop != 0) || !(s->backends & backends))
            continue;
        PyObject *v = default_of(s, s->num);
        if (v == NULL || PyDict_SetItemString(d, s->name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
        if (d != NULL && !isnan(s->with_target)) {
            char key[64];
            snprintf(key, sizeof key, "%s_with_target", s->name);
            v = default_of(s, s->with_target);
            if (v == NULL || PyDict_SetItemString(d, key, v) < 0)
                Py_CLEAR(d);
            Py_XDECREF(v);
        }
    }
    return d;
}

int kb_schema_module_init(PyObject *m)
{
    PyObject *rows = PyTuple_New(KB_N_OPTIONS);
    for (int k = 0; rows != NULL && k < KB_N_OPTIONS; k++) {
        PyObject *d = row_dict(&kb_option_schema[k], k < n_loop_rows);
        if (d == NULL)
            Py_CLEAR(rows);
        else
            PyTuple_SET_ITEM(rows, k, d);
    }
    if (rows == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "OPTION_SCHEMA", rows);
    Py_DECREF(rows);
    return rc;
}
