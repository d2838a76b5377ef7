"""Host-side launch cost, shared by the GPU benchmark scripts (run from the repository root as
``python benchmarks/<script>.py``, which puts this folder on sys.path)."""
import time

import torch


def launch_cost_s(fn, calls: int = 50, reps: int = 5) -> float:
    """Host seconds per call to launch fn, the least of `reps` loops (queue drained between)."""
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return best
