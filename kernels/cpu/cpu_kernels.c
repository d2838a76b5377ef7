/* cpu_kernels.c -- the CPU reference kernels kbench calibrates itself with (`kbench peaks`).
 *
 *   stream_copy(dst, src, threads=1)            dst[i] = src[i]              (STREAM "copy")
 *   stream_triad(a, b, c, scalar, threads=1)    a[i] = b[i] + scalar * c[i]  (STREAM "triad")
 *   fma_loop(n_iter, threads=1, isa=None, dtype="float64")
 *                                               compute-bound FMA loop, returns the FLOPs done
 *   fma_loop_isa(), fma_loop_isas()             the variant fma_loop runs / all this CPU can run
 *   fma_loop_flops_per_iter(isa=None, dtype="float64")  FLOPs in one fma_loop iteration
 *
 * The FMA loop runs in float64 or float32: a vector holds twice as many float32 lanes, so the
 * float32 ceiling is about twice the float64 one, and a float32 kernel is measured against it.
 *
 * The STREAM kernels are compiled once per ISA with target_clones (picked at load time by an
 * ifunc resolver), so a portable wheel still issues full-width loads and stores. The FMA loop
 * needs a different number of accumulators per ISA (it must fill the FMA pipes without spilling
 * registers), so it is written once per ISA with target() and dispatched by hand with
 * __builtin_cpu_supports -- which also lets fma_loop_isa() say exactly which variant runs.
 *
 * Work is split over `threads` pthreads (the caller's thread does the first chunk); the GIL is
 * released around all of it. Each thread runs its chunk in blocks of ~1 ms or less, and the
 * caller's thread takes the GIL back every 10 ms to check for Ctrl-C (kb_interrupt), so a call
 * over a large array or of many iterations stops within about 10 ms of it.
 */
#include "kbench.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define KB_X86_MULTIVERSION 1
#endif

/* ifunc (behind target_clones) needs an ELF platform with glibc-style resolvers. */
#if defined(KB_X86_MULTIVERSION) && defined(__linux__)
#define KB_STREAM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KB_STREAM_CLONES
#endif

#define KB_MAX_THREADS 1024

/* ------------------------------------------------------------------ threads */

/* Body of a parallel loop: handles elements [begin, end) as chunk number `chunk`. */
typedef void (*kb_chunk_fn)(void *ctx, int chunk, size_t begin, size_t end);

typedef struct {
    kb_chunk_fn fn;
    void *ctx;
    int chunk;
    size_t begin, end;
} kb_chunk_job;

static void *run_chunk_job(void *arg)
{
    kb_chunk_job *job = arg;
    job->fn(job->ctx, job->chunk, job->begin, job->end);
    return NULL;
}

/* Split [0, n) into `nthreads` chunks whose boundaries are multiples of `grain` (so threads do
 * not share cache lines) and run fn on each, the calling thread taking chunk 0. GIL-free: returns
 * 0, or the errno of the failed pthread_create/malloc with no Python exception set; on failure
 * every thread that did start has been joined, but the work is incomplete. */
static int kb_parallel_for(int nthreads, size_t n, size_t grain, kb_chunk_fn fn, void *ctx)
{
    if (nthreads <= 1) {
        fn(ctx, 0, 0, n);
        return 0;
    }
    kb_chunk_job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    int rc = 0, started = 1;
    if (jobs == NULL || tids == NULL) {
        rc = ENOMEM;
        goto error;
    }
    size_t units = (n + grain - 1) / grain;
    for (int t = 0; t < nthreads; t++) {
        size_t lo = units * (size_t)t / (size_t)nthreads * grain;
        size_t hi = units * (size_t)(t + 1) / (size_t)nthreads * grain;
        jobs[t] = (kb_chunk_job){fn, ctx, t, lo < n ? lo : n, hi < n ? hi : n};
    }
    for (; started < nthreads; started++) {
        rc = pthread_create(&tids[started], NULL, run_chunk_job, &jobs[started]);
        if (rc != 0)
            break;
    }
    if (rc == 0)
        run_chunk_job(&jobs[0]);
    for (int t = 1; t < started; t++)
        pthread_join(tids[t], NULL);   /* cannot fail: joinable, not self, joined once */
error:
    free(jobs);
    free(tids);
    return rc;
}

static int check_threads(int threads)
{
    if (threads < 1 || threads > KB_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be between 1 and %d, got %d",
                     KB_MAX_THREADS, threads);
        return -1;
    }
    return 0;
}

static void set_thread_error(int rc)
{
    errno = rc;
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, "pthread_create");
}

/* ------------------------------------------------------------------ Ctrl-C inside a call */

/* A call with the GIL released hears of Ctrl-C only when it returns: an FMA call sized to a
 * tenth of `kbench peaks --seconds 30` ran 0.7 s past it, and a STREAM call is one pass over
 * arrays sized to 4x the last-level cache (3 x 512 MiB: 50-80 ms on a 2-core VM, twice that
 * beside another process, more with a larger cache). So the kernels run in blocks; between two,
 * every thread looks at `stop`, and the caller's thread (chunk 0) runs the signal handlers
 * every KB_SIGNAL_CHECK_S. The GIL is taken back only for that check: ~1 us per 10 ms. */
#define KB_SIGNAL_CHECK_S 0.01

typedef struct {
    PyThreadState *released;    /* the caller's thread state while the GIL is released */
    int stop;                   /* set (atomically) once a signal handler raised: all stop */
    double next_check_s;        /* kb_now_s() of the caller's next signal check */
} kb_interrupt;

/* Release the GIL (the caller holds it) and start the clock of the signal checks. */
static void kb_interrupt_release(kb_interrupt *in)
{
    in->stop = 0;
    in->next_check_s = kb_now_s() + KB_SIGNAL_CHECK_S;
    in->released = PyEval_SaveThread();
}

/* Take the GIL back. 1 when a signal handler raised (its exception is set): the work is
 * incomplete and the caller returns NULL. */
static int kb_interrupt_reacquire(kb_interrupt *in)
{
    PyEval_RestoreThread(in->released);
    return in->stop;
}

static int kb_interrupt_stopped(kb_interrupt *in)
{
    return __atomic_load_n(&in->stop, __ATOMIC_RELAXED);
}

/* On the caller's thread (chunk 0) between two blocks, GIL released: at most every
 * KB_SIGNAL_CHECK_S, take the GIL back to run the signal handlers; when one raised (its
 * exception stays set), tell every thread to stop. */
static void kb_interrupt_check(kb_interrupt *in)
{
    double now = kb_now_s();
    if (now < in->next_check_s)
        return;
    in->next_check_s = now + KB_SIGNAL_CHECK_S;
    PyEval_RestoreThread(in->released);
    int raised = PyErr_CheckSignals() < 0;
    in->released = PyEval_SaveThread();
    if (raised)
        __atomic_store_n(&in->stop, 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ buffers */

/* Is `fmt` a native float64 buffer format ("d", "@d", "=d", "<d" on little-endian hosts)? */
static int is_float64_format(const char *fmt)
{
    if (fmt == NULL)                       /* NULL means unsigned bytes */
        return 0;
    if (fmt[0] == '@' || fmt[0] == '=')
        fmt++;
#if PY_LITTLE_ENDIAN
    else if (fmt[0] == '<')
        fmt++;
#else
    else if (fmt[0] == '>' || fmt[0] == '!')
        fmt++;
#endif
    return fmt[0] == 'd' && fmt[1] == '\0';
}

/* Get a C-contiguous float64 view of `obj` for the argument called `name`. Asks for strides and
 * format rather than for contiguity/writability, so that the errors can name the argument.
 * 0 with `view` filled (release it), or -1 with TypeError/ValueError set and nothing to release. */
static int get_f64_view(PyObject *obj, const char *name, int writable, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s must be a C-contiguous float64 buffer (e.g. a numpy float64 array), "
                         "got %.200s", name, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    if (view->itemsize != (Py_ssize_t)sizeof(double) || !is_float64_format(view->format)) {
        PyErr_Format(PyExc_TypeError, "%s must hold float64 values, got buffer format '%s'",
                     name, view->format ? view->format : "B");
        goto error;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous (pass np.ascontiguousarray(%s))",
                     name, name);
        goto error;
    }
    if (writable && view->readonly) {
        PyErr_Format(PyExc_ValueError, "%s is read-only; it must be a writable buffer", name);
        goto error;
    }
    return 0;

error:
    PyBuffer_Release(view);
    return -1;
}

static int check_same_length(const Py_buffer *a, const char *an, const Py_buffer *b, const char *bn)
{
    if (a->len != b->len) {
        PyErr_Format(PyExc_ValueError, "%s and %s must have the same length, got %zd and %zd "
                     "elements", an, bn, a->len / (Py_ssize_t)sizeof(double),
                     b->len / (Py_ssize_t)sizeof(double));
        return -1;
    }
    return 0;
}

/* The destination may be the very same memory as a source (element-wise in place is exact) but
 * not a shifted overlap: then the result would depend on the order and the thread split. */
static int check_no_partial_overlap(const Py_buffer *dst, const char *dn,
                                    const Py_buffer *src, const char *sn)
{
    const char *d = dst->buf, *s = src->buf;
    if (d != s && d < s + src->len && s < d + dst->len) {
        PyErr_Format(PyExc_ValueError, "%s and %s overlap in memory (only identical buffers are "
                     "allowed)", dn, sn);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ STREAM kernels */

/* Plain loops, vectorized per clone (zmm, ymm, xmm) by GCC. `ivdep` states what the callers
 * check: no loop-carried dependence -- the destination is either disjoint from the sources or the
 * very same memory (element-wise in place), never a shifted overlap -- so no runtime alias check
 * and no scalar fallback. The "cheap" cost model lets -O2 vectorize a loop that needs a scalar
 * epilogue for the last n % width elements.
 *
 * numpy computes b + s*c with two roundings; a contracted FMA would round once and differ, so
 * the triad must not be contracted. And the copy must stay this loop rather than become a call
 * to memcpy, whose strategy (rep movsb, non-temporal stores past a size threshold) is not the
 * STREAM kernel's and differs between libcs. */
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=cheap", "fp-contract=off", \
                     "no-tree-loop-distribute-patterns")

KB_STREAM_CLONES
static void copy_range(double *dst, const double *src, size_t n)
{
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

KB_STREAM_CLONES
static void triad_range(double *a, const double *b, const double *c, double s, size_t n)
{
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

#pragma GCC pop_options

typedef struct {
    double *a;
    const double *b, *c;
    double scalar;
    kb_interrupt in;
} stream_args;

/* Threads split on 64-byte boundaries: 8 doubles. */
#define KB_STREAM_GRAIN 8
/* Each thread walks its range in blocks of 1 MiB of each array (a multiple of the grain, so no
 * block but the last has a scalar tail): 0.1-0.3 ms of work at 10 GB/s a thread, against ~10 ns
 * of checks between two. The blocks follow each other in address order, so the hardware
 * prefetchers' streams run on across them: the bandwidth is that of one loop. */
#define KB_STREAM_BLOCK ((size_t)1 << 17)

static void copy_chunk(void *ctx, int chunk, size_t begin, size_t end)
{
    stream_args *s = ctx;
    for (size_t lo = begin; lo < end && !kb_interrupt_stopped(&s->in); lo += KB_STREAM_BLOCK) {
        size_t hi = end - lo > KB_STREAM_BLOCK ? lo + KB_STREAM_BLOCK : end;
        copy_range(s->a + lo, s->b + lo, hi - lo);
        if (chunk == 0 && hi < end)
            kb_interrupt_check(&s->in);
    }
}

static void triad_chunk(void *ctx, int chunk, size_t begin, size_t end)
{
    stream_args *s = ctx;
    for (size_t lo = begin; lo < end && !kb_interrupt_stopped(&s->in); lo += KB_STREAM_BLOCK) {
        size_t hi = end - lo > KB_STREAM_BLOCK ? lo + KB_STREAM_BLOCK : end;
        triad_range(s->a + lo, s->b + lo, s->c + lo, s->scalar, hi - lo);
        if (chunk == 0 && hi < end)
            kb_interrupt_check(&s->in);
    }
}

static PyObject *py_stream_copy(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dst", "src", "threads", NULL};
    PyObject *dst_obj, *src_obj;
    int threads = 1, rc;
    Py_buffer dst = {0}, src = {0};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|i:stream_copy", kwlist,
                                     &dst_obj, &src_obj, &threads))
        return NULL;
    if (check_threads(threads) < 0)
        return NULL;
    if (get_f64_view(dst_obj, "dst", 1, &dst) < 0)
        return NULL;
    if (get_f64_view(src_obj, "src", 0, &src) < 0)
        goto error;
    if (check_same_length(&dst, "dst", &src, "src") < 0 ||
        check_no_partial_overlap(&dst, "dst", &src, "src") < 0)
        goto error;

    stream_args sa = {.a = dst.buf, .b = src.buf};
    kb_interrupt_release(&sa.in);
    rc = kb_parallel_for(threads, (size_t)dst.len / sizeof(double), KB_STREAM_GRAIN,
                         copy_chunk, &sa);
    if (kb_interrupt_reacquire(&sa.in))     /* Ctrl-C: KeyboardInterrupt is set */
        goto error;
    if (rc != 0) {
        set_thread_error(rc);
        goto error;
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;

error:
    PyBuffer_Release(&dst);   /* a zeroed Py_buffer (obj == NULL) is safe to release */
    PyBuffer_Release(&src);
    return NULL;
}

static PyObject *py_stream_triad(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"a", "b", "c", "scalar", "threads", NULL};
    PyObject *a_obj, *b_obj, *c_obj;
    double scalar;
    int threads = 1, rc;
    Py_buffer a = {0}, b = {0}, c = {0};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOd|i:stream_triad", kwlist,
                                     &a_obj, &b_obj, &c_obj, &scalar, &threads))
        return NULL;
    if (check_threads(threads) < 0)
        return NULL;
    if (get_f64_view(a_obj, "a", 1, &a) < 0)
        return NULL;
    if (get_f64_view(b_obj, "b", 0, &b) < 0 || get_f64_view(c_obj, "c", 0, &c) < 0)
        goto error;
    if (check_same_length(&a, "a", &b, "b") < 0 || check_same_length(&a, "a", &c, "c") < 0 ||
        check_no_partial_overlap(&a, "a", &b, "b") < 0 ||
        check_no_partial_overlap(&a, "a", &c, "c") < 0)
        goto error;

    stream_args sa = {.a = a.buf, .b = b.buf, .c = c.buf, .scalar = scalar};
    kb_interrupt_release(&sa.in);
    rc = kb_parallel_for(threads, (size_t)a.len / sizeof(double), KB_STREAM_GRAIN,
                         triad_chunk, &sa);
    if (kb_interrupt_reacquire(&sa.in))     /* Ctrl-C: KeyboardInterrupt is set */
        goto error;
    if (rc != 0) {
        set_thread_error(rc);
        goto error;
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&c);
    Py_RETURN_NONE;

error:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&c);
    return NULL;
}

/* ------------------------------------------------------------------ FMA loop */

/* Each variant runs n_iter iterations of acc[k] = acc[k] * mul + add over NACC independent vector
 * accumulators and returns the sum of every lane of every accumulator, so no FMA is dead code.
 * NACC covers FMA latency x FMA ports (4 cycles x 2 ports = 8 chains on current x86) with room to
 * spare, while staying inside the register file: 16 of 32 zmm, 12 of 16 ymm, 8 of 16 xmm.
 * mul = 1 - 2^-20 and add = 2^-20 keep every lane near its fixed point 1.0: never overflow,
 * never denormal (which would slow the loop down). */
#define KB_FMA_MUL (1.0 - 0x1p-20)
#define KB_FMA_ADD 0x1p-20

#define KB_DEFINE_FMA_KERNEL(NAME, ATTR, T, LANES, NACC)                                       \
    typedef T NAME##_vec __attribute__((vector_size(sizeof(T) * (LANES))));                    \
    ATTR static double NAME(uint64_t n_iter)                                                   \
    {                                                                                          \
        NAME##_vec acc[NACC];                                                                  \
        NAME##_vec mul, add;                                                                   \
        for (int l = 0; l < (LANES); l++) {                                                    \
            mul[l] = (T)KB_FMA_MUL;                                                            \
            add[l] = (T)KB_FMA_ADD;                                                            \
        }                                                                                      \
        for (int k = 0; k < (NACC); k++)                                                       \
            for (int l = 0; l < (LANES); l++)                                                  \
                acc[k][l] = (T)(1.0 + (double)(k * (LANES) + l) * 0x1p-10);                    \
        for (uint64_t i = 0; i < n_iter; i++) {                                                \
            _Pragma("GCC unroll 16")                                                           \
            for (int k = 0; k < (NACC); k++)                                                   \
                acc[k] = acc[k] * mul + add;  /* contracted to one FMA where the ISA has it */ \
        }                                                                                      \
        double sum = 0.0;                                                                      \
        for (int k = 0; k < (NACC); k++)                                                       \
            for (int l = 0; l < (LANES); l++)                                                  \
                sum += (double)acc[k][l];                                                      \
        return sum;                                                                            \
    }

/* The element types fma_loop runs: index 0 float64, 1 float32. */
#define KB_FMA_DTYPES 2
static const char *const fma_dtypes[KB_FMA_DTYPES] = {"float64", "float32"};

typedef struct {
    const char *name;           /* what fma_loop_isa() reports */
    double (*kernel[KB_FMA_DTYPES])(uint64_t n_iter);     /* per element type (fma_dtypes) */
    int flops_per_iter[KB_FMA_DTYPES];  /* 2 (multiply + add) per lane per accumulator */
    int (*supported)(void);
} fma_variant;

#ifdef KB_X86_MULTIVERSION
KB_DEFINE_FMA_KERNEL(fma_avx512f, __attribute__((target("avx512f"))), double, 8, 16)
KB_DEFINE_FMA_KERNEL(fma_avx2, __attribute__((target("avx2,fma"))), double, 4, 12)
KB_DEFINE_FMA_KERNEL(fma_generic, , double, 2, 8)   /* baseline x86-64: SSE2, mul then add */
KB_DEFINE_FMA_KERNEL(fma32_avx512f, __attribute__((target("avx512f"))), float, 16, 16)
KB_DEFINE_FMA_KERNEL(fma32_avx2, __attribute__((target("avx2,fma"))), float, 8, 12)
KB_DEFINE_FMA_KERNEL(fma32_generic, , float, 4, 8)

static int has_avx512f(void) { return __builtin_cpu_supports("avx512f"); }
static int has_avx2_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
static int always(void) { return 1; }

/* Most capable first: dispatch takes the first supported one. */
static const fma_variant fma_variants[] = {
    {"avx512f", {fma_avx512f, fma32_avx512f}, {2 * 8 * 16, 2 * 16 * 16}, has_avx512f},
    {"avx2+fma", {fma_avx2, fma32_avx2}, {2 * 4 * 12, 2 * 8 * 12}, has_avx2_fma},
    {"generic", {fma_generic, fma32_generic}, {2 * 2 * 8, 2 * 4 * 8}, always},
};
#else
/* the compiler's baseline ISA for this target: 16-byte vectors */
KB_DEFINE_FMA_KERNEL(fma_generic, , double, 2, 8)
KB_DEFINE_FMA_KERNEL(fma32_generic, , float, 4, 8)
static int always(void) { return 1; }
static const fma_variant fma_variants[] = {
    {"generic", {fma_generic, fma32_generic}, {2 * 2 * 8, 2 * 4 * 8}, always},
};
#endif

#define KB_N_FMA_VARIANTS ((int)(sizeof fma_variants / sizeof fma_variants[0]))

static const fma_variant *best_fma_variant(void)
{
    for (int i = 0; i < KB_N_FMA_VARIANTS; i++)
        if (fma_variants[i].supported())
            return &fma_variants[i];
    return &fma_variants[KB_N_FMA_VARIANTS - 1];
}

/* The index of a dtype name in fma_dtypes (NULL: float64), or -1 with ValueError. */
static int fma_dtype_index(const char *dtype)
{
    if (dtype == NULL)
        return 0;
    for (int i = 0; i < KB_FMA_DTYPES; i++)
        if (strcmp(dtype, fma_dtypes[i]) == 0)
            return i;
    PyErr_Format(PyExc_ValueError, "dtype must be 'float64' or 'float32', got '%s'", dtype);
    return -1;
}

/* The FMA loop runs in blocks of this many iterations (~1 ms), checking for Ctrl-C between
 * two (kb_interrupt). */
#define KB_FMA_BLOCK ((uint64_t)1 << 18)

typedef struct {
    double (*kernel)(uint64_t n_iter);
    double *checksums;          /* one per chunk */
    kb_interrupt in;
} fma_args;

static void fma_chunk(void *ctx, int chunk, size_t begin, size_t end)
{
    fma_args *f = ctx;
    uint64_t left = (uint64_t)(end - begin);
    double sum = 0.0;
    while (left > 0 && !kb_interrupt_stopped(&f->in)) {
        uint64_t n = left < KB_FMA_BLOCK ? left : KB_FMA_BLOCK;
        sum += f->kernel(n);
        left -= n;
        if (chunk == 0 && left > 0)
            kb_interrupt_check(&f->in);
    }
    f->checksums[chunk] = sum;
}

static PyObject *py_fma_loop(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"n_iter", "threads", "isa", "dtype", NULL};
    long long n_iter;
    int threads = 1, rc, dt;
    const char *isa = NULL, *dtype = NULL;
    const fma_variant *variant = NULL;
    double *checksums = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|izz:fma_loop", kwlist,
                                     &n_iter, &threads, &isa, &dtype))
        return NULL;
    if ((dt = fma_dtype_index(dtype)) < 0)
        return NULL;
    if (n_iter < 0) {
        PyErr_Format(PyExc_ValueError, "n_iter must be >= 0, got %lld", n_iter);
        return NULL;
    }
    if (check_threads(threads) < 0)
        return NULL;
    if (isa == NULL) {
        variant = best_fma_variant();
    } else {
        for (int i = 0; i < KB_N_FMA_VARIANTS; i++)
            if (strcmp(isa, fma_variants[i].name) == 0)
                variant = &fma_variants[i];
        if (variant == NULL) {
            PyErr_Format(PyExc_ValueError, "unknown isa '%s'; known: %s", isa,
                         KB_N_FMA_VARIANTS == 3 ? "'avx512f', 'avx2+fma', 'generic'" : "'generic'");
            return NULL;
        }
        if (!variant->supported()) {
            PyErr_Format(PyExc_ValueError, "isa '%s' is not supported by this CPU", isa);
            return NULL;
        }
    }
    if ((checksums = PyMem_Calloc((size_t)threads, sizeof *checksums)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }

    fma_args fa = {variant->kernel[dt], checksums};
    kb_interrupt_release(&fa.in);
    rc = kb_parallel_for(threads, (size_t)n_iter, 1, fma_chunk, &fa);
    if (kb_interrupt_reacquire(&fa.in))     /* Ctrl-C: KeyboardInterrupt is set */
        goto error;
    if (rc != 0) {
        set_thread_error(rc);
        goto error;
    }
    /* Every lane stays near 1.0 by construction; anything else means the kernel is broken. */
    for (int t = 0; t < threads; t++) {
        if (!isfinite(checksums[t])) {
            PyErr_Format(kb_get_state(self)->KbenchError,
                         "fma_loop (%s, %s) produced a non-finite checksum", variant->name,
                         fma_dtypes[dt]);
            goto error;
        }
    }
    PyMem_Free(checksums);
    return PyFloat_FromDouble((double)n_iter * (double)variant->flops_per_iter[dt]);

error:
    PyMem_Free(checksums);
    return NULL;
}

static PyObject *py_fma_loop_isa(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(best_fma_variant()->name);
}

static PyObject *py_fma_loop_flops_per_iter(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"isa", "dtype", NULL};
    const char *isa = NULL, *dtype = NULL;
    int dt;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|zz:fma_loop_flops_per_iter", kwlist, &isa,
                                     &dtype))
        return NULL;
    if ((dt = fma_dtype_index(dtype)) < 0)
        return NULL;
    if (isa == NULL)
        return PyLong_FromLong(best_fma_variant()->flops_per_iter[dt]);
    for (int i = 0; i < KB_N_FMA_VARIANTS; i++)
        if (strcmp(isa, fma_variants[i].name) == 0)
            return PyLong_FromLong(fma_variants[i].flops_per_iter[dt]);
    PyErr_Format(PyExc_ValueError, "unknown isa '%s'", isa);
    return NULL;
}

static PyObject *py_fma_loop_isas(PyObject *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < KB_N_FMA_VARIANTS; i++) {
        if (!fma_variants[i].supported())
            continue;
        PyObject *name = PyUnicode_FromString(fma_variants[i].name);
        if (name == NULL || PyList_Append(list, name) < 0) {
            Py_XDECREF(name);
            goto error;
        }
        Py_DECREF(name);
    }
    return list;

error:
    Py_DECREF(list);
    return NULL;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef cpu_kernel_methods[] = {
    {"stream_copy", (PyCFunction)(void (*)(void))py_stream_copy, METH_VARARGS | METH_KEYWORDS,
     "stream_copy(dst, src, threads=1) -> None\n\n"
     "STREAM copy: dst[i] = src[i] over C-contiguous float64 buffers of equal length (dst\n"
     "writable). STREAM counts 16 bytes per element. The GIL is released; `threads` pthreads\n"
     "split the range."},
    {"stream_triad", (PyCFunction)(void (*)(void))py_stream_triad, METH_VARARGS | METH_KEYWORDS,
     "stream_triad(a, b, c, scalar, threads=1) -> None\n\n"
     "STREAM triad: a[i] = b[i] + scalar * c[i] (rounded like numpy: no fused multiply-add)\n"
     "over C-contiguous float64 buffers of equal length (a writable). STREAM counts 24 bytes\n"
     "per element."},
    {"fma_loop", (PyCFunction)(void (*)(void))py_fma_loop, METH_VARARGS | METH_KEYWORDS,
     "fma_loop(n_iter, threads=1, isa=None, dtype='float64') -> float\n\n"
     "Run n_iter iterations (split over `threads`) of a register-resident loop of independent\n"
     "vector FMAs and return the floating-point operations done (2 per FMA lane).\n"
     "isa=None picks the widest variant the CPU supports (see fma_loop_isa()); a name from\n"
     "fma_loop_isas() forces one."},
    {"fma_loop_isa", py_fma_loop_isa, METH_NOARGS,
     "fma_loop_isa() -> str\n\nThe variant fma_loop runs by default on this CPU: "
     "'avx512f', 'avx2+fma' or 'generic'."},
    {"fma_loop_isas", py_fma_loop_isas, METH_NOARGS,
     "fma_loop_isas() -> list[str]\n\nEvery fma_loop variant this CPU can run, widest first."},
    {"fma_loop_flops_per_iter", (PyCFunction)(void (*)(void))py_fma_loop_flops_per_iter,
     METH_VARARGS | METH_KEYWORDS,
     "fma_loop_flops_per_iter(isa=None, dtype='float64') -> int\n\n"
     "FLOPs one fma_loop iteration does."},
    {NULL, NULL, 0, NULL},
};

int kb_cpu_kernels_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, cpu_kernel_methods);
}
