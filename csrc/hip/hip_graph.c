/* hip_graph.c -- capture a callable into a HIP graph (hipStreamBeginCapture .. EndCapture,
 * hipGraphInstantiate) and keep it as a HipGraph object.
 *
 * One capture records the callable once per argument set given, in order, so a graph captured
 * over k distinct sets replays k pointer-distinct calls: what the rotated cold cache needs. The
 * outputs of the captured calls are kept alive with the graph (the replays write into them).
 */
#include "hip_api.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *module;           /* kbench._core: keeps the HIP table alive */
    kb_hipGraph_t graph;
    kb_hipGraphExec_t exec;
    int device;
    Py_ssize_t calls;           /* callable calls recorded */
    PyObject *outputs;          /* tuple: what each captured call returned */
} hip_graph_obj;

static void hip_graph_dealloc(PyObject *self)
{
    hip_graph_obj *g = (hip_graph_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    const kb_hip_libs *libs = g->module ? kb_get_state(g->module)->hip : NULL;
    if (libs != NULL && libs->hip_initialized) {
        /* errors here cannot be raised from a destructor; the graph is gone either way */
        if (g->exec)
            libs->hip.hipGraphExecDestroy(g->exec);
        if (g->graph)
            libs->hip.hipGraphDestroy(g->graph);
    }
    Py_XDECREF(g->outputs);
    Py_XDECREF(g->module);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *hip_graph_launch(PyObject *self, PyObject *arg)
{
    hip_graph_obj *g = (hip_graph_obj *)self;
    unsigned long long s = PyLong_AsUnsignedLongLong(arg);
    if (s == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    const kb_hip_api *hip = kb_hip(g->module);
    if (hip == NULL ||
        KB_HIP(g->module, hip->hipGraphLaunch(g->exec, (kb_hipStream_t)(uintptr_t)s)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *hip_graph_get_outputs(PyObject *self, void *c)
{
    return Py_NewRef(((hip_graph_obj *)self)->outputs);
}
static PyObject *hip_graph_get_calls(PyObject *self, void *c)
{
    return PyLong_FromSsize_t(((hip_graph_obj *)self)->calls);
}
static PyObject *hip_graph_get_device(PyObject *self, void *c)
{
    return PyLong_FromLong(((hip_graph_obj *)self)->device);
}

static PyMethodDef hip_graph_methods[] = {
    {"launch", hip_graph_launch, METH_O,
     "launch($self, stream, /)\n--\n\nlaunch(stream): hipGraphLaunch on a stream handle."},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef hip_graph_getset[] = {
    {"outputs", hip_graph_get_outputs, NULL, "what each captured call returned", NULL},
    {"calls", hip_graph_get_calls, NULL, "callable calls recorded in the graph", NULL},
    {"device", hip_graph_get_device, NULL, "the HIP device ordinal", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
static PyType_Slot hip_graph_slots[] = {
    {Py_tp_dealloc, hip_graph_dealloc},
    {Py_tp_methods, hip_graph_methods},
    {Py_tp_getset, hip_graph_getset},
    {Py_tp_doc, "A callable captured into a HIP graph (kbench._core.hip_graph_capture)."},
    {0, NULL},
};
static PyType_Spec hip_graph_spec = {
    .name = "kbench._core.HipGraph",
    .basicsize = sizeof(hip_graph_obj),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = hip_graph_slots,
};

int kb_hip_graph_unpack(PyObject *m, PyObject *obj, kb_hipGraphExec_t *exec, int *device)
{
    PyObject *tp = PyObject_GetAttrString(m, "HipGraph");
    if (tp == NULL)
        return -1;
    int ok = PyObject_TypeCheck(obj, (PyTypeObject *)tp);
    Py_DECREF(tp);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "expected a kbench._core.HipGraph, got %s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *exec = ((hip_graph_obj *)obj)->exec;
    *device = ((hip_graph_obj *)obj)->device;
    return 0;
}

/* End, on an error path, the capture begun on s: a failed hipStreamEndCapture may leave the
 * stream capturing (every later capture on it would fail at hipStreamBeginCapture), so the
 * stream is asked (hipStreamIsCapturing) and the capture ended again while it still is. The
 * codes here are not raised: the failure that brought us here is the one reported. 1 when the
 * stream is still capturing after all that, else 0. */
static int abandon_capture(const kb_hip_api *hip, kb_hipStream_t s)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        kb_hipStreamCaptureStatus st = KB_hipStreamCaptureStatusActive;
        if (hip->hipStreamIsCapturing(s, &st) == KB_hipSuccess &&
            st == KB_hipStreamCaptureStatusNone)
            return 0;
        kb_hipGraph_t g = NULL;
        (void)hip->hipStreamEndCapture(s, &g);
        if (g != NULL)
            hip->hipGraphDestroy(g);
    }
    kb_hipStreamCaptureStatus st = KB_hipStreamCaptureStatusActive;
    return !(hip->hipStreamIsCapturing(s, &st) == KB_hipSuccess &&
             st == KB_hipStreamCaptureStatusNone);
}

static void note_still_capturing(int still)
{
    if (still)
        kb_add_exception_note("the stream could not be taken out of capture mode "
                              "(hipStreamEndCapture failed again): captures and launches on "
                              "it will fail; use another stream");
}

/* capture_mode: 'relaxed' (also for None: the default), 'global' or 'thread_local'. */
static int capture_mode(PyObject *v, kb_hipStreamCaptureMode *mode)
{
    static const struct {
        const char *name;
        kb_hipStreamCaptureMode mode;
    } modes[] = {{"relaxed", KB_hipStreamCaptureModeRelaxed},
                 {"global", KB_hipStreamCaptureModeGlobal},
                 {"thread_local", KB_hipStreamCaptureModeThreadLocal}};
    *mode = KB_hipStreamCaptureModeRelaxed;
    if (v == NULL || v == Py_None)
        return 0;
    for (size_t i = 0; PyUnicode_Check(v) && i < sizeof modes / sizeof modes[0]; i++)
        if (PyUnicode_CompareWithASCIIString(v, modes[i].name) == 0) {
            *mode = modes[i].mode;
            return 0;
        }
    PyErr_Format(PyUnicode_Check(v) ? PyExc_ValueError : PyExc_TypeError,
                 "hip_graph_capture: capture_mode must be 'relaxed', 'global' or 'thread_local', "
                 "got %R", v);
    return -1;
}

/* Call fn once per set inside the capture; the tuple of results, or NULL (capture ended). */
static PyObject *record_calls(PyObject *m, const kb_hip_api *hip, kb_hipStream_t s,
                              PyObject *fn, PyObject *sets, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_GET_SIZE(sets);
    PyObject *outs = PyTuple_New(n);
    if (outs == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyObject_Call(fn, PyTuple_GET_ITEM(sets, i), kwargs);
        if (r == NULL) {
            int still = abandon_capture(hip, s);
            kb_add_exception_note("raised by the callable during HIP graph capture (call %zd of "
                                  "%zd); the capture was ended", i + 1, n);
            note_still_capturing(still);
            Py_DECREF(outs);
            return NULL;
        }
        PyTuple_SET_ITEM(outs, i, r);
    }
    return outs;
}

static PyObject *capture(PyObject *m, const kb_hip_api *hip, PyObject *fn, PyObject *sets,
                         PyObject *kwd, kb_hipStream_t s, kb_hipStreamCaptureMode mode,
                         int device);

static PyObject *hip_graph_capture(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fn", "arg_sets", "kwargs", "stream", "device", "capture_mode",
                             NULL};
    PyObject *fn, *sets, *kwargs = Py_None, *dev_obj = NULL, *mode_obj = NULL;
    unsigned long long stream = 0;
    int device = 0;
    kb_hipStreamCaptureMode mode;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O$KOO:hip_graph_capture", kwlist, &fn, &sets,
                                     &kwargs, &stream, &dev_obj, &mode_obj))
        return NULL;
    if (kb_check_arg_sets(sets, kwargs) < 0 || capture_mode(mode_obj, &mode) < 0 ||
        (dev_obj != NULL && kb_hip_device_arg(dev_obj, "hip_graph_capture", &device) < 0))
        return NULL;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "fn must be callable, got %s", Py_TYPE(fn)->tp_name);
    if (stream == 0)
        return PyErr_Format(PyExc_ValueError, "HIP graph capture needs a non-default stream "
                            "(the null stream cannot be captured): pass stream=<handle>");
    const kb_hip_api *hip = kb_hip(m);
    int prev = -1;
    if (hip == NULL || kb_hip_use_device(m, hip, device, &prev) < 0)
        return NULL;
    PyObject *g = capture(m, hip, fn, sets, kwargs == Py_None ? NULL : kwargs,
                          (kb_hipStream_t)(uintptr_t)stream, mode, device);
    kb_hip_restore_device(hip, prev);
    return g;
}

/* The capture itself, on the device made current by the caller. */
static PyObject *capture(PyObject *m, const kb_hip_api *hip, PyObject *fn, PyObject *sets,
                         PyObject *kwd, kb_hipStream_t s, kb_hipStreamCaptureMode mode,
                         int device)
{
    if (KB_HIP(m, hip->hipStreamBeginCapture(s, mode)) < 0)
        return NULL;
    PyObject *outs = record_calls(m, hip, s, fn, sets, kwd);
    if (outs == NULL)
        return NULL;
    kb_hipGraph_t graph = NULL;
    kb_hipGraphExec_t exec = NULL;
    kb_hipError_t r = hip->hipStreamEndCapture(s, &graph);
    if (r != KB_hipSuccess) {
        if (graph != NULL)      /* an invalidated capture can still hand back its graph */
            hip->hipGraphDestroy(graph);
        Py_DECREF(outs);
        int still = abandon_capture(hip, s);
        kb_hip_check(m, r, "hip->hipStreamEndCapture(s, &graph)", __FILE__, __LINE__);
        kb_add_exception_note("the callable could not be captured into a HIP graph: callables "
                              "that synchronize, or launch on another stream without joining "
                              "it, cannot be captured");
        note_still_capturing(still);
        return NULL;
    }
    if (KB_HIP(m, hip->hipGraphInstantiate(&exec, graph, NULL, NULL, 0)) < 0) {
        hip->hipGraphDestroy(graph);
        Py_DECREF(outs);
        return NULL;
    }
    PyObject *tp = PyObject_GetAttrString(m, "HipGraph");
    hip_graph_obj *g = tp ? PyObject_New(hip_graph_obj, (PyTypeObject *)tp) : NULL;
    Py_XDECREF(tp);
    if (g == NULL) {
        hip->hipGraphExecDestroy(exec);
        hip->hipGraphDestroy(graph);
        Py_DECREF(outs);
        return NULL;
    }
    g->module = Py_NewRef(m);
    g->graph = graph;
    g->exec = exec;
    g->device = device;
    g->calls = PyTuple_GET_SIZE(sets);
    g->outputs = outs;
    return (PyObject *)g;
}

static PyMethodDef hip_graph_module_methods[] = {
    {"hip_graph_capture", (PyCFunction)(void (*)(void))hip_graph_capture,
     METH_VARARGS | METH_KEYWORDS,
     "hip_graph_capture(fn, arg_sets, kwargs=None, *, stream, device=0, capture_mode='relaxed')"
     " -> HipGraph\n\nCapture fn(*s, **kwargs) for each s in arg_sets, in order, on `stream` "
     "(a hipStream_t handle) into one HIP graph. The callable must launch its work on that "
     "stream."},
    {NULL, NULL, 0, NULL},
};

int kb_hip_graph_module_init(PyObject *m)
{
    PyObject *tp = PyType_FromModuleAndSpec(m, &hip_graph_spec, NULL);
    if (tp == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(m, "HipGraph", tp);
    Py_DECREF(tp);
    if (rc < 0)
        return -1;
    return PyModule_AddFunctions(m, hip_graph_module_methods);
}
