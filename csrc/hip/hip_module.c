/* hip_module.c -- the HIP backend's part of kbench._core: its functions.
 * Nothing here opens a library: libamdhip64 and librocm_smi64 are opened on first use. */
#include "hip_api.h"

int kb_hip_module_init(PyObject *m)
{
    /* HipError and RocmSmiError are made with the other exception types (module.c) */
    if (kb_hip_device_module_init(m) < 0 || kb_hip_graph_module_init(m) < 0 ||
        kb_measure_hip_module_init(m) < 0)
        return -1;
    return PyModule_AddIntConstant(m, "HAVE_HIP", 1);
}

void kb_hip_module_free(kb_state *st)
{
    kb_hip_state_free(st);
}
