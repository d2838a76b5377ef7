"""Correctness checks: compare a kernel's output against a reference.

>>> from kbench.compare import compare, assert_close
>>> c = compare(out, ref)            # tolerances from the lower-precision dtype of the two
>>> c.ok, c.max_abs_err, c.rel_l2, c.worst_index
>>> print(c.report())
>>> assert_close(out, ref, dtype="tf32")   # AssertionError carrying the report

Inputs may be numpy arrays (including ml_dtypes bfloat16 / float8), torch tensors (any device),
CuPy arrays, any object with ``__dlpack__``, or anything ``numpy.asarray`` accepts. torch and
cupy are never imported here: an object is treated as a tensor only when its type comes from
that package. The work is done by ``kbench._core.compare`` in one pass, in double precision;
docs/tolerances.md explains the metrics and where each default tolerance comes from.
"""
from __future__ import annotations

import dataclasses
import html
import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .. import _core

__all__ = ["DEFAULT_TOLERANCES", "Comparison", "compare", "assert_close", "tolerances_for"]

#: (rtol, atol) per dtype; see docs/tolerances.md for the source of each pair.
DEFAULT_TOLERANCES: Dict[str, Tuple[float, float]] = {
    "fp64": (1e-7, 1e-7),
    "fp32": (1.3e-6, 1e-5),
    "tf32": (1e-3, 5e-3),
    "fp16": (1e-3, 1e-5),
    "bf16": (1.6e-2, 1e-5),
    "fp8_e4m3": (0.125, 0.0675),
    "fp8_e5m2": (0.25, 0.125),
    "int": (0.0, 0.0),
}

_NUMPY_NAMES = {
    "float64": "fp64", "float32": "fp32", "float16": "fp16", "bool": "bool",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
}

# ml_dtypes / torch names for the formats the C core decodes from bit patterns:
# name -> (kbench name, kind for _core.compare, numpy view dtype)
_BIT_FORMATS = {
    "bfloat16": ("bf16", "bf16", np.uint16),
    "float8_e4m3fn": ("fp8_e4m3", "fp8_e4m3", np.uint8),
    "float8_e5m2": ("fp8_e5m2", "fp8_e5m2", np.uint8),
}

# Aliases accepted by ``dtype=``.
_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2",
}


# Complex dtypes are compared as (real, imag) pairs at the tolerance of their parts' format.
_COMPLEX_PARTS = {"complex64": "fp32", "complex128": "fp64",
                  "complex32": "fp16", "bcomplex32": "bf16"}    # the last two: ml_dtypes


def _tolerance_key(name: str) -> Optional[str]:
    """The DEFAULT_TOLERANCES key for a kbench dtype name (None when there is none)."""
    if name in DEFAULT_TOLERANCES:
        return name
    if name in _COMPLEX_PARTS:
        return _COMPLEX_PARTS[name]
    if name == "bool" or name.startswith(("int", "uint")):
        return "int"
    if name.startswith("float8_e4m3"):      # fnuz / b11 variants decoded through numpy
        return "fp8_e4m3"
    if name.startswith("float8_e5m2"):
        return "fp8_e5m2"
    return None


def tolerances_for(dtype: Any) -> Tuple[float, float]:
    """(rtol, atol) for a dtype given as a kbench name ("tf32", "bf16", ...), an alias
    ("float32", "bfloat16"), a numpy/ml_dtypes dtype or a torch dtype."""
    name = _dtype_name_of(dtype)
    key = _tolerance_key(_ALIASES.get(name, name))
    if key is None:
        raise ValueError(f"no default tolerances for dtype {dtype!r}; known: "
                         f"{', '.join(DEFAULT_TOLERANCES)} (and integer/bool dtypes)")
    return DEFAULT_TOLERANCES[key]


def _dtype_name_of(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype.lower()
    mod = type(dtype).__module__ or ""
    if mod.startswith("torch"):             # torch.float32 -> "float32"
        return str(dtype).rsplit(".", 1)[-1]
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return str(dtype).lower()
    return _NUMPY_NAMES.get(name, name)


# ------------------------------------------------------------------ input conversion


def _from_numpy(arr: np.ndarray) -> Tuple[np.ndarray, Optional[str], str]:
    """(array for the C core, kind or None, kbench dtype name). Complex arrays come back as
    they are: compare() splits them into (real, imag) parts once the shapes are checked."""
    dt = arr.dtype
    if dt.kind in "biufc" and not dt.isbuiltin:
        # numpy's own types in a non-canonical descriptor: big-endian data becomes its values
        # in native order, and a native one is named as what it is
        canonical = np.dtype(dt.newbyteorder("=").str)
        arr = arr.astype(canonical) if not dt.isnative else arr.view(canonical)
        dt = arr.dtype
    from_ml_dtypes = getattr(dt.type, "__module__", "") == "ml_dtypes"
    if _is_complex(arr):
        return arr, None, dt.name
    if from_ml_dtypes and dt.name in _BIT_FORMATS:
        name, kind, view = _BIT_FORMATS[dt.name]
        return arr.view(view), kind, name
    if dt.name in _NUMPY_NAMES and dt.isbuiltin:
        return arr, None, _NUMPY_NAMES[dt.name]
    if from_ml_dtypes:
        # other ml_dtypes formats (float8 fnuz variants, int4, float4/6 ...): numpy can cast them
        target = np.int8 if dt.name.startswith(("int", "uint")) else np.float64
        return arr.astype(target), None, dt.name
    return arr, None, dt.name               # unsupported dtypes are named by the C core


def _is_complex(arr: np.ndarray) -> bool:
    return arr.dtype.kind == "c" or arr.dtype.name in _COMPLEX_PARTS


def _as_parts(arr: np.ndarray, kind: Optional[str]) -> np.ndarray:
    """A complex array as its (real, imag) parts on a new last axis; a real one with zero
    imaginary parts (a zero bit pattern is +0.0 in every format `kind` names)."""
    if not _is_complex(arr):
        return np.stack([arr, np.zeros_like(arr)], axis=-1)
    if arr.dtype.type not in (np.complex64, np.complex128, np.clongdouble):
        # ml_dtypes complex32/bcomplex32, exact in complex64. Not told apart by kind: since
        # ml_dtypes 0.7 complex32 has kind 'c', and its .real is the whole complex array.
        arr = arr.astype(np.complex64)
    return np.stack([arr.real, arr.imag], axis=-1)


def _from_torch(t: Any) -> Tuple[np.ndarray, Optional[str], str]:
    import torch  # only reached for objects whose type comes from torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg()
    name = str(t.dtype).rsplit(".", 1)[-1]
    if name in _BIT_FORMATS:
        kb_name, kind, view = _BIT_FORMATS[name]
        int_view = torch.int16 if view is np.uint16 else torch.uint8
        return t.view(int_view).numpy().view(view), kind, kb_name
    if t.dtype.is_floating_point and name not in ("float64", "float32", "float16"):
        return t.to(torch.float64).numpy(), None, name     # float8 fnuz etc.
    if t.dtype == getattr(torch, "complex32", None):
        # numpy has no complex32: complex64 holds its fp16 parts exactly; compared at fp16's
        # tolerances, as ml_dtypes' complex32 is
        arr = t.to(torch.complex64).numpy()
        return arr, None, "complex32"
    arr = t.numpy()
    return arr, None, _NUMPY_NAMES.get(arr.dtype.name, arr.dtype.name)


def _to_array(x: Any, what: str) -> Tuple[np.ndarray, Optional[str], str]:
    if isinstance(x, np.ndarray):
        return _from_numpy(x)
    if x is None:       # the usual cause: a kernel that writes in place and returns nothing
        raise TypeError(f"compare: {what} is None; a kernel that writes its output in place "
                        f"returns nothing: pass the array it wrote")
    mod = type(x).__module__ or ""
    if mod.startswith("torch") and hasattr(x, "detach"):
        try:
            return _from_torch(x)
        except TypeError as e:      # quantized: say which side and dtype (a GPU error stays)
            raise TypeError(f"compare: {what} is a torch tensor of dtype {x.dtype} (layout "
                            f"{getattr(x, 'layout', '?')}) that kbench cannot read as numbers "
                            f"({e}); dequantize or convert it (.dequantize(), .to_dense(), "
                            f".float()) first") from e
    if mod.startswith("cupy") and hasattr(x, "get"):
        return _from_numpy(x.get())
    if hasattr(x, "__dlpack__") and not isinstance(x, (np.generic, memoryview, bytes)):
        try:
            arr = np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise TypeError(f"compare: {what} ({type(x).__name__}) could not be read through "
                            f"DLPack ({e}); copy it to host memory first") from e
        return _from_numpy(arr)
    try:
        arr = np.asarray(x)
    except ValueError as e:     # ragged nested lists: numpy's message names neither side
        raise ValueError(f"compare: {what} ({type(x).__name__}) is not a rectangular array of "
                         f"numbers (ragged nested lists?): {e}") from e
    if arr.dtype.kind in "OUSV":    # str, bytes, objects: no numbers to compare
        raise TypeError(f"compare: {what} is not numeric: {type(x).__name__} ({x!r:.60}) reads "
                        f"as a numpy array of dtype {arr.dtype}")
    return _from_numpy(arr)


# ------------------------------------------------------------------ the result


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else str(v)
    return str(v)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`. ``ok`` is True when no element is bad, where bad means
    NOT ``|out - ref| <= atol + rtol * |ref|`` (numpy.isclose). Magnitude metrics cover the
    pairs where both values are finite; see docs/tolerances.md for each field."""

    ok: bool
    n: int                          # elements compared (complex: real and imaginary parts)
    n_bad: int
    frac_bad: float
    max_abs_err: float              # max |out - ref| over finite pairs
    max_rel_err: float              # max |out - ref| / |ref| over finite pairs with ref != 0
    rel_skipped: int                # finite pairs with ref == 0 but out != 0 (not in max_rel_err)
    rel_l2: float                   # ||out - ref|| / ||ref|| (0 if both 0, inf if only ref is 0)
    cosine: float                   # <out, ref> / (||out|| ||ref||); 1 if both 0, 0 if one is
    l2_err: float
    l2_ref: float
    l2_out: float
    nan_mismatch: int               # bad elements with a NaN on either side
    inf_mismatch: int               # bad elements with an infinity (and no NaN)
    n_finite: int                   # pairs where both values are finite
    worst_flat_index: Optional[int]  # C-order index of the worst element in the broadcast shape
    worst_index: Optional[Tuple[int, ...]]
    worst_out: Optional[float]
    worst_ref: Optional[float]
    worst_tol: Optional[float]      # atol + rtol * |ref| at the worst element
    rtol: float
    atol: float
    equal_nan: bool
    out_dtype: str
    ref_dtype: str
    tolerance_source: str           # dtype whose defaults were used, or "explicit"
    shape: Tuple[int, ...]          # compared shape; complex inputs add a last axis of 2 (re, im)
    out_all_nan: bool = False       # every element of out is NaN: most likely never written

    def __repr__(self) -> str:
        status = "ok" if self.ok else "FAILED"
        return (f"Comparison({status}, n_bad={self.n_bad}/{self.n}, "
                f"max_abs_err={_fmt(self.max_abs_err)}, max_rel_err={_fmt(self.max_rel_err)}, "
                f"rel_l2={_fmt(self.rel_l2)}, worst_index={self.worst_index}, "
                f"rtol={self.rtol:g}, atol={self.atol:g})")

    def _rows(self):
        pct = 100.0 * self.frac_bad
        rows = [
            ("bad elements", f"{self.n_bad} of {self.n} ({pct:.4g}%)"),
            ("dtypes", f"out {self.out_dtype}, ref {self.ref_dtype}, shape {self.shape}"),
            ("tolerance", f"rtol={self.rtol:g}, atol={self.atol:g} ({self.tolerance_source})"
                          + (", equal_nan" if self.equal_nan else "")),
        ] + self._magnitude_rows() + [
            ("NaN/Inf mismatch", f"{self.nan_mismatch} NaN, {self.inf_mismatch} Inf"),
        ]
        if self.n_finite != self.n:
            rows.append(("finite pairs", f"{self.n_finite} of {self.n} (norms and max errors "
                                         "use these)"))
        if self.worst_index is not None:
            diff = abs(self.worst_out - self.worst_ref) if (
                math.isfinite(self.worst_out) and math.isfinite(self.worst_ref)) else math.nan
            # any bad element outranks every close one, so the worst is bad exactly when not ok
            verdict = "closest to the limit" if self.ok else "bad"
            rows.append(("worst element",
                         f"index {self.worst_index} (flat {self.worst_flat_index}), {verdict}: "
                         f"out={_fmt(self.worst_out)} ref={_fmt(self.worst_ref)} "
                         f"|out-ref|={_fmt(diff)} allowed={_fmt(self.worst_tol)}"))
        return rows

    def _magnitude_rows(self):
        """The error magnitudes, or a dash where no pair is finite on both sides: their
        0 and 1 would then read as a perfect match beside 100% bad elements."""
        if self.n and not self.n_finite:
            none = "- (no pair is finite on both sides)"
            return [("max abs err", none), ("max rel err", none), ("rel L2 err", none),
                    ("cosine sim", none)]
        return [
            ("max abs err", _fmt(self.max_abs_err)),
            ("max rel err", _fmt(self.max_rel_err)
             + (f" ({self.rel_skipped} elements with ref == 0 skipped)"
                if self.rel_skipped else "")),
            ("rel L2 err", _fmt(self.rel_l2)),
            ("cosine sim", f"{self.cosine:.10g}"),
        ]

    def _head(self) -> str:
        if self.out_all_nan and not self.ok:
            return ("Comparison FAILED: out is NaN in every element: the output was never "
                    "written (kbench.bench fills it with NaN before its check), or the kernel "
                    "wrote only NaN")
        return ("Comparison OK: all elements within |out - ref| <= atol + rtol*|ref|"
                if self.ok else
                "Comparison FAILED: elements outside |out - ref| <= atol + rtol*|ref|")

    def report(self) -> str:
        """Multi-line readable summary: verdict, the metrics, and the worst element."""
        head = self._head()
        rows = self._rows()
        width = max(len(k) for k, _ in rows)
        return "\n".join([head] + [f"  {k:<{width}}  {v}" for k, v in rows])

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.ok else "#cf222e"
        verdict = "OK" if self.ok else "FAILED"
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
                       f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
                       for k, v in self._rows())
        if self.out_all_nan and not self.ok:
            verdict += ": out is NaN in every element (never written?)"
        return (f"<div><b style='color:{color}'>Comparison {verdict}</b>"
                f"<table>{body}</table></div>")

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------ entry points


def compare(out: Any, ref: Any, rtol: Optional[float] = None, atol: Optional[float] = None, *,
            equal_nan: bool = False, dtype: Any = None, broadcast: bool = False) -> Comparison:
    """Compare ``out`` against ``ref`` and return a :class:`Comparison`.

    The shapes must be equal (ValueError naming both otherwise): an output of the wrong shape,
    or a scalar reference, would pass by broadcasting. ``broadcast=True`` compares with numpy
    broadcasting instead. Tolerances not given default to ``DEFAULT_TOLERANCES`` of the
    lower-precision dtype of ``out`` and ``ref`` (elementwise max of their (rtol, atol), as
    torch.testing does), or of ``dtype`` when given -- e.g. ``dtype="tf32"`` for an fp32 output
    computed with TF32. Big-endian arrays are read as their values. Complex arrays (numpy's,
    ml_dtypes' complex32/bcomplex32) are compared part by part: real and imaginary parts each
    against the rule, as a last axis of 2 in ``shape`` and ``worst_index``, at the tolerances
    of the parts' format.
    """
    if not isinstance(equal_nan, (bool, np.bool_)):
        # bool("no") is True: a word or a number here would silently pass NaN against NaN
        raise TypeError(f"compare: equal_nan must be True or False, got "
                        f"{type(equal_nan).__name__} ({equal_nan!r:.60})")
    a, a_kind, a_name = _to_array(out, "out")
    b, b_kind, b_name = _to_array(ref, "ref")
    if a.shape != b.shape and not broadcast:
        raise ValueError(f"compare: out shape {tuple(a.shape)} and ref shape {tuple(b.shape)} "
                         f"differ; shapes must be equal (pass broadcast=True to compare with "
                         f"numpy broadcasting)")
    if _is_complex(a) or _is_complex(b):
        a, b = _as_parts(a, a_kind), _as_parts(b, b_kind)

    if rtol is None or atol is None:
        if dtype is not None:
            source = _ALIASES.get(_dtype_name_of(dtype), _dtype_name_of(dtype))
            d_rtol, d_atol = tolerances_for(dtype)
        else:
            keys = [_tolerance_key(a_name), _tolerance_key(b_name)]
            if None in keys:
                # let the C core name an unsupported dtype (cheaply, on empty arrays) ...
                _core.compare(np.empty(0, a.dtype), np.empty(0, b.dtype), 0.0, 0.0,
                              out_kind=a_kind, ref_kind=b_kind)
                # ... and otherwise ask for tolerances
                bad = a_name if keys[0] is None else b_name
                raise ValueError(f"compare: no default tolerances for dtype {bad}; "
                                 "pass rtol and atol (or dtype=)")
            d_rtol = max(DEFAULT_TOLERANCES[k][0] for k in keys)
            d_atol = max(DEFAULT_TOLERANCES[k][1] for k in keys)
            # the looser of the two names the source
            source = max(keys, key=lambda k: DEFAULT_TOLERANCES[k])
        if rtol is None and atol is None:
            source_text = source
        else:
            source_text = f"{source} defaults with explicit {'rtol' if rtol is not None else 'atol'}"
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    else:
        source_text = "explicit"

    rtol, atol = _tolerance("rtol", rtol), _tolerance("atol", atol)
    r = _core.compare(a, b, rtol, atol, equal_nan=bool(equal_nan),
                      out_kind=a_kind, ref_kind=b_kind)
    # a_kind/b_kind: bf16 or fp8 bit patterns in an integer array, values only once decoded
    if rtol == 0.0 and atol == 0.0 and a_kind is None and b_kind is None and \
            a.dtype.kind in "iu" and b.dtype.kind in "iu" and \
            max(a.dtype.itemsize, b.dtype.itemsize) == 8:
        r = _exact_integers(a, b, r)
    if r["n"] and not r["n_finite"]:
        r["out_all_nan"] = _all_nan(a, a_kind)
    return Comparison(rtol=float(rtol), atol=float(atol), equal_nan=bool(equal_nan),
                      out_dtype=a_name, ref_dtype=b_name, tolerance_source=source_text, **r)


def _all_nan(a: np.ndarray, kind: Optional[str]) -> bool:
    """Whether every element of a is NaN, read as the C core reads it (bf16/fp8 bit patterns
    included): compared with itself, exactly its NaNs mismatch."""
    s = _core.compare(a, a, 0.0, 0.0, out_kind=kind, ref_kind=kind)
    return s["n"] > 0 and s["nan_mismatch"] == s["n"]


def _exact_integers(a: np.ndarray, b: np.ndarray, r: Dict[str, Any]) -> Dict[str, Any]:
    """The C core reads values as doubles, which cannot tell 64-bit integers above 2**53
    apart (2**63-1 vs 2**63-2, hashes, indices) and rounds their differences: at zero
    tolerances, count the elements that differ as integers, and take the worst element and
    max_abs_err (a Python int then) from the exact differences."""
    ne = np.not_equal(a, b)
    n_bad = int(np.count_nonzero(ne))
    if n_bad == 0:                      # equal as integers: equal as doubles too
        return r
    x, y = np.broadcast_arrays(a, b)
    diff = _abs_diff(x[ne], y[ne])
    worst = int(np.argmax(diff))        # the first of the largest, as the C core keeps it
    flat = int(np.flatnonzero(ne)[worst])
    index = tuple(int(i) for i in np.unravel_index(flat, ne.shape))
    return dict(r, ok=False, n_bad=n_bad, frac_bad=n_bad / r["n"], worst_flat_index=flat,
                worst_index=index, worst_out=int(x[index]), worst_ref=int(y[index]),
                worst_tol=0.0, max_abs_err=int(diff[worst]))


def _abs_diff(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|x - y| exactly for two integer arrays: in uint64 when both are signed or both
    unsigned (the difference is below 2**64, and the subtraction wraps to it), else as
    Python ints (int64 against uint64 can differ by up to 2**64 + 2**63)."""
    if (x.dtype.kind == "i") != (y.dtype.kind == "i"):
        return np.abs(x.astype(object) - y.astype(object))
    wide = np.int64 if x.dtype.kind == "i" else np.uint64
    x, y = x.astype(wide), y.astype(wide)
    xu, yu = x.astype(np.uint64), y.astype(np.uint64)
    return np.where(x >= y, xu - yu, yu - xu)


def _tolerance(what: str, v: Any) -> float:
    """A tolerance as a float: a real number, not a str, a bool or a sequence (float() would
    take "1e-3" and True silently, and fail on a list without naming the tolerance)."""
    import numbers
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"compare: {what} must be a real number, got {type(v).__name__} "
                        f"({v!r:.60})")
    try:
        return float(v)
    except OverflowError:       # an int past float's range: name the tolerance, as others do
        raise ValueError(f"compare: {what} must be finite and >= 0, got an int too large for "
                         f"a float ({str(v)[:20]}..., {len(str(v))} digits)") from None


def assert_close(out: Any, ref: Any, rtol: Optional[float] = None,
                 atol: Optional[float] = None, *, equal_nan: bool = False, dtype: Any = None,
                 broadcast: bool = False, msg: Optional[str] = None) -> Comparison:
    """:func:`compare`, raising AssertionError with the report when any element is bad.
    Returns the Comparison when all are close."""
    c = compare(out, ref, rtol, atol, equal_nan=equal_nan, dtype=dtype, broadcast=broadcast)
    if not c.ok:
        text = c.report()
        raise AssertionError(f"{msg}\n{text}" if msg else text)
    return c
