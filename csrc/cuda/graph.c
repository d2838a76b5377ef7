/* graph.c -- CUDA graph capture and replay for callables that are not PyTorch's.
 *
 * PyTorch callables are captured through torch.cuda.graph in Python (its caching allocator must
 * know about the capture); everything else (CuPy, raw launches, CudaKernel) is captured here
 * with cuStreamBeginCapture on the measured stream. Whatever happens inside the callable, the
 * capture is ended before returning; where ending it fails, the stream is asked whether it
 * still captures and ended again, and the exception says when it could not be.
 */
#include "cuda_backend.h"

#include <structmember.h>

static void graph_dealloc(kb_graph_object *self);

static PyType_Spec graph_spec;

static int count_nodes(PyObject *m, const kb_cuda_api *cu, kb_graph_object *g)
{
    size_t n = 0;
    if (KB_CU(m, cu->cuGraphGetNodes(g->graph, NULL, &n)) < 0)
        return -1;
    if (n == 0)
        return 0;
    CUgraphNode *nodes = PyMem_Malloc(n * sizeof *nodes);
    if (nodes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    if (KB_CU(m, cu->cuGraphGetNodes(g->graph, nodes, &n)) < 0)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        CUgraphNodeType t;
        if (KB_CU(m, cu->cuGraphNodeGetType(nodes[i], &t)) < 0) {
            rc = -1;
            break;
        }
        if (t == CU_GRAPH_NODE_TYPE_KERNEL)
            g->kernel_nodes++;
        else if (t == CU_GRAPH_NODE_TYPE_MEMCPY)
            g->memcpy_nodes++;
        else if (t == CU_GRAPH_NODE_TYPE_MEMSET)
            g->memset_nodes++;
        else
            g->other_nodes++;
    }
    PyMem_Free(nodes);
    return rc;
}

/* After a failed cuStreamEndCapture: is the stream out of capture mode? CUDA ends an invalidated
 * capture in the failing call, but a capture left open would fail every later launch on the
 * stream, so it is asked (cuStreamIsCapturing) and ended again while it still captures, as the
 * HIP side does. Codes are not raised: the failure that brought us here is the one reported.
 * 1 when the stream is still capturing after all that (or cannot say), else 0. */
static int abandon_capture(const kb_cuda_api *cu, CUstream s)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (cu->cuStreamIsCapturing(s, &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_NONE)
            return 0;
        CUgraph g = NULL;
        (void)cu->cuStreamEndCapture(s, &g);
        if (g != NULL)
            cu->cuGraphDestroy(g);
    }
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return !(cu->cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
             st == CU_STREAM_CAPTURE_STATUS_NONE);
}

/* The callable's own error (pending), re-raised as a CaptureError caused by it. */
static void raise_from_callable(kb_state *st, int still_capturing)
{
    PyObject *cause_t, *cause, *cause_tb;
    PyErr_Fetch(&cause_t, &cause, &cause_tb);
    PyErr_NormalizeException(&cause_t, &cause, &cause_tb);
    if (cause_tb != NULL)
        PyException_SetTraceback(cause, cause_tb);
    PyObject *msg = PyUnicode_FromFormat(
        "the callable raised during CUDA graph capture (%S); the capture was ended%s. "
        "Callables that synchronize, allocate or copy to pageable memory cannot be "
        "captured: use mode='events' or 'cupti'.", cause,
        still_capturing ? "" : " and the stream restored");
    PyObject *exc = msg ? PyObject_CallOneArg(st->CaptureError, msg) : NULL;
    Py_XDECREF(msg);
    if (exc != NULL) {
        PyException_SetCause(exc, cause);   /* steals cause */
        cause = NULL;
        PyErr_SetObject(st->CaptureError, exc);
        Py_DECREF(exc);
    }
    Py_XDECREF(cause_t);
    Py_XDECREF(cause);
    Py_XDECREF(cause_tb);
}

/* graph_capture(fn, arg_sets, kwargs=None, stream=0, device=0, unroll=1) -> CudaGraph
 * Captures `unroll` calls fn(*arg_sets[u % len(arg_sets)], **kwargs). */
static PyObject *graph_capture(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fn", "arg_sets", "kwargs", "stream", "device", "unroll", NULL};
    PyObject *fn, *arg_sets, *kwargs = Py_None;
    unsigned long long stream_handle = 0;
    int device = 0, pushed = 0;
    Py_ssize_t unroll = 1;
    kb_state *st = kb_get_state(m);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OKin:graph_capture", kwlist, &fn, &arg_sets,
                                     &kwargs, &stream_handle, &device, &unroll))
        return NULL;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "fn must be callable, got %.100s",
                            Py_TYPE(fn)->tp_name);
    if (!PyTuple_Check(arg_sets) || PyTuple_GET_SIZE(arg_sets) == 0)
        return PyErr_Format(PyExc_TypeError, "arg_sets must be a non-empty tuple of tuples");
    if (kwargs != Py_None && !PyDict_Check(kwargs))
        return PyErr_Format(PyExc_TypeError, "kwargs must be a dict or None");
    if (unroll < 1)
        return PyErr_Format(PyExc_ValueError, "unroll must be >= 1, got %zd", unroll);
    CUstream s = (CUstream)(uintptr_t)stream_handle;
    if (s == NULL)
        return PyErr_Format(PyExc_ValueError,
                            "graph capture needs a non-default stream (the legacy default "
                            "stream cannot be captured): pass stream=");

    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL || kb_ctx_enter(m, cu, device, &pushed) < 0)
        return NULL;

    PyTypeObject *type = (PyTypeObject *)PyObject_GetAttrString(m, "CudaGraph");
    kb_graph_object *g = NULL;
    if (type == NULL)
        goto error;
    g = (kb_graph_object *)type->tp_alloc(type, 0);
    Py_DECREF(type);
    if (g == NULL)
        goto error;
    g->unroll = unroll;
    g->keepalive = Py_BuildValue("(OO)", arg_sets, kwargs);
    if (g->keepalive == NULL)
        goto error;

    if (KB_CU(m, cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) < 0)
        goto error;
    int py_failed = 0;
    for (Py_ssize_t u = 0; u < unroll && !py_failed; u++) {
        PyObject *a = PyTuple_GET_ITEM(arg_sets, u % PyTuple_GET_SIZE(arg_sets));
        if (!PyTuple_Check(a)) {
            PyErr_Format(PyExc_TypeError, "arg_sets[%zd] must be a tuple",
                         u % PyTuple_GET_SIZE(arg_sets));
            py_failed = 1;
            break;
        }
        PyObject *r = PyObject_Call(fn, a, kwargs == Py_None ? NULL : kwargs);
        if (r == NULL)
            py_failed = 1;
        Py_XDECREF(r);
    }
    /* Always leave capture mode, whatever the callable did. */
    PyObject *type_e, *value_e, *tb_e;
    PyErr_Fetch(&type_e, &value_e, &tb_e);
    CUresult end = cu->cuStreamEndCapture(s, &g->graph);
    int still_capturing = 0;
    if (end != CUDA_SUCCESS) {
        if (g->graph != NULL) {
            cu->cuGraphDestroy(g->graph);
            g->graph = NULL;
        }
        still_capturing = abandon_capture(cu, s);
    }
    PyErr_Restore(type_e, value_e, tb_e);
    /* Ctrl-C (KeyboardInterrupt), SystemExit and GeneratorExit go on as they are: they are no
     * failure of the capture, and a CaptureError would be caught as one. */
    if (py_failed && !PyErr_ExceptionMatches(PyExc_Exception)) {
        if (still_capturing)
            goto note_capture;
        goto error;
    }
    if (py_failed) {
        raise_from_callable(st, still_capturing);
        goto note_capture;
    }
    if (end != CUDA_SUCCESS) {
        const char *ename = NULL;
        cu->cuGetErrorName(end, &ename);
        PyErr_Format(st->CaptureError,
                     "CUDA graph capture failed: cuStreamEndCapture returned %s. The callable did "
                     "something that is not allowed during capture (a synchronization, a query "
                     "of the capturing stream, a legacy-stream launch)%s. Use mode='events' or "
                     "'cupti' for this callable.",
                     ename ? ename : "an error",
                     still_capturing ? "" : "; the stream was restored");
        goto note_capture;
    }
    if (KB_CU(m, cu->cuGraphInstantiateWithFlags(&g->exec, g->graph, 0)) < 0) {
        g->exec = NULL;
        goto error;
    }
    if (count_nodes(m, cu, g) < 0)
        goto error;
    kb_ctx_leave(cu, pushed);
    return (PyObject *)g;

note_capture:
    if (still_capturing)
        kb_add_exception_note("the stream could not be taken out of capture mode "
                              "(cuStreamEndCapture failed again): captures and launches on it "
                              "will fail; use another stream");
error:
    Py_XDECREF(g);
    kb_ctx_leave(cu, pushed);
    return NULL;
}

int kb_graph_launch(PyObject *m, const kb_cuda_api *cu, kb_graph_object *g, CUstream s)
{
    return KB_CU(m, cu->cuGraphLaunch(g->exec, s));
}

static PyObject *graph_launch_py(kb_graph_object *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", NULL};
    unsigned long long stream = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:launch", kwlist, &stream))
        return NULL;
    PyObject *m = PyType_GetModule(Py_TYPE(self));
    const kb_cuda_api *cu = m ? kb_cuda(m) : NULL;
    if (cu == NULL)
        return NULL;
    if (kb_graph_launch(m, cu, self, (CUstream)(uintptr_t)stream) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void graph_dealloc(kb_graph_object *self)
{
    /* A destructor must not touch the exception being raised: graph_capture's error path
     * frees a half-built graph with its CaptureError pending, and clearing it here made
     * graph_capture return NULL with no exception set (a SystemError, the cause lost). */
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyTypeObject *tp = Py_TYPE(self);
    PyObject *m = PyType_GetModule(tp);
    if (m != NULL && (self->exec || self->graph)) {
        kb_state *st = kb_get_state(m);
        const kb_cuda_api *cu = st->gpu ? kb_cuda(m) : NULL;
        if (cu != NULL) {
            if (self->exec)
                cu->cuGraphExecDestroy(self->exec);
            if (self->graph)
                cu->cuGraphDestroy(self->graph);
        }
    }
    PyErr_Clear();                  /* kb_cuda's own, if any: a destructor cannot raise */
    Py_XDECREF(self->keepalive);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
    PyErr_Restore(et, ev, etb);
}

static PyMethodDef graph_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))graph_launch_py, METH_VARARGS | METH_KEYWORDS,
     "launch(stream=0): cuGraphLaunch of the instantiated graph."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef graph_members[] = {
    {"unroll", T_PYSSIZET, offsetof(kb_graph_object, unroll), READONLY,
     "calls of the callable captured into the graph"},
    {"kernel_nodes", T_PYSSIZET, offsetof(kb_graph_object, kernel_nodes), READONLY, NULL},
    {"memcpy_nodes", T_PYSSIZET, offsetof(kb_graph_object, memcpy_nodes), READONLY, NULL},
    {"memset_nodes", T_PYSSIZET, offsetof(kb_graph_object, memset_nodes), READONLY, NULL},
    {"other_nodes", T_PYSSIZET, offsetof(kb_graph_object, other_nodes), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot graph_slots[] = {
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_methods, graph_methods},
    {Py_tp_members, graph_members},
    {Py_tp_doc, "A CUDA graph captured by kbench._core.graph_capture."},
    {0, NULL},
};

static PyType_Spec graph_spec = {
    .name = "kbench._core.CudaGraph",
    .basicsize = sizeof(kb_graph_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = graph_slots,
};

int kb_graph_check(PyObject *m, PyObject *obj)
{
    PyObject *type = PyObject_GetAttrString(m, "CudaGraph");
    if (type == NULL) {
        PyErr_Clear();
        return 0;
    }
    int r = PyObject_TypeCheck(obj, (PyTypeObject *)type);
    Py_DECREF(type);
    return r;
}

static PyMethodDef graph_module_methods[] = {
    {"graph_capture", (PyCFunction)(void (*)(void))graph_capture, METH_VARARGS | METH_KEYWORDS,
     "graph_capture(fn, arg_sets, kwargs=None, stream=0, device=0, unroll=1) -> CudaGraph"},
    {NULL, NULL, 0, NULL},
};

int kb_graph_module_init(PyObject *m)
{
    PyObject *t = PyType_FromModuleAndSpec(m, &graph_spec, NULL);
    if (t == NULL || PyModule_AddObjectRef(m, "CudaGraph", t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    return PyModule_AddFunctions(m, graph_module_methods);
}
