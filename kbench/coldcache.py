"""Cold-cache helpers on the Python side: argument footprints and rotation sets.

The flush itself and the rotation cursor live in the C core; this module decides how many
argument sets a rotation needs so their total footprint exceeds the cache by a margin.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

ArgSets = Union[Sequence[Tuple[Any, ...]], Callable[[int], Tuple[Any, ...]]]


def nbytes_of(obj: Any) -> int:
    """Bytes of device/host memory an argument occupies (arrays and tensors), else 0."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    nb = getattr(obj, "nbytes", None)             # cupy, jax, numpy-likes
    if isinstance(nb, int):
        return nb
    numel, esize = getattr(obj, "numel", None), getattr(obj, "element_size", None)
    if callable(numel) and callable(esize):       # torch.Tensor
        return int(numel()) * int(esize())
    if isinstance(obj, (tuple, list)):
        return sum(nbytes_of(x) for x in obj)
    if isinstance(obj, dict):
        return sum(nbytes_of(x) for x in obj.values())
    return 0


def footprint(args: Sequence[Any]) -> int:
    return sum(nbytes_of(a) for a in args)


def clone_arg(obj: Any) -> Any:
    """A copy in new memory for arrays/tensors; other arguments are shared."""
    if isinstance(obj, np.ndarray):
        return obj.copy()
    clone = getattr(obj, "clone", None)           # torch
    if callable(clone) and hasattr(obj, "element_size"):
        return clone()
    copy = getattr(obj, "copy", None)             # cupy
    if callable(copy) and hasattr(obj, "nbytes") and hasattr(obj, "shape"):
        return copy()
    return obj


#: The most argument sets a rotation makes by cloning (more would cost more memory than a flush).
MAX_ROTATION_SETS = 4096


def rotation_count(set_bytes: int, cache_bytes: int, margin: float = 2.0,
                   minimum: int = 2, maximum: int = MAX_ROTATION_SETS) -> int:
    """Sets needed so that `margin` x cache is exceeded by the sets other than the current one:
    with K sets, K-1 other sets' traffic evicts a set before its next use. ValueError when even
    `maximum` sets cannot do it: a rotation that small is not cold, and is not run as if it were."""
    if set_bytes <= 0:
        raise ValueError("cold_cache='rotate' needs array arguments: the argument set has no "
                         "measurable footprint (pass arrays/tensors, or arg_sets=)")
    k = math.ceil(margin * cache_bytes / set_bytes) + 1
    if k > maximum:
        check_rotation_footprint([set_bytes] * maximum, cache_bytes, margin,
                                 what=f"{maximum} copies (the most kbench makes)")
    return max(minimum, k)


def rotation_shortfall(set_bytes: Sequence[int], cache_bytes: int, margin: float = 2.0,
                       what: str = "the argument sets") -> Optional[str]:
    """Why a rotation through sets of these sizes cannot evict the cache, or None when it can:
    the sets other than any one of them (the traffic between two uses of a set) must hold at
    least `margin` x the cache, else the data stays cached while the samples are labelled cold.
    A cache size of 0 (unknown) cannot be judged: None."""
    total = sum(set_bytes)
    between = total - max(set_bytes, default=0)
    need = margin * cache_bytes
    if cache_bytes <= 0 or between >= need:
        return None
    return (f"cold_cache='rotate' cannot evict the {_fmt_bytes(cache_bytes)} cache: {what} of "
            f"{_fmt_bytes(max(set_bytes, default=0))} hold {_fmt_bytes(total)} in all, and the "
            f"traffic between two uses of a set must be at least {margin:g}x the cache "
            f"({_fmt_bytes(need)})")


def check_rotation_footprint(set_bytes: Sequence[int], cache_bytes: int, margin: float = 2.0,
                             what: str = "the argument sets") -> None:
    """ValueError with :func:`rotation_shortfall`'s reason when the rotation cannot evict."""
    why = rotation_shortfall(set_bytes, cache_bytes, margin, what)
    if why is not None:
        raise ValueError(f"{why}. Use cold_cache='flush', or pass arg_sets= with larger or "
                         f"more sets")


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def make_rotation_sets(args: Tuple[Any, ...], cache_bytes: int, margin: float = 2.0,
                       max_bytes: int = 0) -> List[Tuple[Any, ...]]:
    """Clone `args` until the sets exceed margin x cache. `max_bytes` > 0 caps the total.
    ValueError when MAX_ROTATION_SETS copies cannot exceed it (see check_rotation_footprint)."""
    per = footprint(args)
    k = rotation_count(per, cache_bytes, margin)
    if max_bytes and per * k > max_bytes:
        raise MemoryError(f"cold_cache='rotate' would need {k} copies of a {per}-byte argument "
                          f"set ({per * k} bytes) to exceed {margin}x the {cache_bytes}-byte "
                          f"cache; pass arg_sets= or use cold_cache='flush'")
    return [args] + [tuple(clone_arg(a) for a in args) for _ in range(k - 1)]


def normalize_arg_sets(arg_sets: ArgSets, count: int = 0) -> List[Tuple[Any, ...]]:
    """A list of tuples from a sequence of argument tuples or a factory f(i) -> tuple."""
    if callable(arg_sets):
        if count <= 0:
            raise ValueError("an arg_sets factory needs a count (rotate_sets=)")
        sets = [arg_sets(i) for i in range(count)]
    else:
        sets = list(arg_sets)
    out = []
    for i, s in enumerate(sets):
        if not isinstance(s, tuple):
            s = tuple(s) if isinstance(s, list) else (s,)
        out.append(s)
    if not out:
        raise ValueError("arg_sets is empty")
    return out


def flag_rotation(cold: Dict[str, Any], set_bytes: Sequence[int], cache_bytes: int,
                  warn: List[str]) -> None:
    """User-given argument sets that cannot evict the cache are run as given, but not called
    cold: cold["evicts"] says so, and a warning says why (kbench's own rotation sets are sized
    to evict, or refused)."""
    why = rotation_shortfall(set_bytes, cache_bytes, what=f"{len(set_bytes)} arg_sets")
    cold["evicts"] = why is None
    if why:
        warn.append(why + ": run as given, not cold")
