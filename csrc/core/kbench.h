/* kbench.h -- declarations shared by the files of the C core (kbench._core).
 *
 * One responsibility per file:
 *   module.c        module glue: multi-phase init, module state, exception types
 *   clock.c         host monotonic clock, its resolution and per-call overhead
 *   stats.c         order statistics, summaries, confidence intervals of the median
 *   criterion.c     stopping rules behind one small interface
 *   steady.c        when a GPU's SM clock has settled (the CUDA warm-up's stopping rule)
 *   regime.c        what a CUDA record's clocks say: clock summary, duty cycle, power cap,
 *                   whether the regime held (kb_regime.h)
 *   measure.c       the backend-independent timing loop (warm-up, batches, stop)
 *   ranks.c         a backend behind the rank reducer: per-sample MAX, agreed clock and values
 *   measure_host.c  the host backend: calls a Python callable, host clock
 *   coldcache.c     CPU cache sizes and the CPU flush buffer
 *   compare.c       correctness comparison of outputs against references
 *   plan.c          kbench.bench's choices checked and decided once: the plan (_core.plan)
 *   kernels/cpu/    the CPU reference kernels (STREAM copy/triad, FMA loop)
 *   loader_*.c      lazy dlopen of libcuda, libcupti, libnvidia-ml, libnvrtc  (CUDA build)
 *   measure_cuda.c (+ cuda_batch.c, cuda_settle.c, cuda_result.c), cupti_trace.c, graph.c,
 *   coldcache_cuda.c, nvml_sampler.c  (CUDA build)
 *   profile.c       cuProfilerStart/Stop and the device-memory probe around one call  (CUDA)
 *   watchdog.c      the device gate's watchdog thread, runtime-independent (kb_watchdog.h)
 *   hip/            the HIP backend: hip_device.c, hip_graph.c, hip_gate.c, measure_hip.c, with
 *                   loader_hip.c and loader_rocm_smi.c (GPU build; no HIP header needed)
 *
 * Every function that can fail returns -1 (or NULL) with a Python exception set,
 * and 0 (or a new reference) otherwise, unless its comment says differently.
 */
#ifndef KBENCH_H
#define KBENCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_schema.h"

#define KB_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------ state */

struct kb_gpu_libs; /* loader.h: the lazily loaded GPU library tables */

/* kbench's exceptions, written once: X(name, parent, also, doc). parent: the exception of
 * this list it derives from (RuntimeError for KbenchError); also: the address of a second
 * base (&PyExc_OSError) or NULL. Parents come before their children. module.c creates, visits and clears them from
 * this list; kbench/__init__.py exports them all, in every build. */
#define KB_EXCEPTIONS(X)                                                                        \
    X(KbenchError, RuntimeError, NULL, "Base class of every kbench error.")                              \
    X(LibraryNotFound, KbenchError, &PyExc_OSError,                                              \
      "A GPU library (libcuda, libcupti, libnvidia-ml, libnvrtc) could not be opened; the "   \
      "message names the paths tried.")                                                        \
    X(CudaError, KbenchError, NULL, "A CUDA driver API call failed; the message names the call.") \
    X(CaptureError, CudaError, NULL,                                                            \
      "CUDA stream capture failed (for example the callable synchronized during capture); "   \
      "the stream was restored.")                                                              \
    X(CuptiError, KbenchError, NULL, "A CUPTI call failed; the message names the call.")       \
    X(CuptiBusy, CuptiError, NULL,                                                              \
      "CUPTI is owned by another profiler (torch.profiler, nsys, ncu).")                       \
    X(NvmlError, KbenchError, NULL, "An NVML call failed.")                                    \
    X(NvrtcError, KbenchError, NULL, "NVRTC failed to compile a kernel; the message has its log.") \
    X(HipError, KbenchError, NULL, "A HIP runtime call failed; the message names the call.")   \
    X(RocmSmiError, KbenchError, NULL, "A ROCm SMI call failed.")

#define KB_EXCEPTION_MEMBER(name, ...) PyObject *name;
typedef struct {
    KB_EXCEPTIONS(KB_EXCEPTION_MEMBER)
    PyObject *plan_type;        /* _core.Plan (plan.c) */
    struct kb_gpu_libs *gpu;    /* NULL until a GPU library is first asked for */
    struct kb_hip_libs *hip;    /* csrc/hip/hip_api.h: NULL until HIP or ROCm SMI is asked for */
    void *cuda_primary[64];     /* CUcontext: primary contexts kbench retained, kept while the
                                   module lives (releasing the last reference would destroy
                                   the context and every allocation in it) */
    void *cuda_builtins[64];    /* kb_builtin_kernels* per device, for launch_empty */
    double gpu_warm_until;      /* kb_now_s() time until which the GPU counts as warmed up */
    double clock_step_s;        /* the host clock's step (kb_clock_step_s), once probed */
    int clock_step_probed;
    struct kb_gpu_carry {       /* per device: how the last CUDA measurement on it ended */
        double end_s;           /* kb_now_s() at its end; 0: none, or it failed */
        int settled;            /* KB_SETTLED / KB_SETTLED_UNDER_LIMIT judged at its end, or
                                 * KB_UNSETTLED (burst, no clocks, moved): nothing to carry */
        double sm_mhz;          /* the median SM clock of its last window */
        double loaded_s;        /* how long its load (and a capped one it continued) had run */
    } gpu_carry[64];
    char cupti_detach[192];     /* how the last CUPTI trace left CUPTI (cupti_trace.c) */
    struct kb_llc_memo *llc_memo;   /* coldcache.c: the last sysfs cache scan and the CPUs
                                       and root it was for; NULL until the first (GIL held) */
    PyThread_type_lock measure_lock;  /* held while a timing loop runs: one at a time */
    unsigned long measure_owner;      /* thread ident of its holder, 0 when free (GIL held) */
} kb_state;

/* The state of the module `m` (the `self` of every module-level function). */
static inline kb_state *kb_get_state(PyObject *m) { return (kb_state *)PyModule_GetState(m); }

/* Each file that adds Python-visible functions exports one of these; module.c's exec slot
 * calls them in turn. */
int kb_clock_module_init(PyObject *m);
int kb_stats_module_init(PyObject *m);
int kb_between_runs_module_init(PyObject *m);
int kb_criterion_module_init(PyObject *m);
int kb_measure_host_module_init(PyObject *m);
int kb_coldcache_module_init(PyObject *m);
int kb_compare_module_init(PyObject *m);
int kb_cpu_kernels_module_init(PyObject *m);
int kb_steady_module_init(PyObject *m);
#ifdef KB_HAVE_CUDA
int kb_gpu_module_init(PyObject *m);   /* loader_*.c, cuda_device.c: library status, device info */
int kb_measure_cuda_module_init(PyObject *m);
int kb_nvml_sampler_module_init(PyObject *m);   /* nvml_sampler.c */
int kb_cuda_kernels_module_init(PyObject *m);   /* cuda_kernels.c */
int kb_graph_module_init(PyObject *m);          /* graph.c: graph_capture, CudaGraph */
int kb_cupti_module_init(PyObject *m);          /* cupti_trace.c: cupti_release */
int kb_cuda_options_module_init(PyObject *m);   /* cuda_options.c: CUDA_DEFAULTS */
int kb_profile_module_init(PyObject *m);  /* profile.c: profiler range, device memory probe */
int kb_nvml_topology_module_init(PyObject *m);  /* nvml_topology.c: nvml_p2p */
int kb_busy_time_module_init(PyObject *m);      /* busy_time.c: busy_time */
void kb_gpu_state_free(kb_state *st);  /* loader_common.c: frees st->gpu */
/* Stop the thread that detaches a lingering CUPTI subscriber (cupti_trace.c; module free,
 * before kb_gpu_state_free). No Python. */
void kb_cupti_session_shutdown(void);
/* The HIP backend (csrc/hip, loaders/loader_hip.c, loader_rocm_smi.c): part of every GPU build;
 * it needs no HIP header. */
int kb_hip_module_init(PyObject *m);
void kb_hip_module_free(kb_state *st);
#endif

/* ------------------------------------------------------------------ clock.c */

/* Monotonic host clock in nanoseconds (CLOCK_MONOTONIC, vDSO: ~20 ns a read). */
uint64_t kb_now_ns(void);
/* The step the host clock reads in, in seconds (1e-9 for a fine clock; 0 if it never moved),
 * probed from ~2000 back-to-back reads once a process and kept in module m's state, so the
 * loop's samples and what kbench info reports sit on one step (clock.c). GIL held. */
double kb_clock_step_s(PyObject *m);
static inline double kb_now_s(void) { return (double)kb_now_ns() * 1e-9; }

/* ------------------------------------------------------------------ stats.c */

typedef struct {
    Py_ssize_t n;
    double min, max, mean, median;
    double std;                 /* sample standard deviation (ddof = 1); 0 when n < 2 */
    double q1, q3, iqr;         /* quartiles with numpy's default (linear) interpolation */
    double mad;                 /* median absolute deviation from the median, unscaled */
    double cv;                  /* std / mean; NaN when mean == 0 */
    double ci_level;            /* confidence level of [ci_low, ci_high], e.g. 0.95 */
    double ci_low, ci_high;     /* distribution-free CI of the median from order statistics,
                                 * widened by ci_inflation */
    double rel_ci_halfwidth;    /* (ci_high - ci_low) / 2 / |median|; inf when n too small */
    double serial_vif;          /* the median's variance inflation from the samples' order
                                 * (kb_serial_vif); NaN when too few to tell */
    double ci_inflation;        /* the factor the CI used: serial_vif when above 1, else 1
                                 * (kb_ci_inflation) */
    int vif_saturated;          /* serial_vif near what n samples can show (kb_vif_saturated) */
    Py_ssize_t outliers_low;    /* samples below q1 - 1.5 iqr */
    Py_ssize_t outliers_high;   /* samples above q3 + 1.5 iqr */
} kb_summary;

/* numpy 'linear' quantile of an ascending-sorted array, 0 <= q <= 1; n >= 1. */
double kb_quantile_sorted(const double *sorted, Py_ssize_t n, double q);
/* Sort x[0..n) ascending (radix, O(n); NaNs land at an end). 0, or -1 when its scratch could
 * not be allocated (x unchanged). No Python. */
int kb_sort_doubles(double *x, Py_ssize_t n);
/* Order-statistic CI of the median of an ascending-sorted array (binomial, exact ranks), its
 * ranks' distance from the middle grown by sqrt(inflation) (1: independent samples; see
 * kb_serial_vif). Returns 0, or 1 when n is too small for the level (then lo = min,
 * hi = max). */
int kb_median_ci_sorted(const double *sorted, Py_ssize_t n, double level, double inflation,
                        double *lo, double *hi);
/* How much more the median of x[0..n), taken in this order, varies than that of as many
 * independent samples: from overlapping batch means of 1[x < median] (stats.c says how). NaN
 * when n is too small to tell; 1 when every sample equals the median. O(n), no allocation. */
double kb_serial_vif(const double *x, Py_ssize_t n, double median);
/* The inflation a CI applies for an estimate vif: vif when above 1, else 1 (never narrower
 * than independent samples'). */
double kb_ci_inflation(double vif);
/* Above this estimate the samples' order shows dependence: independent samples exceed it in
 * under 1% of runs. What the result says, not what the CI uses. */
#define KB_VIF_SHOWS_DEPENDENCE 2.0
/* 1 when vif is past a quarter of what n samples' batches can show (n/16): the run is too
 * short to see how dependent its samples are, and the "ci" rule does not stop on it. */
int kb_vif_saturated(double vif, Py_ssize_t n);
/* Summarize x[0..n), taken in this order (ordered = 0: no order, no serial dependence).
 * Returns 0, or -1 on allocation failure WITHOUT a Python exception (callable with the GIL
 * released). n >= 1. */
int kb_summarize(const double *x, Py_ssize_t n, double ci_level, int ordered, kb_summary *out);
/* A dict of the summary's fields. New reference or NULL with an exception. */
PyObject *kb_summary_to_dict(const kb_summary *s);

/* ------------------------------------------------------------------ criterion.c */

typedef enum {
    KB_STOP_RUNNING = 0,
    KB_STOP_PRECISION,   /* the criterion was satisfied (e.g. CI half-width under target) */
    KB_STOP_TIME_CAP,    /* max_time_s reached before an explicitly asked target */
    KB_STOP_BUDGET,      /* the time budget spent (no target asked): the CI reached is stated */
    KB_STOP_ITER_CAP,    /* max_samples reached */
} kb_stop;

const char *kb_stop_name(kb_stop s);

/* A stopping rule (nvbench's stdrel/entropy criteria): it sees every sample so far and says
 * whether the estimate is precise enough. The loop applies min_samples and the caps itself. */
typedef struct kb_criterion kb_criterion;
struct kb_criterion {
    const char *name;           /* "ci" | "entropy" */
    double target;              /* rule-specific target, e.g. 0.005 relative CI half-width */
    double ci_level;            /* confidence level for CI-based rules */
    double achieved;            /* the rule's last measured value (e.g. achieved rel. half-width) */
    double resolution;          /* the timer's step, in the samples' unit (0: none): the 'ci'
                                 * rule stops once its CI is no wider than one step */
    void *impl;                 /* rule-private state */
    /* 1 when precise enough, 0 not yet, -1 allocation failure (no exception; GIL may be released) */
    int (*is_finished)(kb_criterion *self, const double *samples, Py_ssize_t n);
    void (*destroy)(kb_criterion *self);  /* frees impl; may be NULL */
    void (*reset)(kb_criterion *self);    /* forgets every sample seen */
};

/* Make the rule called `name`; ValueError naming the known rules when unknown. */
int kb_criterion_init(kb_criterion *c, const char *name, double target, double ci_level);
void kb_criterion_fini(kb_criterion *c);
/* The samples start over (the loop dropped them): the rule forgets what it consumed. */
void kb_criterion_reset(kb_criterion *c);

/* ------------------------------------------------------------------ measure.c */

typedef struct {
    double warmup_s;            /* the longest warm-up before the first kept sample (default
                                 * 1.0); a backend that times its warm-up stops it earlier once
                                 * per-call times are stable (warmup_tol) */
    Py_ssize_t warmup_min;      /* at least this many warm-up iterations (default 1) */
    double warmup_tol;          /* stable: a warm-up window's median per-call time no more than
                                 * this fraction below the window's before it (default 0.02);
                                 * 0 warms for warmup_s */
    Py_ssize_t min_samples;     /* never stop before this many samples (default 10) */
    Py_ssize_t max_samples;     /* iteration cap (default 100000) */
    double max_time_s;          /* sampling time, wall clock: the budget (default
                                 * max_time_s's default) or, with an explicit target, the
                                 * cap (its with_target, kb_schema.h) */
    int budget;                 /* no target given: max_time_s is a budget, and a run it stops
                                 * states the CI it reached (KB_STOP_BUDGET), no warning */
    double target;              /* criterion target (default 0.005 = 0.5% rel. CI half-width) */
    double ci_level;            /* default 0.95 */
    char criterion[16];         /* default "ci" */
    Py_ssize_t batch_max;       /* the backend never gets more than this per batch */
    PyObject *ranks;            /* option ranks=: a rank reducer (kbench.distributed), or NULL.
                                 * Borrowed from the caller's keyword arguments, which outlive
                                 * the loop. With one, every batch's samples become their
                                 * per-sample MAX across ranks and every time-based decision is
                                 * agreed, so all ranks call fn the same number of times. */
} kb_loop_config;

/* A backend times batches of iterations; the loop owns warm-up, stop rules and bookkeeping.
 * A CUDA backend queues a batch behind a device gate; the host backend runs it directly. */
typedef struct kb_backend kb_backend;
enum { KB_WARM_DONE = 0, KB_WARM_MORE = 1, KB_WARM_MORE_UNTIMED = 2 };  /* keep_warming's */
struct kb_backend {
    const char *name;           /* "host", "events", "cupti", "graph" */
    void *ctx;                  /* backend-private */
    /* Time n iterations, writing n durations in seconds to out. `kind` is KB_BATCH_WARMUP
     * during warm-up (the backend may skip bookkeeping), KB_BATCH_TENTATIVE while it settles
     * with settled_keep (timed and kept like a sample until settled_keep decides), else
     * KB_BATCH_SAMPLE. 0, or -1 with a Python exception set. */
    int (*run_batch)(kb_backend *b, Py_ssize_t n, double *out, int kind);
    /* Optional. Asked after each warm-up batch once the loop's own warm-up rule is met:
     * KB_WARM_MORE while the device still needs warming up (its clock has not settled),
     * KB_WARM_MORE_UNTIMED the same when nothing timed while settling could be kept any more
     * (settled_keep: the loop drops what it holds and times no more), KB_WARM_DONE when done,
     * -1 with an exception. `elapsed_s` is the warm-up's wall time so far. */
    int (*keep_warming)(kb_backend *b, double elapsed_s);
    /* Set by the backend during warm-up (0 otherwise): the precision rule may not stop the
     * sampling before this long. A power-capped GPU's speed swings with its controller over
     * tens to hundreds of ms; samples inside one swing are correlated, so their CI is too
     * narrow and a run stopped on it reports one phase of the swing. */
    double min_sampling_s;
    /* Set by the backend (0 otherwise): the step its timer reads in, in seconds. A CI one
     * step wide is as precise as such samples get (kb_criterion.resolution). */
    double resolution_s;
    /* Set by the backend (0 otherwise): run_batch writes true per-call times during warm-up
     * too, so the loop may end the warm-up as soon as they are stable (warmup_tol). The CUDA
     * backends time nothing while warming and warm by time, then keep_warming. */
    int warmup_timed;
    /* Set by the backend (0 otherwise): starting a batch costs it nothing, so a sampling batch
     * never runs past the stop rule's next check and the loop stops within that check's 1/16
     * of the samples. The CUDA backends keep their long batches (a batch costs a collection). */
    int prompt_stop;
    /* Set by the backend (0 otherwise): what a sampling batch costs it, over and above its
     * samples, makes batches shorter than this wasteful. Sampling then starts at a batch this
     * long (at the warm-up's pace), grows to it whatever the time budget, and its last batch is
     * cut to end about at max_time_s. */
    double min_batch_s;
    /* Optional, with keep_warming. The loop times the batches that run while keep_warming
     * says "more" as samples (KB_BATCH_TENTATIVE; not with ranks) and, once it says done, asks
     * which to keep (final = 1): the last `kept` <= max_keep of those n, whose first batch
     * began at *from_s (kb_now_s clock): those the device's readings show ran in the state it
     * settled in. The backend drops the rest from its own records; the loop counts sampling
     * from *from_s. While settling (final = 0) it only keeps the last max_keep, so a long
     * settle holds no more than twice that. -1 with an exception. The settle's wait then
     * holds samples instead of idle warm-up calls. */
    Py_ssize_t (*settled_keep)(kb_backend *b, Py_ssize_t n, Py_ssize_t max_keep, int final,
                               double *from_s);
    /* Optional, with keep_warming (not with ranks). Asked after each sampling batch: 1 when the
     * device has left the state it settled in since sampling began (a CUDA load settled with
     * nothing limiting its clock that a limit reason has since limited: the samples mix two
     * states), after the backend has dropped its own records of the samples so far; 0 when it
     * holds; -1 with an exception. On 1 the loop drops its samples, settles again on the same
     * load (keep_warming, in batches of the sampling's size, so the load keeps the duty cycle
     * that left the state) and samples anew, from a first batch. Once a measurement. */
    int (*resettle)(kb_backend *b);
    /* Optional: the clock every decision of the loop reads (NULL: kb_now_s). A rank wrapper's
     * is the agreed one (ranks.c). */
    double (*now)(kb_backend *b);
};
enum { KB_BATCH_SAMPLE = 0, KB_BATCH_WARMUP = 1, KB_BATCH_TENTATIVE = 2 };

typedef struct {
    double *samples;            /* seconds, malloc'd, n of cap used */
    Py_ssize_t n, cap;
    Py_ssize_t warmup_iters;
    double warmup_s;            /* wall time spent warming up */
    int warmup_stable;          /* the warm-up ended because per-call times were stable (1),
                                 * not at warmup_s or by keep_warming (0) */
    double sampling_s;          /* wall time spent sampling (from the first kept sample) */
    double overlap_s;           /* of it, taken while the backend settled (settled_keep) */
    Py_ssize_t tentative_dropped;   /* samples taken while settling that were not kept */
    Py_ssize_t resettle_dropped;    /* samples dropped when the backend's resettle said the
                                     * device left its settled state (0: it did not) */
    double resettle_sampled_s;      /* how long they had sampled; the warm-up's time counts
                                     * them and the second settle (warmup_s) */
    int resettled;
    kb_stop stop;
    double achieved;            /* the criterion's last value */
    double resolution_s;        /* the backend's timer step, when it reported one */
    int at_resolution;          /* the 'ci' rule stopped at a CI one timer step wide, short of
                                 * the target: the median is good to one step */
} kb_loop_result;

/* One measuring loop at a time per process: benches started from several threads at once
 * would time each other. A backend's entry point brackets kb_loop_run with these; acquire
 * waits with the GIL released and stays interruptible (-1 with KeyboardInterrupt), and
 * refuses a bench started inside a measurement in the same thread (-1, KbenchError).
 * init/free: module init and m_free (the lock lives in the module state). */
int kb_measure_lock_init(kb_state *st);
void kb_measure_lock_free(kb_state *st);
int kb_measure_lock_acquire(PyObject *m);
void kb_measure_lock_release(PyObject *m);

/* Fill cfg with defaults, then override from the dict kw (may be NULL), DELETING every key it
 * consumes, so a caller can reject what is left as unexpected. Keys: warmup_s, warmup_min,
 * warmup_tol, min_samples, max_samples, max_time_s, target, ci_level, criterion, batch_max,
 * ranks (None or an object with a callable `reduce`: TypeError otherwise).
 * Bad values raise ValueError/TypeError naming the key. */
int kb_loop_config_parse(PyObject *kw, kb_loop_config *cfg);
/* _core.LOOP_DEFAULTS: the loop's defaults, for Python code that needs a value it was not
 * given (module exec). */
int kb_loop_module_init(PyObject *m);
int kb_schema_module_init(PyObject *m);     /* schema.c: OPTION_SCHEMA */
int kb_loop_run(kb_backend *b, const kb_loop_config *cfg, kb_loop_result *res);
void kb_loop_result_free(kb_loop_result *res);

/* ranks.c: a backend behind the rank reducer cfg->ranks (kbench.distributed): its batches'
 * samples become per-sample maxima across ranks, and keep_warming's answer, the timer step,
 * the sampling floor and the clock (now) are agreed, so every rank's loop decides on the same
 * numbers. kb_ranks_wrap returns `inner` itself without a reducer, else w's backend (w must
 * outlive the loop). */
typedef struct {
    kb_backend backend;         /* what the loop runs */
    kb_backend *inner;
    PyObject *ranks;            /* borrowed: cfg->ranks */
    double origin;              /* kb_now_s() when wrapped */
    double agreed_now;          /* the slowest rank's time since its origin, at the last step */
    Py_ssize_t steps;           /* the reducer's step index */
    int sampling;               /* the first sampling batch has begun */
} kb_rank_wrapper;
kb_backend *kb_ranks_wrap(const kb_loop_config *cfg, kb_backend *inner, kb_rank_wrapper *w);
/* Pop "ranks" from kw into cfg->ranks (borrowed): None or absent leaves NULL. */
int kb_ranks_parse(PyObject *kw, kb_loop_config *cfg);
/* {"samples": float64 ndarray (copied), "stop": str, "warmup_iters", "warmup_s", "warmup_stable",
 *  "warmup_tol", "sampling_s",
 *  "criterion", "target", "achieved", "ci_level", "min_samples", "max_samples", "max_time_s",
 *  "resolution_s", "at_resolution"} -- new reference or NULL. */
PyObject *kb_loop_result_to_dict(const kb_loop_result *res, const kb_loop_config *cfg);

/* ------------------------------------------------------------------ steady.c */

/* NVML clock event reasons that mean a limit holds the SM clock down (power cap, hardware
 * slowdown, software/hardware thermal slowdown, hardware power brake): bits 0x4, 0x8, 0x20,
 * 0x40, 0x80 of nvmlDeviceGetCurrentClocksEventReasons. */
#define KB_CLOCK_LIMIT_REASONS 0xECULL

/* One GPU's NVML readings, as the sampler records them and as tests feed them: t ascending
 * (seconds); NaN for a failed read; power_avg_w (nvmlDeviceGetPowerUsage: a one-second running
 * average on Ampere and later) and power_inst_w (NVML_FI_DEV_POWER_INSTANT) may be NULL. */
typedef struct {
    const double *t;
    const double *sm_mhz;
    const double *power_avg_w;
    const double *power_inst_w;
    const uint64_t *reasons;
    size_t n;
    double max_sm_mhz;      /* the board's maximum SM clock (nvmlDeviceGetMaxClockInfo); <= 0
                             * or NaN: unknown */
} kb_clock_trace;

/* The sustained regime's settle rule and the burst regime's recovery rule (steady.c). */
typedef struct {
    double window_s;        /* the two SM clock windows compared */
    double rel_tol;         /* their medians may differ by this fraction (at least 15 MHz) */
    double min_load_s;      /* never settled before the callable loaded the GPU this long */
    double avg_window_s;    /* the board's power-averaging window */
    double power_tol;       /* averaged power within this fraction (or 15 W) of instantaneous */
    double headroom;        /* instantaneous power under this share of the limit never caps */
    double late_headroom;   /* the same, for the one-window rules' readings all taken
                             * carry_response_s or more into the load: they read >= 96% of its
                             * power (a first snapshot 0.05 s in, 91%), and an unlimited load's
                             * power crept <= 2% over 8 s from a cool H200 while a capped one's
                             * average is held at 98.5% of the limit: 0.9 / 0.96 x 1.02 < 0.985
                             * (docs/design/clock-regimes.md, Late
                             * headroom) */
    double recover_window_s;    /* burst: readings that must show no limit before a batch */
    double recover_avg_frac;    /* burst: averaged power at most this share of the limit */
    double carry_max_gap_s;     /* a settled state is carried to a load that starts within this
                                 * of its end (the averaged power's window: longer, and nothing
                                 * of it is left on the GPU) */
    double carry_response_s;    /* readings this long into the load show the load itself (NVML
                                 * updates about every 0.1 s on the H200, and the clock and the
                                 * instantaneous power follow a load within one update) */
    double carry_window_s;      /* the carried rule's one clock window, after the response */
    double carry_update_margin_s;   /* the carried rule may also settle on the readings of
                                 * NVML's first snapshot taken this long after the load began
                                 * (a refresh shows as a change of the averaged or instantaneous
                                 * power between two readings), without waiting out
                                 * carry_response_s; NaN: not used. The margin is what the
                                 * instantaneous power needs to follow a load: on the H200
                                 * (settle_replay, 2026-12-01) snapshots 0.015 s into a load read
                                 * 63-65% of its later power, 0.035-0.04 s 87%, 0.055-0.065 s
                                 * 91-97% */
    double at_max_tol;          /* a reading within this fraction (>= 15 MHz) of the board's
                                 * maximum SM clock is at it */
    double at_max_window_s;     /* the maximum-clock rule's one window, after the response: a
                                 * whole NVML update period, so an update taken after the
                                 * response time is in it (nothing is known of this load, unlike
                                 * a carried state the readings need only match) */
    double capped_min_load_s;   /* under a limit, never settled before the load (with a capped
                                 * load it continues) lasted this long: the averaged power
                                 * fills with the load in one window, and the clock the
                                 * controller holds on it comes in the next */
    double capped_continue_gap_s;   /* a load continues a capped one (its loaded_s counts) only
                                 * when it began within this of that one's end: an idle gap
                                 * drains the averaged power and the controller lets the clock
                                 * up, so the load must settle anew (on four H200s f16 GEMMs
                                 * begun 0.52-0.59 s after a capped bf16 GEMM, continuing its
                                 * time, read their first second of sampling 1.0% fast, 14 of
                                 * 14 runs; begun 0.02-0.08 s after, they read with the rest) */
    int end_vs_carry;           /* 1 (a load's end judged again, kb_cuda_record_carry): a load that
                                 * continued a capped one with fewer than two windows of its own
                                 * readings is settled when its last window's median SM clock is
                                 * the carried clock's (rel_tol, >= 15 MHz), still limited, the
                                 * averaged power at the instantaneous. 0 by default */
} kb_settle_rule;
#define KB_SETTLE_RULE_DEFAULT {.window_s = 0.25, .rel_tol = 0.02, .min_load_s = 0.3,          \
                                .avg_window_s = 1.0, .power_tol = 0.05, .headroom = 0.8,       \
                                .late_headroom = 0.9,                                          \
                                .recover_window_s = 0.03, .recover_avg_frac = 0.6,             \
                                .carry_max_gap_s = 1.0, .carry_response_s = 0.1,               \
                                .carry_window_s = 0.05, .carry_update_margin_s = 0.05,         \
                                .at_max_tol = 0.01,                                            \
                                .at_max_window_s = 0.1, .capped_min_load_s = 2.0,              \
                                .capped_continue_gap_s = 0.25}

enum { KB_UNSETTLED = 0, KB_SETTLED = 1, KB_SETTLED_UNDER_LIMIT = 2 };
/* The clock event reasons of every reading after time lo, or-ed (t non-decreasing). Pure. */
uint64_t kb_clock_reasons_since(const kb_clock_trace *tr, double lo);
/* Whether the GPU has reached the sustained state of the load that began at tr->t value
 * load_start_s, as of the last reading: KB_SETTLED (nothing limits the clock, nor will),
 * KB_SETTLED_UNDER_LIMIT (a power/thermal limit holds it, at a steady median) or KB_UNSETTLED.
 * power_limit_w is NaN when unknown. prior_load_s: how long a capped load that this one
 * continues had run (0: none), counted toward capped_min_load_s. *median_last gets the last
 * window's median SM clock. `scratch` holds tr->n doubles. Pure: no Python, no NVML. */
int kb_clock_settled(const kb_clock_trace *tr, double load_start_s, double power_limit_w,
                     const kb_settle_rule *rule, double prior_load_s, double *scratch,
                     double *median_last);
/* What the previous measurement on the device established, as the next one's settle rule sees
 * it: its last window's median SM clock, whether it was settled under a limit, how long before
 * this load began it ended, and how long its load (with any capped load it continued) had run
 * by then. */
typedef struct {
    double sm_mhz;          /* NaN: nothing carried */
    int under_limit;
    double ago_s;
    double loaded_s;
} kb_settle_carry;
/* How long of a carried capped load this load continues: carry's loaded_s when it was settled
 * under a limit and ended at most capped_continue_gap_s before this load began, else 0 (also
 * for carry NULL or empty). What counts toward capped_min_load_s, and what the next measurement
 * continues besides this load's own time. */
double kb_settle_continued_s(const kb_settle_rule *rule, const kb_settle_carry *carry);
/* How a load settled (kb_clock_settled_carried's *by): the two-window rule, the carried state,
 * or the board's maximum clock. */
enum { KB_SETTLED_BY_RULE = 0, KB_SETTLED_BY_CARRY = 1, KB_SETTLED_AT_MAX = 2 };
/* The sustained rule with a carried state: kb_clock_settled, or -- when the load started within
 * carry_max_gap_s of the previous measurement's end, which had settled -- settled earlier, on
 * this load's own readings: once the load has run carry_response_s + carry_window_s (or, with
 * carry_update_margin_s, on the readings from NVML's first snapshot taken that long after the
 * load began), every SM reading of the last carry_window_s (of those) is within rel_tol
 * (>= 15 MHz) of the carried clock, and
 *   - carried unlimited: no limit reason since the load began, and every instantaneous power
 *     reading of the window under headroom x the known limit, late_headroom x it for a window
 *     that begins carry_response_s or more into the load (KB_SETTLED);
 *   - carried under a limit: a limit reason in the window, and the averaged power within
 *     power_tol (>= 15 W) of the window's mean instantaneous power: the previous load drew the
 *     same power at the same clock (KB_SETTLED_UNDER_LIMIT).
 * A load carried under a limit that began within capped_continue_gap_s of its end continues
 * it: its loaded_s counts toward capped_min_load_s, on either rule (kb_settle_continued_s).
 * With nothing carried (or a carry its readings do not match), the board's maximum SM clock is
 * a state the load can be settled in the same way as a carried unlimited one, over
 * at_max_window_s: every SM reading within at_max_tol (>= 15 MHz) of it, no limit reason since
 * the load began and the power under the headroom -- a clock cannot ramp past its maximum, and
 * nothing will pull it down. Without instantaneous power neither applies. *by says which rule
 * settled it (KB_SETTLED_BY_*). carry may be NULL. Pure, like kb_clock_settled. */
int kb_clock_settled_carried(const kb_clock_trace *tr, double load_start_s, double power_limit_w,
                             const kb_settle_rule *rule, const kb_settle_carry *carry,
                             double *scratch, double *median_last, int *by);
/* Since when the load has shown the state it settled in (`how`, at median SM clock sm_mhz).
 * Settled unlimited: the time of the last reading after load_start_s that did not -- its SM
 * clock beyond rel_tol (>= 15 MHz) of sm_mhz, or a limit reason -- or load_start_s when none
 * did. A sample that began after that time ran at the settled clock as far as the readings
 * show: NVML's values lag the GPU by at most one update and the readings after the sample
 * cover it (a sample within the last update is as unproven as one taken after the settle), and
 * with nothing limiting the clock (the rule's power test) its clock is the state. A failed read
 * proves nothing either way and is skipped. Settled under a limit: the last reading's time,
 * nothing before the settle. The capped clock dips between NVML's snapshots once the averaged
 * power reaches the limit: on the recorded H200 GEMM ramp the clock read 1470-1485 MHz from
 * 0.39 s of load on, yet GEMMs ran 542 us in 0.3-0.5 s against 547 us after the settle.
 * INFINITY when unsettled. Pure, like kb_clock_settled. */
double kb_clock_settled_since(const kb_clock_trace *tr, double load_start_s, double sm_mhz,
                              int how, const kb_settle_rule *rule);
/* Burst: has the GPU recovered from earlier load as of the last reading (no limit reason over
 * the last recover_window_s, instantaneous power under headroom x limit, averaged power under
 * recover_avg_frac x limit)? 1 or 0. */
int kb_power_recovered(const kb_clock_trace *tr, double power_limit_w,
                       const kb_settle_rule *rule);

/* Shared argument handling of measure_host / measure_cuda (measure.c). */
typedef enum { KB_COLD_NONE = 0, KB_COLD_FLUSH, KB_COLD_ROTATE } kb_cold_mode;
/* arg_sets must be a non-empty tuple of tuples, kwargs a dict or None: TypeError otherwise. */
int kb_check_arg_sets(PyObject *arg_sets, PyObject *kwargs);
/* Pop "cold" (None|'flush'|'rotate') from opts; ValueError on anything else. */
int kb_pop_cold_mode(PyObject *opts, kb_cold_mode *cold);

/* ------------------------------------------------------------------ plan.c */

/* How kbench.bench measures a call, decided once by _core.plan (plan.c says how). */
typedef enum { KB_BACKEND_HOST = 0, KB_BACKEND_CUDA, KB_BACKEND_HIP } kb_backend_id;
typedef enum {
    KB_MEASURE_HOST = 0,    /* calls, on the host clock */
    KB_MEASURE_CUPTI,       /* eager CUDA calls, their activity read by CUPTI */
    KB_MEASURE_EVENTS,      /* eager CUDA calls between event pairs */
    KB_MEASURE_GRAPH,       /* replays of captured calls (CUDA, HIP) */
    KB_MEASURE_PROFILE      /* one call in a profiler range, untimed */
} kb_measurement;
typedef enum { KB_TIMER_NONE = 0, KB_TIMER_HOST, KB_TIMER_EVENTS, KB_TIMER_CUPTI } kb_timer_id;
typedef struct {
    kb_backend_id backend;
    kb_measurement measurement;
    kb_timer_id timer;          /* KB_TIMER_NONE in profile mode */
    kb_cold_mode cold;
} kb_plan;

/* A cold-cache value: None, 'flush' or 'rotate' into *out; else ValueError naming `param` and
 * the accepted values. The one parser of the choice (_core.plan uses it). */
int kb_cold_mode_parse(PyObject *v, const char *param, kb_cold_mode *out);
/* A measure function's plan: plan= (a _core.Plan for `backend`, timed; cold= beside it is a
 * TypeError naming `func`) popped from opts into *out with *given = 1; without it, the
 * low-level spelling cold= (a measure_cuda caller also gives mode=) with the backend's
 * measurement and *given = 0. -1 with an exception. */
int kb_pop_plan(PyObject *m, PyObject *opts, kb_backend_id backend, const char *func,
                kb_plan *out, int *given);
int kb_plan_module_init(PyObject *m);   /* _core.plan, _core.Plan */
/* Parse the loop configuration from opts, then reject any key left: TypeError naming `func`. */
int kb_finish_options(PyObject *opts, const char *func, kb_loop_config *cfg);
/* Every one of n_sets argument sets is called once before the warm-up may end (warmup_min). */
void kb_warm_every_set(kb_loop_config *cfg, Py_ssize_t n_sets);

/* ------------------------------------------------------------------ coldcache.c */

/* Size in bytes of the largest (last-level) CPU cache into *bytes: $KBENCH_LLC_BYTES when set
 * (digits with an optional K, M or G suffix, 64 KiB .. 64 GiB; anything else is a ValueError
 * naming the variable and its value), else sysfs, else sysconf; 0 when unknown. */
int kb_cpu_llc_bytes(kb_state *st, size_t *bytes);

typedef struct {
    unsigned char *buf;         /* the buffer written before each sample */
    size_t bytes;
    unsigned char seed;         /* changes every flush so the writes cannot be elided */
} kb_cpu_flusher;

int kb_cpu_flusher_init(kb_cpu_flusher *f, size_t bytes);   /* MemoryError */
void kb_cpu_flush(kb_cpu_flusher *f);                        /* GIL-free */
/* The first pass, which faults the pages in (8 GB: 20 s on a VM), in chunks with the GIL
 * released and Ctrl-C checked between them (GIL held on entry); -1 with the exception set. */
int kb_cpu_flush_first(kb_cpu_flusher *f);
void kb_cpu_flusher_fini(kb_cpu_flusher *f);

/* ------------------------------------------------------------------ evict.c */

/* A write flush past this many bytes is replaced by evicting the operands' lines where kbench
 * sees every array fn reads: at ~13 GB/s (the 2-core VM) 256 MiB is 20 ms a sample, and the
 * 0.3 s budget would hold about ten samples of a flush of twice a 128 MiB cache. */
#define KB_EVICT_FROM_BYTES ((size_t)256 << 20)

typedef struct {
    Py_buffer *views;       /* every set's operands, held for the run */
    Py_ssize_t *first;      /* set k's views: views[first[k] .. first[k + 1]) */
    Py_ssize_t n_sets, n_views;
    size_t bytes;           /* the largest set's operand bytes */
} kb_cpu_evictor;

/* "clflushopt", "clflush" or "dc civac": the line flush this CPU runs; NULL where none. */
const char *kb_cpu_evict_instruction(void);
/* per_set: a tuple with one tuple of contiguous buffers per argument set. -1 + exception. */
int kb_cpu_evict_check(PyObject *per_set, Py_ssize_t n_sets);    /* its shape only */
int kb_cpu_evictor_init(kb_cpu_evictor *e, PyObject *per_set, Py_ssize_t n_sets);
void kb_cpu_evict_set(const kb_cpu_evictor *e, Py_ssize_t k);    /* GIL-free */
void kb_cpu_evictor_fini(kb_cpu_evictor *e);
int kb_evict_module_init(PyObject *m);

/* ------------------------------------------------------------------ helpers */

/* d[key] = value, stealing value; a NULL value means an exception is already set (pyutil.c). */
int kb_dict_set_steal(PyObject *d, const char *key, PyObject *value);
/* A new 1-D ndarray of n elements of numpy type `typenum` copied from data (pyutil.c). */
PyObject *kb_array_copy(const void *data, Py_ssize_t n, int typenum, size_t elsize);

/* Add a note (PEP 678) to the exception being raised; keeps the exception as it was if that
 * fails. Defined in pyutil.c. */
void kb_add_exception_note(const char *fmt, ...);
/* Whether the exception being raised is a refusal to convert (TypeError, ValueError), the only
 * kind kbench may rewrite into its own words: Ctrl-C or MemoryError raised inside __float__ or
 * while numpy reads a sequence must go on as they are. pyutil.c. */
int kb_err_is_refusal(void);

/* Read a float64 sequence (any object numpy can make a 1-D float64 array of) into a fresh
 * C-contiguous ndarray. New reference or NULL. Declared here, defined in stats.c. */
PyObject *kb_as_double_array(PyObject *obj, const char *what);
/* 0 when 0 < level < 1; else ValueError "<what> must be in (0, 1), got <level>" and -1. */
int kb_check_level(double level, const char *what);

#endif /* KBENCH_H */
