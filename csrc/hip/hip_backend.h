/* hip_backend.h -- what the files of the HIP backend share (hip_gate.c, measure_hip.c). */
#ifndef KBENCH_HIP_BACKEND_H
#define KBENCH_HIP_BACKEND_H

#include "hip_api.h"
#include "kb_watchdog.h"

/* The device gate: hipStreamWaitValue32(stream, flag >= generation) is queued before a batch, so
 * the host's launch gaps are not timed; the host (or the watchdog, after timeout_s) stores the
 * generation to release the batch. */
typedef struct {
    int enabled;                /* 1: batches are gated; 0: ungated (why_not says why) */
    char why_not[160];
    volatile uint32_t *host_flag;   /* hipHostMalloc'd, mapped */
    void *dev_flag;
    kb_watchdog wd;
} kb_hip_gate;

/* Set the gate up on stream s of device `dev`, or leave it disabled with the reason (a runtime
 * without hipStreamWaitValue32, a device that says it cannot wait on a value, a wait that the
 * runtime refuses). -1 only with an exception (a failed call other than the gate's own probe). */
int kb_hip_gate_init(PyObject *m, const kb_hip_api *hip, kb_hip_gate *g, kb_hipStream_t s,
                     int dev, double timeout_s);
/* Queue the wait (GIL released: no Python); a failure is recorded in *d under the HIP call's
 * own name (hipStreamWaitValue32), and leaves the watchdog unarmed. */
void kb_hip_gate_close(const kb_hip_api *hip, kb_hip_gate *g, kb_hipStream_t s, kb_deferred *d);
/* Release the batch; 1 when the watchdog had released it already (launch gaps were timed). */
int kb_hip_gate_open(kb_hip_gate *g);
/* Time the rest ungated (the gate open: after kb_hip_gate_open), why_not saying why. */
void kb_hip_gate_give_up(kb_hip_gate *g, const char *why);
void kb_hip_gate_fini(const kb_hip_api *hip, kb_hip_gate *g);

/* measure_hip's options (hip_options.c), checked as measure_cuda's are. */
typedef struct {
    unsigned long long stream;  /* a hipStream_t handle */
    int device;
    Py_ssize_t flush_bytes, gate_batch;
    double gate_timeout_s, unroll;
    int gate;
    PyObject *pre_sample;       /* a new reference, or NULL: called before every replay */
} kb_hip_options;
/* Pop measure_hip's options from opts (a copy of its keywords); -1 with an exception naming
 * the option. kb_hip_options_fini releases pre_sample. */
int kb_hip_options_parse(PyObject *opts, kb_hip_options *o);
void kb_hip_options_fini(kb_hip_options *o);

#endif /* KBENCH_HIP_BACKEND_H */
