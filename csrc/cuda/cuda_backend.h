/* cuda_backend.h -- pieces of the CUDA backend shared by its files (CUDA build only).
 *
 *   coldcache_cuda.c  L2 flush buffer, persisting-L2 reset
 *   gate.c            device-side gate (cuStreamWaitValue32 on a host-mapped flag) + watchdog
 *   cupti_trace.c     CUPTI activity tracing attributed to iterations by external correlation
 *   graph.c           CUDA graph capture / replay for callables that are not PyTorch's
 *   cuda_kernels.c    built-in PTX kernels (empty, busy), NVRTC-compiled kernels, device buffers
 *   cuda_options.c    measure_cuda's options: one typed struct, its defaults (CUDA_DEFAULTS)
 *   gpu_timer.h       the GPU timer interface; timer_events.c, timer_cupti.c, timer_graph.c
 *   measure_cuda.c    measure_cuda(): the pipeline parse, set up, settle, sample, result, tear
 *                     down, around the timing loop of measure.c; its parts in cuda_batch.c (one
 *                     loop batch: queue, bridge, wait, read), cuda_settle.c (the clock regimes)
 *                     and cuda_result.c (the "cuda" dict), sharing cuda_loop.h
 */
#ifndef KB_CUDA_BACKEND_H
#define KB_CUDA_BACKEND_H

#include "kbench.h"
#include "loader.h"
#include "gpu_timer.h"
#include "kb_watchdog.h"

#include <pthread.h>

/* ---------------------------------------------------------------- context */

/* Make the primary context of `ordinal` current on this thread (the context PyTorch, CuPy and
 * the runtime API use). *pushed is set when a context was pushed and must be popped. */
int kb_ctx_enter(PyObject *m, const kb_cuda_api *cu, int ordinal, int *pushed);
/* The same, 1 when entered; with create 0 only a context that exists (current, or the primary
 * one active) is entered, else 0 (a reading that must not make a context). -1 on error. */
int kb_ctx_enter_maybe(PyObject *m, const kb_cuda_api *cu, int ordinal, int create, int *pushed);
void kb_ctx_leave(const kb_cuda_api *cu, int pushed);

/* ---------------------------------------------------------------- coldcache_cuda.c */

typedef struct {
    CUdeviceptr buf;            /* the buffer written before each sample */
    size_t bytes;
    unsigned int value;         /* changes every flush */
} kb_l2_flusher;

/* Allocate `bytes` (0: 2x the device's L2). MemoryError naming the size on out-of-memory. */
int kb_l2_flusher_init(PyObject *m, const kb_cuda_api *cu, CUdevice dev, kb_l2_flusher *f,
                       size_t bytes);
int kb_l2_flush(PyObject *m, const kb_cuda_api *cu, kb_l2_flusher *f, CUstream s);
void kb_l2_flusher_fini(const kb_cuda_api *cu, kb_l2_flusher *f);
/* Read the persisting-L2 limit of the current context and reset persisting lines to normal.
 * *limit gets the limit in bytes (0 when none is set). */
int kb_l2_persisting_reset(PyObject *m, const kb_cuda_api *cu, size_t *limit);

/* ---------------------------------------------------------------- gate.c */

/* The gate holds a stream behind cuStreamWaitValue32 on a host-mapped flag while the host
 * queues a batch, so host launch overhead stays out of the timed region (nvbench's blocking
 * kernel). A watchdog thread opens it after timeout_s, so a full launch queue cannot deadlock
 * the host behind its own gate. */
typedef struct {
    volatile uint32_t *host_flag;   /* pinned, device-mapped */
    CUdeviceptr dev_flag;
    uint32_t generation;            /* the value the current close waits for */
    double timeout_s;
    kb_watchdog watchdog;           /* opens the gate after timeout_s (csrc/core/watchdog.c) */
} kb_gate;

int kb_gate_init(PyObject *m, const kb_cuda_api *cu, kb_gate *g, double timeout_s);
/* Queue the wait on `s`; from now on launches on `s` queue up behind it. */
int kb_gate_close(PyObject *m, const kb_cuda_api *cu, kb_gate *g, CUstream s);
/* Release the stream. Returns 1 when the watchdog had already opened it (the batch may have
 * timed host launch gaps), else 0. */
int kb_gate_open(kb_gate *g);
void kb_gate_fini(const kb_cuda_api *cu, kb_gate *g);

/* ---------------------------------------------------------------- busy_time.c */

/* One activity's interval [start, end), and the call (key) it belongs to. */
typedef struct {
    uint64_t key, start, end;
} kb_span;
/* Sort v[0..n) by call and replace it by one entry a call, in key order: {key, 0, busy}, busy
 * the length of the union of that call's intervals. Returns the number of calls. */
size_t kb_busy_time(kb_span *v, size_t n);

/* ---------------------------------------------------------------- cupti_trace.c */

/* Per-iteration activity, attributed by external correlation id = iteration id (>= 1). */
typedef struct {
    uint64_t busy_ns;       /* the union of their intervals: overlapped time counted once */
    uint64_t sum_ns;        /* sum of kernel + memcpy + memset durations */
    uint64_t first_start;   /* earliest start */
    uint64_t last_end;      /* latest end */
    uint32_t kernels, memcpys, memsets;
} kb_iter_activity;

typedef struct kb_cupti_trace kb_cupti_trace;

/* Take CUPTI: CuptiBusy when another profiler owns it (nsys/ncu injection, another kbench
 * trace, or another CUPTI subscriber unless allow_foreign_subscriber -- the Python layer passes
 * 1 when it has checked that torch.profiler is not running, since Kineto keeps its subscription
 * after a profile ends). Enables kernel/memcpy/memset/external-correlation activity.
 * *foreign is set when another subscriber was present. */
int kb_cupti_begin(PyObject *m, int allow_foreign_subscriber, kb_cupti_trace **out,
                   int *foreign);
/* Around the launches of iteration `id` (>= 1). */
int kb_cupti_push(PyObject *m, kb_cupti_trace *t, uint64_t id);
int kb_cupti_pop(PyObject *m, kb_cupti_trace *t);
void kb_cupti_pop_quiet(kb_cupti_trace *t);     /* error paths: pop, ignore the result */
/* Flush CUPTI's buffers (after the batch has been waited for) and fill acts[i] for ids
 * first_id .. first_id + n - 1. Activity without an id (the L2 flush) is ignored. sentinel_id:
 * the id of device work launched after the batch (kbench's empty kernel); when its record is
 * back after a default flush the flush is not forced (a forced flush lengthens the records of
 * later kernels). 0: no sentinel, always forced. names_of[i] (or NULL: none): id first_id + i
 * counts towards the per-name activity table. */
int kb_cupti_collect(PyObject *m, kb_cupti_trace *t, uint64_t first_id, Py_ssize_t n,
                     kb_iter_activity *acts, const unsigned char *names_of,
                     uint64_t sentinel_id);
/* Batches read with the default flush, and forced. */
void kb_cupti_flush_counts(kb_cupti_trace *t, uint64_t *by_default, uint64_t *forced);
/* Switch the kernel/memcpy/memset records off (on = 0) while untimed work is queued that may
 * still run when the batch before it is read, and back on. */
int kb_cupti_device_records(PyObject *m, kb_cupti_trace *t, int on);
/* Per activity name, over the batches collected with record_names:
 * {name: {"kind", "count", "total_ns", "min_ns", "max_ns"}}. New reference. */
PyObject *kb_cupti_names(kb_cupti_trace *t);
/* Activity and external-correlation records seen in the last collected batch. */
void kb_cupti_last_counts(kb_cupti_trace *t, size_t *activities, size_t *external);
/* CUPTI timestamp units per nanosecond, measured at kb_cupti_begin (1.0 unless another tool
 * registered a timestamp callback). Durations from kb_cupti_collect are already in ns. */
double kb_cupti_ticks_per_ns(kb_cupti_trace *t);
/* Records CUPTI dropped (buffers full) or returned unfinished (no start or end time). */
uint64_t kb_cupti_dropped(kb_cupti_trace *t);
/* Disable, flush, unsubscribe, free. Always safe; keeps a pending exception. */
void kb_cupti_end(PyObject *m, kb_cupti_trace *t);

/* ---------------------------------------------------------------- cuda_kernels.c */

/* Built-in PTX kernels (no NVRTC needed): kb_empty() and kb_busy(ns, sink). Loaded once per
 * context on first use. */
typedef struct {
    CUcontext ctx;
    CUmodule module;
    CUfunction empty;
    CUfunction busy;
    CUdeviceptr sink;
} kb_builtin_kernels;

int kb_builtin_load(PyObject *m, const kb_cuda_api *cu, kb_builtin_kernels *k);
void kb_builtin_unload(const kb_cuda_api *cu, kb_builtin_kernels *k);
/* The device's builtin kernels, loaded once per process into the current context and kept in
 * the module state (a module loaded and unloaded per measurement cost device memory while CUPTI
 * was attached). NULL with an exception. */
kb_builtin_kernels *kb_builtin_get(PyObject *m, const kb_cuda_api *cu, int device);
/* Keep every SM busy for `seconds` (clock ramp-up before measuring). */
int kb_builtin_busy(PyObject *m, const kb_cuda_api *cu, kb_builtin_kernels *k, CUdevice dev,
                    CUstream s, double seconds);

/* ---------------------------------------------------------------- graph.c */

/* A CUDA graph captured from a callable (Python type kbench._core.CudaGraph). */
typedef struct {
    PyObject_HEAD
    CUgraph graph;
    CUgraphExec exec;
    Py_ssize_t unroll;          /* calls of the callable captured into the graph */
    Py_ssize_t kernel_nodes, memcpy_nodes, memset_nodes, other_nodes;
    PyObject *keepalive;        /* the arguments the graph's pointers refer to */
} kb_graph_object;

int kb_graph_check(PyObject *m, PyObject *obj);           /* 1 when obj is a CudaGraph */
int kb_graph_launch(PyObject *m, const kb_cuda_api *cu, kb_graph_object *g, CUstream s);

/* ---------------------------------------------------------------- cuda_options.c */

typedef enum { KB_GPU_EVENTS = 0, KB_GPU_CUPTI = 1 } kb_gpu_mode;
/* The clock/power state a figure is taken in (steady.c). */
typedef enum { KB_REGIME_SUSTAINED = 0, KB_REGIME_BURST = 1 } kb_regime;

/* measure_cuda's options, parsed once (cuda_options.c); every default and range is the
 * schema's row (kb_schema.h, _core.CUDA_DEFAULTS), not restated here. */
typedef struct {
    CUstream stream;            /* required: the stream the callable launches on (0: legacy) */
    int device;                 /* the ordinal */
    kb_gpu_mode mode;           /* the timer: the plan's, or mode= without one */
    kb_cold_mode cold;          /* the plan's cold cache, or cold= without one */
    kb_plan plan;               /* plan= (kbench.bench's), else made from mode= and cold= */
    Py_ssize_t flush_bytes;     /* the L2 flush buffer, 0: 2x the device's L2 */
    double unroll;              /* calls per launch: samples are divided by it */
    int gate;                   /* queue each batch behind a device gate */
    int keep_busy;              /* keep-busy bridges between batches (0 in burst or with
                                 * pre_sample: a bridge is extra calls of fn) */
    Py_ssize_t gate_batch;      /* samples per gated batch at most (KB_GATE_BATCH_MAX) */
    double gate_timeout_s;      /* the gate's watchdog */
    double busy_warmup_s;       /* clock ramp-up before the callable's warm-up; < 0 (None): the
                                 * loop's warmup_s; at most KB_BUSY_WARMUP_MAX_S */
    int cupti_allow_foreign;    /* take CUPTI beside another subscriber */
    int sample_clocks;          /* NVML clock sampling */
    double clock_period_s;      /* its period */
    double settle_max_s;        /* the warm-up waits at most this long for the clock */
    kb_regime regime;           /* burst or sustained */
    PyObject *pre_sample;       /* called before every call of fn, outside the timed part;
                                 * None (NULL); a strong reference */
} kb_cuda_options;

/* The callable's own warm-up on CUDA: the busy kernel has brought the clocks up, so it needs
 * only its caches, allocator and JIT warm: at most this long (the loop's warmup_s is clamped,
 * and the result says so), at least this many calls. */
#define KB_CUDA_CALLABLE_WARMUP_MAX_S 0.1
#define KB_CUDA_CALLABLE_WARMUP_MIN 3

/* Parse from opts (the caller's keywords, copied), DELETING each key it consumes: the loop's
 * keys are left for kb_finish_options. Bad values raise TypeError/ValueError naming the option.
 * fn_is_graph and n_sets: cold='rotate' needs two argument sets unless fn is a CudaGraph. */
int kb_cuda_options_parse(PyObject *m, PyObject *opts, int fn_is_graph, Py_ssize_t n_sets,
                          kb_cuda_options *o);
void kb_cuda_options_fini(kb_cuda_options *o);

/* ---------------------------------------------------------------- timers (gpu_timer.h) */

/* Events on `stream`, cap samples a batch at most. */
int kb_timer_events_init(kb_gpu_timer *t, PyObject *m, const kb_cuda_api *cu, CUstream stream,
                         Py_ssize_t cap);
/* CUPTI around `inner` (the events timer): takes CUPTI (kb_cupti_begin) and, on success, owns
 * inner (its teardown tears inner down). On failure inner is left to the caller. */
int kb_timer_cupti_init(kb_gpu_timer *t, kb_gpu_timer *inner, PyObject *m,
                        const kb_cuda_api *cu, CUstream stream, Py_ssize_t cap, int ordinal,
                        int allow_foreign_subscriber);
/* Graph replay around `inner`: samples divided by the `unroll` calls a launch runs. Owns inner
 * on success. */
int kb_timer_graph_init(kb_gpu_timer *t, kb_gpu_timer *inner, double unroll);

#endif
