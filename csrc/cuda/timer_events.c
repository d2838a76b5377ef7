/* timer_events.c -- the CUDA-events GPU timer: sample i = event b_i - event a_i, recorded on the
 * measured stream right before and right after the call.
 *
 *   [flush]  [event a_i]  fn()  [event b_i]
 *
 * The other timers build on it: CUPTI records the same pairs, for comparison, and reads its
 * own figure over them.
 */
#include "cuda_backend.h"

#include <stdlib.h>

typedef struct {
    PyObject *m;
    const kb_cuda_api *cu;
    CUstream stream;
    CUevent *ev;            /* 2 * cap: a_i = ev[2i], b_i = ev[2i + 1] */
    Py_ssize_t cap;
} events_timer;

static int events_batch_begin(kb_gpu_timer *t, Py_ssize_t n) { return 0; }

static int events_sample_start(kb_gpu_timer *t, Py_ssize_t i)
{
    events_timer *e = t->impl;
    return KB_CU(e->m, e->cu->cuEventRecord(e->ev[2 * i], e->stream));
}

static int events_sample_end(kb_gpu_timer *t, Py_ssize_t i, int ok)
{
    events_timer *e = t->impl;
    if (!ok)
        return -1;      /* the call failed: its exception stands, nothing to undo */
    return KB_CU(e->m, e->cu->cuEventRecord(e->ev[2 * i + 1], e->stream));
}

static int events_batch_end(kb_gpu_timer *t, int collected) { return 0; }

static int events_untimed(kb_gpu_timer *t, int begin) { return 0; }

static int events_read(kb_gpu_timer *t, Py_ssize_t n, int flags, kb_gpu_sample *out)
{
    events_timer *e = t->impl;
    for (Py_ssize_t i = 0; i < n; i++) {
        float ms = 0.f;
        if (KB_CU(e->m, e->cu->cuEventElapsedTime(&ms, e->ev[2 * i], e->ev[2 * i + 1])) < 0)
            return -1;
        double s = (double)ms * 1e-3;
        out[i] = (kb_gpu_sample){.time_s = s, .bracket_s = s, .launch_s = s, .span_s = s,
                                  .summed_s = s};
    }
    return 0;
}

static void *events_start_mark(kb_gpu_timer *t, Py_ssize_t i)
{
    events_timer *e = t->impl;
    return e->ev[2 * i];
}

static int events_check(kb_gpu_timer *t) { return 0; }

static int events_report(kb_gpu_timer *t, PyObject *cuda) { return 0; }

static void events_teardown(kb_gpu_timer *t)
{
    events_timer *e = t->impl;
    if (e == NULL)
        return;
    for (Py_ssize_t i = 0; e->ev && i < 2 * e->cap; i++)
        if (e->ev[i])
            e->cu->cuEventDestroy(e->ev[i]);
    free(e->ev);
    free(e);
    t->impl = NULL;
}

int kb_timer_events_init(kb_gpu_timer *t, PyObject *m, const kb_cuda_api *cu, CUstream stream,
                         Py_ssize_t cap)
{
    *t = (kb_gpu_timer){.name = "events", .batch_begin = events_batch_begin,
                        .sample_start = events_sample_start, .sample_end = events_sample_end,
                        .batch_end = events_batch_end, .untimed = events_untimed,
                        .read = events_read, .check = events_check, .start_mark = events_start_mark,
                        .report = events_report, .teardown = events_teardown};
    events_timer *e = calloc(1, sizeof *e);
    CUevent *ev = calloc((size_t)(2 * cap), sizeof(CUevent));
    if (e == NULL || ev == NULL) {
        free(e);
        free(ev);
        PyErr_NoMemory();
        return -1;
    }
    *e = (events_timer){.m = m, .cu = cu, .stream = stream, .ev = ev, .cap = cap};
    t->impl = e;
    for (Py_ssize_t i = 0; i < 2 * cap; i++)
        if (KB_CU(m, cu->cuEventCreate(&ev[i], CU_EVENT_DEFAULT)) < 0) {
            ev[i] = NULL;
            events_teardown(t);
            return -1;
        }
    return 0;
}
