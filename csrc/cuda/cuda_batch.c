/* cuda_batch.c -- one loop batch of measure_cuda() on the device: gated sub-batches queued,
 * bridged, waited for and read through the timer chain (gpu_timer.h).
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
#include "cuda_loop.h"
#include "kb_array.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int side_reserve(side_arrays *s, Py_ssize_t need)
{
    if (need <= s->cap)
        return 0;
    size_t cap = kb_grown_capacity((size_t)s->cap, (size_t)need, 256, sizeof(double));
    int ok = 1;
    /* each array grows on its own: one that cannot keeps its block, freed with the rest */
#define GROW(a)                                                                                   \
    do {                                                                                          \
        void *grown = kb_resize(s->a, cap, sizeof *s->a);                                         \
        if (grown)                                                                                \
            s->a = grown;                                                                         \
        else                                                                                      \
            ok = 0;                                                                               \
    } while (0)
    GROW(events_s);
    GROW(span_s);
    GROW(summed_s);
    GROW(kernels);
    GROW(copies);
#undef GROW
    if (!ok) {
        PyErr_NoMemory();
        return -1;
    }
    s->cap = (Py_ssize_t)cap;
    return 0;
}

void kb_cuda_side_free(side_arrays *s)
{
    free(s->events_s);
    free(s->span_s);
    free(s->summed_s);
    free(s->kernels);
    free(s->copies);
    memset(s, 0, sizeof *s);
}

/* Wait for the stream with the GIL released (the ready-made step of several stages). */
int kb_cuda_drain(cuda_ctx *c)
{
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    KB_DEFER(&d, c->cu->cuStreamSynchronize(c->opt.stream));
    Py_END_ALLOW_THREADS
    return KB_CU_RAISE(c->m, &d);
}

/* Error paths: drain without a check (the first error is the one raised). */
void kb_cuda_drain_quiet(cuda_ctx *c)
{
    Py_BEGIN_ALLOW_THREADS
    c->cu->cuStreamSynchronize(c->opt.stream);
    Py_END_ALLOW_THREADS
}

/* The caller's pre_sample hook, before a call of fn (and before its flush and start mark, so
 * nothing it queues is timed or attributed). */
int kb_cuda_pre_sample(cuda_ctx *c, const char *phase)
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
int kb_cuda_launch_once(cuda_ctx *c, const char *phase)
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
int kb_cuda_count_bridge(cuda_ctx *c, Py_ssize_t p)
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
        if (kb_cuda_pre_sample(c, phase) < 0)
            return -1;
        if (c->opt.cold == KB_COLD_FLUSH &&
            kb_l2_flush(c->m, c->cu, &c->flusher, c->opt.stream) < 0)
            return -1;
        if (t->sample_start(t, i) < 0)
            return -1;
        int ok = kb_cuda_launch_once(c, phase) == 0;
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
        if (kb_cuda_launch_once(c, "an untimed keep-busy") < 0)
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
            /* The callable failed and the wait did too: keep the first, name the second (the
             * marker's cuEventSynchronize when a bridge runs behind the batch). */
            const char *name = NULL;
            c->cu->cuGetErrorName((CUresult)d.code, &name);
            kb_add_exception_note("%s afterwards returned %s", d.expr, name ? name : "an error");
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
        if (kb_cuda_count_bridge(c, p) < 0)
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

/* The watchdog opened the gate of a sub-batch: 1 to re-measure it with a smaller cap, 0 to keep
 * it, -1 when even single-iteration batches keep firing (the callable blocks behind the gate). */
static int on_watchdog(cuda_ctx *c, int warmup, int settling)
{
    if ((warmup || settling) && c->sampler != NULL) {
        /* the GPU idled behind the gate: the load starts again */
        c->load_start_s = kb_nvml_sampler_elapsed_s(c->sampler);
        kb_cuda_carry_load_starts(c);
    }
    if (warmup)
        c->warmup_fired++;
    else
        c->gate_fired++;
    char timeout[32];   /* PyErr_Format has no %f */
    snprintf(timeout, sizeof timeout, "%.2f", c->gate.timeout_s);
    if (c->opt.pre_sample != NULL) {
        /* Running the sub-batch again (or keeping it) is this rank's decision alone, and every
         * rank must call pre_sample and fn the same number of times: one more round here
         * leaves the others' collectives unmatched, a hang inside the device. */
        PyErr_Format(kb_get_state(c->m)->KbenchError,
                     "the gate's watchdog (gate_timeout_s=%s) opened a sub-batch of %zd calls "
                     "before the host had queued it; with pre_sample (multi-rank timing) "
                     "kbench cannot run it again on this rank alone, since every rank must call "
                     "pre_sample and fn the same number of times. Give a larger gate_timeout_s "
                     "or a smaller gate_batch (the same on every rank)", timeout, c->gate_cap);
        return -1;
    }
    if (c->gate_cap > 1) {
        /* The host could not queue k iterations before the watchdog: the samples may contain
         * launch gaps. Drop them and queue less at a time. */
        c->gate_cap = c->gate_cap / 2 > 0 ? c->gate_cap / 2 : 1;
        return 1;
    }
    c->gate_fired_kept++;
    if (c->gate_fired_kept >= 3) {
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
 * hot) read two steps off in 2 of 4 runs. docs/design/gpu-timers.md,
 * Stepped figures. */
static void note_timestamp_steps(cuda_ctx *c, kb_backend *b, const double *out, Py_ssize_t n)
{
    double sum = 0.0;
    for (Py_ssize_t i = 0; i < n; i++)
        sum += out[i];
    double mean = sum / (double)n;
    int below = mean < KB_STEPPED_BELOW_S;
    /* Above 2 us a figure is read the same way where half a step is wider than the CI asked
     * for (0.5%: up to 3.2 us on 32 ns steps): its median's CI cannot close short of the
     * target while the median sits between two steps (2.5 us simulated, 45% of the samples a
     * step up and 5% one more: the 'ci' rule needed 16,384 samples without the step, 128 with
     * it). The coarsest step still possible is the finest a batch has shown (at first, the
     * 1024 ns timestamp_step_s looks for): a longer figure is not searched again. */
    double coarsest = c->finest_step_s > 0 ? c->finest_step_s : 1024e-9;
    if (!below && !(c->step_target > 0 && 0.5 * coarsest > c->step_target * mean))
        return;
    /* The finest step any batch shows: a small batch can sit on every other step (576 and
     * 640 ns are both multiples of 64) and look coarser than it is. */
    double step = timestamp_step_s(out, n);
    if (step > 0 && (c->finest_step_s == 0 || step < c->finest_step_s))
        c->finest_step_s = step;
    if (!below && !(c->finest_step_s > 0 && 0.5 * c->finest_step_s > c->step_target * mean))
        return;
    c->stepped = 1;
    if (b->min_sampling_s < KB_STEPPED_MIN_SAMPLING_S)
        b->min_sampling_s = KB_STEPPED_MIN_SAMPLING_S;
    if (c->finest_step_s > 0)
        b->resolution_s = c->finest_step_s;
}

/* Samples whose timer fields wait for one collection: CUPTI flushes once per loop batch (or
 * per this many samples of a long one) instead of once per gated sub-batch (500-700 flushes a
 * default-length bench of a small kernel on the H200), and libcupti keeps 72 B of host memory
 * per flush (docs/design/gpu-timers.md). The bound keeps the records held between flushes
 * (CUPTI's buffers, the trace's arrays) to a few MB. */
#define KB_DEFER_MAX 8192

/* The loop's batch of n: sub-batches of at most gate_cap (in burst, of BURST_BATCH_S GPU time,
 * each after the GPU has recovered). */
int kb_cuda_run_batch(kb_backend *b, Py_ssize_t n, double *out, int kind)
{
    cuda_ctx *c = b->ctx;
    /* A batch timed while settling is read and kept like a sampling one; only the sampler's
     * mark waits for settled_keep. */
    int warmup = kind == KB_BATCH_WARMUP, settling = kind == KB_BATCH_TENTATIVE;
    if (settling && kb_cuda_note_tentative(c) < 0)
        return -1;
    if (kind == KB_BATCH_SAMPLE && c->sampler != NULL && !c->sampler_marked)
        kb_cuda_timed_from(c, kb_nvml_sampler_elapsed_s(c->sampler));
    if (warmup && c->sampler != NULL && !c->load_started) {
        /* the callable's load begins with the warm-up's first batch */
        c->load_start_s = kb_nvml_sampler_elapsed_s(c->sampler);
        c->load_started = 1;
        kb_cuda_carry_load_starts(c);
    }
    int burst = !warmup && c->opt.regime == KB_REGIME_BURST;
    Py_ssize_t done = 0, finished = 0, side_from = c->side.n;
    while (done < n) {
        Py_ssize_t k = n - done < c->gate_cap ? n - done : c->gate_cap;
        if (burst) {
            Py_ssize_t cap = c->iter_gpu_s > 0 ? (Py_ssize_t)(BURST_BATCH_S / c->iter_gpu_s) : 1;
            k = k < cap ? k : cap > 1 ? cap : 1;
            if (kb_cuda_burst_wait(c) < 0)
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
