/* module.c -- kbench._core module glue: multi-phase init, module state, exception types.
 *
 * The exec slot creates the exception types and lets each file add its own functions
 * (kb_*_module_init), every file called from here and none from another file's init, so the
 * calls run one way: module.c down to the files, the files down to the leaf helpers
 * (pyutil.c). Nothing here touches a GPU: GPU libraries are opened on first use.
 */
#define KB_NUMPY_IMPORT
#include "kbench.h"
#include "kb_regime.h"
#include "kb_numpy.h"

#ifdef KB_HAVE_CUDA
#include <cuda.h>
#include <cupti_version.h>
#ifndef KB_BUILD_HEADERS
#define KB_BUILD_HEADERS "unknown (not built by setup.py)"
#endif
#endif

static PyObject *new_error(PyObject *m, const char *name, PyObject *bases, const char *doc)
{
    char qualname[128];
    PyOS_snprintf(qualname, sizeof qualname, "kbench._core.%s", name);
    PyObject *type = PyErr_NewExceptionWithDoc(qualname, doc, bases, NULL);
    if (type == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, name, type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return type;
}

static PyObject *bases_of(PyObject *a, PyObject *b)
{
    return b ? PyTuple_Pack(2, a, b) : PyTuple_Pack(1, a);
}

/* kbench._core.BUILD: what this build compiled and from which headers (setup.py passes
 * KB_BUILD_HEADERS, where cuda.h and cupti.h came from). */
static int add_build_info(PyObject *m)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return -1;
#ifdef KB_HAVE_CUDA
    /* the HIP backend is built with the CUDA one (kb_hip_module_init below) */
    if (kb_dict_set_steal(d, "backends", Py_BuildValue("(sss)", "host", "cuda", "hip")) < 0 ||
        kb_dict_set_steal(d, "cuda_version", PyLong_FromLong(CUDA_VERSION)) < 0 ||
        kb_dict_set_steal(d, "cupti_api_version", PyLong_FromLong(CUPTI_API_VERSION)) < 0 ||
        kb_dict_set_steal(d, "headers", PyUnicode_FromString(KB_BUILD_HEADERS)) < 0)
        goto error;
#else
    if (kb_dict_set_steal(d, "backends", Py_BuildValue("(s)", "host")) < 0 ||
        PyDict_SetItemString(d, "cuda_version", Py_None) < 0 ||
        PyDict_SetItemString(d, "cupti_api_version", Py_None) < 0 ||
        PyDict_SetItemString(d, "headers", Py_None) < 0)
        goto error;
#endif
#if defined(__clang__)
    if (kb_dict_set_steal(d, "compiler", PyUnicode_FromString("clang " __clang_version__)) < 0)
        goto error;
#elif defined(__GNUC__)
    if (kb_dict_set_steal(d, "compiler", PyUnicode_FromString("gcc " __VERSION__)) < 0)
        goto error;
#endif
    if (kb_dict_set_steal(d, "python", PyUnicode_FromString(PY_VERSION)) < 0)
        goto error;
#ifdef KB_BUILD_CFLAGS
    if (kb_dict_set_steal(d, "cflags", PyUnicode_FromString(KB_BUILD_CFLAGS)) < 0)
        goto error;
#endif
    if (PyModule_AddObjectRef(m, "BUILD", d) < 0)
        goto error;
    Py_DECREF(d);
    return 0;

error:
    Py_DECREF(d);
    return -1;
}

static int core_exec(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    PyObject *bases = NULL;

    import_array1(-1);

    st->KbenchError = new_error(m, "KbenchError", PyExc_RuntimeError,
                                "Base class of every kbench error.");
    if (st->KbenchError == NULL)
        goto error;
    if ((bases = bases_of(st->KbenchError, PyExc_OSError)) == NULL)
        goto error;
    st->LibraryNotFound = new_error(m, "LibraryNotFound", bases,
                                    "A GPU library (libcuda, libcupti, libnvidia-ml, libnvrtc) "
                                    "could not be opened; the message names the paths tried.");
    Py_CLEAR(bases);
    if (st->LibraryNotFound == NULL)
        goto error;
    st->CudaError = new_error(m, "CudaError", st->KbenchError,
                              "A CUDA driver API call failed; the message names the call.");
    if (st->CudaError == NULL)
        goto error;
    st->CaptureError = new_error(m, "CaptureError", st->CudaError,
                                 "CUDA stream capture failed (for example the callable "
                                 "synchronized during capture); the stream was restored.");
    if (st->CaptureError == NULL)
        goto error;
    st->CuptiError = new_error(m, "CuptiError", st->KbenchError,
                               "A CUPTI call failed; the message names the call.");
    if (st->CuptiError == NULL)
        goto error;
    st->CuptiBusy = new_error(m, "CuptiBusy", st->CuptiError,
                              "CUPTI is owned by another profiler (torch.profiler, nsys, ncu).");
    if (st->CuptiBusy == NULL)
        goto error;
    st->NvmlError = new_error(m, "NvmlError", st->KbenchError, "An NVML call failed.");
    if (st->NvmlError == NULL)
        goto error;
    /* in every build, as CudaError is: kbench/__init__.py exports them all */
    st->HipError = new_error(m, "HipError", st->KbenchError,
                             "A HIP runtime call failed; the message names the call.");
    if (st->HipError == NULL)
        goto error;
    st->RocmSmiError = new_error(m, "RocmSmiError", st->KbenchError, "A ROCm SMI call failed.");
    if (st->RocmSmiError == NULL)
        goto error;
    st->NvrtcError = new_error(m, "NvrtcError", st->KbenchError,
                               "NVRTC failed to compile a kernel; the message has its log.");
    if (st->NvrtcError == NULL)
        goto error;

    if (kb_clock_module_init(m) < 0 || kb_stats_module_init(m) < 0 ||
        kb_criterion_module_init(m) < 0 || kb_measure_host_module_init(m) < 0 ||
        kb_loop_module_init(m) < 0 || kb_schema_module_init(m) < 0 ||
        kb_coldcache_module_init(m) < 0 || kb_compare_module_init(m) < 0 ||
        kb_cpu_kernels_module_init(m) < 0 || kb_steady_module_init(m) < 0 ||
        kb_regime_module_init(m) < 0 ||
        kb_choices_module_init(m) < 0 ||
        add_build_info(m) < 0)
        goto error;
#ifdef KB_HAVE_CUDA
    if (kb_gpu_module_init(m) < 0 || kb_nvml_sampler_module_init(m) < 0 ||
        kb_cuda_kernels_module_init(m) < 0 || kb_graph_module_init(m) < 0 ||
        kb_cupti_module_init(m) < 0 || kb_cuda_options_module_init(m) < 0 ||
        kb_measure_cuda_module_init(m) < 0 || kb_profile_module_init(m) < 0 ||
        kb_nvml_topology_module_init(m) < 0 || kb_busy_time_module_init(m) < 0 ||
        kb_hip_module_init(m) < 0)
        goto error;
    if (PyModule_AddIntConstant(m, "HAVE_CUDA", 1) < 0)
        goto error;
    if (PyModule_AddIntConstant(m, "CUDA_HEADERS_VERSION", CUDA_VERSION) < 0)
        goto error;
#else
    if (PyModule_AddIntConstant(m, "HAVE_CUDA", 0) < 0 ||
        PyModule_AddIntConstant(m, "HAVE_HIP", 0) < 0)
        goto error;
    if (PyModule_AddIntConstant(m, "CUDA_HEADERS_VERSION", 0) < 0)
        goto error;
#endif
    return 0;

error:
    Py_XDECREF(bases);
    return -1;
}

static int core_traverse(PyObject *m, visitproc visit, void *arg)
{
    kb_state *st = kb_get_state(m);
    Py_VISIT(st->KbenchError);
    Py_VISIT(st->LibraryNotFound);
    Py_VISIT(st->CudaError);
    Py_VISIT(st->CaptureError);
    Py_VISIT(st->CuptiError);
    Py_VISIT(st->CuptiBusy);
    Py_VISIT(st->NvmlError);
    Py_VISIT(st->NvrtcError);
    Py_VISIT(st->HipError);
    Py_VISIT(st->RocmSmiError);
    return 0;
}

static int core_clear(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    Py_CLEAR(st->KbenchError);
    Py_CLEAR(st->LibraryNotFound);
    Py_CLEAR(st->CudaError);
    Py_CLEAR(st->CaptureError);
    Py_CLEAR(st->CuptiError);
    Py_CLEAR(st->CuptiBusy);
    Py_CLEAR(st->NvmlError);
    Py_CLEAR(st->NvrtcError);
    Py_CLEAR(st->HipError);
    Py_CLEAR(st->RocmSmiError);
    return 0;
}

static void core_free(void *m)
{
    core_clear((PyObject *)m);
    kb_state *st = kb_get_state((PyObject *)m);
    kb_measure_lock_free(st);
    PyMem_RawFree(st->llc_memo);
    st->llc_memo = NULL;
    for (size_t i = 0; i < sizeof st->cuda_builtins / sizeof st->cuda_builtins[0]; i++)
        PyMem_RawFree(st->cuda_builtins[i]);   /* the CUDA module goes with the process */
#ifdef KB_HAVE_CUDA
    kb_cupti_session_shutdown();    /* the CUPTI linger thread, before the libraries go */
    kb_gpu_state_free(kb_get_state((PyObject *)m));
    kb_hip_module_free(kb_get_state((PyObject *)m));
#endif
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
    {0, NULL},
};

static struct PyModuleDef core_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kbench._core",
    .m_doc = "kbench's C core: timing loops, cold caches, statistics, stopping rules, "
             "correctness comparison, and the lazily loaded CUDA backend.",
    .m_size = sizeof(kb_state),
    .m_slots = core_slots,
    .m_traverse = core_traverse,
    .m_clear = core_clear,
    .m_free = core_free,
};

KB_EXPORT PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&core_def); }
