/* measure_cuda.c -- measure_cuda(): the CUDA backend of the timing loop, as a pipeline of named
 * steps: parse (cuda_options.c), set up, settle, sample (batches: queue, bridge, wait, read),
 * result, tear down. The timers (events, CUPTI, graph replay) sit behind gpu_timer.h.
 *
 * One batch, in stream order on the measured stream:
 *
 *   [gate: wait flag >= g]  ( [L2 flush]  [event a_i]  push(i) fn() pop  [event b_i] )*n
 *
 * The host queues the whole batch behind the gate, then opens it, so the device runs the batch
 * back to back and host launch gaps are not timed. events: sample i = b_i - a_i. cupti: sample
 * i = the summed duration of the kernels/memcpys/memsets CUPTI attributes to iteration i
 * through its external correlation id; the flush has no id and is excluded; the events are
 * recorded too, for comparison (timer_events.c, timer_cupti.c). A CudaGraph given as fn is
 * launched directly from C, and `unroll` divides each sample by the number of calls captured in
 * one launch (timer_graph.c). An optional pre_sample callable runs before each call of fn
 * (priming and warm-up included), while the batch is queued behind the gate, before the flush
 * and outside the timed part and CUPTI's attribution; it turns the bridges below off.
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
#include "kb_regime.h"
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

/* Burst: each timed batch runs at most this much GPU time, rests at least BURST_REST times its
 * GPU time (a duty cycle <= 25% keeps the averaged power far under the cap), then starts once
 * the GPU has recovered, waiting at most BURST_RECOVER_MAX_S. On the H200 a power-capped GEMM
 * kept its peak clock for ~0.1 s of load. */
#define BURST_BATCH_S 0.005
#define BURST_REST 3.0
#define BURST_RECOVER_MAX_S 2.0
#define BURST_FRESH_READING_S 0.001   /* a batch this long needs a reading taken after it */
#define KB_CUDA_BURST_WARMUP_MAX_S BURST_BATCH_S   /* burst: the callable's own warm-up */


/* Per timed iteration, kept for the result. */
typedef struct {
    double *events_s;       /* event-pair time (both modes) */
    double *span_s;         /* cupti: first start to last end */
    double *summed_s;       /* cupti: the durations summed (the figure counts overlap once) */
    uint32_t *kernels;      /* cupti: kernels attributed to the iteration */
    uint32_t *copies;       /* cupti: memcpys + memsets attributed */
    Py_ssize_t n, cap;
} side_arrays;

/* The counters of timed sub-batches, as they stood when a loop batch taken while settling
 * began: the batches before the first one kept are taken off them. */
typedef struct {
    double start_s;                 /* sampler time (before the batch was queued) */
    double start_now_s;             /* the same instant on kb_now_s's clock */
    Py_ssize_t side_n;              /* samples kept so far (c->side.n) */
    double gap_sum_s, bridge_gpu_s;
    Py_ssize_t gaps, bridges, bridge_iters, gate_fired, gate_fired_kept;
} tentative_batch;

typedef struct {
    PyObject *m;
    const kb_cuda_api *cu;
    kb_cuda_options opt;            /* parsed once (cuda_options.c) */
    CUdevice dev;
    PyObject *fn;                   /* Python callable, or a CudaGraph (launched from C) */
    int fn_is_graph;
    PyObject *arg_sets;             /* tuple of tuples */
    Py_ssize_t n_sets, next_set;
    PyObject *kwargs;               /* dict or NULL */
    int pushed;                     /* a context was pushed: pop it at tear down */
    int locked;                     /* the measure lock is held */
    size_t persisting_limit;
    double busy_s_done;             /* the clock ramp-up that ran */
    /* the timer chain: events, wrapped by CUPTI, wrapped by graph replay; `timer` the outermost */
    kb_gpu_timer timers[3];
    kb_gpu_timer *timer;
    int cupti;                      /* the chain holds the CUPTI timer */
    kb_gpu_sample *samples;         /* gate_cap: one batch as read */
    kb_gpu_sample *deferred;        /* deferred_cap: the deferred fields, as finished */
    Py_ssize_t deferred_cap;
    CUevent marks[4];               /* the two batch-end markers, then the two bridge ends */
    kb_gate gate;
    int gate_ready;
    Py_ssize_t gate_cap;            /* iterations per gated sub-batch */
    Py_ssize_t gate_cap_initial;
    Py_ssize_t gate_fired;          /* sub-batches the watchdog opened */
    Py_ssize_t gate_fired_kept;     /* of those, kept because the cap was already 1 */
    kb_l2_flusher flusher;
    Py_ssize_t sub_batches;         /* queued so far: its parity picks the markers */
    double gap_sum_s, gap_max_s;    /* GPU idle from a sub-batch's end (or its bridge's) to the */
    Py_ssize_t gaps;                /* next one's first event (timed sub-batches) */
    Py_ssize_t bridge_n;            /* iterations to queue after the next sub-batch, and after */
    Py_ssize_t bridge_n_end;        /* one that ends a loop batch (followed by a collection) */
    int bridge_queued;              /* after the last sub-batch: its bridge end is recorded */
    int bridge_pending;             /* a bridge may still run: drain before leaving */
    double ready_at_s;              /* host clock when the last sub-batch had been waited for */
    double turnaround_s;            /* host time from then to the next gate opening; the same */
    double turnaround_end_s;        /* after a sub-batch that ended a loop batch: the timer's */
    int prev_ended;                 /* collection and the loop's rule are in it */
    Py_ssize_t bridges, bridge_iters;
    double bridge_gpu_s;            /* GPU time the bridges of timed sub-batches ran */
    Py_ssize_t prev_bridge;         /* iterations in the last sub-batch's bridge (0: none) */
    side_arrays side;
    kb_nvml_sampler *sampler;       /* from the callable's warm-up on; marked at the timed part */
    int sampler_marked;
    int settled;                    /* -1 not judged (no clocks), 0 gave up at settle_max_s, 1 */
    double settled_at_s, settled_mhz;
    double settle_min_sampling_s;   /* the 1 s hold when it settled under a limit (or not) */
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
    double burst_sm_min, burst_sm_max, burst_sm_sum;
    Py_ssize_t burst_sm_n;
    int stepped;                    /* a sub-2 us CUPTI figure: sampled at least 0.2 s */
    Py_ssize_t iteration;           /* calls of fn so far (for error notes) */
    int busy_explicit;              /* the caller gave busy_warmup_s */
    double callable_warmup_max_s;   /* the clamp on the callable's own warm-up */
    kb_settle_carry carry;          /* the last measurement's settled state (sm_mhz NaN: none) */
    double carried_from_s_ago;      /* how long before this load it ended; NaN: none carried */
    int settled_unlimited;          /* settled with nothing limiting the clock (KB_SETTLED) */
    int settled_by;                 /* KB_SETTLED_BY_*: the two-window rule, the carried state or
                                       the board's maximum clock (one short window) */
    int end_settled;                /* the rule judged again at the end of sampling: what the */
    double end_sm_mhz;              /* next measurement on the device may carry */
    double cupti_begin_s;           /* CUPTI's set-up: subscribe (or take the lingering */
    double cupti_first_read_s;      /* subscriber), enable, calibrate; the first batch's read */
    int cupti_reads;
    tentative_batch *tentative;     /* the loop batches timed while settling (settled_keep) */
    Py_ssize_t tentative_n, tentative_cap;
    double settled_since_s;         /* sampler time from which the readings show the settled
                                     * state (kb_clock_settled_since); INFINITY: none */
    Py_ssize_t tentative_kept;      /* samples kept from them (gap_max_s keeps its maximum
                                     * over all timed sub-batches, kept or not) */
    double tentative_from_s;        /* sampler time the first kept batch began */
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
    double *su = kb_resize(s->summed_s, cap, sizeof *su);
    if (su)
        s->summed_s = su;
    uint32_t *k = kb_resize(s->kernels, cap, sizeof *k);
    if (k)
        s->kernels = k;
    uint32_t *c = kb_resize(s->copies, cap, sizeof *c);
    if (c)
        s->copies = c;
    if (!e || !sp || !su || !k || !c) {
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
    free(s->summed_s);
    free(s->kernels);
    free(s->copies);
    memset(s, 0, sizeof *s);
}

/* Wait for the stream with the GIL released (the ready-made step of several stages). */
static int drain_stream(cuda_ctx *c)
{
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    KB_DEFER(&d, c->cu->cuStreamSynchronize(c->opt.stream));
    Py_END_ALLOW_THREADS
    return KB_CU_RAISE(c->m, &d);
}

/* Error paths: drain without a check (the first error is the one raised). */
static void drain_stream_quiet(cuda_ctx *c)
{
    Py_BEGIN_ALLOW_THREADS
    c->cu->cuStreamSynchronize(c->opt.stream);
    Py_END_ALLOW_THREADS
}

/* The caller's pre_sample hook, before a call of fn (and before its flush and start mark, so
 * nothing it queues is timed or attributed). */
static int call_pre_sample(cuda_ctx *c, const char *phase)
{
    if (c->opt.pre_sample == NULL)
        return 0;
    PyObject *r = PyObject_CallNoArgs(c->opt.pre_sample);
    if (r == NULL) {
        kb_add_exception_note("raised by pre_sample before %s iteration %zd (kbench CUDA "
                              "backend); the gate was opened and the stream drained",
                              phase, c->iteration);
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Launch one iteration's work (the callable, or the graph). */
static int launch_once(cuda_ctx *c, const char *phase)
{
    if (c->fn_is_graph)
        return kb_graph_launch(c->m, c->cu, (kb_graph_object *)c->fn, c->opt.stream);
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
static Py_ssize_t bridge_size(const cuda_ctx *c, double turnaround_s, double iter_gpu_s,
                              double queue_per_iter_s, Py_ssize_t n)
{
    if (!c->opt.keep_busy || turnaround_s <= 0 || !(iter_gpu_s > 0))
        return 0;
    if (iter_gpu_s < queue_per_iter_s || turnaround_s < 0.01 * iter_gpu_s * (double)n)
        return 0;
    double want = ceil(1.5 * turnaround_s / iter_gpu_s);
    return want < 1 ? 1 : want > (double)c->gate_cap_initial ? c->gate_cap_initial
                                                              : (Py_ssize_t)want;
}

/* Add the bridge that ran between the marker of parity p and its end (after the previous
 * sub-batch) to the keep-busy totals. */
static int count_bridge(cuda_ctx *c, Py_ssize_t p)
{
    float ms = 0.f;
    if (KB_CU(c->m, c->cu->cuEventElapsedTime(&ms, c->marks[p], c->marks[p + 2])) < 0)
        return -1;
    c->bridge_gpu_s += (double)ms * 1e-3;
    c->bridges++;
    c->bridge_iters += c->prev_bridge;
    return 0;
}

/* sample, queue: n samples behind the (closed) gate, each
 * [pre_sample] [flush] start(i) fn end(i); then the timer's end of batch. */
static int queue_samples(cuda_ctx *c, Py_ssize_t n, int warmup, int ends)
{
    kb_gpu_timer *t = c->timer;
    const char *phase = warmup ? "a warm-up" : "a timed";
    if (t->batch_begin(t, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (call_pre_sample(c, phase) < 0)
            return -1;
        if (c->opt.cold == KB_COLD_FLUSH &&
            kb_l2_flush(c->m, c->cu, &c->flusher, c->opt.stream) < 0)
            return -1;
        if (t->sample_start(t, i) < 0)
            return -1;
        int ok = launch_once(c, phase) == 0;
        c->iteration++;
        if (t->sample_end(t, i, ok) < 0)
            return -1;
    }
    return t->batch_end(t, ends);
}

/* bridge: untimed iterations queued while the GPU runs the sub-batch, to keep it busy through
 * the host's turnaround after it. The timer never attributes them (no correlation id). */
static int queue_bridge(cuda_ctx *c, Py_ssize_t bridge, CUevent bridge_end)
{
    kb_gpu_timer *t = c->timer;
    int failed = 0;
    if (bridge > 0 && t->untimed(t, 1) < 0)
        failed = 1;
    for (Py_ssize_t i = 0; i < bridge && !failed; i++)
        if (launch_once(c, "an untimed keep-busy") < 0)
            failed = 1;
    if (bridge > 0) {
        if (failed) {
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);      /* keep the first exception */
            t->untimed(t, 0);
            PyErr_Clear();
            PyErr_Restore(et, ev, etb);
        }
        else if (t->untimed(t, 0) < 0)
            failed = 1;
    }
    c->bridge_queued = bridge > 0 && !failed;
    if (bridge > 0) {
        c->bridge_pending = 1;
        if (!failed && KB_CU(c->m, c->cu->cuEventRecord(bridge_end, c->opt.stream)) < 0)
            failed = 1;
    }
    return failed ? -1 : 0;
}

/* Wait for the sub-batch: its marker when a bridge runs behind it, else the whole stream. On
 * failure drain the stream, so it is left usable and nothing of ours is still queued. */
static int wait_batch(cuda_ctx *c, CUevent marker, int failed)
{
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    if (c->bridge_queued)
        KB_DEFER(&d, c->cu->cuEventSynchronize(marker));
    else
        KB_DEFER(&d, c->cu->cuStreamSynchronize(c->opt.stream));
    Py_END_ALLOW_THREADS
    c->ready_at_s = kb_now_s();
    if (!c->bridge_queued)
        c->bridge_pending = 0;
    if (failed) {
        if (d.code != 0) {
            /* The callable failed and the stream did too: keep the first, mention the second. */
            const char *name = NULL;
            c->cu->cuGetErrorName((CUresult)d.code, &name);
            kb_add_exception_note("cuStreamSynchronize afterwards returned %s",
                                  name ? name : "an error");
        }
        return -1;
    }
    return KB_CU_RAISE(c->m, &d);
}

/* The GPU idle from the previous sub-batch's marker (or its bridge's end) to this one's first
 * sample, and the previous bridge's GPU time. */
static int count_gap(cuda_ctx *c)
{
    float ms = 0.f;
    Py_ssize_t p = (c->sub_batches - 1) & 1;
    CUevent prev = c->marks[p];
    if (c->prev_bridge) {
        if (count_bridge(c, p) < 0)
            return -1;
        prev = c->marks[p + 2];
    }
    CUevent first = (CUevent)c->timer->start_mark(c->timer, 0);
    if (KB_CU(c->m, c->cu->cuEventElapsedTime(&ms, prev, first)) < 0)
        return -1;
    c->gap_sum_s += (double)ms * 1e-3;
    if ((double)ms * 1e-3 > c->gap_max_s)
        c->gap_max_s = (double)ms * 1e-3;
    c->gaps++;
    return 0;
}

/* Keep a read batch's samples: out[i] the figure, the side arrays the rest (a deferring
 * timer's figure, span and counts are filled in by finish_reads). */
static int keep_samples(cuda_ctx *c, Py_ssize_t n, double *out)
{
    if (side_reserve(&c->side, c->side.n + n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const kb_gpu_sample *s = &c->samples[i];
        Py_ssize_t k = c->side.n + i;
        c->side.events_s[k] = s->bracket_s;
        c->side.span_s[k] = s->span_s;
        c->side.summed_s[k] = s->summed_s;
        c->side.kernels[k] = s->kernels;
        c->side.copies[k] = s->copies;
        out[i] = s->time_s;
    }
    c->side.n += n;
    return 0;
}

/* read: the timer's samples of the waited-for sub-batch, the gap before it, the next bridge's
 * size; the samples are kept unless it was a warm-up or the watchdog spoiled it. */
static int read_batch(cuda_ctx *c, Py_ssize_t n, double *out, int warmup, int fired,
                      Py_ssize_t bridge, double queue_per_iter_s)
{
    kb_gpu_timer *t = c->timer;
    int keep = !(warmup || (fired && c->gate_cap > 1));
    int flags = (!warmup && !fired ? KB_READ_NAMES : 0) | (keep ? KB_READ_KEEP : 0);
    if (t->read(t, n, flags, c->samples) < 0)
        return -1;
    double iter_sum_s = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        iter_sum_s += c->samples[i].launch_s;
        out[i] = c->samples[i].bracket_s;
    }
    if (!warmup && c->sub_batches > 0 && count_gap(c) < 0)
        return -1;
    c->prev_bridge = c->bridge_queued ? bridge : 0;
    c->sub_batches++;
    c->iter_gpu_s = iter_sum_s / (double)n;
    c->last_batch_gpu_s = iter_sum_s;
    c->bridge_n = bridge_size(c, c->turnaround_s, iter_sum_s / (double)n, queue_per_iter_s, n);
    /* Until a turnaround after a collection has been seen, the plain one stands for it. */
    c->bridge_n_end = bridge_size(c, c->turnaround_end_s > 0 ? c->turnaround_end_s
                                                             : c->turnaround_s,
                                  iter_sum_s / (double)n, queue_per_iter_s, n);
    return keep ? keep_samples(c, n, out) : 0;
}

/* The timer's deferred fields of the kept samples out[0..n), whose side arrays start at
 * side_from: one collection for every sub-batch read since the last (n = 0 after warm-up
 * sub-batches, whose samples are not kept: it releases what they left). */
static int finish_reads(cuda_ctx *c, double *out, Py_ssize_t side_from, Py_ssize_t n)
{
    kb_gpu_timer *t = c->timer;
    if (t->finish == NULL)
        return 0;
    if (n > c->deferred_cap) {
        kb_gpu_sample *p = realloc(c->deferred, (size_t)n * sizeof *p);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->deferred = p;
        c->deferred_cap = n;
    }
    double start_s = kb_now_s();
    if (t->finish(t, n, c->deferred) < 0)
        return -1;
    if (c->cupti && c->cupti_reads++ == 0)     /* CUPTI's first flush and collection */
        c->cupti_first_read_s = kb_now_s() - start_s;
    for (Py_ssize_t i = 0; i < n; i++) {
        const kb_gpu_sample *d = &c->deferred[i];
        out[i] = d->time_s;
        c->side.span_s[side_from + i] = d->span_s;
        c->side.summed_s[side_from + i] = d->summed_s;
        c->side.kernels[side_from + i] = d->kernels;
        c->side.copies[side_from + i] = d->copies;
    }
    return 0;
}

/* Queue and run one gated sub-batch of n <= gate_cap iterations; out[i] gets sample i.
 * *fired is set when the watchdog had to open the gate. ends: the timer's collection and the
 * loop's rule follow it, so its bridge covers the longer turnaround. */
static int run_sub_batch(cuda_ctx *c, Py_ssize_t n, double *out, int warmup, int ends,
                         int *fired)
{
    *fired = 0;
    double queue_start_s = kb_now_s();
    if (c->opt.gate && kb_gate_close(c->m, c->cu, &c->gate, c->opt.stream) < 0)
        return -1;
    int failed = queue_samples(c, n, warmup, ends) < 0;
    /* A marker after the batch: the next batch's first event, minus this (or minus the end of
     * the bridge after it), is the time the GPU sat idle between the two. */
    CUevent marker = c->marks[c->sub_batches & 1];
    CUevent bridge_end = c->marks[2 + (c->sub_batches & 1)];
    if (!failed && KB_CU(c->m, c->cu->cuEventRecord(marker, c->opt.stream)) < 0)
        failed = 1;
    if (c->opt.gate)
        *fired = kb_gate_open(&c->gate);
    double opened_s = kb_now_s();
    if (c->ready_at_s > 0 && c->prev_ended)
        c->turnaround_end_s = opened_s - c->ready_at_s;
    else if (c->ready_at_s > 0)
        c->turnaround_s = opened_s - c->ready_at_s;
    c->prev_ended = ends;
    double queue_per_iter_s = (opened_s - queue_start_s) / (double)n;
    Py_ssize_t bridge = failed ? 0 : ends ? c->bridge_n_end : c->bridge_n;
    if (queue_bridge(c, bridge, bridge_end) < 0)
        failed = 1;
    if (wait_batch(c, marker, failed) < 0)
        return -1;
    return read_batch(c, n, out, warmup, *fired, bridge, queue_per_iter_s);
}

#define KB_STEPPED_BELOW_S 2e-6         /* 64 steps of 32 ns */
#define KB_STEPPED_MIN_SAMPLING_S 0.05


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
        rest_until += c->opt.clock_period_s;
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

/* The watchdog opened the gate of a sub-batch: 1 to re-measure it with a smaller cap, 0 to keep
 * it, -1 when even single-iteration batches keep firing (the callable blocks behind the gate). */
static int on_watchdog(cuda_ctx *c, int warmup, int settling)
{
    if ((warmup || settling) && c->sampler != NULL)
        /* the GPU idled behind the gate: the load starts again */
        c->load_start_s = kb_nvml_sampler_elapsed_s(c->sampler);
    if (warmup)
        c->warmup_fired++;
    else
        c->gate_fired++;
    if (c->gate_cap > 1) {
        /* The host could not queue k iterations before the watchdog: the samples may contain
         * launch gaps. Drop them and queue less at a time. */
        c->gate_cap = c->gate_cap / 2 > 0 ? c->gate_cap / 2 : 1;
        return 1;
    }
    c->gate_fired_kept++;
    if (c->gate_fired_kept >= 3) {
        char timeout[32];   /* PyErr_Format has no %f */
        snprintf(timeout, sizeof timeout, "%.2f", c->gate.timeout_s);
        PyErr_Format(kb_get_state(c->m)->KbenchError,
                     "the callable blocks on the host while the stream is gated: every "
                     "single-iteration batch waited for the %s s watchdog. It "
                     "synchronizes (.item(), torch.cuda.synchronize(), a device-to-host "
                     "copy) or launches on another stream that waits on this one; kbench "
                     "cannot time it behind a gate: pass gate=False", timeout);
        return -1;
    }
    return 0;
}

/* CUPTI's timestamps come in 32 ns steps on the H200, and a sub-2 us kernel's record sits on a
 * few neighbouring steps whose mix changed from one short run to the next (runs of 10-58
 * samples each sat on one or two steps, 64 ns apart). Such figures are sampled for at least
 * KB_STEPPED_MIN_SAMPLING_S, over many sub-batches: on the H200 (1-element, 16 K and 64 K adds,
 * cold and hot, 4-6 long runs each on two GPUs) every 10 ms stretch of a run had its median
 * within one step of all the runs' pooled median, while 5 ms stretches were two steps off in
 * 16% (a 1-element add, cold), and the rule stopping at its 128 samples (~9 ms cold, ~3 ms
 * hot) read two steps off in 2 of 4 runs. NOTES.md, Stepped figures. */
static void note_timestamp_steps(cuda_ctx *c, kb_backend *b, const double *out, Py_ssize_t n)
{
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

/* Samples whose timer fields wait for one collection: CUPTI flushes once per loop batch (or
 * per this many samples of a long one) instead of once per gated sub-batch (500-700 flushes a
 * default-length bench of a small kernel on the H200), and libcupti keeps 72 B of host memory
 * per flush (NOTES.md). The bound keeps the records held between flushes (CUPTI's buffers,
 * the trace's arrays) to a few MB. */
#define KB_DEFER_MAX 8192

/* A loop batch costs the CUPTI timer a collection (a flush and a host turnaround), whatever
 * its length: sampling batches of at least this long (the loop's own rule is 1% of max_time_s:
 * 0.2 ms batches in a 0.02 s bench, 55 flushes a bench on the H200; 6.3-6.7 with it). */
#define KB_COLLECT_MIN_BATCH_S 0.002

/* A loop batch timed while settling begins: the counters as they stand, for cuda_settled_keep. */
static int note_tentative(cuda_ctx *c)
{
    if (c->tentative_n == c->tentative_cap) {
        size_t cap = kb_grown_capacity((size_t)c->tentative_cap, (size_t)c->tentative_n + 1, 64,
                                       sizeof *c->tentative);
        tentative_batch *p = kb_resize(c->tentative, cap, sizeof *p);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->tentative = p;
        c->tentative_cap = (Py_ssize_t)cap;
    }
    c->tentative[c->tentative_n++] = (tentative_batch){
        .start_s = kb_nvml_sampler_elapsed_s(c->sampler), .start_now_s = kb_now_s(),
        .side_n = c->side.n, .gap_sum_s = c->gap_sum_s, .bridge_gpu_s = c->bridge_gpu_s,
        .gaps = c->gaps, .bridges = c->bridges, .bridge_iters = c->bridge_iters,
        .gate_fired = c->gate_fired, .gate_fired_kept = c->gate_fired_kept};
    return 0;
}

/* The loop's batch of n: sub-batches of at most gate_cap (in burst, of BURST_BATCH_S GPU time,
 * each after the GPU has recovered). */
static int cuda_run_batch(kb_backend *b, Py_ssize_t n, double *out, int kind)
{
    cuda_ctx *c = b->ctx;
    /* A batch timed while settling is read and kept like a sampling one; only the sampler's
     * mark waits for settled_keep. */
    int warmup = kind == KB_BATCH_WARMUP, settling = kind == KB_BATCH_TENTATIVE;
    if (settling && note_tentative(c) < 0)
        return -1;
    if (kind == KB_BATCH_SAMPLE && c->sampler != NULL && !c->sampler_marked) {
        /* The result's clocks cover the timed part only. */
        kb_nvml_sampler_mark(c->sampler);
        c->sampler_marked = 1;
    }
    if (warmup && c->sampler != NULL && !c->load_started) {
        /* the callable's load begins with the warm-up's first batch */
        c->load_start_s = kb_nvml_sampler_elapsed_s(c->sampler);
        c->load_started = 1;
    }
    int burst = !warmup && c->opt.regime == KB_REGIME_BURST;
    Py_ssize_t done = 0, finished = 0, side_from = c->side.n;
    while (done < n) {
        Py_ssize_t k = n - done < c->gate_cap ? n - done : c->gate_cap;
        if (burst) {
            Py_ssize_t cap = c->iter_gpu_s > 0 ? (Py_ssize_t)(BURST_BATCH_S / c->iter_gpu_s) : 1;
            k = k < cap ? k : cap > 1 ? cap : 1;
            if (burst_wait(c) < 0)
                return -1;
        }
        int fired = 0;
        int ends = done + k == n || done + k - finished >= KB_DEFER_MAX;
        int rc = run_sub_batch(c, k, out + done, warmup, ends, &fired);
        if (burst) {
            c->last_batch_end_s = kb_now_s();
            c->burst_batches++;
        }
        if (rc < 0)
            return -1;
        if (fired && (rc = on_watchdog(c, warmup, settling)) != 0) {
            if (rc < 0)
                return -1;
            continue;
        }
        done += k;
        /* The timer's records of a long batch are collected every KB_DEFER_MAX samples. */
        if (done - finished >= KB_DEFER_MAX && done < n) {
            if (finish_reads(c, out + finished, side_from + finished,
                             warmup ? 0 : done - finished) < 0)
                return -1;
            finished = done;
        }
    }
    if (finish_reads(c, out + finished, side_from + finished, warmup ? 0 : done - finished) < 0)
        return -1;
    if (!warmup && c->timer->stepped && n > 0)
        note_timestamp_steps(c, b, out, n);
    return warmup ? 0 : c->timer->check(c->timer);
}

/* The warm-up goes on until the SM clock has settled under the callable's own load (steady.c),
 * at most settle_max_s; without clock samples there is nothing to judge. */
#define KB_LIMITED_MIN_SAMPLING_S 1.0
static int cuda_keep_warming(kb_backend *b, double elapsed_s)
{
    cuda_ctx *c = b->ctx;
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    /* burst recovers before each batch instead; clocks the user locked need no settling */
    if (c->sampler == NULL || c->opt.settle_max_s <= 0 || c->opt.regime == KB_REGIME_BURST)
        return KB_WARM_DONE;
    if ((c->clocks_locked = kb_nvml_sampler_clocks_locked(c->sampler)))
        return KB_WARM_DONE;
    double median = NAN;
    const kb_settle_carry *carry = isfinite(c->carry.sm_mhz) ? &c->carry : NULL;
    int settled = kb_nvml_sampler_settled(c->sampler, &rule, c->load_start_s, carry, &median,
                                          &c->settled_by);
    c->settled_at_s = elapsed_s;
    c->settled_mhz = median;
    c->loaded_s = kb_nvml_sampler_elapsed_s(c->sampler) - c->load_start_s;
    if (settled < 0) {          /* no memory to judge: measure as is, reported as not judged */
        c->settled = -1;
        return KB_WARM_DONE;
    }
    if (settled != KB_UNSETTLED || elapsed_s >= c->opt.settle_max_s) {
        c->settled = settled != KB_UNSETTLED;
        c->settled_unlimited = settled == KB_SETTLED;
        c->settled_since_s = kb_nvml_sampler_settled_since(c->sampler, &rule, c->load_start_s,
                                                           median, settled);
        /* Under a limit (or still moving), sample across several swings of its controller. */
        if (settled != KB_SETTLED) {
            b->min_sampling_s = KB_LIMITED_MIN_SAMPLING_S;
            c->settle_min_sampling_s = KB_LIMITED_MIN_SAMPLING_S;
        }
        return KB_WARM_DONE;
    }
    /* A limit reason since the load began: nothing timed before it can be kept, and a load
     * that shows one mostly settles under the limit, where nothing timed before the settle is
     * kept; so the rest of the settle runs untimed, as it did before samples were kept. */
    return kb_nvml_sampler_limited_since(c->sampler, c->load_start_s) ? KB_WARM_MORE_UNTIMED
                                                                      : KB_WARM_MORE;
}


/* Drop the first `drop` of the samples timed while settling from the side arrays, and the
 * records of the batches left with none; the first record left starts at the first sample. */
static void drop_tentative_front(cuda_ctx *c, Py_ssize_t drop)
{
    side_arrays *sa = &c->side;
    Py_ssize_t base = c->tentative[0].side_n, kept = sa->n - base - drop;
    memmove(sa->events_s + base, sa->events_s + base + drop, (size_t)kept * sizeof *sa->events_s);
    memmove(sa->span_s + base, sa->span_s + base + drop, (size_t)kept * sizeof *sa->span_s);
    memmove(sa->summed_s + base, sa->summed_s + base + drop,
            (size_t)kept * sizeof *sa->summed_s);
    memmove(sa->kernels + base, sa->kernels + base + drop, (size_t)kept * sizeof *sa->kernels);
    memmove(sa->copies + base, sa->copies + base + drop, (size_t)kept * sizeof *sa->copies);
    sa->n = base + kept;
    Py_ssize_t first = 0;       /* the batch that holds the first sample left */
    while (first + 1 < c->tentative_n && c->tentative[first + 1].side_n <= base + drop)
        first++;
    memmove(c->tentative, c->tentative + first,
            (size_t)(c->tentative_n - first) * sizeof *c->tentative);
    c->tentative_n -= first;
    for (Py_ssize_t i = 0; i < c->tentative_n; i++) {
        Py_ssize_t at = c->tentative[i].side_n - drop;
        c->tentative[i].side_n = at > base ? at : base;
    }
}

/* The loop's batches timed while settling (KB_BATCH_TENTATIVE), n samples: keep at most
 * max_keep (the latest) and, once settled (`final`), only those of batches that began after
 * the readings last showed anything but the state the load settled in (settled_since_s):
 * none when the load did not settle or was not judged. The rest leave the side arrays and,
 * at the end, the sub-batch counters; the sampler's timed part starts with the first batch
 * kept. Called with final = 0 while settling, to bound what a long settle holds. */
static Py_ssize_t cuda_settled_keep(kb_backend *b, Py_ssize_t n, Py_ssize_t max_keep, int final,
                                    double *from_s)
{
    cuda_ctx *c = b->ctx;
    if (n == 0)
        return 0;
    if (c->tentative_n == 0 || c->side.n - c->tentative[0].side_n != n) {
        PyErr_Format(PyExc_SystemError, "kbench: %zd samples taken while settling, %zd kept "
                     "on the CUDA side", n, c->tentative_n ? c->side.n - c->tentative[0].side_n
                                                          : (Py_ssize_t)0);
        return -1;
    }
    Py_ssize_t drop = n > max_keep ? n - max_keep : 0;
    if (final) {
        Py_ssize_t i = 0, base = c->tentative[0].side_n;
        if (c->settled > 0 && isfinite(c->settled_since_s))
            while (i < c->tentative_n && c->tentative[i].start_s < c->settled_since_s)
                i++;
        else
            i = c->tentative_n;
        Py_ssize_t unsettled = i < c->tentative_n ? c->tentative[i].side_n - base : n;
        drop = unsettled > drop ? unsettled : drop;
    }
    drop_tentative_front(c, drop);
    Py_ssize_t kept = n - drop;
    if (!final)
        return kept;
    /* what the sub-batches before the first kept batch added to the counters */
    const tentative_batch *t = kept > 0 ? &c->tentative[0] : NULL;
    c->gap_sum_s -= t ? t->gap_sum_s : c->gap_sum_s;
    c->bridge_gpu_s -= t ? t->bridge_gpu_s : c->bridge_gpu_s;
    c->gaps -= t ? t->gaps : c->gaps;
    c->bridges -= t ? t->bridges : c->bridges;
    c->bridge_iters -= t ? t->bridge_iters : c->bridge_iters;
    c->gate_fired -= t ? t->gate_fired : c->gate_fired;
    c->gate_fired_kept -= t ? t->gate_fired_kept : c->gate_fired_kept;
    if (t != NULL) {
        kb_nvml_sampler_mark_at(c->sampler, t->start_s);
        c->sampler_marked = 1;
        c->tentative_from_s = t->start_s;
        *from_s = t->start_now_s;
    }
    c->tentative_kept = kept;
    c->tentative_n = 0;
    return kept;
}

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
    int rc = kb_cuda_options_parse(opts, c->fn_is_graph, c->n_sets, &c->opt) < 0 ||
                     kb_finish_options(opts, "measure_cuda", cfg) < 0
                 ? -1
                 : 0;
    Py_DECREF(opts);
    if (rc < 0)
        return -1;
    c->busy_explicit = c->opt.busy_warmup_s >= 0;
    if (c->opt.busy_warmup_s < 0)
        c->opt.busy_warmup_s = cfg->warmup_s;
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
    if (call_pre_sample(c, "the first (untimed, ungated)") < 0 ||
        launch_once(c, "the first (untimed, ungated)") < 0 || drain_stream(c) < 0)
        return -1;
    return setup_timers(c);
}

/* What the last measurement on this device established, taken for this one (sustained only),
 * and cleared: a measurement that fails leaves nothing to carry. One that samples no clocks
 * (kbench's floor probe, run after a bench's own measurement) judges nothing: it neither takes
 * nor replaces the record, so the bench after it still carries what the bench before it left
 * (the probe cleared it: a process's second bench settled from scratch, 0.5 s instead of
 * 0.15 s). The carry's own check, on the next load's readings, covers whatever ran between. */
static void take_carry(cuda_ctx *c)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    if (!c->opt.sample_clocks)
        return;
    struct kb_gpu_carry *g = &kb_get_state(c->m)->gpu_carry[c->opt.device];
    double ago = kb_now_s() - g->end_s;
    c->carry = (kb_settle_carry){.sm_mhz = NAN, .under_limit = 0, .ago_s = NAN, .loaded_s = 0};
    c->carried_from_s_ago = NAN;
    if (g->end_s > 0 && g->settled != KB_UNSETTLED && c->opt.regime == KB_REGIME_SUSTAINED &&
        ago >= 0 && ago <= rule.carry_max_gap_s) {
        c->carry = (kb_settle_carry){.sm_mhz = g->sm_mhz, .ago_s = ago,
                                     .under_limit = g->settled == KB_SETTLED_UNDER_LIMIT,
                                     .loaded_s = g->loaded_s};
        c->carried_from_s_ago = ago;
    }
    memset(g, 0, sizeof *g);
}

/* At the end of sampling: the settle rule judged once more over this load's readings (with
 * the state this measurement carried, if any), and what it says left for the next one. */
static void record_carry(cuda_ctx *c)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double median = NAN;
    int how = KB_UNSETTLED, by = KB_SETTLED_BY_RULE;
    if (!c->opt.sample_clocks)
        return;
    if (c->sampler != NULL && c->opt.regime == KB_REGIME_SUSTAINED && !c->clocks_locked &&
        c->settled > 0) {
        const kb_settle_carry *carry = isfinite(c->carry.sm_mhz) ? &c->carry : NULL;
        how = kb_nvml_sampler_settled(c->sampler, &rule, c->load_start_s, carry, &median, &by);
    }
    c->end_settled = how > 0 ? how : KB_UNSETTLED;
    c->end_sm_mhz = c->end_settled != KB_UNSETTLED ? median : NAN;
    /* a capped load it continued counts as this one's: the next continues both */
    double loaded = c->sampler != NULL ? kb_nvml_sampler_elapsed_s(c->sampler) - c->load_start_s
                                       : 0.0;
    if (isfinite(c->carry.sm_mhz) && c->carry.under_limit)
        loaded += c->carry.loaded_s;
    kb_get_state(c->m)->gpu_carry[c->opt.device] = (struct kb_gpu_carry){
        .end_s = kb_now_s(), .settled = c->end_settled, .sm_mhz = c->end_sm_mhz,
        .loaded_s = loaded > 0 ? loaded : 0.0};
}

/* ---- settle: the NVML sampler the warm-up's settle rule reads (cuda_keep_warming), the state
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
    take_carry(c);
    int judged = c->sampler != NULL && c->opt.regime == KB_REGIME_SUSTAINED &&
                 c->opt.settle_max_s > 0;
    if (c->opt.busy_warmup_s > 0 && (c->busy_explicit || !judged) &&
        kb_now_s() > st->gpu_warm_until) {
        kb_builtin_kernels *bk = kb_builtin_get(c->m, c->cu, c->opt.device);
        if (bk == NULL || kb_builtin_busy(c->m, c->cu, bk, c->dev, c->opt.stream,
                                          c->opt.busy_warmup_s) < 0 ||
            drain_stream(c) < 0)
            return -1;
        c->busy_s_done = c->opt.busy_warmup_s;
    }
    return 0;
}

/* ---- sample: the loop (measure.c) over cuda_run_batch, then the last bridge drained. */
static int step_sample(cuda_ctx *c, const kb_loop_config *cfg, kb_loop_result *res)
{
    kb_backend backend = {.name = c->timer->name, .ctx = c, .run_batch = cuda_run_batch,
                          .keep_warming = cuda_keep_warming};
    if (c->timer->finish != NULL)
        backend.min_batch_s = KB_COLLECT_MIN_BATCH_S;
    /* Where the sustained rule judges the load, the batches that run while it settles are
     * timed and kept from the moment the readings show the settled state (cuda_settled_keep),
     * until a limit reason shows (cuda_keep_warming). With ranks every batch must be agreed:
     * not there. After a settled unlimited measurement, which this load may settle on in
     * 0.15 s, the callable's own warm-up ends once its timed windows stop getting faster
     * instead of at callable_warmup_max_s: elsewhere the settle takes longer than that anyway,
     * and a load under a limit warms up as it did before samples were kept. */
    if (c->sampler != NULL && c->opt.regime == KB_REGIME_SUSTAINED && c->opt.settle_max_s > 0 &&
        cfg->ranks == NULL) {
        backend.settled_keep = cuda_settled_keep;
        backend.warmup_timed = isfinite(c->carry.sm_mhz) && !c->carry.under_limit;
    }
    if (kb_loop_run(&backend, cfg, res) < 0)
        return -1;
    if (c->bridge_pending) {         /* the last bridge may still run */
        int rc = drain_stream(c);
        c->bridge_pending = 0;
        if (rc < 0)
            return -1;
        if (c->prev_bridge > 0 && c->sub_batches > 0 &&  /* the last sub-batch's bridge */
            count_bridge(c, (c->sub_batches - 1) & 1) < 0)
            return -1;
    }
    record_carry(c);
    kb_get_state(c->m)->gpu_warm_until = kb_now_s() + 1.0;
    return 0;
}

/* The regime's part of the result: how the clock/power state was reached and held. */
static PyObject *regime_dict(const cuda_ctx *c)
{
    return Py_BuildValue(
        "{s:s,s:O,s:d,s:n,s:{s:n,s:n,s:d,s:d,s:d,s:d,s:N,s:N,s:N}}", "name",
        c->opt.regime == KB_REGIME_BURST ? "burst" : "sustained", "clocks_locked",
        c->clocks_locked ? Py_True : Py_False, "loaded_s", c->loaded_s, "warmup_watchdog_fired",
        c->warmup_fired, "burst", "batches", c->burst_batches, "unrecovered",
        c->burst_unrecovered, "wait_s", c->burst_wait_s, "batch_s", BURST_BATCH_S, "rest",
        BURST_REST, "recover_max_s", BURST_RECOVER_MAX_S, "sm_mhz_min",
        c->burst_sm_n ? PyFloat_FromDouble(c->burst_sm_min) : Py_NewRef(Py_None), "sm_mhz_mean",
        c->burst_sm_n ? PyFloat_FromDouble(c->burst_sm_sum / (double)c->burst_sm_n)
                      : Py_NewRef(Py_None),
        "sm_mhz_max", c->burst_sm_n ? PyFloat_FromDouble(c->burst_sm_max) : Py_NewRef(Py_None));
}

static PyObject *finite_or_none(double v)
{
    return isfinite(v) ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

/* The settle dict's carry fields: what this measurement carried from the last one on the device
 * (carried_from_s_ago None: nothing), whether that settled it, and what it leaves. */
static int settle_carry_fields(const cuda_ctx *c, PyObject *settle)
{
    if (settle == NULL)
        return -1;
    int carried = isfinite(c->carried_from_s_ago);
    return kb_dict_set_steal(settle, "carried_from_s_ago", finite_or_none(c->carried_from_s_ago)) ||
                   kb_dict_set_steal(settle, "carried_sm_mhz", finite_or_none(c->carry.sm_mhz)) ||
                   kb_dict_set_steal(settle, "carried_under_limit",
                                     carried ? PyBool_FromLong(c->carry.under_limit)
                                             : Py_NewRef(Py_None)) ||
                   kb_dict_set_steal(settle, "carried_loaded_s",
                                     finite_or_none(carried ? c->carry.loaded_s : NAN)) ||
                   kb_dict_set_steal(settle, "by_carry",
                                     PyBool_FromLong(c->settled_by == KB_SETTLED_BY_CARRY)) ||
                   kb_dict_set_steal(settle, "at_max_clock",
                                     PyBool_FromLong(c->settled_by == KB_SETTLED_AT_MAX)) ||
                   kb_dict_set_steal(settle, "end_settled",
                                     PyBool_FromLong(c->end_settled != KB_UNSETTLED)) ||
                   kb_dict_set_steal(settle, "end_sm_mhz", finite_or_none(c->end_sm_mhz)) ||
                   kb_dict_set_steal(settle, "samples_while_settling",
                                     PyLong_FromSsize_t(c->tentative_kept)) ||
                   kb_dict_set_steal(settle, "kept_from_load_s",
                                     finite_or_none(c->tentative_kept > 0
                                                        ? c->tentative_from_s - c->load_start_s
                                                        : NAN))
               ? -1 : 0;
}

/* The regime's inputs from what the measurement recorded, and the clock summary's verdict. */
static kb_regime_inputs regime_inputs(const cuda_ctx *c, const kb_clock_verdict *cv, double busy)
{
    return (kb_regime_inputs){
        .burst = c->opt.regime == KB_REGIME_BURST, .clocks_locked = c->clocks_locked,
        .settled = c->settled, .settled_unlimited = c->settled_unlimited,
        .timed_limits = cv->limited, .settle_at_s = c->settled_at_s,
        .settle_max_s = c->opt.settle_max_s, .settle_sm_mhz = c->settled_mhz,
        .clocks_read = cv->state == KB_CLOCKS_READ, .timed_sm_median = cv->sm_median,
        .power_capped = kb_clock_power_capped(cv), .cold = c->opt.cold != KB_COLD_NONE,
        .busy_fraction = busy, .batches = c->burst_batches, .unrecovered = c->burst_unrecovered,
        .recover_max_s = BURST_RECOVER_MAX_S,
        .start_sm_min = c->burst_sm_n ? c->burst_sm_min : NAN,
        .start_sm_max = c->burst_sm_n ? c->burst_sm_max : NAN};
}

/* The record's verdicts (regime.c), added to `cuda`: clocks_summary (the timed part's NVML
 * samples summarised), gpu_timed_fraction, gpu_busy_fraction, power_capped, and regime's held,
 * why (and note). */
static int add_verdicts(const cuda_ctx *c, PyObject *cuda, double sampling_s)
{
    PyObject *held[KB_CLOCK_SAMPLES_HELD];
    PyObject *clocks = PyDict_GetItemString(cuda, "clocks");
    kb_clock_samples samples;
    kb_clock_verdict cv;
    kb_regime_verdict rv;
    if (kb_clock_samples_from_dict(clocks, NAN, &samples, held) < 0)
        return -1;
    kb_clock_summary(&samples, &cv);
    PyObject *summary = kb_clock_verdict_dict(&cv, &samples, clocks);
    kb_clock_samples_release(held);
    double timed = kb_timed_fraction(c->side.events_s, (size_t)c->side.n, c->opt.unroll,
                                     sampling_s);
    double busy = kb_busy_fraction(timed, c->bridge_gpu_s, sampling_s);
    kb_regime_inputs in = regime_inputs(c, &cv, busy);
    kb_regime_judge(&in, &rv);
    if (summary == NULL ||
        (rv.clocks_steady >= 0 &&
         kb_dict_set_steal(summary, "steady", PyBool_FromLong(rv.clocks_steady)) < 0)) {
        Py_XDECREF(summary);
        return -1;
    }
    return kb_dict_set_steal(cuda, "clocks_summary", summary) < 0 ||
                   kb_dict_set_steal(cuda, "gpu_timed_fraction", finite_or_none(timed)) < 0 ||
                   kb_dict_set_steal(cuda, "gpu_busy_fraction", finite_or_none(busy)) < 0 ||
                   kb_dict_set_steal(cuda, "power_capped",
                                     PyBool_FromLong(in.power_capped)) < 0 ||
                   kb_regime_verdict_into(&rv, PyDict_GetItemString(cuda, "regime")) < 0
               ? -1 : 0;
}

/* The "cuda" dict of the result: per-sample arrays, clocks, gate, settle, gaps, bridges,
 * regime, the verdicts on them (add_verdicts), then the timer's own fields (CUPTI's names,
 * flushes, ...). */
static PyObject *cuda_dict(cuda_ctx *c, const char *backend, double sampling_s)
{
    PyObject *clocks = Py_None;
    if (c->sampler != NULL) {
        clocks = kb_nvml_sampler_stop(c->m, c->sampler);
        c->sampler = NULL;
        if (clocks == NULL) {
            PyErr_Clear();
            clocks = Py_None;
        }
    }
    else
        Py_INCREF(clocks);
    const side_arrays *sd = &c->side;
    PyObject *cuda = Py_BuildValue(
        "{s:s,s:N,s:N,s:N,s:N,s:N,s:O,s:N,s:{s:O,s:n,s:n,s:n,s:n,s:d,s:n},s:n,s:n,s:d,s:K,s:O,s:d,s:d,"
        "s:i,s:K,s:{s:O,s:d,s:d,s:d,s:d,s:d},s:{s:n,s:d,s:d}}",
        "backend", backend,
        "events_s", kb_array_copy(sd->events_s, sd->n, NPY_FLOAT64, sizeof(double)),
        "span_s", kb_array_copy(sd->span_s, sd->n, NPY_FLOAT64, sizeof(double)),
        "summed_s", kb_array_copy(sd->summed_s, sd->n, NPY_FLOAT64, sizeof(double)),
        "kernels_per_iter", kb_array_copy(sd->kernels, sd->n, NPY_UINT32, sizeof(uint32_t)),
        "copies_per_iter", kb_array_copy(sd->copies, sd->n, NPY_UINT32, sizeof(uint32_t)),
        "names", Py_None, "clocks", clocks,
        "gate", "enabled", c->opt.gate ? Py_True : Py_False, "batch", c->gate_cap_initial,
        "batch_final", c->gate_cap, "watchdog_fired", c->gate_fired, "fired_kept",
        c->gate_fired_kept, "timeout_s", c->opt.gate_timeout_s, "sub_batches", c->sub_batches,
        "flush_bytes", (Py_ssize_t)c->flusher.bytes, "arg_sets", c->n_sets,
        "unroll", c->opt.unroll, "persisting_l2_limit_bytes",
        (unsigned long long)c->persisting_limit, "cupti_foreign_subscriber", Py_False,
        "cupti_ticks_per_ns", 1.0, "busy_warmup_s", c->busy_s_done, "device", c->opt.device,
        "cupti_dropped", 0ULL,
        "settle", "settled", c->settled < 0 ? Py_None : c->settled ? Py_True : Py_False,
        "at_s", c->settled_at_s, "sm_mhz", c->settled_mhz, "max_s", c->opt.settle_max_s,
        "min_sampling_s", c->settle_min_sampling_s,
        /* where the callable's load (last) began, in the NVML sampler's time, as its mark_s */
        "load_start_s", c->load_started ? c->load_start_s : NAN,
        "between_batches", "n", c->gaps, "total_s", c->gap_sum_s, "max_s", c->gap_max_s);
    if (cuda == NULL)
        return NULL;
    if (kb_dict_set_steal(cuda, "keep_busy",
                          Py_BuildValue("{s:O,s:n,s:n,s:d,s:d,s:d}", "enabled",
                                        c->opt.keep_busy ? Py_True : Py_False, "bridges",
                                        c->bridges, "iterations", c->bridge_iters, "gpu_s",
                                        c->bridge_gpu_s, "turnaround_s", c->turnaround_s,
                                        "turnaround_end_s", c->turnaround_end_s)) < 0 ||
        kb_dict_set_steal(cuda, "regime", regime_dict(c)) < 0 ||
        kb_dict_set_steal(cuda, "stepped_min_sampling_s",
                          PyFloat_FromDouble(c->stepped ? KB_STEPPED_MIN_SAMPLING_S : 0.0)) < 0 ||
        kb_dict_set_steal(cuda, "callable_warmup_max_s",
                          PyFloat_FromDouble(c->callable_warmup_max_s)) < 0 ||
        settle_carry_fields(c, PyDict_GetItemString(cuda, "settle")) < 0 ||
        kb_dict_set_steal(cuda, "cupti_setup",
                          c->cupti ? Py_BuildValue("{s:d,s:d,s:d}", "begin_s", c->cupti_begin_s,
                                                   "first_read_s", c->cupti_first_read_s,
                                                   "total_s", c->cupti_begin_s +
                                                                  c->cupti_first_read_s)
                                   : Py_NewRef(Py_None)) < 0 ||
        kb_dict_set_steal(cuda, "pre_sample", PyBool_FromLong(c->opt.pre_sample != NULL)) < 0 ||
        add_verdicts(c, cuda, sampling_s) < 0 || c->timer->report(c->timer, cuda) < 0) {
        Py_DECREF(cuda);
        return NULL;
    }
    return cuda;
}

/* ---- result: the loop's dict (measure.c) with "cuda" and "backend" added. */
static PyObject *step_result(cuda_ctx *c, const kb_loop_result *res, const kb_loop_config *cfg)
{
    PyObject *out = kb_loop_result_to_dict(res, cfg);
    if (out == NULL)
        return NULL;
    const char *backend = c->timer->name;
    if (kb_dict_set_steal(out, "cuda", cuda_dict(c, backend, res->sampling_s)) < 0 ||
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
        drain_stream_quiet(c);
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
            drain_stream_quiet(c);
            kb_gate_fini(c->cu, &c->gate);
        }
        kb_l2_flusher_fini(c->cu, &c->flusher);
        for (int i = 0; i < 4; i++)
            if (c->marks[i])
                c->cu->cuEventDestroy(c->marks[i]);
        kb_ctx_leave(c->cu, c->pushed);
    }
    if (c->locked)
        kb_measure_lock_release(c->m);
    PyErr_Restore(et, ev, etb);
    free(c->samples);
    free(c->deferred);
    free(c->tentative);
    side_free(&c->side);
    kb_cuda_options_fini(&c->opt);
}

/* measure_cuda(fn, arg_sets, kwargs=None, *, stream, <options: CUDA_DEFAULTS>, <loop config>) */
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
     "measure_cuda(fn, arg_sets, kwargs=None, *, stream, device=0, mode='events'|'cupti', "
     "cold=None|'flush'|'rotate', flush_bytes=0, unroll=1, gate=True, keep_busy=True, "
     "gate_batch=32, gate_timeout_s=1.0, busy_warmup_s=None, cupti_allow_foreign=False, "
     "sample_clocks=True, clock_period_s=0.005, settle_max_s=3.0, "
     "regime='sustained'|'burst', pre_sample=None, <loop config>) -> dict\n\n"
     "Time fn(*arg_sets[i % len]) (or launches of a CudaGraph fn) on a CUDA stream. The "
     "defaults are _core.CUDA_DEFAULTS (written once, in csrc/cuda/cuda_options.c). "
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
