/* kb_schema.h -- every option of the C core, written once.
 *
 * One row per option: the defaults, the parsers' ranges and their messages, _core.LOOP_DEFAULTS,
 * _core.CUDA_DEFAULTS, _core.OPTION_SCHEMA (from which Python builds the docstrings of
 * kbench.bench, ab and sweep and the docs' option reference) all come from these rows, and
 * tests/test_option_schema.py fails when the pyi, a docstring or the docs disagree with them.
 *
 * X(name, type, default, text, choices, lo, hi, bounds, with_target, backends, doc)
 *   type      KB_T_FLOAT (a finite number; None keeps the default), KB_T_FLOAT_OR_NONE (None
 *             is the default: the backend picks), KB_T_COUNT (an int, never a bool),
 *             KB_T_BOOL, KB_T_CHOICE (one of choices, "a|b")
 *   default   the number (a bool's 0/1); unused for a choice, whose default is text
 *   lo, hi    the range; bounds: KB_LO_OPEN and/or KB_HI_OPEN exclude an end (INFINITY: none)
 *   with_target  the default when the caller gives target= (NAN: the same)
 *   backends  KB_ON_HOST | KB_ON_CUDA | KB_ON_HIP: the measure functions that take it
 *   doc       one line: what it does (help(), the docs' reference)
 */
#ifndef KB_SCHEMA_H
#define KB_SCHEMA_H

#include <Python.h>
#include <math.h>

#define KB_ON_HOST 1u
#define KB_ON_CUDA 2u
#define KB_ON_HIP 4u
#define KB_ON_ALL (KB_ON_HOST | KB_ON_CUDA | KB_ON_HIP)
#define KB_ON_GPU (KB_ON_CUDA | KB_ON_HIP)

#define KB_LO_OPEN 1u
#define KB_HI_OPEN 2u

/* Past these a value is a mistake (1e300, a unit slip), not a plan: a loop that runs for it
 * cannot be told from a hang; the watchdog's deadline overflowed time_t past 1e6 s. */
#define KB_MAX_WARMUP_S 3600.0
#define KB_MAX_TIME_S 86400.0
/* The most launches one gated batch may queue, in every backend: a launch queue holds about
 * 1-2k, and a gated batch past it waits on the watchdog every time (and sets up as many event
 * pairs, before anything runs). */
#define KB_GATE_BATCH_MAX 4096
/* 11.6 days: a gate held longer is a hang, not a measurement. */
#define KB_GATE_TIMEOUT_MAX_S 1e6
#define KB_BUSY_WARMUP_MAX_S 3600.0
#define KB_MAX_DEVICE 63

/* The timing loop's options (measure.c), taken by every backend. The default contract: a
 * figure in a bounded time, its CI stated -- sampling stops at the target or after max_time_s,
 * whichever comes first; a caller who asks for a precision (target=) waits for it, up to
 * max_time_s's with_target. */
#define KB_LOOP_OPTIONS(X)                                                                      \
    X(warmup_s, KB_T_FLOAT, 0.25, NULL, NULL, 0.0, KB_MAX_WARMUP_S, 0u, 1.0, KB_ON_ALL,        \
      "warm-up limit in seconds (GPU: also the busy kernel's, at most 0.05 s in burst)")       \
    X(warmup_min, KB_T_COUNT, 1, NULL, NULL, 0.0, INFINITY, 0u, NAN, KB_ON_ALL,                \
      "fewest warm-up calls (at least one pass over the argument sets)")                      \
    X(warmup_tol, KB_T_FLOAT, 0.02, NULL, NULL, 0.0, 1.0, 0u, NAN, KB_ON_ALL,                  \
      "the warm-up ends when successive per-call times agree within this fraction")           \
    X(min_samples, KB_T_COUNT, 10, NULL, NULL, 1.0, INFINITY, 0u, NAN, KB_ON_ALL,              \
      "fewest samples before any stop rule may stop")                                         \
    X(max_samples, KB_T_COUNT, 100000, NULL, NULL, 1.0, INFINITY, 0u, NAN, KB_ON_ALL,          \
      "most samples")                                                                          \
    X(max_time_s, KB_T_FLOAT, 0.3, NULL, NULL, 0.0, KB_MAX_TIME_S, KB_LO_OPEN, 10.0, KB_ON_ALL, \
      "sampling budget in seconds, its CI stated (stop 'budget'); with target=, the cap on "   \
      "waiting for it (stop 'time_cap', a warning)")                                           \
    X(target, KB_T_FLOAT, 0.005, NULL, NULL, 0.0, INFINITY, KB_LO_OPEN, NAN, KB_ON_ALL,        \
      "stop when the CI's half-width over the median is within this; giving it waits for it") \
    X(ci_level, KB_T_FLOAT, 0.95, NULL, NULL, 0.0, 1.0, KB_LO_OPEN | KB_HI_OPEN, NAN,          \
      KB_ON_ALL, "the confidence level of the median's CI")                                    \
    X(criterion, KB_T_CHOICE, 0, "ci", "ci|entropy", 0.0, 0.0, 0u, NAN, KB_ON_ALL,             \
      "stop rule: 'ci' (the CI of the median) or 'entropy' (nvbench's)")                      \
    X(batch_max, KB_T_COUNT, 1 << 20, NULL, NULL, 1.0, INFINITY, 0u, NAN, KB_ON_ALL,           \
      "most calls in one timed batch")

/* The measure functions' own options (cuda_options.c, hip_options.c, measure_host.c). */
#define KB_GPU_OPTIONS(X)                                                                       \
    X(device, KB_T_COUNT, 0, NULL, NULL, 0.0, KB_MAX_DEVICE, 0u, NAN, KB_ON_GPU,               \
      "the device ordinal")                                                                    \
    X(mode, KB_T_CHOICE, 0, "events", "events|cupti", 0.0, 0.0, 0u, NAN, KB_ON_CUDA,           \
      "measure_cuda's timer without plan=; kbench.bench passes its plan (_core.plan) instead")   \
    X(flush_bytes, KB_T_COUNT, 0, NULL, NULL, 0.0, INFINITY, 0u, NAN, KB_ON_ALL,               \
      "bytes a cold flush writes (0: twice the last-level cache, or L2)")                      \
    X(unroll, KB_T_FLOAT, 1.0, NULL, NULL, 1.0, INFINITY, 0u, NAN, KB_ON_GPU,                  \
      "calls of the operation per call of fn (a graph's unroll): times are per operation")    \
    X(gate, KB_T_BOOL, 1, NULL, NULL, 0.0, 1.0, 0u, NAN, KB_ON_GPU,                            \
      "queue each batch behind a device gate, so launch overhead is not timed")               \
    X(keep_busy, KB_T_BOOL, 1, NULL, NULL, 0.0, 1.0, 0u, NAN, KB_ON_CUDA,                      \
      "sustained: queue untimed calls between sub-batches so the GPU does not cool")          \
    X(gate_batch, KB_T_COUNT, 32, NULL, NULL, 1.0, KB_GATE_BATCH_MAX, 0u, NAN, KB_ON_GPU,      \
      "calls queued behind the gate per sub-batch")                                           \
    X(gate_timeout_s, KB_T_FLOAT, 1.0, NULL, NULL, 0.0, KB_GATE_TIMEOUT_MAX_S, KB_LO_OPEN, NAN, \
      KB_ON_GPU, "the watchdog opens the gate after this long (a full launch queue)")         \
    X(busy_warmup_s, KB_T_FLOAT_OR_NONE, 0, NULL, NULL, 0.0, KB_BUSY_WARMUP_MAX_S, 0u, NAN,    \
      KB_ON_CUDA, "how long the busy kernel warms the GPU (None: warmup_s, capped in burst)") \
    X(cupti_allow_foreign, KB_T_BOOL, 0, NULL, NULL, 0.0, 1.0, 0u, NAN, KB_ON_CUDA,            \
      "use CUPTI even when another tool subscribed to it first")                              \
    X(sample_clocks, KB_T_BOOL, 1, NULL, NULL, 0.0, 1.0, 0u, NAN, KB_ON_CUDA,                  \
      "sample SM clock, power and limit reasons with NVML while timing")                      \
    X(clock_period_s, KB_T_FLOAT, 0.005, NULL, NULL, 0.0, INFINITY, KB_LO_OPEN, NAN,           \
      KB_ON_CUDA, "NVML sampling period in seconds")                                          \
    X(settle_max_s, KB_T_FLOAT, 4.0, NULL, NULL, 0.0, INFINITY, 0u, NAN, KB_ON_CUDA,           \
      "sustained: wait at most this long for the SM clock to settle under fn's load (0: off)") \
    X(regime, KB_T_CHOICE, 1, "burst", "sustained|burst", 0.0, 0.0, 0u, NAN, KB_ON_CUDA,       \
      "clock regime: 'burst' (each batch from a recovered GPU) or 'sustained' (settled load)")

typedef enum { KB_T_FLOAT, KB_T_FLOAT_OR_NONE, KB_T_COUNT, KB_T_BOOL, KB_T_CHOICE } kb_opt_type;

#define KB_OPT_ID(name, ...) KB_OPT_##name,
typedef enum { KB_LOOP_OPTIONS(KB_OPT_ID) KB_GPU_OPTIONS(KB_OPT_ID) KB_N_OPTIONS } kb_opt_id;
#undef KB_OPT_ID

typedef struct {
    const char *name;
    kb_opt_type type;
    double num;             /* the default: a number, a bool's 0/1, a choice's index */
    const char *text;       /* a choice's default */
    const char *choices;    /* "a|b" */
    double lo, hi;
    unsigned bounds;        /* KB_LO_OPEN, KB_HI_OPEN */
    double with_target;     /* NAN: the same with target= */
    unsigned backends;
    const char *doc;
} kb_opt_spec;

extern const kb_opt_spec kb_option_schema[KB_N_OPTIONS];

/* An option's row, and its default as a number. */
#define KB_SPEC(name) (&kb_option_schema[KB_OPT_##name])
#define KB_DEFAULT(name) (kb_option_schema[KB_OPT_##name].num)

/* A count's upper bound as a Py_ssize_t (PY_SSIZE_T_MAX where the row has none). */
Py_ssize_t kb_spec_count_hi(const kb_opt_spec *s);
/* The index of `text` among the row's choices (-1: not one of them). */
int kb_spec_choice(const kb_opt_spec *s, const char *text);
/* The row's choices for a message: "'a' or 'b'", "'a', 'b' or 'c'". */
void kb_spec_choices_text(const kb_opt_spec *s, char *buf, size_t size);

/* _core.OPTION_SCHEMA, and a {name: default} dict of the rows taken by `backends` (the
 * with-target defaults as NAME_with_target). */
int kb_schema_module_init(PyObject *m);
PyObject *kb_schema_defaults(unsigned backends, int loop);

#endif /* KB_SCHEMA_H */
