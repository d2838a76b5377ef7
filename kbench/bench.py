"""kbench.bench: where to run -- this process (kbench.local), or every rank of a group
(kbench.distributed, which runs kbench.local on each rank).

The public entry sits above both, so neither imports it back: kbench.local and the backends
never import this module, and kbench.distributed calls kbench.local directly.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from .local import bench_local
from .options import bench_docstring_section
from .prepare import BENCH_DEFAULTS
from .result import Result


def bench(fn: Callable[..., Any], *args: Any,
          flops: Optional[float] = None,
          bytes: Optional[float] = None,
          cold_cache: Optional[str] = BENCH_DEFAULTS["cold_cache"],
          device: str = BENCH_DEFAULTS["device"],
          mode: Optional[str] = None,
          kwargs: Optional[Dict[str, Any]] = None,
          arg_sets: Any = None,
          rotate_sets: int = BENCH_DEFAULTS["rotate_sets"],
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
          memory: bool = BENCH_DEFAULTS["memory"],
          profile: Optional[bool] = None,
          group: Any = None,
          dist_timeout_s: Optional[float] = None,
          **backend_options: Any) -> Result:
    """Benchmark ``fn(*args, **kwargs)``: check it, then time it, and return a Result.

    With check=, the output must match the reference before anything is timed. The output is
    what fn returns, or the argument named by out_arg (a position in args, or a keyword of
    kwargs) for a kernel that writes in place and returns None, or kwargs["out"]; it is
    poisoned (NaN) before the check, so an output fn never writes cannot pass.
    """
    # every parameter but fn, args, group and the backend's options, as given
    given = {k: v for k, v in locals().items()
             if k not in ("fn", "args", "group", "dist_timeout_s", "backend_options")}
    if group is not None:
        from .distributed import bench as bench_on_ranks    # imported only for multi-rank runs
        return bench_on_ranks(fn, *args, group=group, dist_timeout_s=dist_timeout_s, **given,
                              **backend_options)
    return bench_local(fn, *args, **given, **backend_options)


# the option list, from the one schema per layer (kbench.options): it cannot drift from the
# defaults and ranges the parsers use
bench.__doc__ = f"{bench.__doc__.rstrip()}\n\n{bench_docstring_section()}\n"
