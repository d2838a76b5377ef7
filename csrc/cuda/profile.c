/* profile.c -- the driver calls around one untimed call (CUDA build only): the profiler range
 * of kbench's profile mode (kbench/profile.py) and the device-memory probe of kbench/memory.py.
 *
 *   cuda_profiler_start(device)  cuProfilerStart in the device's context: `ncu --profile-from-
 *                                start off` and `nsys profile --capture-range=cudaProfilerApi`
 *                                begin capturing here
 *   cuda_profiler_stop(device)   synchronize the context, then cuProfilerStop: the range holds
 *                                the call's device work, all of it
 *   cuda_synchronize(device)     cuCtxSynchronize, without the GIL
 *   cuda_mem_info(device)        (free, total) bytes from cuMemGetInfo, without the GIL (polled
 *                                from a thread while the call runs)
 *
 * cuProfilerStart/Stop are optional entries of the driver table: without them (a driver that
 * does not hand them out) the start/stop functions raise LibraryNotFound, and profile mode says
 * so. Without a profiler attached both are no-ops.
 */
#include "cuda_backend.h"

typedef enum { KB_PROFILER_START, KB_PROFILER_STOP } kb_profiler_op;

static PyObject *profiler_call(PyObject *m, PyObject *args, PyObject *kw, kb_profiler_op op)
{
    static char *kwlist[] = {"device", NULL};
    int device = 0, pushed = 0;
    const char *fmt = op == KB_PROFILER_START ? "|i:cuda_profiler_start"
                                              : "|i:cuda_profiler_stop";
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &device))
        return NULL;
    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL)
        return NULL;
    if (op == KB_PROFILER_START ? cu->cuProfilerStart == NULL : cu->cuProfilerStop == NULL) {
        kb_state *st = kb_get_state(m);
        PyErr_Format(st->LibraryNotFound, "the CUDA driver does not provide %s (through "
                     "cuGetProcAddress): profile mode cannot mark its range for ncu/nsys",
                     op == KB_PROFILER_START ? "cuProfilerStart" : "cuProfilerStop");
        return NULL;
    }
    if (kb_ctx_enter(m, cu, device, &pushed) < 0)
        return NULL;
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    if (op == KB_PROFILER_START) {
        KB_DEFER(&d, cu->cuProfilerStart());
    } else {
        KB_DEFER(&d, cu->cuCtxSynchronize());
        KB_DEFER(&d, cu->cuProfilerStop());
    }
    Py_END_ALLOW_THREADS
    kb_ctx_leave(cu, pushed);
    if (KB_CU_RAISE(m, &d) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cuda_profiler_start(PyObject *m, PyObject *args, PyObject *kw)
{
    return profiler_call(m, args, kw, KB_PROFILER_START);
}

static PyObject *cuda_profiler_stop(PyObject *m, PyObject *args, PyObject *kw)
{
    return profiler_call(m, args, kw, KB_PROFILER_STOP);
}

static PyObject *cuda_synchronize(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", NULL};
    int device = 0, pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:cuda_synchronize", kwlist, &device))
        return NULL;
    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL || kb_ctx_enter(m, cu, device, &pushed) < 0)
        return NULL;
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    KB_DEFER(&d, cu->cuCtxSynchronize());
    Py_END_ALLOW_THREADS
    kb_ctx_leave(cu, pushed);
    if (KB_CU_RAISE(m, &d) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cuda_mem_info(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", NULL};
    int device = 0, pushed = 0;
    size_t free_b = 0, total_b = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:cuda_mem_info", kwlist, &device))
        return NULL;
    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL || kb_ctx_enter(m, cu, device, &pushed) < 0)
        return NULL;
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    KB_DEFER(&d, cu->cuMemGetInfo(&free_b, &total_b));
    Py_END_ALLOW_THREADS
    kb_ctx_leave(cu, pushed);
    if (KB_CU_RAISE(m, &d) < 0)
        return NULL;
    return Py_BuildValue("(nn)", (Py_ssize_t)free_b, (Py_ssize_t)total_b);
}

static PyMethodDef profile_methods[] = {
    {"cuda_profiler_start", (PyCFunction)(void (*)(void))cuda_profiler_start,
     METH_VARARGS | METH_KEYWORDS,
     "cuda_profiler_start(device=0)\n\n"
     "cuProfilerStart in the device's context: ncu --profile-from-start off and nsys profile "
     "--capture-range=cudaProfilerApi start capturing. A no-op without a profiler."},
    {"cuda_profiler_stop", (PyCFunction)(void (*)(void))cuda_profiler_stop,
     METH_VARARGS | METH_KEYWORDS,
     "cuda_profiler_stop(device=0)\n\n"
     "Synchronize the device's context, then cuProfilerStop."},
    {"cuda_synchronize", (PyCFunction)(void (*)(void))cuda_synchronize,
     METH_VARARGS | METH_KEYWORDS,
     "cuda_synchronize(device=0)\n\ncuCtxSynchronize in the device's context (GIL released)."},
    {"cuda_mem_info", (PyCFunction)(void (*)(void))cuda_mem_info, METH_VARARGS | METH_KEYWORDS,
     "cuda_mem_info(device=0) -> (free, total)\n\n"
     "The device's free and total memory in bytes (cuMemGetInfo, GIL released)."},
    {NULL, NULL, 0, NULL},
};

int kb_profile_module_init(PyObject *m) { return PyModule_AddFunctions(m, profile_methods); }
