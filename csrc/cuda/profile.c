/* profile.c -- the driver calls around one untimed call (CUDA build only): the profiler range
 * of kbench's profile mode (kbench/measure/profile.py) and the device-memory probe of
 * kbench/measure/memory.py.
 *
 *   cuda_profiler_start(device)  cuProfilerStart in the device's context: `ncu --profile-from-
 *                                start off` and `nsys profile --capture-range=cudaProfilerApi`
 *                                begin capturing here
 *   cuda_profiler_stop(device)   synchronize the context, then cuProfilerStop: the range holds
 *                                the call's device work, all of it
 *   cuda_synchronize(device)     cuCtxSynchronize, without the GIL
 *   cuda_mem_info(device, create) (free, total) bytes from cuMemGetInfo, without the GIL (polled
 *                                from a thread while the call runs); create=False: None where
 *                                the device has no context yet, rather than make one
 *
 * cuProfilerStart/Stop are optional entries of the driver table: without them (a driver that
 * does not hand them out) the start/stop functions raise LibraryNotFound, and profile mode says
 * so. Without a profiler attached both are no-ops.
 */
#include "cuda_backend.h"

typedef enum { KB_PROFILER_START, KB_PROFILER_STOP, KB_SYNCHRONIZE, KB_MEM_INFO } kb_ctx_op;

/* The pattern every function here shares: the device's context made current, one driver call
 * (two for the profiler's stop) without the GIL, the context left, the first error raised: 1,
 * or -1. With create 0 a device without a context is left so, and nothing is called: 0. */
static int in_device_context(PyObject *m, int device, kb_ctx_op op, int create, size_t *free_b,
                             size_t *total_b)
{
    int pushed = 0;
    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL)
        return -1;
    if ((op == KB_PROFILER_START && cu->cuProfilerStart == NULL) ||
        (op == KB_PROFILER_STOP && cu->cuProfilerStop == NULL)) {
        PyErr_Format(kb_get_state(m)->LibraryNotFound, "the CUDA driver does not provide %s "
                     "(through cuGetProcAddress): profile mode cannot mark its range for "
                     "ncu/nsys", op == KB_PROFILER_START ? "cuProfilerStart" : "cuProfilerStop");
        return -1;
    }
    int entered = kb_ctx_enter_maybe(m, cu, device, create, &pushed);
    if (entered <= 0)
        return entered;     /* an error, or create 0 and the device has no context */
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    switch (op) {
    case KB_PROFILER_START:
        KB_DEFER(&d, cu->cuProfilerStart());
        break;
    case KB_PROFILER_STOP:
        KB_DEFER(&d, cu->cuCtxSynchronize());
        KB_DEFER_ALWAYS(&d, cu->cuProfilerStop());     /* the range closes whatever the sync said */
        break;
    case KB_SYNCHRONIZE:
        KB_DEFER(&d, cu->cuCtxSynchronize());
        break;
    case KB_MEM_INFO:
        KB_DEFER(&d, cu->cuMemGetInfo(free_b, total_b));
        break;
    }
    Py_END_ALLOW_THREADS
    kb_ctx_leave(cu, pushed);
    return KB_CU_RAISE(m, &d) < 0 ? -1 : 1;
}

/* The device= argument of each function; -1 with the parse error. */
static int device_arg(PyObject *args, PyObject *kw, const char *fmt, int *device)
{
    static char *kwlist[] = {"device", NULL};
    *device = 0;
    return PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, device) ? 0 : -1;
}

static PyObject *cuda_profiler_start(PyObject *m, PyObject *args, PyObject *kw)
{
    int device;
    if (device_arg(args, kw, "|i:cuda_profiler_start", &device) < 0 ||
        in_device_context(m, device, KB_PROFILER_START, 1, NULL, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cuda_profiler_stop(PyObject *m, PyObject *args, PyObject *kw)
{
    int device;
    if (device_arg(args, kw, "|i:cuda_profiler_stop", &device) < 0 ||
        in_device_context(m, device, KB_PROFILER_STOP, 1, NULL, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cuda_synchronize(PyObject *m, PyObject *args, PyObject *kw)
{
    int device;
    if (device_arg(args, kw, "|i:cuda_synchronize", &device) < 0 ||
        in_device_context(m, device, KB_SYNCHRONIZE, 1, NULL, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *cuda_mem_info(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", "create", NULL};
    int device = 0, create = 1;
    size_t free_b = 0, total_b = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ip:cuda_mem_info", kwlist, &device, &create))
        return NULL;
    int read = in_device_context(m, device, KB_MEM_INFO, create, &free_b, &total_b);
    if (read < 0)
        return NULL;
    if (read == 0)
        Py_RETURN_NONE;
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
     "cuda_mem_info(device=0, create=True) -> (free, total) | None\n\n"
     "The device's free and total memory in bytes (cuMemGetInfo, GIL released). cuMemGetInfo "
     "needs a context: with create=False, None where the device has none yet (no thread's "
     "current one, its primary one not active), rather than make one."},
    {NULL, NULL, 0, NULL},
};

int kb_profile_module_init(PyObject *m) { return PyModule_AddFunctions(m, profile_methods); }
