"""Tests of kbench._core.compare and kbench.compare.

Every verdict is checked against numpy.isclose/allclose on the inputs cast to float64 (the
documented semantics), every metric against a float64 numpy computation or exact rational
arithmetic, and every decoder against ml_dtypes over all bit patterns.
"""
import math
import re
import sys
import threading
from fractions import Fraction

import numpy as np
import pytest

from kbench import _core
from kbench.correctness.compare import (DEFAULT_TOLERANCES, Comparison, assert_close, compare,
                            tolerances_for)

FLOATS = [np.float64, np.float32, np.float16]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
ALL = FLOATS + INTS + [np.bool_]


# ------------------------------------------------------------------ a numpy model of compare


def model(out, ref, rtol, atol, equal_nan=False):
    """What compare must return, computed with numpy in float64."""
    x, y = np.broadcast_arrays(np.asarray(out).astype(np.float64),
                               np.asarray(ref).astype(np.float64))
    shape = x.shape
    x, y = x.ravel(), y.ravel()
    with np.errstate(all="ignore"):
        close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
        fin = np.isfinite(x) & np.isfinite(y)
        ad = np.abs(x - y)
        tol = atol + rtol * np.abs(y)
        nan = np.isnan(x) | np.isnan(y)
        rank = np.where(close, 0, np.where(fin, 1, np.where(nan, 3, 2)))
        excess = np.where(fin, ad - tol, np.where(close, -np.inf, np.inf))
        d = x - y
    m = {"n": x.size, "n_bad": int((~close).sum()), "ok": bool(close.all()),
         "nan_mismatch": int((~close & nan).sum()),
         "inf_mismatch": int((~close & ~nan & ~fin).sum()),
         "n_finite": int(fin.sum()), "shape": shape}
    xf, yf, df = x[fin], y[fin], d[fin]
    m["max_abs_err"] = float(np.abs(df).max()) if df.size else 0.0
    nz = yf != 0
    m["max_rel_err"] = float((np.abs(df[nz]) / np.abs(yf[nz])).max()) if nz.any() else 0.0
    m["rel_skipped"] = int(((yf == 0) & (df != 0)).sum())
    ny, nx, nd = (float(np.linalg.norm(v)) for v in (yf, xf, df))
    m["rel_l2"] = (0.0 if nd == 0 else math.inf) if ny == 0 else nd / ny
    if nx == 0 and ny == 0:
        m["cosine"] = 1.0
    elif nx == 0 or ny == 0:
        m["cosine"] = 0.0
    else:
        m["cosine"] = float(np.dot(xf, yf) / (nx * ny))
    if x.size:
        top = rank.max()
        flat = int(np.argmax(np.where(rank == top, excess, -np.inf))
                   if top in (0, 1) else np.argmax(rank == top))
        if top == 0 and np.all(excess[rank == 0] == -np.inf):
            flat = 0
        m["worst_flat_index"] = flat
        m["worst_index"] = tuple(int(i) for i in np.unravel_index(flat, shape))
    else:
        m["worst_flat_index"] = None
        m["worst_index"] = None
    return m


def check_against_model(r, out, ref, rtol, atol, equal_nan=False, exact_keys_only=False):
    m = model(out, ref, rtol, atol, equal_nan)
    for k in ("n", "n_bad", "ok", "nan_mismatch", "inf_mismatch", "n_finite", "shape",
              "rel_skipped", "worst_flat_index", "worst_index", "max_abs_err", "max_rel_err"):
        assert r[k] == m[k], (k, r[k], m[k])
    if not exact_keys_only:
        assert r["rel_l2"] == pytest.approx(m["rel_l2"], rel=1e-12, abs=1e-300)
        assert r["cosine"] == pytest.approx(m["cosine"], rel=1e-12, abs=1e-12)
    assert r["frac_bad"] == (m["n_bad"] / m["n"] if m["n"] else 0.0)


def random_values(rng, dtype, shape, specials):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        scale = 10.0 ** rng.integers(-3, 4)
        v = np.asarray(rng.standard_normal(shape) * scale).astype(dtype)
        if specials and v.size:
            pick = rng.random(v.shape) < 0.1
            v[pick] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype),
                                 size=int(pick.sum()))
        return v
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    info = np.iinfo(dtype)
    if rng.random() < 0.5:                       # small values: differences near tolerances
        lo, hi = max(info.min, -50), min(info.max, 50)
        return np.asarray(rng.integers(lo, hi, size=shape, endpoint=True)).astype(dtype)
    return np.asarray(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype))


def perturb(rng, ref, dtype):
    """A candidate output near ref: some elements equal, some slightly off, some far off."""
    dtype = np.dtype(dtype)
    base = ref.astype(np.float64)
    noise = rng.standard_normal(ref.shape) * (np.abs(base) + 1) * 10.0 ** rng.integers(-8, 0)
    with np.errstate(all="ignore"):
        cand = np.where(rng.random(ref.shape) < 0.3, base, base + noise)
        if dtype.kind in "iub":
            cand = np.round(cand)
            if dtype.kind == "b":
                cand = cand != 0
            else:
                info = np.iinfo(dtype)
                cand = np.clip(np.nan_to_num(cand), info.min, info.max)
        return np.asarray(cand).astype(dtype)


def random_shape(rng):
    nd = int(rng.integers(0, 4))
    return tuple(int(s) for s in rng.integers(0, 9 if nd > 1 else 3000, size=nd))


# ------------------------------------------------------------------ verdicts vs numpy


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_verdict_and_metrics_match_numpy_fuzz(dtype):
    rng = np.random.default_rng(1234 + np.dtype(dtype).num)
    for trial in range(150):
        shape = random_shape(rng)
        ref = random_values(rng, dtype, shape, specials=trial % 3 == 0)
        out = perturb(rng, ref, dtype) if trial % 2 else random_values(rng, dtype, shape,
                                                                      specials=trial % 3 == 0)
        rtol = float(10.0 ** rng.uniform(-9, -1)) if trial % 5 else 0.0
        atol = float(10.0 ** rng.uniform(-9, 0)) if trial % 7 else 0.0
        equal_nan = bool(trial % 4 == 0)
        r = _core.compare(out, ref, rtol, atol, equal_nan=equal_nan)
        check_against_model(r, out, ref, rtol, atol, equal_nan)
        with np.errstate(all="ignore"):
            assert r["ok"] == np.allclose(out.astype(np.float64), ref.astype(np.float64),
                                          rtol=rtol, atol=atol, equal_nan=equal_nan)


def test_mixed_dtypes_match_numpy():
    rng = np.random.default_rng(7)
    for trial in range(300):
        da, db = (ALL[i] for i in rng.integers(0, len(ALL), size=2))
        shape = random_shape(rng)
        ref = random_values(rng, db, shape, specials=trial % 2 == 0)
        out = perturb(rng, ref, da)
        rtol, atol = float(10.0 ** rng.uniform(-6, -1)), float(10.0 ** rng.uniform(-6, 0))
        r = _core.compare(out, ref, rtol, atol, equal_nan=bool(trial % 3 == 0))
        check_against_model(r, out, ref, rtol, atol, bool(trial % 3 == 0))


def test_closeness_boundary_is_inclusive_like_numpy():
    # |out - ref| == atol + rtol*|ref| exactly passes; one ulp more fails
    ref = np.array([1.0, 2.0, 4.0])
    out = ref + 0.5
    r = _core.compare(out, ref, 0.0, 0.5)
    assert r["ok"] and np.allclose(out, ref, rtol=0, atol=0.5)
    out2 = np.nextafter(out, np.inf)
    r = _core.compare(out2, ref, 0.0, 0.5)
    assert r["n_bad"] == 3 == int((~np.isclose(out2, ref, rtol=0, atol=0.5)).sum())


def test_asymmetric_in_ref_like_numpy():
    # tolerance scales with |ref| only: swapping out and ref can change the verdict
    a, b = np.array([1.0]), np.array([1.1])
    rtol = 0.095
    assert _core.compare(a, b, rtol, 0.0)["ok"] == bool(np.isclose(a, b, rtol=rtol, atol=0))
    assert _core.compare(b, a, rtol, 0.0)["ok"] == bool(np.isclose(b, a, rtol=rtol, atol=0))
    assert _core.compare(a, b, rtol, 0.0)["ok"] != _core.compare(b, a, rtol, 0.0)["ok"]


# ------------------------------------------------------------------ adversarial values


def test_nan_handling():
    out = np.array([np.nan, np.nan, 1.0, np.nan])
    ref = np.array([np.nan, 1.0, np.nan, np.nan])
    r = _core.compare(out, ref, 1e-5, 1e-8)
    assert r["n_bad"] == 4 and r["nan_mismatch"] == 4 and not r["ok"]
    r = _core.compare(out, ref, 1e-5, 1e-8, equal_nan=True)
    assert r["n_bad"] == 2 and r["nan_mismatch"] == 2
    assert r["worst_flat_index"] == 1            # first NaN mismatch
    assert math.isnan(r["worst_ref"]) is False and math.isnan(r["worst_out"])
    r = _core.compare(np.array([np.nan]), np.array([np.nan]), 0.0, 0.0, equal_nan=True)
    assert r["ok"] and r["n_finite"] == 0 and r["rel_l2"] == 0.0


def test_nan_mismatch_outranks_large_finite_error():
    out = np.array([0.0, 1e300, np.inf, np.nan, 5.0])
    ref = np.array([0.0, 0.0, 1.0, 1.0, 5.0])
    r = _core.compare(out, ref, 0.0, 0.0)
    assert r["worst_flat_index"] == 3 and r["n_bad"] == 3
    assert r["nan_mismatch"] == 1 and r["inf_mismatch"] == 1
    # magnitude metrics skip the non-finite pairs
    assert r["max_abs_err"] == 1e300 and r["n_finite"] == 3
    r = _core.compare(out[:3], ref[:3], 0.0, 0.0)
    assert r["worst_flat_index"] == 2            # Inf mismatch outranks any finite excess


def test_infinities():
    out = np.array([np.inf, -np.inf, np.inf, 1.0, np.inf])
    ref = np.array([np.inf, -np.inf, -np.inf, np.inf, 1.0])
    r = _core.compare(out, ref, 1e-3, 1e-3)
    expected = ~np.isclose(out, ref, rtol=1e-3, atol=1e-3)
    assert r["n_bad"] == int(expected.sum()) == 3
    assert r["inf_mismatch"] == 3 and r["nan_mismatch"] == 0
    assert r["worst_flat_index"] == 2
    r = _core.compare(out[:2], ref[:2], 0.0, 0.0)
    assert r["ok"] and r["n_finite"] == 0


def test_signed_zero_and_subnormals():
    assert _core.compare(np.array([-0.0]), np.array([0.0]), 0.0, 0.0)["ok"]
    tiny = np.array([5e-324, 1e-310, -2.5e-320])
    r = _core.compare(tiny, tiny.copy(), 0.0, 0.0)
    assert r["ok"] and r["rel_l2"] == 0.0 and r["cosine"] == 1.0
    off = tiny * 2
    r = _core.compare(off, tiny, 0.0, 0.0)
    assert r["n_bad"] == 3
    # naive sums of squares underflow to 0 here; the scaled sums must not
    assert r["rel_l2"] == pytest.approx(exact_rel_l2(off, tiny), rel=1e-12)
    assert r["cosine"] == pytest.approx(1.0, abs=1e-12)
    assert r["max_rel_err"] == pytest.approx(1.0)


def exact_rel_l2(out, ref):
    num = sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(out, ref))
    den = sum(Fraction(float(b)) ** 2 for b in ref)
    return math.sqrt(num / den)


def exact_cosine(out, ref):
    dot = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(out, ref))
    nx = sum(Fraction(float(a)) ** 2 for a in out)
    ny = sum(Fraction(float(b)) ** 2 for b in ref)
    return math.sqrt(float(dot * dot / (nx * ny))) * (1.0 if dot >= 0 else -1.0)


@pytest.mark.parametrize("magnitude", [1e308, 1e-310, 1e-300, 1e200])
def test_huge_and_tiny_norms_are_finite_and_right(magnitude):
    rng = np.random.default_rng(3)
    ref = rng.uniform(0.5, 1.0, 1500) * magnitude
    out = ref * (1 + rng.standard_normal(1500) * 1e-3)
    out = np.minimum(out, np.finfo(np.float64).max)
    r = _core.compare(out, ref, 1e-2, 0.0)
    assert math.isfinite(r["rel_l2"]) and r["rel_l2"] > 0
    assert r["rel_l2"] == pytest.approx(exact_rel_l2(out, ref), rel=1e-10)
    assert r["cosine"] == pytest.approx(exact_cosine(out, ref), abs=1e-12)
    assert r["max_rel_err"] == pytest.approx(
        float(np.max(np.abs(out - ref) / np.abs(ref))), rel=1e-12)


def test_difference_past_dbl_max():
    ref = np.full(600, -1e308)
    out = np.full(600, 1e308)
    r = _core.compare(out, ref, 0.0, 0.0)
    assert r["n_bad"] == 600 and r["inf_mismatch"] == 0
    assert r["max_abs_err"] == math.inf                  # 2e308 is not a double
    assert r["rel_l2"] == pytest.approx(2.0, rel=1e-14)   # but the ratio is
    assert r["cosine"] == pytest.approx(-1.0, rel=1e-14)
    assert r["l2_ref"] == math.inf                       # ||ref|| itself is past DBL_MAX


def test_zero_reference_conventions():
    z = np.zeros(4)
    r = _core.compare(z, z, 0.0, 0.0)
    assert r["rel_l2"] == 0.0 and r["cosine"] == 1.0 and r["max_rel_err"] == 0.0
    r = _core.compare(np.array([0.0, 1.0, 0.0, 0.0]), z, 0.0, 2.0)
    assert r["ok"] and r["rel_l2"] == math.inf and r["cosine"] == 0.0
    assert r["rel_skipped"] == 1 and r["max_rel_err"] == 0.0 and r["max_abs_err"] == 1.0


def test_empty_arrays():
    r = _core.compare(np.zeros((0, 3)), np.zeros(3), 0.0, 0.0)
    assert r["n"] == 0 and r["ok"] and r["frac_bad"] == 0.0 and r["shape"] == (0, 3)
    assert r["worst_index"] is None and r["worst_out"] is None


# ------------------------------------------------------------------ metrics vs numpy


def test_metrics_match_float64_numpy():
    rng = np.random.default_rng(11)
    for n in (1, 7, 511, 512, 513, 4096, 100_003):
        ref = rng.standard_normal(n)
        out = ref + rng.standard_normal(n) * 1e-4
        r = _core.compare(out, ref, 1e-3, 1e-5)
        check_against_model(r, out, ref, 1e-3, 1e-5)
        assert r["l2_err"] == pytest.approx(np.linalg.norm(out - ref), rel=1e-12)
        assert r["l2_ref"] == pytest.approx(np.linalg.norm(ref), rel=1e-12)
        assert r["l2_out"] == pytest.approx(np.linalg.norm(out), rel=1e-12)
        worst = r["worst_flat_index"]
        assert r["worst_out"] == out[worst] and r["worst_ref"] == ref[worst]
        assert r["worst_tol"] == 1e-5 + 1e-3 * abs(ref[worst])


def test_rel_l2_accuracy_mixed_magnitudes():
    # values spanning 600 orders of magnitude in one array: compare to exact arithmetic
    rng = np.random.default_rng(5)
    ref = rng.standard_normal(3000) * 10.0 ** rng.integers(-300, 300, 3000)
    out = ref * (1 + rng.standard_normal(3000) * 1e-6)
    r = _core.compare(out, ref, 1e-3, 0.0)
    assert r["rel_l2"] == pytest.approx(exact_rel_l2(out, ref), rel=1e-10)


# ------------------------------------------------------------------ broadcasting and layout


def test_broadcasting_and_multi_index():
    rng = np.random.default_rng(2)
    out = rng.standard_normal((3, 1, 4))
    ref = rng.standard_normal((5, 4))
    r = _core.compare(out, ref, 1e-3, 1e-3)
    check_against_model(r, out, ref, 1e-3, 1e-3)
    assert r["shape"] == (3, 5, 4) and r["n"] == 60
    i = r["worst_index"]
    assert r["worst_out"] == out[i[0], 0, i[2]] and r["worst_ref"] == ref[i[1], i[2]]
    r = _core.compare(np.float64(2.0), np.full((2, 3), 2.0), 0.0, 0.0)
    assert r["ok"] and r["n"] == 6 and r["shape"] == (2, 3)
    r = _core.compare([1.0, 2.0], 1.0, 0.0, 0.0)
    assert r["n_bad"] == 1 and r["worst_index"] == (1,)


def test_strided_transposed_reversed_and_swapped_inputs():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((40, 30))
    views = [base.T, base[::-1, ::2], base[:, ::-3], np.asfortranarray(base)]
    for v in views:
        ref = np.ascontiguousarray(v) + rng.standard_normal(v.shape) * 1e-3
        r = _core.compare(v, ref, 1e-4, 1e-4)
        check_against_model(r, v, ref, 1e-4, 1e-4)
        i = r["worst_index"]
        assert r["worst_out"] == v[i] and r["worst_ref"] == ref[i]
    swapped = base.astype(">f8")
    r = _core.compare(swapped, base, 0.0, 0.0)
    assert r["ok"] and r["n"] == base.size
    r = _core.compare(base.astype(">f4"), base.astype(np.float32) * 2, 0.0, 0.0)
    check_against_model(r, base.astype(">f4"), base.astype(np.float32) * 2, 0.0, 0.0)


def test_short_inner_loops_are_gathered():
    # a broadcast with a length-3 last axis: many tiny inner loops across chunk boundaries
    rng = np.random.default_rng(8)
    out = rng.standard_normal((1000, 1, 3))
    ref = rng.standard_normal((7, 3))
    r = _core.compare(out, ref, 0.5, 0.5)
    check_against_model(r, out, ref, 0.5, 0.5)


# ------------------------------------------------------------------ errors


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        _core.compare(np.zeros((2, 3)), np.zeros(4), 0.0, 0.0)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        compare(np.zeros((2, 3)), np.zeros(4))


@pytest.mark.parametrize("bad, name", [
    (np.ones(3, np.complex128), "complex128"),
    (np.array([1, "a"], dtype=object), "object"),
    (np.array(["ab", "c"]), "<U2"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
    (np.array([1.0], dtype=np.longdouble), "float128"),
])
def test_unsupported_dtype_is_a_type_error_naming_it(bad, name):
    with pytest.raises(TypeError, match=name):
        _core.compare(bad, np.ones(1), 0.0, 0.0)
    with pytest.raises(TypeError, match=name):
        _core.compare(np.ones(1), bad, 0.0, 0.0)
    if bad.dtype.kind != "c":       # kbench.compare compares complex values part by part
        with pytest.raises(TypeError, match=name):
            compare(bad, np.ones(bad.shape))
    # the process stays usable
    assert _core.compare(np.ones(2), np.ones(2), 0.0, 0.0)["ok"]


def test_bad_arguments():
    a = np.ones(3)
    with pytest.raises(ValueError, match="rtol"):
        _core.compare(a, a, -1.0, 0.0)
    with pytest.raises(ValueError, match="atol"):
        _core.compare(a, a, 0.0, float("nan"))
    with pytest.raises(ValueError, match="atol"):
        _core.compare(a, a, 0.0, float("inf"))
    with pytest.raises(ValueError, match="fp9"):
        _core.compare(a.astype(np.uint8), a, 0.0, 0.0, out_kind="fp9")
    with pytest.raises(TypeError, match="bf16.*2-byte.*float64"):
        _core.compare(a, a, 0.0, 0.0, out_kind="bf16")
    with pytest.raises(TypeError, match="fp8_e4m3.*1-byte.*uint16"):
        _core.compare(a, a.astype(np.uint16), 0.0, 0.0, ref_kind="fp8_e4m3")
    with pytest.raises(TypeError, match="str or None"):
        _core.compare(a, a, 0.0, 0.0, out_kind=3)
    with pytest.raises(ValueError, match="no default tolerances"):
        compare(a, a, dtype="fp7")
    assert _core.compare(a, a, 0.0, 0.0)["ok"]


def test_references_are_not_leaked_on_success_or_error():
    a = np.ones(10)
    b = np.ones(10)
    c = np.ones(3, np.complex128)
    before = sys.getrefcount(a), sys.getrefcount(b), sys.getrefcount(c)
    for _ in range(200):
        _core.compare(a, b, 0.0, 0.0)
        for args in ((a, c), (c, a), (a, np.ones(4))):
            with pytest.raises((TypeError, ValueError)):
                _core.compare(*args, 0.0, 0.0)
        with pytest.raises(TypeError):
            _core.compare(a, b, 0.0, 0.0, out_kind="bf16")
    del args
    assert (sys.getrefcount(a), sys.getrefcount(b), sys.getrefcount(c)) == before


def test_concurrent_calls_agree():
    rng = np.random.default_rng(9)
    ref = rng.standard_normal(200_000)
    out = ref + rng.standard_normal(200_000) * 1e-5
    expected = _core.compare(out, ref, 1e-4, 1e-6)
    results = []

    def work():
        for _ in range(5):
            results.append(_core.compare(out, ref, 1e-4, 1e-6))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20 and all(r == expected for r in results)


# ------------------------------------------------------------------ bit-pattern formats


def test_bf16_and_fp8_decoders_match_ml_dtypes_exhaustively():
    ml = pytest.importorskip("ml_dtypes")
    for kind, view, mltype in (("bf16", np.uint16, ml.bfloat16),
                               ("fp8_e4m3", np.uint8, ml.float8_e4m3fn),
                               ("fp8_e5m2", np.uint8, ml.float8_e5m2)):
        bits = np.arange(np.iinfo(view).max + 1, dtype=view)
        with np.errstate(invalid="ignore"):
            decoded = bits.view(mltype).astype(np.float64)
        r = _core.compare(bits, decoded, 0.0, 0.0, equal_nan=True, out_kind=kind)
        assert r["ok"], (kind, r)
        assert r["n"] == bits.size
        # signed zeros decode as zeros of either sign, NaNs as NaNs: with equal_nan off the
        # number of bad elements is exactly the number of NaN patterns
        r = _core.compare(bits, decoded, 0.0, 0.0, out_kind=kind)
        assert r["n_bad"] == r["nan_mismatch"] == int(np.isnan(decoded).sum())


def test_float16_decoder_exhaustive():
    bits = np.arange(65536, dtype=np.uint16)
    halfs = bits.view(np.float16)
    r = _core.compare(halfs, halfs.astype(np.float64), 0.0, 0.0, equal_nan=True)
    assert r["ok"] and r["n"] == 65536


def test_bf16_rounding_passes_bf16_fails_fp32():
    ml = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(6)
    ref = rng.standard_normal((64, 33)).astype(np.float32)
    out = ref.astype(ml.bfloat16)
    c = compare(out, ref)
    assert c.ok and c.out_dtype == "bf16" and c.ref_dtype == "fp32"
    assert (c.rtol, c.atol) == DEFAULT_TOLERANCES["bf16"]
    assert c.max_rel_err <= 2.0 ** -8                  # round to nearest: half an ulp
    check_against_model(c.to_dict(), out.astype(np.float64), ref, c.rtol, c.atol)
    c32 = compare(out.astype(np.float32), ref)
    assert not c32.ok and (c32.rtol, c32.atol) == DEFAULT_TOLERANCES["fp32"]
    assert not compare(out, ref, dtype="fp32").ok
    # the raw bit-pattern route gives the same numbers as the ml_dtypes route
    r = _core.compare(out.view(np.uint16), ref, c.rtol, c.atol, out_kind="bf16")
    assert r["max_abs_err"] == c.max_abs_err and r["rel_l2"] == c.rel_l2


def test_fp8_arrays_get_fp8_tolerances():
    ml = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(12)
    ref = rng.uniform(-100, 100, 500).astype(np.float32)
    for mltype, key in ((ml.float8_e4m3fn, "fp8_e4m3"), (ml.float8_e5m2, "fp8_e5m2")):
        out = ref.astype(mltype)
        c = compare(out, ref)
        assert c.out_dtype == key and (c.rtol, c.atol) == DEFAULT_TOLERANCES[key]
        assert c.ok
        check_against_model(c.to_dict(), out.astype(np.float64), ref, c.rtol, c.atol)
        assert not compare(out, ref, dtype="bf16").ok


def test_other_ml_dtypes_are_decoded_through_numpy():
    ml = pytest.importorskip("ml_dtypes")
    x = np.array([0.5, -2.0, 3.0], dtype=ml.float8_e4m3fnuz)
    c = compare(x, np.array([0.5, -2.0, 3.0]))
    assert c.ok and c.out_dtype == "float8_e4m3fnuz"
    assert (c.rtol, c.atol) == DEFAULT_TOLERANCES["fp8_e4m3"]
    with pytest.raises(ValueError, match="float4_e2m1fn"):
        compare(np.ones(2, ml.float4_e2m1fn), np.ones(2))
    assert compare(np.ones(2, ml.float4_e2m1fn), np.ones(2), 0.0, 0.0).ok


# ------------------------------------------------------------------ the Python layer


def test_default_tolerances_follow_the_lower_precision():
    a64, a32, a16 = np.ones(2), np.ones(2, np.float32), np.ones(2, np.float16)
    assert (compare(a32, a64).rtol, compare(a32, a64).atol) == DEFAULT_TOLERANCES["fp32"]
    assert (compare(a64, a16).rtol, compare(a64, a16).atol) == DEFAULT_TOLERANCES["fp16"]
    assert (compare(a64, a64).rtol, compare(a64, a64).atol) == DEFAULT_TOLERANCES["fp64"]
    ints = np.arange(5, dtype=np.int32)
    c = compare(ints, ints)
    assert (c.rtol, c.atol) == (0.0, 0.0) and c.ok
    assert not compare(ints + np.array([0, 0, 0, 0, 1], np.int32), ints).ok
    c = compare(ints, ints.astype(np.float32))
    assert (c.rtol, c.atol) == DEFAULT_TOLERANCES["fp32"]
    c = compare(a32, a32, dtype="tf32")
    assert (c.rtol, c.atol) == DEFAULT_TOLERANCES["tf32"] and c.tolerance_source == "tf32"
    c = compare(a32, a32, rtol=0.5)
    assert (c.rtol, c.atol) == (0.5, DEFAULT_TOLERANCES["fp32"][1])
    c = compare(a32, a32, rtol=0.5, atol=0.25)
    assert (c.rtol, c.atol) == (0.5, 0.25) and c.tolerance_source == "explicit"
    assert tolerances_for("bfloat16") == DEFAULT_TOLERANCES["bf16"]
    assert tolerances_for(np.float16) == DEFAULT_TOLERANCES["fp16"]
    assert tolerances_for(np.uint8) == (0.0, 0.0)


def test_tf32_tolerance_accepts_tf32_rounding_but_not_fp16_sized_errors():
    rng = np.random.default_rng(13)
    ref = rng.standard_normal(1000).astype(np.float32)
    # round to TF32 (10 explicit mantissa bits) by clearing the low 13 bits with rounding
    bits = ref.view(np.uint32).astype(np.uint64)
    tf32 = (((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32)).view(np.float32)
    assert compare(tf32, ref, dtype="tf32").ok
    assert not compare(tf32, ref).ok                  # fp32 defaults are far tighter
    assert not compare(ref * 1.01, ref, dtype="tf32", atol=0.0).ok


def test_comparison_report_repr_html_dict():
    ref = np.arange(12, dtype=np.float64).reshape(3, 4)
    out = ref.copy()
    out[2, 1] += 0.5
    out[0, 3] = np.nan
    c = compare(out, ref)
    assert isinstance(c, Comparison) and not c.ok and c.n_bad == 2
    assert c.worst_index == (0, 3) and c.nan_mismatch == 1
    text = c.report()
    assert "FAILED" in text and "(0, 3)" in text and "2 of 12" in text
    assert "fp64" in text and "1 NaN" in text
    assert "FAILED" in repr(c) and "(0, 3)" in repr(c)
    h = c._repr_html_()
    assert "<table>" in h and "(0, 3)" in h
    d = c.to_dict()
    assert d["n_bad"] == 2 and d["worst_index"] == (0, 3) and d["out_dtype"] == "fp64"
    ok = compare(ref, ref)
    assert ok.ok and "OK" in ok.report() and "closest to the limit" in ok.report()


def test_assert_close():
    ref = np.linspace(0, 1, 50)
    assert assert_close(ref, ref).ok
    out = ref.copy()
    out[17] += 1e-3
    with pytest.raises(AssertionError) as ei:
        assert_close(out, ref, msg="layer 3")
    assert "layer 3" in str(ei.value) and "(17,)" in str(ei.value)
    assert_close(out, ref, atol=2e-3)


class _DLPackOnly:
    """An array exposed only through the DLPack protocol (like a JAX array on the host)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class _FakeCupyArray:
    def __init__(self, a):
        self._a = a

    def get(self):
        return self._a


_FakeCupyArray.__module__ = "cupy._core.core"


def test_dlpack_cupy_and_plain_sequences():
    ref = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = compare(_DLPackOnly(ref + 1), ref, 0.0, 0.0)
    assert c.n_bad == 6 and c.out_dtype == "fp32" and c.shape == (2, 3)
    c = compare(_FakeCupyArray(ref), ref)
    assert c.ok and c.n == 6
    assert compare([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], ref).ok
    assert compare(memoryview(ref), ref, 0.0, 0.0).ok          # buffer protocol


def test_torch_and_cupy_are_not_imported_for_other_inputs():
    code = ("import sys, numpy as np\n"
            "from kbench.correctness.compare import compare\n"
            "sys.modules.pop('torch', None); sys.modules.pop('cupy', None)\n"
            "compare(np.ones(3), [1.0, 1.0, 1.0])\n"
            "assert 'torch' not in sys.modules and 'cupy' not in sys.modules\n")
    import subprocess
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    ref = torch.randn(8, 5, dtype=torch.float32)
    out = ref.to(torch.bfloat16)
    c = compare(out, ref)
    assert c.ok and c.out_dtype == "bf16" and (c.rtol, c.atol) == DEFAULT_TOLERANCES["bf16"]
    assert not compare(out.float(), ref).ok
    g = ref.clone().requires_grad_(True)
    assert compare(g, ref).ok
    if hasattr(torch, "float8_e4m3fn"):
        c = compare(ref.to(torch.float8_e4m3fn), ref)
        assert c.out_dtype == "fp8_e4m3" and c.ok


# ------------------------------------------------------------ issue 12: shapes, byte order, complex


@pytest.mark.parametrize("out, ref", [
    (np.float64(3.0), np.full(1000, 3.0)),          # a 0-d value against an array
    (np.full(1000, 3.0), np.float64(3.0)),          # and the other way round
    (np.full((1000, 1), 2.0), np.full(1000, 2.0)),  # would broadcast to 1,000,000 elements
    (np.ones((2, 3)), np.ones(3)),
    (np.ones(5), [1.0]),
])
def test_shapes_must_match_unless_broadcast_is_asked_for(out, ref):
    s_out, s_ref = np.shape(out), np.shape(ref)
    with pytest.raises(ValueError, match=re.escape(f"out shape {s_out} and ref shape {s_ref} "
                                                   f"differ")):
        compare(out, ref)
    with pytest.raises(ValueError, match="broadcast=True"):
        assert_close(out, ref)
    c = compare(out, ref, broadcast=True)
    assert c.ok and c.shape == np.broadcast_shapes(s_out, s_ref)
    assert compare(np.float64(2.0), np.float64(2.0)).ok          # 0-d against 0-d is equal


def test_big_endian_arrays_compare_with_default_tolerances():
    ref = np.linspace(-3, 3, 50)
    for dt in (">f8", ">f4", ">f2", ">i4"):
        c = compare(ref.astype(dt), ref.astype(dt).astype(np.dtype(dt).newbyteorder("=")))
        assert c.ok and c.n == 50
    c = compare(np.ones(3, ">f8"), np.ones(3))
    assert c.ok and c.tolerance_source == "fp64" and c.out_dtype == "fp64"
    bad = np.ones(3, ">f4")
    bad[1] = 1.5
    c = compare(bad, np.ones(3, np.float32))
    assert not c.ok and c.worst_index == (1,) and c.worst_out == 1.5


def test_complex_values_are_compared_part_by_part():
    ref = np.array([1 + 2j, 3 - 1j, -0.5 + 0.25j])
    out = ref.copy()
    out[1] = 3 - 1.5j                      # only the imaginary part is wrong
    c = compare(out, ref)
    assert not c.ok and c.n_bad == 1 and c.n == 6 and c.shape == (3, 2)
    assert c.worst_index == (1, 1) and c.worst_out == -1.5 and c.worst_ref == -1.0
    assert c.tolerance_source == "fp64" and c.out_dtype == "complex128"
    assert compare(ref, ref).ok
    assert compare(ref.astype(np.complex64), ref).tolerance_source == "fp32"
    # a real reference has zero imaginary parts
    assert not compare(ref, ref.real).ok and compare(ref.real + 0j, ref.real).ok
    assert compare(ref.astype(">c16"), ref).ok


def test_ml_dtypes_complex_keeps_its_imaginary_part():
    ml = pytest.importorskip("ml_dtypes")
    if not hasattr(ml, "complex32"):
        pytest.skip("this ml_dtypes has no complex32")
    ref = np.array([1 + 2j, 3 - 1j])
    good = ref.astype(ml.complex32)
    c = compare(good, ref)
    assert c.ok and c.tolerance_source == "fp16" and c.out_dtype == "complex32"
    wrong = np.array([1 + 5j, 3 - 1j]).astype(ml.complex32)     # real parts right
    c = compare(wrong, ref)
    assert not c.ok and c.worst_index == (0, 1) and c.worst_out == 5.0
    if hasattr(ml, "bcomplex32"):
        assert compare(ref.astype(ml.bcomplex32), ref).tolerance_source == "bf16"


def test_a_none_output_is_named_not_reported_as_a_shape_mismatch():
    # def kernel(x): np.multiply(x, 2, out=x)  -- forgot to return x
    with pytest.raises(TypeError, match="out is None; a kernel that writes its output in place"):
        compare(None, np.full(4, 2.0))
    with pytest.raises(TypeError, match="out is None"):
        compare(None, np.full(4, 2.0), broadcast=True)
    with pytest.raises(TypeError, match="ref is None"):
        compare(np.ones(2), None)


@pytest.mark.parametrize("ref", ["abc", b"xy", object()])
def test_a_non_numeric_reference_is_named(ref):
    with pytest.raises(TypeError, match="ref is not numeric"):
        compare(np.ones(3), ref)


@pytest.mark.parametrize("given", ["1e-3", [1e-3], True, np.array([1e-3])])
def test_a_tolerance_that_is_not_a_real_number_is_named(given):
    with pytest.raises(TypeError, match="rtol must be a real number"):
        compare(np.ones(2), np.ones(2), rtol=given, atol=0.0)
    assert compare(np.ones(2), np.ones(2), rtol=np.float32(1e-3), atol=0).rtol == \
        pytest.approx(1e-3)


def test_64_bit_integers_are_compared_exactly_at_zero_tolerance():
    # read as doubles, 2**63-1 and 2**63-2 (and 2**53+1, 2**53) compared equal: ok=True
    c = compare(np.array([2**63 - 1]), np.array([2**63 - 2]))
    assert not c.ok and c.n_bad == 1 and c.max_abs_err == 1.0
    assert (c.worst_out, c.worst_ref, c.worst_index) == (2**63 - 1, 2**63 - 2, (0,))
    assert "out=9223372036854775807 ref=9223372036854775806 |out-ref|=1" in c.report()
    c = compare(np.array([[2**53 + 1, 5], [3, 2**53 + 1]]), np.array([[2**53, 5], [3, 2**53 + 1]]))
    assert not c.ok and c.n_bad == 1 and c.worst_index == (0, 0)
    u = np.array([2**63, 2**63 + 1], np.uint64)
    c = compare(u, np.array([2**63 + 1, 2**63 + 1], np.uint64))
    assert c.n_bad == 1 and c.frac_bad == 0.5 and c.worst_index == (0,)
    assert compare(u, u.copy()).ok
    # an explicit tolerance keeps the documented double rule
    assert compare(np.array([2**63 - 1]), np.array([2**63 - 2]), rtol=0, atol=1).ok


def test_torch_uint64_tensors_are_compared_exactly():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "uint64"):
        pytest.skip("torch without uint64")
    c = compare(torch.tensor([2**63], dtype=torch.uint64),
                torch.tensor([2**63 + 1], dtype=torch.uint64))
    assert not c.ok and c.n_bad == 1


@pytest.mark.parametrize("what", ["rtol", "atol"])
def test_a_huge_int_tolerance_is_refused_naming_it(what):
    # float(10**400) raised "OverflowError: int too large to convert to float"
    with pytest.raises(ValueError, match=f"compare: {what} must be finite and >= 0, got an "
                                         f"int too large for a float"):
        compare(np.ones(2), np.ones(2), **{"rtol": 0.0, "atol": 0.0, what: 10**400})


def test_torch_complex32_is_compared_and_a_quantized_tensor_is_named():
    # complex32 gave "Got unsupported ScalarType ComplexHalf" from t.numpy(), naming neither
    # compare nor the side
    torch = pytest.importorskip("torch")
    a = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).to(torch.complex32)
    c = compare(a, a.clone())
    assert c.ok and c.out_dtype == "complex32" and (c.rtol, c.atol) == DEFAULT_TOLERANCES["fp16"]
    b = a.clone()
    b[0] = 1 + 2.5j
    c = compare(b, a)
    assert not c.ok and c.worst_index == (0, 1) and c.max_abs_err == 0.5
    q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
    with pytest.raises(TypeError, match=r"compare: ref is a torch tensor of dtype torch.quint8 "
                                        r".*dequantize"):
        compare(torch.ones(3), q)


def test_64_bit_integer_differences_past_2_53_are_exact():
    # max_abs_err was the doubles' 2**60, the worst element chosen by rounded differences
    c = compare(np.array([2**60 + 1, 5]), np.array([0, 5]))
    assert c.max_abs_err == 2**60 + 1 and isinstance(c.max_abs_err, int)
    assert "max abs err       1152921504606846977" in c.report()
    # rounded, both differences read 2**63 and the first was the worst
    c = compare(np.array([2**63 - 2, 2**63 - 1], np.uint64), np.array([0, 0], np.uint64))
    assert c.worst_index == (1,) and c.max_abs_err == 2**63 - 1
    c = compare(np.array([-2**63, 1]), np.array([2**63 - 1, 1]))
    assert c.max_abs_err == 2**64 - 1 and c.n_bad == 1
    c = compare(np.array([-2**63]), np.array([2**64 - 1], np.uint64))
    assert c.max_abs_err == 2**64 - 1 + 2**63


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("ints", [np.int64, np.uint64])
def test_bf16_and_fp8_against_64_bit_integers_compare_values_not_bit_patterns(fmt, ints):
    # at rtol=atol=0 the exact-integer path compared bf16's bit patterns (0x3f80) with 1
    ml = pytest.importorskip("ml_dtypes")
    values = np.array([0, 1, 2, 3, 4, 8, 16], ints)
    low = values.astype(getattr(ml, fmt))
    assert compare(low, values, rtol=0, atol=0).ok
    assert compare(values, low, rtol=0, atol=0).ok
    c = compare(low, values + 1, rtol=0, atol=0)
    assert c.n_bad == values.size and c.max_abs_err == 1.0


def test_an_output_that_was_never_written_is_said_first_without_a_perfect_score():
    # bad elements 100% beside max abs err 0 and cosine sim 1
    c = compare(np.full(8, np.nan), np.arange(8.0))
    assert c.out_all_nan and not c.ok
    text = c.report()
    head = text.splitlines()[0]
    assert "out is NaN in every element" in head and "never written" in head
    assert re.search(r"max abs err +- \(no pair is finite", text)
    assert re.search(r"cosine sim +- \(no pair is finite", text)
    assert not re.search(r"cosine sim +1", text) and not re.search(r"max abs err +0", text)
    assert "never written" in c._repr_html_()


def test_an_output_never_written_through_bench_check_says_so():
    import kbench

    def writes_nothing(out, x):
        return None

    x = np.arange(16.0)
    with pytest.raises(AssertionError, match="out is NaN in every element") as e:
        kbench.bench(writes_nothing, np.empty(16), x, out_arg=0, check=x, warmup_s=0.0,
                     max_time_s=0.05, cold_cache=None)
    assert "cosine sim        1" not in str(e.value)


def test_a_partly_written_or_nan_reference_is_not_called_unwritten():
    ml = pytest.importorskip("ml_dtypes")
    half = np.array([np.nan, 1.0])
    assert not compare(half, np.ones(2)).out_all_nan
    c = compare(np.ones(2), np.full(2, np.nan))
    assert not c.out_all_nan and "never written" not in c.report()
    # read as the C core reads it: bf16 NaN bit patterns
    c = compare(np.full(3, np.nan, ml.bfloat16), np.ones(3))
    assert c.out_all_nan and "never written" in c.report()
    assert "never written" not in compare(np.full(2, np.nan), np.full(2, np.nan),
                                          equal_nan=True).report()
