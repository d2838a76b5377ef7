"""Peak memory of one call of the timed operation: Result.memory.

A kernel change that keeps its speed but doubles its workspace is a regression too, so
kbench.bench measures, in one untimed call after the correctness check (the first call carries
one-time allocations: cuBLAS workspaces, Triton autotuning, lazy module loads), how much memory
the call needed. What the figure counts depends on the method: the allocators' (torch, cupy)
count bytes allocated above what was allocated before the call; the driver's, device memory
taken, as a lower bound; the CPU's, resident memory first touched by the call (not bytes
allocated: np.empty of 100 MB touches no page and reads ~0). A figure below the method's
resolution (RESOLUTION) is its noise, and the printed row says "< resolution":

  torch   the caching allocator's peak: torch.cuda.reset_peak_memory_stats, the call,
          max_memory_allocated - memory_allocated before (exact to the allocator's 512 B
          rounding; resets the process's torch peak statistics)
  cupy    the memory pool's allocations and frees during the call, through a cupy MemoryHook
          (the peak of the running sum: exact for the pool)
  driver  anything else on a GPU: the driver's free memory before the call and, polled from a
          thread, during it and after the synchronize: a LOWER BOUND (a short-lived peak
          between polls is missed; the driver maps in 2 MiB pages; another process allocating
          meanwhile adds to it)
  rss     the CPU: the process's peak resident set (VmHWM, reset with /proc/self/clear_refs
          "5") minus the resident set before the call: pages the call touched for the first
          time; memory reused from the heap's free lists is not counted, so it too is a lower
          bound. Resetting VmHWM resets what getrusage's ru_maxrss reports for the process
          later. Unavailable where clear_refs cannot be written (not Linux, a hardened kernel).

Result.memory: {"peak_bytes", "method", "baseline_bytes", "retained_bytes", "lower_bound",
"resolution_bytes", "device", "note"}; peak_bytes is None with "why" when not measurable.
`kbench compare --fail-mem 10%` and the plugin's --kbench-fail-mem gate peak_bytes.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import _core
from .prepare import add_note, device_ordinal

# The smallest growth that counts, per method: below it a change is the method's noise.
RESOLUTION = {"torch": 512, "cupy": 512, "driver": 2 << 20, "rss": 1 << 20}
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def unavailable(why: str, device: str, method: Optional[str] = None) -> Dict[str, Any]:
    return {"peak_bytes": None, "method": method, "device": device, "why": why}


# ------------------------------------------------------------------ CPU: peak RSS

def _status_kb(*keys: str) -> Dict[str, int]:
    out = {}
    with open(_STATUS) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keys:
                out[k] = int(v.split()[0]) * 1024
    return out


def rss_available() -> Tuple[bool, str]:
    """(True, "") where the peak RSS can be reset and read, else (False, why)."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        v = _status_kb("VmHWM", "VmRSS")
        if "VmHWM" not in v or "VmRSS" not in v:
            return False, f"{_STATUS} has no VmHWM/VmRSS"
        return True, ""
    except OSError as e:
        return False, (f"cannot reset the peak RSS ({_CLEAR_REFS}: "
                       f"{e.strerror or e}); peak RSS since process start cannot be attributed "
                       f"to one call")


def measure_rss(call: Callable[[], Any]) -> Dict[str, Any]:
    ok, why = rss_available()
    if not ok:
        return unavailable(why, "cpu", "rss")
    with open(_CLEAR_REFS, "w") as f:
        f.write("5")                     # VmHWM := VmRSS now
    before = _status_kb("VmRSS")["VmRSS"]
    out = call()
    after = _status_kb("VmHWM", "VmRSS")
    del out
    return {"peak_bytes": max(0, after["VmHWM"] - before), "method": "rss",
            "baseline_bytes": before, "retained_bytes": after["VmRSS"] - before,
            "lower_bound": True, "resolution_bytes": RESOLUTION["rss"], "device": "cpu",
            "note": "resident memory first touched by the call: process peak RSS (VmHWM after "
                    "clear_refs) minus RSS before the call; pages reused from the heap, and "
                    "allocated but never touched, are not counted"}


# ------------------------------------------------------------------ GPU

def _torch_in_use(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    values = list(args) + list(kwargs.values())
    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in values):
        return True
    if any(type(a).__module__.startswith("cupy") for a in values):
        return False
    return bool(torch.cuda.is_initialized())


def _cupy_in_use(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    return "cupy" in sys.modules and any(type(a).__module__.startswith("cupy")
                                         for a in list(args) + list(kwargs.values()))


def measure_torch(call: Callable[[], Any], ordinal: int, torch: Any) -> Dict[str, Any]:
    dev = torch.device("cuda", ordinal)
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    reserved = torch.cuda.memory_reserved(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = call()
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    res_peak = torch.cuda.max_memory_reserved(dev)
    retained = torch.cuda.memory_allocated(dev) - base
    del out
    return {"peak_bytes": max(0, peak - base), "method": "torch", "baseline_bytes": base,
            "retained_bytes": retained, "reserved_growth_bytes": max(0, res_peak - reserved),
            "lower_bound": False, "resolution_bytes": RESOLUTION["torch"],
            "device": f"cuda:{ordinal}",
            "note": "torch caching allocator: max_memory_allocated after reset_peak_memory_stats, "
                    "minus memory_allocated before the call (resets torch's peak statistics)"}


def _cupy_hook_class(cupy: Any) -> Any:
    class PeakHook(cupy.cuda.MemoryHook):
        name = "KbenchPeakHook"

        def __init__(self) -> None:
            self.current = 0
            self.peak = 0

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            self.current += mem_size
            self.peak = max(self.peak, self.current)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            self.current -= mem_size
    return PeakHook


def measure_cupy(call: Callable[[], Any], ordinal: int, cupy: Any) -> Dict[str, Any]:
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device(ordinal).synchronize()
    base = pool.used_bytes()
    hook = _cupy_hook_class(cupy)()
    with hook:
        out = call()
        cupy.cuda.Device(ordinal).synchronize()
    retained = pool.used_bytes() - base
    del out
    return {"peak_bytes": max(0, hook.peak), "method": "cupy", "baseline_bytes": base,
            "retained_bytes": retained, "lower_bound": False,
            "resolution_bytes": RESOLUTION["cupy"], "device": f"cuda:{ordinal}",
            "note": "CuPy memory pool: peak of the bytes allocated minus freed during the call "
                    "(a MemoryHook)"}


def measure_driver(call: Callable[[], Any], ordinal: int, mem_info: Callable[[int], Any],
                   synchronize: Callable[[int], Any], poll_s: float = 50e-6) -> Dict[str, Any]:
    """free memory before; the lowest free memory polled during the call and after its
    synchronize. mem_info(ordinal) -> (free, total); synchronize(ordinal) waits for the device."""
    synchronize(ordinal)
    before = int(mem_info(ordinal)[0])
    low = [before]
    failed: List[BaseException] = []
    stop = threading.Event()

    def poll() -> None:
        try:
            while not stop.is_set():
                low[0] = min(low[0], int(mem_info(ordinal)[0]))
                stop.wait(poll_s)
        except Exception as e:      # the peak is then unknown, not the before/after difference
            failed.append(e)

    t = threading.Thread(target=poll, name="kbench-memory-poll", daemon=True)
    t.start()
    try:
        out = call()
        synchronize(ordinal)
    finally:
        stop.set()
        t.join()
    after = int(mem_info(ordinal)[0])
    low[0] = min(low[0], after)
    del out
    if failed:
        return unavailable(f"polling the driver's free memory failed during the call: "
                           f"{type(failed[0]).__name__}: {failed[0]}", f"cuda:{ordinal}",
                           "driver")
    return {"peak_bytes": max(0, before - low[0]), "method": "driver",
            "baseline_bytes": None, "free_before_bytes": before,
            "retained_bytes": before - after, "lower_bound": True,
            "resolution_bytes": RESOLUTION["driver"], "device": f"cuda:{ordinal}",
            "note": "driver free memory (cuMemGetInfo) before, polled during and after the call: "
                    "a lower bound (a peak between polls is missed); another process allocating "
                    "meanwhile adds to it"}


def measure(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any],
            device: str, called_before: bool = True) -> Dict[str, Any]:
    """Peak memory of one call fn(*args, **kwargs) on `device` ("cpu", "cuda[:N]"). When fn
    has not been called yet (no correctness check ran), one plain call goes first, so one-time
    allocations are not counted. Never raises for a measurement it cannot make (the result
    says why); the callable's own exception propagates."""
    raised_by_fn: List[BaseException] = []

    def call() -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raised_by_fn.append(e)
            add_note(e, "raised by the benchmarked callable in kbench's untimed memory call, "
                        "before timing; nothing was timed (memory=False skips it)")
            raise

    if not called_before:
        call()
    if device == "cpu":
        return measure_rss(call)
    try:
        ordinal = device_ordinal(device)
        if _torch_in_use(args, kwargs):
            return measure_torch(call, ordinal, sys.modules["torch"])
        if _cupy_in_use(args, kwargs):
            return measure_cupy(call, ordinal, sys.modules["cupy"])
        mem_info = getattr(_core, "cuda_mem_info", None)
        if mem_info is None:
            return unavailable("this kbench._core has no cuda_mem_info", device, "driver")
        return measure_driver(call, ordinal, mem_info, _core.cuda_synchronize)
    except _core.KbenchError as e:
        if any(e is r for r in raised_by_fn):   # a CudaError of fn's own launch is fn's
            raise
        return unavailable(f"{type(e).__name__}: {e}", device)
