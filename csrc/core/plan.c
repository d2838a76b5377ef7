/* plan.c -- kbench.bench's choices, decided once: the plan.
 *
 * _core.plan(backend, cold_cache, mode, profile=None, cupti=None) checks cold_cache and mode for
 * the backend ('host', 'cuda' or 'hip') and decides, from them and the facts it is given, how
 * the call is measured:
 *
 *   measurement  what is timed: 'host' (calls, on the host clock), 'cupti' or 'events' (eager
 *                CUDA calls), 'graph' (replays of captured calls: CUDA, HIP), or 'profile' (one
 *                call in a profiler range, untimed: `profile` gave why)
 *   timer        what reads the time: 'host', 'cupti', 'events' (CUDA or HIP events); None
 *                in profile mode
 *   cold         None, 'flush' (a flush before every timed sample) or 'rotate' (argument sets
 *                cycled; under graph, captured into the replayed graphs)
 *
 * On CUDA, mode None is CUPTI where it is usable, else CUDA events (the plan's note says why),
 * and graph replays are read by CUPTI where it is usable. Whether it is usable is the caller's
 * fact: `cupti`, a callable returning (usable, busy, why), is called only when a CUDA plan
 * needs the answer, after the choices were checked (a bad mode asks no GPU library), and never
 * in profile mode (a profiler owns CUPTI there). mode='cupti' where CUPTI is not usable is
 * CuptiBusy (another tool owns it) or LibraryNotFound.
 *
 * The result is a _core.Plan, immutable. kbench.measure.local makes it once, before anything
 * calls fn; the Python layer reads it, and measure_host, measure_cuda and measure_hip take it
 * as plan= (kb_pop_plan) and decide nothing again. A bad value is a ValueError naming the
 * parameter and the values it accepts, raised here and nowhere else.
 */
#include "kbench.h"

#include <string.h>

typedef struct {
    const char *name;           /* as plan's backend argument */
    const char *where;          /* in messages: "on the CPU" */
    const char *needs;          /* in messages: "mode 'x' needs a CUDA device" */
    const char *modes[4];       /* the modes it accepts besides None; NULL-terminated */
} backend_modes;

/* Indexed by kb_backend_id. */
static const backend_modes BACKENDS[] = {
    [KB_BACKEND_HOST] = {"host", "on the CPU", "the CPU", {"host", NULL}},
    [KB_BACKEND_CUDA] = {"cuda", "on CUDA", "a CUDA device", {"cupti", "events", "graph", NULL}},
    [KB_BACKEND_HIP] = {"hip", "on HIP", "a HIP device", {"graph", NULL}},
};
#define N_BACKENDS (sizeof BACKENDS / sizeof BACKENDS[0])

static const char *const MEASUREMENTS[] = {
    [KB_MEASURE_HOST] = "host", [KB_MEASURE_CUPTI] = "cupti", [KB_MEASURE_EVENTS] = "events",
    [KB_MEASURE_GRAPH] = "graph", [KB_MEASURE_PROFILE] = "profile"};
static const char *const TIMERS[] = {[KB_TIMER_NONE] = NULL, [KB_TIMER_HOST] = "host",
                                     [KB_TIMER_EVENTS] = "events", [KB_TIMER_CUPTI] = "cupti"};
static const char *const COLDS[] = {[KB_COLD_NONE] = NULL, [KB_COLD_FLUSH] = "flush",
                                    [KB_COLD_ROTATE] = "rotate"};

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

/* ------------------------------------------------------------------ the Plan object */

typedef struct {
    PyObject_HEAD
    kb_plan plan;
    PyObject *profile;          /* why profile mode (a str), or None */
    PyObject *note;             /* why the backend's own pick fell back (a str), or None */
} plan_object;

static void plan_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    plan_object *p = (plan_object *)self;
    Py_CLEAR(p->profile);
    Py_CLEAR(p->note);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *str_or_none(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

#define PLAN(self) (&((plan_object *)(self))->plan)

static PyObject *get_backend(PyObject *self, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(BACKENDS[PLAN(self)->backend].name);
}
static PyObject *get_measurement(PyObject *self, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(MEASUREMENTS[PLAN(self)->measurement]);
}
static PyObject *get_timer(PyObject *self, void *Py_UNUSED(c))
{
    return str_or_none(TIMERS[PLAN(self)->timer]);
}
static PyObject *get_cold(PyObject *self, void *Py_UNUSED(c))
{
    return str_or_none(COLDS[PLAN(self)->cold]);
}
static PyObject *get_flush(PyObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(PLAN(self)->cold == KB_COLD_FLUSH);
}
static PyObject *get_rotate(PyObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(PLAN(self)->cold == KB_COLD_ROTATE);
}
static PyObject *get_graph(PyObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(PLAN(self)->measurement == KB_MEASURE_GRAPH);
}
static PyObject *get_profile(PyObject *self, void *Py_UNUSED(c))
{
    return Py_NewRef(((plan_object *)self)->profile);
}
static PyObject *get_note(PyObject *self, void *Py_UNUSED(c))
{
    return Py_NewRef(((plan_object *)self)->note);
}

static PyGetSetDef plan_getset[] = {
    {"backend", get_backend, NULL, "'host', 'cuda' or 'hip'", NULL},
    {"measurement", get_measurement, NULL,
     "what is timed: 'host', 'cupti', 'events', 'graph' (replays), or 'profile' (one call, "
     "untimed)", NULL},
    {"timer", get_timer, NULL, "what reads the time: 'host', 'cupti', 'events'; None in "
                               "profile mode", NULL},
    {"cold", get_cold, NULL, "None, 'flush' or 'rotate'", NULL},
    {"flush", get_flush, NULL, "a flush before every timed sample (cold 'flush')", NULL},
    {"rotate", get_rotate, NULL, "argument sets rotated (cold 'rotate')", NULL},
    {"graph", get_graph, NULL, "graph replays are timed (measurement 'graph')", NULL},
    {"profile", get_profile, NULL, "why profile mode (measurement 'profile'), else None", NULL},
    {"note", get_note, NULL, "why the backend's own pick fell back (CUPTI unusable), else None",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *plan_as_dict(PyObject *self, PyObject *Py_UNUSED(a))
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (PyGetSetDef *g = plan_getset; g->name != NULL; g++)
        if (kb_dict_set_steal(d, g->name, g->get(self, NULL)) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    return d;
}

static PyObject *plan_repr(PyObject *self)
{
    const kb_plan *p = PLAN(self);
    const char *timer = TIMERS[p->timer], *cold = COLDS[p->cold];
    return PyUnicode_FromFormat("Plan(backend='%s', measurement='%s', timer=%s%s%s, cold=%s%s%s)",
                                BACKENDS[p->backend].name, MEASUREMENTS[p->measurement],
                                timer ? "'" : "", timer ? timer : "None", timer ? "'" : "",
                                cold ? "'" : "", cold ? cold : "None", cold ? "'" : "");
}

static PyMethodDef plan_object_methods[] = {
    {"as_dict", plan_as_dict, METH_NOARGS, "as_dict() -> dict: every field, for a record"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot plan_slots[] = {
    {Py_tp_dealloc, plan_dealloc},
    {Py_tp_getset, plan_getset},
    {Py_tp_methods, plan_object_methods},
    {Py_tp_repr, plan_repr},
    {Py_tp_doc, "How kbench.bench measures a call, decided once by _core.plan: read-only."},
    {0, NULL},
};

static PyType_Spec plan_spec = {
    .name = "kbench._core.Plan",
    .basicsize = sizeof(plan_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = plan_slots,
};

static PyObject *plan_new(PyObject *m, const kb_plan *p, PyObject *profile, PyObject *note)
{
    PyTypeObject *tp = (PyTypeObject *)kb_get_state(m)->plan_type;
    plan_object *o = PyObject_New(plan_object, tp);
    if (o == NULL)
        return NULL;
    o->plan = *p;
    o->profile = Py_NewRef(profile);
    o->note = Py_NewRef(note);
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ deciding */

/* The caller's CUPTI facts: cupti() -> (usable, busy, why). */
static int ask_cupti(PyObject *cupti, int *usable, int *busy, PyObject **why)
{
    if (cupti == Py_None) {
        PyErr_SetString(PyExc_TypeError, "plan: a CUDA plan with mode None, 'cupti' or 'graph' "
                                         "needs cupti=, a callable returning (usable, busy, "
                                         "why)");
        return -1;
    }
    PyObject *r = PyObject_CallNoArgs(cupti);
    if (r == NULL)
        return -1;
    int ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 3 &&
             PyUnicode_Check(PyTuple_GET_ITEM(r, 2));
    if (ok) {
        *usable = PyObject_IsTrue(PyTuple_GET_ITEM(r, 0));
        *busy = PyObject_IsTrue(PyTuple_GET_ITEM(r, 1));
        ok = *usable >= 0 && *busy >= 0;
    } else {
        PyErr_Format(PyExc_TypeError, "plan: cupti() must return (usable, busy, why: str), "
                                      "got %R", r);
    }
    *why = ok ? Py_NewRef(PyTuple_GET_ITEM(r, 2)) : NULL;
    Py_DECREF(r);
    return ok ? 0 : -1;
}

/* A CUDA plan's timer chain: mode (None, 'cupti', 'events', 'graph', checked) and the facts. */
static int decide_cuda(PyObject *m, PyObject *mode, PyObject *cupti, kb_plan *p,
                       PyObject **note)
{
    if (mode != Py_None && PyUnicode_CompareWithASCIIString(mode, "events") == 0) {
        p->measurement = KB_MEASURE_EVENTS;
        p->timer = KB_TIMER_EVENTS;
        return 0;
    }
    int usable, busy;
    PyObject *why;
    if (ask_cupti(cupti, &usable, &busy, &why) < 0)
        return -1;
    int graph = mode != Py_None && PyUnicode_CompareWithASCIIString(mode, "graph") == 0;
    int rc = 0;
    p->timer = usable ? KB_TIMER_CUPTI : KB_TIMER_EVENTS;
    if (graph)
        p->measurement = KB_MEASURE_GRAPH;
    else if (usable)
        p->measurement = KB_MEASURE_CUPTI;
    else if (mode == Py_None) {
        p->measurement = KB_MEASURE_EVENTS;
        *note = PyUnicode_FromFormat("CUPTI unavailable (%U); timed with CUDA events instead",
                                     why);
        rc = *note == NULL ? -1 : 0;
    } else {                    /* mode='cupti', asked for by name */
        kb_state *st = kb_get_state(m);
        PyErr_Format(busy ? st->CuptiBusy : st->LibraryNotFound,
                     "mode='cupti' is not usable: %U", why);
        rc = -1;
    }
    Py_DECREF(why);
    return rc;
}

static PyObject *plan(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *names[] = {"backend", "cold_cache", "mode", "profile", "cupti", NULL};
    const char *backend;
    PyObject *cold, *mode, *profile = Py_None, *cupti = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|$OO:plan", names, &backend, &cold, &mode,
                                     &profile, &cupti))
        return NULL;
    kb_plan p = {.timer = KB_TIMER_NONE};
    size_t b = 0;
    while (b < N_BACKENDS && strcmp(backend, BACKENDS[b].name) != 0)
        b++;
    if (b == N_BACKENDS)
        return PyErr_Format(PyExc_ValueError, "plan: backend must be 'host', 'cuda' or 'hip', "
                                              "got '%s'", backend);
    p.backend = (kb_backend_id)b;
    if (profile != Py_None && !PyUnicode_Check(profile))
        return PyErr_Format(PyExc_TypeError, "plan: profile must be None or why (a str), got "
                                             "%.100s", Py_TYPE(profile)->tp_name);
    if (cupti != Py_None && !PyCallable_Check(cupti))
        return PyErr_Format(PyExc_TypeError, "plan: cupti must be None or a callable, got "
                                             "%.100s", Py_TYPE(cupti)->tp_name);
    if (kb_cold_mode_parse(cold, "cold_cache", &p.cold) < 0 || check_mode(&BACKENDS[b], mode) < 0)
        return NULL;
    PyObject *note = NULL;
    if (profile != Py_None)
        p.measurement = KB_MEASURE_PROFILE;
    else if (p.backend == KB_BACKEND_HOST) {
        p.measurement = KB_MEASURE_HOST;
        p.timer = KB_TIMER_HOST;
    } else if (p.backend == KB_BACKEND_HIP) {
        /* no CUPTI, and eager event timing would time launch gaps: HIP times graph replays
         * with HIP events */
        p.measurement = KB_MEASURE_GRAPH;
        p.timer = KB_TIMER_EVENTS;
    } else if (decide_cuda(m, mode, cupti, &p, &note) < 0)
        return NULL;
    PyObject *r = plan_new(m, &p, profile, note ? note : Py_None);
    Py_XDECREF(note);
    return r;
}

/* ------------------------------------------------------------------ the measure side */

int kb_pop_plan(PyObject *m, PyObject *opts, kb_backend_id backend, const char *func,
                kb_plan *out, int *given)
{
    PyObject *v = PyDict_GetItemString(opts, "plan");   /* borrowed; opts is the caller's copy */
    *given = v != NULL && v != Py_None;
    if (!*given) {
        /* the low-level spelling: cold= (measure_cuda's caller also gives mode=) */
        *out = (kb_plan){.backend = backend,
                         .measurement = backend == KB_BACKEND_HOST  ? KB_MEASURE_HOST
                                        : backend == KB_BACKEND_HIP ? KB_MEASURE_GRAPH
                                                                    : KB_MEASURE_EVENTS,
                         .timer = backend == KB_BACKEND_HOST ? KB_TIMER_HOST : KB_TIMER_EVENTS};
        if (v != NULL && PyDict_DelItemString(opts, "plan") < 0)
            return -1;
        return kb_pop_cold_mode(opts, &out->cold);
    }
    if (!Py_IS_TYPE(v, (PyTypeObject *)kb_get_state(m)->plan_type)) {
        PyErr_Format(PyExc_TypeError, "%s: plan must be a _core.Plan (from _core.plan), got "
                                      "%.100s", func, Py_TYPE(v)->tp_name);
        return -1;
    }
    const kb_plan *p = PLAN(v);
    if (p->backend != backend || p->measurement == KB_MEASURE_PROFILE) {
        PyErr_Format(PyExc_ValueError, "%s: the plan is for %s, measurement '%s', not a timed "
                                       "run here", func, BACKENDS[p->backend].name,
                     MEASUREMENTS[p->measurement]);
        return -1;
    }
    if (PyDict_GetItemString(opts, "cold") != NULL) {
        PyErr_Format(PyExc_TypeError, "%s: cold= comes from plan=: give one or the other", func);
        return -1;
    }
    *out = *p;
    return PyDict_DelItemString(opts, "plan");
}

static PyMethodDef plan_methods[] = {
    {"plan", (PyCFunction)(void (*)(void))plan, METH_VARARGS | METH_KEYWORDS,
     "plan(backend, cold_cache, mode, *, profile=None, cupti=None) -> Plan\n\n"
     "Check kbench.bench's named choices for backend 'host', 'cuda' or 'hip' and decide, once, "
     "how the call is measured: cold_cache None, 'flush' or 'rotate'; mode None or one the "
     "backend has (host: 'host'; cuda: 'cupti', 'events', 'graph'; hip: 'graph'). profile: why "
     "profile mode (then one untimed call), or None. cupti: a callable returning (usable, busy, "
     "why), called only when a CUDA plan needs it. A bad value is a ValueError naming the "
     "parameter and the values it accepts; mode='cupti' where CUPTI is not usable is "
     "CuptiBusy or LibraryNotFound."},
    {NULL, NULL, 0, NULL},
};

int kb_plan_module_init(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    st->plan_type = PyType_FromModuleAndSpec(m, &plan_spec, NULL);
    if (st->plan_type == NULL || PyModule_AddObjectRef(m, "Plan", st->plan_type) < 0)
        return -1;
    return PyModule_AddFunctions(m, plan_methods);
}
