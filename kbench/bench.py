"""kbench.bench: check correctness, then time a callable with the C core's loop."""
from __future__ import annotations

import functools
import math
import numbers
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _core
from .coldcache import flag_rotation, footprint, make_rotation_sets, normalize_arg_sets
from .result import Result

_LOOP_KEYS = ("warmup_s", "min_samples", "max_samples", "max_time_s", "target", "ci_level",
              "criterion")
_host_timer_cache: Optional[Dict[str, Any]] = None
# One bench at a time per process, its untimed calls (check, memory probe) included: the C
# loop holds its own lock only while timing, and a memory probe overlapping another thread's
# loop would disturb its times and read its allocations (peak RSS is per process).
_bench_lock = threading.RLock()


def _one_at_a_time(f: Callable[..., Result]) -> Callable[..., Result]:
    @functools.wraps(f)
    def serialised(*args: Any, **kwargs: Any) -> Result:
        with _bench_lock:
            return f(*args, **kwargs)
    return serialised


@_one_at_a_time
def bench(fn: Callable[..., Any], *args: Any,
          flops: Optional[float] = None,
          bytes: Optional[float] = None,
          cold_cache: Optional[str] = "flush",
          device: str = "auto",
          mode: Optional[str] = None,
          kwargs: Optional[Dict[str, Any]] = None,
          arg_sets: Any = None,
          rotate_sets: int = 0,
          flush_bytes: Optional[int] = None,
          check: Any = None,
          rtol: Optional[float] = None,
          atol: Optional[float] = None,
          name: Optional[str] = None,
          out_arg: Union[int, str, None] = None,
          warmup_s: Optional[float] = None,
          min_samples: Optional[int] = None,
          max_samples: Optional[int] = None,
          max_time_s: Optional[float] = None,
          target: Optional[float] = None,
          ci_level: Optional[float] = None,
          criterion: Optional[str] = None,
          memory: bool = True,
          profile: Optional[bool] = None,
          group: Any = None,
          dist_timeout_s: Optional[float] = None,
          _ranks: Any = None,
          _pre_sample: Optional[Callable[[], None]] = None,
          **backend_options: Any) -> Result:
    """Benchmark ``fn(*args, **kwargs)``; see the README for every option.

    flops/bytes: the operation's theoretical FLOPs and bytes per call (each input read once,
    each output written once), for GFLOP/s and GB/s. cold_cache: "flush" (write 2x the
    last-level cache before each sample, outside the timed region), "rotate" (cycle through
    argument sets whose footprint exceeds the cache) or None (hot). check: a reference output,
    or a callable computing it from the same arguments; the output must match it (rtol/atol,
    defaults per dtype) before anything is timed. The output is what fn returns, or the
    argument named by out_arg (a position in args, or a keyword of kwargs) for a kernel that
    writes in place and returns None, or kwargs["out"]; it is poisoned (NaN) before the check.
    memory: measure the peak memory of one untimed call (kbench.memory). profile: run once for
    a profiler instead of timing (kbench.profile; None: KBENCH_PROFILE=1, or a GPU case under
    a profiler's CUDA_INJECTION64_PATH). group: time on every rank of a torch ProcessGroup or
    mpi4py communicator ('auto': the initialised one), MAX per sample (kbench.distributed).
    """
    if group is not None:
        given = {k: v for k, v in locals().items()
                 if k not in ("fn", "args", "backend_options", "group", "_ranks", "_pre_sample")}
        from .distributed import bench as dist_bench   # imported only for multi-rank runs
        return dist_bench(fn, *args, group=group, **given, **backend_options)
    t_start = time.perf_counter()
    if not callable(fn):
        raise TypeError(f"kbench.bench: fn must be callable, got {type(fn).__name__} "
                        f"({fn!r:.60})")
    if cold_cache not in ("flush", "rotate", None, "none"):
        raise ValueError(f"kbench.bench: cold_cache must be 'flush', 'rotate' or None, "
                         f"got {cold_cache!r}")
    if cold_cache == "none":
        cold_cache = None
    flops, bytes = _count("flops", flops), _count("bytes", bytes)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"kbench.bench: name must be a str, got {type(name).__name__} "
                        f"({name!r:.60})")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kbench.bench: kwargs must be a dict of keyword arguments for fn, got "
                        f"{type(kwargs).__name__}")
    if flush_bytes is not None and (isinstance(flush_bytes, (bool, np.bool_))
                                    or not isinstance(flush_bytes, numbers.Integral)):
        raise TypeError(f"kbench.bench: flush_bytes must be an int number of bytes, got "
                        f"{type(flush_bytes).__name__} ({flush_bytes!r:.60})")
    if arg_sets is not None and not (callable(arg_sets) or isinstance(arg_sets, (list, tuple))):
        raise TypeError(f"kbench.bench: arg_sets must be a list of argument tuples or a "
                        f"factory f(i) -> tuple, got {type(arg_sets).__name__}")
    kwargs = dict(kwargs or {})
    sets = normalize_arg_sets(arg_sets, rotate_sets) if arg_sets is not None else [tuple(args)]
    if arg_sets is not None and args:
        raise TypeError("kbench.bench: pass either positional args or arg_sets=, not both")
    _named_output(sets[0], kwargs, out_arg)       # a bad out_arg fails before anything runs
    name = name or _name_of(fn)
    dev = _resolve_device(device, sets[0], kwargs)
    # Only what the caller gave crosses to C: the loop's defaults live in the C core alone
    # (_core.LOOP_DEFAULTS), which also validates every value.
    loop = {k: v for k, v in dict(warmup_s=warmup_s, min_samples=min_samples,
                                  max_samples=max_samples, max_time_s=max_time_s, target=target,
                                  ci_level=ci_level, criterion=criterion,
                                  # multi-rank (kbench.distributed): the C loop's reducer and
                                  # the measure functions' barrier before each call
                                  ranks=_ranks, pre_sample=_pre_sample).items()
            if v is not None}

    if dev != "cpu":
        _refuse_capture()
    correctness = None
    if check is not None:
        correctness = _check_before_timing(fn, sets[0], kwargs, check, rtol, atol, name,
                                           out_arg)
    from . import profile as _profile
    why = _profile.wanted(profile, dev)
    if why:
        return _profile.run_once(fn, sets, kwargs, name=name, device=dev, why=why,
                                 cold_cache=cold_cache, flush_bytes=flush_bytes,
                                 warmup_s=loop.get("warmup_s",
                                                   _core.LOOP_DEFAULTS["warmup_s"]),
                                 correctness=correctness,
                                 stream=backend_options.get("stream"))
    mem = None
    if memory:
        from .memory import measure as _measure_memory
        mem = _measure_memory(fn, sets[0], kwargs, dev, called_before=check is not None)

    if dev == "cpu":
        if device == "auto" and _gpu_initialized():
            host_note = ("timed on the CPU with the host clock, although this process uses a "
                         "GPU: a callable that launches GPU work returns before it finishes, so "
                         "pass device='cuda' (or GPU tensors as arguments) to time it there")
        else:
            host_note = None
        if backend_options:
            raise TypeError(f"kbench.bench: unexpected options for the CPU backend: "
                            f"{sorted(backend_options)}")
        if mode not in (None, "host"):
            raise ValueError(f"kbench.bench: mode {mode!r} needs a CUDA device; the CPU "
                             f"backend times with the host clock (mode='host')")
        raw, cold, extra = _run_host(fn, sets, kwargs, cold_cache, flush_bytes, loop)
        device_name, backend, peaks = "cpu", "host", _cpu_peaks()
        if host_note:
            extra.setdefault("warnings", []).append(host_note)
    else:
        # backend="hip" (or a ROCm torch) picks the HIP backend; the GPU modules are imported
        # only when a GPU is asked for
        from . import hip as _hip
        if _hip.selected(backend_options):
            _gpu: Any = _hip
        else:
            from . import cuda as _gpu
        raw, cold, extra, device_name, peaks = _gpu.run(
            fn, sets, kwargs, cold_cache=cold_cache, flush_bytes=flush_bytes, mode=mode,
            device=dev, loop=loop, check=check, rtol=rtol, atol=atol,
            output=_named_output(sets[0], kwargs, out_arg), **backend_options)
        backend = raw["backend"]
        if peaks:       # which measured GPU ceiling "% of peak" is of (peaks_gpu measures them)
            compute = backend_options.get("compute_peak", "fp32")
            peaks = {"bytes_name": "GPU HBM copy" if peaks.get("bytes_ceiling") != "theoretical"
                     else "GPU theoretical memory bandwidth",
                     "flops_name": "GPU bf16 GEMM" if compute == "bf16" else "GPU fp32 FMA",
                     **peaks}

    samples = np.asarray(raw["samples"], dtype=np.float64)
    stats = _core.summarize(samples, raw.get("ci_level", _core.LOOP_DEFAULTS["ci_level"]))
    stop = {k: raw[k] for k in ("stop", "criterion", "target", "achieved", "warmup_iters",
                                "warmup_s", "sampling_s", "min_samples", "max_samples",
                                "max_time_s", "resolution_s", "at_resolution") if k in raw}
    result = Result(name=name, device=device_name, backend=backend, samples=samples,
                    stats=stats, stop=stop, cold_cache=cold, flops=flops, bytes=bytes,
                    correctness=correctness, extra=extra, memory=mem)
    result.throughput = throughput(stats["median"], flops, bytes, peaks)
    result.warnings.extend(_warnings(result))
    result.warnings.extend(extra.pop("warnings", []))
    result.metadata = _metadata(device_name, result, extra)
    from .provenance import collect
    result.metadata["harness"] = collect(fn, sets[0], kwargs)
    # where the time went: r.stop's warmup_s and sampling_s are parts of wall_s, this call's
    stop.update({k: raw[k] for k in ("warmup_stable", "warmup_tol") if k in raw},
                wall_s=time.perf_counter() - t_start)
    return result


def _count(label: str, value: Any) -> Union[int, float, None]:
    """flops=/bytes=: None, or a finite non-negative real (Python or NumPy scalar, not bool),
    as a plain int or float so the Result serialises."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"kbench.bench: {label} must be a number of {label} per call, got "
                        f"{type(value).__name__} ({value!r:.60})")
    plain = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(plain) or plain < 0:
        raise ValueError(f"kbench.bench: {label} must be a non-negative number of {label} per "
                         f"call, got {value!r}")
    return plain


def _name_of(fn: Any) -> str:
    mod = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if qual is None:
        return type(fn).__name__
    return f"{mod}.{qual}" if mod and mod not in ("__main__", "builtins") else qual


def _is_gpu_object(x: Any) -> bool:
    dev = getattr(x, "device", None)
    if dev is not None and getattr(dev, "type", None) == "cuda":        # torch
        return True
    if type(x).__module__.startswith("cupy"):
        return True
    dl = getattr(x, "__dlpack_device__", None)                         # any DLPack producer
    if callable(dl) and not isinstance(x, np.ndarray):
        try:
            return int(dl()[0]) in (2, 3, 13)     # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        except Exception:
            return False
    return False


def _resolve_device(device: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    """'auto': CUDA when an argument lives on a GPU, else the CPU."""
    if device in ("cpu", "host"):
        return "cpu"
    if isinstance(device, str) and (device == "cuda" or device.startswith("cuda:")):
        return device
    if device != "auto":
        raise ValueError(f"kbench.bench: device must be 'auto', 'cpu' or 'cuda[:N]', "
                         f"got {device!r}")
    for a in list(args) + list(kwargs.values()):
        if _is_gpu_object(a):
            idx = getattr(getattr(a, "device", None), "index", None)
            return f"cuda:{idx}" if isinstance(idx, int) else "cuda"
    return "cpu"


def _gpu_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _named_output(args: Tuple[Any, ...], kwargs: Dict[str, Any],
                  out_arg: Union[int, str, None]) -> Any:
    """The argument out_arg names (a position in args or a keyword of kwargs); None if none."""
    if out_arg is None:
        return None
    if isinstance(out_arg, (bool, np.bool_)) or not isinstance(out_arg, (numbers.Integral, str)):
        raise TypeError(f"kbench.bench: out_arg must be a position in args (int) or a keyword "
                        f"name (str), got {type(out_arg).__name__} ({out_arg!r:.60})")
    if isinstance(out_arg, str):
        if out_arg not in kwargs:
            raise ValueError(f"kbench.bench: out_arg={out_arg!r} is not a keyword in kwargs "
                             f"(keywords: {sorted(kwargs)})")
        return kwargs[out_arg]
    if not -len(args) <= out_arg < len(args):
        raise ValueError(f"kbench.bench: out_arg={out_arg} is not a position in the "
                         f"{len(args)} positional argument(s)")
    return args[out_arg]


def _poison(out: Any) -> None:
    """Fill an output with NaN (GPU integers with a pattern) so an output the callable never
    wrote cannot pass the check. NumPy: writeable float arrays; GPU tensors: kbench.cuda's."""
    if isinstance(out, np.ndarray):
        if out.dtype.kind == "f" and out.flags.writeable:
            out.fill(np.nan)
    elif out is not None and _is_gpu_object(out):
        from .cuda import _poison as poison_gpu      # torch/CuPy; imported only for GPU objects
        poison_gpu(out)


def _returned_none(name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> TypeError:
    where = (f"out_arg=<position> (one of 0..{len(args) - 1})" if args else "") + \
        (" or " if args and kwargs else "") + \
        (f"out_arg=<keyword> (one of {sorted(kwargs)})" if kwargs else "")
    how = (f"name the argument that holds the output with {where}" if where else
           "a closure that writes a captured array must return it (e.g. "
           "`def f(): kernel(x); return x`)")
    return TypeError(f"kbench.bench({name}): check= was given but the callable returned None, so "
                     f"there is no output to compare; nothing was timed. If it writes its "
                     f"output in place, {how}.")


def _refuse_capture() -> None:
    """Before any untimed call (check, memory probe): inside someone else's stream capture
    they would be captured too, and a synchronize there invalidates the capture."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and \
            torch.cuda.is_current_stream_capturing():
        raise _core.CaptureError("the current stream is being captured into a CUDA graph: "
                                 "kbench cannot measure inside a capture")


def _check_before_timing(fn, args, kwargs, check, rtol, atol, name,
                         out_arg: Union[int, str, None] = None) -> Dict[str, Any]:
    from .compare import compare
    named = _named_output(args, kwargs, out_arg)
    target = named if out_arg is not None else kwargs.get("out")
    _poison(target)
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        _note(e, f"raised by kbench.bench({name})'s first call, the correctness check; "
                 f"nothing was timed")
        raise
    if out_arg is not None:
        out = named             # the caller said where the output is: not the return value
    elif out is None:
        if "out" not in kwargs:
            raise _returned_none(name, args, kwargs)
        out = kwargs["out"]
    try:
        ref = check(*args) if callable(check) else check
    except Exception as e:
        _note(e, f"raised by kbench.bench({name})'s check= callable (the reference); nothing "
                 f"was timed")
        raise
    cmp = compare(out, ref, rtol=rtol, atol=atol)
    if not cmp.ok:
        raise AssertionError(f"kbench.bench({name}): output does not match the reference; "
                             f"nothing was timed.\n{cmp.report()}")
    return cmp.to_dict()


def _note(e: BaseException, text: str) -> None:
    """Say where a user's exception came from, without replacing it."""
    if hasattr(e, "add_note"):          # Python >= 3.11
        e.add_note(text)


def _run_host(fn, sets, kwargs, cold_cache, flush_bytes, loop):
    llc = int(_core.cpu_cache_info()["llc_bytes"])
    if cold_cache == "rotate" and len(sets) == 1:
        sets = make_rotation_sets(sets[0], llc, margin=2.0)
    raw = _core.measure_host(fn, tuple(sets), kwargs or None, cold=cold_cache,
                             flush_bytes=int(flush_bytes or 0), **loop)
    cold = dict(raw["cold"])
    cold["cache_bytes"] = llc
    cold["cache"] = "CPU last-level cache"
    extra: Dict[str, Any] = {}
    if cold_cache == "rotate":
        cold["footprint_bytes"] = sum(footprint(s) for s in sets)
        cold["set_bytes"] = footprint(sets[0])
        flag_rotation(cold, [footprint(s) for s in sets], llc,
                      extra.setdefault("warnings", []))
    return raw, cold, extra


def _cpu_peaks() -> Optional[Dict[str, float]]:
    """The ceilings `kbench peaks` measured on this machine (cached), in base units."""
    try:
        from .peaks import load_cached_peaks, peaks_cache_path
        d = load_cached_peaks()
    except Exception:          # unreadable cache: throughput without % of peak
        return None
    if not d:
        return None
    bw_name = "copy" if d["copy_GBps"] >= d["triad_GBps"] else "triad"
    isa = (d.get("fma") or {}).get("isa")
    return {"bytes_per_s": d[f"{bw_name}_GBps"] * 1e9, "flops_per_s": d["fma_GFLOPs"] * 1e9,
            "bytes_name": f"CPU STREAM {bw_name}",
            "flops_name": "CPU FMA" + (f" ({isa})" if isa else ""),
            "source": f"kbench peaks (STREAM copy/triad best, FMA loop), {peaks_cache_path()}"}


def throughput(median_s: float, flops: Optional[float], nbytes: Optional[float],
               peaks: Optional[Dict[str, float]]) -> Dict[str, Any]:
    """FLOP/s and B/s from the theoretical counts; % of measured peak; roofline bound."""
    tp: Dict[str, Any] = {}
    if median_s <= 0:
        return tp
    peak_bw = _ceiling(peaks, "bytes_per_s")
    peak_fl = _ceiling(peaks, "flops_per_s")
    if nbytes:
        tp["bytes_per_s"] = nbytes / median_s
        if peak_bw:
            tp["peak_bytes_per_s"] = peak_bw
            tp["bandwidth_pct_peak"] = tp["bytes_per_s"] / peak_bw
            if peaks.get("bytes_name"):
                tp["peak_bytes_name"] = peaks["bytes_name"]
    if flops:
        tp["flops_per_s"] = flops / median_s
        if peak_fl:
            tp["peak_flops_per_s"] = peak_fl
            tp["compute_pct_peak"] = tp["flops_per_s"] / peak_fl
            if peaks.get("flops_name"):
                tp["peak_flops_name"] = peaks["flops_name"]
    if flops and nbytes and peak_bw and peak_fl:
        intensity, ridge = flops / nbytes, peak_fl / peak_bw
        tp["intensity_flop_per_byte"] = intensity
        tp["ridge_flop_per_byte"] = ridge
        tp["bound_by"] = "memory" if intensity < ridge else "compute"
        tp["bound_reason"] = (f"intensity {intensity:.3g} FLOP/B "
                              f"{'<' if intensity < ridge else '>='} ridge {ridge:.3g} FLOP/B")
    elif nbytes and not flops:
        tp["bound_by"] = "memory"
        tp["bound_reason"] = "only bytes given"
    elif flops and not nbytes:
        tp["bound_by"] = "compute"
        tp["bound_reason"] = "only flops given"
    if peaks and peaks.get("source"):
        tp["peaks_source"] = peaks["source"]
    if peak_bw and nbytes:
        tp["bytes_ceiling"] = (peaks or {}).get("bytes_ceiling", "measured")
    return tp


def _ceiling(peaks: Optional[Dict[str, Any]], key: str) -> Optional[float]:
    """A cached ceiling as a finite positive float, else None with one warning: the GPU peaks
    cache is read without validation (kbench.peaks_gpu), and a bad figure must cost the % of
    peak, not the result."""
    value = (peaks or {}).get(key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value > 0:
        return float(value)
    from .peaks import _warn_cache_once
    _warn_cache_once(str(peaks.get("source") or "(unknown source)"),
                     f"{key} is {value!r}, not a finite positive number")
    return None


COMPUTE_CEILING_SLACK = 1.10


def _warnings(r: Result) -> List[str]:
    out = []
    st = r.stop
    if st.get("stop") != "precision":
        ach = st.get("achieved")
        ach_s = f"{100 * ach:.2f}%" if isinstance(ach, float) and math.isfinite(ach) else "n/a"
        out.append(f"stopped by {st.get('stop')} before the {st.get('criterion')} target "
                   f"{100 * st.get('target', 0):.2f}% was met (achieved {ach_s}): the median is "
                   f"less certain than asked")
    tp, mode = r.throughput, r.cold_cache.get("mode")
    pct = tp.get("bandwidth_pct_peak")
    if pct is not None and pct > 1.0:
        ceiling = tp.get("bytes_ceiling", "measured")
        if mode in ("flush", "rotate"):
            out.append(f"DEFECT: cold-cache bandwidth {pct * 100:.0f}% of the {ceiling} memory "
                       f"ceiling: check the byte count, skipped work, or the cold-cache setup")
        else:
            out.append(f"hot cache: {pct * 100:.0f}% of the {ceiling} memory ceiling -- the data "
                       f"is served from cache, not memory")
    cpct = tp.get("compute_pct_peak")
    # The compute ceiling is one reference kernel (FMA chains, a bf16 8192^3 GEMM): another
    # shape can run a few % faster (a burst 4000x4096x11008 GEMM read 101% on the H200), so only
    # what no shape can explain is said.
    if cpct is not None and cpct > COMPUTE_CEILING_SLACK:
        out.append(f"{cpct * 100:.0f}% of the measured compute ceiling: the FLOP count is too "
                   f"high, or the ceiling was measured on a busy machine (re-run kbench peaks)")
    return out


_host_md_cache: Dict[str, Dict[str, Any]] = {}


def _metadata(device_name: str, r: Result, extra: Dict[str, Any]) -> Dict[str, Any]:
    """Host metadata, collected once per process and working directory (it runs git), with a
    fresh timestamp and command line for every result."""
    global _host_timer_cache
    import os
    import time
    cwd = os.getcwd()
    if cwd not in _host_md_cache:
        try:
            from .metadata import collect_host_metadata
            _host_md_cache[cwd] = collect_host_metadata()
        except Exception as e:      # metadata must never lose a measurement
            _host_md_cache[cwd] = {"error": f"{type(e).__name__}: {e}"}
    md = dict(_host_md_cache[cwd])
    md["timestamp_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    md["argv"] = list(sys.argv)
    if _host_timer_cache is None:
        _host_timer_cache = _core.host_timer_info()
    md["host_timer"] = _host_timer_cache
    md["kbench_core_cuda"] = bool(_core.HAVE_CUDA)
    if "device" in extra:
        md["gpu"] = extra.pop("device")
    return md
