/* measure_cuda.c -- the CUDA backends of the timing loop: events and CUPTI.
 *
 * One batch, in stream order on the measured stream:
 *
 *   [gate: wait flag >= g]  ( [L2 flush]  [event a_i]  push(i) fn() pop  [event b_i] )*n
 *
 * The host queues the whole batch behind the gate, then opens it, so the device runs the batch
 * back to back and host launch gaps are not timed. events: sample i = b_i - a_i. cupti: sample
 * i = the summed duration of the kernels/memcpys/memsets CUPTI attributes to iteration i
 * through its external correlation id; the flush has no id and is excluded; the events are
 * recorded too, for comparison. A CudaGraph given as fn is launched directly from C, and
 * `unroll` divides each sample by the number of calls captured in one launch.
 *
 * Between sub-batches the host reads the events, collects CUPTI (a forced flush: 1-2 ms on the
 * H200), lets the loop decide and queues the next sub-batch behind the gate. The GPU would idle
 * all that time, and a power-capped kernel (a bf16 GEMM) runs faster after each idle spell than
 * under continuous load: gated 8192^3 GEMMs read 2-4% fast at 92% busy. So with keep_busy a
 * bridge of untimed iterations (no flush, no events, no correlation id: never attributed) is
 * queued after each sub-batch's end marker, sized from the host's last turnaround and the last
 * iteration time, and the host waits for the marker only:
 *
 *   ... [marker k]  fn() * bridge  [bridge end k]  [gate]  [flush] [a] fn [b] ...
 *
 * Bridges are skipped where they cannot help: when the host queues an iteration slower than
 * the GPU runs it, or when the turnaround is under 1% of a sub-batch's GPU time.
 */
#include "cuda_backend.h"
#include "kb_numpy.h"
#include "kb_array.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void kb_sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef enum { MODE_EVENTS = 0, MODE_CUPTI = 1 } cuda_mode;
/* The clock/power state a figure is taken in (steady.c). */
typedef enum { REGIME_SUSTAINED = 0, REGIME_BURST = 1 } cuda_regime;

/* Burst: each timed batch runs at most this much GPU time, rests at least BURST_REST times its
 * GPU time (a duty cycle <= 25% keeps the averaged power far under the cap), then starts once
 * the GPU has recovered, waiting at most BURST_RECOVER_MAX_S. On the H200 a power-capped GEMM
 * kept its peak clock for ~0.1 s of load. */
#define BURST_BATCH_S 0.005
#define BURST_REST 3.0
#define BURST_RECOVER_MAX_S 2.0
#define BURST_FRESH_READING_S 0.001   /* a batch this long needs a reading taken after it */

/* Per timed iteration, kept for the result. */
typedef struct {
    double *events_s;       /* event-pair time (both modes) */
    double *span_s;         /* cupti: first start to last end */
    uint32_t *kernels;      /* cupti: kernels attributed to the iteration */
    uint32_t *copies;       /* cupti: memcpys + memsets attributed */
    Py_ssize_t n, cap;
} side_arrays;

typedef struct {
    PyObject *m;
    const kb_cuda_api *cu;
    CUstream stream;
    CUdevice dev;
    int ordinal;
    cuda_mode mode;
    kb_cold_mode cold;
    PyObject *fn;                   /* Python callable, or a CudaGraph (launched from C) */
    int fn_is_graph;
    PyObject *arg_sets;             /* tuple of tuples */
    Py_ssize_t n_sets, next_set;
    PyObject *kwargs;               /* dict or NULL */
    double unroll;
    int use_gate;
    kb_gate gate;
    int gate_ready;
    Py_ssize_t gate_cap;            /* iterations per gated sub-batch */
    Py_ssize_t gate_cap_initial;
    Py_ssize_t gate_fired;          /* sub-batches the watchdog opened */
    Py_ssize_t gate_fired_kept;     /* of those, kept because the cap was already 1 */
    kb_l2_flusher flusher;
    kb_cupti_trace *trace;
    kb_builtin_kernels *builtins;   /* cupti: the empty kernel that ends each batch */
    int bridge_records;             /* cupti: keep device records on while bridges are queued */
    CUevent *ev;                    /* 2 * gate_cap events, 2 batch-end markers, 2 bridge ends */
    Py_ssize_t n_ev;
    Py_ssize_t sub_batches;         /* queued so far: its parity picks the markers */
    double gap_sum_s, gap_max_s;    /* GPU idle from a sub-batch's end (or its bridge's) to the */
    Py_ssize_t gaps;                /* next one's first event (timed sub-batches) */
    int keep_busy;
    Py_ssize_t bridge_n;            /* iterations to queue after the next sub-batch */
    int bridge_queued;              /* after the last sub-batch: its bridge end is recorded */
    int bridge_pending;             /* a bridge may still run: drain before leaving */
    double ready_at_s;              /* host clock when the last sub-batch had been waited for */
    double turnaround_s;            /* host time from then to the next gate opening */
    Py_ssize_t bridges, bridge_iters;
    double bridge_gpu_s;            /* GPU time the bridges of timed sub-batches ran */
    Py_ssize_t prev_bridge;         /* iterations in the last sub-batch's bridge (0: none) */
    kb_iter_activity *acts;         /* gate_cap */
    uint64_t next_id;               /* external correlation id of the next iteration */
    side_arrays side;
    kb_nvml_sampler *sampler;       /* from the callable's warm-up on; marked at the timed part */
    int sample_clocks;
    int sampler_marked;
    double clock_period_s;
    double settle_max_s;            /* warm-up goes on at most this long for the clock to settle */
    int settled;                    /* -1 not judged (no clocks), 0 gave up at settle_max_s, 1 */
    double settled_at_s, settled_mhz;
    double settle_min_sampling_s;   /* the 1 s hold when it settled under a limit (or not) */
    cuda_regime regime;
    int load_started;
    double load_start_s;            /* sampler time at which the callable's load began */
    double loaded_s;                /* how long it had loaded the GPU when judged settled */
    int clocks_locked;              /* the user set or locked the clocks: nothing to settle */
    Py_ssize_t warmup_fired;        /* watchdog openings in discarded warm-up batches */
    double iter_gpu_s;              /* the last sub-batch's GPU time per iteration */
    double last_batch_gpu_s;        /* burst: the last batch's GPU time, and its end (host) */
    double last_batch_end_s;
    Py_ssize_t burst_batches, burst_unrecovered;
    double burst_wait_s;            /* host time spent waiting for recovery */
    double burst_sm_min, burst_sm_max, burst_sm_sum;   /* SM clock at each batch start */
    Py_ssize_t burst_sm_n;
    int stepped;                    /* cupti: a sub-2 us figure, sampled >= 0.2 s (see below) */
    Py_ssize_t iteration;
    Py_ssize_t empty_iterations;    /* cupti: iterations with no attributed activity */
} cuda_ctx;

static int side_reserve(side_arrays *s, Py_ssize_t need)
{
    if (need <= s->cap)
        return 0;
    size_t cap = kb_grown_capacity((size_t)s->cap, (size_t)need, 256, sizeof(double));
    double *e = kb_resize(s->events_s, cap, sizeof *e);
    if (e)
        s->events_s = e;
    double *sp = kb_resize(s->span_s, cap, sizeof *sp);
    if (sp)
        s->span_s = sp;
    uint32_t *k = kb_resize(s->kernels, cap, sizeof *k);
    if (k)
        s->kernels = k;
    uint32_t *c = kb_resize(s->copies, cap, sizeof *c);
    if (c)
        s->copies = c;
    if (!e || !sp || !k || !c) {
        PyErr_NoMemory();
        return -1;
    }
    s->cap = (Py_ssize_t)cap;
    return 0;
}

static void side_free(side_arrays *s)
{
    free(s->events_s);
    free(s->span_s);
    free(s->kernels);
    free(s->copies);
    memset(s, 0, sizeof *s);
}

/* Launch one iteration's work (the callable, or the graph). */
static int launch_once(cuda_ctx *c, const char *phase)
{
    if (c->fn_is_graph)
        return kb_graph_launch(c->m, c->cu, (kb_graph_object *)c->fn, c->stream);
    PyObject *args = PyTuple_GET_ITEM(c->arg_sets, c->next_set);
    if (++c->next_set == c->n_sets)
        c->next_set = 0;
    PyObject *r = PyObject_Call(c->fn, args, c->kwargs);
    if (r == NULL) {
        kb_add_exception_note("raised by the benchmarked callable in %s iteration %zd (kbench "
                              "CUDA backend); the gate was opened and the stream drained",
                              phase, c->iteration);
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Iterations of the bridge to queue after the next sub-batch: enough to cover 1.5 x the host's
 * last turnaround, from the last sub-batch's GPU time per iteration and host time per queued
 * iteration; 0 when it cannot help (see the top of this file). */
static Py_ssize_t bridge_size(const cuda_ctx *c, double iter_gpu_s, double queue_per_iter_s,
                              Py_ssize_t n)
{
    if (!c->keep_busy || c->turnaround_s <= 0 || !(iter_gpu_s > 0))
        return 0;
    if (iter_gpu_s < queue_per_iter_s || c->turnaround_s < 0.01 * iter_gpu_s * (double)n)
        return 0;
    double want = ceil(1.5 * c->turnaround_s / iter_gpu_s);
    return want < 1 ? 1 : want > (double)c->gate_cap_initial ? c->gate_cap_initial
                                                              : (Py_ssize_t)want;
}

/* Add the bridge that ran between marker ev[marker] and its end ev[marker + 2] (after the
 * previous sub-batch) to the keep-busy totals. */
static int count_bridge(cuda_ctx *c, Py_ssize_t marker)
{
    float ms = 0.f;
    if (KB_CU(c->m, c->cu->cuEventElapsedTime(&ms, c->ev[marker], c->ev[marker + 2])) < 0)
        return -1;
    c->bridge_gpu_s += (double)ms * 1e-3;
    c->bridges++;
    c->bridge_iters += c->prev_bridge;
    return 0;
}

/* Queue and run one gated sub-batch of n <= gate_cap iterations; out[i] gets sample i.
 * *fired is set when the watchdog had to open the gate. */
static int run_sub_batch(cuda_ctx *c, Py_ssize_t n, double *out, int warmup, int *fired)
{
    const kb_cuda_api *cu = c->cu;
    PyObject *m = c->m;
    int failed = 0;
    uint64_t first_id = c->next_id;
    *fired = 0;
    double queue_start_s = kb_now_s();

    if (c->use_gate && kb_gate_close(m, cu, &c->gate, c->stream) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        if (c->cold == KB_COLD_FLUSH && kb_l2_flush(m, cu, &c->flusher, c->stream) < 0) {
            failed = 1;
            break;
        }
        if (KB_CU(m, cu->cuEventRecord(c->ev[2 * i], c->stream)) < 0) {
            failed = 1;
            break;
        }
        if (c->trace && kb_cupti_push(m, c->trace, c->next_id) < 0) {
            failed = 1;
            break;
        }
        int rc = launch_once(c, warmup ? "a warm-up" : "a timed");
        if (c->trace) {
            if (rc < 0) {
                /* pop without clobbering the callable's exception */
                kb_cupti_pop_quiet(c->trace);
            }
            else if (kb_cupti_pop(m, c->trace) < 0)
                rc = -1;
        }
        c->next_id++;
        c->iteration++;
        if (rc < 0 || KB_CU(m, cu->cuEventRecord(c->ev[2 * i + 1], c->stream)) < 0)
            failed = 1;
    }
    /* CUPTI: the sentinel, kbench's empty kernel under its own id, whose record coming back
     * shows that every record of the batch did (cupti_trace.c). */
    uint64_t sentinel_id = 0;
    if (!failed && c->trace) {
        if (kb_cupti_push(m, c->trace, c->next_id) < 0)
            failed = 1;
        else {
            if (KB_CU(m, cu->cuLaunchKernel(c->builtins->empty, 1, 1, 1, 32, 1, 1, 0, c->stream,
                                            NULL, NULL)) < 0)
                failed = 1;
            if (failed)
                kb_cupti_pop_quiet(c->trace);
            else if (kb_cupti_pop(m, c->trace) < 0)
                failed = 1;
            sentinel_id = c->next_id++;
        }
    }
    /* A marker after the batch: the next batch's first event, minus this (or minus the end of
     * the bridge after it), is the time the GPU sat idle between the two. */
    CUevent marker = c->ev[2 * c->gate_cap_initial + (c->sub_batches & 1)];
    CUevent bridge_end = c->ev[2 * c->gate_cap_initial + 2 + (c->sub_batches & 1)];
    if (!failed && KB_CU(m, cu->cuEventRecord(marker, c->stream)) < 0)
        failed = 1;
    if (c->use_gate)
        *fired = kb_gate_open(&c->gate);
    double opened_s = kb_now_s();
    if (c->ready_at_s > 0)
        c->turnaround_s = opened_s - c->ready_at_s;
    double queue_per_iter_s = (opened_s - queue_start_s) / (double)n;
    /* The bridge, queued while the GPU runs the sub-batch: keeps it busy through the host's
     * turnaround after it. Its launches carry no correlation id, so CUPTI never attributes them. */
    Py_ssize_t bridge = failed ? 0 : c->bridge_n;
    int records_off = 0;
    if (bridge > 0 && c->trace && !c->bridge_records) {
        if (kb_cupti_device_records(m, c->trace, 0) < 0)
            failed = 1;
        else
            records_off = 1;
    }
    for (Py_ssize_t i = 0; i < bridge && !failed; i++)
        if (launch_once(c, "an untimed keep-busy") < 0)
            failed = 1;
    if (records_off) {
        if (failed) {
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);      /* keep the callable's exception */
            kb_cupti_device_records(m, c->trace, 1);
            PyErr_Clear();
            PyErr_Restore(et, ev, etb);
        }
        else if (kb_cupti_device_records(m, c->trace, 1) < 0)
            failed = 1;
    }
    c->bridge_queued = bridge > 0 && !failed;
    if (bridge > 0) {
        c->bridge_pending = 1;
        if (!failed && KB_CU(m, cu->cuEventRecord(bridge_end, c->stream)) < 0)
            failed = 1;
    }
    /* Wait for the sub-batch: its marker when a bridge runs behind it, else the whole stream.
     * On failure drain the stream, so it is left usable and nothing of ours is still queued. */
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    if (c->bridge_queued)
        KB_DEFER(&d, cu->cuEventSynchronize(marker));
    else
        KB_DEFER(&d, cu->cuStreamSynchronize(c->stream));
    Py_END_ALLOW_THREADS
    c->ready_at_s = kb_now_s();
    if (!c->bridge_queued)
        c->bridge_pending = 0;
    if (failed) {
        if (d.code != 0) {
            /* The callable failed and the stream did too: keep the first, mention the second. */
            const char *name = NULL;
            cu->cuGetErrorName((CUresult)d.code, &name);
            kb_add_exception_note("cuStreamSynchronize afterwards returned %s",
                                  name ? name : "an error");
        }
        return -1;
    }
    if (KB_CU_RAISE(m, &d) < 0)
        return -1;

    double iter_sum_s = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        float ms = 0.f;
        if (KB_CU(m, cu->cuEventElapsedTime(&ms, c->ev[2 * i], c->ev[2 * i + 1])) < 0)
            return -1;
        iter_sum_s += (double)ms * 1e-3;
        out[i] = (double)ms * 1e-3 / c->unroll;
    }
    if (!warmup && c->sub_batches > 0) {
        /* The previous sub-batch's marker and bridge end ran before this one's first event. */
        float ms = 0.f;
        Py_ssize_t prev = 2 * c->gate_cap_initial + ((c->sub_batches - 1) & 1);
        if (c->prev_bridge) {
            if (count_bridge(c, prev) < 0)
                return -1;
            prev += 2;
        }
        if (KB_CU(m, cu->cuEventElapsedTime(&ms, c->ev[prev], c->ev[0])) < 0)
            return -1;
        c->gap_sum_s += (double)ms * 1e-3;
        if ((double)ms * 1e-3 > c->gap_max_s)
            c->gap_max_s = (double)ms * 1e-3;
        c->gaps++;
    }
    c->prev_bridge = c->bridge_queued ? bridge : 0;
    c->sub_batches++;
    c->iter_gpu_s = iter_sum_s / (double)n;
    c->last_batch_gpu_s = iter_sum_s;
    c->bridge_n = bridge_size(c, iter_sum_s / (double)n, queue_per_iter_s, n);
    if (c->trace) {
        if (kb_cupti_collect(m, c->trace, first_id, n, c->acts, !warmup && !*fired,
                             sentinel_id) < 0)
            return -1;
    }
    if (warmup || (*fired && c->gate_cap > 1))
        return 0;   /* not kept: no bookkeeping */

    if (side_reserve(&c->side, c->side.n + n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k = c->side.n + i;
        c->side.events_s[k] = out[i];
        if (c->trace) {
            const kb_iter_activity *a = &c->acts[i];
            c->side.kernels[k] = a->kernels;
            c->side.copies[k] = a->memcpys + a->memsets;
            c->side.span_s[k] = a->last_end > a->first_start && a->first_start != UINT64_MAX
                                    ? (double)(a->last_end - a->first_start) * 1e-9 /
                                          kb_cupti_ticks_per_ns(c->trace) / c->unroll
                                    : 0.0;
            out[i] = (double)a->sum_ns * 1e-9 / c->unroll;
            if (a->kernels + a->memcpys + a->memsets == 0)
                c->empty_iterations++;
        }
        else {
            c->side.kernels[k] = 0;
            c->side.copies[k] = 0;
            c->side.span_s[k] = out[i];
        }
    }
    c->side.n += n;
    return 0;
}

#define KB_STEPPED_BELOW_S 2e-6         /* 64 steps of 32 ns */
#define KB_STEPPED_MIN_SAMPLING_S 0.2

/* The step CUPTI's durations come in: the largest of 32, 64, ... 1024 ns that >= 90% of the
 * samples of one batch sit on (within 1.5 ns: conversions round); 0 when none does (a graph's
 * unrolled figure, or a finer clock). The caller keeps the finest step over batches. */
static double timestamp_step_s(const double *out, Py_ssize_t n)
{
    double best = 0.0;
    for (int step_ns = 32; step_ns <= 1024; step_ns *= 2) {
        Py_ssize_t on = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double ns = out[i] * 1e9, r = fmod(ns, (double)step_ns);
            if (r < 1.5 || step_ns - r < 1.5)
                on++;
        }
        if ((double)on >= 0.9 * (double)n)
            best = step_ns * 1e-9;
    }
    return best;
}

/* Burst: rest after the last batch, then wait until the GPU has recovered from it (steady.c)
 * or BURST_RECOVER_MAX_S has passed (counted as unrecovered). The GIL is released while
 * sleeping and Ctrl-C is honoured. Records the SM clock the batch starts at. */
static int burst_wait(cuda_ctx *c)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double start = kb_now_s();
    double rest_until = c->last_batch_end_s + BURST_REST * c->last_batch_gpu_s;
    /* a long batch is judged on readings taken after it, not on ones from before it */
    if (c->sampler != NULL && c->last_batch_gpu_s >= BURST_FRESH_READING_S)
        rest_until += c->clock_period_s;
    for (;;) {
        double now = kb_now_s();
        if (now >= rest_until &&
            (c->sampler == NULL || kb_nvml_sampler_recovered(c->sampler, &rule)))
            break;
        if (now - start >= BURST_RECOVER_MAX_S) {
            c->burst_unrecovered++;
            break;
        }
        double nap = rest_until - now;
        nap = nap > 0.0005 && nap < 0.002 ? nap : 0.0005;
        Py_BEGIN_ALLOW_THREADS
        kb_sleep_s(nap);
        Py_END_ALLOW_THREADS
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
    c->burst_wait_s += kb_now_s() - start;
    if (c->sampler != NULL) {
        double sm = kb_nvml_sampler_last_sm(c->sampler);
        if (isfinite(sm)) {
            c->burst_sm_min = c->burst_sm_n == 0 || sm < c->burst_sm_min ? sm : c->burst_sm_min;
            c->burst_sm_max = c->burst_sm_n == 0 || sm > c->burst_sm_max ? sm : c->burst_sm_max;
            c->burst_sm_sum += sm;
            c->burst_sm_n++;
        }
    }
    return 0;
}

static int cuda_run_batch(kb_backend *b, Py_ssize_t n, double *out, int warmup)
{
    cuda_ctx *c = b->ctx;
    if (!warmup && c->sampler != NULL && !c->sampler_marked) {
        /* The result's clocks cover the timed part only. */
        kb_nvml_sampler_mark(c->sampler);
        c->sampler_marked = 1;
    }
    if (warmup && c->sampler != NULL && !c->load_started) {
        /* the callable's load begins with the warm-up's first batch */
        c->load_start_s = kb_nvml_sampler_elapsed_s(c->sampler);
        c->load_started = 1;
    }
    int burst = !warmup && c->regime == REGIME_BURST;
    Py_ssize_t done = 0;
    while (done < n) {
        Py_ssize_t k = n - done < c->gate_cap ? n - done : c->gate_cap;
        if (burst) {
            Py_ssize_t cap = c->iter_gpu_s > 0 ? (Py_ssize_t)(BURST_BATCH_S / c->iter_gpu_s) : 1;
            k = k < cap ? k : cap > 1 ? cap : 1;
            if (burst_wait(c) < 0)
                return -1;
        }
        int fired = 0;
        int rc = run_sub_batch(c, k, out + done, warmup, &fired);
        if (burst) {
            c->last_batch_end_s = kb_now_s();
            c->burst_batches++;
        }
        if (rc < 0)
            return -1;
        if (fired && warmup && c->sampler != NULL)
            /* the GPU idled behind the gate: the load starts again */
            c->load_start_s = kb_nvml_sampler_elapsed_s(c->sampler);
        if (fired) {
            if (warmup)
                c->warmup_fired++;
            else
                c->gate_fired++;
            if (c->gate_cap > 1) {
                /* The host could not queue k iterations before the watchdog: the samples may
                 * contain launch gaps. Drop them and queue less at a time. */
                c->gate_cap = c->gate_cap / 2 > 0 ? c->gate_cap / 2 : 1;
                continue;
            }
            c->gate_fired_kept++;
            if (c->gate_fired_kept >= 3) {
                kb_state *st = kb_get_state(c->m);
                char timeout[32];   /* PyErr_Format has no %f */
                snprintf(timeout, sizeof timeout, "%.2f", c->gate.timeout_s);
                PyErr_Format(st->KbenchError,
                             "the callable blocks on the host while the stream is gated: every "
                             "single-iteration batch waited for the %s s watchdog. It "
                             "synchronizes (.item(), torch.cuda.synchronize(), a device-to-host "
                             "copy) or launches on another stream that waits on this one; kbench "
                             "cannot time it behind a gate: pass gate=False", timeout);
                return -1;
            }
        }
        done += k;
    }
    if (!warmup && c->trace && n > 0) {
        /* CUPTI's timestamps come in 32 ns steps on the H200, and a sub-2 us kernel's record
         * sits on a few neighbouring steps whose mix changed from one short run to the next
         * (runs of 10-58 samples each sat on one or two steps, 64 ns apart). Such figures are
         * sampled for at least KB_STEPPED_MIN_SAMPLING_S, over many sub-batches. */
        double sum = 0.0;
        for (Py_ssize_t i = 0; i < n; i++)
            sum += out[i];
        if (sum / (double)n < KB_STEPPED_BELOW_S) {
            c->stepped = 1;
            if (b->min_sampling_s < KB_STEPPED_MIN_SAMPLING_S)
                b->min_sampling_s = KB_STEPPED_MIN_SAMPLING_S;
            /* The finest step any batch shows: a small batch can sit on every other step
             * (576 and 640 ns are both multiples of 64) and look coarser than it is. */
            double step = timestamp_step_s(out, n);
            if (step > 0 && (b->resolution_s == 0 || step < b->resolution_s))
                b->resolution_s = step;
        }
    }
    if (!warmup && c->trace && c->empty_iterations > 0) {
        kb_state *st = kb_get_state(c->m);
        size_t acts = 0, ext = 0;
        kb_cupti_last_counts(c->trace, &acts, &ext);
        PyErr_Format(st->KbenchError,
                     "CUPTI attributed no kernel, memcpy or memset to %zd timed iteration(s): the "
                     "callable launched no GPU work on device %d in this thread (work on "
                     "another device or thread cannot be attributed; for a CPU callable pass "
                     "device='cpu'); the last batch had %zu activity and %zu "
                     "external-correlation records",
                     c->empty_iterations, c->ordinal, acts, ext);
        return -1;
    }
    return 0;
}

/* The warm-up goes on until the SM clock has settled under the callable's own load (steady.c),
 * at most settle_max_s; without clock samples there is nothing to judge. */
#define KB_LIMITED_MIN_SAMPLING_S 1.0
static int cuda_keep_warming(kb_backend *b, double elapsed_s)
{
    cuda_ctx *c = b->ctx;
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    /* burst recovers before each batch instead; clocks the user locked need no settling */
    if (c->sampler == NULL || c->settle_max_s <= 0 || c->regime == REGIME_BURST)
        return 0;
    if ((c->clocks_locked = kb_nvml_sampler_clocks_locked(c->sampler)))
        return 0;
    double median = NAN;
    int settled = kb_nvml_sampler_settled(c->sampler, &rule, c->load_start_s, &median);
    c->settled_at_s = elapsed_s;
    c->settled_mhz = median;
    c->loaded_s = kb_nvml_sampler_elapsed_s(c->sampler) - c->load_start_s;
    if (settled < 0) {          /* no memory to judge: measure as is, reported as not judged */
        c->settled = -1;
        return 0;
    }
    if (settled != KB_UNSETTLED || elapsed_s >= c->settle_max_s) {
        c->settled = settled != KB_UNSETTLED;
        /* Under a limit (or still moving), sample across several swings of its controller. */
        if (settled != KB_SETTLED) {
            b->min_sampling_s = KB_LIMITED_MIN_SAMPLING_S;
            c->settle_min_sampling_s = KB_LIMITED_MIN_SAMPLING_S;
        }
        return 0;
    }
    return 1;
}

/* Pop `key` from opts, a copy of the caller's kwargs (which keeps the value alive). */
static int pop_opt(PyObject *opts, const char *key, PyObject **out)
{
    *out = PyDict_GetItemString(opts, key);
    return *out ? PyDict_DelItemString(opts, key) : 0;
}

/* measure_cuda(fn, arg_sets, kwargs=None, *, stream, device=0, mode='events', cold=None,
 *              flush_bytes=0, unroll=1, gate=True, keep_busy=True, gate_batch=32,
 *              gate_timeout_s=1.0,
 *              busy_warmup_s=None, cupti_allow_foreign=False, sample_clocks=True,
 *              clock_period_s=0.005, settle_max_s=3.0, <loop config>) -> dict */
static PyObject *measure_cuda(PyObject *m, PyObject *args, PyObject *kw)
{
    PyObject *fn, *arg_sets, *kwargs = Py_None, *opts = NULL, *out = NULL, *v;
    kb_state *st = kb_get_state(m);
    cuda_ctx c;
    kb_loop_config cfg;
    kb_loop_result res;
    int pushed = 0, foreign = 0, locked = 0;
    size_t persisting_limit = 0;
    double busy_s_done = 0.0;
    memset(&c, 0, sizeof c);
    memset(&res, 0, sizeof res);

    if (!PyArg_ParseTuple(args, "OO|O:measure_cuda", &fn, &arg_sets, &kwargs))
        return NULL;
    c.m = m;
    c.fn = fn;
    if (kb_check_arg_sets(arg_sets, kwargs) < 0)
        return NULL;
    c.fn_is_graph = kb_graph_check(m, fn);
    if (!c.fn_is_graph && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "fn must be callable, got %.100s",
                            Py_TYPE(fn)->tp_name);
    c.arg_sets = arg_sets;
    c.n_sets = PyTuple_GET_SIZE(arg_sets);
    c.kwargs = kwargs == Py_None ? NULL : kwargs;

    /* ---- options */
    opts = kw ? PyDict_Copy(kw) : PyDict_New();
    if (opts == NULL)
        return NULL;
    unsigned long long stream_handle = 0;
    Py_ssize_t flush_bytes = 0, gate_batch = 32;
    double gate_timeout = 1.0, busy_warmup = -1.0, unroll = 1.0;
    int use_gate = 1, allow_foreign = 0, sample_clocks = 1;
    c.keep_busy = 1;
    c.clock_period_s = 0.005;
    c.settle_max_s = 3.0;
    c.regime = REGIME_SUSTAINED;
    c.settled = -1;
    c.settled_at_s = c.settled_mhz = NAN;
    c.ordinal = 0;
    if (pop_opt(opts, "stream", &v) < 0)
        goto error;
    if (v == NULL) {
        PyErr_SetString(PyExc_TypeError, "measure_cuda needs stream= (the stream handle the "
                                         "callable launches on; 0 for the legacy default)");
        goto error;
    }
    stream_handle = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred())
        goto error;
    c.stream = (CUstream)(uintptr_t)stream_handle;
#define INT_OPT(key, var)                                                                      \
    if (pop_opt(opts, key, &v) < 0)                                                            \
        goto error;                                                                            \
    if (v != NULL) {                                                                           \
        var = PyLong_AsSsize_t(v);                                                             \
        if (PyErr_Occurred())                                                                  \
            goto error;                                                                        \
    }
#define FLOAT_OPT(key, var)                                                                    \
    if (pop_opt(opts, key, &v) < 0)                                                            \
        goto error;                                                                            \
    if (v != NULL && v != Py_None) {                                                           \
        var = PyFloat_AsDouble(v);                                                             \
        if (PyErr_Occurred())                                                                  \
            goto error;                                                                        \
    }
#define BOOL_OPT(key, var)                                                                     \
    if (pop_opt(opts, key, &v) < 0)                                                            \
        goto error;                                                                            \
    if (v != NULL) {                                                                           \
        var = PyObject_IsTrue(v);                                                              \
        if (var < 0)                                                                           \
            goto error;                                                                        \
    }
    Py_ssize_t ordinal = 0;
    INT_OPT("device", ordinal);
    c.ordinal = (int)ordinal;
    INT_OPT("flush_bytes", flush_bytes);
    INT_OPT("gate_batch", gate_batch);
    FLOAT_OPT("gate_timeout_s", gate_timeout);
    FLOAT_OPT("busy_warmup_s", busy_warmup);
    FLOAT_OPT("unroll", unroll);
    FLOAT_OPT("clock_period_s", c.clock_period_s);
    FLOAT_OPT("settle_max_s", c.settle_max_s);
    BOOL_OPT("gate", use_gate);
    BOOL_OPT("keep_busy", c.keep_busy);
    BOOL_OPT("cupti_allow_foreign", allow_foreign);
    BOOL_OPT("sample_clocks", sample_clocks);
#undef INT_OPT
#undef FLOAT_OPT
#undef BOOL_OPT
    if (flush_bytes < 0 || gate_batch < 1 || !(gate_timeout > 0) || !(unroll >= 1) ||
        !(c.clock_period_s > 0) || !(c.settle_max_s >= 0)) {
        char buf[256];   /* PyErr_Format has no %g */
        snprintf(buf, sizeof buf, "gate_timeout_s > 0 (%g), unroll >= 1 (%g), clock_period_s > 0 "
                 "(%g), settle_max_s >= 0 (%g)", gate_timeout, unroll, c.clock_period_s,
                 c.settle_max_s);
        PyErr_Format(PyExc_ValueError, "invalid option: need flush_bytes >= 0 (%zd), "
                                       "gate_batch >= 1 (%zd), %s", flush_bytes, gate_batch, buf);
        goto error;
    }
    c.unroll = unroll;
    c.use_gate = use_gate;
    c.sample_clocks = sample_clocks;
    c.mode = MODE_EVENTS;
    if (pop_opt(opts, "mode", &v) < 0)
        goto error;
    if (v != NULL) {
        if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "cupti") == 0)
            c.mode = MODE_CUPTI;
        else if (!(PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "events") == 0)) {
            PyErr_Format(PyExc_ValueError, "mode must be 'events' or 'cupti', got %R", v);
            goto error;
        }
    }
    if (pop_opt(opts, "regime", &v) < 0)
        goto error;
    if (v != NULL && v != Py_None) {
        if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "burst") == 0)
            c.regime = REGIME_BURST;
        else if (!(PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "sustained") == 0)) {
            PyErr_Format(PyExc_ValueError, "regime must be 'sustained' or 'burst', got %R", v);
            goto error;
        }
    }
    if (c.regime == REGIME_BURST)
        c.keep_busy = 0;        /* bridges would keep the GPU loaded between bursts */
    if (kb_pop_cold_mode(opts, &c.cold) < 0)
        goto error;
    if (c.cold == KB_COLD_ROTATE && c.n_sets < 2 && !c.fn_is_graph) {
        PyErr_SetString(PyExc_ValueError,
                        "cold='rotate' needs at least 2 argument sets to rotate through");
        goto error;
    }
    if (kb_finish_options(opts, "measure_cuda", &cfg) < 0)
        goto error;
    /* One measuring loop at a time in the process (measure.c): benches from two threads
     * would share the GPU, the gate and CUPTI, and each would time the other's work. */
    if (kb_measure_lock_acquire(m) < 0)
        goto error;
    locked = 1;
    if (busy_warmup < 0)
        busy_warmup = cfg.warmup_s;
    /* The busy kernel brings the clocks up; the callable's own warm-up then only needs to
     * reach steady state for its caches, allocator and JIT. */
    if (cfg.warmup_min < 3)
        cfg.warmup_min = 3;
    if (cfg.warmup_s > 0.1)
        cfg.warmup_s = 0.1;

    /* ---- CUDA set-up */
    if ((c.cu = kb_cuda(m)) == NULL)
        goto error;
    if (kb_ctx_enter(m, c.cu, c.ordinal, &pushed) < 0)
        goto error;
    if (KB_CU(m, c.cu->cuDeviceGet(&c.dev, c.ordinal)) < 0)
        goto error;
    CUstreamCaptureStatus cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (KB_CU(m, c.cu->cuStreamIsCapturing(c.stream, &cap_status)) < 0)
        goto error;
    if (cap_status != CU_STREAM_CAPTURE_STATUS_NONE) {
        PyErr_SetString(st->CaptureError, "the stream is being captured into a CUDA graph: "
                                          "kbench cannot measure inside a capture");
        goto error;
    }
    if (kb_l2_persisting_reset(m, c.cu, &persisting_limit) < 0)
        goto error;
    c.gate_cap = c.gate_cap_initial = gate_batch < cfg.batch_max ? gate_batch : cfg.batch_max;
    c.n_ev = 2 * c.gate_cap + 4;
    c.ev = calloc((size_t)c.n_ev, sizeof(CUevent));
    c.acts = calloc((size_t)c.gate_cap, sizeof(kb_iter_activity));
    if (c.ev == NULL || c.acts == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < c.n_ev; i++)
        if (KB_CU(m, c.cu->cuEventCreate(&c.ev[i], CU_EVENT_DEFAULT)) < 0) {
            c.ev[i] = NULL;
            goto error;
        }
    if (c.use_gate && kb_gate_init(m, c.cu, &c.gate, gate_timeout) < 0)
        goto error;
    c.gate_ready = c.use_gate;
    if (c.cold == KB_COLD_FLUSH && kb_l2_flusher_init(m, c.cu, c.dev, &c.flusher,
                                                   (size_t)flush_bytes) < 0)
        goto error;
    {
        /* One untimed, ungated first call: a first call's one-off host work (JIT, library
         * handles, autotuning) must not stall the gated warm-up behind the watchdog, nor leave
         * the GPU idle where the warm-up believes it loaded. */
        kb_deferred d = KB_DEFERRED_INIT;
        if (launch_once(&c, "the first (untimed, ungated)") < 0)
            goto error;
        Py_BEGIN_ALLOW_THREADS
        KB_DEFER(&d, c.cu->cuStreamSynchronize(c.stream));
        Py_END_ALLOW_THREADS
        if (KB_CU_RAISE(m, &d) < 0)
            goto error;
    }
    if (c.mode == MODE_CUPTI && kb_cupti_begin(m, allow_foreign, &c.trace, &foreign) < 0)
        goto error;
    if (c.trace != NULL) {
        if ((c.builtins = kb_builtin_get(m, c.cu, c.ordinal)) == NULL)
            goto error;
        const char *br = getenv("KBENCH_CUPTI_BRIDGE_RECORDS");   /* a diagnosis */
        c.bridge_records = br != NULL && strcmp(br, "on") == 0;
    }
    c.next_id = 1;

    /* Clock ramp-up: skipped when the GPU was busy with kbench a moment ago. */
    if (busy_warmup > 0 && kb_now_s() > st->gpu_warm_until) {
        kb_deferred d = KB_DEFERRED_INIT;
        kb_builtin_kernels *bk = kb_builtin_get(m, c.cu, c.ordinal);
        if (bk == NULL || kb_builtin_busy(m, c.cu, bk, c.dev, c.stream, busy_warmup) < 0)
            goto error;
        Py_BEGIN_ALLOW_THREADS
        KB_DEFER(&d, c.cu->cuStreamSynchronize(c.stream));
        Py_END_ALLOW_THREADS
        if (KB_CU_RAISE(m, &d) < 0)
            goto error;
        busy_s_done = busy_warmup;
    }

    if (c.sample_clocks) {
        /* Sampled from the callable's warm-up on, so the warm-up can wait for the clock to
         * settle; the timed part is marked at its first batch. */
        c.sampler = kb_nvml_sampler_start(m, c.ordinal, c.clock_period_s);
        if (c.sampler == NULL) {
            PyErr_Clear();          /* NVML is optional: no clocks, but the measurement stands */
            c.sample_clocks = 0;
        }
    }

    kb_backend backend = {.name = c.mode == MODE_CUPTI ? "cupti" : "events", .ctx = &c,
                          .run_batch = cuda_run_batch, .keep_warming = cuda_keep_warming};
    if (kb_loop_run(&backend, &cfg, &res) < 0)
        goto error;
    if (c.bridge_pending) {         /* the last bridge may still run */
        kb_deferred d = KB_DEFERRED_INIT;
        Py_BEGIN_ALLOW_THREADS
        KB_DEFER(&d, c.cu->cuStreamSynchronize(c.stream));
        Py_END_ALLOW_THREADS
        c.bridge_pending = 0;
        if (KB_CU_RAISE(m, &d) < 0)
            goto error;
        if (c.prev_bridge > 0 && c.sub_batches > 0 &&  /* the last sub-batch's bridge */
            count_bridge(&c, 2 * c.gate_cap_initial + ((c.sub_batches - 1) & 1)) < 0)
            goto error;
    }
    st->gpu_warm_until = kb_now_s() + 1.0;

    /* ---- result */
    out = kb_loop_result_to_dict(&res, &cfg);
    if (out == NULL)
        goto error;
    PyObject *clocks = Py_None;
    if (c.sampler != NULL) {
        clocks = kb_nvml_sampler_stop(m, c.sampler);
        c.sampler = NULL;
        if (clocks == NULL) {
            PyErr_Clear();
            clocks = Py_None;
        }
    }
    else
        Py_INCREF(clocks);
    PyObject *names = c.trace ? kb_cupti_names(c.trace) : Py_NewRef(Py_None);
    PyObject *cuda = Py_BuildValue(
        "{s:s,s:N,s:N,s:N,s:N,s:N,s:N,s:{s:O,s:n,s:n,s:n,s:n,s:d},s:n,s:n,s:d,s:K,s:O,s:d,s:d,"
        "s:i,s:K,s:{s:O,s:d,s:d,s:d,s:d},s:{s:n,s:d,s:d}}",
        "backend", backend.name,
        "events_s", kb_array_copy(c.side.events_s, c.side.n, NPY_FLOAT64, sizeof(double)),
        "span_s", kb_array_copy(c.side.span_s, c.side.n, NPY_FLOAT64, sizeof(double)),
        "kernels_per_iter", kb_array_copy(c.side.kernels, c.side.n, NPY_UINT32, sizeof(uint32_t)),
        "copies_per_iter", kb_array_copy(c.side.copies, c.side.n, NPY_UINT32, sizeof(uint32_t)),
        "names", names, "clocks", clocks,
        "gate", "enabled", c.use_gate ? Py_True : Py_False, "batch", c.gate_cap_initial,
        "batch_final", c.gate_cap, "watchdog_fired", c.gate_fired, "fired_kept",
        c.gate_fired_kept, "timeout_s", gate_timeout,
        "flush_bytes", (Py_ssize_t)c.flusher.bytes, "arg_sets", c.n_sets,
        "unroll", c.unroll, "persisting_l2_limit_bytes", (unsigned long long)persisting_limit,
        "cupti_foreign_subscriber", foreign ? Py_True : Py_False, "cupti_ticks_per_ns",
        c.trace ? kb_cupti_ticks_per_ns(c.trace) : 1.0, "busy_warmup_s",
        busy_s_done, "device", c.ordinal, "cupti_dropped",
        (unsigned long long)(c.trace ? kb_cupti_dropped(c.trace) : 0),
        "settle", "settled", c.settled < 0 ? Py_None : c.settled ? Py_True : Py_False,
        "at_s", c.settled_at_s, "sm_mhz", c.settled_mhz, "max_s", c.settle_max_s,
        "min_sampling_s", c.settle_min_sampling_s,
        "between_batches", "n", c.gaps, "total_s", c.gap_sum_s, "max_s", c.gap_max_s);
    if (cuda != NULL &&
        kb_dict_set_steal(cuda, "keep_busy",
                          Py_BuildValue("{s:O,s:n,s:n,s:d,s:d}", "enabled",
                                        c.keep_busy ? Py_True : Py_False, "bridges", c.bridges,
                                        "iterations", c.bridge_iters, "gpu_s", c.bridge_gpu_s,
                                        "turnaround_s", c.turnaround_s)) < 0)
        Py_CLEAR(cuda);
    if (cuda != NULL &&
        kb_dict_set_steal(
            cuda, "regime",
            Py_BuildValue("{s:s,s:O,s:d,s:n,s:{s:n,s:n,s:d,s:d,s:d,s:N,s:N,s:N}}", "name",
                          c.regime == REGIME_BURST ? "burst" : "sustained", "clocks_locked",
                          c.clocks_locked ? Py_True : Py_False, "loaded_s", c.loaded_s,
                          "warmup_watchdog_fired", c.warmup_fired, "burst", "batches",
                          c.burst_batches, "unrecovered", c.burst_unrecovered, "wait_s",
                          c.burst_wait_s, "batch_s", BURST_BATCH_S, "rest", BURST_REST,
                          "sm_mhz_min",
                          c.burst_sm_n ? PyFloat_FromDouble(c.burst_sm_min) : Py_NewRef(Py_None),
                          "sm_mhz_mean",
                          c.burst_sm_n ? PyFloat_FromDouble(c.burst_sm_sum / (double)c.burst_sm_n)
                                       : Py_NewRef(Py_None),
                          "sm_mhz_max",
                          c.burst_sm_n ? PyFloat_FromDouble(c.burst_sm_max)
                                       : Py_NewRef(Py_None))) < 0)
        Py_CLEAR(cuda);
    if (cuda != NULL &&
        kb_dict_set_steal(cuda, "stepped_min_sampling_s",
                          PyFloat_FromDouble(c.stepped ? KB_STEPPED_MIN_SAMPLING_S : 0.0)) < 0)
        Py_CLEAR(cuda);
    if (cuda != NULL && c.trace != NULL) {
        uint64_t by_default = 0, forced = 0;
        kb_cupti_flush_counts(c.trace, &by_default, &forced);
        if (kb_dict_set_steal(cuda, "cupti_flushes",
                              Py_BuildValue("{s:K,s:K,s:O}", "default",
                                            (unsigned long long)by_default, "forced",
                                            (unsigned long long)forced, "bridge_records",
                                            c.bridge_records ? Py_True : Py_False)) < 0)
            Py_CLEAR(cuda);
    }
    if (kb_dict_set_steal(out, "cuda", cuda) < 0 ||
        kb_dict_set_steal(out, "backend", PyUnicode_FromString(backend.name)) < 0) {
        Py_CLEAR(out);
        goto error;
    }

error:
    /* One cleanup path for success and failure: CUPTI released, gate opened, buffers freed,
     * the context popped; a pending exception is kept. */
    {
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb);
        if (c.bridge_pending && c.cu != NULL) {
            /* a bridge queued behind a failed batch: let it end before CUPTI is released */
            if (c.gate_ready)
                kb_gate_open(&c.gate);
            Py_BEGIN_ALLOW_THREADS
            c.cu->cuStreamSynchronize(c.stream);
            Py_END_ALLOW_THREADS
        }
        if (c.sampler != NULL)
            kb_nvml_sampler_abort(c.sampler);
        if (c.trace != NULL) {
            kb_cupti_end(m, c.trace);
            /* how CUPTI was left, known only now: into the result */
            PyObject *cu_dict = out ? PyDict_GetItemString(out, "cuda") : NULL;
            PyObject *how = cu_dict ? PyUnicode_FromString(kb_get_state(m)->cupti_detach) : NULL;
            if (how == NULL || PyDict_SetItemString(cu_dict, "cupti_detach", how) < 0)
                PyErr_Clear();
            Py_XDECREF(how);
        }
        if (c.cu != NULL) {
            if (c.gate_ready) {
                kb_gate_open(&c.gate);
                Py_BEGIN_ALLOW_THREADS
                c.cu->cuStreamSynchronize(c.stream);
                Py_END_ALLOW_THREADS
                kb_gate_fini(c.cu, &c.gate);
            }
            kb_l2_flusher_fini(c.cu, &c.flusher);
            for (Py_ssize_t i = 0; c.ev && i < c.n_ev; i++)
                if (c.ev[i])
                    c.cu->cuEventDestroy(c.ev[i]);
            kb_ctx_leave(c.cu, pushed);
        }
        if (locked)
            kb_measure_lock_release(m);
        PyErr_Restore(et, ev, etb);
    }
    free(c.ev);
    free(c.acts);
    side_free(&c.side);
    kb_loop_result_free(&res);
    Py_XDECREF(opts);
    return out;
}

static PyMethodDef cuda_methods[] = {
    {"measure_cuda", (PyCFunction)(void (*)(void))measure_cuda, METH_VARARGS | METH_KEYWORDS,
     "measure_cuda(fn, arg_sets, kwargs=None, *, stream, device=0, mode='events'|'cupti', "
     "cold=None|'flush'|'rotate', flush_bytes=0, unroll=1, gate=True, keep_busy=True, "
     "gate_batch=32, "
     "gate_timeout_s=1.0, busy_warmup_s=None, cupti_allow_foreign=False, sample_clocks=True, "
     "clock_period_s=0.005, settle_max_s=3.0, regime='sustained'|'burst', <loop config>) -> dict\n\n"
     "Time fn(*arg_sets[i % len]) (or launches of a CudaGraph fn) on a CUDA stream."},
    {NULL, NULL, 0, NULL},
};

int kb_measure_cuda_module_init(PyObject *m)
{
    if (kb_cuda_kernels_module_init(m) < 0 || kb_graph_module_init(m) < 0 ||
        kb_cupti_module_init(m) < 0)
        return -1;
    return PyModule_AddFunctions(m, cuda_methods);
}
