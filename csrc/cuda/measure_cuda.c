/* measure_cuda.c -- measure_cuda(): the CUDA backend of the timing loop, as a pipeline of named
 * steps: parse (cuda_options.c), set up, settle, sample (batches: queue, bridge, wait, read),
 * result, tear down. The timers (events, CUPTI, graph replay) sit behind gpu_timer.h.
 *
 * The steps' parts live in cuda_batch.c (one loop batch on the device), cuda_settle.c (the
 * clock regimes) and cuda_result.c (the result's "cuda" dict), around one cuda_ctx
 * (cuda_loop.h).
 */
#include "cuda_loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parse: the arguments, measure_cuda's options (cuda_options.c) and the loop's (measure.c).
 * The callable's own warm-up is clamped here (KB_CUDA_CALLABLE_WARMUP_MAX_S; the busy kernel
 * brings the clocks up, the callable's warm-up only needs its caches, allocator and JIT). */
static int step_parse(cuda_ctx *c, PyObject *args, PyObject *kw, kb_loop_config *cfg)
{
    PyObject *fn, *arg_sets, *kwargs = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O:measure_cuda", &fn, &arg_sets, &kwargs))
        return -1;
    if (kb_check_arg_sets(arg_sets, kwargs) < 0)
        return -1;
    c->fn = fn;
    c->fn_is_graph = kb_graph_check(c->m, fn);
    if (!c->fn_is_graph && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "fn must be callable, got %.100s", Py_TYPE(fn)->tp_name);
        return -1;
    }
    c->arg_sets = arg_sets;
    c->n_sets = PyTuple_GET_SIZE(arg_sets);
    c->kwargs = kwargs == Py_None ? NULL : kwargs;
    PyObject *opts = kw ? PyDict_Copy(kw) : PyDict_New();
    if (opts == NULL)
        return -1;
    int rc = kb_cuda_options_parse(c->m, opts, c->fn_is_graph, c->n_sets, &c->opt) < 0 ||
                     kb_finish_options(opts, "measure_cuda", cfg) < 0
                 ? -1
                 : 0;
    Py_DECREF(opts);
    if (rc < 0)
        return -1;
    if (!c->fn_is_graph)        /* a graph replays its sets inside every launch */
        kb_warm_every_set(cfg, c->n_sets);
    c->step_target = strcmp(cfg->criterion, "ci") == 0 ? cfg->target : 0.0;
    c->busy_explicit = c->opt.busy_warmup_s >= 0;
    if (c->opt.busy_warmup_s < 0)
        c->opt.busy_warmup_s = c->opt.regime == KB_REGIME_BURST &&
                                       cfg->warmup_s > KB_CUDA_BURST_RAMP_MAX_S
                                   ? KB_CUDA_BURST_RAMP_MAX_S : cfg->warmup_s;
    if (cfg->warmup_min < KB_CUDA_CALLABLE_WARMUP_MIN)
        cfg->warmup_min = KB_CUDA_CALLABLE_WARMUP_MIN;
    /* Burst: one batch's worth. Longer, the callable's continuous load only heats the GPU each
     * batch then waits to recover from (a GEMM is capped within 0.1 s of load, and its
     * sw_power_cap reason outlasts the load by 0.5 s: shared/data's H200 ramp). */
    c->callable_warmup_max_s = c->opt.regime == KB_REGIME_BURST ? KB_CUDA_BURST_WARMUP_MAX_S
                                                                : KB_CUDA_CALLABLE_WARMUP_MAX_S;
    if (cfg->warmup_s > c->callable_warmup_max_s)
        cfg->warmup_s = c->callable_warmup_max_s;
    return 0;
}

/* The timer chain: events, CUPTI around it (mode='cupti'), graph replay around that (a
 * CudaGraph fn, or unroll calls per launch). Called after the priming call: CUPTI is taken
 * only once the callable's one-off first-call work is done. */
static int setup_timers(cuda_ctx *c)
{
    if (c->opt.mode == KB_GPU_CUPTI) {
        double t0 = kb_now_s();
        if (kb_timer_cupti_init(&c->timers[1], c->timer, c->m, c->cu, c->opt.stream,
                                c->gate_cap, c->opt.device, c->opt.cupti_allow_foreign) < 0)
            return -1;
        c->cupti_begin_s = kb_now_s() - t0;
        c->timer = &c->timers[1];
        c->cupti = 1;
    }
    if (c->fn_is_graph || c->opt.unroll != 1.0) {
        if (kb_timer_graph_init(&c->timers[2], c->timer, c->opt.unroll) < 0)
            return -1;
        c->timer = &c->timers[2];
    }
    return 0;
}

/* ---- set up: context, stream checks, events timer, markers, gate, L2 flusher, the priming
 * call, the rest of the timer chain. */
static int step_setup(cuda_ctx *c, const kb_loop_config *cfg)
{
    PyObject *m = c->m;
    if ((c->cu = kb_cuda(m)) == NULL || kb_ctx_enter(m, c->cu, c->opt.device, &c->pushed) < 0 ||
        KB_CU(m, c->cu->cuDeviceGet(&c->dev, c->opt.device)) < 0)
        return -1;
    CUstreamCaptureStatus cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (KB_CU(m, c->cu->cuStreamIsCapturing(c->opt.stream, &cap_status)) < 0)
        return -1;
    if (cap_status != CU_STREAM_CAPTURE_STATUS_NONE) {
        PyErr_SetString(kb_get_state(m)->CaptureError, "the stream is being captured into a "
                                                       "CUDA graph: kbench cannot measure "
                                                       "inside a capture");
        return -1;
    }
    if (kb_l2_persisting_reset(m, c->cu, &c->persisting_limit) < 0)
        return -1;
    c->gate_cap = c->gate_cap_initial =
        c->opt.gate_batch < cfg->batch_max ? c->opt.gate_batch : cfg->batch_max;
    c->samples = calloc((size_t)c->gate_cap, sizeof *c->samples);
    if (c->samples == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (kb_timer_events_init(&c->timers[0], m, c->cu, c->opt.stream, c->gate_cap) < 0)
        return -1;
    c->timer = &c->timers[0];
    for (int i = 0; i < 4; i++)
        if (KB_CU(m, c->cu->cuEventCreate(&c->marks[i], CU_EVENT_DEFAULT)) < 0) {
            c->marks[i] = NULL;
            return -1;
        }
    if (c->opt.gate && kb_gate_init(m, c->cu, &c->gate, c->opt.gate_timeout_s) < 0)
        return -1;
    c->gate_ready = c->opt.gate;
    if (c->opt.cold == KB_COLD_FLUSH &&
        kb_l2_flusher_init(m, c->cu, c->dev, &c->flusher, (size_t)c->opt.flush_bytes) < 0)
        return -1;
    /* One untimed, ungated first call: a first call's one-off host work (JIT, library handles,
     * autotuning) must not stall the gated warm-up behind the watchdog, nor leave the GPU idle
     * where the warm-up believes it loaded. */
    if (kb_cuda_pre_sample(c, "the first (untimed, ungated)") < 0 ||
        kb_cuda_launch_once(c, "the first (untimed, ungated)") < 0 || kb_cuda_drain(c) < 0)
        return -1;
    return setup_timers(c);
}

/* ---- settle: the NVML sampler the warm-up's settle rule reads (kb_cuda_keep_warming), the state
 * carried from the last measurement on the device, and the busy kernel's clock ramp-up where
 * nothing judges the load: the sustained regime settles on the callable's own load (a ramp
 * shows as two clock windows that disagree), so the busy kernel runs only without clock
 * readings, in burst, or when the caller gave busy_warmup_s; and never when kbench had the GPU
 * busy a moment ago. */
static int step_settle(cuda_ctx *c)
{
    kb_state *st = kb_get_state(c->m);
    if (c->opt.sample_clocks) {
        /* Sampled from the callable's warm-up on, so the warm-up can wait for the clock to
         * settle; the timed part is marked at its first batch. */
        c->sampler = kb_nvml_sampler_start(c->m, c->opt.device, c->opt.clock_period_s);
        if (c->sampler == NULL)
            PyErr_Clear();          /* NVML is optional: no clocks, but the measurement stands */
    }
    kb_cuda_take_carry(c);
    int judged = c->sampler != NULL && c->opt.regime == KB_REGIME_SUSTAINED &&
                 c->opt.settle_max_s > 0;
    if (c->opt.busy_warmup_s > 0 && (c->busy_explicit || !judged) &&
        kb_now_s() > st->gpu_warm_until) {
        kb_builtin_kernels *bk = kb_builtin_get(c->m, c->cu, c->opt.device);
        if (bk == NULL || kb_builtin_busy(c->m, c->cu, bk, c->dev, c->opt.stream,
                                          c->opt.busy_warmup_s) < 0 ||
            kb_cuda_drain(c) < 0)
            return -1;
        c->busy_s_done = c->opt.busy_warmup_s;
    }
    return 0;
}

/* ---- sample: the loop (measure.c) over kb_cuda_run_batch, then the last bridge drained. */
static int step_sample(cuda_ctx *c, const kb_loop_config *cfg, kb_loop_result *res)
{
    kb_backend backend = {.name = c->timer->name, .ctx = c, .run_batch = kb_cuda_run_batch,
                          .keep_warming = kb_cuda_keep_warming};
    if (c->timer->finish != NULL)
        backend.min_batch_s = KB_COLLECT_MIN_BATCH_S;
    /* Where the sustained rule judges the load, the batches that run while it settles are
     * timed and kept from the moment the readings show the settled state (kb_cuda_settled_keep),
     * until a limit reason shows (kb_cuda_keep_warming); a load settled unlimited that a limit
     * reason limits while timed settles again (kb_cuda_resettle). With ranks every batch must
     * be agreed: not there. After a settled unlimited measurement, which this load may settle on in
     * 0.15 s, the callable's own warm-up ends once its timed windows stop getting faster
     * instead of at callable_warmup_max_s: elsewhere the settle takes longer than that anyway,
     * and a load under a limit warms up as it did before samples were kept. */
    if (c->sampler != NULL && c->opt.regime == KB_REGIME_SUSTAINED && c->opt.settle_max_s > 0 &&
        cfg->ranks == NULL) {
        backend.settled_keep = kb_cuda_settled_keep;
        backend.resettle = kb_cuda_resettle;
        backend.warmup_timed = isfinite(c->carry.sm_mhz) && !c->carry.under_limit;
    }
    if (kb_loop_run(&backend, cfg, res) < 0)
        return -1;
    if (c->bridge_pending) {         /* the last bridge may still run */
        int rc = kb_cuda_drain(c);
        c->bridge_pending = 0;
        if (rc < 0)
            return -1;
        if (c->prev_bridge > 0 && c->sub_batches > 0 &&  /* the last sub-batch's bridge */
            kb_cuda_count_bridge(c, (c->sub_batches - 1) & 1) < 0)
            return -1;
    }
    kb_cuda_record_carry(c);
    kb_get_state(c->m)->gpu_warm_until = kb_now_s() + 1.0;
    return 0;
}

/* ---- result: the loop's dict (measure.c) with "cuda" and "backend" added. */
static PyObject *step_result(cuda_ctx *c, const kb_loop_result *res, const kb_loop_config *cfg)
{
    PyObject *out = kb_loop_result_to_dict(res, cfg);
    if (out == NULL)
        return NULL;
    const char *backend = c->timer->name;
    if (kb_dict_set_steal(out, "cuda", kb_cuda_result_dict(c, backend, res->sampling_s)) < 0 ||
        kb_dict_set_steal(out, "backend", PyUnicode_FromString(backend)) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* ---- tear down: one path for success and failure. A bridge still queued drains first, the
 * timers go (CUPTI released), the gate opens, the stream drains, buffers are freed, the context
 * popped. A pending exception is kept. out: the result, which learns how CUPTI was left. */
static void step_teardown(cuda_ctx *c, PyObject *out)
{
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    if (c->bridge_pending && c->cu != NULL) {
        /* a bridge queued behind a failed batch: let it end before CUPTI is released */
        if (c->gate_ready)
            kb_gate_open(&c->gate);
        kb_cuda_drain_quiet(c);
    }
    if (c->sampler != NULL)
        kb_nvml_sampler_abort(c->sampler);
    if (c->timer != NULL)
        c->timer->teardown(c->timer);
    if (c->cupti) {
        /* how CUPTI was left, known only now: into the result */
        PyObject *cu_dict = out ? PyDict_GetItemString(out, "cuda") : NULL;
        PyObject *how = cu_dict ? PyUnicode_FromString(kb_get_state(c->m)->cupti_detach) : NULL;
        if (how == NULL || PyDict_SetItemString(cu_dict, "cupti_detach", how) < 0)
            PyErr_Clear();
        Py_XDECREF(how);
    }
    if (c->cu != NULL) {
        if (c->gate_ready) {
            kb_gate_open(&c->gate);
            kb_cuda_drain_quiet(c);
        }
        /* cuMemFreeHost (the gate's flag) and cuMemFree (the flush buffer) synchronize the
         * device: without the GIL, like the waits (work another thread queued may need it to
         * finish, a host callback that takes it). No Python in here. */
        Py_BEGIN_ALLOW_THREADS
        if (c->gate_ready)
            kb_gate_fini(c->cu, &c->gate);
        kb_l2_flusher_fini(c->cu, &c->flusher);
        for (int i = 0; i < 4; i++)
            if (c->marks[i])
                c->cu->cuEventDestroy(c->marks[i]);
        kb_ctx_leave(c->cu, c->pushed);
        Py_END_ALLOW_THREADS
    }
    if (c->locked)
        kb_measure_lock_release(c->m);
    PyErr_Restore(et, ev, etb);
    free(c->samples);
    free(c->deferred);
    free(c->tentative);
    kb_cuda_side_free(&c->side);
    kb_cuda_options_fini(&c->opt);
}

/* measure_cuda(fn, arg_sets, kwargs=None, *, stream, <options: kb_schema.h>, <loop config>) */
static PyObject *measure_cuda(PyObject *m, PyObject *args, PyObject *kw)
{
    cuda_ctx c;
    kb_loop_config cfg;
    kb_loop_result res;
    PyObject *out = NULL;
    memset(&c, 0, sizeof c);
    memset(&res, 0, sizeof res);
    c.m = m;
    c.settled = -1;
    c.settled_at_s = c.settled_mhz = NAN;
    c.settled_since_s = INFINITY;
    c.carry.sm_mhz = c.carried_from_s_ago = c.end_sm_mhz = NAN;
    c.timed_from_s = c.resettle_timed_s = NAN;
    if (step_parse(&c, args, kw, &cfg) < 0)
        goto done;
    /* One measuring loop at a time in the process (measure.c): benches from two threads
     * would share the GPU, the gate and CUPTI, and each would time the other's work. */
    if (kb_measure_lock_acquire(m) < 0)
        goto done;
    c.locked = 1;
    if (step_setup(&c, &cfg) < 0 || step_settle(&c) < 0 || step_sample(&c, &cfg, &res) < 0)
        goto done;
    out = step_result(&c, &res, &cfg);
done:
    step_teardown(&c, out);
    kb_loop_result_free(&res);
    return out;
}

static PyMethodDef cuda_methods[] = {
    {"measure_cuda", (PyCFunction)(void (*)(void))measure_cuda, METH_VARARGS | METH_KEYWORDS,
     "measure_cuda(fn, arg_sets, kwargs=None, *, stream, device=..., plan=None, mode=..., "
     "cold=None|'flush'|'rotate', flush_bytes=..., unroll=..., gate=..., keep_busy=..., "
     "gate_batch=..., gate_timeout_s=..., busy_warmup_s=..., cupti_allow_foreign=..., "
     "sample_clocks=..., clock_period_s=..., settle_max_s=..., regime=..., pre_sample=None, "
     "<loop options>) -> dict\n\n"
     "Time fn(*arg_sets[i % len]) (or launches of a CudaGraph fn) on a CUDA stream. plan: "
     "kbench.bench's (_core.plan), which sets the timer and the cold cache (graph replays: "
     "rotated sets live in the graphs); mode= and cold= are their low-level spelling, for a "
     "call without one. The "
     "defaults and ranges are _core.OPTION_SCHEMA's (csrc/core/kb_schema.h; the timer's as "
     "_core.CUDA_DEFAULTS). "
     "busy_warmup_s=None: the loop's warmup_s, run only where no settle rule judges the load "
     "(no NVML clocks, burst) and the GPU was not busy a moment ago; the callable's own "
     "warm-up is then at most "
     "CUDA_DEFAULTS['callable_warmup_max_s'] (and at least 'callable_warmup_min' calls). "
     "pre_sample: a callable run before every call of fn (priming and warm-up included), "
     "before the cold-cache flush and outside the timed part and CUPTI's attribution; with it "
     "keep-busy bridges are off (every call of fn follows one pre_sample)."},
    {NULL, NULL, 0, NULL},
};

int kb_measure_cuda_module_init(PyObject *m) { return PyModule_AddFunctions(m, cuda_methods); }
