"""kbench.bench: where to run -- this process (kbench.measure.local), or every rank of a group
(kbench.distributed, which runs kbench.measure.local on each rank).

The public entry sits above both, so neither imports it back: kbench.measure.local and the backends
never import this module, and kbench.distributed calls kbench.measure.local directly.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from .measure.local import bench_local
from .options import bench_docstring_section
from .report.result import Result


def bench(fn: Callable[..., Any], *args: Any, group: Any = None,
          dist_timeout_s: Optional[float] = None, **options: Any) -> Result:
    """Benchmark ``fn(*args, **kwargs)``: check it, then time it, and return a Result.

    With check=, the output must match the reference before anything is timed. The output is
    what fn returns, or the argument named by out_arg (a position in args, or a keyword of
    kwargs) for a kernel that writes in place and returns None, or kwargs["out"]; it is
    poisoned (NaN) before the check, so an output fn never writes cannot pass.
    """
    if group is not None:
        from .distributed import bench as bench_on_ranks    # imported only for multi-rank runs
        return bench_on_ranks(fn, *args, group=group, dist_timeout_s=dist_timeout_s, **options)
    return bench_local(fn, *args, **options)


def _public_signature() -> inspect.Signature:
    """bench's signature as help() and editors show it: bench_local's options (written once,
    there), then where to run (group, dist_timeout_s), then the backend's own options."""
    local = inspect.signature(bench_local)
    params = [p for p in local.parameters.values()
              if not p.name.startswith("_") and p.kind is not p.VAR_KEYWORD]
    mine = inspect.signature(bench).parameters
    return local.replace(parameters=params + [mine["group"], mine["dist_timeout_s"]]
                         + [p for p in local.parameters.values() if p.kind is p.VAR_KEYWORD])


bench.__signature__ = _public_signature()   # type: ignore[attr-defined]


# the option list, from the one schema per layer (kbench.options): it cannot drift from the
# defaults and ranges the parsers use
bench.__doc__ = f"{bench.__doc__.rstrip()}\n\n{bench_docstring_section()}\n"
