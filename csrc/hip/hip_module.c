/* hip_module.c -- the HIP backend's part of kbench._core: its exception types and functions.
 * Nothing here opens a library: libamdhip64 and librocm_smi64 are opened on first use. */
#include "hip_api.h"

static PyObject *add_error(PyObject *m, const char *name, PyObject *base, const char *doc)
{
    char qualname[64];
    PyOS_snprintf(qualname, sizeof qualname, "kbench._core.%s", name);
    PyObject *type = PyErr_NewExceptionWithDoc(qualname, doc, base, NULL);
    if (type != NULL && PyModule_AddObjectRef(m, name, type) < 0)
        Py_CLEAR(type);
    return type;
}

int kb_hip_module_init(PyObject *m)
{
    kb_state *st = kb_get_state(m);
    st->HipError = add_error(m, "HipError", st->KbenchError,
                             "A HIP runtime call failed; the message names the call.");
    if (st->HipError == NULL)
        return -1;
    st->RocmSmiError = add_error(m, "RocmSmiError", st->KbenchError, "A ROCm SMI call failed.");
    if (st->RocmSmiError == NULL)
        return -1;
    if (kb_hip_device_module_init(m) < 0 || kb_hip_graph_module_init(m) < 0 ||
        kb_measure_hip_module_init(m) < 0)
        return -1;
    return PyModule_AddIntConstant(m, "HAVE_HIP", 1);
}

void kb_hip_module_free(kb_state *st)
{
    kb_hip_state_free(st);
}
