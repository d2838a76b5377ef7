/* cuda_device.c -- what the GPU libraries say about the machine: which of them load
 * (gpu_library_status), the CUDA devices (cuda_device_count, cuda_device_info) and an NVML
 * snapshot of one device's clocks, power, temperature and throttling (nvml_snapshot).
 *
 * Devices are numbered the CUDA way (CUDA_VISIBLE_DEVICES applies); NVML, which numbers all
 * GPUs of the machine, is reached through the device's PCI bus id.
 */
#include "loader.h"
#include "kb_regime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ small helpers */


static PyObject *none_ref(void) { Py_RETURN_NONE; }

static PyObject *new_ref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}

/* str(current exception), clearing it; NULL (exception kept) when it is a MemoryError. */
static PyObject *take_error_message(void)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError))
        return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *s = value != NULL ? PyObject_Str(value) : NULL;
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (s == NULL) {
        PyErr_Clear();
        s = PyUnicode_FromString("unknown error");
    }
    return s;
}

int kb_cuda_check_ordinal(PyObject *m, int ordinal)
{
    const kb_cuda_api *cu = kb_cuda(m);
    int count = 0;
    if (cu == NULL)
        return -1;
    if (KB_CU(m, cu->cuDeviceGetCount(&count)) < 0)
        return -1;
    if (ordinal < 0 || ordinal >= count) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        PyErr_Format(PyExc_ValueError,
                     "CUDA device ordinal %d is out of range: %d device(s) visible%s%s%s",
                     ordinal, count, visible ? " (CUDA_VISIBLE_DEVICES=" : "",
                     visible ? visible : "", visible ? ")" : "");
        return -1;
    }
    return 0;
}

int kb_nvml_device_of_cuda(PyObject *m, int ordinal, nvmlDevice_t *dev, char *pci_bus_id,
                           size_t pci_bus_id_len)
{
    const kb_cuda_api *cu;
    const kb_nvml_api *nv;
    CUdevice cdev;
    char pci[64];
    if ((cu = kb_cuda(m)) == NULL || kb_cuda_check_ordinal(m, ordinal) < 0)
        return -1;
    if ((nv = kb_nvml(m)) == NULL)
        return -1;
    if (KB_CU(m, cu->cuDeviceGet(&cdev, ordinal)) < 0 ||
        KB_CU(m, cu->cuDeviceGetPCIBusId(pci, (int)sizeof pci, cdev)) < 0)
        return -1;
    if (KB_NVML(m, nv->nvmlDeviceGetHandleByPciBusId_v2(pci, dev)) < 0)
        return -1;
    if (pci_bus_id != NULL && pci_bus_id_len > 0)
        snprintf(pci_bus_id, pci_bus_id_len, "%s", pci);
    return 0;
}

/* ------------------------------------------------------------------ gpu_library_status */

typedef enum { LIB_CUDA, LIB_CUPTI, LIB_NVML, LIB_NVRTC } lib_id;

/* The entry for one library: try it, then report what happened. */
static PyObject *library_entry(PyObject *m, lib_id which)
{
    const void *api = NULL;
    PyObject *entry = NULL, *error = NULL, *version = NULL;
    switch (which) {
    case LIB_CUDA: api = kb_cuda(m); break;
    case LIB_CUPTI: api = kb_cupti(m); break;
    case LIB_NVML: api = kb_nvml(m); break;
    case LIB_NVRTC: api = kb_nvrtc(m); break;
    }
    if (api == NULL && (error = take_error_message()) == NULL)
        return NULL;                    /* MemoryError */

    kb_gpu_libs *g = kb_get_state(m)->gpu;
    if (g == NULL) {                    /* the state itself could not be allocated */
        Py_XDECREF(error);
        return PyErr_NoMemory();
    }
    const kb_lib *lib = which == LIB_CUDA    ? &g->cuda_lib
                        : which == LIB_CUPTI ? &g->cupti_lib
                        : which == LIB_NVML  ? &g->nvml_lib
                                             : &g->nvrtc_lib;
    int loaded = lib->state == KB_LIB_LOADED;

    if (!loaded) {
        version = none_ref();
    } else if (which == LIB_CUDA) {
        version = PyLong_FromLong(g->cuda_driver_version);
    } else if (which == LIB_CUPTI) {
        version = PyLong_FromUnsignedLong(g->cupti_version);
    } else if (which == LIB_NVML) {
        char buf[96];
        if (g->nvml_initialized &&
            g->nvml.nvmlSystemGetDriverVersion(buf, sizeof buf) == NVML_SUCCESS)
            version = PyUnicode_FromString(buf);
        else
            version = none_ref();
    } else {
        version = PyUnicode_FromFormat("%d.%d", g->nvrtc_major, g->nvrtc_minor);
    }
    if (version == NULL)
        goto error;

    if ((entry = PyDict_New()) == NULL)
        goto error;
    if (kb_dict_set_steal(entry, "loaded", PyBool_FromLong(loaded)) < 0 ||
        kb_dict_set_steal(entry, "path",
                  lib->path ? PyUnicode_DecodeFSDefault(lib->path) : none_ref()) < 0 ||
        kb_dict_set_steal(entry, "error", error ? new_ref(error) : none_ref()) < 0 ||
        kb_dict_set_steal(entry, "version", new_ref(version)) < 0 ||
        kb_dict_set_steal(entry, "from_process", PyBool_FromLong(loaded && lib->from_process)) < 0)
        goto error;
    if (which == LIB_CUDA &&
        (kb_dict_set_steal(entry, "initialized", PyBool_FromLong(g->cuda_initialized)) < 0 ||
         kb_dict_set_steal(entry, "headers_version", PyLong_FromLong(CUDA_VERSION)) < 0))
        goto error;
    if (which == LIB_CUPTI &&
        kb_dict_set_steal(entry, "headers_version", PyLong_FromLong(CUPTI_API_VERSION)) < 0)
        goto error;
    Py_XDECREF(error);
    Py_DECREF(version);
    return entry;

error:
    Py_XDECREF(entry);
    Py_XDECREF(error);
    Py_XDECREF(version);
    return NULL;
}

static PyObject *gpu_library_status(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    static const char *const keys[] = {"cuda", "cupti", "nvml", "nvrtc"};
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (int i = 0; i < 4; i++) {
        if (kb_dict_set_steal(out, keys[i], library_entry(m, (lib_id)i)) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* ------------------------------------------------------------------ prefer_cupti */

static PyObject *prefer_cupti(PyObject *m, PyObject *arg)
{
    PyObject *bytes = NULL;
    if (arg != Py_None && !PyUnicode_Check(arg) && !PyBytes_Check(arg) &&
        !PyObject_HasAttrString(arg, "__fspath__")) {
        PyErr_Format(PyExc_TypeError, "prefer_cupti: path must be a str or os.PathLike naming "
                                      "a libcupti file, or None, got %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (arg != Py_None && !PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    int rc = kb_cupti_prefer(m, bytes != NULL ? PyBytes_AS_STRING(bytes) : NULL);
    Py_XDECREF(bytes);
    if (rc < 0)
        return NULL;
    return PyBool_FromLong(rc);
}

/* ------------------------------------------------------------------ cuda_device_count */

static PyObject *cuda_device_count(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    const kb_cuda_api *cu = kb_cuda(m);
    int count = 0;
    if (cu == NULL) {
        /* a driver without GPUs is a count of zero, not a failure */
        kb_gpu_libs *g = kb_get_state(m)->gpu;
        if (g != NULL && g->cuda_lib.state == KB_LIB_LOADED &&
            g->cuda_init_result == CUDA_ERROR_NO_DEVICE &&
            PyErr_ExceptionMatches(kb_get_state(m)->CudaError)) {
            PyErr_Clear();
            return PyLong_FromLong(0);
        }
        return NULL;
    }
    if (KB_CU(m, cu->cuDeviceGetCount(&count)) < 0)
        return NULL;
    return PyLong_FromLong(count);
}

/* ------------------------------------------------------------------ cuda_device_info */

#define ATTR_(key, attr, optional)                                                             \
    {key, attr, optional, "cuDeviceGetAttribute(&value, " #attr ", dev)"}
static const struct {
    const char *key;
    CUdevice_attribute attr;
    int optional;               /* 1: report None instead of failing when the query fails */
    const char *expr;           /* for the error message */
} info_attrs[] = {
    ATTR_("sm_count", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
    ATTR_("l2_bytes", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0),
    ATTR_("max_persisting_l2_bytes", CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 1),
    ATTR_("memory_bus_width_bits", CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 1),
    ATTR_("clock_rate_khz", CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1),
    ATTR_("memory_clock_rate_khz", CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 1),
    ATTR_("warp_size", CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1),
    ATTR_("max_threads_per_sm", CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 1),
    ATTR_("max_shared_memory_per_sm", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 1),
    ATTR_("max_shared_memory_per_block_optin",
          CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 1),
    ATTR_("registers_per_sm", CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 1),
    ATTR_("ecc_enabled", CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1),
};
#undef ATTR_
#define N_INFO_ATTRS (sizeof info_attrs / sizeof info_attrs[0])

typedef struct {
    char name[256];
    CUuuid uuid;
    char pci_bus_id[64];
    size_t total_bytes, free_bytes;
    int cc_major, cc_minor;
    int attr[N_INFO_ATTRS];
    int have_attr[N_INFO_ATTRS];
    size_t persisting_l2_limit;
    int have_persisting_l2_limit;   /* 0 where the device has no persisting L2 */
    int driver_version;
} device_info;

/* The CUDA side, without the GIL. The primary context is retained for the free-memory and
 * persisting-L2 queries (creating it if nobody else has) and released again. */
static void gather_device_info(const kb_cuda_api *cu, int ordinal, device_info *I, kb_deferred *d)
{
    CUdevice dev = 0;
    KB_DEFER(d, cu->cuDeviceGet(&dev, ordinal));
    KB_DEFER(d, cu->cuDeviceGetName(I->name, (int)sizeof I->name, dev));
    KB_DEFER(d, cu->cuDeviceGetUuid(&I->uuid, dev));
    KB_DEFER(d, cu->cuDeviceGetPCIBusId(I->pci_bus_id, (int)sizeof I->pci_bus_id, dev));
    KB_DEFER(d, cu->cuDeviceTotalMem(&I->total_bytes, dev));
    KB_DEFER(d, cu->cuDriverGetVersion(&I->driver_version));
    KB_DEFER(d, cu->cuDeviceGetAttribute(&I->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                         dev));
    KB_DEFER(d, cu->cuDeviceGetAttribute(&I->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                         dev));
    for (size_t i = 0; i < N_INFO_ATTRS && d->code == 0; i++) {
        CUresult r = cu->cuDeviceGetAttribute(&I->attr[i], info_attrs[i].attr, dev);
        I->have_attr[i] = r == CUDA_SUCCESS;
        if (r != CUDA_SUCCESS && !info_attrs[i].optional)
            kb_defer_record_(d, (int)r, info_attrs[i].expr, __FILE__, __LINE__);
    }
    if (d->code != 0)
        return;

    CUcontext ctx = NULL, popped = NULL;
    if (KB_DEFER(d, cu->cuDevicePrimaryCtxRetain(&ctx, dev)) < 0)
        return;
    if (KB_DEFER(d, cu->cuCtxPushCurrent(ctx)) == 0) {
        size_t total = 0;
        KB_DEFER(d, cu->cuMemGetInfo(&I->free_bytes, &total));
        CUresult r = cu->cuCtxGetLimit(&I->persisting_l2_limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE);
        I->have_persisting_l2_limit = r == CUDA_SUCCESS;
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_UNSUPPORTED_LIMIT)
            kb_defer_record_(d, (int)r, "cuCtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE)",
                             __FILE__, __LINE__);
        KB_DEFER_ALWAYS(d, cu->cuCtxPopCurrent(&popped));
    }
    KB_DEFER_ALWAYS(d, cu->cuDevicePrimaryCtxRelease(dev));
}

/* NVML's view of the clocks and the driver's build ("580.65.06": the CUDA driver API's 13000
 * does not tell two drivers of one CUDA release apart), added to d; NVML being unavailable is
 * reported, not raised. */
static int add_nvml_clocks(PyObject *m, int ordinal, PyObject *d)
{
    static const char *const keys[] = {"nvml_sm_clock_mhz", "nvml_memory_clock_mhz",
                                       "nvml_max_sm_clock_mhz", "nvml_max_memory_clock_mhz",
                                       "nvml_power_limit_w"};
    enum { N = sizeof keys / sizeof keys[0] };
    unsigned int v[N] = {0};
    nvmlReturn_t r[N];
    nvmlDevice_t dev;
    PyObject *err;

    if (kb_nvml_device_of_cuda(m, ordinal, &dev, NULL, 0) < 0) {
        if ((err = take_error_message()) == NULL)
            return -1;
        for (int i = 0; i < N; i++)
            if (kb_dict_set_steal(d, keys[i], none_ref()) < 0)
                goto error_err;
        if (kb_dict_set_steal(d, "nvml_driver_version", none_ref()) < 0)
            goto error_err;
        if (kb_dict_set_steal(d, "nvml_error", err) < 0)
            return -1;
        return 0;
    }
    const kb_nvml_api *nv = &kb_get_state(m)->gpu->nvml;
    char driver[96] = "";
    nvmlReturn_t rd;
    Py_BEGIN_ALLOW_THREADS
    rd = nv->nvmlSystemGetDriverVersion(driver, sizeof driver);
    r[0] = nv->nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &v[0]);
    r[1] = nv->nvmlDeviceGetClockInfo(dev, NVML_CLOCK_MEM, &v[1]);
    r[2] = nv->nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_SM, &v[2]);
    r[3] = nv->nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_MEM, &v[3]);
    r[4] = nv->nvmlDeviceGetEnforcedPowerLimit ? nv->nvmlDeviceGetEnforcedPowerLimit(dev, &v[4])
                                               : NVML_ERROR_FUNCTION_NOT_FOUND;
    Py_END_ALLOW_THREADS
    for (int i = 0; i < N; i++) {
        PyObject *val;
        if (r[i] != NVML_SUCCESS)
            val = none_ref();
        else if (i == 4)
            val = PyFloat_FromDouble(v[i] / 1000.0);    /* milliwatts */
        else
            val = PyLong_FromUnsignedLong(v[i]);
        if (kb_dict_set_steal(d, keys[i], val) < 0)
            return -1;
    }
    driver[sizeof driver - 1] = '\0';
    if (kb_dict_set_steal(d, "nvml_driver_version",
                          rd == NVML_SUCCESS ? PyUnicode_FromString(driver) : none_ref()) < 0)
        return -1;
    return kb_dict_set_steal(d, "nvml_error", none_ref());

error_err:
    Py_DECREF(err);
    return -1;
}

static PyObject *cuda_device_info(PyObject *m, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"ordinal", NULL};
    int ordinal = 0;
    const kb_cuda_api *cu;
    device_info *I = NULL;
    kb_deferred d = KB_DEFERRED_INIT;
    PyObject *out = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:cuda_device_info", kwlist, &ordinal))
        return NULL;
    if ((cu = kb_cuda(m)) == NULL || kb_cuda_check_ordinal(m, ordinal) < 0)
        return NULL;
    if ((I = calloc(1, sizeof *I)) == NULL)
        return PyErr_NoMemory();

    Py_BEGIN_ALLOW_THREADS
    gather_device_info(cu, ordinal, I, &d);
    Py_END_ALLOW_THREADS
    if (KB_CU_RAISE(m, &d) < 0)
        goto error;

    const unsigned char *u = (const unsigned char *)I->uuid.bytes;
    char uuid[64];
    snprintf(uuid, sizeof uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
             u[13], u[14], u[15]);

    if ((out = PyDict_New()) == NULL)
        goto error;
    if (kb_dict_set_steal(out, "ordinal", PyLong_FromLong(ordinal)) < 0 ||
        kb_dict_set_steal(out, "name", PyUnicode_FromString(I->name)) < 0 ||
        kb_dict_set_steal(out, "uuid", PyUnicode_FromString(uuid)) < 0 ||
        kb_dict_set_steal(out, "pci_bus_id", PyUnicode_FromString(I->pci_bus_id)) < 0 ||
        kb_dict_set_steal(out, "compute_capability", Py_BuildValue("(ii)", I->cc_major, I->cc_minor)) < 0 ||
        kb_dict_set_steal(out, "total_memory_bytes", PyLong_FromSize_t(I->total_bytes)) < 0 ||
        kb_dict_set_steal(out, "free_memory_bytes", PyLong_FromSize_t(I->free_bytes)) < 0 ||
        kb_dict_set_steal(out, "persisting_l2_limit_bytes",
                  I->have_persisting_l2_limit ? PyLong_FromSize_t(I->persisting_l2_limit)
                                              : none_ref()) < 0 ||
        kb_dict_set_steal(out, "driver_version", PyLong_FromLong(I->driver_version)) < 0)
        goto error;
    for (size_t i = 0; i < N_INFO_ATTRS; i++) {
        PyObject *v = !I->have_attr[i]                  ? none_ref()
                      : info_attrs[i].attr == CU_DEVICE_ATTRIBUTE_ECC_ENABLED
                          ? PyBool_FromLong(I->attr[i])
                          : PyLong_FromLong(I->attr[i]);
        if (kb_dict_set_steal(out, info_attrs[i].key, v) < 0)
            goto error;
    }
    if (add_nvml_clocks(m, ordinal, out) < 0)
        goto error;
    free(I);
    return out;

error:
    free(I);
    Py_XDECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ nvml_snapshot */

enum {
    Q_SM, Q_MEM, Q_MAX_SM, Q_MAX_MEM, Q_POWER, Q_LIMIT, Q_TEMP, Q_REASONS, Q_UTIL, Q_MEMINFO,
    Q_PROCS, Q_NAME, NQ
};

static const char *const query_expr[NQ] = {
    [Q_SM] = "nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &mhz)",
    [Q_MEM] = "nvmlDeviceGetClockInfo(dev, NVML_CLOCK_MEM, &mhz)",
    [Q_MAX_SM] = "nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_SM, &mhz)",
    [Q_MAX_MEM] = "nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_MEM, &mhz)",
    [Q_POWER] = "nvmlDeviceGetPowerUsage(dev, &milliwatts)",
    [Q_LIMIT] = "nvmlDeviceGetEnforcedPowerLimit(dev, &milliwatts)",
    [Q_TEMP] = "nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &celsius)",
    [Q_REASONS] = "nvmlDeviceGetCurrentClocksEventReasons(dev, &reasons)",
    [Q_UTIL] = "nvmlDeviceGetUtilizationRates(dev, &utilization)",
    [Q_MEMINFO] = "nvmlDeviceGetMemoryInfo(dev, &memory)",
    [Q_PROCS] = "nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos)",
    [Q_NAME] = "nvmlDeviceGetName(dev, name, sizeof name)",
};

typedef struct {
    nvmlReturn_t r[NQ];
    unsigned int sm, mem, max_sm, max_mem, power_mw, limit_mw, temp;
    unsigned long long reasons;
    nvmlUtilization_t util;
    nvmlMemory_t meminfo;
    char name[96];
    nvmlProcessInfo_t *procs;       /* malloc'd */
    unsigned int nprocs;
} snapshot;

static void gather_snapshot(const kb_nvml_api *nv, nvmlDevice_t dev, snapshot *s)
{
    s->r[Q_SM] = nv->nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &s->sm);
    s->r[Q_MEM] = nv->nvmlDeviceGetClockInfo(dev, NVML_CLOCK_MEM, &s->mem);
    s->r[Q_MAX_SM] = nv->nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_SM, &s->max_sm);
    s->r[Q_MAX_MEM] = nv->nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_MEM, &s->max_mem);
    s->r[Q_POWER] = nv->nvmlDeviceGetPowerUsage(dev, &s->power_mw);
    s->r[Q_LIMIT] = nv->nvmlDeviceGetEnforcedPowerLimit
                        ? nv->nvmlDeviceGetEnforcedPowerLimit(dev, &s->limit_mw)
                        : NVML_ERROR_FUNCTION_NOT_FOUND;
    s->r[Q_TEMP] = nv->nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &s->temp);
    s->r[Q_REASONS] = nv->nvmlDeviceGetCurrentClocksEventReasons(dev, &s->reasons);
    s->r[Q_UTIL] = nv->nvmlDeviceGetUtilizationRates(dev, &s->util);
    s->r[Q_MEMINFO] = nv->nvmlDeviceGetMemoryInfo(dev, &s->meminfo);
    s->r[Q_NAME] = nv->nvmlDeviceGetName(dev, s->name, sizeof s->name);

    s->r[Q_PROCS] = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (nv->nvmlDeviceGetComputeRunningProcesses_v3 == NULL)
        return;
    /* ask for the count, then fetch with headroom: processes come and go in between */
    unsigned int count = 0;
    nvmlReturn_t r = nv->nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL);
    for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; attempt++) {
        unsigned int cap = count + 8;
        nvmlProcessInfo_t *p = realloc(s->procs, cap * sizeof *p);
        if (p == NULL) {
            r = NVML_ERROR_MEMORY;
            break;
        }
        s->procs = p;
        count = cap;
        r = nv->nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, s->procs);
    }
    s->r[Q_PROCS] = r;
    s->nprocs = r == NVML_SUCCESS ? count : 0;
}

/* 1 when query q succeeded, 0 when its value is simply not available on this device or to this
 * user, -1 (NvmlError raised) for a real failure. */
static int query_ok(PyObject *m, const snapshot *s, int q)
{
    switch (s->r[q]) {
    case NVML_SUCCESS:
        return 1;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_NO_PERMISSION:
    case NVML_ERROR_NO_DATA:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return 0;
    default:
        return kb_nvml_check(m, s->r[q], query_expr[q], __FILE__, __LINE__);
    }
}

static PyObject *process_list(const snapshot *s)
{
    PyObject *list = PyList_New(0), *item = NULL;
    if (list == NULL)
        return NULL;
    for (unsigned int i = 0; i < s->nprocs; i++) {
        unsigned long long used = s->procs[i].usedGpuMemory;
        PyObject *used_obj = used == (unsigned long long)NVML_VALUE_NOT_AVAILABLE
                                 ? none_ref()
                                 : PyLong_FromUnsignedLongLong(used);
        if (used_obj == NULL)
            goto error;
        item = Py_BuildValue("{s:I,s:N}", "pid", s->procs[i].pid, "used_memory_bytes", used_obj);
        if (item == NULL || PyList_Append(list, item) < 0)
            goto error;
        Py_CLEAR(item);
    }
    return list;

error:
    Py_XDECREF(item);
    Py_DECREF(list);
    return NULL;
}

static PyObject *nvml_snapshot(PyObject *m, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"ordinal", NULL};
    int ordinal = 0;
    nvmlDevice_t dev;
    char pci[64];
    snapshot *s = NULL;
    PyObject *out = NULL;
    int ok[NQ];

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:nvml_snapshot", kwlist, &ordinal))
        return NULL;
    if (kb_nvml_device_of_cuda(m, ordinal, &dev, pci, sizeof pci) < 0)
        return NULL;
    if ((s = calloc(1, sizeof *s)) == NULL)
        return PyErr_NoMemory();
    const kb_nvml_api *nv = &kb_get_state(m)->gpu->nvml;
    Py_BEGIN_ALLOW_THREADS
    gather_snapshot(nv, dev, s);
    Py_END_ALLOW_THREADS
    if (s->r[Q_PROCS] == NVML_ERROR_MEMORY) {
        PyErr_NoMemory();
        goto error;
    }
    for (int q = 0; q < NQ; q++)
        if ((ok[q] = query_ok(m, s, q)) < 0)
            goto error;

#define UINT_OR_NONE(q, v) (ok[q] ? PyLong_FromUnsignedLong(v) : none_ref())
#define WATTS_OR_NONE(q, mw) (ok[q] ? PyFloat_FromDouble((mw) / 1000.0) : none_ref())
    if ((out = PyDict_New()) == NULL)
        goto error;
    if (kb_dict_set_steal(out, "ordinal", PyLong_FromLong(ordinal)) < 0 ||
        kb_dict_set_steal(out, "pci_bus_id", PyUnicode_FromString(pci)) < 0 ||
        kb_dict_set_steal(out, "name", ok[Q_NAME] ? PyUnicode_FromString(s->name) : none_ref()) < 0 ||
        kb_dict_set_steal(out, "sm_clock_mhz", UINT_OR_NONE(Q_SM, s->sm)) < 0 ||
        kb_dict_set_steal(out, "memory_clock_mhz", UINT_OR_NONE(Q_MEM, s->mem)) < 0 ||
        kb_dict_set_steal(out, "max_sm_clock_mhz", UINT_OR_NONE(Q_MAX_SM, s->max_sm)) < 0 ||
        kb_dict_set_steal(out, "max_memory_clock_mhz", UINT_OR_NONE(Q_MAX_MEM, s->max_mem)) < 0 ||
        kb_dict_set_steal(out, "power_w", WATTS_OR_NONE(Q_POWER, s->power_mw)) < 0 ||
        kb_dict_set_steal(out, "power_limit_w", WATTS_OR_NONE(Q_LIMIT, s->limit_mw)) < 0 ||
        kb_dict_set_steal(out, "temperature_c", UINT_OR_NONE(Q_TEMP, s->temp)) < 0 ||
        kb_dict_set_steal(out, "clock_event_reasons",
                  ok[Q_REASONS] ? PyLong_FromUnsignedLongLong(s->reasons) : none_ref()) < 0 ||
        kb_dict_set_steal(out, "clock_event_reason_names",
                  ok[Q_REASONS] ? kb_clock_event_reason_names(s->reasons) : none_ref()) < 0 ||
        kb_dict_set_steal(out, "gpu_utilization_pct", UINT_OR_NONE(Q_UTIL, s->util.gpu)) < 0 ||
        kb_dict_set_steal(out, "memory_utilization_pct", UINT_OR_NONE(Q_UTIL, s->util.memory)) < 0 ||
        kb_dict_set_steal(out, "memory_used_bytes",
                  ok[Q_MEMINFO] ? PyLong_FromUnsignedLongLong(s->meminfo.used) : none_ref()) < 0 ||
        kb_dict_set_steal(out, "memory_total_bytes",
                  ok[Q_MEMINFO] ? PyLong_FromUnsignedLongLong(s->meminfo.total) : none_ref()) < 0 ||
        kb_dict_set_steal(out, "compute_process_count",
                  ok[Q_PROCS] ? PyLong_FromUnsignedLong(s->nprocs) : none_ref()) < 0 ||
        kb_dict_set_steal(out, "compute_processes", ok[Q_PROCS] ? process_list(s) : none_ref()) < 0)
        goto error;
#undef UINT_OR_NONE
#undef WATTS_OR_NONE
    free(s->procs);
    free(s);
    return out;

error:
    if (s != NULL)
        free(s->procs);
    free(s);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *nvml_clock_event_reason_names(PyObject *m, PyObject *arg)
{
    unsigned long long mask = PyLong_AsUnsignedLongLong(arg);
    if (mask == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return kb_clock_event_reason_names(mask);
}

/* For tests: run the named library's check on `code` as if `call` had returned it. The library
 * need not be loaded (then the fallback names apply). Returns None when code is success. */
static PyObject *_raise_check_error(PyObject *m, PyObject *args)
{
    const char *lib, *call;
    int code, rc;
    if (!PyArg_ParseTuple(args, "sis:_raise_check_error", &lib, &code, &call))
        return NULL;
    if (strcmp(lib, "cuda") == 0)
        rc = kb_cu_check(m, (CUresult)code, call, __FILE__, __LINE__);
    else if (strcmp(lib, "cupti") == 0)
        rc = kb_cupti_check(m, (CUptiResult)code, call, __FILE__, __LINE__);
    else if (strcmp(lib, "nvml") == 0)
        rc = kb_nvml_check(m, (nvmlReturn_t)code, call, __FILE__, __LINE__);
    else if (strcmp(lib, "nvrtc") == 0)
        rc = kb_nvrtc_check(m, (nvrtcResult)code, call, __FILE__, __LINE__);
    else {
        PyErr_Format(PyExc_ValueError, "unknown library %R: expected cuda, cupti, nvml or nvrtc",
                     PyTuple_GET_ITEM(args, 0));
        return NULL;
    }
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef device_methods[] = {
    {"gpu_library_status", gpu_library_status, METH_NOARGS,
     "gpu_library_status() -> dict\n\n"
     "Try to open each GPU library (cuda, cupti, nvml, nvrtc) and report, per library: loaded "
     "(bool), path (str|None), error (str|None: why it failed, with every path tried), version "
     "(cuda: driver CUDA version int, cupti: API version int, nvml: driver version str, nvrtc: "
     "'major.minor'), from_process (bool: the copy already in the process was used). Never raises "
     "for a missing library."},
    {"prefer_cupti", prefer_cupti, METH_O,
     "prefer_cupti($module, path, /)\n--\n\n"
     "prefer_cupti(path: str | None) -> bool\n\n"
     "The libcupti file to open when CUPTI is first needed, after a copy already mapped in the "
     "process and $KBENCH_CUPTI_PATH, before the default search (which still runs if it cannot "
     "be opened); None drops the preference. True when stored; False once CUPTI was opened or "
     "failed: the process's CUPTI is chosen once, and nothing changes."},
    {"cuda_device_count", cuda_device_count, METH_NOARGS,
     "cuda_device_count() -> int\n\n"
     "Number of CUDA devices visible (CUDA_VISIBLE_DEVICES applies); 0 when the driver finds "
     "none. Raises LibraryNotFound when libcuda.so.1 cannot be opened."},
    {"cuda_device_info", (PyCFunction)(void (*)(void))cuda_device_info,
     METH_VARARGS | METH_KEYWORDS,
     "cuda_device_info(ordinal=0) -> dict\n\n"
     "Name, uuid, pci_bus_id, compute_capability, sm_count, l2_bytes, max_persisting_l2_bytes, "
     "persisting_l2_limit_bytes (set on the primary context), total/free memory, driver "
     "version, memory bus width, clock rates, and NVML clocks (nvml_*; None with nvml_error "
     "when NVML is unavailable). Retains the primary context for the memory and L2 queries."},
    {"nvml_snapshot", (PyCFunction)(void (*)(void))nvml_snapshot, METH_VARARGS | METH_KEYWORDS,
     "nvml_snapshot(ordinal=0) -> dict\n\n"
     "NVML's current view of CUDA device `ordinal`: SM/memory clocks and their maxima (MHz), "
     "power and power limit (W), temperature (C), clock event reasons (bitmask and names), "
     "utilization (%), memory used/total (bytes), and the compute processes on the device. "
     "Values the device does not report are None."},
    {"nvml_clock_event_reason_names", nvml_clock_event_reason_names, METH_O,
     "nvml_clock_event_reason_names($module, mask, /)\n--\n\n"
     "nvml_clock_event_reason_names(mask) -> list[str]\n\n"
     "Decode an NVML clock event reasons bitmask (e.g. the sampler's reasons array)."},
    {"_raise_check_error", _raise_check_error, METH_VARARGS,
     "_raise_check_error(lib, code, call) -> None\n\n"
     "For tests: raise what kbench raises when `call` returns `code` in library `lib` "
     "('cuda', 'cupti', 'nvml', 'nvrtc'); None for the success code."},
    {NULL, NULL, 0, NULL},
};

int kb_gpu_module_init(PyObject *m) { return PyModule_AddFunctions(m, device_methods); }
