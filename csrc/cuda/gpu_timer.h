/* gpu_timer.h -- the interface every GPU timer implements (CUDA events, CUPTI, graph replay;
 * HIP events and a multi-rank reducer next).
 *
 * The measuring pipeline (measure_cuda.c; its batches in cuda_batch.c) queues a batch of
 * samples on a stream, each one
 *
 *   [pre_sample()] [cold-cache flush]  start(i)  fn()  end(i)
 *
 * then waits for the batch and reads it. A timer marks a sample's start and end around the call
 * (an event pair, an external-correlation push/pop, ...), ends a batch (CUPTI's sentinel) and
 * reads the batch's samples once the device has run it. It knows nothing of gates, bridges,
 * clocks or the stopping rule. The interface holds no vendor type: a device event is a void *
 * (CUevent and hipEvent_t are pointers), so a HIP timer implements it as it stands, and a
 * wrapper (graph replay's per-call division, a reducer across ranks) forwards to `inner`.
 *
 * Every function that can fail returns -1 with a Python exception set, else 0.
 */
#ifndef KB_GPU_TIMER_H
#define KB_GPU_TIMER_H

#include "kbench.h"

/* One sample as read back. */
typedef struct {
    double time_s;          /* the sample's figure: the event pair (events), the busy time of
                             * the activity attributed to it (cupti: the union of their
                             * intervals, busy_time.c) */
    double bracket_s;       /* the event pair around the call */
    double launch_s;        /* the event pair of one launch, never divided per call: the GPU
                             * time the sample kept the device busy (bridge sizing, burst) */
    double span_s;          /* first activity start to last end (cupti), else time_s */
    double summed_s;        /* their durations summed (cupti: above time_s when they
                             * overlapped), else time_s */
    uint32_t kernels;       /* kernels attributed to the sample (cupti), else 0 */
    uint32_t copies;        /* memcpys + memsets attributed (cupti), else 0 */
} kb_gpu_sample;

enum { KB_READ_NAMES = 1, KB_READ_KEEP = 2 };

typedef struct kb_gpu_timer kb_gpu_timer;
struct kb_gpu_timer {
    const char *name;       /* "events", "cupti", "graph" (a wrapper takes its inner's name) */
    void *impl;             /* the timer's own state */
    kb_gpu_timer *inner;    /* the timer a wrapper forwards to; NULL for a base timer */
    int stepped;            /* 1: durations come in device timestamp steps (32 ns on the H200) */

    /* A batch of n samples is about to be queued. */
    int (*batch_begin)(kb_gpu_timer *t, Py_ssize_t n);
    /* Around the call of sample i (0 <= i < n). end gets ok = 0 when the call failed: the
     * timer undoes what start did without clobbering the pending exception. */
    int (*sample_start)(kb_gpu_timer *t, Py_ssize_t i);
    int (*sample_end)(kb_gpu_timer *t, Py_ssize_t i, int ok);
    /* After the batch's last sample, before the pipeline's end-of-batch marker. collected: the
     * next finish follows this batch's read (it is the last one that finish collects). */
    int (*batch_end)(kb_gpu_timer *t, int collected);
    /* Untimed work (keep-busy bridges) is about to be queued (begin = 1), or has been (0). */
    int (*untimed)(kb_gpu_timer *t, int begin);
    /* The device has run the batch: read its n samples into out. flags: KB_READ_NAMES, the
     * batch counts towards the per-name activity table; KB_READ_KEEP, its samples are kept. */
    int (*read)(kb_gpu_timer *t, Py_ssize_t n, int flags, kb_gpu_sample *out);
    /* NULL for a timer whose reads are complete. Else its reads fill only bracket_s and
     * launch_s (the pipeline sizes bridges and counts gaps from them per sub-batch), and
     * finish, called once the device has run every batch read since the last finish, fills
     * time_s, span_s, kernels and copies of the n samples those reads kept, in read order (n
     * may be 0: release what discarded reads left). CUPTI makes one flush here instead of one
     * per sub-batch: libcupti keeps 72 B of host memory per flush, for good, and each costs
     * the host a turnaround. */
    int (*finish)(kb_gpu_timer *t, Py_ssize_t n, kb_gpu_sample *out);
    /* After a timed batch of the loop: raise when the kept samples cannot stand (cupti: a
     * sample with no attributed activity, the callable launched nothing it could see). */
    int (*check)(kb_gpu_timer *t);
    /* The device event recorded at sample i's start (for the idle time between batches). */
    void *(*start_mark)(kb_gpu_timer *t, Py_ssize_t i);
    /* Add the timer's own fields to the result's "cuda" dict. */
    int (*report)(kb_gpu_timer *t, PyObject *cuda);
    /* Free everything; always safe, keeps a pending exception. */
    void (*teardown)(kb_gpu_timer *t);
};

#endif
