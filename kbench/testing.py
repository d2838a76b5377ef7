"""Drop-in replacements for the timing helpers GPU kernel projects already call.

    from kbench.testing import do_bench          # was: from triton.testing import do_bench
    from kbench.testing import bench_gpu_time    # was: from flashinfer.testing import ...

The parameters (names, order, defaults) and return conventions (milliseconds) of current
triton.testing.do_bench / do_bench_cudagraph (checked against Triton 3.9.0) and of
flashinfer.testing's bench_gpu_time, bench_gpu_time_with_cupti, bench_gpu_time_with_cuda_event
and bench_gpu_time_with_cudagraph (flashinfer-python 0.7.4); older Triton's fast_flush is
accepted by keyword and ignored. The measurement underneath is kbench.bench; docs/dropin.md
lists every difference. In short: L2 is flushed before each sample like do_bench does (outside
the timed region); sampling stops by kbench's precision rule (0.5% CI half-width of the median)
or the time budget, not at a fixed count -- unless a count is asked for (FlashInfer's
repeat_iters); with no CUDA device the same calls time on the CPU with the host clock, saying
so once per process (CpuFallbackWarning: those milliseconds are not GPU times; GPU-only kbench
options passed through are dropped with a warning), so code and tests using them run on
CPU-only machines. Peak memory is not measured unless asked for (memory=True): the drop-ins add
no untimed calls for it and leave the process's peak-memory counters alone.

Each function also takes keyword-only kbench options after its own parameters (e.g.
``cold_cache=None``, ``target=0.01``, ``min_samples=``, ``device=``) and ``return_result=True``
to get the kbench.Result instead of the legacy return value.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["do_bench", "do_bench_cudagraph", "bench_gpu_time", "bench_gpu_time_with_cupti",
           "bench_gpu_time_with_cuda_event", "bench_gpu_time_with_cudagraph",
           "cuda_device_status", "CpuFallbackWarning"]


def __dir__() -> List[str]:
    # what the module offers, not its imports (Any, Callable, np, functools ...)
    return sorted(__all__)


class CpuFallbackWarning(UserWarning):
    """A drop-in found no CUDA device and timed on the CPU with the host clock: the
    milliseconds it returned are CPU times of the callable, not GPU kernel times. Said once
    per process; passing device="cpu" says the CPU is meant and silences it."""


_RETURN_MODES = ("min", "max", "mean", "median", "all")
# kbench's timer modes that need a GPU: on the CPU fallback they are dropped, not refused
_GPU_MODES = ("cupti", "events", "graph")


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


def _ms(label: str, value: Any) -> float:
    """A time in milliseconds: a finite real >= 0 (a Python or NumPy scalar, not a bool), as a
    float. 0 is allowed, as upstream allows it (Triton and FlashInfer run max(1, int(t/est))
    calls)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{label} must be a number of milliseconds, got {value!r:.60} "
                        f"({type(value).__name__})")
    ms = float(value)
    if not math.isfinite(ms) or ms < 0:
        raise ValueError(f"{label} must be a non-negative number of milliseconds, got "
                         f"{value!r:.60}")
    return ms


def _iters(label: str, value: Any) -> Optional[int]:
    """An iteration count: None, or an integer >= 0 (a Python or NumPy integer, not a bool), as
    an int."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{label} must be a non-negative integer or None, got {value!r:.60} "
                        f"({type(value).__name__})")
    n = int(value)
    if n < 0:
        raise ValueError(f"{label} must be a non-negative integer or None, got {value!r:.60}")
    return n


def _grad_list(grad_to_none: Any) -> Optional[List[Any]]:
    """grad_to_none as a list, read once (None stays None). Tested with `is None`, as Triton
    does: a multi-element tensor or array has no truth value."""
    if grad_to_none is None:
        return None
    try:
        return list(grad_to_none)
    except TypeError:
        raise TypeError(f"grad_to_none must be an iterable of tensors (or None), got "
                        f"{type(grad_to_none).__name__}") from None


def _grad_reset(fn: Callable[[], Any], grads: Optional[List[Any]]):
    if grads is None or len(grads) == 0:
        return fn

    def call():
        for x in grads:
            x.grad = None
        return fn()
    call.__name__ = getattr(fn, "__name__", "fn")
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.__module__ = getattr(fn, "__module__", None)
    return call


def _prepare_graph_grads(grads: Optional[List[Any]]) -> None:
    """What triton's do_bench_cudagraph does to grad_to_none before it captures fn: each tensor
    becomes a leaf that requires grad, with no grad (methods a non-torch object lacks are
    skipped)."""
    for x in grads or ():
        if hasattr(x, "detach_"):
            x.detach_()
        if hasattr(x, "requires_grad_"):
            x.requires_grad_(True)
        x.grad = None


def _summarize(times_ms: np.ndarray, quantiles: Optional[Sequence[float]],
               return_mode: str) -> Union[float, List[float]]:
    """triton's conventions: quantiles -> list (a single quantile -> float; none -> []);
    'all' -> list; otherwise the statistic as a float. 'median' is the mean of the two middle
    times for an even count, as Triton's statistics.median. No times (a profile run,
    KBENCH_PROFILE=1: one untimed call) read NaN in the same shape, so a script runs unchanged
    under the profiler."""
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
        return float(np.median(times_ms))
    return float(getattr(np, return_mode)(times_ms))


def _check_return_mode(return_mode: str, quantiles: Any) -> None:
    if return_mode not in _RETURN_MODES:
        hint = (" (Triton 3.1 and earlier took fast_flush in this position: pass fast_flush= "
                "by keyword)" if isinstance(return_mode, bool) else "")
        raise ValueError(f"return_mode must be one of {list(_RETURN_MODES)}, got "
                         f"{return_mode!r}{hint}")
    if quantiles is not None:
        try:
            q = np.asarray(quantiles, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"quantiles must be a list of numbers in [0, 1], got "
                             f"{quantiles!r}") from None
        if q.ndim > 1 or np.any((q < 0) | (q > 1)) or np.any(np.isnan(q)):
            raise ValueError(f"quantiles must be a list of numbers in [0, 1], got {quantiles!r}")


@functools.lru_cache(maxsize=1)
def _bench_parameters() -> frozenset:
    from .bench import bench
    return frozenset(n for n, p in inspect.signature(bench).parameters.items()
                     if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def _drop_gpu_options(where: str, opts: Dict[str, Any], stacklevel: int) -> Dict[str, Any]:
    """The CPU fallback (no device given, no CUDA device found): a GPU script's GPU-only kbench
    options -- a GPU timer mode (mode='events' / 'cupti' / 'graph') and the CUDA or HIP
    backend's options (stream=, gate=, regime=, ...) -- are dropped with one warning naming
    them, so the script runs unchanged. Anything else invalid is left for kbench.bench to
    refuse."""
    dropped: Dict[str, Any] = {}
    if isinstance(opts.get("mode"), str) and opts["mode"] in _GPU_MODES:
        dropped["mode"] = opts["mode"]
    others = set(opts) - _bench_parameters()
    if others:
        from .backends import cuda, hip           # only when an option is not kbench.bench's own
        gpu_only = set(cuda.OPTIONS) | set(hip.OPTIONS)
        dropped.update((k, opts[k]) for k in sorted(others & gpu_only))
    if not dropped:
        return opts
    named = ", ".join(f"{k}={v!r:.40}" for k, v in dropped.items())
    warnings.warn(f"kbench.testing.{where}: no CUDA device, so it times on the CPU with the "
                  f"host clock and ignores the GPU-only option{'s' if len(dropped) > 1 else ''} "
                  f"{named}", UserWarning, stacklevel=stacklevel + 1)
    return {k: v for k, v in opts.items() if k not in dropped}


_cpu_fallback_said = False      # CpuFallbackWarning is said once per process


def _warn_cpu_fallback(where: str, stacklevel: int) -> None:
    """Once per process: a script written for a GPU printed CPU milliseconds as if they were
    GPU figures."""
    global _cpu_fallback_said
    if _cpu_fallback_said:
        return
    _cpu_fallback_said = True
    # the first line: a loader's error goes on with the paths it tried and its advice
    why = cuda_device_status()[1].strip().splitlines()[0].removesuffix("Tried:").rstrip(" .")
    warnings.warn(f"kbench.testing.{where}: no CUDA device ({why}), so it times on the CPU "
                  f"with the host clock: the milliseconds it returns are CPU times, not GPU "
                  f"kernel times. Pass device='cpu' to time on the CPU on purpose. (Said once "
                  f"per process.)", CpuFallbackWarning, stacklevel=stacklevel + 1)


def _fewest_samples(opts: Dict[str, Any]) -> None:
    """A zero sampling budget (rep=0, repeat_time_ms=0): stop at kbench's minimum count,
    min_samples (10 by default, or the caller's), where Triton and FlashInfer take one
    sample."""
    n = opts.get("min_samples")
    opts.setdefault("max_samples", _loop_default("min_samples") if n is None else n)


def _loop_default(key: str) -> Any:
    from . import _core
    return _core.LOOP_DEFAULTS[key]


def _device(bench_options: Dict[str, Any]) -> Tuple[str, bool]:
    """(the device to time on, whether the caller named it)."""
    device = bench_options.pop("device", None)
    return (device, True) if device is not None else (_current_device(), False)


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
             grad_to_none: Optional[Sequence[Any]] = None,
             quantiles: Optional[Sequence[float]] = None, return_mode: str = "mean",
             *, fast_flush: bool = True, return_result: bool = False, **bench_options: Any):
    """triton.testing.do_bench on kbench: time ``fn()`` and return milliseconds.

    warmup: warm-up time limit (ms; kbench's warm-up may end earlier, once per-call times stop
    falling). rep: time budget for sampling (ms); sampling stops earlier when the median is
    precise to kbench's target; rep=0 takes kbench's minimum count (min_samples, 10 by
    default). quantiles: return these quantiles of the per-call times (a list; a single
    quantile gives a float; [] gives []). return_mode: "min" | "max" | "mean" | "median" | "all"
    (the list of per-call times). Cold L2 (kbench's flush) before every sample. fast_flush
    (Triton 3.1 and earlier) is accepted and ignored: kbench always flushes the same way.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_return_mode(return_mode, quantiles)
    warmup_ms, rep_ms = _ms("warmup", warmup), _ms("rep", rep)
    grads = _grad_list(grad_to_none)
    device, given = _device(bench_options)
    return _run(fn, device, given, warmup_ms=warmup_ms, rep_ms=rep_ms, grads=grads,
                quantiles=quantiles, return_mode=return_mode, return_result=return_result,
                mode=None, defaults={"cold_cache": "flush"}, options=bench_options,
                where="do_bench")


def do_bench_cudagraph(fn: Callable[[], Any], rep: float = 20,
                       grad_to_none: Optional[Sequence[Any]] = None,
                       quantiles: Optional[Sequence[float]] = None, return_mode: str = "mean",
                       *, return_result: bool = False, **bench_options: Any):
    """triton.testing.do_bench_cudagraph on kbench: ``fn()`` captured in a CUDA graph and
    replayed (kbench mode="graph"); milliseconds per call. Like triton's, no L2 flush between
    calls (hot cache) unless ``cold_cache=`` is given, and each tensor of grad_to_none is made
    a leaf that requires grad (detach_, requires_grad_(True), grad = None) before anything
    runs. Without a GPU it times ``fn()`` on the CPU with the host clock."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_return_mode(return_mode, quantiles)
    rep_ms = _ms("rep", rep)
    grads = _grad_list(grad_to_none)
    device, given = _device(bench_options)
    _prepare_graph_grads(grads)
    # triton warms up with a handful of calls; do_bench's 25 ms default is the closest match
    return _run(fn, device, given, warmup_ms=25.0, rep_ms=rep_ms, grads=grads,
                quantiles=quantiles, return_mode=return_mode, return_result=return_result,
                mode="graph", defaults={"cold_cache": None}, options=bench_options,
                where="do_bench_cudagraph")


def _run(fn, device, given, *, warmup_ms, rep_ms, grads, quantiles, return_mode,
         return_result, mode, defaults, options, where):
    from .bench import bench
    # memory=False: the peak-memory probe would call fn twice more, untimed, and reset the
    # process's peak counters (torch.cuda.reset_peak_memory_stats, VmHWM): scripts read
    # max_memory_allocated() around do_bench. memory=True still asks for it.
    opts: Dict[str, Any] = dict(defaults, memory=False, warmup_s=warmup_ms / 1e3)
    if rep_ms > 0:
        opts["max_time_s"] = rep_ms / 1e3
    opts.update(options)
    if rep_ms == 0:
        _fewest_samples(opts)
    if device != "cpu" and mode is not None:
        opts.setdefault("mode", mode)
    if device == "cpu" and not given:
        opts = _drop_gpu_options(where, opts, stacklevel=3)
        _warn_cpu_fallback(where, stacklevel=3)
    # only the times go back unless return_result: no stated CI for the run history to widen,
    # and an autotuner's hundreds of calls would each write its file
    r = bench(_grad_reset(fn, grads), device=device, _history=None if return_result else False,
              **opts)
    if return_result:
        return r
    return _summarize(np.asarray(r.samples, dtype=np.float64) * 1e3, quantiles, return_mode)


def _world_size() -> int:
    """The number of ranks of an initialised torch.distributed (1 without one). Never imports
    torch."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:                   # a broken or partial torch: one process
        pass
    return 1


# ------------------------------------------------------------------ FlashInfer's timers

_L2_DEPRECATED = ("l2_flush, l2_flush_size_mb, and l2_flush_device are deprecated. "
                  "Use cold_l2_cache instead.")
# cudagraph's cold L2 by rotation: kbench clones the positional arguments until the copies
# exceed 2x L2. A small set needs many copies (1 MiB: about 100 on a 50 MB L2; kbench refuses
# past 4096); from 1 GiB a copy exceeds any GPU's L2 several times over and doubles the memory
# held. Outside that window the cache is flushed between replays instead.
_ROTATE_MIN_BYTES = 1 << 20
_ROTATE_MAX_BYTES = 1 << 30


def _l2_flags_given(l2_flush: Any, l2_flush_size_mb: Any, l2_flush_device: Any) -> bool:
    return any(p is not None for p in (l2_flush, l2_flush_size_mb, l2_flush_device))


def _fi_flush(l2_flush: Any, l2_flush_size_mb: Any, l2_flush_device: Any, cold_l2_cache: Any,
              stacklevel: int) -> Tuple[bool, Optional[int]]:
    """(flush L2 before each iteration, the flush size in bytes or None: kbench's 2x L2), as
    FlashInfer's CUPTI and CUDA-event timers read cold_l2_cache and the deprecated l2_flush*
    parameters (those warn, as FlashInfer does; l2_flush_device never chooses the device)."""
    if not _l2_flags_given(l2_flush, l2_flush_size_mb, l2_flush_device):
        return bool(cold_l2_cache), None
    warnings.warn(_L2_DEPRECATED, DeprecationWarning, stacklevel=stacklevel + 1)
    flush = True if l2_flush is None else bool(l2_flush)
    if not flush:                   # a size for no flush would be refused as ignored
        return False, None
    return True, int((256 if l2_flush_size_mb is None else l2_flush_size_mb) * 1024 * 1024)


def _calls_per_graph(num_iters_within_graph: Any) -> int:
    n = _iters("num_iters_within_graph", num_iters_within_graph)
    if n is None or n < 1:
        raise ValueError(f"num_iters_within_graph must be a positive integer, got "
                         f"{num_iters_within_graph!r:.60}")
    return n


def _fi_inputs(fn: Any, input_args: Any, input_kwargs: Any) -> Tuple[Tuple, Dict[str, Any]]:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(input_args, (tuple, list)):
        raise TypeError(f"input_args must be a tuple, got {type(input_args).__name__}")
    return tuple(input_args), dict(input_kwargs or {})


def _fi_budget(dry_run_iters: Any, repeat_iters: Any, dry_run_time_ms: Any,
               repeat_time_ms: Any) -> Tuple[Optional[int], Optional[int], Dict[str, Any]]:
    """(untimed calls to make first or None, the timed count or None, kbench's loop options).
    A count given replaces its time budget, which is then not even checked."""
    dry_n, rep_n = _iters("dry_run_iters", dry_run_iters), _iters("repeat_iters", repeat_iters)
    dry_ms = _ms("dry_run_time_ms", dry_run_time_ms) if dry_n is None else None
    rep_ms = _ms("repeat_time_ms", repeat_time_ms) if rep_n is None else None
    # dry runs made here replace kbench's warm-up budget (its minimum warm-up still runs)
    loop: Dict[str, Any] = {"warmup_s": 0.0 if dry_n is not None else dry_ms / 1e3}
    if rep_n is not None:
        # a fixed count: kbench's loop never stops before min_samples, nor runs past max_samples
        loop.update(min_samples=rep_n, max_samples=rep_n)
    elif rep_ms > 0:
        loop["max_time_s"] = rep_ms / 1e3
    return dry_n, rep_n, loop


def _fi_unsupported(where: str, sleep_after_run: bool, bench_options: Dict[str, Any],
                    stacklevel: int) -> None:
    """Warn about what kbench accepts and does not do: sleep_after_run, and aggregate_op where
    torch.distributed has several ranks."""
    if sleep_after_run:
        warnings.warn(f"kbench.testing.{where}: sleep_after_run is not supported and is ignored "
                      f"(kbench paces nothing between samples; use kbench.bench options to "
                      f"control the run)", UserWarning, stacklevel=stacklevel + 1)
    ranks = _world_size()
    if ranks > 1 and "group" not in bench_options:
        warnings.warn(f"kbench.testing.{where}: aggregate_op is not applied: the times are this "
                      f"rank's own (FlashInfer gathers them from all {ranks} ranks of "
                      f"torch.distributed and combines each iteration's with aggregate_op); "
                      f"pass group='auto' for kbench's per-sample maximum over the ranks",
                      UserWarning, stacklevel=stacklevel + 1)


def _fi_device(bench_options: Dict[str, Any], args: Tuple, kwargs: Dict[str, Any],
               fn: Any) -> Tuple[str, bool]:
    """(the device to time on, whether the caller named it): the device= kbench option, else
    the inputs' GPU, else the current device (never l2_flush_device, which in FlashInfer only
    places the flush buffer)."""
    device = bench_options.pop("device", None)
    if device is not None:
        return device, True
    from .measure.prepare import resolve_device
    device = resolve_device("auto", args, kwargs, fn)
    return (_current_device() if device == "cpu" else device), False


def _fi_timer(mode: str, flush: bool, args: Tuple, device: str,
              calls_per_graph: Optional[int]) -> Dict[str, Any]:
    """kbench's cold_cache and, on a GPU, its timer (mode) and calls per graph replay (unroll).
    FlashInfer's CUDA-graph timer keeps L2 cold with rotating copies of the inputs: kbench's
    cold_cache='rotate' where the positional inputs suit it, else a flush between replays of
    one call each (kbench's flush runs between replays, so unrolled calls would run warm)."""
    opts: Dict[str, Any] = {"cold_cache": "flush" if flush else None}
    if device == "cpu":
        return opts
    opts["mode"] = mode
    if mode != "graph" or calls_per_graph is None:
        return opts
    if not flush:
        opts["unroll"] = calls_per_graph
    else:
        from .measure.coldcache import footprint
        if _ROTATE_MIN_BYTES <= footprint(args) < _ROTATE_MAX_BYTES:
            opts.update(cold_cache="rotate", unroll=calls_per_graph)
    return opts


def _flashinfer(where: str, mode: str, fn: Any, budget: Tuple, cold: Tuple[bool, Optional[int]],
                sleep_after_run: bool, input_args: Any, input_kwargs: Any,
                calls_per_graph: Optional[int], return_result: bool,
                bench_options: Dict[str, Any]):
    """FlashInfer's timers on kbench.bench: its parameters as kbench options; per-iteration
    milliseconds (a list), or the kbench.Result. Called by the public drop-ins only: warnings
    name the drop-in's caller (stacklevel 3)."""
    from .bench import bench
    args, kwargs = _fi_inputs(fn, input_args, input_kwargs)
    dry_n, rep_n, loop = _fi_budget(*budget)
    _fi_unsupported(where, sleep_after_run, bench_options, stacklevel=3)
    device, given = _fi_device(bench_options, args, kwargs, fn)
    if rep_n == 0:                      # FlashInfer times no iteration and returns []
        if return_result:
            raise ValueError("repeat_iters=0 times nothing, so there is no kbench.Result to "
                             "return (return_result=True)")
        return []
    flush, flush_bytes = cold
    opts: Dict[str, Any] = {"memory": False,    # no probe calls, no peak counters reset
                            **_fi_timer(mode, flush, args, device, calls_per_graph), **loop}
    if flush_bytes is not None:
        opts["flush_bytes"] = flush_bytes
    opts.update(bench_options)
    if rep_n is None and "max_time_s" not in loop:
        _fewest_samples(opts)
    if device == "cpu" and not given:
        opts = _drop_gpu_options(where, opts, stacklevel=3)
        _warn_cpu_fallback(where, stacklevel=3)
    for _ in range(dry_n or 0):
        fn(*args, **kwargs)
    r = bench(fn, *args, kwargs=kwargs, device=device,
              _history=None if return_result else False, **opts)    # as do_bench
    if return_result:
        return r
    return (np.asarray(r.samples, dtype=np.float64) * 1e3).tolist()


def bench_gpu_time_with_cupti(fn: Callable[..., Any], dry_run_iters: Optional[int] = None,
                              repeat_iters: Optional[int] = None, dry_run_time_ms: int = 25,
                              repeat_time_ms: int = 100, l2_flush: Optional[bool] = None,
                              l2_flush_size_mb: Optional[int] = None,
                              l2_flush_device: Optional[str] = None,
                              sleep_after_run: bool = False, use_cuda_graph: bool = False,
                              input_args: Tuple = (), input_kwargs: Optional[dict] = None,
                              cold_l2_cache: bool = True, aggregate_op: Callable = max, *,
                              return_result: bool = False,
                              **bench_options: Any) -> List[float]:
    """flashinfer.testing.bench_gpu_time_with_cupti on kbench: per-iteration GPU kernel times
    in milliseconds (a list), from kbench's CUPTI activity timing (mode="cupti"; with
    use_cuda_graph=True kbench's graph mode).

    repeat_iters given: exactly that many timed iterations (0: returns [] without calling fn).
    Otherwise sampling runs until the median is precise to kbench's target or repeat_time_ms
    is spent (0: kbench's minimum count, min_samples). dry_run_iters given: that many untimed
    calls first (then kbench's own warm-up, one call on the CPU); otherwise dry_run_time_ms
    limits kbench's warm-up. cold_l2_cache: flush L2 before each iteration (kbench's flush, 2x
    L2 by default). The deprecated l2_flush* parameters are honoured with a DeprecationWarning,
    as FlashInfer does; l2_flush_device never chooses the device timed. aggregate_op
    (FlashInfer: how each iteration's time is combined across the ranks of an initialised
    torch.distributed) has no effect in one process, as in FlashInfer; kbench never aggregates
    across ranks here, and warns where torch.distributed has more than one. sleep_after_run
    is ignored with a warning. Without a GPU it times on the CPU with the host clock
    (CpuFallbackWarning, once per process).
    """
    cold = _fi_flush(l2_flush, l2_flush_size_mb, l2_flush_device, cold_l2_cache, stacklevel=2)
    return _flashinfer("bench_gpu_time_with_cupti", "graph" if use_cuda_graph else "cupti", fn,
                       (dry_run_iters, repeat_iters, dry_run_time_ms, repeat_time_ms), cold,
                       sleep_after_run, input_args, input_kwargs, None, return_result,
                       bench_options)


def bench_gpu_time_with_cuda_event(fn: Callable[..., Any], dry_run_iters: Optional[int] = None,
                                   repeat_iters: Optional[int] = None, dry_run_time_ms: int = 25,
                                   repeat_time_ms: int = 100, l2_flush: Optional[bool] = None,
                                   l2_flush_size_mb: Optional[int] = None,
                                   l2_flush_device: Optional[str] = None,
                                   sleep_after_run: bool = False, input_args: Tuple = (),
                                   input_kwargs: Optional[dict] = None,
                                   cold_l2_cache: bool = True, aggregate_op: Callable = max, *,
                                   return_result: bool = False,
                                   **bench_options: Any) -> List[float]:
    """flashinfer.testing.bench_gpu_time_with_cuda_event on kbench: per-iteration times in
    milliseconds (a list), each from a pair of CUDA events around one call (kbench
    mode="events"), L2 flushed before each (cold_l2_cache=True). Every parameter reads as in
    bench_gpu_time_with_cupti (counts, time budgets, deprecated l2_flush*, aggregate_op,
    sleep_after_run ignored with a warning, the CPU fallback)."""
    cold = _fi_flush(l2_flush, l2_flush_size_mb, l2_flush_device, cold_l2_cache, stacklevel=2)
    return _flashinfer("bench_gpu_time_with_cuda_event", "events", fn,
                       (dry_run_iters, repeat_iters, dry_run_time_ms, repeat_time_ms), cold,
                       sleep_after_run, input_args, input_kwargs, None, return_result,
                       bench_options)


def bench_gpu_time_with_cudagraph(fn: Callable[..., Any], dry_run_iters: Optional[int] = None,
                                  repeat_iters: Optional[int] = None, dry_run_time_ms: int = 25,
                                  repeat_time_ms: int = 100, num_iters_within_graph: int = 10,
                                  l2_flush: Optional[bool] = None,
                                  l2_flush_size_mb: Optional[int] = None,
                                  l2_flush_device: Optional[str] = None,
                                  sleep_after_run: bool = False, input_args: Tuple = (),
                                  input_kwargs: Optional[dict] = None,
                                  cold_l2_cache: bool = True, aggregate_op: Callable = max, *,
                                  return_result: bool = False,
                                  **bench_options: Any) -> List[float]:
    """flashinfer.testing.bench_gpu_time_with_cudagraph on kbench: per-call times in
    milliseconds (a list), each a graph replay's time divided by the calls captured in it
    (kbench mode="graph", unroll=num_iters_within_graph; kbench times the replay with CUPTI
    where it can, else with CUDA events).

    cold_l2_cache=True: FlashInfer rotates copies of the GPU tensors inside one graph. kbench
    rotates copies of the positional inputs (cold_cache="rotate") where they hold 1 MiB to
    1 GiB; otherwise (inputs only in input_kwargs, tiny or huge inputs) it flushes L2 between
    replays of one call each, and num_iters_within_graph is then not used. l2_flush (deprecated)
    stands for cold_l2_cache, as in FlashInfer; l2_flush_size_mb and l2_flush_device are
    accepted and unused. Other parameters as in bench_gpu_time_with_cupti."""
    calls = _calls_per_graph(num_iters_within_graph)
    if _l2_flags_given(l2_flush, l2_flush_size_mb, l2_flush_device):
        warnings.warn(_L2_DEPRECATED + " For CUDA graphs, cold_l2_cache uses rotating buffers "
                      "(not L2 flush) to ensure cold cache.", DeprecationWarning, stacklevel=2)
        cold_l2_cache = True if l2_flush is None else l2_flush
    return _flashinfer("bench_gpu_time_with_cudagraph", "graph", fn,
                       (dry_run_iters, repeat_iters, dry_run_time_ms, repeat_time_ms),
                       (bool(cold_l2_cache), None), sleep_after_run, input_args, input_kwargs,
                       calls, return_result, bench_options)


def bench_gpu_time(fn: Callable[..., Any], dry_run_iters: Optional[int] = None,
                   repeat_iters: Optional[int] = None, dry_run_time_ms: int = 25,
                   repeat_time_ms: int = 100, l2_flush: Optional[bool] = None,
                   l2_flush_size_mb: Optional[int] = None, l2_flush_device: Optional[str] = None,
                   sleep_after_run: bool = False, enable_cupti: bool = False,
                   use_cuda_graph: bool = False, num_iters_within_graph: int = 10,
                   input_args: Tuple = (), input_kwargs: Optional[dict] = None,
                   cold_l2_cache: bool = True, aggregate_op: Callable = max, *,
                   return_result: bool = False, **bench_options: Any) -> List[float]:
    """flashinfer.testing.bench_gpu_time on kbench: FlashInfer's dispatcher. enable_cupti=True
    times as bench_gpu_time_with_cupti (use_cuda_graph passed on to it); else
    use_cuda_graph=True as bench_gpu_time_with_cudagraph (num_iters_within_graph calls per
    replay); else as bench_gpu_time_with_cuda_event. Per-iteration milliseconds (a list).
    The deprecated l2_flush, when given, stands for cold_l2_cache (l2_flush_size_mb and
    l2_flush_device are then unused), as in FlashInfer."""
    if _l2_flags_given(l2_flush, l2_flush_size_mb, l2_flush_device):
        warnings.warn(_L2_DEPRECATED, DeprecationWarning, stacklevel=2)
        cold_l2_cache = cold_l2_cache if l2_flush is None else l2_flush
    budget = (dry_run_iters, repeat_iters, dry_run_time_ms, repeat_time_ms)
    if enable_cupti:
        mode, calls = ("graph" if use_cuda_graph else "cupti"), None
    elif use_cuda_graph:
        mode, calls = "graph", _calls_per_graph(num_iters_within_graph)
    else:
        mode, calls = "events", None
    return _flashinfer("bench_gpu_time", mode, fn, budget, (bool(cold_l2_cache), None),
                       sleep_after_run, input_args, input_kwargs, calls, return_result,
                       bench_options)
