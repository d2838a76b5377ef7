/* cuda_loop.h -- the CUDA timing loop's state and the functions its files share (CUDA build).
 *
 *   measure_cuda.c  measure_cuda(): the pipeline of named steps (parse, set up, settle, sample,
 *                   result, tear down) around the timing loop of measure.c
 *   cuda_batch.c    one loop batch on the device: gated sub-batches queued, bridged, waited
 *                   for and read through the timer chain (gpu_timer.h)
 *   cuda_settle.c   the clock regimes: the warm-up's settle rule, the batches timed while
 *                   settling, burst's recovery, the state carried to the next measurement
 *   cuda_result.c   the result's "cuda" dict and the regime's verdicts on it
 *
 * Only these four include it: cuda_ctx is one measurement's state, owned by measure_cuda().
 */
#ifndef KB_CUDA_LOOP_H
#define KB_CUDA_LOOP_H

#include "cuda_backend.h"
#include "kb_regime.h"

/* Burst: each timed batch runs at most this much GPU time, rests at least BURST_REST times its
 * GPU time (a duty cycle <= 25% keeps the averaged power far under the cap), then starts once
 * the GPU has recovered, waiting at most BURST_RECOVER_MAX_S. On the H200 a power-capped GEMM
 * kept its peak clock for ~0.1 s of load. */
#define BURST_BATCH_S 0.005
#define BURST_REST 3.0
#define BURST_RECOVER_MAX_S 2.0
#define BURST_FRESH_READING_S 0.001   /* a batch this long needs a reading taken after it */
#define KB_CUDA_BURST_WARMUP_MAX_S BURST_BATCH_S   /* burst: the callable's own warm-up */
/* Burst: the busy kernel only lifts the clocks out of idle (an idle GPU's first batch would
 * start at its idle clock); each batch then starts on a recovered GPU. Longer, it only heats
 * the GPU that the first batch then waits to recover from: a 1 s ramp (the loop's warm-up,
 * before) was most of a first burst bench's 1.2 s. */
#define KB_CUDA_BURST_RAMP_MAX_S 0.05

#define KB_STEPPED_BELOW_S 2e-6         /* 64 steps of 32 ns */
#define KB_STEPPED_MIN_SAMPLING_S 0.05

/* A loop batch costs the CUPTI timer a collection (a flush and a host turnaround), whatever
 * its length: sampling batches of at least this long (the loop's own rule is 1% of max_time_s:
 * 0.2 ms batches in a 0.02 s bench, 55 flushes a bench on the H200; 6.3-6.7 with it). */
#define KB_COLLECT_MIN_BATCH_S 0.002

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
    int stepped;                    /* a CUPTI figure under 2 us, or one whose half step is
                                     * wider than step_target of it: sampled at least
                                     * KB_STEPPED_MIN_SAMPLING_S, stopped at one step */
    double step_target;             /* the 'ci' rule's target (0 for another criterion) */
    double finest_step_s;           /* the finest timer step a batch has shown (0: none yet) */
    Py_ssize_t iteration;           /* calls of fn so far (for error notes) */
    int busy_explicit;              /* the caller gave busy_warmup_s */
    double callable_warmup_max_s;   /* the clamp on the callable's own warm-up */
    kb_settle_carry carry;          /* the last measurement's settled state (sm_mhz NaN: none) */
    double carried_end_s;           /* when it ended, on kb_now_s's clock */
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
    double timed_from_s;            /* sampler time the timed part began (the mark) */
    double limit_scan_s;            /* readings up to this sampler time were looked at by
                                     * kb_cuda_resettle */
    int resettled;                  /* kb_cuda_resettle dropped the samples and settled again */
    uint64_t resettle_reasons;      /* the limit reasons of the reading that made it */
    double resettle_timed_s;        /* that reading's time into the timed part */
} cuda_ctx;

/* ---------------------------------------------------------------- cuda_batch.c */

/* The loop's batch of n (kb_backend.run_batch): sub-batches of at most gate_cap (in burst, of
 * BURST_BATCH_S GPU time, each after the GPU has recovered). */
int kb_cuda_run_batch(kb_backend *b, Py_ssize_t n, double *out, int kind);
/* Wait for the stream with the GIL released; the quiet one, for error paths, checks nothing. */
int kb_cuda_drain(cuda_ctx *c);
void kb_cuda_drain_quiet(cuda_ctx *c);
/* The caller's pre_sample hook, and one iteration's work (the callable, or the graph); phase
 * names the iteration in the note added to an exception. */
int kb_cuda_pre_sample(cuda_ctx *c, const char *phase);
int kb_cuda_launch_once(cuda_ctx *c, const char *phase);
/* Add the bridge after the sub-batch whose markers have parity p to the keep-busy totals. */
int kb_cuda_count_bridge(cuda_ctx *c, Py_ssize_t p);
void kb_cuda_side_free(side_arrays *s);

/* ---------------------------------------------------------------- cuda_settle.c */

/* kb_backend.keep_warming and .settled_keep: the sustained regime's settle rule over the NVML
 * readings, and the batches timed while it settled. */
int kb_cuda_keep_warming(kb_backend *b, double elapsed_s);
Py_ssize_t kb_cuda_settled_keep(kb_backend *b, Py_ssize_t n, Py_ssize_t max_keep, int final,
                                double *from_s);
/* kb_backend.resettle: a load settled unlimited that a limit reason has limited while timed. */
int kb_cuda_resettle(kb_backend *b);
/* The timed part begins at sampler time t_s: the sampler is marked there. */
void kb_cuda_timed_from(cuda_ctx *c, double t_s);
/* A loop batch timed while settling begins: the counters as they stand. */
int kb_cuda_note_tentative(cuda_ctx *c);
/* Burst: rest after the last batch, then wait for the GPU to recover (Ctrl-C honoured). */
int kb_cuda_burst_wait(cuda_ctx *c);
/* The state the last measurement on the device left, taken; this one's, left for the next. */
void kb_cuda_take_carry(cuda_ctx *c);
/* The load (re)starts now: the carried state's age is the gap from its end to this moment. */
void kb_cuda_carry_load_starts(cuda_ctx *c);
void kb_cuda_record_carry(cuda_ctx *c);

/* ---------------------------------------------------------------- cuda_result.c */

/* The result's "cuda" dict (the NVML sampler is stopped into it); NULL with an exception. */
PyObject *kb_cuda_result_dict(cuda_ctx *c, const char *backend, double sampling_s);

#endif
