"""The CUDA side of kbench.bench: the framework adapters.

The C core does the measuring (kbench._core.measure_cuda, its options and defaults in
_core.CUDA_DEFAULTS); this module adapts PyTorch, CuPy, DLPack-style objects and raw stream
handles to it, picks the timer CUPTI allows, captures graphs (through torch.cuda.graph for
PyTorch so its caching allocator knows) and probes a mode's floor. What the raw record says is
read by kbench.backends.cuda_report. Imported only when a GPU is asked for.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import sys
import warnings
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

import numpy as np

from .. import _core
from ..measure.coldcache import flag_rotation_sets, make_rotation_sets, shares_memory
from ..measure.prepare import add_note, device_ordinal, poison_gpu
from ..roofline.ceilings import choose_compute_peak
from .cuda_report import (floor_share, gpu_neighbours, gpu_peaks, kinds,
                          read_cold, read_record, theoretical_bandwidth)

# The clock summary, the GPU's timed/busy fractions and the regime's verdict are C's
# (_core.clock_summary, timed_fraction, busy_fraction, regime_verdict: csrc/clocks/regime.c).
__all__ = ["theoretical_bandwidth"]

_floor_cache: Dict[Tuple[str, int, bool], Dict[str, Any]] = {}
_device_info_cache: Dict[int, Dict[str, Any]] = {}

def available() -> bool:
    """True when the C core has the CUDA backend and a CUDA device is visible."""
    if not _core.HAVE_CUDA:
        return False
    try:
        return _core.cuda_device_count() > 0
    except _core.KbenchError:
        return False


def require_backend() -> None:
    if not _core.HAVE_CUDA:
        raise _core.LibraryNotFound(
            "this kbench was built without the CUDA backend (KBENCH_NO_CUDA=1 at build time); "
            "reinstall it with KBENCH_NO_CUDA unset: `pip install --force-reinstall --no-deps "
            "kbench-*.whl` (every kbench wheel has the CUDA backend), or `pip install .` in a "
            "kbench checkout or sdist -- pip then fetches the CUDA headers from the "
            "nvidia-cuda-runtime, nvidia-cuda-cupti and nvidia-cuda-crt packages; no CUDA "
            "toolkit is needed")


def stream_handle(stream: Any, ordinal: int, torch_first: bool = True) -> int:
    """A CUstream handle (int) from a torch/CuPy stream or an int; for None, the current stream
    of the frameworks in use: one whose current stream the caller set (not the legacy default
    0) wins over one left at it, and between two, the callable's (torch_first: torch's)."""
    if stream is None:
        current = [h for _, h in _current_streams(ordinal, torch_first)]
        return next((h for h in current if h not in DEFAULT_STREAMS),
                    current[0] if current else 0)
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError(f"stream must be an int handle, a torch.cuda.Stream or a cupy Stream, got "
                    f"{type(stream).__name__}")


# The handles of the default streams (0 the legacy one, 1 cudaStreamLegacy, 2
# cudaStreamPerThread: CuPy's untouched current stream under CUPY_CUDA_PER_THREAD_DEFAULT_STREAM):
# a framework whose current stream is one of these was not given a stream by the caller.
DEFAULT_STREAMS = (0, 1, 2)


def _current_streams(ordinal: int, torch_first: bool) -> List[Tuple[str, int]]:
    """[(framework, its current stream on the device)] for torch (once it initialised CUDA)
    and CuPy (once imported), the callable's framework first."""
    out = []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        out.append(("torch", int(torch.cuda.current_stream(ordinal).cuda_stream)))
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        out.append(("cupy", int(_cupy_current_stream(cupy, ordinal).ptr)))
    return out if torch_first else out[::-1]


def _cupy_current_stream(cupy: Any, ordinal: int) -> Any:
    try:
        return cupy.cuda.get_current_stream(ordinal)
    except TypeError:                  # CuPy < 11: the current device's
        return cupy.cuda.get_current_stream()


def torch_profiler_active() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:
        try:
            return bool(torch._C._autograd._profiler_enabled())
        except Exception:
            return False


def device_info(ordinal: int) -> Dict[str, Any]:
    """The device's attributes, read once a process, with its free memory read now: a session's
    later benches sized kbench's rotation copies by the first bench's free memory. The reading
    never makes a context: a process that only asks (a sweep's parent collecting metadata) would
    hold one, 0.5 GB on an H200, and its children's benches would see another process on the
    GPU. Where the device has none yet, the first reading stands."""
    if ordinal not in _device_info_cache:
        _device_info_cache[ordinal] = dict(_core.cuda_device_info(ordinal))
    info = dict(_device_info_cache[ordinal])
    try:
        now = _core.cuda_mem_info(ordinal, create=False)
    except Exception:           # noqa: BLE001 -- the cached reading stands
        now = None
    if now is not None:
        info["free_memory_bytes"] = int(now[0])
    return info


def _uses_torch(sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any], stream: Any) -> bool:
    """Capture through torch.cuda.graph? For torch tensors, and for closures when torch has
    initialised CUDA -- unless the arguments or the stream are CuPy's."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    values = list(sets[0]) + list(kwargs.values())
    if any(isinstance(a, torch.Tensor) for a in values):
        return True
    if any(type(a).__module__.startswith("cupy") for a in values + [stream]):
        return False
    return torch.cuda.is_initialized()


def _sync(ordinal: int) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize(ordinal)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.Device(ordinal).synchronize()


def _loop_for_probe(seconds: float) -> Dict[str, Any]:
    return dict(warmup_s=0.0, min_samples=20, max_samples=2000, max_time_s=seconds,
                target=0.01, ci_level=0.95, criterion="ci")


def mode_floor(mode: str, inner: str, ordinal: int, stream: int,
               gate: bool) -> Dict[str, Any]:
    """What a measurement (a plan's: 'events', 'cupti', 'graph') read by its timer (`inner`,
    the plan's) reads for kbench's empty kernel: the smallest time it can resolve. Probed once
    per (mode, device, gate); a probe that failed is kept too, and raises again: it would fail
    (and cost its time and memory) again on every later bench."""
    key = (mode, ordinal, gate)
    if key not in _floor_cache:
        try:
            raw = _probe_floor(mode, inner, ordinal, stream, gate)
        except _core.KbenchError as e:
            _floor_cache[key] = {"error": str(e)}
            raise
        s = np.asarray(raw["samples"], dtype=np.float64)
        _floor_cache[key] = {"median_s": _core.quantile(s, 0.5), "min_s": float(s.min()),
                             "n": int(s.size), "timer": inner, "gated": gate,
                             "probe": "kbench empty kernel" + (" x10 per graph" if
                                                               mode == "graph" else "")}
    if "error" in _floor_cache[key]:
        raise _core.KbenchError(_floor_cache[key]["error"])
    return _floor_cache[key]


def _probe_floor(mode: str, inner: str, ordinal: int, stream: int, gate: bool) -> Dict[str, Any]:
    common = dict(stream=stream, device=ordinal, mode=inner, cold=None, gate=gate,
                  busy_warmup_s=0.0, sample_clocks=False, cupti_allow_foreign=True,
                  **_loop_for_probe(0.5))
    if mode != "graph":
        return _core.measure_cuda(_core.launch_empty, ((stream, ordinal),), None, **common)
    keep = None
    if stream == 0:                  # the legacy stream cannot be captured: use a side one
        torch = sys.modules.get("torch")
        if torch is None:
            raise _core.KbenchError("graph floor needs a non-default stream")
        keep = torch.cuda.Stream(device=ordinal)
        stream = common["stream"] = int(keep.cuda_stream)
    # One eager launch first: it loads kbench's kernels, whose first load allocates (cuMemAlloc),
    # which a capture refuses. Without it, in a process whose first kbench launch was this
    # capture, the probe failed on every graph bench, each failure loading and unloading the
    # module again (+58 KB of host memory a bench on the H200).
    _core.launch_empty(stream, ordinal)
    g = _core.graph_capture(_core.launch_empty, ((stream, ordinal),), None, stream=stream,
                            device=ordinal, unroll=10)
    return _core.measure_cuda(g, ((),), None, **dict(common, unroll=10))


def cupti_copies_mapped() -> List[str]:
    """Distinct libcupti files mapped into this process (Linux)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcupti" in line and "/" in line}
    except OSError:
        return []
    return sorted(paths)


def framework_cupti() -> Optional[str]:
    """The libcupti PyTorch ships (pip's nvidia-cuda-cupti), when torch is imported: kbench
    opens that file so torch.profiler and kbench share one CUPTI instead of two copies in one
    process (two copies fight over the activity state)."""
    import glob
    import os
    if "torch" not in sys.modules:
        return None
    for sp in sys.path:
        hits = sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libcupti.so*")) +
                      glob.glob(os.path.join(sp, "nvidia", "cuda_cupti", "lib", "libcupti.so*")))
        if hits:
            return hits[0]
    return None


def _cupti_status() -> Dict[str, Any]:
    """Load CUPTI (once per process), preferring PyTorch's copy. The C loader decides: a copy
    already mapped wins, then the user's KBENCH_CUPTI_PATH (read there only), then this
    preference, then the default search."""
    preferred = framework_cupti()
    if preferred is not None:
        _core.prefer_cupti(preferred)    # False once CUPTI was opened: the first choice stands
    return _core.gpu_library_status().get("cupti", {})


def cupti_facts() -> Tuple[bool, bool, str]:
    """(usable, busy, why): whether kbench can take CUPTI in this process, for _core.plan, which
    asks only when a CUDA plan needs to know (mode None, 'cupti' or 'graph', not profiling).
    busy: another tool owns it (torch.profiler, a second libcupti copy)."""
    if torch_profiler_active():
        return False, True, "torch.profiler is running and owns CUPTI"
    copies = cupti_copies_mapped()
    if len(copies) > 1:
        return False, True, (f"{len(copies)} different libcupti copies are loaded "
                             f"({', '.join(copies)}); they corrupt each other's timestamps")
    try:
        st = _cupti_status()
        if not st.get("loaded"):
            return False, False, st.get("error") or "libcupti not found"
    except Exception as e:           # status must not stop a measurement
        return False, False, str(e)
    return True, False, ""


def current_stream_as(stream: Any, handle: int, ordinal: int,
                      torch_path: bool) -> ContextManager[Any]:
    """Make `handle` (the caller's `stream`, or the current stream kbench picked) the current
    stream of every framework fn may launch through while kbench calls it: torch's when fn
    uses torch or torch has initialised CUDA, CuPy's when CuPy is imported. kbench's gate,
    events and flush go to `handle`; a torch or CuPy callable launches on its framework's
    current stream. Without this, a torch GEMM passed with stream=side ran on the default
    stream while the events on `side` timed nothing, and CUPTI's sentinel on `side` came back
    before the GEMM's record (the 2-GPU TP graph run failed so); a CuPy stream given for a
    torch callable (or a torch stream for a CuPy one) was made current in the wrong one."""
    if isinstance(stream, bool):
        return contextlib.nullcontext()
    # entered inside a with: a failure half-way (CuPy refusing a stream of another device)
    # unwinds what was entered, and pop_all hands the rest to the caller's with
    with contextlib.ExitStack() as stack:
        torch = sys.modules.get("torch")
        if torch is not None and (torch_path or torch.cuda.is_initialized()) and \
                int(torch.cuda.current_stream(ordinal).cuda_stream) != handle:
            stack.enter_context(torch.cuda.stream(_torch_stream(torch, stream, handle,
                                                                ordinal)))
        cupy = sys.modules.get("cupy")
        # CuPy's current stream is set only where fn may launch through CuPy: a CuPy callable
        # (not torch's), a CuPy stream given, or a caller who set one (a closure over CuPy
        # arrays under `with cupy.cuda.Stream()`); merely imported, CuPy is left alone
        if cupy is not None:
            current = int(_cupy_current_stream(cupy, ordinal).ptr)
            given = type(stream).__module__.startswith("cupy")
            if current != handle and (not torch_path or given or
                                      current not in DEFAULT_STREAMS):
                stack.enter_context(cupy.cuda.Device(ordinal))   # its streams check the device
                stack.enter_context(_cupy_stream(cupy, stream, handle, ordinal))
        return stack.pop_all()


def _torch_stream(torch: Any, stream: Any, handle: int, ordinal: int) -> Any:
    if isinstance(stream, torch.cuda.Stream) and int(stream.cuda_stream) == handle:
        return stream
    if handle == 0:
        return torch.cuda.default_stream(ordinal)
    return torch.cuda.ExternalStream(handle, device=ordinal)


def _cupy_stream(cupy: Any, stream: Any, handle: int, ordinal: int) -> Any:
    if type(stream).__module__.startswith("cupy") and hasattr(stream, "__enter__") \
            and int(getattr(stream, "ptr", -1)) == handle:
        return stream
    if handle == 0:
        return cupy.cuda.Stream.null
    with warnings.catch_warnings():     # CuPy 14 deprecates ExternalStream for from_external
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return cupy.cuda.ExternalStream(handle, ordinal)
        except TypeError:               # CuPy < 12: no device argument
            return cupy.cuda.ExternalStream(handle)


def run(fn: Callable[..., Any], sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any], *,
        stream: Any = None, device: str, **options: Any):
    """Time fn on a CUDA device, on `stream` made current for the callable (see _run)."""
    require_backend()
    ordinal = device_ordinal(device)
    # the driver first: entering a CPU-only torch's stream raised torch's own "Torch not
    # compiled with CUDA enabled" where kbench says which library is missing
    device_info(ordinal)
    with on_stream(stream, ordinal, sets, kwargs):
        return _run(fn, sets, kwargs, stream=stream, device=device, **options)


def on_stream(stream: Any, ordinal: int, sets: List[Tuple[Any, ...]],
              kwargs: Dict[str, Any]) -> ContextManager[Any]:
    """The stream kbench times on (`stream`, or the current one: stream_handle) made current
    for the frameworks fn may use while fn is called: timed runs and profile mode's one call
    alike."""
    torch_path = _uses_torch(sets, kwargs, stream)
    return current_stream_as(stream, stream_handle(stream, ordinal, torch_path), ordinal,
                             torch_path)


def _run(fn: Callable[..., Any], sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any], *,
        plan: Any, flush_bytes: Optional[int], device: str, loop: Dict[str, Any],
        check: Any = None, rtol=None, atol=None, stream: Any = None, unroll: Optional[int] = None,
        expected_launches: Optional[int] = None, floor: bool = True,
        rotate_margin: Optional[float] = None, compute_peak: Optional[str] = None,
        output: Any = None,
        gate: Optional[bool] = None, keep_busy: Optional[bool] = None,
        gate_batch: Optional[int] = None, gate_timeout_s: Optional[float] = None,
        sample_clocks: Optional[bool] = None, settle_max_s: Optional[float] = None,
        regime: Optional[str] = None, pre_sample: Optional[Callable[[], Any]] = None):
    """Time fn on a CUDA device as plan (kbench.bench's, _core.plan) says. The timer's options
    (gate .. pre_sample) cross to C only when the caller gave them: their defaults are
    _core.CUDA_DEFAULTS and C validates them."""
    require_backend()
    # before the measurement, not after its seconds: a bad name, and the dtypes read before fn
    # runs (kbench.roofline.ceilings: compute_peak=None follows them)
    ceiling = choose_compute_peak(compute_peak, fn, sets[0], kwargs, output)
    warn: List[str] = [plan.note] if plan.note else []
    ordinal = device_ordinal(device)
    info = device_info(ordinal)
    torch_path = _uses_torch(sets, kwargs, stream)
    s = stream_handle(stream, ordinal, torch_path)
    l2 = int(info.get("l2_bytes") or 0)

    # Is somebody else on the GPU? (memory in use by other processes, utilisation)
    others = gpu_neighbours(ordinal)
    if others.get("other_processes"):
        warn.append(f"{others['other_processes']} other process(es) use this GPU "
                    f"({others.get('other_memory_bytes', 0) / 1e9:.1f} GB): timings may be "
                    f"disturbed")

    cold = {"mode": plan.cold or "none", "cache": "GPU L2", "cache_bytes": l2}
    if plan.rotate and len(sets) == 1:
        margin = {} if rotate_margin is None else {"margin": rotate_margin}   # its default there
        sets = make_rotation_sets(sets[0], l2, **margin,
                                  max_bytes=int(info.get("free_memory_bytes", 0) * 0.5) or 0)
    if plan.rotate:
        flag_rotation_sets(cold, sets, l2, warn, kwargs)

    given = dict(gate=gate, keep_busy=keep_busy, gate_batch=gate_batch,
                 gate_timeout_s=gate_timeout_s, sample_clocks=sample_clocks,
                 settle_max_s=settle_max_s, regime=regime, pre_sample=pre_sample)
    if flush_bytes is not None:
        given["flush_bytes"] = int(flush_bytes)
    common = dict({k: v for k, v in given.items() if v is not None}, stream=s, device=ordinal,
                  cupti_allow_foreign=True)

    # the output to poison and re-check: named by bench's out_arg, else an out= keyword. Only
    # with a check: unchecked, poison would only overwrite the caller's data (an in-place
    # kernel's input too, kbench.measure.local passes no check for those)
    out_kw = (output if output is not None else kwargs.get("out")) if check is not None else None
    extra: Dict[str, Any] = {"mode": plan.measurement, "timer": plan.timer, "stream": s}
    if plan.graph:
        raw, graph_extra = _run_graph(fn, sets, kwargs, s, ordinal, plan, unroll, loop, common,
                                      torch_path, warn, out_kw, poison=check is not None)
        extra.update(graph_extra)
    else:
        if out_kw is not None:
            poison_gpu(out_kw)
        raw = _core.measure_cuda(fn, tuple(sets), kwargs or None, plan=plan, **common, **loop)
    read_cold(cold, raw["cuda"], plan.flush, l2, warn)

    # Re-check outputs after the timed run: a skipped kernel or stale output cannot pass.
    post = extra.pop("_static_out", None)
    post_set = extra.pop("_static_set", 0)      # the argument set a graph's static output is of
    shared = extra.pop("_static_shared", False) or post is None
    if check is not None:
        if shared and len(sets) > 1 or not callable(check) and post_set != 0:
            # the loop cycles the sets (and keep-busy bridges add calls): which one wrote a
            # shared output last is not known, and a fixed reference is sets[0]'s
            extra["post_check"] = {"skipped": f"{len(sets)} argument sets write one output, or "
                                              f"the reference is the first set's: the check "
                                              f"before timing stands"}
        else:
            _check_after(out_kw if post is None else post, sets[post_set if post is not None
                                                                else 0],
                         check, rtol, atol, ordinal, extra)

    read_record(raw, extra, warn, timer=plan.timer, expected_launches=expected_launches)
    if floor and plan.measurement == "cupti":
        # CUPTI times the kernel itself: an empty kernel's duration is no blind spot of the
        # timer (a kernel near it is simply that short, measured exactly), so no share of the
        # figure to warn about, and its probe, a sub-2 us figure then sampled for a stepped
        # 0.2 s, was a fifth of the first bench in a process.
        extra["floor"] = {"probed": False, "why": "cupti times kernels themselves: no timer "
                          "floor to compare against (events and graph modes probe theirs)"}
    elif floor:
        try:
            gated = bool(raw["cuda"]["gate"]["enabled"])
            extra["floor"] = dict(mode_floor(plan.measurement, plan.timer, ordinal,
                                             s if s else 0, gated))
            floor_share(extra, plan.measurement, raw, warn)
        except _core.KbenchError as e:
            extra["floor"] = {"error": str(e)}
    extra["device"] = dict(info)
    extra["device"]["nvml_before"] = others.get("snapshot")
    extra["warnings"] = warn
    peaks = gpu_peaks(info, ceiling)
    extra["compute_peak"] = (peaks or {}).get("compute_peak", ceiling)
    return raw, cold, extra, f"cuda:{ordinal}", peaks



# What kbench.bench passes through to this backend as given by the caller: _run's keywords but
# those kbench.measure.local fills in itself. kbench.measure.local checks a call's options against
# it before
# anything calls fn.
_FROM_BENCH = ("plan", "flush_bytes", "device", "loop", "check", "rtol", "atol",
               "output")
OPTIONS = tuple(name for name, p in inspect.signature(_run).parameters.items()
                if p.kind is p.KEYWORD_ONLY and name not in _FROM_BENCH)

def _check_after(post: Any, args: Tuple[Any, ...], check: Any, rtol: Any, atol: Any,
                 ordinal: int, extra: Dict[str, Any]) -> None:
    """Compare the output the timed run left (post; None: nothing to compare) with check's
    reference for the argument set that wrote it."""
    if post is None:
        return
    _sync(ordinal)
    from ..measure.prepare import compare_outputs
    ref = check(*args) if callable(check) else check
    cmp, _ = compare_outputs(post, ref, rtol, atol)
    extra["post_check"] = {"ok": cmp.ok, "max_abs_err": cmp.max_abs_err}
    if not cmp.ok:
        raise AssertionError("kbench: the output after the timed run does not match the "
                             "reference (a captured kernel was skipped or the output is "
                             f"stale):\n{cmp.report()}")


# Graph mode's eager probe: a median to size the unroll (an integer in 1..100) and, on CUPTI,
# the activity of a few calls to compare with the replays'. A handful of calls tells both, and
# every launch and CUPTI read it makes costs host memory libcupti keeps once the process has
# captured a graph (docs/design/gpu-timers.md, "What stays in use after a soak").
# Five calls flat: at 5-50 (a 5% target) its batches of one or two were most of the gap between
# a graph bench's 84 CUPTI reads and a cupti bench's 34 on the H200.
EAGER_PROBE_LOOP = dict(warmup_s=0.0, min_samples=5, max_samples=5, max_time_s=0.05,
                        target=0.05, ci_level=0.95, criterion="ci")


def _estimate_eager(fn, sets, kwargs, s, ordinal, timer, pre_sample=None,
                    ranks=None) -> Tuple[float, Dict[str, Any]]:
    # No gate: a callable that cannot be captured (it synchronizes) must reach the capture and
    # fail there with CaptureError; the unroll estimate does not need launch-gap-free timing.
    raw = _core.measure_cuda(fn, tuple(sets), kwargs or None, stream=s, device=ordinal,
                             mode=timer, cold=None, busy_warmup_s=0.0, sample_clocks=False,
                             cupti_allow_foreign=True, gate=False, pre_sample=pre_sample,
                             **EAGER_PROBE_LOOP, **({"ranks": ranks} if ranks else {}))
    if ranks is not None:
        ranks.start_run()           # the reducer keeps the measurement's samples, not these
    return _core.quantile(np.asarray(raw["samples"], dtype=np.float64), 0.5), raw


def _run_graph(fn, sets, kwargs, s, ordinal, plan, unroll, loop, common, torch_path, warn,
               out_kw=None, poison=True):
    extra: Dict[str, Any] = {}
    timer = plan.timer
    if s == 0 and not torch_path:
        raise ValueError("mode='graph' needs a non-default stream for capture: pass stream= "
                         "(a torch/CuPy stream or handle)")
    pre_sample = common.get("pre_sample")     # before every call of fn that runs, never in a capture
    # under kbench.distributed the probe's calls are agreed across ranks like the measurement's
    eager_t, eager_raw = _estimate_eager(fn, sets, kwargs, s, ordinal, timer, pre_sample,
                                         loop.get("ranks"))
    if plan.flush:
        # The flush runs between replays: every call after the first inside an unrolled
        # replay would find the previous call's data in L2 and read warm.
        if unroll not in (None, 1):
            raise ValueError(f"mode='graph' with cold_cache='flush' times one call per replay "
                             f"(the flush runs between replays, so unrolled calls would run "
                             f"warm); got unroll={unroll}. Use cold_cache='rotate' to unroll "
                             f"over distinct argument sets, or cold_cache=None")
        unroll = 1
    if unroll is None:
        # Enough calls per replay that one launch's overhead is small against the work.
        unroll = int(min(100, max(1, math.ceil(20e-6 / max(eager_t, 1e-9)))))
    extra["unroll"] = unroll
    extra["eager_estimate_s"] = eager_t
    # Every argument set is replayed, as the eager modes cycle them: with unroll calls a graph,
    # a graph per unroll sets (under rotation every call of a replay gets its own set). One
    # graph once replayed only the first unroll sets of a flushed arg_sets run.
    n_graphs = max(1, math.ceil(len(sets) / unroll))
    if torch_path:
        torch = sys.modules["torch"]
        graphs, static_outs = [], []
        caller_stream = torch.cuda.current_stream(ordinal)
        side = torch.cuda.Stream(device=ordinal)
        side.wait_stream(torch.cuda.current_stream(ordinal))
        with torch.cuda.stream(side):          # warm-up on the capture stream, as torch asks
            for i in range(3):
                if pre_sample is not None:
                    pre_sample()
                fn(*sets[i % len(sets)], **kwargs)
        torch.cuda.current_stream(ordinal).wait_stream(side)
        # Each graph gets torch's default private pool, freed with it. A pool shared across
        # benches stays "recording" after a capture that failed, and every later capture into
        # it raised "beginAllocateToPool: already recording" (and sharing did not stop the RSS
        # growth it was meant to stop).
        for gi in range(n_graphs):
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g, stream=side):
                    out = None
                    for u in range(unroll):
                        out = fn(*sets[(gi * unroll + u) % len(sets)], **kwargs)
            except Exception as e:
                left = _undo_failed_torch_capture(torch, ordinal, caller_stream, side)
                err = _core.CaptureError(
                    f"the callable could not be captured into a CUDA graph ({type(e).__name__}:"
                    f" {e}); the capture was ended and the stream restored. Callables that "
                    f"synchronize, allocate outside the graph pool or copy to pageable memory "
                    f"cannot be captured: use mode='events' or 'cupti'")
                if left:
                    add_note(err, left)
                raise err from e
            graphs.append(g)
            static_outs.append(out)
        s = int(torch.cuda.current_stream(ordinal).cuda_stream)
        common = dict(common, stream=s)
        for o in static_outs if poison else ():
            poison_gpu(o if o is not None else out_kw)
        raw = _core.measure_cuda(_replay, tuple((g,) for g in graphs), None, plan=plan,
                                 unroll=unroll, **common, **loop)
        last = static_outs[-1]
        extra["_static_out"] = last if last is not None else out_kw
        extra["_static_set"] = ((n_graphs - 1) * unroll + unroll - 1) % len(sets)
        # one tensor every graph writes (fn returns its out=): the last replay's, any set's
        extra["_static_shared"] = last is None or n_graphs > 1 and any(
            shares_memory(o, last) for o in static_outs[:-1])
        extra["graph"] = {"captured_with": "torch.cuda.graph", "graphs": n_graphs}
    else:
        graphs = [_core.graph_capture(fn, tuple(sets[gi * unroll:(gi + 1) * unroll]) or
                                      (sets[0],), kwargs or None, stream=s, device=ordinal,
                                      unroll=unroll) for gi in range(n_graphs)]
        if out_kw is not None:
            poison_gpu(out_kw)
        if n_graphs == 1:
            raw = _core.measure_cuda(graphs[0], ((),), None, plan=plan, unroll=unroll,
                                     **common, **loop)
        else:
            raw = _core.measure_cuda(_launch_graph, tuple((g, s) for g in graphs), None,
                                     plan=plan, unroll=unroll, **common, **loop)
        g0 = graphs[0]
        extra["graph"] = {"captured_with": "kbench (cuStreamBeginCapture)", "graphs": n_graphs,
                          "kernel_nodes": g0.kernel_nodes, "memcpy_nodes": g0.memcpy_nodes,
                          "memset_nodes": g0.memset_nodes, "other_nodes": g0.other_nodes}
    # The captured work must be the eager work: a DtoD copy can become a copy-engine memcpy node.
    if timer == "cupti":
        eager = kinds(eager_raw["cuda"].get("names") or {}, len(eager_raw["samples"]), 1)
        replay = kinds(raw["cuda"].get("names") or {}, len(raw["samples"]), unroll)
        extra["graph"]["eager_activity_per_call"] = eager
        extra["graph"]["replay_activity_per_call"] = replay
        if eager != replay:
            warn.append(f"the captured graph does not run the same activity as eager calls: "
                        f"eager {eager} vs replayed {replay} per call (a device-to-device copy "
                        f"becomes a copy-engine memcpy node in a graph, for example)")
    return raw, extra




def _undo_failed_torch_capture(torch: Any, ordinal: int, caller_stream: Any,
                               side: Any) -> Optional[str]:
    """Put back what torch.cuda.graph leaves behind when its capture_end raises (a callable
    that synchronized invalidated the capture): __exit__ stops at capture_end, so the capture
    stream stays current and the default CUDA generator stays in capture mode -- the next
    torch.randn raises "Offset increment outside graph capture". The stream is set back, and an
    empty capture of torch's own runs the generator's capture epilogue. Returns what could not
    be put back, for a note on the CaptureError (None when all was)."""
    import warnings
    device = torch.cuda.current_device()    # set_stream makes the stream's device current too
    try:
        torch.cuda.set_stream(caller_stream)
        torch.cuda.synchronize(ordinal)
        g = torch.cuda.CUDAGraph()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # "The CUDA Graph is empty": it is meant to be
            with torch.cuda.stream(side):
                g.capture_begin()
                g.capture_end()
        del g
        return None
    except Exception as e:                       # the capture's own error is the one to raise
        return (f"restoring torch's state after the failed capture also failed "
                f"({type(e).__name__}: {e}); torch's default CUDA generator may be left in "
                f"capture mode")
    finally:
        torch.cuda.set_stream(caller_stream)
        torch.cuda.set_device(device)


def _replay(g: Any) -> None:
    g.replay()


def _launch_graph(g: Any, s: int) -> None:
    g.launch(s)
