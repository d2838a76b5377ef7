/* measure_hip.c -- the HIP backend: HIP events around HIP graph replays, driven by the shared
 * loop (measure.c: warm-up, batches, stop rules).
 *
 * Each iteration replays the next graph of the rotation (the cursor cycles through them, so a
 * rotation of k pointer-distinct argument sets captured into k graphs touches a different set
 * every replay) between two events; cold="flush" memsets a buffer larger than the last-level
 * cache before the start event, outside the timed interval. A batch is queued behind the device
 * gate (hip_gate.c) and released at once, so the host's launch gaps are not timed. An optional
 * pre_sample callable (kbench.distributed's barrier) runs before each replay, warm-up included,
 * while the batch is queued behind the gate, before the flush and outside the timed interval,
 * as measure_cuda's does. HIP has no CUPTI: there is no per-kernel attribution, only the
 * replay's event time (divided by `unroll`, the calls captured per graph).
 */
#include "hip_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject *m;
    const kb_hip_api *hip;
    kb_hipStream_t s;
    kb_hipGraphExec_t *execs;
    Py_ssize_t n_graphs, next;      /* the rotation cursor */
    double unroll;                  /* callable calls per replay */
    kb_cold_mode cold;
    void *flush_buf;
    size_t flush_bytes;
    unsigned char flush_seed;
    kb_hipEvent_t *ev;              /* 2 per iteration of a chunk */
    Py_ssize_t chunk, chunk0;       /* iterations per gated chunk (halved when the watchdog fires) */
    kb_hip_gate gate;
    PyObject *pre_sample;           /* borrowed from the options, or NULL */
    double gate_timeout_s;
    long fired, fired_kept, chunks, replays;
} hip_ctx;

/* Queue replays from..to-1 of a chunk: [flush] start replay end (GIL released). */
static void queue_replays(hip_ctx *c, Py_ssize_t from, Py_ssize_t to, kb_deferred *d)
{
    const kb_hip_api *hip = c->hip;
    for (Py_ssize_t j = from; j < to; j++) {
        if (c->cold == KB_COLD_FLUSH)
            KB_DEFER(d, hip->hipMemsetAsync(c->flush_buf, c->flush_seed++, c->flush_bytes, c->s));
        KB_DEFER(d, hip->hipEventRecord(c->ev[2 * j], c->s));
        KB_DEFER(d, hip->hipGraphLaunch(c->execs[c->next], c->s));
        KB_DEFER(d, hip->hipEventRecord(c->ev[2 * j + 1], c->s));
        if (++c->next == c->n_graphs)
            c->next = 0;
    }
}

/* Open the gate, wait for the chunk's last event and read its k samples (GIL released).
 * *fired: the watchdog had opened the gate. */
static void finish_chunk(hip_ctx *c, Py_ssize_t k, double *out, int *fired, kb_deferred *d)
{
    const kb_hip_api *hip = c->hip;
    *fired = c->gate.enabled ? kb_hip_gate_open(&c->gate) : 0;   /* always: never leave it shut */
    KB_DEFER(d, hip->hipEventSynchronize(c->ev[2 * k - 1]));
    for (Py_ssize_t j = 0; j < k; j++) {
        float ms = 0.0f;
        KB_DEFER(d, hip->hipEventElapsedTime(&ms, c->ev[2 * j], c->ev[2 * j + 1]));
        out[j] = (double)ms * 1e-3 / c->unroll;
    }
}

/* The caller's pre_sample before a replay; on an exception the gate is opened and the stream
 * drained (nothing queued may wait on a gate nobody opens), and a note says so. */
static int call_pre_sample(hip_ctx *c, int warmup)
{
    PyObject *r = PyObject_CallNoArgs(c->pre_sample);
    if (r != NULL) {
        Py_DECREF(r);
        return 0;
    }
    if (c->gate.enabled)
        kb_hip_gate_open(&c->gate);
    Py_BEGIN_ALLOW_THREADS
    (void)c->hip->hipStreamSynchronize(c->s);   /* the exception is the error reported */
    Py_END_ALLOW_THREADS
    kb_add_exception_note("raised by pre_sample before %s replay %ld (kbench HIP backend); the "
                          "gate was opened and the stream drained",
                          warmup ? "a warm-up" : "a timed", c->replays + 1);
    return -1;
}

/* Queue and time k iterations behind the gate. The GIL is released around the HIP calls and
 * held only for pre_sample (called before each replay: then the queueing goes one replay at a
 * time). -1 with an exception from pre_sample; HIP failures go to *d. */
static int run_chunk(hip_ctx *c, Py_ssize_t k, double *out, int *fired, int warmup,
                     kb_deferred *d)
{
    Py_ssize_t first = c->next, step = c->pre_sample != NULL ? 1 : k;
    *fired = 0;
    if (c->gate.enabled) {
        Py_BEGIN_ALLOW_THREADS
        kb_hip_gate_close(c->hip, &c->gate, c->s, d);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t j = 0; j < k && d->code == 0; j += step) {
        if (c->pre_sample != NULL && call_pre_sample(c, warmup) < 0)
            return -1;
        Py_BEGIN_ALLOW_THREADS
        queue_replays(c, j, j + step, d);
        Py_END_ALLOW_THREADS
        c->replays += step;
    }
    Py_BEGIN_ALLOW_THREADS
    finish_chunk(c, k, out, fired, d);
    Py_END_ALLOW_THREADS
    if (*fired && k > 1)
        c->next = first;            /* re-measured: the same graphs again */
    c->chunks++;
    return 0;
}

/* A single replay's chunk fired this often: the runtime blocks in the launch itself. */
#define KB_HIP_FIRED_KEPT_MAX 3

/* The watchdog opened the gate of a chunk of k replays: 1 to re-measure it smaller, 0 to keep
 * it, -1 with pre_sample (multi-rank timing), which this rank cannot run again alone. */
static int on_watchdog(hip_ctx *c, Py_ssize_t k)
{
    c->fired++;
    if (c->pre_sample != NULL) {
        /* every rank must call pre_sample the same number of times: one more round here
         * leaves the others' collectives unmatched, as in measure_cuda */
        char timeout[32];           /* PyErr_Format has no %f */
        snprintf(timeout, sizeof timeout, "%.2f", c->gate_timeout_s);
        PyErr_Format(kb_get_state(c->m)->KbenchError,
                     "the gate's watchdog (gate_timeout_s=%s) opened a chunk of %zd replays "
                     "before the host had queued it; with pre_sample (multi-rank timing) "
                     "kbench cannot run it again on this rank alone, since every rank must call "
                     "pre_sample the same number of times. Give a larger gate_timeout_s or a "
                     "smaller gate_batch (the same on every rank)", timeout, k);
        return -1;
    }
    if (k > 1) {                    /* launch gaps may be in these samples: smaller, again */
        c->chunk = k / 2 > 0 ? k / 2 : 1;
        return 1;
    }
    /* A one-replay sample holds no launch gap: kept. But each such chunk waited the whole
     * timeout; a runtime that blocks in hipGraphLaunch behind the gate does so every time */
    if (++c->fired_kept >= KB_HIP_FIRED_KEPT_MAX)
        kb_hip_gate_give_up(&c->gate, "the watchdog opened single-replay chunks 3 times (the "
                                      "runtime blocks in the launch behind the gate): the rest "
                                      "was timed ungated");
    return 0;
}

static int hip_run_batch(kb_backend *b, Py_ssize_t n, double *out, int warmup)
{
    hip_ctx *c = b->ctx;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t k = n - i < c->chunk ? n - i : c->chunk;
        kb_deferred d = KB_DEFERRED_INIT;
        int fired = 0;
        if (run_chunk(c, k, out + i, &fired, warmup, &d) < 0)
            return -1;
        if (KB_HIP_RAISE(c->m, &d) < 0)
            return -1;
        if (PyErr_CheckSignals() < 0)
            return -1;
        int again = fired ? on_watchdog(c, k) : 0;
        if (again < 0)
            return -1;
        if (again)
            continue;
        i += k;
    }
    return 0;
}

static int ctx_init(hip_ctx *c, PyObject *graphs, int device, double gate_timeout, int use_gate)
{
    const kb_hip_api *hip = c->hip;
    c->n_graphs = PyTuple_GET_SIZE(graphs);
    c->execs = calloc((size_t)c->n_graphs, sizeof *c->execs);
    c->ev = calloc((size_t)(2 * c->chunk), sizeof *c->ev);
    if (c->execs == NULL || c->ev == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < c->n_graphs; i++) {
        int gdev = 0;
        if (kb_hip_graph_unpack(c->m, PyTuple_GET_ITEM(graphs, i), &c->execs[i], &gdev) < 0)
            return -1;
        if (gdev != device) {
            PyErr_Format(PyExc_ValueError, "graphs[%zd] was captured on HIP device %d, not on "
                         "device %d", i, gdev, device);
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < 2 * c->chunk; i++)
        if (KB_HIP(c->m, hip->hipEventCreate(&c->ev[i])) < 0)
            return -1;
    if (c->cold == KB_COLD_FLUSH) {
        if (c->flush_bytes == 0) {
            PyErr_SetString(PyExc_ValueError, "cold='flush' needs flush_bytes > 0 "
                            "(kbench.backends.hip passes twice the last-level cache)");
            return -1;
        }
        if (KB_HIP(c->m, hip->hipMalloc(&c->flush_buf, c->flush_bytes)) < 0)
            return -1;
    }
    if (use_gate)
        return kb_hip_gate_init(c->m, hip, &c->gate, c->s, device, gate_timeout);
    snprintf(c->gate.why_not, sizeof c->gate.why_not, "gate=False");
    return 0;
}

static void ctx_fini(hip_ctx *c)
{
    const kb_hip_api *hip = c->hip;
    if (hip == NULL)
        return;
    if (c->ev != NULL) {
        /* nothing queued may outlive its events, the flush buffer or the gate's flag (the null
         * stream, handle 0, included: it is a stream like any other here); on an error path the
         * failure that brought us here is the one reported, so this sync's code is not */
        Py_BEGIN_ALLOW_THREADS
        (void)hip->hipStreamSynchronize(c->s);
        Py_END_ALLOW_THREADS
    }
    /* hipFree and hipHostFree synchronize the device: without the GIL, like the waits (work
     * another thread queued may need it to finish, a host callback that takes it) */
    Py_BEGIN_ALLOW_THREADS
    kb_hip_gate_fini(hip, &c->gate);
    for (Py_ssize_t i = 0; c->ev != NULL && i < 2 * c->chunk0; i++)
        if (c->ev[i])
            hip->hipEventDestroy(c->ev[i]);
    if (c->flush_buf)
        hip->hipFree(c->flush_buf);
    Py_END_ALLOW_THREADS
    free(c->ev);
    free(c->execs);
}

static PyObject *hip_report(const hip_ctx *c)
{
    return Py_BuildValue(
        "{s:{s:O,s:z,s:n,s:n,s:l,s:l,s:d},s:n,s:d,s:K,s:l,s:O,s:s}",
        "gate", "gated", c->gate.enabled ? Py_True : Py_False, "why_not",
        c->gate.enabled ? NULL : c->gate.why_not, "batch", c->chunk0, "batch_final", c->chunk,
        "watchdog_fired", c->fired, "fired_kept", c->fired_kept, "timeout_s", c->gate_timeout_s,
        "graphs", c->n_graphs, "unroll", c->unroll,
        "flush_bytes", (unsigned long long)(c->cold == KB_COLD_FLUSH ? c->flush_bytes : 0),
        "chunks", c->chunks, "pre_sample", c->pre_sample != NULL ? Py_True : Py_False,
        "attribution", "none: HIP has no CUPTI-style per-kernel activity records; each sample "
                       "is the HIP-event time of one graph replay divided by the calls in it");
}

/* measure_hip(graphs, *, stream, <options: kb_schema.h>, pre_sample=None, <loop config>) -> dict */
static PyObject *measure_hip(PyObject *m, PyObject *args, PyObject *kw)
{
    PyObject *graphs, *opts = NULL, *out = NULL;
    hip_ctx c;
    kb_hip_options o = {0};
    kb_loop_config cfg;
    kb_loop_result res;
    int locked = 0, prev = -1;
    memset(&c, 0, sizeof c);
    memset(&res, 0, sizeof res);
    if (!PyArg_ParseTuple(args, "O!:measure_hip", &PyTuple_Type, &graphs))
        return NULL;
    if (PyTuple_GET_SIZE(graphs) == 0)
        return PyErr_Format(PyExc_ValueError, "measure_hip needs at least one HipGraph");
    if ((opts = kw ? PyDict_Copy(kw) : PyDict_New()) == NULL)
        return NULL;
    kb_plan plan;
    int planned;
    if (kb_hip_options_parse(opts, &o) < 0 ||
        kb_pop_plan(m, opts, KB_BACKEND_HIP, "measure_hip", &plan, &planned) < 0 ||
        kb_finish_options(opts, "measure_hip", &cfg) < 0)
        goto done;
    c.cold = plan.cold;
    c.m = m;
    c.s = (kb_hipStream_t)(uintptr_t)o.stream;
    c.unroll = o.unroll;
    c.flush_bytes = (size_t)o.flush_bytes;
    c.chunk = c.chunk0 = o.gate_batch;
    c.gate_timeout_s = o.gate_timeout_s;
    c.pre_sample = o.pre_sample;
    if ((c.hip = kb_hip(m)) == NULL || kb_hip_use_device(m, c.hip, o.device, &prev) < 0)
        goto done;
    /* the lock first: the set-up queues a gate probe and allocations on the device that
     * another thread's measurement must not see */
    if (kb_measure_lock_acquire(m) < 0)
        goto done;
    locked = 1;
    if (ctx_init(&c, graphs, o.device, o.gate_timeout_s, o.gate) < 0)
        goto done;
    kb_backend b = {.name = "hip", .ctx = &c, .run_batch = hip_run_batch, .warmup_timed = 1};
    if (kb_loop_run(&b, &cfg, &res) < 0)
        goto done;
    out = kb_loop_result_to_dict(&res, &cfg);
    if (out != NULL && (kb_dict_set_steal(out, "backend", PyUnicode_FromString("hip")) < 0 ||
                        kb_dict_set_steal(out, "hip", hip_report(&c)) < 0))
        Py_CLEAR(out);
done:
    ctx_fini(&c);
    if (locked)
        kb_measure_lock_release(m);
    if (c.hip != NULL)
        kb_hip_restore_device(c.hip, prev);
    kb_loop_result_free(&res);
    kb_hip_options_fini(&o);
    Py_XDECREF(opts);
    return out;
}

static PyMethodDef measure_hip_methods[] = {
    {"measure_hip", (PyCFunction)(void (*)(void))measure_hip, METH_VARARGS | METH_KEYWORDS,
     "measure_hip(graphs, *, stream, device=..., plan=None, cold=None, flush_bytes=..., gate=..., "
     "gate_batch=..., gate_timeout_s=..., unroll=..., pre_sample=None, <loop options>) -> "
     "dict\n\nThe defaults and ranges are _core.OPTION_SCHEMA's (csrc/core/kb_schema.h). "
     "Time replays of the HipGraphs (cycled in order) with HIP events, in the shared loop. "
     "cold='flush' memsets flush_bytes before each replay, outside the timed interval. "
     "device: a HIP ordinal 0..63; gate_timeout_s: > 0, at most 1e6 s; pre_sample: a callable "
     "run before every replay (warm-up included), outside the timed interval, while the batch "
     "waits behind the gate (kbench.distributed's barrier)."},
    {NULL, NULL, 0, NULL},
};

int kb_measure_hip_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, measure_hip_methods);
}
