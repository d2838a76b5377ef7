/* loader_rocm_smi.c -- librocm_smi64, ROCm's management library (clocks, power, temperature), as
 * NVML is on NVIDIA. Opened lazily; absent is fine: the HIP backend then reports no clocks and
 * says why. */
#define _GNU_SOURCE
#include "loader_impl.h"
#include "hip_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const rsmi_names[] = {
    "librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5",
};

static int rsmi_resolve(kb_hip_libs *g, void *h, const char *path, kb_strbuf *msg)
{
    kb_rsmi_api *api = &g->rsmi;
    kb_strbuf missing = {0};
#define KB_RSMI_DLSYM_REQ_(name, ret, params)                                                  \
    if ((api->name = (kb_##name##_fn)dlsym(h, #name)) == NULL)                                 \
        kb_sb_printf(&missing, "%s%s", missing.len ? ", " : "", #name);
#define KB_RSMI_DLSYM_OPT_(name, ret, params) api->name = (kb_##name##_fn)dlsym(h, #name);
    KB_RSMI_REQUIRED(KB_RSMI_DLSYM_REQ_)
    KB_RSMI_OPTIONAL(KB_RSMI_DLSYM_OPT_)
#undef KB_RSMI_DLSYM_REQ_
#undef KB_RSMI_DLSYM_OPT_
    if (missing.len > 0 || missing.oom) {
        kb_sb_printf(msg, "%s lacks ROCm SMI functions kbench needs: %s.", path,
                     missing.s ? missing.s : "(out of memory listing them)");
        kb_sb_free(&missing);
        return -1;
    }
    kb_sb_free(&missing);
    return 0;
}

static void rsmi_open(kb_hip_libs *g)
{
    kb_strbuf tried = {0}, msg = {0};
    void *h = NULL;
    for (size_t i = 0; h == NULL && i < sizeof rsmi_names / sizeof rsmi_names[0]; i++)
        h = kb_try_dlopen(rsmi_names[i], KB_DLOPEN_FLAGS, &tried);
    if (h == NULL) {
        const char *dirs[] = {"/opt/rocm/lib", "/opt/rocm/lib64", KB_MULTIARCH_LIBDIR};
        h = kb_try_dirs(dirs, 3, "librocm_smi64.so", KB_DLOPEN_FLAGS, &tried);
    }
    if (h == NULL) {
        kb_sb_printf(&msg, "librocm_smi64.so (ROCm SMI: AMD GPU clocks, power, temperature) could "
                     "not be opened. Tried:\n%sInstall ROCm's rocm-smi-lib, or put the directory "
                     "holding librocm_smi64.so on LD_LIBRARY_PATH.",
                     tried.s ? tried.s : "  (out of memory recording the attempts)\n");
        kb_sb_free(&tried);
        kb_lib_failed(&g->rsmi_lib, &msg);
        return;
    }
    kb_sb_free(&tried);
    const char *path = kb_handle_path(h);
    if (rsmi_resolve(g, h, path ? path : "librocm_smi64.so", &msg) < 0) {
        memset(&g->rsmi, 0, sizeof g->rsmi);
        kb_lib_failed(&g->rsmi_lib, &msg);
        dlclose(h);
        return;
    }
    kb_lib_loaded(&g->rsmi_lib, h, "librocm_smi64.so");
}

const kb_rsmi_api *kb_rsmi(PyObject *m)
{
    kb_hip_libs *g = kb_hip_libs_get(m);
    if (g == NULL)
        return NULL;
    if (g->rsmi_initialized)
        return &g->rsmi;
    if (g->rsmi_lib.state == KB_LIB_UNTRIED)
        rsmi_open(g);
    if (g->rsmi_lib.state != KB_LIB_LOADED)
        return kb_lib_raise(m, &g->rsmi_lib);
    kb_rsmi_status_t r;
    Py_BEGIN_ALLOW_THREADS
    r = g->rsmi.rsmi_init(0);
    Py_END_ALLOW_THREADS
    if (kb_rsmi_check(m, r, "rsmi_init(0)", __FILE__, __LINE__) < 0)
        return NULL;
    if (g->rsmi_initialized) {
        /* another thread's init ended first while this one ran without the GIL: ROCm SMI
         * counts its inits, and module free shuts down once, so give this one back */
        if (g->rsmi.rsmi_shut_down != NULL)
            g->rsmi.rsmi_shut_down();
        return &g->rsmi;
    }
    g->rsmi_initialized = 1;
    return &g->rsmi;
}

int kb_rsmi_check(PyObject *m, kb_rsmi_status_t r, const char *expr, const char *file, int line)
{
    if (r == 0)
        return 0;
    kb_state *st = kb_get_state(m);
    const kb_hip_libs *g = st->hip;
    const char *desc = NULL;
    char name[48];
    snprintf(name, sizeof name, "RSMI status %u", r);
    if (g != NULL && g->rsmi.rsmi_status_string != NULL &&
        g->rsmi.rsmi_status_string(r, &desc) != 0)
        desc = NULL;
    return kb_raise_call_error(st->RocmSmiError, expr, (long)r, name, desc, file, line);
}

/* rsmi_frequencies_t, either layout: {u32 num, u32 current, u64 freq[32]} (ROCm 5) or
 * {bool has_deep_sleep, u32 num, u32 current, u64 freq[32]} (ROCm 6). The current clock in
 * MHz from whichever reads consistently (current < num <= 32, a frequency 1 MHz..10 GHz), or -1. */
static double current_mhz(const unsigned char *buf)
{
    static const size_t layouts[2][3] = {{0, 4, 8}, {4, 8, 16}};
    for (int l = 1; l >= 0; l--) {
        uint32_t num, cur;
        uint64_t f;
        memcpy(&num, buf + layouts[l][0], 4);
        memcpy(&cur, buf + layouts[l][1], 4);
        if (num == 0 || num > 32 || cur >= num)
            continue;
        memcpy(&f, buf + layouts[l][2] + 8 * cur, 8);
        if (f >= 1000000ull && f <= 10000000000ull)
            return (double)f / 1e6;
    }
    return -1.0;
}

static PyObject *or_none(double v, int ok)
{
    return ok ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

/* One device's readings; each *_ok says whether its read succeeded (a failed read is unknown,
 * never a number: -1 C was once reported for an unreadable temperature). */
typedef struct {
    double sclk, mclk, power, temp;
    int sclk_ok, mclk_ok, power_ok, temp_ok, pci_ok;
    uint64_t bdfid;
} rsmi_reading;

static void read_device(const kb_rsmi_api *r, uint32_t index, rsmi_reading *x)
{
    unsigned char buf[KB_RSMI_FREQ_BUF_BYTES];
    memset(x, 0, sizeof *x);
    memset(buf, 0, sizeof buf);
    if (r->rsmi_dev_gpu_clk_freq_get(index, KB_RSMI_CLK_TYPE_SYS, buf) == 0)
        x->sclk_ok = (x->sclk = current_mhz(buf)) > 0;
    memset(buf, 0, sizeof buf);
    if (r->rsmi_dev_gpu_clk_freq_get(index, KB_RSMI_CLK_TYPE_MEM, buf) == 0)
        x->mclk_ok = (x->mclk = current_mhz(buf)) > 0;
    uint64_t uw = 0;
    if ((r->rsmi_dev_current_socket_power_get != NULL &&
         r->rsmi_dev_current_socket_power_get(index, &uw) == 0) ||
        (r->rsmi_dev_power_ave_get != NULL && r->rsmi_dev_power_ave_get(index, 0, &uw) == 0)) {
        x->power = (double)uw * 1e-6;
        x->power_ok = 1;
    }
    int64_t mc = 0;
    if (r->rsmi_dev_temp_metric_get(index, KB_RSMI_TEMP_TYPE_JUNCTION, KB_RSMI_TEMP_CURRENT,
                                    &mc) == 0 ||
        r->rsmi_dev_temp_metric_get(index, KB_RSMI_TEMP_TYPE_EDGE, KB_RSMI_TEMP_CURRENT,
                                    &mc) == 0) {
        x->temp = (double)mc * 1e-3;
        x->temp_ok = 1;
    }
    x->pci_ok = r->rsmi_dev_pci_id_get != NULL && r->rsmi_dev_pci_id_get(index, &x->bdfid) == 0;
}

/* rsmi_dev_pci_id_get's BDFID as "domain:bus:device.function" (bits 63..32, 15..8, 7..3, 2..0;
 * ROCm 6 puts a partition id in 31..28, left out: HIP's bus id has none), or None. */
static PyObject *pci_bus_id(const rsmi_reading *x)
{
    if (!x->pci_ok)
        return Py_NewRef(Py_None);
    uint64_t b = x->bdfid;
    char id[32];
    snprintf(id, sizeof id, "%04x:%02x:%02x.%x", (unsigned)(b >> 32), (unsigned)((b >> 8) & 0xff),
             (unsigned)((b >> 3) & 0x1f), (unsigned)(b & 0x7));
    return PyUnicode_FromString(id);
}

PyObject *kb_rsmi_snapshot(PyObject *m, uint32_t index)
{
    const kb_rsmi_api *r = kb_rsmi(m);
    if (r == NULL)
        return NULL;
    uint32_t n = 0;
    if (KB_RSMI(m, r->rsmi_num_monitor_devices(&n)) < 0)
        return NULL;
    if (index >= n)
        return PyErr_Format(PyExc_ValueError, "ROCm SMI sees %u device(s); there is no device %u",
                            n, index);
    rsmi_reading x;
    read_device(r, index, &x);
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (kb_dict_set_steal(d, "sclk_mhz", or_none(x.sclk, x.sclk_ok)) < 0 ||
        kb_dict_set_steal(d, "mclk_mhz", or_none(x.mclk, x.mclk_ok)) < 0 ||
        kb_dict_set_steal(d, "power_w", or_none(x.power, x.power_ok)) < 0 ||
        kb_dict_set_steal(d, "temp_c", or_none(x.temp, x.temp_ok)) < 0 ||
        kb_dict_set_steal(d, "pci_bus_id", pci_bus_id(&x)) < 0 ||
        kb_dict_set_steal(d, "index", PyLong_FromUnsignedLong(index)) < 0 ||
        kb_dict_set_steal(d, "devices", PyLong_FromUnsignedLong(n)) < 0 ||
        kb_dict_set_steal(d, "t_s", PyFloat_FromDouble(kb_now_s())) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *lib_status(const kb_lib *lib, int from_process, const char *requested)
{
    const char *state = lib->state == KB_LIB_LOADED   ? "loaded"
                        : lib->state == KB_LIB_FAILED ? "failed"
                                                      : "not tried";
    return Py_BuildValue("{s:s,s:z,s:z,s:O,s:z}", "state", state, "path", lib->path, "error",
                         lib->error, "from_process", from_process ? Py_True : Py_False,
                         "requested_by", requested && requested[0] ? requested : NULL);
}

PyObject *kb_hip_library_status(PyObject *m)
{
    kb_hip_libs *g = kb_hip_libs_get(m);
    if (g == NULL)
        return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    PyObject *hip = lib_status(&g->hip_lib, g->hip_lib.from_process, g->hip_requested);
    if (hip != NULL && g->hip_initialized &&
        kb_dict_set_steal(hip, "runtime_version", PyLong_FromLong(g->runtime_version)) < 0)
        Py_CLEAR(hip);
    if (kb_dict_set_steal(d, "hip", hip) < 0 ||
        kb_dict_set_steal(d, "rocm_smi", lib_status(&g->rsmi_lib, 0, NULL)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}
