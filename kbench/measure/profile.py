"""Run once for a profiler: the checked setup, then exactly one call inside a profiler range.

When a figure surprises, the next step is Nsight Compute or Nsight Systems on exactly the
measured call. ``kbench.bench(..., profile=True)``, or ``KBENCH_PROFILE=1`` in the environment
so that scripts need no change, does what bench does before it times -- the correctness check,
a warm-up of the callable, the cold-cache flush as configured -- then one call between
``cuProfilerStart`` and ``cuProfilerStop`` and inside an NVTX range named after the case, and
returns a :class:`ProfileRun` (a Result with no samples and NaN figures) instead of timing::

    ncu --profile-from-start off -o case python bench_script.py
    nsys profile --capture-range=cudaProfilerApi -o case python bench_script.py

ncu profiles the kernels of every range, so the one call of each case; nsys by default stops at
the first range's end (``--capture-range-end=stop-shutdown``): add
``--capture-range-end=repeat`` for a script with several cases.

Under a profiler's injection (``CUDA_INJECTION64_PATH`` is set: Nsight's CUPTI owns the
activity API, so kbench's CUPTI timer would be refused with CuptiBusy) a GPU case switches to
this mode by itself; ``profile=False`` or ``KBENCH_PROFILE=0`` keeps timing (then pass
``mode="events"``). On the CPU the same steps run (warm-up, last-level-cache flush, one call)
with no profiler range: a ``perf record`` of the process sees the call once.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

import numpy as np

from .. import _core
from .prepare import device_ordinal
from ..report.result import Result, untimed_stats

ENV = "KBENCH_PROFILE"
INJECTION_ENV = "CUDA_INJECTION64_PATH"
NCU_COMMAND = "ncu --profile-from-start off -o <report> python <script>"
NSYS_COMMAND = "nsys profile --capture-range=cudaProfilerApi -o <report> python <script>"
ANNOTATION_PREFIX = "kbench.measure.profile::"
WARMUP_MIN_CALLS = 2
WARMUP_MAX_CALLS = 1000
# under kbench.distributed: the same number of warm-up calls on every rank
RANKS_WARMUP_CALLS = 10


def _env_flag(value: str) -> Optional[bool]:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{ENV}={value!r}: expected 1 or 0")


def wanted(profile: Optional[bool], device: str) -> str:
    """Why this bench call runs once for a profiler ('' when it is timed as usual): the
    profile= argument wins, then KBENCH_PROFILE, then a profiler's injection (GPU only)."""
    if profile is not None:
        if not isinstance(profile, (bool, np.bool_)):
            raise TypeError(f"kbench.bench: profile must be True, False or None, got "
                            f"{type(profile).__name__} ({profile!r:.60})")
        return "profile=True" if profile else ""
    env = os.environ.get(ENV)
    if env is not None:
        return f"{ENV}={env}" if _env_flag(env) else ""
    injected = os.environ.get(INJECTION_ENV)
    if injected and device != "cpu":
        return (f"{INJECTION_ENV}={injected}: a profiler injected into this process owns "
                f"CUPTI, so kbench runs the call once for it instead of timing")
    return ""


@dataclass(repr=False)
class ProfileRun(Result):
    """What bench returns in profile mode: one call inside a profiler range, not timed. A
    Result with no samples and NaN figures (``r.median``, ``r.stats``); ``r.profile`` (True)
    and ``r.extra["profile"]`` say what ran: why profile mode, the warm-up, the flush, the
    range (cuProfilerStart/Stop, the NVTX range's name) and the profiler command lines."""

    profile: bool = True

    def __repr__(self) -> str:
        p = self.extra.get("profile", {})
        rng = p.get("range", {})
        ok = "" if self.correctness is None else \
            f"; correctness {'ok' if self.correctness.get('ok') else 'FAILED'}"
        return (f"kbench {self.name}: profile run, not timed ({p.get('why')}): "
                f"{p.get('warmup_calls')} warm-up calls, cold cache {self.cold_cache.get('mode')}, "
                f"then one call in {rng.get('profiler') or 'no profiler range'}"
                f"{', NVTX range ' + repr(rng.get('nvtx_name')) if rng.get('nvtx') else ''}"
                f"{ok}")


# ------------------------------------------------------------------ NVTX

class _Nvtx:
    """range_push/range_pop from torch.cuda.nvtx, CuPy's nvtx, or libnvToolsExt (dlopen'ed on
    first use); None when none is available."""

    def __init__(self) -> None:
        self.source: Optional[str] = None
        self.why: Optional[str] = None
        self._push: Optional[Callable[[str], Any]] = None
        self._pop: Optional[Callable[[], Any]] = None
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                nvtx = torch.cuda.nvtx
                self._push, self._pop, self.source = nvtx.range_push, nvtx.range_pop, \
                    "torch.cuda.nvtx"
                return
            except Exception as e:
                self.why = f"torch.cuda.nvtx: {e}"
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            try:
                from cupy.cuda import nvtx
                self._push, self._pop, self.source = nvtx.RangePush, nvtx.RangePop, "cupy.cuda.nvtx"
                return
            except Exception as e:
                self.why = f"cupy.cuda.nvtx: {e}"
        import ctypes
        for lib in ("libnvToolsExt.so.1", "libnvToolsExt.so"):
            try:
                dll = ctypes.CDLL(lib)
                push, pop = dll.nvtxRangePushA, dll.nvtxRangePop
                push.argtypes, push.restype, pop.restype = [ctypes.c_char_p], ctypes.c_int, \
                    ctypes.c_int
                self._push = lambda name: push(name.encode())
                self._pop = pop
                self.source = lib
                return
            except (OSError, AttributeError) as e:
                self.why = f"no torch or CuPy imported, and {lib}: {e}"

    def push(self, name: str) -> bool:
        if self._push is None:
            return False
        self._push(name)
        return True

    def pop(self) -> None:
        if self._pop is not None:
            self._pop()


# ------------------------------------------------------------------ the run

def _warm_up(call: Callable[[], Any], sync: Callable[[], None], seconds: float,
             calls: Optional[int] = None) -> int:
    """Calls until `seconds` have passed (at least WARMUP_MIN_CALLS, at most WARMUP_MAX_CALLS),
    each waited for, so lazy initialisation, compilation and autotuning are done; exactly
    `calls` when given (every rank of a multi-rank run calls fn equally often: a time-based
    count differs between ranks, and a collective inside fn then waits forever)."""
    if calls is not None:
        for _ in range(calls):
            call()
            sync()
        return calls
    n, end = 0, time.perf_counter() + max(0.0, float(seconds))
    while n < WARMUP_MIN_CALLS or (time.perf_counter() < end and n < WARMUP_MAX_CALLS):
        call()
        sync()
        n += 1
    return n


def _torch_annotation(name: str) -> Any:
    """torch.profiler.record_function around the call when torch is imported, so a
    torch.profiler trace shows the window too (torch.profiler does not follow cuProfilerStart)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.profiler.record_function(f"{ANNOTATION_PREFIX}{name}")
    except Exception:
        return None


class _Gpu:
    """The device calls profile mode makes; a test replaces it to run the control flow without
    a GPU."""

    def __init__(self, device: str, stream: Any) -> None:
        from ..backends import cuda
        cuda.require_backend()
        self.ordinal = device_ordinal(device)
        self.stream = cuda.stream_handle(stream, self.ordinal)
        self.l2 = int(cuda.device_info(self.ordinal).get("l2_bytes") or 0)
        self._flush: Any = None
        self._value = 0

    def sync(self) -> None:
        _core.cuda_synchronize(self.ordinal)

    def flush(self, nbytes: int) -> int:
        """Write `nbytes` (0: 2x L2) on the call's stream and wait: the call starts cold."""
        nbytes = int(nbytes or 2 * self.l2)
        if self._flush is None or self._flush.nbytes != nbytes:
            self._flush = _core.DeviceBuffer(nbytes, self.ordinal)
        self._value = (self._value + 1) % 251 + 1
        self._flush.memset(self._value, self.stream)
        self.sync()
        return nbytes

    def start(self) -> None:
        _core.cuda_profiler_start(self.ordinal)

    def stop(self) -> None:
        _core.cuda_profiler_stop(self.ordinal)


class _Cpu:
    """The CPU's steps: the last-level-cache flush, no profiler range."""

    ordinal = None

    def sync(self) -> None:
        pass

    def flush(self, nbytes: int) -> int:
        nbytes = int(nbytes or 2 * int(_core.cpu_cache_info()["llc_bytes"]))
        _core.cpu_flush(nbytes)
        return nbytes

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def run_once(fn: Callable[..., Any], sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any], *,
             name: str, device: str, plan: Any, flush_bytes: Optional[int], warmup_s: float,
             correctness: Optional[Dict[str, Any]], stream: Any = None,
             backend: Any = None, warmup_calls: Optional[int] = None) -> ProfileRun:
    """Warm up, flush (plan.cold "flush" or "rotate": the first argument set after a flush),
    then one call of fn(*sets[0], **kwargs) inside the profiler range and an NVTX range named
    `name`. plan: kbench.bench's (_core.plan), measurement 'profile'; its profile says why.
    backend: the device steps (tests pass a fake)."""
    args = sets[0]
    # the callable launches on its framework's current stream: make the stream kbench flushes
    # on that one, as a timed run does, or the profiled call runs on another stream than the
    # flush and than the one a timed bench measured
    current: ContextManager[Any] = contextlib.nullcontext()
    if device != "cpu":
        from ..backends import cuda
        current = cuda.on_stream(stream, device_ordinal(device), sets, kwargs)
    with current:
        if backend is None:      # inside: its flush goes to the stream made current
            backend = _Cpu() if device == "cpu" else _Gpu(device, stream)
        return _run_once(fn, args, kwargs, name=name, device=device, plan=plan,
                         flush_bytes=flush_bytes, warmup_s=warmup_s,
                         correctness=correctness, backend=backend, warmup_calls=warmup_calls)


def _run_once(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any], *,
              name: str, device: str, plan: Any, flush_bytes: Optional[int], warmup_s: float,
              correctness: Optional[Dict[str, Any]], backend: Any,
              warmup_calls: Optional[int]) -> ProfileRun:

    def call() -> Any:
        return fn(*args, **kwargs)

    warm = _warm_up(call, backend.sync, warmup_s, warmup_calls)
    flushed = backend.flush(int(flush_bytes or 0)) if plan.cold is not None else 0
    nvtx = _Nvtx() if device != "cpu" else None
    rng: Dict[str, Any] = {"profiler": None if device == "cpu" else "cuProfilerStart/Stop",
                           "nvtx_name": name, "nvtx": None}
    annotate = _torch_annotation(name) if device != "cpu" else None
    if annotate is not None:
        rng["torch_record_function"] = f"{ANNOTATION_PREFIX}{name}"
    backend.sync()
    backend.start()
    try:
        if nvtx is not None and nvtx.push(name):
            rng["nvtx"] = nvtx.source
        try:
            if annotate is not None:
                with annotate:
                    out = call()
            else:
                out = call()
            backend.sync()
        finally:
            if rng["nvtx"]:
                nvtx.pop()
    finally:
        backend.stop()
    del out
    if nvtx is not None and not rng["nvtx"]:
        rng["nvtx_why"] = nvtx.why
    cold = {"mode": plan.cold or "none", "flush_bytes": flushed,
            "cache": "CPU last-level cache" if device == "cpu" else "GPU L2"}
    if plan.rotate:
        cold["note"] = "profile mode flushes before the one call instead of rotating"
    info = {"why": plan.profile, "warmup_calls": warm, "calls_in_range": 1, "range": rng,
            "commands": {"ncu": NCU_COMMAND, "nsys": NSYS_COMMAND},
            "injection": os.environ.get(INJECTION_ENV)}
    run = ProfileRun(name=name, device=device, backend="profile",
                     samples=np.empty(0, dtype=np.float64), stats=untimed_stats(),
                     stop={"stop": "profile", "criterion": None}, cold_cache=cold,
                     correctness=correctness, extra={"profile": info},
                     warnings=["profile run: one call inside the profiler range, not timed"])
    try:
        from ..provenance.harness import collect
        run.metadata = {"harness": collect(fn, args, kwargs),
                        "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "argv": list(sys.argv)}
    except Exception as e:          # provenance must never lose the run
        run.metadata = {"error": f"{type(e).__name__}: {e}"}
    return run
