/* measure_host.c -- the host backend: time calls of a Python callable with the host clock.
 *
 * Per iteration, outside the timed region: flush the CPU caches (cold="flush") or pick the next
 * argument set (cold="rotate"), then call pre_sample (a multi-rank barrier) last, so the ranks
 * leave it together and start their clocks at once; inside it: two clock reads around one
 * vectorcall. The loop in measure.c decides how many iterations to run.
 */
#include "kbench.h"
#include "kb_options.h"

#include <stdlib.h>
#include <string.h>

/* How often the inner loop checks for Ctrl-C, on the host clock it reads anyway: a flag test
 * (no syscall) every 10 ms keeps an interrupt prompt without a cost per sample. */
#define KB_SIGNAL_CHECK_NS 10000000ull

typedef struct {
    PyObject *fn;           /* the callable (borrowed) */
    PyObject *arg_sets;     /* tuple of tuples (borrowed) */
    PyObject *kwargs;       /* dict or NULL (borrowed) */
    Py_ssize_t n_sets;
    Py_ssize_t next_set;    /* rotation cursor */
    kb_cold_mode cold;
    kb_cpu_flusher flusher;
    kb_cpu_evictor evictor; /* cold by eviction: used when evictor.n_sets > 0 */
    size_t flush_bytes;     /* the write flush's size, or what it would have written */
    Py_ssize_t iteration;   /* iterations run so far, warm-up included (for error messages) */
    uint64_t next_signal_check_ns;  /* host clock time of the next PyErr_CheckSignals */
    uint64_t flush_ns[2];   /* time spent flushing: [0] while sampling, [1] while warming up */
    PyObject *keep_warming; /* tests only: the loop's settle hook, from Python (owned) */
    PyObject *resettle;     /* tests only: the loop's resettle hook, from Python (owned) */
    PyObject *pre_sample;   /* option pre_sample: called before every call, untimed (borrowed) */
} host_ctx;

static int host_run_batch(kb_backend *b, Py_ssize_t n, double *out, int warmup)
{
    host_ctx *c = b->ctx;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c->cold == KB_COLD_FLUSH) {
            uint64_t f0 = kb_now_ns();
            Py_BEGIN_ALLOW_THREADS
            if (c->evictor.n_sets > 0)
                kb_cpu_evict_set(&c->evictor, c->next_set);     /* the set called next */
            else
                kb_cpu_flush(&c->flusher);
            Py_END_ALLOW_THREADS
            c->flush_ns[warmup != 0] += kb_now_ns() - f0;
        }
        PyObject *args = PyTuple_GET_ITEM(c->arg_sets, c->next_set);
        if (++c->next_set == c->n_sets)
            c->next_set = 0;
        if (c->pre_sample != NULL) {
            PyObject *p = PyObject_CallNoArgs(c->pre_sample);
            if (p == NULL) {
                kb_add_exception_note("raised by pre_sample before %s iteration %zd (kbench "
                                      "host backend)", warmup ? "warm-up" : "timed",
                                      c->iteration);
                return -1;
            }
            Py_DECREF(p);
        }

        uint64_t t0 = kb_now_ns();
        PyObject *r = PyObject_Call(c->fn, args, c->kwargs);
        uint64_t t1 = kb_now_ns();
        if (r == NULL) {
            /* Keep the callable's own exception; say where it happened in a note. */
            kb_add_exception_note("raised by the benchmarked callable in %s iteration %zd "
                                  "(kbench host backend)",
                                  warmup ? "warm-up" : "timed", c->iteration);
            return -1;
        }
        Py_DECREF(r);
        c->iteration++;
        out[i] = (double)(t1 - t0) * 1e-9;
        /* A C callable (np.add with out=) never runs the interpreter's own signal check. */
        if (t1 >= c->next_signal_check_ns) {
            if (PyErr_CheckSignals() < 0)
                return -1;
            c->next_signal_check_ns = t1 + KB_SIGNAL_CHECK_NS;
        }
    }
    return 0;
}

/* The loop's keep_warming hook, driven from Python so the settling path of measure.c (used by
 * the CUDA backend's clock settling) is tested without a GPU: _keep_warming(elapsed_s) returns
 * (keep_warming: bool, min_sampling_s: float); the minimum is applied when it says stop. */
static int host_keep_warming(kb_backend *b, double elapsed_s)
{
    host_ctx *c = b->ctx;
    PyObject *r = PyObject_CallFunction(c->keep_warming, "d", elapsed_s);
    if (r == NULL)
        return -1;
    int more = -1;
    double min_s = 0.0;
    if (!PyTuple_Check(r)) {
        PyErr_Format(PyExc_TypeError, "_keep_warming must return (bool, float), got %.100s",
                     Py_TYPE(r)->tp_name);
        more = -1;
    }
    else if (!PyArg_ParseTuple(r, "pd;_keep_warming must return (bool, float)", &more, &min_s))
        more = -1;
    Py_DECREF(r);
    if (more == 0)
        b->min_sampling_s = min_s;
    return more < 0 ? -1 : more ? KB_WARM_MORE : KB_WARM_DONE;
}

/* The loop's resettle hook, from Python like _keep_warming: _resettle() returns whether the
 * samples so far are to be dropped and the settle run again. Then the sampling so far is the
 * warm-up's (res->warmup_s takes its time), and so are its flushes. */
static int host_resettle(kb_backend *b)
{
    host_ctx *c = b->ctx;
    PyObject *r = PyObject_CallNoArgs(c->resettle);
    if (r == NULL)
        return -1;
    int again = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (again > 0) {
        c->flush_ns[1] += c->flush_ns[0];
        c->flush_ns[0] = 0;
    }
    return again;
}

/* measure_host(fn, arg_sets, kwargs=None, *, cold=None, flush_bytes, <loop config>) -> dict */
/* A test hook from the options: a new reference into *out (left NULL when absent). */
static int pop_test_hook(PyObject *opts, const char *key, PyObject **out)
{
    PyObject *hook = PyDict_GetItemString(opts, key);
    if (hook == NULL)
        return 0;
    if (!PyCallable_Check(hook)) {
        PyErr_Format(PyExc_TypeError, "%s must be callable", key);
        return -1;
    }
    *out = Py_NewRef(hook);     /* the dict entry goes next */
    return PyDict_DelItemString(opts, key);
}

/* The callables measure_host takes from its options: _keep_warming and _resettle (the loop's
 * settle hooks, for tests) and pre_sample (kbench.distributed's barrier). 0, or -1 with an
 * exception. */
static int pop_hooks(PyObject *opts, host_ctx *ctx)
{
    if (pop_test_hook(opts, "_keep_warming", &ctx->keep_warming) < 0 ||
        pop_test_hook(opts, "_resettle", &ctx->resettle) < 0)
        return -1;
    PyObject *pre = PyDict_GetItemString(opts, "pre_sample");   /* borrowed from kw too */
    if (pre != NULL) {
        if (pre != Py_None && !PyCallable_Check(pre)) {
            PyErr_Format(PyExc_TypeError, "pre_sample must be None or a callable taking no "
                         "arguments, got %.100s", Py_TYPE(pre)->tp_name);
            return -1;
        }
        ctx->pre_sample = pre == Py_None ? NULL : pre;
        if (PyDict_DelItemString(opts, "pre_sample") < 0)
            return -1;
    }
    return 0;
}

/* Parse: the options dict (a copy of kw) into ctx and cfg, each checked once. *evict: the
 * operands kbench.measure.coldcache saw (a new reference, NULL when not given or None). */
static int host_parse(PyObject *self, PyObject *opts, PyObject *arg_sets, host_ctx *ctx,
                      kb_loop_config *cfg, Py_ssize_t *flush_bytes, PyObject **evict)
{
    kb_plan plan;
    int planned;
    if (kb_opt_take(opts, "evict", evict) < 0)
        return -1;
    if (*evict == Py_None)
        Py_CLEAR(*evict);
    if (*evict != NULL && kb_cpu_evict_check(*evict, PyTuple_GET_SIZE(arg_sets)) < 0)
        return -1;
    /* the schema's row (kb_schema.h): its default, its range, the message the GPU's gives */
    const kb_opt_spec *fb = KB_SPEC(flush_bytes);
    *flush_bytes = (Py_ssize_t)fb->num;
    if (kb_opt_count(opts, "measure_host", fb->name, flush_bytes, (Py_ssize_t)fb->lo,
                     kb_spec_count_hi(fb)) < 0 ||
        pop_hooks(opts, ctx) < 0 ||
        kb_pop_plan(self, opts, KB_BACKEND_HOST, "measure_host", &plan, &planned) < 0 ||
        kb_finish_options(opts, "measure_host", cfg) < 0)
        return -1;
    ctx->cold = plan.cold;
    kb_warm_every_set(cfg, PyTuple_GET_SIZE(arg_sets));
    if (ctx->cold == KB_COLD_ROTATE && PyTuple_GET_SIZE(arg_sets) < 2) {
        PyErr_SetString(PyExc_ValueError,
                        "cold='rotate' needs at least 2 argument sets to rotate through");
        return -1;
    }
    return 0;
}

/* Set up the flush (cold='flush'): its buffer and first pass, timed apart as setup_ns.
 * *evicts: 0 for a flush smaller than the last-level cache, kept (it still evicts the inner
 * caches) but not called cold: the result says so among its warnings (kbench.measure.local). A
 * write flush past KB_EVICT_FROM_BYTES that the caller did not size becomes an eviction of the
 * operands' lines, where kbench saw them all (evict) and the CPU has a line flush. */
static int host_flush_setup(PyObject *self, host_ctx *ctx, Py_ssize_t flush_bytes,
                            PyObject *evict, int *evicts, uint64_t *setup_ns)
{
    *evicts = 1;
    *setup_ns = 0;
    if (ctx->cold != KB_COLD_FLUSH)
        return 0;
    size_t llc = 0;
    if (kb_cpu_llc_bytes(kb_get_state(self), &llc) < 0)
        return -1;
    size_t bytes = flush_bytes ? (size_t)flush_bytes : 2 * llc;
    if (evict != NULL && !flush_bytes && bytes > KB_EVICT_FROM_BYTES &&
        kb_cpu_evict_instruction() != NULL) {
        ctx->flush_bytes = bytes;       /* what the write flush would have written */
        return kb_cpu_evictor_init(&ctx->evictor, evict, ctx->n_sets);
    }
    if (flush_bytes && (size_t)flush_bytes < llc)
        *evicts = 0;
    /* the first pass faults the buffer's pages in (about 8x a later pass) */
    uint64_t s0 = kb_now_ns();
    if (kb_cpu_flusher_init(&ctx->flusher, bytes) < 0 || kb_cpu_flush_first(&ctx->flusher) < 0)
        return -1;
    ctx->flush_bytes = ctx->flusher.bytes;      /* rounded up to whole lines */
    *setup_ns = kb_now_ns() - s0;
    return 0;
}

/* Run the shared loop with the host clock, one measuring loop at a time: two benches on the
 * CPU at once would time each other. */
static int host_run(PyObject *self, host_ctx *ctx, kb_loop_config *cfg, kb_loop_result *res)
{
    kb_backend backend = {.name = "host", .ctx = ctx, .run_batch = host_run_batch,
                          .keep_warming = ctx->keep_warming ? host_keep_warming : NULL,
                          .resettle = ctx->resettle ? host_resettle : NULL,
                          .resolution_s = kb_clock_step_s(self), .warmup_timed = 1,
                          .prompt_stop = 1};
    if (kb_measure_lock_acquire(self) < 0)
        return -1;
    int rc = kb_loop_run(&backend, cfg, res);
    kb_measure_lock_release(self);
    return rc;
}

/* The result: the loop's dict, with the cold cache's record and the backend's name. Where a
 * flush's time went: flush_s while sampling (outside the timed calls, inside the sampling
 * time), flush_warmup_s while warming up, setup_s before either. */
static PyObject *host_result(const host_ctx *ctx, const kb_loop_result *res,
                             const kb_loop_config *cfg, int evicts, uint64_t setup_ns)
{
    PyObject *out = kb_loop_result_to_dict(res, cfg);
    if (out == NULL)
        return NULL;
    PyObject *cold = Py_BuildValue("{s:s,s:n,s:n}", "mode",
                                   ctx->cold == KB_COLD_FLUSH    ? "flush"
                                   : ctx->cold == KB_COLD_ROTATE ? "rotate"
                                                                 : "none",
                                   "flush_bytes", (Py_ssize_t)ctx->flush_bytes, "arg_sets",
                                   ctx->n_sets);
    if (cold != NULL && ctx->cold == KB_COLD_FLUSH &&
        (kb_dict_set_steal(cold, "method", PyUnicode_FromString(
                               ctx->evictor.n_sets > 0 ? "evict" : "write")) < 0 ||
         (ctx->evictor.n_sets > 0 &&
          (kb_dict_set_steal(cold, "evict_bytes",
                             PyLong_FromSize_t(ctx->evictor.bytes)) < 0 ||
           kb_dict_set_steal(cold, "instruction",
                             PyUnicode_FromString(kb_cpu_evict_instruction())) < 0)) ||
         kb_dict_set_steal(cold, "evicts", PyBool_FromLong(evicts)) < 0 ||
         kb_dict_set_steal(cold, "flush_s", PyFloat_FromDouble(ctx->flush_ns[0] * 1e-9)) < 0 ||
         kb_dict_set_steal(cold, "flush_warmup_s",
                           PyFloat_FromDouble(ctx->flush_ns[1] * 1e-9)) < 0 ||
         kb_dict_set_steal(cold, "setup_s", PyFloat_FromDouble(setup_ns * 1e-9)) < 0))
        Py_CLEAR(cold);     /* an exception is set: kb_dict_set_steal below says so */
    if (kb_dict_set_steal(out, "cold", cold) < 0 ||
        kb_dict_set_steal(out, "backend", PyUnicode_FromString("host")) < 0)
        Py_CLEAR(out);
    return out;
}

/* measure_host: parse, set up the flush, run the loop, put the result together. */
static PyObject *measure_host(PyObject *self, PyObject *args, PyObject *kw)
{
    PyObject *fn, *arg_sets, *kwargs = Py_None;
    PyObject *opts = NULL, *out = NULL;
    host_ctx ctx;
    kb_loop_config cfg;
    kb_loop_result res;
    memset(&ctx, 0, sizeof ctx);
    memset(&res, 0, sizeof res);

    if (!PyArg_ParseTuple(args, "OO|O:measure_host", &fn, &arg_sets, &kwargs))
        return NULL;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "fn must be callable, got %.100s",
                            Py_TYPE(fn)->tp_name);
    if (kb_check_arg_sets(arg_sets, kwargs) < 0)
        return NULL;
    opts = kw ? PyDict_Copy(kw) : PyDict_New();
    if (opts == NULL)
        return NULL;

    Py_ssize_t flush_bytes = 0;
    PyObject *evict = NULL;
    int evicts = 1;
    uint64_t setup_ns = 0;
    ctx.fn = fn;
    ctx.arg_sets = arg_sets;
    ctx.kwargs = kwargs == Py_None ? NULL : kwargs;
    ctx.n_sets = PyTuple_GET_SIZE(arg_sets);
    int ok = host_parse(self, opts, arg_sets, &ctx, &cfg, &flush_bytes, &evict) == 0 &&
             host_flush_setup(self, &ctx, flush_bytes, evict, &evicts, &setup_ns) == 0;
    Py_XDECREF(evict);      /* the evictor holds the buffers it needs */
    if (ok && host_run(self, &ctx, &cfg, &res) == 0)
        out = host_result(&ctx, &res, &cfg, evicts, setup_ns);

    kb_loop_result_free(&res);
    kb_cpu_flusher_fini(&ctx.flusher);
    kb_cpu_evictor_fini(&ctx.evictor);
    Py_XDECREF(ctx.keep_warming);
    Py_XDECREF(ctx.resettle);
    Py_XDECREF(opts);
    return out;
}

static PyMethodDef host_methods[] = {
    {"measure_host", (PyCFunction)(void (*)(void))measure_host, METH_VARARGS | METH_KEYWORDS,
     "measure_host(fn, arg_sets, kwargs=None, *, plan=None, cold=None|'flush'|'rotate', "
     "flush_bytes=..., evict=None, pre_sample=None, ranks=None, <loop options>) -> dict\n\n"
     "Time calls fn(*arg_sets[i % len(arg_sets)], **kwargs) with the host clock. plan: "
     "kbench.bench's (_core.plan), which sets the cold cache; cold= is its low-level spelling, "
     "for a call without one. The defaults "
     "and ranges of flush_bytes and the loop options (warmup_s, max_time_s, target, ...) are "
     "_core.OPTION_SCHEMA's (csrc/core/kb_schema.h). evict: one tuple of contiguous buffers "
     "per argument set, every array fn reads (kbench.measure.coldcache.visible_operands): a flush "
     "past 256 MiB that flush_bytes did not size evicts their lines instead. pre_sample() "
     "runs before every call, untimed (a multi-rank barrier); ranks= is a rank reducer "
     "(kbench.distributed): samples become per-sample maxima across ranks."},
    {NULL, NULL, 0, NULL},
};

int kb_measure_host_module_init(PyObject *m)
{
    if (kb_measure_lock_init(kb_get_state(m)) < 0)
        return -1;
    return PyModule_AddFunctions(m, host_methods);
}
