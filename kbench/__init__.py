"""kbench: trustworthy kernel microbenchmarks.

    import kbench
    r = kbench.bench(fn, *args, flops=..., bytes=...)   # correctness first, cold cache, stop rule
    kbench.compare(out, ref)                            # max abs/rel error, rel L2, cosine, worst element

Import is cheap and never touches a GPU: the CUDA backend, torch and CuPy adapters are loaded
on first use.
"""
from typing import Any as _Any

from . import _core  # noqa: F401  (kbench._core, eagerly: submodules shadow lazy names)
from ._core import (CaptureError, CudaError, CuptiBusy, CuptiError, HipError, KbenchError,
                    LibraryNotFound, NvmlError, NvrtcError, RocmSmiError)
from .bench import bench
from .workflow.ab import ABResult, ab
from .correctness.compare import Comparison, assert_close, compare
from .report.result import Result
from .workflow.sweep import SweepResult, sweep
from ._version import __version__



def _after_fork_in_child() -> None:
    # A child forked while another thread measured inherits its locks held, by a thread that
    # does not exist there: every bench of the child waited forever.
    import threading
    from .measure import prepare
    _core._after_fork_in_child()
    prepare._bench_lock = threading.RLock()


import os as _os
_os.register_at_fork(after_in_child=_after_fork_in_child)


def release_cupti() -> bool:
    """Detach CUPTI now if kbench left it attached between back-to-back measurements.

    A sweep, an A/B or a test session shares one CUPTI attach (each attach/detach cycle costs
    device memory CUPTI never returns); kbench detaches it by itself KBENCH_CUPTI_LINGER_S (1 s)
    after the last measurement. Call this before starting torch.profiler, Nsight or another
    CUPTI client right after measuring. True when there was something to release."""
    return bool(_core.HAVE_CUDA and _core.cupti_release())

__all__ = ["bench", "release_cupti", "compare", "assert_close", "Result", "Comparison", "ab", "sweep",
           "ABResult", "SweepResult",
           "KbenchError", "LibraryNotFound", "CudaError", "CaptureError", "CuptiError",
           "CuptiBusy", "NvmlError", "NvrtcError", "HipError", "RocmSmiError", "ProfileRun",
           "__version__"]

# Loaded on first attribute access, to keep `import kbench` light.
_LAZY = {
    "testing": ("kbench.testing", None),
    "ProfileRun": ("kbench.measure.profile", "ProfileRun"),   # bench's return in profile mode
}


def __getattr__(name: str) -> _Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'kbench' has no attribute {name!r}")
    import importlib
    mod = importlib.import_module(target[0])
    value = mod if target[1] is None else getattr(mod, target[1])
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
