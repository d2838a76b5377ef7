/* gate.c -- the device-side gate: the CUDA half of kb_watchdog.h.
 *
 * close: cuStreamWaitValue32(stream, flag >= generation) is queued first, so everything the
 * host queues after it waits on the device. open: the host stores `generation` into the
 * pinned, device-mapped flag and the stream runs the whole batch back to back.
 *
 * The launch queue is finite: on an H200, 2,000 gated launches filled it and the host blocked
 * inside a launch forever, behind its own gate. The loop bounds the batch, and the watchdog
 * thread (csrc/core/watchdog.c, shared with the HIP gate) opens the gate after timeout_s so such
 * a batch ends; the batch is then reported, since launch gaps may have been timed.
 */
#include "cuda_backend.h"

#include <string.h>

int kb_gate_init(PyObject *m, const kb_cuda_api *cu, kb_gate *g, double timeout_s)
{
    void *host = NULL;
    memset(g, 0, sizeof *g);
    g->timeout_s = timeout_s;
    if (KB_CU(m, cu->cuMemHostAlloc(&host, sizeof(uint32_t),
                                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) < 0)
        return -1;
    g->host_flag = host;
    *g->host_flag = 0;
    if (KB_CU(m, cu->cuMemHostGetDevicePointer(&g->dev_flag, host, 0)) < 0)
        goto error;
    int rc = kb_watchdog_start(&g->watchdog, g->host_flag, timeout_s);
    if (rc != 0) {
        PyErr_Format(kb_get_state(m)->KbenchError, "cannot start the gate watchdog thread: %s",
                     strerror(rc));
        goto error;
    }
    return 0;

error:
    Py_BEGIN_ALLOW_THREADS
    cu->cuMemFreeHost(host);        /* synchronizes the device, as a wait: without the GIL */
    Py_END_ALLOW_THREADS
    g->host_flag = NULL;
    return -1;
}

int kb_gate_close(PyObject *m, const kb_cuda_api *cu, kb_gate *g, CUstream s)
{
    uint32_t next = g->generation + 1;
    if (KB_CU(m, cu->cuStreamWaitValue32(s, g->dev_flag, next, CU_STREAM_WAIT_VALUE_GEQ)) < 0)
        return -1;
    g->generation = next;
    kb_watchdog_arm(&g->watchdog, next);
    return 0;
}

int kb_gate_open(kb_gate *g) { return kb_watchdog_open(&g->watchdog); }

void kb_gate_fini(const kb_cuda_api *cu, kb_gate *g)
{
    kb_watchdog_stop(&g->watchdog);     /* opens the gate for good: no stream left waiting */
    if (g->host_flag) {
        cu->cuMemFreeHost((void *)g->host_flag);
        g->host_flag = NULL;
    }
}
