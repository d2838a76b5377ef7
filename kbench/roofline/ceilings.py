"""Which compute ceiling a figure is held against: the precision names, the rule that reads it
from the dtypes a callable computes on, and the ceiling's words in a result.

A GPU has a ceiling per precision -- fp32 on the FMA units, bf16 on the tensor cores at 15x that
-- so "% of peak" means something only against the ceiling of the precision the kernel computes
in: an f16 matmul held against fp32 FMA read 946% of its ceiling. kbench.bench picks it as
follows, unless compute_peak= names one (GPU benches):

  - The arrays the callable reads: its arguments, what it carries (a closure's cells, a
    partial's arguments, a bound method's object, the globals its code names:
kbench.measure.prepare's
    walk, which also chooses the device) and a module's parameters. The output (out_arg=, or
    an out= keyword) is not an input.
  - 2-D or larger inputs can feed a GEMM: the narrowest of their precisions is the ceiling --
    bf16 -> the bf16 GEMM, fp16 -> fp16, fp8 (e4m3 or e5m2: the scales beside them are 0-/1-D)
    -> fp8, int8 -> int8, fp64 -> the DGEMM (fp64 tensor cores where the GPU has them).
  - fp32 inputs: the fp32 FMA ceiling, unless torch lets fp32 matmuls run as TF32
    (torch.backends.cuda.matmul.allow_tf32, or set_float32_matmul_precision('high'/'medium');
    CuPy: CUPY_TF32=1): then the tf32 ceiling, which such a GEMM can reach. Not tf32 by default,
    because torch's default is off and an fp32 GEMM then runs on the FMA units: against tf32 it
    would read 13% of peak when at its best. A kernel that uses TF32 itself (Triton's tl.dot
    does by default) passes compute_peak='tf32'; the warning above its ceiling says so.
  - No 2-D input: elementwise work, held against the FMA ceiling of the output's precision
    (fp64, else fp32: fp16 and bf16 arithmetic outside the tensor cores is no faster than fp32
    on most GPUs).
  - Nothing readable: fp32 FMA, the ceiling kbench always used.

The CPU has its float64/float32 FMA ceilings, chosen as numpy promotes (any float64 array ->
float64), and bf16/fp16 ones only where the CPU has native instructions for them (avx512_bf16,
amx_bf16, avx512_fp16, amx_fp16) and `kbench peaks` measured them; without them a bf16 call is
computed in float32, and held against the float32 FMA ceiling, which the result says.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from ..report._format import fmt_pct, fmt_rate
from ..measure.prepare import _carried, held

#: Every ceiling compute_peak= accepts, in the order tables show them.
PRECISIONS = ("fp64", "fp64_tc", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8",
              "fp4")
#: Other names accepted for one of PRECISIONS.
ALIASES = {"fp8": "fp8_e4m3"}
#: What each ceiling is, in words.
LABELS = {"fp64": "fp64 FMA", "fp64_tc": "fp64 GEMM (DGEMM, tensor cores where present)",
          "fp32": "fp32 FMA", "tf32": "tf32 GEMM", "fp16": "fp16 GEMM", "bf16": "bf16 GEMM",
          "fp8_e4m3": "fp8 e4m3 GEMM", "fp8_e5m2": "fp8 e5m2 GEMM", "int8": "int8 GEMM",
          "fp4": "fp4 GEMM"}
#: Bits per element, to find the narrowest input.
BITS = {"fp4": 4, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "fp16": 16, "bf16": 16, "fp32": 32,
        "fp64": 64}
#: A ceiling the GPU lacks, and the one its work then runs at.
FALLBACK = {"fp64_tc": "fp64", "tf32": "fp32"}


def accepted_text() -> str:
    return ", ".join(repr(p) for p in PRECISIONS) + " ('fp8' means 'fp8_e4m3')"


def check_compute_peak(compute_peak: Any) -> Optional[str]:
    """compute_peak= as a name of PRECISIONS (an alias resolved), or None (follow the
    arguments); ValueError naming every accepted name otherwise."""
    if compute_peak is None:
        return None
    name = ALIASES.get(compute_peak, compute_peak) if isinstance(compute_peak, str) else None
    if name not in PRECISIONS:
        raise ValueError(f"compute_peak must be one of {accepted_text()}, or None to follow the "
                         f"dtypes the callable computes on; got {compute_peak!r}")
    return name


# ------------------------------------------------------------------ dtypes

def precision_of(dtype: Any) -> Optional[str]:
    """The precision of a NumPy, ml_dtypes, CuPy or torch dtype (by its name), None for one that
    feeds no ceiling (bool, wider integers, fp8 e8m0 scales, fp6)."""
    if dtype is None:
        return None
    name = str(getattr(dtype, "name", None) or dtype).lower()
    name = name.rsplit(".", 1)[-1].strip("<>'\" ")          # torch.float16, <class '...'>
    if name.startswith("float8_e4m3"):
        return "fp8_e4m3"
    if name.startswith("float8_e5m2"):
        return "fp8_e5m2"
    if name.startswith("float4"):
        return "fp4"
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
            "float": "fp32", "complex64": "fp32", "float64": "fp64", "double": "fp64",
            "complex128": "fp64", "longdouble": "fp64", "float128": "fp64", "int8": "int8",
            "qint8": "int8"}.get(name)


def _ndim(x: Any) -> int:
    shape = getattr(x, "shape", None)
    try:
        return len(shape) if shape is not None else 0
    except TypeError:
        return 0


def arrays_read(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                output: Any = None) -> List[Dict[str, Any]]:
    """[{"what", "precision", "ndim", "output"}] for each array or tensor the callable reads
    whose dtype has a precision: its arguments, what it carries (kbench.measure.prepare's walk: the
    one that chooses the device) and the parameters of a module among them. Read only."""
    seen, out = set(), []
    outputs = {id(o) for o in ([output] if output is not None else []) +
               ([kwargs["out"]] if kwargs.get("out") is not None else [])}

    def visit(label: str, value: Any) -> None:
        for obj in held(value, parameters=None):
            if id(obj) in seen or getattr(obj, "dtype", None) is None:
                continue
            seen.add(id(obj))
            prec = precision_of(obj.dtype)
            if prec is not None:
                out.append({"what": label if obj is value else f"{label} (held)",
                            "precision": prec, "ndim": _ndim(obj),
                            "output": id(obj) in outputs})

    for i, a in enumerate(args):
        visit(f"argument {i}", a)
    for k, v in kwargs.items():
        visit(f"keyword {k!r}", v)
    if fn is not None:
        try:
            for label, value in _carried(fn):
                visit(label, value)
        except Exception:               # an exotic callable: what it carries is unreadable
            pass
    return out


def _names(found: List[Dict[str, Any]]) -> str:
    shown = ", ".join(f["what"] for f in found[:3])
    return shown + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def _tf32_allowed(found: List[Dict[str, Any]], fn: Any, args: Tuple[Any, ...]) -> Optional[str]:
    """Why fp32 GEMMs may run as TF32 here (torch's or CuPy's setting), or None."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            precision = torch.get_float32_matmul_precision()
            if torch.backends.cuda.matmul.allow_tf32 or precision != "highest":
                return (f"torch lets fp32 matmuls run as TF32 (allow_tf32="
                        f"{torch.backends.cuda.matmul.allow_tf32}, float32 matmul precision "
                        f"{precision!r})")
        except Exception:               # noqa: BLE001 -- an old or odd torch: not allowed
            pass
    if os.environ.get("CUPY_TF32") == "1" and "cupy" in sys.modules:
        return "CUPY_TF32=1 lets CuPy's fp32 GEMMs run as TF32"
    return None


def infer_compute_peak(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                       output: Any = None) -> Dict[str, str]:
    """{"name", "why"}: the GPU ceiling the dtypes the callable reads point to (the rule in
    this module's docstring)."""
    found = arrays_read(fn, args, kwargs, output)
    inputs = [f for f in found if not f["output"]]
    gemm = [f for f in inputs if f["ndim"] >= 2]
    if gemm:
        narrow = min(gemm, key=lambda f: BITS[f["precision"]])     # the first of the narrowest
        prec = narrow["precision"]
        feeding = [f for f in gemm if f["precision"] == prec]
        others = sorted({f["precision"] for f in gemm} - {prec}, key=BITS.get)
        why = (f"inferred from {prec} inputs that can feed a GEMM ({_names(feeding)}, "
               f"{feeding[0]['ndim']}-D)")
        if others:
            why += f"; the narrowest beside {', '.join(others)} ones"
        if prec == "fp32":
            tf32 = _tf32_allowed(gemm, fn, args)
            if tf32:
                return {"name": "tf32", "why": f"{why}; {tf32}"}
            return {"name": "fp32", "why": f"{why}; TF32 is off (torch's default), so fp32 "
                                           f"GEMMs run on the FMA units (a kernel that uses "
                                           f"TF32 itself: compute_peak='tf32')"}
        if prec == "fp64":
            return {"name": "fp64_tc", "why": why}
        return {"name": prec, "why": why}
    if found:
        outs = [f for f in found if f["output"]]
        basis = outs or inputs
        wide = max(basis, key=lambda f: BITS[f["precision"]])["precision"]
        name = "fp64" if wide == "fp64" else "fp32"
        whose = "the output's" if outs else "the widest input's"
        return {"name": name, "why": f"no 2-D input to feed a GEMM (elementwise work): the FMA "
                                     f"ceiling of {whose} precision, {wide} ({_names(basis)})"}
    return {"name": "fp32", "why": "no array with a floating or int8 dtype among the arguments "
                                   "or what the callable carries: the fp32 FMA ceiling"}


def choose_compute_peak(compute_peak: Any, fn: Any, args: Tuple[Any, ...],
                        kwargs: Dict[str, Any], output: Any = None) -> Dict[str, Any]:
    """{"name", "why", "given"}: compute_peak= where given, else infer_compute_peak's."""
    name = check_compute_peak(compute_peak)
    if name is not None:
        return {"name": name, "why": "compute_peak= given", "given": True}
    return dict(infer_compute_peak(fn, args, kwargs, output), given=False)


# ------------------------------------------------------------------ GPU ceilings

NO_RECORD = "no `kbench peaks` cached for this GPU"


def _measured(record: Optional[Dict[str, Any]], name: str,
              no_record: str = NO_RECORD) -> Tuple[Optional[float], str]:
    """(FLOP/s `kbench peaks` cached for `name`, why none) from a GPU peaks record."""
    if not record:
        return None, no_record
    value = record.get(f"{name}_flops_per_s")
    if value:
        return value, ""
    absent = (record.get("absent") or {}).get(name)
    if absent:
        return None, f"`kbench peaks` has no {name} ceiling: {absent}"
    return None, (f"the cached `kbench peaks` ({record.get('schema')}) has no {name} ceiling: "
                  f"re-run `kbench peaks` to measure every precision")


def gpu_ceiling(info: Dict[str, Any], choice: Dict[str, Any],
                record: Optional[Dict[str, Any]], theoretical_bw: Optional[float],
                no_record: str = NO_RECORD) -> Optional[Dict[str, Any]]:
    """The ceilings a GPU figure is held against: the cached `kbench peaks` record's (bandwidth
    and the FLOP rate of choice["name"]), the datasheet's beside them, and the choice as used
    (an inferred fp64_tc or tf32 the GPU lacks falls back to fp64 or fp32: FALLBACK)."""
    from . import datasheet
    sheet = datasheet.lookup(info.get("name"))
    choice = dict(choice)
    name = choice["name"]
    flops, missing = _measured(record, name, no_record)
    sheet_flops = (sheet or {}).get("flops", {}).get(name)
    if flops is None and sheet_flops is None and name in FALLBACK and not choice.get("given"):
        lower = FALLBACK[name]
        choice.update(name=lower, why=f"{choice['why']}; this GPU has no {name} ceiling "
                                      f"({missing}, none on its datasheet): {lower}")
        name = lower
        flops, missing = _measured(record, name, no_record)
        sheet_flops = (sheet or {}).get("flops", {}).get(name)
    if flops is None:
        choice["missing"] = missing
    ds: Dict[str, Any]
    if sheet is None:
        ds = {"missing": datasheet.missing_text(info.get("name"))}
    else:
        ds = {"name": sheet["name"], "flops_per_s": sheet_flops,
              "bytes_per_s": sheet["bytes_per_s"], "source": sheet["source"]}
        if sheet_flops is None:
            ds["flops_missing"] = f"the {sheet['name']} datasheet gives no {name} figure"
    out: Dict[str, Any] = {"flops_per_s": flops, "flops_name": f"GPU {LABELS[name]}",
                           "compute_peak": choice, "datasheet": ds}
    if record:
        out.update(bytes_per_s=record.get("hbm_bytes_per_s"), bytes_ceiling="measured",
                   source=f"{record.get('source')}, compute peak {name}")
    elif theoretical_bw is not None:
        out.update(bytes_per_s=theoretical_bw, bytes_ceiling="theoretical",
                   source="theoretical memory bandwidth (memory clock x bus width); no measured "
                          "ceiling cached: run `kbench peaks`")
    else:
        out.update(bytes_per_s=None, source=None)
    return out


def hip_ceilings(info: Dict[str, Any], fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 output: Any, extra: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A HIP bench's ceilings: none measured (`kbench peaks` measures CUDA GPUs), the datasheet's
    for the precision the callable's dtypes point to; the choice goes to extra["compute_peak"]."""
    choice = dict(infer_compute_peak(fn, args, kwargs, output), given=False)
    peaks = gpu_ceiling(info, choice, None, None,
                        no_record="`kbench peaks` measures no ceilings on HIP GPUs")
    extra["compute_peak"] = peaks["compute_peak"]
    return peaks


def add_datasheet(tp: Dict[str, Any], peaks: Optional[Dict[str, Any]]) -> None:
    """The figure's share of the datasheet's ceilings, beside the measured ones (GPU results):
    datasheet_flops_per_s / compute_pct_datasheet, datasheet_bytes_per_s /
    bandwidth_pct_datasheet, datasheet (the table's name and source) or datasheet_missing."""
    ds = (peaks or {}).get("datasheet")
    if not ds:
        return
    if ds.get("missing"):
        tp["datasheet_missing"] = ds["missing"]
        return
    tp["datasheet"] = {"name": ds["name"], "source": ds["source"]}
    if tp.get("flops_per_s") and ds.get("flops_per_s"):
        tp["datasheet_flops_per_s"] = ds["flops_per_s"]
        tp["compute_pct_datasheet"] = tp["flops_per_s"] / ds["flops_per_s"]
    if tp.get("bytes_per_s") and ds.get("bytes_per_s"):
        tp["datasheet_bytes_per_s"] = ds["bytes_per_s"]
        tp["bandwidth_pct_datasheet"] = tp["bytes_per_s"] / ds["bytes_per_s"]


# ------------------------------------------------------------------ CPU ceilings

def cpu_compute_peak(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                     output: Any = None) -> Dict[str, Any]:
    """{"name", "why", "fma_dtype"}: the CPU ceiling for what the callable reads. fma_dtype is
    the FMA ceiling to start from ('float64' or 'float32', as numpy promotes); name is 'bf16' or
    'fp16' where every floating array is that precision (a native ceiling replaces the FMA one
    where `kbench peaks` measured it: cpu_native_peaks), else the FMA dtype's."""
    found = arrays_read(fn, args, kwargs, output)
    precs = {f["precision"] for f in found}
    if "fp64" in precs:
        return {"name": "fp64", "fma_dtype": "float64",
                "why": f"float64 arrays ({_names([f for f in found if f['precision'] == 'fp64'])})"
                       f": numpy computes in float64"}
    floats = precs & {"fp32", "bf16", "fp16"}
    if floats in ({"bf16"}, {"fp16"}):
        (low,) = floats
        return {"name": low, "fma_dtype": "float32",
                "why": f"inferred from {low} arrays ({_names(found)})"}
    f32 = [f for f in found if f["precision"] == "fp32"]
    why = (f"float32 arrays ({_names(f32)})" if f32 else
           "no float64 array: the float32 FMA ceiling (the higher one)")
    return {"name": "fp32", "fma_dtype": "float32", "why": why}


def cpu_native_peaks(choice: Dict[str, Any], peaks: Optional[Dict[str, Any]],
                     record: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The CPU ceilings for choice (cpu_compute_peak's): `peaks` (the FMA ones) with the FLOP
    rate a bf16 or fp16 choice runs at -- the native ceiling `kbench peaks` measured, else the
    float32 FMA one, the choice saying why."""
    from .peaks import CPU_NATIVE_FLAGS, cpu_native   # lazily: `import kbench` stays light
    name = choice["name"]
    if name not in CPU_NATIVE_FLAGS:
        return peaks
    native = ((record or {}).get("native") or {}).get(name) or {}
    if native.get("best_GFLOPs") and peaks:
        choice["why"] += f"; the CPU's native {name} ceiling ({native.get('method')})"
        return dict(peaks, flops_per_s=native["best_GFLOPs"] * 1e9,
                    flops_name=f"CPU {name} GEMM ({', '.join(native.get('flags') or [])})")
    flags = cpu_native().get(name)
    if native.get("absent"):
        reason = native["absent"]
    elif flags:
        reason = (f"the CPU has {', '.join(flags)} but the cached `kbench peaks` has no {name} "
                  f"ceiling: re-run `kbench peaks`")
    else:
        reason = (f"this CPU has no native {name} instructions "
                  f"({' or '.join(CPU_NATIVE_FLAGS[name])}): {name} math is converted to float32")
    choice["why"] += f"; no {name} ceiling ({reason}): the float32 FMA ceiling"
    choice["name"] = "fp32"
    return peaks


# ------------------------------------------------------------------ words

def ceiling_text(choice: Optional[Dict[str, Any]], tp: Dict[str, Any]) -> str:
    """The result's Ceiling row: with a FLOP count, which compute ceiling, why, and the figure's
    share of the measured and the datasheet ceilings; with a byte count, its share of the
    datasheet's bandwidth ('' where there is nothing to say)."""
    parts = []
    if choice and tp.get("flops_per_s"):
        parts.append(f"{LABELS.get(choice.get('name'), choice.get('name'))} "
                     f"({choice.get('why')})")
        if tp.get("compute_pct_peak") is None and choice.get("missing"):  # else: Throughput
            parts.append(f"no measured ceiling: {choice['missing']}")
        if tp.get("compute_pct_datasheet") is not None:
            parts.append(f"{fmt_pct(tp['compute_pct_datasheet'])} of the "
                         f"{tp['datasheet']['name']} datasheet's "
                         f"{fmt_rate(tp['datasheet_flops_per_s'], 'FLOP')} (dense)")
    if tp.get("bandwidth_pct_datasheet") is not None:
        parts.append(f"memory: {fmt_pct(tp['bandwidth_pct_datasheet'])} of the "
                     f"{tp['datasheet']['name']} datasheet's "
                     f"{fmt_rate(tp['datasheet_bytes_per_s'], 'B')}")
    if parts and tp.get("datasheet_missing"):
        parts.append(tp["datasheet_missing"])
    return "; ".join(parts)


def ceiling_warnings(r: Any, slack: float) -> List[str]:
    """A figure above its compute ceiling (by more than `slack`, what another shape can gain):
    the warning names the ceiling used, why it was chosen and how to pick another."""
    tp, choice = r.throughput, r.extra.get("compute_peak") or {}
    used = LABELS.get(choice.get("name"), tp.get("peak_flops_name") or "compute")
    why = f", {choice['why']}" if choice.get("why") else ""
    gpu = r.backend not in ("host",)
    how = (f"compute_peak= picks another: {', '.join(PRECISIONS)}" if gpu else
           "the CPU's ceiling follows the dtypes of the arrays the callable reads")
    out = []
    pct = tp.get("compute_pct_peak")
    if pct is not None and pct > slack:
        out.append(f"{pct * 100:.0f}% of the measured compute ceiling, {used} "
                   f"({fmt_rate(tp.get('peak_flops_per_s'), 'FLOP')}{why}): the kernel computes "
                   f"in another precision than this ceiling's ({how}), the FLOP count is too "
                   f"high, or the ceiling was measured on a busy machine (re-run kbench peaks)")
    ds = tp.get("compute_pct_datasheet")
    if pct is None and ds is not None and ds > slack:
        out.append(f"{ds * 100:.0f}% of the {tp['datasheet']['name']} datasheet's {used} "
                   f"ceiling ({fmt_rate(tp.get('datasheet_flops_per_s'), 'FLOP')}{why}): the "
                   f"kernel computes in another precision than this ceiling's ({how}), or the "
                   f"FLOP count is too high")
    return out


def cpu_ceilings(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any,
                 fma_peaks: Any, extra: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A CPU bench's ceilings: the FMA ones `fma_peaks(dtype)` reads from the cache
    (kbench.measure.local's _cpu_peaks) for the precision the callable computes in, a bf16 or fp16
    native ceiling in their place where measured; the choice is recorded as
    extra["compute_peak"]."""
    choice = cpu_compute_peak(fn, args, kwargs, output)
    peaks = fma_peaks(choice.pop("fma_dtype"))
    record = None
    if choice["name"] in ("bf16", "fp16"):      # a native ceiling, where measured
        try:
            from .peaks import load_cached_peaks
            record = load_cached_peaks()
        except Exception:               # noqa: BLE001 -- unreadable: as if none
            record = None
    peaks = cpu_native_peaks(choice, peaks, record)
    choice["given"] = False
    extra["compute_peak"] = choice
    return peaks
