/* nvml_topology.c -- how the local GPUs reach each other, for kbench.distributed's report:
 *
 *   nvml_p2p(pci_bus_ids)  for every pair (a < b) of the devices with these PCI bus ids, NVML's
 *                          P2P status of each capability (read, write, NVLink, atomics) and the
 *                          pair's common ancestor in the PCIe/NUMA tree, as NVML's codes
 *
 * The codes stay codes here; kbench/distributed/_topology.py names them. Both NVML functions
 * are optional entries of the table (loader_nvml.c): a libnvidia-ml without them raises
 * LibraryNotFound naming the one missing. Every call's return code is checked and raised as
 * NvmlError naming the call, except NVML_ERROR_NOT_SUPPORTED for one pair's query: that is
 * NVML's answer that it cannot tell (an H200's driver 580 says so of a device's common
 * ancestor with itself), recorded as None so one such query does not lose the others. Two
 * ids that name one device are refused (ValueError): a GPU has no P2P link to itself.
 */
#include "cuda_backend.h"

#include <stdlib.h>

/* NVML's nvmlGpuP2PCapsIndex_t values reported, in the order of the result's "status" */
static const struct {
    const char *key;
    nvmlGpuP2PCapsIndex_t index;
} p2p_caps[] = {
    {"read", NVML_P2P_CAPS_INDEX_READ},
    {"write", NVML_P2P_CAPS_INDEX_WRITE},
    {"nvlink", NVML_P2P_CAPS_INDEX_NVLINK},
    {"atomics", NVML_P2P_CAPS_INDEX_ATOMICS},
};
#define N_CAPS (sizeof p2p_caps / sizeof p2p_caps[0])

/* One pair query's answer: the code as an int, None where NVML says it cannot tell
 * (NVML_ERROR_NOT_SUPPORTED), NULL with NvmlError naming the call for any other failure. */
static PyObject *answer(PyObject *m, nvmlReturn_t rc, long code, const char *call, int line)
{
    if (rc == NVML_ERROR_NOT_SUPPORTED)
        Py_RETURN_NONE;
    if (kb_nvml_check(m, rc, call, __FILE__, line) < 0)
        return NULL;
    return PyLong_FromLong(code);
}

/* {"a": a, "b": b, "status": {cap: code}, "common_ancestor": code} for one pair. */
static PyObject *pair_entry(PyObject *m, const kb_nvml_api *nv, const nvmlDevice_t *dev,
                            Py_ssize_t a, Py_ssize_t b)
{
    PyObject *status = PyDict_New();
    if (status == NULL)
        return NULL;
    for (size_t c = 0; c < N_CAPS; c++) {
        nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
        nvmlReturn_t rc = nv->nvmlDeviceGetP2PStatus(dev[a], dev[b], p2p_caps[c].index, &st);
        if (kb_dict_set_steal(status, p2p_caps[c].key,
                              answer(m, rc, (long)st, "nvmlDeviceGetP2PStatus(dev[a], dev[b], "
                                     "index, &status)", __LINE__)) < 0) {
            Py_DECREF(status);
            return NULL;
        }
    }
    nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_INTERNAL;
    nvmlReturn_t rc = nv->nvmlDeviceGetTopologyCommonAncestor(dev[a], dev[b], &level);
    PyObject *ancestor = answer(m, rc, (long)level, "nvmlDeviceGetTopologyCommonAncestor(dev[a], "
                                "dev[b], &level)", __LINE__);
    if (ancestor == NULL) {
        Py_DECREF(status);
        return NULL;
    }
    return Py_BuildValue("{s:n,s:n,s:N,s:N}", "a", a, "b", b, "status", status,
                         "common_ancestor", ancestor);
}

/* ValueError where two of the ids resolved to one device; 0 when all are distinct. */
static int refuse_repeated(PyObject *seq, const nvmlDevice_t *dev, Py_ssize_t n)
{
    for (Py_ssize_t b = 1; b < n; b++)
        for (Py_ssize_t a = 0; a < b; a++)
            if (dev[a] == dev[b]) {
                PyErr_Format(PyExc_ValueError, "nvml_p2p: pci_bus_ids[%zd] (%U) names the same "
                             "GPU as pci_bus_ids[%zd] (%U): a GPU has no P2P link to itself", b,
                             PySequence_Fast_GET_ITEM(seq, b), a,
                             PySequence_Fast_GET_ITEM(seq, a));
                return -1;
            }
    return 0;
}

/* The handles of the devices named by the sequence's PCI bus ids; NULL with the error set. */
static nvmlDevice_t *device_handles(PyObject *m, const kb_nvml_api *nv, PyObject *seq,
                                    Py_ssize_t n)
{
    nvmlDevice_t *dev = calloc((size_t)(n > 0 ? n : 1), sizeof *dev);
    if (dev == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *id = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));  /* str: checked */
        if (id == NULL || KB_NVML(m, nv->nvmlDeviceGetHandleByPciBusId_v2(id, &dev[i])) < 0) {
            free(dev);
            return NULL;
        }
    }
    return dev;
}

static PyObject *nvml_p2p(PyObject *m, PyObject *arg)
{
    if (PyUnicode_Check(arg) || PyBytes_Check(arg)) {  /* a sequence, but of characters */
        PyErr_SetString(PyExc_TypeError, "nvml_p2p: pci_bus_ids must be a sequence of str");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "nvml_p2p: pci_bus_ids must be a sequence of str");
    if (seq == NULL)
        return NULL;
    PyObject *pairs = NULL;
    nvmlDevice_t *dev = NULL;
    const kb_nvml_api *nv = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {    /* bad input is refused before NVML is opened */
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "nvml_p2p: pci_bus_ids[%zd] must be a str, got %.100s",
                         i, Py_TYPE(item)->tp_name);
            goto done;
        }
    }
    if ((nv = kb_nvml(m)) == NULL)
        goto done;
    const char *missing = nv->nvmlDeviceGetP2PStatus == NULL ? "nvmlDeviceGetP2PStatus"
                          : nv->nvmlDeviceGetTopologyCommonAncestor == NULL
                              ? "nvmlDeviceGetTopologyCommonAncestor"
                              : NULL;
    if (missing != NULL) {
        const char *path = kb_get_state(m)->gpu->nvml_lib.path;
        PyErr_Format(kb_get_state(m)->LibraryNotFound, "%s does not provide %s: no GPU "
                     "topology", path ? path : "libnvidia-ml", missing);
        goto done;
    }
    if ((dev = device_handles(m, nv, seq, n)) == NULL || refuse_repeated(seq, dev, n) < 0 ||
        (pairs = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t a = 0; a < n; a++) {
        for (Py_ssize_t b = a + 1; b < n; b++) {
            PyObject *entry = pair_entry(m, nv, dev, a, b);
            if (entry == NULL || PyList_Append(pairs, entry) < 0) {
                Py_XDECREF(entry);
                Py_CLEAR(pairs);
                goto done;
            }
            Py_DECREF(entry);
        }
    }
done:
    free(dev);
    Py_DECREF(seq);
    return pairs;
}

static PyMethodDef nvml_topology_methods[] = {
    {"nvml_p2p", nvml_p2p, METH_O,
     "nvml_p2p($module, pci_bus_ids, /)\n--\n\n"
     "nvml_p2p(pci_bus_ids) -> list[dict]\n\n"
     "For every pair (a < b) of the devices with these PCI bus ids: {'a', 'b', 'status': "
     "{'read', 'write', 'nvlink', 'atomics'}: nvmlGpuP2PStatus_t code, 'common_ancestor': "
     "nvmlGpuTopologyLevel_t code}; None where NVML answers NVML_ERROR_NOT_SUPPORTED. "
     "NvmlError names a failed call; LibraryNotFound, a missing library or function; "
     "ValueError, two ids of one GPU."},
    {NULL, NULL, 0, NULL},
};

int kb_nvml_topology_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, nvml_topology_methods);
}
