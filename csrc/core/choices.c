/* choices.c -- kbench.bench's named choices, each written once: cold_cache (None, 'flush',
 * 'rotate') and mode, per backend (the CPU: 'host'; CUDA: 'cupti', 'events', 'graph'; HIP:
 * 'graph'; None everywhere: the backend's own pick). A bad value is a ValueError naming the
 * parameter and the values it accepts, raised here and nowhere else.
 *
 * kbench.measure.local calls _core.check_choices(backend, cold_cache, mode) once, before the check
 * or the memory probe calls the user's function: Python branches on both values (rotation sets,
 * graph capture, profile mode's flush) before a measure function would see them. The measure
 * functions read their `cold=` keyword with kb_pop_cold_mode (measure.c).
 */
#include "kbench.h"

#include <string.h>

typedef struct {
    const char *name;           /* as check_choices' backend argument */
    const char *where;          /* in messages: "on the CPU" */
    const char *needs;          /* in messages: "mode 'x' needs a CUDA device" */
    const char *modes[4];       /* the modes it accepts besides None; NULL-terminated */
} backend_modes;

static const backend_modes BACKENDS[] = {
    {"host", "on the CPU", "the CPU", {"host", NULL}},
    {"cuda", "on CUDA", "a CUDA device", {"cupti", "events", "graph", NULL}},
    {"hip", "on HIP", "a HIP device", {"graph", NULL}},
};
#define N_BACKENDS (sizeof BACKENDS / sizeof BACKENDS[0])

int kb_cold_mode_parse(PyObject *v, const char *param, kb_cold_mode *out)
{
    if (v == Py_None)
        *out = KB_COLD_NONE;
    else if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "flush") == 0)
        *out = KB_COLD_FLUSH;
    else if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "rotate") == 0)
        *out = KB_COLD_ROTATE;
    else {
        PyErr_Format(PyExc_ValueError, "%s must be None, 'flush' or 'rotate', got %R", param, v);
        return -1;
    }
    return 0;
}

static int accepts(const backend_modes *b, PyObject *mode)
{
    for (const char *const *m = b->modes; *m != NULL; m++)
        if (PyUnicode_CompareWithASCIIString(mode, *m) == 0)
            return 1;
    return 0;
}

/* "None, 'cupti', 'events' or 'graph'": the values `b` accepts, into buf (cut short if it
 * is too small). */
static const char *accepted_list(const backend_modes *b, char *buf, size_t size)
{
    int count = 0;
    while (b->modes[count] != NULL)
        count++;
    int n = snprintf(buf, size, "None");
    for (int i = 0; i < count && n >= 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s'%s'", i == count - 1 ? " or " : ", ",
                      b->modes[i]);
    return buf;
}

static int check_mode(const backend_modes *b, PyObject *mode)
{
    if (mode == Py_None || (PyUnicode_Check(mode) && accepts(b, mode)))
        return 0;
    char ok[128];
    accepted_list(b, ok, sizeof ok);
    if (PyUnicode_Check(mode)) {
        for (size_t i = 0; i < N_BACKENDS; i++) {
            if (accepts(&BACKENDS[i], mode)) {       /* a mode of another backend */
                PyErr_Format(PyExc_ValueError, "mode %R needs %s: %s, mode must be %s", mode,
                             BACKENDS[i].needs, b->where, ok);
                return -1;
            }
        }
    }
    PyErr_Format(PyExc_ValueError, "mode must be %s %s, got %R", ok, b->where, mode);
    return -1;
}

static PyObject *check_choices(PyObject *Py_UNUSED(m), PyObject *args)
{
    const char *backend;
    PyObject *cold, *mode;
    if (!PyArg_ParseTuple(args, "sOO:check_choices", &backend, &cold, &mode))
        return NULL;
    const backend_modes *b = NULL;
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(backend, BACKENDS[i].name) == 0)
            b = &BACKENDS[i];
    if (b == NULL) {
        PyErr_Format(PyExc_ValueError, "check_choices: backend must be 'host', 'cuda' or 'hip', "
                                       "got '%s'", backend);
        return NULL;
    }
    kb_cold_mode c;
    if (kb_cold_mode_parse(cold, "cold_cache", &c) < 0 || check_mode(b, mode) < 0)
        return NULL;
    return Py_BuildValue("(sO)", c == KB_COLD_FLUSH ? "flush" : c == KB_COLD_ROTATE ? "rotate"
                                                                                    : NULL,
                         mode);
}

static PyMethodDef choices_methods[] = {
    {"check_choices", check_choices, METH_VARARGS,
     "check_choices(backend, cold_cache, mode) -> (cold_cache, mode)\n\n"
     "Check kbench.bench's named choices for backend 'host', 'cuda' or 'hip' before anything "
     "runs: cold_cache None, 'flush' or 'rotate'; mode None or one the backend has (host: "
     "'host'; cuda: 'cupti', 'events', 'graph'; hip: 'graph'). Returns them as given; a bad "
     "value is a ValueError naming the parameter and the values it accepts."},
    {NULL, NULL, 0, NULL},
};

int kb_choices_module_init(PyObject *m) { return PyModule_AddFunctions(m, choices_methods); }
