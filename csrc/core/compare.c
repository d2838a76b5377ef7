/* compare.c -- correctness comparison of an output against a reference.
 *
 *   _core.compare(out, ref, rtol, atol, equal_nan=False, out_kind=None, ref_kind=None) -> dict
 *
 * One pass over the broadcast pair in C order (NpyIter, GIL released). Elements are decoded to
 * double a chunk at a time, then each chunk is
 *   1. classified exactly like numpy.isclose evaluated in double, with the worst element kept;
 *   2. folded into the L2 norms of out, ref and out - ref and their dot product. Each chunk is
 *      scaled by a power of two taken from its largest magnitude (exact, like BLAS nrm2's
 *      scaling), so 1e308 does not overflow and 1e-310 does not underflow; the chunk sums are
 *      merged as (exponent, scaled sum) pairs.
 * Magnitude metrics (max errors, norms, cosine) use the pairs where both values are finite;
 * non-finite pairs are judged by the closeness rule and counted as NaN/Inf mismatches.
 * docs/tolerances.md describes every returned field.
 */
#include "kbench.h"
#include "kb_numpy.h"
#include <math.h>
#include <string.h>

/* The closeness test must round like numpy's separate multiply and add: no fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define CMP_CHUNK 512          /* elements decoded per step: three double buffers on the stack */
#define CMP_SIGNAL_CHUNKS 2048 /* chunks (1M elements, a few ms) between two Ctrl-C checks */

/* ------------------------------------------------------------------ decoding to double */

typedef void (*cmp_load_fn)(const char *p, npy_intp stride, npy_intp n, double *dst);

/* memcpy loads: the iterator does not promise aligned data (unbuffered, any strides). */
#define CMP_DEFINE_LOAD(name, ctype)                                                  \
    static void load_##name(const char *p, npy_intp stride, npy_intp n, double *dst)  \
    {                                                                                 \
        for (npy_intp i = 0; i < n; i++, p += stride) {                               \
            ctype v;                                                                  \
            memcpy(&v, p, sizeof v);                                                  \
            dst[i] = (double)v;                                                       \
        }                                                                             \
    }

CMP_DEFINE_LOAD(f64, double)
CMP_DEFINE_LOAD(f32, float)
CMP_DEFINE_LOAD(i8, int8_t)
CMP_DEFINE_LOAD(i16, int16_t)
CMP_DEFINE_LOAD(i32, int32_t)
CMP_DEFINE_LOAD(i64, int64_t)
CMP_DEFINE_LOAD(u8, uint8_t)
CMP_DEFINE_LOAD(u16, uint16_t)
CMP_DEFINE_LOAD(u32, uint32_t)
CMP_DEFINE_LOAD(u64, uint64_t)

static void load_bool(const char *p, npy_intp stride, npy_intp n, double *dst)
{
    for (npy_intp i = 0; i < n; i++, p += stride)
        dst[i] = *(const unsigned char *)p ? 1.0 : 0.0;
}

static double bits_to_double(uint64_t bits)
{
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static double half_bits_to_double(uint16_t h)
{
    uint64_t sign = (uint64_t)(h >> 15) << 63;
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {                                   /* zero or subnormal: m * 2^-24 */
        double v = (double)m * 0x1p-24;
        return sign ? -v : v;
    }
    if (e == 31)                                    /* inf (m == 0) or NaN */
        return bits_to_double(sign | 0x7ff0000000000000ull | ((uint64_t)m << 42));
    return bits_to_double(sign | ((uint64_t)(e - 15 + 1023) << 52) | ((uint64_t)m << 42));
}

/* OCP FP8 E4M3 ("e4m3fn"): bias 7, no infinities, S.1111.111 is NaN, max 448. */
static double e4m3fn_bits_to_double(uint8_t b)
{
    uint64_t sign = (uint64_t)(b >> 7) << 63;
    unsigned e = (b >> 3) & 0xf, m = b & 7;
    if (e == 15 && m == 7)
        return NAN;
    if (e == 0) {                                   /* zero or subnormal: m * 2^-9 */
        double v = (double)m * 0x1p-9;
        return sign ? -v : v;
    }
    return bits_to_double(sign | ((uint64_t)(e - 7 + 1023) << 52) | ((uint64_t)m << 49));
}

static void load_f16(const char *p, npy_intp stride, npy_intp n, double *dst)
{
    for (npy_intp i = 0; i < n; i++, p += stride) {
        uint16_t h;
        memcpy(&h, p, sizeof h);
        dst[i] = half_bits_to_double(h);
    }
}

/* bfloat16 is the upper half of a binary32. */
static void load_bf16(const char *p, npy_intp stride, npy_intp n, double *dst)
{
    for (npy_intp i = 0; i < n; i++, p += stride) {
        uint16_t h;
        memcpy(&h, p, sizeof h);
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        dst[i] = (double)f;
    }
}

/* OCP FP8 E5M2 is the upper byte of a binary16 (same exponent, 2 of its 10 mantissa bits). */
static void load_fp8_e5m2(const char *p, npy_intp stride, npy_intp n, double *dst)
{
    for (npy_intp i = 0; i < n; i++, p += stride)
        dst[i] = half_bits_to_double((uint16_t)(*(const uint8_t *)p << 8));
}

static void load_fp8_e4m3(const char *p, npy_intp stride, npy_intp n, double *dst)
{
    for (npy_intp i = 0; i < n; i++, p += stride)
        dst[i] = e4m3fn_bits_to_double(*(const uint8_t *)p);
}

static const char SUPPORTED_DTYPES[] =
    "float64, float32, float16, int8..int64, uint8..uint64, bool; bfloat16 and float8 as "
    "their bit patterns in a uint16/uint8 array with kind 'bf16', 'fp8_e4m3' or 'fp8_e5m2'";

/* The decoder for array `a` (an operand called `what`) read as `kind` (None: by its dtype).
 * TypeError for an unsupported dtype, ValueError for an unknown kind. */
static int pick_loader(PyArrayObject *a, PyObject *kind, const char *what, cmp_load_fn *load)
{
    int type_num = PyArray_TYPE(a);
    npy_intp itemsize = PyArray_ITEMSIZE(a);
    PyObject *descr = (PyObject *)PyArray_DESCR(a);

    if (kind != NULL && kind != Py_None) {
        const char *name;
        if (!PyUnicode_Check(kind)) {
            PyErr_Format(PyExc_TypeError, "compare: %s_kind must be a str or None, not %.100s",
                         what, Py_TYPE(kind)->tp_name);
            return -1;
        }
        if ((name = PyUnicode_AsUTF8(kind)) == NULL)
            return -1;
        npy_intp need;
        if (strcmp(name, "bf16") == 0) {
            need = 2;
            *load = load_bf16;
        } else if (strcmp(name, "fp8_e4m3") == 0) {
            need = 1;
            *load = load_fp8_e4m3;
        } else if (strcmp(name, "fp8_e5m2") == 0) {
            need = 1;
            *load = load_fp8_e5m2;
        } else {
            PyErr_Format(PyExc_ValueError,
                         "compare: unknown %s_kind %R (known: 'bf16', 'fp8_e4m3', 'fp8_e5m2')",
                         what, kind);
            return -1;
        }
        if (!PyTypeNum_ISINTEGER(type_num) || itemsize != need) {
            PyErr_Format(PyExc_TypeError,
                         "compare: %s_kind %R needs the bit patterns in a %d-byte integer array, "
                         "got dtype %S", what, kind, (int)need, descr);
            return -1;
        }
        return 0;
    }

    if (PyTypeNum_ISBOOL(type_num)) {
        *load = load_bool;
        return 0;
    }
    if (PyTypeNum_ISINTEGER(type_num)) {
        int is_signed = PyTypeNum_ISSIGNED(type_num);
        switch (itemsize) {
        case 1: *load = is_signed ? load_i8 : load_u8; return 0;
        case 2: *load = is_signed ? load_i16 : load_u16; return 0;
        case 4: *load = is_signed ? load_i32 : load_u32; return 0;
        case 8: *load = is_signed ? load_i64 : load_u64; return 0;
        default: break;
        }
    }
    switch (type_num) {
    case NPY_DOUBLE: *load = load_f64; return 0;
    case NPY_FLOAT: *load = load_f32; return 0;
    case NPY_HALF: *load = load_f16; return 0;
    default: break;
    }
    PyErr_Format(PyExc_TypeError, "compare: unsupported dtype %S of %s (supported: %s)",
                 descr, what, SUPPORTED_DTYPES);
    return -1;
}

/* ------------------------------------------------------------------ accumulation */

/* A sum of squares kept as ldexp(q, 2 * e): q is the sum of squares of values scaled by 2^-e.
 * q == 0 means empty (e is then 0). */
typedef struct {
    int e;
    double q;
} scaled_ssq;

typedef struct {
    double rtol, atol;
    int equal_nan;

    npy_intp n;                 /* elements compared so far (flat C-order index of the next) */
    npy_intp n_bad;             /* elements failing |out - ref| <= atol + rtol |ref| (isclose) */
    npy_intp nan_mismatch;      /* bad elements with a NaN on either side */
    npy_intp inf_mismatch;      /* bad elements with an infinity on either side and no NaN */
    npy_intp n_finite;          /* pairs with both values finite: the magnitude metrics' domain */
    npy_intp rel_skipped;       /* finite pairs with ref == 0 and out != 0 (relative error inf) */
    double max_abs, max_rel;

    scaled_ssq out2, ref2, err2;
    double dot;                 /* sum of out*ref scaled by 2^-(out2.e + ref2.e) */

    npy_intp worst;             /* flat index of the worst element, -1 before the first */
    int worst_rank;             /* 3 NaN mismatch, 2 Inf mismatch, 1 other bad, 0 close */
    double worst_excess;        /* |out - ref| - tol, the order within a rank */
    double worst_out, worst_ref, worst_tol;
} cmp_acc;

/* Largest magnitude -> the exponent e with m < 2^e (0 for m == 0), and 2^-e as two factors
 * that are each representable even when 2^-e alone is not (subnormal or huge m). */
static int scale_for(double m, double *s1, double *s2)
{
    int e = 0;
    if (m > 0)
        frexp(m, &e);
    int a = -e / 2, b = -e - a;
    *s1 = ldexp(1.0, a);
    *s2 = ldexp(1.0, b);
    return e;
}

/* Merge a chunk's sum (e, q) into acc's. Returns old_e - new_e of acc's exponent and stores
 * e - new_e in *shift_chunk (both <= 0), so the caller can rescale the dot product alike. */
static int merge_ssq(scaled_ssq *acc, int e, double q, int *shift_chunk)
{
    int shift_acc = 0;
    *shift_chunk = 0;
    if (q == 0)
        return 0;
    if (acc->q == 0) {
        acc->e = e;
        acc->q = q;
        return 0;
    }
    if (e > acc->e) {
        shift_acc = acc->e - e;
        acc->q = ldexp(acc->q, 2 * shift_acc) + q;
        acc->e = e;
    } else {
        *shift_chunk = e - acc->e;
        acc->q += ldexp(q, 2 * *shift_chunk);
    }
    return shift_acc;
}

/* Classify n decoded pairs starting at flat index acc->n and fold them into acc.
 * x, y are overwritten (non-finite pairs zeroed); d is scratch. Pure C, no GIL needed. */
static void process_chunk(cmp_acc *acc, double *x, double *y, double *d, npy_intp n)
{
    const double rtol = acc->rtol, atol = acc->atol;
    double mx = 0, my = 0, md = 0;
    int diff_overflow = 0;

    for (npy_intp i = 0; i < n; i++) {
        double xi = x[i], yi = y[i];
        double ad = fabs(xi - yi), ay = fabs(yi), tol = atol + rtol * ay;
        /* numpy.isclose, evaluated in double */
        int close = (isfinite(yi) && ad <= tol) || xi == yi ||
                    (acc->equal_nan && isnan(xi) && isnan(yi));
        int rank = 0;
        double excess = -INFINITY;

        if (isfinite(xi) && isfinite(yi)) {
            acc->n_finite++;
            if (ad > acc->max_abs)
                acc->max_abs = ad;
            if (ay > 0) {
                double rel = ad / ay;
                if (rel > acc->max_rel)
                    acc->max_rel = rel;
            } else if (ad > 0) {
                acc->rel_skipped++;
            }
            if (isinf(ad))      /* both finite, difference beyond DBL_MAX */
                diff_overflow = 1;
            excess = ad - tol;
            if (!close)
                rank = 1;
            double ax = fabs(xi);
            if (ax > mx)
                mx = ax;
            if (ay > my)
                my = ay;
            if (ad > md)
                md = ad;
            d[i] = xi - yi;
        } else {
            if (!close) {
                if (isnan(xi) || isnan(yi)) {
                    acc->nan_mismatch++;
                    rank = 3;
                } else {
                    acc->inf_mismatch++;
                    rank = 2;
                }
                excess = INFINITY;
            }
            x[i] = y[i] = d[i] = 0.0;
        }
        if (!close)
            acc->n_bad++;
        /* strictly worse only, so the first of equals is kept */
        if (acc->worst < 0 || rank > acc->worst_rank ||
            (rank == acc->worst_rank && excess > acc->worst_excess)) {
            acc->worst = acc->n + i;
            acc->worst_rank = rank;
            acc->worst_excess = excess;
            acc->worst_out = xi;
            acc->worst_ref = yi;
            acc->worst_tol = tol;
        }
    }

    /* Differences of finite values can pass DBL_MAX (1e308 - -1e308): halve, count the 2 in e. */
    int d_extra = 0;
    if (diff_overflow) {
        md = 0;
        for (npy_intp i = 0; i < n; i++) {
            d[i] = 0.5 * x[i] - 0.5 * y[i];
            if (fabs(d[i]) > md)
                md = fabs(d[i]);
        }
        d_extra = 1;
    }

    double sx1, sx2, sy1, sy2, sd1, sd2;
    int ex = scale_for(mx, &sx1, &sx2);
    int ey = scale_for(my, &sy1, &sy2);
    int ed = scale_for(md, &sd1, &sd2) + d_extra;
    double qx = 0, qy = 0, qd = 0, dot = 0;
    for (npy_intp i = 0; i < n; i++) {
        double xs = x[i] * sx1 * sx2, ys = y[i] * sy1 * sy2, ds = d[i] * sd1 * sd2;
        qx += xs * xs;
        qy += ys * ys;
        qd += ds * ds;
        dot += xs * ys;
    }

    int cx, cy, cd;
    int ax = merge_ssq(&acc->out2, ex, qx, &cx);
    int ay = merge_ssq(&acc->ref2, ey, qy, &cy);
    merge_ssq(&acc->err2, ed, qd, &cd);
    /* keep the dot product in units of 2^(out2.e + ref2.e) */
    acc->dot = ldexp(acc->dot, ax + ay) + ldexp(dot, cx + cy);
    acc->n += n;
}

/* ------------------------------------------------------------------ the iteration */

/* Run the comparison of a and b (already broadcast-compatible). The GIL is released inside,
 * and taken back every CMP_SIGNAL_CHUNKS chunks to check for Ctrl-C: a broadcast pair can hold
 * 2^62 elements, and nothing else would stop it. -1 with KeyboardInterrupt then. */
static int compare_arrays(PyArrayObject *a, PyArrayObject *b, cmp_load_fn load_a,
                          cmp_load_fn load_b, cmp_acc *acc)
{
    PyArrayObject *ops[2] = {a, b};
    npy_uint32 op_flags[2] = {NPY_ITER_READONLY, NPY_ITER_READONLY};
    int interrupted = 0;
    /* C order, never reversed axes: iteration order == flat C index of the broadcast shape. */
    NpyIter *it = NpyIter_MultiNew(2, ops, NPY_ITER_EXTERNAL_LOOP | NPY_ITER_ZEROSIZE_OK,
                                   NPY_CORDER, NPY_NO_CASTING, op_flags, NULL);
    if (it == NULL)
        return -1;
    if (NpyIter_GetIterSize(it) == 0)
        goto done;

    NpyIter_IterNextFunc *iternext = NpyIter_GetIterNext(it, NULL);
    if (iternext == NULL)
        goto error;
    char **dataptr = NpyIter_GetDataPtrArray(it);
    npy_intp *strides = NpyIter_GetInnerStrideArray(it);
    npy_intp *sizep = NpyIter_GetInnerLoopSizePtr(it);

    Py_BEGIN_ALLOW_THREADS
    double xb[CMP_CHUNK], yb[CMP_CHUNK], db[CMP_CHUNK];
    npy_intp filled = 0;
    unsigned chunks = 0;
    do {
        const char *pa = dataptr[0], *pb = dataptr[1];
        npy_intp sa = strides[0], sb = strides[1], left = *sizep;
        /* short inner loops (broadcast, small last axis) are gathered into full chunks */
        while (left > 0) {
            npy_intp take = CMP_CHUNK - filled < left ? CMP_CHUNK - filled : left;
            load_a(pa, sa, take, xb + filled);
            load_b(pb, sb, take, yb + filled);
            pa += take * sa;
            pb += take * sb;
            left -= take;
            filled += take;
            if (filled == CMP_CHUNK) {
                process_chunk(acc, xb, yb, db, filled);
                filled = 0;
                if (++chunks == CMP_SIGNAL_CHUNKS) {
                    chunks = 0;
                    Py_BLOCK_THREADS
                    interrupted = PyErr_CheckSignals() < 0;
                    Py_UNBLOCK_THREADS
                    if (interrupted)
                        break;
                }
            }
        }
    } while (!interrupted && iternext(it));
    if (filled > 0 && !interrupted)
        process_chunk(acc, xb, yb, db, filled);
    Py_END_ALLOW_THREADS
    if (interrupted)
        goto error;

done:
    if (NpyIter_Deallocate(it) != NPY_SUCCEED)
        return -1;
    return 0;

error:
    NpyIter_Deallocate(it);
    return -1;
}

/* ------------------------------------------------------------------ results */

static PyObject *shape_tuple(int nd, const npy_intp *dims)
{
    PyObject *t = PyTuple_New(nd);
    if (t == NULL)
        return NULL;
    for (int k = 0; k < nd; k++) {
        PyObject *v = PyLong_FromSsize_t(dims[k]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

/* d[key] = v, stealing v; -1 if v is NULL or the store fails. */
static int put(PyObject *d, const char *key, PyObject *v)
{
    if (v == NULL)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* Square root of a scaled sum as a plain double (inf when past DBL_MAX). */
static double ssq_norm(const scaled_ssq *s)
{
    return s->q == 0 ? 0.0 : ldexp(sqrt(s->q), s->e);
}

static PyObject *result_dict(const cmp_acc *acc, int nd, const npy_intp *shape)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;

    /* ratios from the scaled sums directly: finite whenever the ratio itself is */
    double rel_l2, cosine;
    if (acc->ref2.q == 0)
        rel_l2 = acc->err2.q == 0 ? 0.0 : INFINITY;
    else if (acc->err2.q == 0)
        rel_l2 = 0.0;
    else
        rel_l2 = ldexp(sqrt(acc->err2.q / acc->ref2.q), acc->err2.e - acc->ref2.e);
    if (acc->out2.q == 0 && acc->ref2.q == 0)
        cosine = 1.0;               /* two zero vectors are equal */
    else if (acc->out2.q == 0 || acc->ref2.q == 0)
        cosine = 0.0;
    else {
        cosine = acc->dot / (sqrt(acc->out2.q) * sqrt(acc->ref2.q));
        cosine = cosine > 1.0 ? 1.0 : (cosine < -1.0 ? -1.0 : cosine);
    }

    if (put(d, "n", PyLong_FromSsize_t(acc->n)) < 0 ||
        put(d, "n_bad", PyLong_FromSsize_t(acc->n_bad)) < 0 ||
        put(d, "frac_bad", PyFloat_FromDouble(acc->n ? (double)acc->n_bad / (double)acc->n
                                                       : 0.0)) < 0 ||
        put(d, "ok", PyBool_FromLong(acc->n_bad == 0)) < 0 ||
        put(d, "max_abs_err", PyFloat_FromDouble(acc->max_abs)) < 0 ||
        put(d, "max_rel_err", PyFloat_FromDouble(acc->max_rel)) < 0 ||
        put(d, "rel_skipped", PyLong_FromSsize_t(acc->rel_skipped)) < 0 ||
        put(d, "rel_l2", PyFloat_FromDouble(rel_l2)) < 0 ||
        put(d, "l2_err", PyFloat_FromDouble(ssq_norm(&acc->err2))) < 0 ||
        put(d, "l2_ref", PyFloat_FromDouble(ssq_norm(&acc->ref2))) < 0 ||
        put(d, "l2_out", PyFloat_FromDouble(ssq_norm(&acc->out2))) < 0 ||
        put(d, "cosine", PyFloat_FromDouble(cosine)) < 0 ||
        put(d, "nan_mismatch", PyLong_FromSsize_t(acc->nan_mismatch)) < 0 ||
        put(d, "inf_mismatch", PyLong_FromSsize_t(acc->inf_mismatch)) < 0 ||
        put(d, "n_finite", PyLong_FromSsize_t(acc->n_finite)) < 0 ||
        put(d, "shape", shape_tuple(nd, shape)) < 0)
        goto error;

    if (acc->worst < 0) {
        if (PyDict_SetItemString(d, "worst_flat_index", Py_None) < 0 ||
            PyDict_SetItemString(d, "worst_index", Py_None) < 0 ||
            PyDict_SetItemString(d, "worst_out", Py_None) < 0 ||
            PyDict_SetItemString(d, "worst_ref", Py_None) < 0 ||
            PyDict_SetItemString(d, "worst_tol", Py_None) < 0)
            goto error;
    } else {
        npy_intp idx[NPY_MAXDIMS], rest = acc->worst;
        for (int k = nd - 1; k >= 0; k--) {
            idx[k] = rest % shape[k];
            rest /= shape[k];
        }
        if (put(d, "worst_flat_index", PyLong_FromSsize_t(acc->worst)) < 0 ||
            put(d, "worst_index", shape_tuple(nd, idx)) < 0 ||
            put(d, "worst_out", PyFloat_FromDouble(acc->worst_out)) < 0 ||
            put(d, "worst_ref", PyFloat_FromDouble(acc->worst_ref)) < 0 ||
            put(d, "worst_tol", PyFloat_FromDouble(acc->worst_tol)) < 0)
            goto error;
    }
    return d;

error:
    Py_DECREF(d);
    return NULL;
}

/* numpy broadcasting of two shapes; ValueError naming both when they do not broadcast. */
static int broadcast_shape(PyArrayObject *a, PyArrayObject *b, int *nd_out, npy_intp *shape)
{
    int na = PyArray_NDIM(a), nb = PyArray_NDIM(b), nd = na > nb ? na : nb;
    for (int k = 0; k < nd; k++) {
        npy_intp da = k < nd - na ? 1 : PyArray_DIM(a, k - (nd - na));
        npy_intp db = k < nd - nb ? 1 : PyArray_DIM(b, k - (nd - nb));
        if (da == db || db == 1) {
            shape[k] = da;
        } else if (da == 1) {
            shape[k] = db;
        } else {
            PyObject *sa = shape_tuple(na, PyArray_DIMS(a));
            PyObject *sb = sa ? shape_tuple(nb, PyArray_DIMS(b)) : NULL;
            if (sb != NULL)
                PyErr_Format(PyExc_ValueError,
                             "compare: out shape %R and ref shape %R cannot be broadcast together",
                             sa, sb);
            Py_XDECREF(sa);
            Py_XDECREF(sb);
            return -1;
        }
    }
    *nd_out = nd;
    return 0;
}

static int check_tolerance(double v, const char *name)
{
    if (!(v >= 0) || isinf(v)) {
        char text[64];
        PyOS_snprintf(text, sizeof text, "%g", v);
        PyErr_Format(PyExc_ValueError, "compare: %s must be finite and >= 0, got %s", name, text);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(compare_doc,
"compare(out, ref, rtol, atol, equal_nan=False, out_kind=None, ref_kind=None) -> dict\n"
"\n"
"Compare out against ref elementwise after numpy broadcasting, in double, in one pass.\n"
"An element is bad when NOT |out - ref| <= atol + rtol*|ref| (numpy.isclose; NaN never\n"
"passes unless equal_nan and both are NaN; equal infinities pass). out_kind/ref_kind read a\n"
"uint16 array as 'bf16' or a uint8 array as 'fp8_e4m3'/'fp8_e5m2' bit patterns.\n"
"Returns n, n_bad, frac_bad, ok, max_abs_err, max_rel_err, rel_skipped, rel_l2, l2_err,\n"
"l2_ref, l2_out, cosine, nan_mismatch, inf_mismatch, n_finite, shape, worst_flat_index,\n"
"worst_index, worst_out, worst_ref, worst_tol (see docs/tolerances.md).");

static PyObject *py_compare(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"out", "ref", "rtol", "atol", "equal_nan", "out_kind", "ref_kind",
                             NULL};
    PyObject *out_obj, *ref_obj, *out_kind = Py_None, *ref_kind = Py_None;
    double rtol, atol;
    int equal_nan = 0;
    PyArrayObject *a = NULL, *b = NULL;
    cmp_load_fn load_a, load_b;
    npy_intp shape[NPY_MAXDIMS];
    int nd = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOdd|pOO:compare", kwlist, &out_obj, &ref_obj,
                                     &rtol, &atol, &equal_nan, &out_kind, &ref_kind))
        return NULL;
    if (check_tolerance(rtol, "rtol") < 0 || check_tolerance(atol, "atol") < 0)
        return NULL;

    /* native byte order so the decoders can read the values directly */
    a = (PyArrayObject *)PyArray_FROM_OF(out_obj, NPY_ARRAY_NOTSWAPPED);
    if (a == NULL)
        goto error;
    b = (PyArrayObject *)PyArray_FROM_OF(ref_obj, NPY_ARRAY_NOTSWAPPED);
    if (b == NULL)
        goto error;
    if (pick_loader(a, out_kind, "out", &load_a) < 0 ||
        pick_loader(b, ref_kind, "ref", &load_b) < 0)
        goto error;
    if (broadcast_shape(a, b, &nd, shape) < 0)
        goto error;

    cmp_acc acc;
    memset(&acc, 0, sizeof acc);
    acc.rtol = rtol;
    acc.atol = atol;
    acc.equal_nan = equal_nan;
    acc.worst = -1;
    if (compare_arrays(a, b, load_a, load_b, &acc) < 0)
        goto error;

    Py_DECREF(a);
    Py_DECREF(b);
    return result_dict(&acc, nd, shape);

error:
    Py_XDECREF(a);
    Py_XDECREF(b);
    return NULL;
}

static PyMethodDef compare_methods[] = {
    {"compare", (PyCFunction)(void (*)(void))py_compare, METH_VARARGS | METH_KEYWORDS,
     compare_doc},
    {NULL, NULL, 0, NULL},
};

int kb_compare_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, compare_methods);
}
