/* hip_gate.c -- the HIP half of the device gate (hip_backend.h); the watchdog thread is the
 * shared one of csrc/core/watchdog.c. */
#include "hip_backend.h"

#include <stdio.h>
#include <string.h>

static void disable(kb_hip_gate *g, const char *why)
{
    g->enabled = 0;
    snprintf(g->why_not, sizeof g->why_not, "%s", why);
}

/* One closed-and-opened gate on the idle stream: a runtime that refuses the wait on mapped host
 * memory says so here, not in the middle of a measurement. */
static int probe(PyObject *m, const kb_hip_api *hip, kb_hip_gate *g, kb_hipStream_t s)
{
    kb_hipError_t r = hip->hipStreamWaitValue32(s, g->dev_flag, 0, KB_hipStreamWaitValueGte,
                                                0xFFFFFFFFu);
    if (r != KB_hipSuccess) {
        char why[160];
        const char *name = hip->hipGetErrorName(r);
        snprintf(why, sizeof why, "hipStreamWaitValue32 on mapped host memory failed (%s): "
                 "timed ungated", name ? name : "?");
        disable(g, why);
        return 0;
    }
    /* behind everything already queued on the caller's stream: other threads run meanwhile */
    Py_BEGIN_ALLOW_THREADS
    r = hip->hipStreamSynchronize(s);
    Py_END_ALLOW_THREADS
    return kb_hip_check(m, r, "hip->hipStreamSynchronize(s)", __FILE__, __LINE__);
}

/* hipHostFree synchronizes the device, as a wait: without the GIL. */
static void free_flag(const kb_hip_api *hip, void *host)
{
    Py_BEGIN_ALLOW_THREADS
    hip->hipHostFree(host);
    Py_END_ALLOW_THREADS
}

int kb_hip_gate_init(PyObject *m, const kb_hip_api *hip, kb_hip_gate *g, kb_hipStream_t s,
                     int dev, double timeout_s)
{
    void *host = NULL;
    int can = -1;
    memset(g, 0, sizeof *g);
    if (hip->hipStreamWaitValue32 == NULL || hip->hipHostMalloc == NULL ||
        hip->hipHostGetDevicePointer == NULL || hip->hipHostFree == NULL) {
        disable(g, "this HIP runtime has no hipStreamWaitValue32: timed ungated (host launch "
                   "gaps between batches' first iterations may be timed)");
        return 0;
    }
    if (hip->hipDeviceGetAttribute(&can, KB_hipDeviceAttributeCanUseStreamWaitValue, dev) ==
            KB_hipSuccess && can == 0) {
        disable(g, "the device reports hipDeviceAttributeCanUseStreamWaitValue = 0: timed "
                   "ungated");
        return 0;
    }
    if (KB_HIP(m, hip->hipHostMalloc(&host, sizeof(uint32_t),
                                     KB_hipHostMallocMapped | KB_hipHostMallocPortable)) < 0)
        return -1;
    g->host_flag = host;
    *g->host_flag = 0;
    if (KB_HIP(m, hip->hipHostGetDevicePointer(&g->dev_flag, host, 0)) < 0)
        goto error;
    g->enabled = 1;
    if (probe(m, hip, g, s) < 0)
        goto error;
    if (!g->enabled) {
        free_flag(hip, host);
        g->host_flag = NULL;
        return 0;
    }
    int rc = kb_watchdog_start(&g->wd, g->host_flag, timeout_s);
    if (rc != 0) {
        PyErr_Format(kb_get_state(m)->KbenchError, "cannot start the gate watchdog thread: %s",
                     strerror(rc));
        goto error;
    }
    return 0;

error:
    free_flag(hip, host);
    g->host_flag = NULL;
    g->enabled = 0;
    return -1;
}

void kb_hip_gate_close(const kb_hip_api *hip, kb_hip_gate *g, kb_hipStream_t s, kb_deferred *d)
{
    uint32_t next = g->wd.generation + 1;
    if (KB_DEFER(d, hip->hipStreamWaitValue32(s, g->dev_flag, next, KB_hipStreamWaitValueGte,
                                              0xFFFFFFFFu)) == 0)
        kb_watchdog_arm(&g->wd, next);
}

int kb_hip_gate_open(kb_hip_gate *g)
{
    return kb_watchdog_open(&g->wd);
}

void kb_hip_gate_give_up(kb_hip_gate *g, const char *why)
{
    disable(g, why);
}

void kb_hip_gate_fini(const kb_hip_api *hip, kb_hip_gate *g)
{
    kb_watchdog_stop(&g->wd);
    if (g->host_flag != NULL) {
        hip->hipHostFree((void *)g->host_flag);
        g->host_flag = NULL;
    }
    g->enabled = 0;
}
