/* hip_device.c -- HIP devices as kbench sees them: count, the attributes the backend needs
 * (the L2 size above all: the rotation must exceed the last-level cache), the libraries' status,
 * and a ROCm SMI snapshot. The MI300 Infinity Cache (MALL) has no HIP device attribute; the
 * Python side (kbench/backends/hip.py) adds it from a documented table. */
#include "hip_api.h"

#include <string.h>

int kb_hip_use_device(PyObject *m, const kb_hip_api *hip, int ordinal, int *prev)
{
    int n = 0;
    if (prev != NULL && hip->hipGetDevice(prev) != KB_hipSuccess)
        *prev = -1;
    if (KB_HIP(m, hip->hipGetDeviceCount(&n)) < 0)
        return -1;
    if (ordinal < 0 || ordinal >= n) {
        PyErr_Format(PyExc_ValueError, "HIP device %d does not exist: the HIP runtime sees %d "
                     "device(s) (HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES select them)",
                     ordinal, n);
        return -1;
    }
    if (prev != NULL && *prev == ordinal)
        return 0;
    return KB_HIP(m, hip->hipSetDevice(ordinal));
}

void kb_hip_restore_device(const kb_hip_api *hip, int prev)
{
    int now = -1;
    if (prev >= 0 && (hip->hipGetDevice(&now) != KB_hipSuccess || now != prev))
        hip->hipSetDevice(prev);
}

static PyObject *hip_device_count(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    const kb_hip_api *hip = kb_hip(m);
    int n = 0;
    if (hip == NULL || KB_HIP(m, hip->hipGetDeviceCount(&n)) < 0)
        return NULL;
    return PyLong_FromLong(n);
}

/* d[key] = None, and d["attribute_errors"][key] = the HIP error name of the read that failed
 * (r = hipSuccess: the runtime lacks the function). */
static int attr_error(const kb_hip_api *hip, PyObject *d, const char *key, kb_hipError_t r)
{
    PyObject *errs = PyDict_GetItemString(d, "attribute_errors");   /* borrowed */
    if (errs == NULL) {
        if (kb_dict_set_steal(d, "attribute_errors", PyDict_New()) < 0)
            return -1;
        errs = PyDict_GetItemString(d, "attribute_errors");
    }
    const char *name = r == KB_hipSuccess ? "not in this HIP runtime" : hip->hipGetErrorName(r);
    if (kb_dict_set_steal(errs, key, PyUnicode_FromString(name ? name : "?")) < 0)
        return -1;
    return PyDict_SetItemString(d, key, Py_None);
}

/* An int attribute into d[key]; None when the runtime does not give it (an older runtime, or
 * the forwarder's unmapped ones), with the HIP error name in d["attribute_errors"][key]: a
 * missing attribute costs that figure, not the device's description. */
static int put_attr(PyObject *m, const kb_hip_api *hip, PyObject *d, const char *key,
                    kb_hipDeviceAttribute_t a, int dev, long scale)
{
    int v = 0;
    kb_hipError_t r = hip->hipDeviceGetAttribute(&v, a, dev);
    if (r == KB_hipSuccess)
        return kb_dict_set_steal(d, key, PyLong_FromLongLong((long long)v * scale));
    return attr_error(hip, d, key, r);
}

/* d["pci_bus_id"]: "domain:bus:device.function" (hipDeviceGetPCIBusId), which finds the
 * device's ROCm SMI index (kbench/backends/hip.py); None where the runtime cannot say. */
static int put_pci_bus_id(const kb_hip_api *hip, PyObject *d, int dev)
{
    char id[64] = {0};
    if (hip->hipDeviceGetPCIBusId == NULL)
        return attr_error(hip, d, "pci_bus_id", KB_hipSuccess);
    kb_hipError_t r = hip->hipDeviceGetPCIBusId(id, (int)sizeof id - 1, dev);
    if (r != KB_hipSuccess)
        return attr_error(hip, d, "pci_bus_id", r);
    return kb_dict_set_steal(d, "pci_bus_id", PyUnicode_DecodeUTF8(id, strlen(id), "replace"));
}

static PyObject *device_dict(PyObject *m, const kb_hip_api *hip, int dev);

static PyObject *hip_device_info(PyObject *m, PyObject *arg)
{
    int dev = 0;
    if (kb_hip_device_arg(arg, "hip_device_info", &dev) < 0)
        return NULL;
    const kb_hip_api *hip = kb_hip(m);
    int prev = -1;
    if (hip == NULL || kb_hip_use_device(m, hip, dev, &prev) < 0)
        return NULL;
    PyObject *d = device_dict(m, hip, dev);
    kb_hip_restore_device(hip, prev);
    return d;
}

static PyObject *device_dict(PyObject *m, const kb_hip_api *hip, int dev)
{
    char name[256] = {0};
    size_t total = 0, free_b = 0, total2 = 0;
    if (KB_HIP(m, hip->hipDeviceGetName(name, (int)sizeof name - 1, dev)) < 0 ||
        KB_HIP(m, hip->hipDeviceTotalMem(&total, dev)) < 0 ||
        KB_HIP(m, hip->hipMemGetInfo(&free_b, &total2)) < 0)
        return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    const kb_hip_libs *g = kb_get_state(m)->hip;
    if (kb_dict_set_steal(d, "name", PyUnicode_DecodeUTF8(name, strlen(name), "replace")) < 0 ||
        kb_dict_set_steal(d, "ordinal", PyLong_FromLong(dev)) < 0 ||
        kb_dict_set_steal(d, "total_memory_bytes", PyLong_FromSize_t(total)) < 0 ||
        kb_dict_set_steal(d, "free_memory_bytes", PyLong_FromSize_t(free_b)) < 0 ||
        kb_dict_set_steal(d, "runtime_version", PyLong_FromLong(g->runtime_version)) < 0 ||
        kb_dict_set_steal(d, "library", PyUnicode_FromString(g->hip_lib.path ? g->hip_lib.path
                                                                               : "?")) < 0 ||
        put_attr(m, hip, d, "l2_bytes", KB_hipDeviceAttributeL2CacheSize, dev, 1) < 0 ||
        put_attr(m, hip, d, "multiprocessors", KB_hipDeviceAttributeMultiprocessorCount, dev,
                 1) < 0 ||
        put_attr(m, hip, d, "clock_khz", KB_hipDeviceAttributeClockRate, dev, 1) < 0 ||
        put_attr(m, hip, d, "memory_clock_khz", KB_hipDeviceAttributeMemoryClockRate, dev,
                 1) < 0 ||
        put_attr(m, hip, d, "memory_bus_width_bits", KB_hipDeviceAttributeMemoryBusWidth, dev,
                 1) < 0 ||
        put_attr(m, hip, d, "can_wait_value", KB_hipDeviceAttributeCanUseStreamWaitValue, dev,
                 1) < 0 ||
        put_pci_bus_id(hip, d, dev) < 0 ||
        kb_dict_set_steal(d, "has_wait_value32",
                          PyBool_FromLong(hip->hipStreamWaitValue32 != NULL &&
                                          hip->hipHostMalloc != NULL)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *hip_library_status(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    return kb_hip_library_status(m);
}

static PyObject *rocm_smi_snapshot(PyObject *m, PyObject *arg)
{
    long idx = PyLong_AsLong(arg);
    if (idx == -1 && PyErr_Occurred())
        return NULL;
    if (idx < 0 || idx > 0xFFFF)
        return PyErr_Format(PyExc_ValueError, "device index %ld is out of range", idx);
    return kb_rsmi_snapshot(m, (uint32_t)idx);
}

static PyMethodDef hip_device_methods[] = {
    {"hip_device_count", hip_device_count, METH_NOARGS,
     "hip_device_count() -> int: the HIP devices visible (opens libamdhip64)."},
    {"hip_device_info", hip_device_info, METH_O,
     "hip_device_info($module, ordinal, /)\n--\n\n"
     "hip_device_info(ordinal) -> dict: name, memory, L2 size, pci_bus_id and the attributes "
     "the HIP backend uses (opens libamdhip64; None for an attribute the runtime does not "
     "know). ordinal: 0..63."},
    {"hip_library_status", hip_library_status, METH_NOARGS,
     "hip_library_status() -> {'hip': {...}, 'rocm_smi': {...}}: state ('not tried', 'loaded', "
     "'failed'), path, error. Opens nothing."},
    {"rocm_smi_snapshot", rocm_smi_snapshot, METH_O,
     "rocm_smi_snapshot($module, index, /)\n--\n\n"
     "rocm_smi_snapshot(index) -> dict: sclk_mhz, mclk_mhz, power_w, temp_c now (None where a "
     "read failed), pci_bus_id (None when ROCm SMI cannot say), index, devices (ROCm SMI's "
     "count); opens librocm_smi64. ROCm SMI indexes every GPU: match pci_bus_id with "
     "hip_device_info's, not the index with a HIP ordinal."},
    {NULL, NULL, 0, NULL},
};

int kb_hip_device_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, hip_device_methods);
}
