/* kb_regime.h -- what a CUDA measurement's clock record says (regime.c): the clock summary of
 * the timed part's NVML samples, the GPU's timed and busy fractions, whether a power cap moved
 * the clock, and whether the clock regime held. cuda_result.c puts these verdicts into the
 * record it builds; kbench.backends.cuda_report copies them.
 *
 * The judging functions are pure (no Python, no NVML, no CUDA) and cannot fail: missing or
 * non-finite data gives "unknown" (NaN, -1), never an error.
 */
#ifndef KB_REGIME_H
#define KB_REGIME_H

#include "kbench.h"

/* ------------------------------------------------------------------ clock summary */

/* The timed part's NVML samples. Each array may be NULL and has its own length (the sampler's
 * are all n_samples long); NaN marks a failed read. n_samples 0: the clocks were not sampled. */
typedef struct {
    size_t n_samples;           /* what the sampler kept (the record's clocks["n"]) */
    const double *sm_mhz;
    size_t n_sm;
    const double *mem_mhz;
    size_t n_mem;
    const double *power_w;
    size_t n_power;
    const double *temp_c;
    size_t n_temp;
    const uint64_t *reasons;
    size_t n_reasons;
    double spec_max_sm_mhz;     /* the board's maximum SM clock; NaN or <= 0 when unknown */
    int sampler_ran;            /* the sampler's dict was there: n_samples 0 then means the
                                 * timed part fell between two readings, not "no NVML" */
} kb_clock_samples;

enum { KB_CLOCKS_NOT_SAMPLED = 0, KB_CLOCKS_READS_FAILED = 1, KB_CLOCKS_READ = 2 };

typedef struct {
    int state;                  /* KB_CLOCKS_*: only KB_CLOCKS_READ fills the figures below */
    int steady;                 /* 1 steady, 0 moved, -1 unknown (not sampled / reads failed) */
    double sm_median, sm_min, sm_p95;
    double mem_median, power_median, temp_max;   /* NaN: no finite reading */
    uint64_t reasons_seen;      /* OR of every sample's reasons */
    uint64_t limited;           /* reasons_seen & KB_CLOCK_LIMIT_REASONS */
    char summary[320];          /* the one-line text ("SM 1980 MHz / ... (steady, 20 samples)") */
} kb_clock_verdict;

/* Summarise the samples. It sorts copies of the finite readings; where that memory cannot be
 * had the summary says so (state KB_CLOCKS_READS_FAILED, steady -1). */
void kb_clock_summary(const kb_clock_samples *s, kb_clock_verdict *out);

/* A power cap (sw_power_cap or hw_power_brake_slowdown) counts only where the clock moved. */
int kb_clock_power_capped(const kb_clock_verdict *v);

/* The NVML clock event reason bit's name ("sw_power_cap"), or NULL for a bit NVML does not
 * document. */
const char *kb_clock_reason_name(uint64_t bit);
/* The names of the bits set in mask, documented ones first (in bit order), then
 * "unknown_0x..." for the rest. New list or NULL with an exception. */
PyObject *kb_clock_event_reason_names(uint64_t mask);

/* ------------------------------------------------------------------ duty cycle */

/* Share of the sampling wall time the GPU spent inside timed iterations: the event brackets'
 * sum x unroll (events_s is per call; a graph launch replays `unroll` calls) over sampling_s,
 * at most 1. NaN when there is nothing to divide (no events, sampling_s not > 0, non-finite). */
double kb_timed_fraction(const double *events_s, size_t n, double unroll, double sampling_s);
/* timed plus the keep-busy bridges' GPU time over sampling_s, at most 1; `timed` itself (NaN
 * included) when sampling_s is not > 0. A non-finite or negative gpu_s counts as none. */
double kb_busy_fraction(double timed, double keep_busy_gpu_s, double sampling_s);

/* ------------------------------------------------------------------ regime */

typedef struct {
    int burst;                  /* the burst regime (else sustained) */
    int clocks_locked;          /* the user set or locked the clocks: nothing to settle */
    /* sustained: the warm-up's settle rule and the timed part's clocks */
    int settled;                /* 1 settled, 0 gave up at settle_max_s, -1 not judged */
    int settled_unlimited;      /* settled with nothing limiting the clock (KB_SETTLED) */
    uint64_t timed_limits;      /* the limit reasons the timed part's readings show */
    double settle_at_s, settle_max_s, settle_sm_mhz;     /* NaN: unknown */
    int clocks_read;            /* the clock summary had SM readings (KB_CLOCKS_READ) */
    double timed_sm_median;     /* the timed part's SM median; NaN: none */
    int power_capped;           /* kb_clock_power_capped */
    int cold;                   /* a cold-cache mode: the busy fraction is judged hot only (a
                                 * flush's GPU time is not counted as busy) */
    double busy_fraction;       /* NaN: unknown */
    /* burst */
    long long batches, unrecovered;
    double recover_max_s;       /* the longest wait for recovery (0: none) */
    double start_sm_min, start_sm_max;  /* SM clock at the batches' starts; NaN: none read */
} kb_regime_inputs;

typedef struct {
    int held;
    int clocks_steady;          /* burst: the clock summary's steady, judged at batch starts
                                 * (between batches the clock may idle down); -1: leave it */
    const char *note;           /* NULL, or a remark that is not a reason */
    char why[1024];             /* "held", or the reasons it did not, joined by "; " */
} kb_regime_verdict;

void kb_regime_judge(const kb_regime_inputs *in, kb_regime_verdict *out);

/* ------------------------------------------------------------------ the record's dicts */

/* The clock summary as the record's (and the Result's extra["clocks"]) dict. `clocks` is the
 * sampler's dict (period_s, before_mark copied from it) or None. New reference or NULL. */
PyObject *kb_clock_verdict_dict(const kb_clock_verdict *v, const kb_clock_samples *s,
                                PyObject *clocks);
/* regime["held"], ["why"] and, where there is one, ["note"]. 0 or -1. */
int kb_regime_verdict_into(const kb_regime_verdict *v, PyObject *regime);
/* Read the sampler's dict (None: not sampled) into s; arrays are converted into *held (four
 * float64 arrays and one uint64 array, released with kb_clock_samples_release). spec_mhz NaN:
 * the dict's max_sm_clock_mhz. Missing or None entries read as absent. 0, or -1 with an
 * exception (a value numpy cannot read as a 1-D array). */
int kb_clock_samples_from_dict(PyObject *clocks, double spec_mhz, kb_clock_samples *s,
                               PyObject **held);
void kb_clock_samples_release(PyObject **held);
#define KB_CLOCK_SAMPLES_HELD 5

int kb_regime_module_init(PyObject *m);     /* the _core wrappers (tests, benchmarks) */

#endif /* KB_REGIME_H */
