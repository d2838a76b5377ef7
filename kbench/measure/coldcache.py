"""Cold-cache helpers on the Python side: argument footprints and rotation sets.

The flush itself and the rotation cursor live in the C core; this module decides how many
argument sets a rotation needs so their total footprint exceeds the cache by a margin.
"""
from __future__ import annotations

import math
import numbers
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


def _span(ptr: int, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> Tuple[int, int]:
    """[low, high) byte range an array with these byte strides reaches (np.byte_bounds)."""
    low = high = ptr
    for n, st in zip(shape, strides):
        if st < 0:
            low += (n - 1) * st
        else:
            high += (n - 1) * st
    return low, high + itemsize


def _buffers(obj: Any, out: List[Tuple[Any, int, int, int]], seen: set) -> None:
    """Append (memory space, low, high, nbytes) for each array/tensor in obj (containers
    searched). Arguments with bytes but no address get a space of their own: one object."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    try:
        if isinstance(obj, np.ndarray):
            if obj.nbytes:
                out.append(("cpu",) + _span(obj.__array_interface__["data"][0], obj.shape,
                                            obj.strides, obj.itemsize) + (int(obj.nbytes),))
            return
        if callable(getattr(obj, "data_ptr", None)) and callable(getattr(obj, "stride", None)):
            es = int(obj.element_size())                    # torch: strides in elements
            nb = int(obj.numel()) * es
            if nb:
                out.append((str(obj.device),) + _span(int(obj.data_ptr()), tuple(obj.shape),
                                                      [st * es for st in obj.stride()], es)
                           + (nb,))
            return
        ptr = getattr(getattr(obj, "data", None), "ptr", None)     # cupy
        if isinstance(ptr, int) and hasattr(obj, "strides"):
            if obj.nbytes:
                out.append((f"cuda:{obj.device.id}",) + _span(ptr, obj.shape, obj.strides,
                                                              obj.itemsize) + (int(obj.nbytes),))
            return
    except Exception:       # noqa: BLE001 -- no address (sparse, meta ...): counted as one object
        pass
    if isinstance(obj, (tuple, list)):
        for x in obj:
            _buffers(x, out, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            _buffers(x, out, seen)
    elif (nb := nbytes_of(obj)) > 0:
        out.append((("object", id(obj)), 0, nb, nb))


def shares_memory(a: Any, b: Any) -> bool:
    """Whether a and b (arrays, tensors, or containers of them) reach a common byte: the same
    address ranges _buffers finds for the rotation, so one view of memory serves both the
    rotation's count and the check's aliasing questions."""
    if a is b:
        return True
    mine: List[Tuple[Any, int, int, int]] = []
    theirs: List[Tuple[Any, int, int, int]] = []
    _buffers(a, mine, set())
    _buffers(b, theirs, set())
    return any(s1 == s2 and lo1 < hi2 and lo2 < hi1
               for s1, lo1, hi1, _ in mine for s2, lo2, hi2, _ in theirs)


def rotation_footprints(sets: Sequence[Sequence[Any]]) -> Tuple[List[int], int]:
    """Per set, the bytes it holds that no other set holds, and the distinct bytes of all sets:
    a buffer in several sets (the same array, views of it) is counted once, and in no set's
    own bytes, since reusing it between sets keeps it cached. A strided array counts its
    nbytes, spread over the range it reaches."""
    own, total = [0.0] * len(sets), 0.0
    by_space: Dict[Any, list] = {}
    for i, s in enumerate(sets):
        bufs: List[Tuple[Any, int, int, int]] = []
        _buffers(tuple(s), bufs, set())
        for space, low, high, nb in bufs:
            d = nb / (high - low)
            by_space.setdefault(space, []).extend([(low, 1, d, i), (high, -1, d, i)])
    for edges in by_space.values():
        # sweep the edges: each piece of memory counts once, at the densest array over it,
        # and is a set's own when no other set reaches it
        edges.sort(key=lambda e: e[0])
        in_sets: Dict[int, int] = {}
        dens: Dict[float, int] = {}
        at = edges[0][0]
        for x, step, d, i in edges:
            if x > at and in_sets:
                piece = (x - at) * min(1.0, max(dens))
                total += piece
                if len(in_sets) == 1:
                    own[next(iter(in_sets))] += piece
            at = x
            for m, k in ((in_sets, i), (dens, d)):
                m[k] = m.get(k, 0) + step
                if not m[k]:
                    del m[k]
    return [round(x) for x in own], round(total)


def footprint(args: Sequence[Any]) -> int:
    """Distinct bytes of one argument set (an array passed twice counts once)."""
    return rotation_footprints([args])[1]


def clone_arg(obj: Any, memo: Optional[Dict[int, Any]] = None) -> Any:
    """A copy in new memory for arrays/tensors, and for the lists, tuples and dicts that hold
    them; other arguments are shared. `memo` (id -> clone) keeps one object given twice one
    object in the copy."""
    memo = {} if memo is None else memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, np.ndarray):
        new = obj.copy()
    elif callable(getattr(obj, "clone", None)) and hasattr(obj, "element_size"):     # torch
        new = obj.clone()
    elif callable(getattr(obj, "copy", None)) and hasattr(obj, "nbytes") \
            and hasattr(obj, "shape"):                                               # cupy
        new = obj.copy()
    elif type(obj) is list:
        new = memo[id(obj)] = []
        new.extend(clone_arg(x, memo) for x in obj)
    elif type(obj) is dict:
        new = memo[id(obj)] = {}
        new.update((k, clone_arg(v, memo)) for k, v in obj.items())
    elif isinstance(obj, tuple) and (type(obj) is tuple or hasattr(obj, "_fields")):
        items = [clone_arg(x, memo) for x in obj]
        new = type(obj)._make(items) if hasattr(obj, "_fields") else tuple(items)
    else:
        new = obj
    memo[id(obj)] = new
    return new


#: The most argument sets a rotation may have on a cache of up to ROTATION_CACHE_BYTES (each
#: set is built up front: more would cost more memory and set-up than a flush) ...
MAX_ROTATION_SETS = 4096
#: ... and a larger cache scales it, so that the smallest set that can rotate a cache out
#: (2x the cache over MAX_ROTATION_SETS sets: 16 KiB) is the same on every host. A 1 GiB
#: last-level cache with 4096 sets needed sets of 512 KiB.
ROTATION_CACHE_BYTES = 32 << 20


def max_rotation_sets(cache_bytes: Optional[int] = None) -> int:
    """The most argument sets a rotation may have for a cache of `cache_bytes` (None: this
    host's last-level cache): MAX_ROTATION_SETS, scaled past ROTATION_CACHE_BYTES."""
    if cache_bytes is None:
        from .. import _core
        cache_bytes = int(_core.cpu_cache_info()["llc_bytes"])
    return max(MAX_ROTATION_SETS,
               MAX_ROTATION_SETS * -(-max(cache_bytes, 0) // ROTATION_CACHE_BYTES))


def rotation_count(set_bytes: int, cache_bytes: int, margin: float = 2.0,
                   minimum: int = 2, maximum: Optional[int] = None) -> int:
    """Sets needed so that `margin` x cache is exceeded by the sets other than the current one:
    with K sets, K-1 other sets' traffic evicts a set before its next use. ValueError when even
    `maximum` sets (default max_rotation_sets(cache_bytes)) cannot do it: a rotation that small
    is not cold, and is not run as if it were."""
    if set_bytes <= 0:
        raise ValueError("cold_cache='rotate' needs array arguments: the argument set has no "
                         "measurable footprint (pass arrays/tensors, or arg_sets=)")
    if maximum is None:
        maximum = max_rotation_sets(cache_bytes)
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
    ValueError when max_rotation_sets() copies cannot exceed it (see check_rotation_footprint)."""
    per = footprint(args)
    k = rotation_count(per, cache_bytes, margin)
    if max_bytes and per * k > max_bytes:
        raise MemoryError(f"cold_cache='rotate' would need {k} copies of a {per}-byte argument "
                          f"set ({per * k} bytes) to exceed {margin}x the {cache_bytes}-byte "
                          f"cache; pass arg_sets= or use cold_cache='flush'")
    return [args] + [clone_arg(tuple(args)) for _ in range(k - 1)]


def normalize_arg_sets(arg_sets: ArgSets, count: int = 0) -> List[Tuple[Any, ...]]:
    """A list of tuples from a sequence of argument tuples or a factory f(i) -> tuple."""
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral):
        raise TypeError(f"rotate_sets must be an int number of argument sets, got "
                        f"{type(count).__name__} ({count!r:.60})")
    if callable(arg_sets):
        if count <= 0:
            raise ValueError(f"an arg_sets factory needs a count (rotate_sets=) of at least 1, "
                             f"got {count}")
        # each set is built up front: memory, not a flush. The cache is read only past the
        # floor, so an ordinary count costs nothing
        if count > MAX_ROTATION_SETS and count > max_rotation_sets():
            raise ValueError(f"rotate_sets={count} is more than the {max_rotation_sets()} "
                             f"argument sets a rotation may have (MAX_ROTATION_SETS, scaled to "
                             f"the last-level cache); use fewer, larger sets or "
                             f"cold_cache='flush'")
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
                  warn: List[str], what: Optional[str] = None) -> None:
    """User-given argument sets that cannot evict the cache are run as given, but not called
    cold: cold["evicts"] says so, and a warning says why (kbench's own rotation sets are sized
    to evict, or refused)."""
    why = rotation_shortfall(set_bytes, cache_bytes, what=what or f"{len(set_bytes)} arg_sets")
    cold["evicts"] = why is None
    if why:
        warn.append(why + ": run as given, not cold")


SHARED_KWARGS_SHARE = 0.05


def flag_rotation_sets(cold: Dict[str, Any], sets: Sequence[Sequence[Any]], cache_bytes: int,
                       warn: List[str], kwargs: Optional[Dict[str, Any]] = None) -> None:
    """cold's rotation record for the sets run (footprint_bytes: distinct bytes in all,
    set_bytes, arg_sets) and :func:`flag_rotation` on the bytes each set holds alone: sets
    that share memory do not evict each other. Arrays passed as keyword arguments are the same
    in every set (a rotation clones positional arguments only): they stay cached, so a
    rotation with them is not called cold."""
    own, total = rotation_footprints(sets)
    cold.update(footprint_bytes=total, set_bytes=footprint(sets[0]), arg_sets=len(sets))
    shared = sum(own) < total
    flag_rotation(cold, own, cache_bytes, warn,
                  what=f"{len(sets)} arg_sets that share memory (each counted by the bytes no "
                       f"other set holds)" if shared else None)
    kw_bytes = footprint(list((kwargs or {}).values()))
    # a scale or a small table in kwargs is noise beside the rotated bytes; an out= of the
    # arguments' size is not (SHARED_KWARGS_SHARE of what one call touches)
    if kw_bytes > SHARED_KWARGS_SHARE * (footprint(sets[0]) + kw_bytes) and len(sets) > 1:
        names = ", ".join(sorted(k for k, v in (kwargs or {}).items() if footprint([v])))
        cold["shared_kwargs_bytes"] = kw_bytes
        if cold.get("evicts", True):
            cold["evicts"] = False
            warn.append(f"cold_cache='rotate' rotates positional arguments only: the keyword "
                        f"arguments {names} ({kw_bytes} bytes) are the same in every set and "
                        f"stay cached, so the figure is not cold; pass them positionally (or in "
                        f"arg_sets) to rotate them")


# What an argument may be beside the arrays for kbench to know every array a call reads: the
# scalars and names that configure it (np.add(a, b, out=c) reads a and b, writes c).
_PLAIN = (numbers.Number, str, bytes, type(None), np.dtype, type)


def visible_operands(fn: Any, sets: Sequence[Tuple[Any, ...]],
                     kwargs: Optional[Dict[str, Any]]) -> Tuple[Optional[Tuple[Tuple[Any, ...], ...]], str]:
    """Every array each call reads or writes, when kbench can see them all: (one tuple of
    contiguous NumPy arrays per argument set, ""), else (None, why not). Evicting their cache
    lines makes the call cold only if nothing else it reads stays cached, so a callable that
    can reach arrays kbench does not see (a closure, a partial, a bound object, a Python
    function's globals) or an argument that is neither an array nor a plain value keeps the
    write flush."""
    hidden = _hidden_state(fn)
    if hidden:
        return None, hidden
    per_set: List[Tuple[Any, ...]] = []
    owner = getattr(fn, "__self__", None)
    for args in sets:
        found: List[Any] = [owner] if isinstance(owner, np.ndarray) else []
        for x in list(args) + list((kwargs or {}).values()):
            if isinstance(x, np.ndarray):
                if not (x.flags.c_contiguous or x.flags.f_contiguous):
                    return None, "a strided array (its lines interleave with others')"
                found.append(x)
            elif not isinstance(x, _PLAIN):
                return None, f"an argument kbench cannot look into ({type(x).__name__})"
        if not found:
            return None, "no array among the arguments"
        per_set.append(tuple(found))
    return tuple(per_set), ""


def _hidden_state(fn: Any) -> str:
    """Why fn may read arrays that are not among its arguments ('' when it cannot)."""
    import functools
    import types
    if isinstance(fn, functools.partial):
        return "fn is a functools.partial (its bound arguments)"
    if isinstance(fn, types.MethodType):
        return "fn is a bound method (its object)"
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, (types.ModuleType, np.ndarray)):
        return f"fn is a method of a {type(owner).__name__}"
    if isinstance(fn, types.FunctionType) and \
            (fn.__module__ or "").split(".")[0] != "numpy":
        if fn.__closure__:
            return "fn is a closure (its captured variables)"
        # a module-level function reaching arrays through its globals
        for name in fn.__code__.co_names:
            if isinstance(fn.__globals__.get(name), np.ndarray):
                return f"fn reads the global array {name!r}"
        return ""
    if isinstance(fn, (np.ufunc, types.BuiltinFunctionType)):
        return ""
    if (getattr(fn, "__module__", None) or "").split(".")[0] == "numpy":
        return ""       # numpy's own dispatchers (np.dot, np.sum) hold no user arrays
    return f"fn is a {type(fn).__name__} object (its attributes)"
