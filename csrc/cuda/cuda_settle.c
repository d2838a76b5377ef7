/* cuda_settle.c -- the clock regimes of measure_cuda(): the sustained regime's settle rule over
 * the NVML readings (steady.c) and the batches timed while it settles, burst's rest and
 * recovery before each batch, and the settled state carried from one measurement on a device
 * to the next.
 */
#include "cuda_loop.h"
#include "kb_array.h"

#include <math.h>
#include <string.h>
#include <time.h>

static void kb_sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Burst: rest after the last batch, then wait until the GPU has recovered from it (steady.c)

 * or BURST_RECOVER_MAX_S has passed (counted as unrecovered). The GIL is released while
 * sleeping and Ctrl-C is honoured. Records the SM clock the batch starts at. */
int kb_cuda_burst_wait(cuda_ctx *c)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double start = kb_now_s();
    double rest_until = c->last_batch_end_s + BURST_REST * c->last_batch_gpu_s;
    /* a long batch is judged on readings taken after it, not on ones from before it */
    if (c->sampler != NULL && c->last_batch_gpu_s >= BURST_FRESH_READING_S)
        rest_until += c->opt.clock_period_s;
    for (;;) {
        double now = kb_now_s();
        if (now >= rest_until &&
            (c->sampler == NULL || kb_nvml_sampler_recovered(c->sampler, &rule)))
            break;
        if (now - start >= BURST_RECOVER_MAX_S) {
            c->burst_unrecovered++;
            break;
        }
        double nap = rest_until - now;
        nap = nap > 0.0005 && nap < 0.002 ? nap : 0.0005;
        Py_BEGIN_ALLOW_THREADS
        kb_sleep_s(nap);
        Py_END_ALLOW_THREADS
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
    c->burst_wait_s += kb_now_s() - start;
    if (c->sampler != NULL) {
        double sm = kb_nvml_sampler_last_sm(c->sampler);
        if (isfinite(sm)) {
            c->burst_sm_min = c->burst_sm_n == 0 || sm < c->burst_sm_min ? sm : c->burst_sm_min;
            c->burst_sm_max = c->burst_sm_n == 0 || sm > c->burst_sm_max ? sm : c->burst_sm_max;
            c->burst_sm_sum += sm;
            c->burst_sm_n++;
        }
    }
    return 0;
}

/* A loop batch timed while settling begins: the counters as they stand, for
 * kb_cuda_settled_keep. */
int kb_cuda_note_tentative(cuda_ctx *c)
{
    if (c->tentative_n == c->tentative_cap) {
        size_t cap = kb_grown_capacity((size_t)c->tentative_cap, (size_t)c->tentative_n + 1, 64,
                                       sizeof *c->tentative);
        tentative_batch *p = kb_resize(c->tentative, cap, sizeof *p);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->tentative = p;
        c->tentative_cap = (Py_ssize_t)cap;
    }
    c->tentative[c->tentative_n++] = (tentative_batch){
        .start_s = kb_nvml_sampler_elapsed_s(c->sampler), .start_now_s = kb_now_s(),
        .side_n = c->side.n, .gap_sum_s = c->gap_sum_s, .bridge_gpu_s = c->bridge_gpu_s,
        .gaps = c->gaps, .bridges = c->bridges, .bridge_iters = c->bridge_iters,
        .gate_fired = c->gate_fired, .gate_fired_kept = c->gate_fired_kept};
    return 0;
}

/* The warm-up goes on until the SM clock has settled under the callable's own load (steady.c),
 * at most settle_max_s; without clock samples there is nothing to judge. */
#define KB_LIMITED_MIN_SAMPLING_S 1.0
int kb_cuda_keep_warming(kb_backend *b, double elapsed_s)
{
    cuda_ctx *c = b->ctx;
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    /* burst recovers before each batch instead; clocks the user locked need no settling */
    if (c->sampler == NULL || c->opt.settle_max_s <= 0 || c->opt.regime == KB_REGIME_BURST)
        return KB_WARM_DONE;
    if ((c->clocks_locked = kb_nvml_sampler_clocks_locked(c->sampler)))
        return KB_WARM_DONE;
    double median = NAN;
    /* settling again (kb_cuda_resettle), the load is judged afresh */
    const kb_settle_carry *carry = isfinite(c->carry.sm_mhz) && !c->resettled ? &c->carry : NULL;
    int settled = kb_nvml_sampler_settled(c->sampler, &rule, c->load_start_s, carry, &median,
                                          &c->settled_by);
    c->settled_at_s = elapsed_s;
    c->settled_mhz = median;
    c->loaded_s = kb_nvml_sampler_elapsed_s(c->sampler) - c->load_start_s;
    if (settled < 0) {          /* no memory to judge: measure as is, reported as not judged */
        c->settled = -1;
        return KB_WARM_DONE;
    }
    if (settled != KB_UNSETTLED || elapsed_s >= c->opt.settle_max_s) {
        c->settled = settled != KB_UNSETTLED;
        c->settled_unlimited = settled == KB_SETTLED;
        c->settled_since_s = kb_nvml_sampler_settled_since(c->sampler, &rule, c->load_start_s,
                                                           median, settled);
        /* Under a limit (or still moving), sample across several swings of its controller. */
        if (settled != KB_SETTLED) {
            b->min_sampling_s = KB_LIMITED_MIN_SAMPLING_S;
            c->settle_min_sampling_s = KB_LIMITED_MIN_SAMPLING_S;
        }
        return KB_WARM_DONE;
    }
    /* A limit reason since the load began: nothing timed before it can be kept, and a load
     * that shows one mostly settles under the limit, where nothing timed before the settle is
     * kept; so the rest of the settle runs untimed, as it did before samples were kept. */
    return kb_nvml_sampler_limited_since(c->sampler, c->load_start_s) ? KB_WARM_MORE_UNTIMED
                                                                      : KB_WARM_MORE;
}

/* Drop the first `drop` of the samples timed while settling from the side arrays, and the
 * records of the batches left with none; the first record left starts at the first sample. */
static void drop_tentative_front(cuda_ctx *c, Py_ssize_t drop)
{
    side_arrays *sa = &c->side;
    Py_ssize_t base = c->tentative[0].side_n, kept = sa->n - base - drop;
    memmove(sa->events_s + base, sa->events_s + base + drop, (size_t)kept * sizeof *sa->events_s);
    memmove(sa->span_s + base, sa->span_s + base + drop, (size_t)kept * sizeof *sa->span_s);
    memmove(sa->summed_s + base, sa->summed_s + base + drop,
            (size_t)kept * sizeof *sa->summed_s);
    memmove(sa->kernels + base, sa->kernels + base + drop, (size_t)kept * sizeof *sa->kernels);
    memmove(sa->copies + base, sa->copies + base + drop, (size_t)kept * sizeof *sa->copies);
    sa->n = base + kept;
    Py_ssize_t first = 0;       /* the batch that holds the first sample left */
    while (first + 1 < c->tentative_n && c->tentative[first + 1].side_n <= base + drop)
        first++;
    memmove(c->tentative, c->tentative + first,
            (size_t)(c->tentative_n - first) * sizeof *c->tentative);
    c->tentative_n -= first;
    for (Py_ssize_t i = 0; i < c->tentative_n; i++) {
        Py_ssize_t at = c->tentative[i].side_n - drop;
        c->tentative[i].side_n = at > base ? at : base;
    }
}

/* The loop's batches timed while settling (KB_BATCH_TENTATIVE), n samples: keep at most
 * max_keep (the latest) and, once settled (`final`), only those of batches that began after
 * the readings last showed anything but the state the load settled in (settled_since_s):
 * none when the load did not settle or was not judged. The rest leave the side arrays and,
 * at the end, the sub-batch counters; the sampler's timed part starts with the first batch
 * kept. Called with final = 0 while settling, to bound what a long settle holds. */
Py_ssize_t kb_cuda_settled_keep(kb_backend *b, Py_ssize_t n, Py_ssize_t max_keep, int final,
                                double *from_s)
{
    cuda_ctx *c = b->ctx;
    if (n == 0)
        return 0;
    if (c->tentative_n == 0 || c->side.n - c->tentative[0].side_n != n) {
        PyErr_Format(PyExc_SystemError, "kbench: %zd samples taken while settling, %zd kept "
                     "on the CUDA side", n, c->tentative_n ? c->side.n - c->tentative[0].side_n
                                                          : (Py_ssize_t)0);
        return -1;
    }
    Py_ssize_t drop = n > max_keep ? n - max_keep : 0;
    if (final) {
        Py_ssize_t i = 0, base = c->tentative[0].side_n;
        if (c->settled > 0 && isfinite(c->settled_since_s))
            while (i < c->tentative_n && c->tentative[i].start_s < c->settled_since_s)
                i++;
        else
            i = c->tentative_n;
        Py_ssize_t unsettled = i < c->tentative_n ? c->tentative[i].side_n - base : n;
        drop = unsettled > drop ? unsettled : drop;
    }
    drop_tentative_front(c, drop);
    Py_ssize_t kept = n - drop;
    if (!final)
        return kept;
    /* what the sub-batches before the first kept batch added to the counters */
    const tentative_batch *t = kept > 0 ? &c->tentative[0] : NULL;
    c->gap_sum_s -= t ? t->gap_sum_s : c->gap_sum_s;
    c->bridge_gpu_s -= t ? t->bridge_gpu_s : c->bridge_gpu_s;
    c->gaps -= t ? t->gaps : c->gaps;
    c->bridges -= t ? t->bridges : c->bridges;
    c->bridge_iters -= t ? t->bridge_iters : c->bridge_iters;
    c->gate_fired -= t ? t->gate_fired : c->gate_fired;
    c->gate_fired_kept -= t ? t->gate_fired_kept : c->gate_fired_kept;
    if (t != NULL) {
        kb_cuda_timed_from(c, t->start_s);
        c->tentative_from_s = t->start_s;
        *from_s = t->start_now_s;
    }
    c->tentative_kept = kept;
    c->tentative_n = 0;
    return kept;
}

void kb_cuda_timed_from(cuda_ctx *c, double t_s)
{
    kb_nvml_sampler_mark_at(c->sampler, t_s);
    c->sampler_marked = 1;
    c->timed_from_s = c->limit_scan_s = t_s;
}

/* After each sampling batch (kb_backend.resettle). The rules settle a load as unlimited when
 * nothing limits it and nothing will at its power; a load that draws more once timed proves
 * that wrong (a bf16 GEMM 2048^3 read 446-590 W settling at the H200's maximum clock and
 * 690-750 W with sw_power_cap from 1 s of sampling: its batches' duty cycle grew). Its samples
 * mix the two states, and its sustained state is the limited one. So at the first reading in
 * the timed part that shows a limit reason, every sample so far is dropped here and in the
 * loop, and the load settles again as a load that began at that reading: under a limit it
 * waits its two averaging windows (capped_min_load_s), with no carried state (the state
 * carried was not this one's). Once a measurement: a load settled under a limit is not
 * unsettled by one. */
int kb_cuda_resettle(kb_backend *b)
{
    cuda_ctx *c = b->ctx;
    if (c->resettled || c->settled != 1 || !c->settled_unlimited || c->sampler == NULL ||
        !c->sampler_marked)
        return 0;
    uint64_t reasons = 0;
    double at = kb_nvml_sampler_first_limit(c->sampler, c->limit_scan_s, &reasons,
                                            &c->limit_scan_s);
    if (!isfinite(at))
        return 0;
    c->resettled = 1;
    c->resettle_reasons = reasons;
    c->resettle_timed_s = at - c->timed_from_s;
    c->load_start_s = at;
    c->settled_unlimited = 0;
    /* the records of the samples dropped, and what their sub-batches added to the counters */
    c->side.n = 0;
    c->gap_sum_s = c->bridge_gpu_s = 0.0;     /* gap_max_s: over all, as settled_keep */
    c->gaps = c->bridges = c->bridge_iters = c->gate_fired = c->gate_fired_kept = 0;
    c->tentative_kept = 0;
    c->sampler_marked = 0;
    return 1;
}

/* What the last measurement on this device established, taken for this one (sustained only),
 * and cleared: a measurement that fails leaves nothing to carry. One that samples no clocks
 * (kbench's floor probe, run after a bench's own measurement) judges nothing: it neither takes
 * nor replaces the record, so the bench after it still carries what the bench before it left
 * (the probe cleared it: a process's second bench settled from scratch, 0.5 s instead of
 * 0.15 s). The carry's own check, on the next load's readings, covers whatever ran between. */
void kb_cuda_take_carry(cuda_ctx *c)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    if (!c->opt.sample_clocks)
        return;
    struct kb_gpu_carry *g = &kb_get_state(c->m)->gpu_carry[c->opt.device];
    double ago = kb_now_s() - g->end_s;
    c->carry = (kb_settle_carry){.sm_mhz = NAN, .under_limit = 0, .ago_s = NAN, .loaded_s = 0};
    c->carried_from_s_ago = NAN;
    if (g->end_s > 0 && g->settled != KB_UNSETTLED && c->opt.regime == KB_REGIME_SUSTAINED &&
        ago >= 0 && ago <= rule.carry_max_gap_s) {
        c->carry = (kb_settle_carry){.sm_mhz = g->sm_mhz, .ago_s = ago,
                                     .under_limit = g->settled == KB_SETTLED_UNDER_LIMIT,
                                     .loaded_s = g->loaded_s};
        c->carried_end_s = g->end_s;
        c->carried_from_s_ago = ago;
    }
    memset(g, 0, sizeof *g);
}

/* The priming call, CUPTI's set-up and a watchdog's restart come between taking the carry and
 * the load: its age is judged where the load begins (whether a capped load continues depends
 * on the gap, kb_settle_continued_s). */
void kb_cuda_carry_load_starts(cuda_ctx *c)
{
    if (!isfinite(c->carry.sm_mhz))
        return;
    c->carry.ago_s = kb_now_s() - c->carried_end_s;
    c->carried_from_s_ago = c->carry.ago_s;
}

/* At the end of sampling: the settle rule judged once more over this load's readings (with
 * the state this measurement carried, if any), and what it says left for the next one. */
void kb_cuda_record_carry(cuda_ctx *c)
{
    static const kb_settle_rule rule = KB_SETTLE_RULE_DEFAULT;
    double median = NAN;
    int how = KB_UNSETTLED, by = KB_SETTLED_BY_RULE;
    if (!c->opt.sample_clocks)
        return;
    const kb_settle_carry *carry = isfinite(c->carry.sm_mhz) && !c->resettled ? &c->carry
                                                                               : NULL;
    if (c->sampler != NULL && c->opt.regime == KB_REGIME_SUSTAINED && !c->clocks_locked &&
        c->settled > 0) {
        how = kb_nvml_sampler_settled(c->sampler, &rule, c->load_start_s, carry, &median, &by);
        if (how == KB_UNSETTLED) {
            /* A capped load's clock swings with its controller: two 0.25 s windows of a steady
             * capped H200 GEMM disagreed by over 2% at 18-33% of the points of its timed part,
             * two 1 s windows at none (two GPUs, 2026-12-02), and a bench ending on such a
             * swing left nothing to carry, so the next one waited its 2 s again. Under a
             * limit the end is judged again over windows of the averaging length; an
             * unlimited load's verdict stands (its windows disagree on a real transient). */
            kb_settle_rule held = rule;
            held.window_s = rule.avg_window_s;
            /* a bench that continued a capped load may have under two such windows of its own
             * readings: its last one is held against the clock it continued */
            held.end_vs_carry = 1;
            double held_median = NAN;
            int held_by = KB_SETTLED_BY_RULE;
            if (kb_nvml_sampler_settled(c->sampler, &held, c->load_start_s, carry, &held_median,
                                        &held_by) == KB_SETTLED_UNDER_LIMIT) {
                how = KB_SETTLED_UNDER_LIMIT;
                median = held_median;
                by = held_by;
            }
        }
    }
    c->end_settled = how > 0 ? how : KB_UNSETTLED;
    c->end_sm_mhz = c->end_settled != KB_UNSETTLED ? median : NAN;
    /* a capped load it continued counts as this one's: the next continues both */
    double loaded = c->sampler != NULL ? kb_nvml_sampler_elapsed_s(c->sampler) - c->load_start_s
                                       : 0.0;
    if (carry != NULL)
        loaded += kb_settle_continued_s(&rule, carry);
    kb_get_state(c->m)->gpu_carry[c->opt.device] = (struct kb_gpu_carry){
        .end_s = kb_now_s(), .settled = c->end_settled, .sm_mhz = c->end_sm_mhz,
        .loaded_s = loaded > 0 ? loaded : 0.0};
}
