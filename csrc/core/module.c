/* module.c -- kbench._core module glue: multi-phase init, module state, exception types.
 *
 * The exec slot creates the exception types and lets each file add its own functions
 * (kb_*_module_init), every file called from here and none from another file's init, so the
 * calls run one way: module.c down to the files, the files down to the leaf helpers
 * (pyutil.c). Nothing here touches a GPU: GPU libraries are opened on first use.
 */
#define KB_NUMPY_IMPORT
#include "kbench.h"

#include <stddef.h>
#include <string.h>
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

/* The exceptions of the list (kbench.h), as rows: where each lives in the module state. */
typedef struct {
    const char *name, *parent;
    PyObject **also;
    const char *doc;
    size_t at;
} kb_exception_row;
#define KB_EXCEPTION_ROW(name_, parent_, also_, doc_)                                          \
    {#name_, #parent_, also_, doc_, offsetof(kb_state, name_)},
static const kb_exception_row exception_rows[] = {KB_EXCEPTIONS(KB_EXCEPTION_ROW)};
#undef KB_EXCEPTION_ROW

static PyObject **state_slot(kb_state *st, size_t at) { return (PyObject **)((char *)st + at); }

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

    for (size_t k = 0; k < sizeof exception_rows / sizeof exception_rows[0]; k++) {
        const kb_exception_row *r = &exception_rows[k];
        PyObject *base = PyExc_RuntimeError;
        for (size_t j = 0; j < k; j++)         /* a parent comes before its children */
            if (strcmp(exception_rows[j].name, r->parent) == 0)
                base = *state_slot(st, exception_rows[j].at);
        if ((bases = bases_of(base, r->also ? *r->also : NULL)) == NULL)
            goto error;
        *state_slot(st, r->at) = new_error(m, r->name, bases, r->doc);
        Py_CLEAR(bases);
        if (*state_slot(st, r->at) == NULL)
            goto error;
    }

    if (kb_clock_module_init(m) < 0 || kb_stats_module_init(m) < 0 ||
        kb_between_runs_module_init(m) < 0 ||
        kb_criterion_module_init(m) < 0 || kb_measure_host_module_init(m) < 0 ||
        kb_loop_module_init(m) < 0 || kb_schema_module_init(m) < 0 ||
        kb_evict_module_init(m) < 0 ||
        kb_coldcache_module_init(m) < 0 || kb_compare_module_init(m) < 0 ||
        kb_cpu_kernels_module_init(m) < 0 || kb_steady_module_init(m) < 0 ||
        kb_regime_module_init(m) < 0 ||
        kb_plan_module_init(m) < 0 ||
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
#define KB_EXCEPTION_VISIT(name, ...) Py_VISIT(st->name);
    KB_EXCEPTIONS(KB_EXCEPTION_VISIT)
#undef KB_EXCEPTION_VISIT
    Py_VISIT(st->plan_type);
    return 0;
}

static int core_clear(PyObject *m)
{
    kb_state *st = kb_get_state(m);
#define KB_EXCEPTION_CLEAR(name, ...) Py_CLEAR(st->name);
    KB_EXCEPTIONS(KB_EXCEPTION_CLEAR)
#undef KB_EXCEPTION_CLEAR
    Py_CLEAR(st->plan_type);
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
