/* timer_graph.c -- graph replay: a wrapper around the events or CUPTI timer for launches that
 * run `unroll` calls each (a CudaGraph captured with unroll calls, or a torch graph replayed by
 * a Python callable). The inner timer times the launch; each sample is divided by the calls it
 * ran, so the figure is per call. The launch's own GPU time (launch_s) stays undivided: the
 * keep-busy bridges and burst batches are sized in launches.
 */
#include "cuda_backend.h"

#include <stdlib.h>

typedef struct {
    double unroll;
} graph_timer;

static int graph_batch_begin(kb_gpu_timer *t, Py_ssize_t n)
{
    return t->inner->batch_begin(t->inner, n);
}

static int graph_sample_start(kb_gpu_timer *t, Py_ssize_t i)
{
    return t->inner->sample_start(t->inner, i);
}

static int graph_sample_end(kb_gpu_timer *t, Py_ssize_t i, int ok)
{
    return t->inner->sample_end(t->inner, i, ok);
}

static int graph_batch_end(kb_gpu_timer *t, int collected)
{
    return t->inner->batch_end(t->inner, collected);
}

static int graph_untimed(kb_gpu_timer *t, int begin) { return t->inner->untimed(t->inner, begin); }

static int graph_read(kb_gpu_timer *t, Py_ssize_t n, int flags, kb_gpu_sample *out)
{
    const graph_timer *g = t->impl;
    if (t->inner->read(t->inner, n, flags, out) < 0)
        return -1;
    int deferred = t->inner->finish != NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i].bracket_s /= g->unroll;
        if (!deferred) {
            out[i].time_s /= g->unroll;
            out[i].span_s /= g->unroll;
            out[i].summed_s /= g->unroll;
        }
    }
    return 0;
}

static int graph_finish(kb_gpu_timer *t, Py_ssize_t n, kb_gpu_sample *out)
{
    const graph_timer *g = t->impl;
    if (t->inner->finish(t->inner, n, out) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i].time_s /= g->unroll;
        out[i].span_s /= g->unroll;
        out[i].summed_s /= g->unroll;
    }
    return 0;
}

static int graph_check(kb_gpu_timer *t) { return t->inner->check(t->inner); }

static void *graph_start_mark(kb_gpu_timer *t, Py_ssize_t i)
{
    return t->inner->start_mark(t->inner, i);
}

static int graph_report(kb_gpu_timer *t, PyObject *cuda)
{
    return t->inner->report(t->inner, cuda);
}

static void graph_teardown(kb_gpu_timer *t)
{
    free(t->impl);
    t->impl = NULL;
    if (t->inner != NULL)
        t->inner->teardown(t->inner);
}

int kb_timer_graph_init(kb_gpu_timer *t, kb_gpu_timer *inner, double unroll)
{
    graph_timer *g = malloc(sizeof *g);
    if (g == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    g->unroll = unroll;
    *t = (kb_gpu_timer){.name = inner->name, .impl = g, .inner = inner,
                        .stepped = inner->stepped, .batch_begin = graph_batch_begin,
                        .sample_start = graph_sample_start, .sample_end = graph_sample_end,
                        .batch_end = graph_batch_end, .untimed = graph_untimed,
                        .read = graph_read,
                        .finish = inner->finish != NULL ? graph_finish : NULL,
                        .check = graph_check,
                        .start_mark = graph_start_mark, .report = graph_report,
                        .teardown = graph_teardown};
    return 0;
}
