/* timer_cupti.c -- the CUPTI GPU timer: sample i = the busy time of the kernels, memcpys and
 * memsets CUPTI attributes to it through its external correlation id (cupti_trace.c): their
 * summed durations, overlapped time counted once (busy_time.c).
 *
 *   [flush]  [event a_i]  push(i) fn() pop  [event b_i]   ...   push(s) empty() pop
 *
 * It wraps the events timer, whose pairs it records too, for comparison. The flush carries no id
 * and is never attributed. After the batch kbench's empty kernel runs under its own id, the
 * sentinel whose record coming back shows that every record of the batch did. Untimed work
 * queued between batches (keep-busy bridges) runs with the device records switched off, so a
 * forced flush does not wait on it (KBENCH_CUPTI_BRIDGE_RECORDS=on keeps them on: a diagnosis).
 *
 * Deferred reads. A read only notes the ids of the samples it keeps (a segment); `finish` collects every segment since the last one with a single flush, after the
 * pipeline has waited for the last sub-batch, whose sentinel stands for all of them. The ids
 * between segments (sentinels, sub-batches the watchdog spoiled) are collected and dropped.
 */
#include "cuda_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject *m;
    const kb_cuda_api *cu;
    CUstream stream;
    int ordinal;
    kb_cupti_trace *trace;
    kb_builtin_kernels *builtins;   /* the empty kernel that ends each batch */
    int foreign;                    /* another CUPTI subscriber was present */
    int bridge_records;             /* keep device records on while bridges are queued */
    int records_off;
    uint64_t next_id;               /* external correlation id of the next sample */
    uint64_t first_id, sentinel_id; /* of the batch being queued */
    Py_ssize_t unattributed;        /* kept samples with no attributed activity */
    /* reads since the last finish: the kept ones as segments of ids */
    struct cupti_segment { uint64_t first_id; Py_ssize_t n; int names; } *segs;
    Py_ssize_t n_segs, segs_cap;
    int unread;                     /* a batch was read but not yet collected */
    uint64_t last_sentinel;         /* the sentinel of the last batch read */
    kb_iter_activity *acts;         /* acts_cap: one collection's ids, first to last segment */
    unsigned char *names_of;        /* acts_cap */
    Py_ssize_t acts_cap;
} cupti_timer;

static int cupti_batch_begin(kb_gpu_timer *t, Py_ssize_t n)
{
    cupti_timer *c = t->impl;
    c->first_id = c->next_id;
    c->sentinel_id = 0;
    return t->inner->batch_begin(t->inner, n);
}

static int cupti_sample_start(kb_gpu_timer *t, Py_ssize_t i)
{
    cupti_timer *c = t->impl;
    if (t->inner->sample_start(t->inner, i) < 0)
        return -1;
    return kb_cupti_push(c->m, c->trace, c->next_id);
}

static int cupti_sample_end(kb_gpu_timer *t, Py_ssize_t i, int ok)
{
    cupti_timer *c = t->impl;
    if (!ok)
        kb_cupti_pop_quiet(c->trace);   /* without clobbering the callable's exception */
    else if (kb_cupti_pop(c->m, c->trace) < 0)
        ok = 0;
    c->next_id++;
    return t->inner->sample_end(t->inner, i, ok);
}

static int cupti_batch_end(kb_gpu_timer *t, int collected)
{
    cupti_timer *c = t->impl;
    /* Only the last batch before a collection needs one: its record stands for every batch
     * read since the last (records come back in launch order). Each launch also costs host
     * memory libcupti keeps once the process has captured a graph. */
    if (!collected)
        return t->inner->batch_end(t->inner, collected);
    if (kb_cupti_push(c->m, c->trace, c->next_id) < 0)
        return -1;
    int failed = KB_CU(c->m, c->cu->cuLaunchKernel(c->builtins->empty, 1, 1, 1, 32, 1, 1, 0,
                                                   c->stream, NULL, NULL)) < 0;
    if (failed)
        kb_cupti_pop_quiet(c->trace);
    else if (kb_cupti_pop(c->m, c->trace) < 0)
        failed = 1;
    c->sentinel_id = c->next_id++;
    if (failed)
        return -1;
    return t->inner->batch_end(t->inner, collected);
}

static int cupti_untimed(kb_gpu_timer *t, int begin)
{
    cupti_timer *c = t->impl;
    if (begin && !c->bridge_records) {
        if (kb_cupti_device_records(c->m, c->trace, 0) < 0)
            return -1;
        c->records_off = 1;
    }
    else if (!begin && c->records_off) {
        c->records_off = 0;
        if (kb_cupti_device_records(c->m, c->trace, 1) < 0)
            return -1;
    }
    return t->inner->untimed(t->inner, begin);
}

/* Grow acts and names_of to hold n ids. */
static int reserve_ids(cupti_timer *c, Py_ssize_t n)
{
    if (n <= c->acts_cap)
        return 0;
    Py_ssize_t cap = c->acts_cap > 0 ? c->acts_cap : 64;
    while (cap < n)
        cap *= 2;
    kb_iter_activity *acts = realloc(c->acts, (size_t)cap * sizeof *acts);
    if (acts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->acts = acts;
    unsigned char *names_of = realloc(c->names_of, (size_t)cap);
    if (names_of == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->names_of = names_of;
    c->acts_cap = cap;
    return 0;
}

/* One flush for every batch read since the last collection; out gets the kept samples'
 * CUPTI fields in read order (n of them: as many as the segments hold). */
static int collect_segments(cupti_timer *c, Py_ssize_t n, kb_gpu_sample *out)
{
    Py_ssize_t kept = 0, n_segs = c->n_segs;
    for (Py_ssize_t s = 0; s < n_segs; s++)
        kept += c->segs[s].n;
    c->n_segs = 0;
    c->unread = 0;
    if (kept != n) {
        PyErr_Format(kb_get_state(c->m)->KbenchError, "internal: the CUPTI timer holds %zd "
                     "deferred samples, the pipeline asked for %zd", kept, n);
        return -1;
    }
    uint64_t lo = n_segs > 0 ? c->segs[0].first_id : 0;
    uint64_t hi = n_segs > 0 ? c->segs[n_segs - 1].first_id + (uint64_t)c->segs[n_segs - 1].n
                             : 0;
    Py_ssize_t span = (Py_ssize_t)(hi - lo);
    if (reserve_ids(c, span) < 0)
        return -1;
    int any_names = 0;
    if (span > 0)
        memset(c->names_of, 0, (size_t)span);
    for (Py_ssize_t s = 0; s < n_segs; s++)
        if (c->segs[s].names) {
            memset(c->names_of + (c->segs[s].first_id - lo), 1, (size_t)c->segs[s].n);
            any_names = 1;
        }
    if (kb_cupti_collect(c->m, c->trace, lo, span, c->acts, any_names ? c->names_of : NULL,
                         c->last_sentinel) < 0)
        return -1;
    double ticks = kb_cupti_ticks_per_ns(c->trace);
    Py_ssize_t k = 0;
    for (Py_ssize_t s = 0; s < n_segs; s++)
        for (Py_ssize_t i = 0; i < c->segs[s].n; i++, k++) {
            const kb_iter_activity *a = &c->acts[c->segs[s].first_id - lo + (uint64_t)i];
            out[k].kernels = a->kernels;
            out[k].copies = a->memcpys + a->memsets;
            out[k].span_s = a->last_end > a->first_start && a->first_start != UINT64_MAX
                                ? (double)(a->last_end - a->first_start) * 1e-9 / ticks
                                : 0.0;
            out[k].time_s = (double)a->busy_ns * 1e-9;
            out[k].summed_s = (double)a->sum_ns * 1e-9;
            if (a->kernels + a->memcpys + a->memsets == 0)
                c->unattributed++;
        }
    return 0;
}

static int cupti_read(kb_gpu_timer *t, Py_ssize_t n, int flags, kb_gpu_sample *out)
{
    cupti_timer *c = t->impl;
    if (t->inner->read(t->inner, n, flags, out) < 0)
        return -1;
    c->unread = 1;
    c->last_sentinel = c->sentinel_id;
    Py_ssize_t kept = flags & KB_READ_KEEP ? n : 0;
    if (kept > 0) {
        if (c->n_segs == c->segs_cap) {
            Py_ssize_t cap = c->segs_cap > 0 ? 2 * c->segs_cap : 16;
            void *p = realloc(c->segs, (size_t)cap * sizeof *c->segs);
            if (p == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            c->segs = p;
            c->segs_cap = cap;
        }
        c->segs[c->n_segs++] = (struct cupti_segment){.first_id = c->first_id, .n = n,
                                                      .names = (flags & KB_READ_NAMES) != 0};
    }
    for (Py_ssize_t i = 0; i < n; i++) {     /* until collected */
        out[i].time_s = out[i].span_s = out[i].summed_s = NAN;
        out[i].kernels = out[i].copies = 0;
    }
    return 0;
}

static int cupti_finish(kb_gpu_timer *t, Py_ssize_t n, kb_gpu_sample *out)
{
    cupti_timer *c = t->impl;
    if (!c->unread && c->n_segs == 0 && n == 0)
        return 0;               /* nothing queued since the last collection */
    return collect_segments(c, n, out);
}

static int cupti_check(kb_gpu_timer *t)
{
    cupti_timer *c = t->impl;
    if (c->unattributed == 0)
        return t->inner->check(t->inner);
    size_t acts = 0, ext = 0;
    kb_cupti_last_counts(c->trace, &acts, &ext);
    PyErr_Format(kb_get_state(c->m)->KbenchError,
                 "CUPTI attributed no kernel, memcpy or memset to %zd timed iteration(s): the "
                 "callable launched no GPU work on device %d in this thread (work on "
                 "another device or thread cannot be attributed; for a CPU callable pass "
                 "device='cpu'); the last batch had %zu activity and %zu "
                 "external-correlation records",
                 c->unattributed, c->ordinal, acts, ext);
    return -1;
}

static void *cupti_start_mark(kb_gpu_timer *t, Py_ssize_t i)
{
    return t->inner->start_mark(t->inner, i);
}

static int cupti_report(kb_gpu_timer *t, PyObject *cuda)
{
    cupti_timer *c = t->impl;
    uint64_t by_default = 0, forced = 0;
    kb_cupti_flush_counts(c->trace, &by_default, &forced);
    if (kb_dict_set_steal(cuda, "names", kb_cupti_names(c->trace)) < 0 ||
        kb_dict_set_steal(cuda, "cupti_foreign_subscriber", PyBool_FromLong(c->foreign)) < 0 ||
        kb_dict_set_steal(cuda, "cupti_ticks_per_ns",
                          PyFloat_FromDouble(kb_cupti_ticks_per_ns(c->trace))) < 0 ||
        kb_dict_set_steal(cuda, "cupti_dropped", PyLong_FromUnsignedLongLong(
                                                     kb_cupti_dropped(c->trace))) < 0 ||
        kb_dict_set_steal(cuda, "cupti_flushes",
                          Py_BuildValue("{s:K,s:K,s:O}", "default",
                                        (unsigned long long)by_default, "forced",
                                        (unsigned long long)forced, "bridge_records",
                                        c->bridge_records ? Py_True : Py_False)) < 0)
        return -1;
    return t->inner->report(t->inner, cuda);
}

static void cupti_teardown(kb_gpu_timer *t)
{
    cupti_timer *c = t->impl;
    if (c != NULL) {
        kb_cupti_end(c->m, c->trace);
        free(c->acts);
        free(c->names_of);
        free(c->segs);
        free(c);
        t->impl = NULL;
    }
    if (t->inner != NULL)
        t->inner->teardown(t->inner);
}

int kb_timer_cupti_init(kb_gpu_timer *t, kb_gpu_timer *inner, PyObject *m,
                        const kb_cuda_api *cu, CUstream stream, Py_ssize_t cap, int ordinal,
                        int allow_foreign_subscriber)
{
    cupti_timer *c = calloc(1, sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *c = (cupti_timer){.m = m, .cu = cu, .stream = stream, .ordinal = ordinal, .next_id = 1};
    if (reserve_ids(c, cap) < 0 || kb_cupti_begin(m, allow_foreign_subscriber, &c->trace,
                                                 &c->foreign) < 0) {
        free(c->acts);
        free(c->names_of);
        free(c);
        return -1;
    }
    if ((c->builtins = kb_builtin_get(m, cu, ordinal)) == NULL) {
        kb_cupti_end(m, c->trace);
        free(c->acts);
        free(c->names_of);
        free(c);
        return -1;
    }
    const char *br = getenv("KBENCH_CUPTI_BRIDGE_RECORDS");   /* a diagnosis */
    c->bridge_records = br != NULL && strcmp(br, "on") == 0;
    *t = (kb_gpu_timer){.name = "cupti", .impl = c, .inner = inner, .stepped = 1,
                        .batch_begin = cupti_batch_begin, .sample_start = cupti_sample_start,
                        .sample_end = cupti_sample_end, .batch_end = cupti_batch_end,
                        .untimed = cupti_untimed, .read = cupti_read, .finish = cupti_finish,
                        .check = cupti_check, .start_mark = cupti_start_mark,
                        .report = cupti_report, .teardown = cupti_teardown};
    return 0;
}
