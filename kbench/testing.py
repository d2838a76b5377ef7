"""Drop-in replacements for the timing helpers GPU kernel projects already call.

    from kbench.testing import do_bench                    # was: from triton.testing import do_bench
    from kbench.testing import bench_gpu_time_with_cupti   # was: from flashinfer.testing import ...

Same signatures and return conventions (milliseconds) as triton.testing.do_bench /
do_bench_cudagraph and flashinfer.testing.bench_gpu_time_with_cupti; the measurement underneath
is kbench.bench. docs/dropin.md lists every difference. In short: L2 is flushed before each
sample like do_bench does (outside the timed region); sampling stops by kbench's precision rule
(0.5% CI half-width of the median) or the time budget, not at a fixed count -- unless a count is
asked for (FlashInfer's repeat_iters); with no CUDA device the same calls time on the CPU with
the host clock, so code and tests using them run on CPU-only machines.

Each function also takes keyword-only kbench options after its own parameters (e.g.
``cold_cache=None``, ``target=0.01``, ``min_samples=``) and ``return_result=True`` to get the
kbench.Result instead of the legacy return value.
"""
from __future__ import annotations

import functools
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

_RETURN_MODES = ("min", "max", "mean", "median", "all")


def _current_device() -> str:
    """'cuda:<torch's current device>' when torch is imported and sees a GPU; without torch,
    'cuda:0' when the CUDA driver reports a device; else 'cpu'. Never imports torch."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return f"cuda:{torch.cuda.current_device()}"
        except Exception:               # a broken CUDA install times on the CPU
            pass
        return "cpu"
    return "cuda:0" if cuda_device_status()[0] else "cpu"


def cuda_device_status() -> Tuple[bool, str]:
    """(a CUDA device is present, how we know). Never imports torch: asks it only if the
    process already imported it; else kbench's core (which loads the CUDA driver library and
    nothing else -- not CUPTI, which torch may want to load its own copy of later); else, in a
    kbench built without the CUDA backend, the driver library directly."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception as e:                       # a broken CUDA setup is "no device"
            return False, f"torch.cuda raised {type(e).__name__}: {e}"
        return (True, f"{n} CUDA device(s) (torch)") if n else \
            (False, "torch.cuda.is_available() is False")
    from . import _core
    count_fn = getattr(_core, "cuda_device_count", None)
    if _core.HAVE_CUDA and count_fn is not None:
        try:
            n = int(count_fn())
        except _core.KbenchError as e:
            return False, f"CUDA driver unusable: {e}"
        return (True, f"{n} CUDA device(s) (driver)") if n else \
            (False, "the CUDA driver reports no devices")
    return _probe_driver()


@functools.lru_cache(maxsize=1)
def _probe_driver() -> Tuple[bool, str]:
    import ctypes
    lib = None
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return False, "no CUDA driver (libcuda.so.1 not found)"
    rc = lib.cuInit(0)
    if rc != 0:
        return False, f"cuInit failed with CUDA error {rc} (no usable GPU or driver)"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return False, f"cuDeviceGetCount failed with CUDA error {rc}"
    if count.value == 0:
        return False, "the CUDA driver reports no devices"
    return True, f"{count.value} CUDA device(s) (driver)"


def _grad_reset(fn: Callable[[], Any], grad_to_none: Optional[Sequence[Any]]):
    if not grad_to_none:
        return fn
    tensors = list(grad_to_none)

    def call():
        for x in tensors:
            x.grad = None
        return fn()
    call.__name__ = getattr(fn, "__name__", "fn")
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.__module__ = getattr(fn, "__module__", None)
    return call


def _summarize(times_ms: np.ndarray, quantiles: Optional[Sequence[float]],
               return_mode: str) -> Union[float, List[float]]:
    """triton's conventions: quantiles -> list (a single quantile -> float); 'all' -> list;
    otherwise the statistic as a float. 'median' is the lower median, as torch.median. No
    times (a profile run, KBENCH_PROFILE=1: one untimed call) read NaN in the same shape, so a
    script runs unchanged under the profiler."""
    if times_ms.size == 0:
        nan = float("nan")
        if quantiles is not None:
            n = np.asarray(quantiles).size
            return nan if n == 1 else [nan] * n
        return [] if return_mode == "all" else nan
    if quantiles is not None:
        q = np.quantile(times_ms, np.asarray(quantiles, dtype=np.float64)).tolist()
        q = q if isinstance(q, list) else [q]
        return q[0] if len(q) == 1 else q
    if return_mode == "all":
        return times_ms.tolist()
    if return_mode == "median":
        return float(np.sort(times_ms)[(len(times_ms) - 1) // 2])
    return float(getattr(np, return_mode)(times_ms))


def _check_return_mode(return_mode: str, quantiles: Any) -> None:
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {list(_RETURN_MODES)}, got "
                         f"{return_mode!r}")
    if quantiles is not None:
        try:
            q = np.asarray(quantiles, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"quantiles must be a list of numbers in [0, 1], got "
                             f"{quantiles!r}") from None
        if q.ndim > 1 or q.size == 0 or np.any((q < 0) | (q > 1)) or np.any(np.isnan(q)):
            raise ValueError(f"quantiles must be a list of numbers in [0, 1], got {quantiles!r}")


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
             grad_to_none: Optional[Sequence[Any]] = None,
             quantiles: Optional[Sequence[float]] = None, return_mode: str = "mean",
             *, return_result: bool = False, **bench_options: Any):
    """triton.testing.do_bench on kbench: time ``fn()`` and return milliseconds.

    warmup: warm-up time (ms). rep: time budget for sampling (ms); sampling stops earlier when
    the median is precise to kbench's target. quantiles: return these quantiles of the per-call
    times (a list; a single quantile gives a float). return_mode: "min" | "max" | "mean" |
    "median" | "all" (the list of per-call times). Cold L2 (kbench's flush) before every sample.
    """
    _check_return_mode(return_mode, quantiles)
    device = bench_options.pop("device", None) or _current_device()
    return _run(fn, device, warmup_ms=warmup, rep_ms=rep, grad_to_none=grad_to_none,
                quantiles=quantiles, return_mode=return_mode, return_result=return_result,
                mode=None, defaults={"cold_cache": "flush"}, options=bench_options)


def do_bench_cudagraph(fn: Callable[[], Any], rep: float = 20,
                       grad_to_none: Optional[Sequence[Any]] = None,
                       quantiles: Optional[Sequence[float]] = None, return_mode: str = "mean",
                       *, return_result: bool = False, **bench_options: Any):
    """triton.testing.do_bench_cudagraph on kbench: ``fn()`` captured in a CUDA graph and
    replayed (kbench mode="graph"); milliseconds per call. Like triton's, no L2 flush between
    calls (hot cache) unless ``cold_cache=`` is given. Without a GPU it times ``fn()`` on the
    CPU with the host clock."""
    _check_return_mode(return_mode, quantiles)
    device = bench_options.pop("device", None) or _current_device()
    # triton warms up with a handful of calls; do_bench's 25 ms default is the closest match
    return _run(fn, device, warmup_ms=25, rep_ms=rep, grad_to_none=grad_to_none,
                quantiles=quantiles, return_mode=return_mode, return_result=return_result,
                mode="graph", defaults={"cold_cache": None}, options=bench_options)


def _run(fn, device, *, warmup_ms, rep_ms, grad_to_none, quantiles, return_mode,
         return_result, mode, defaults, options):
    from .bench import bench
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    for label, v in (("warmup", warmup_ms), ("rep", rep_ms)):
        if v is not None and (not isinstance(v, (int, float)) or not v > 0):
            raise ValueError(f"{label} must be a positive number of milliseconds, got {v!r}")
    opts: Dict[str, Any] = dict(defaults)
    if warmup_ms is not None:
        opts["warmup_s"] = warmup_ms / 1e3
    opts["max_time_s"] = rep_ms / 1e3
    opts.update(options)
    if device != "cpu" and mode is not None:
        opts.setdefault("mode", mode)
    r = bench(_grad_reset(fn, grad_to_none), device=device, **opts)
    if return_result:
        return r
    return _summarize(np.asarray(r.samples, dtype=np.float64) * 1e3, quantiles, return_mode)


def bench_gpu_time_with_cupti(fn: Callable[..., Any], dry_run_iters: Optional[int] = None,
                              repeat_iters: Optional[int] = None, dry_run_time_ms: int = 25,
                              repeat_time_ms: int = 100, l2_flush: Optional[bool] = None,
                              l2_flush_size_mb: Optional[int] = None,
                              l2_flush_device: Optional[str] = None,
                              sleep_after_run: bool = False, use_cuda_graph: bool = False,
                              input_args: Tuple = (), input_kwargs: Optional[dict] = None,
                              cold_l2_cache: bool = True, *, return_result: bool = False,
                              **bench_options: Any) -> List[float]:
    """flashinfer.testing.bench_gpu_time_with_cupti on kbench: per-iteration GPU kernel times
    in milliseconds (a list), from kbench's CUPTI activity timing (mode="cupti"; with
    use_cuda_graph=True kbench's graph mode).

    repeat_iters given: exactly that many timed iterations. Otherwise sampling runs until the
    median is precise to kbench's target or repeat_time_ms is spent. dry_run_iters given:
    exactly that many untimed calls first; otherwise dry_run_time_ms of warm-up. cold_l2_cache:
    flush L2 before each iteration (kbench's flush, 2x L2 by default). The deprecated l2_flush*
    parameters are honoured with a DeprecationWarning, as FlashInfer does. Without a GPU it
    times on the CPU with the host clock.
    """
    from .bench import bench
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    input_kwargs = dict(input_kwargs or {})
    if not isinstance(input_args, (tuple, list)):
        raise TypeError(f"input_args must be a tuple, got {type(input_args).__name__}")
    flush = cold_l2_cache
    opts: Dict[str, Any] = {}
    if any(p is not None for p in (l2_flush, l2_flush_size_mb, l2_flush_device)):
        warnings.warn("l2_flush, l2_flush_size_mb, and l2_flush_device are deprecated. "
                      "Use cold_l2_cache instead.", DeprecationWarning, stacklevel=2)
        flush = True if l2_flush is None else bool(l2_flush)
        opts["flush_bytes"] = int((256 if l2_flush_size_mb is None else l2_flush_size_mb)
                                  * 1024 * 1024)
    if sleep_after_run:
        warnings.warn("kbench.testing.bench_gpu_time_with_cupti: sleep_after_run is not "
                      "supported and is ignored (kbench paces nothing between samples; use "
                      "kbench.bench options to control the run)", UserWarning, stacklevel=2)
    for label, v in (("dry_run_iters", dry_run_iters), ("repeat_iters", repeat_iters)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{label} must be a positive integer or None, got {v!r}")
    for label, v in (("dry_run_time_ms", dry_run_time_ms), ("repeat_time_ms", repeat_time_ms)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{label} must be a positive number of milliseconds, got {v!r}")

    device = bench_options.pop("device", None)
    if device is None:
        from .prepare import resolve_device
        device = resolve_device("auto", tuple(input_args), input_kwargs, fn)
        if device == "cpu":
            device = l2_flush_device if l2_flush_device not in (None, "cuda") \
                else _current_device()
    opts["cold_cache"] = "flush" if flush else None
    if device != "cpu":
        opts["mode"] = "graph" if use_cuda_graph else "cupti"
    if dry_run_iters is not None:
        for _ in range(dry_run_iters):
            fn(*input_args, **input_kwargs)
        opts["warmup_s"] = 0.0
    else:
        opts["warmup_s"] = dry_run_time_ms / 1e3
    opts["max_time_s"] = repeat_time_ms / 1e3
    if repeat_iters is not None:
        # a fixed count: kbench's loop never stops before min_samples, nor runs past max_samples
        opts.update(min_samples=repeat_iters, max_samples=repeat_iters)
    opts.update(bench_options)
    r = bench(fn, *input_args, kwargs=input_kwargs, device=device, **opts)
    if return_result:
        return r
    return (np.asarray(r.samples, dtype=np.float64) * 1e3).tolist()
