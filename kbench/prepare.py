"""Before timing: the steps that every path through kbench.bench shares, whatever the backend.

The case's name, the device its arguments live on, one bench at a time per process, and the
correctness check with the output poisoned first. kbench.local, each rank's run in
kbench.distributed, the backends (kbench.cuda, kbench.hip, kbench.memory) and the pytest plugin
all use these, so this module imports no backend and no framework: torch and CuPy are asked
only through sys.modules, when the process already imported them.
"""
from __future__ import annotations

import functools
import itertools
import numbers
import sys
import threading
import types
from typing import Any, Callable, Dict, Tuple, TypeVar, Union

import numpy as np

from .coldcache import shares_memory
from .compare import compare

F = TypeVar("F", bound=Callable[..., Any])

# kbench.bench's defaults other than None, written once: the public signature (kbench.bench),
# kbench.local.bench_local (which kbench.distributed calls with only what its caller gave) and
# kbench.distributed read them here. The loop's and the backends' defaults live in C
# (_core.LOOP_DEFAULTS, _core.CUDA_DEFAULTS).
BENCH_DEFAULTS: Dict[str, Any] = {"cold_cache": "flush", "device": "auto", "rotate_sets": 0,
                                  "memory": True}

# One bench at a time per process, its untimed calls (check, memory probe) included: the C
# loop holds its own lock only while timing, and a memory probe overlapping another thread's
# loop would disturb its times and read its allocations (peak RSS is per process). Reentrant:
# kbench.distributed's bench holds it around each rank's kbench.local run.
_bench_lock = threading.RLock()


def one_at_a_time(f: F) -> F:
    @functools.wraps(f)
    def serialised(*args: Any, **kwargs: Any) -> Any:
        with _bench_lock:
            return f(*args, **kwargs)
    return serialised  # type: ignore[return-value]


def name_of(fn: Any) -> str:
    """The case's default name: the callable's module and qualified name."""
    mod = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if qual is None:
        return type(fn).__name__
    return f"{mod}.{qual}" if mod and mod not in ("__main__", "builtins") else qual


def is_gpu_object(x: Any) -> bool:
    dev = getattr(x, "device", None)
    if dev is not None and getattr(dev, "type", None) == "cuda":        # torch
        return True
    if type(x).__module__.startswith("cupy"):
        return True
    dl = getattr(x, "__dlpack_device__", None)                         # any DLPack producer
    if callable(dl) and not isinstance(x, np.ndarray):
        try:
            return int(dl()[0]) in (2, 3, 13)     # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        except Exception:
            return False
    try:                        # Numba's device arrays and other CUDA Array Interface producers
        return isinstance(getattr(x, "__cuda_array_interface__", None), dict)
    except Exception:           # torch raises it for a CPU tensor
        return False


def _gpu_module(x: Any) -> Any:
    """A torch.nn.Module's first parameter (or buffer) where it is on a GPU, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.nn.Module):
        return None
    for t in itertools.chain(x.parameters(), x.buffers()):
        return t if is_gpu_object(t) else None
    return None


def _gpu_in(x: Any) -> Any:
    """x, or the first GPU object x holds (a module's parameter, an item of a short list, tuple
    or dict), where one is on a GPU; else None."""
    if is_gpu_object(x):
        return x
    found = _gpu_module(x)
    if found is not None:
        return found
    items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
    for item in itertools.islice(items, 16):
        if is_gpu_object(item):
            return item
    return None


def _carried(fn: Any, depth: int = 0):
    """(label, object) for what a callable carries besides its arguments: a partial's
    arguments, a bound method's object, a closure's cells, defaults, and the module globals
    its code names (a script's or notebook's `lambda: torch.mm(a, b)` holds a and b there);
    one level into the functions it names. A callable object is itself."""
    if depth > 1:
        return
    if isinstance(fn, functools.partial):
        for i, a in enumerate(fn.args):
            yield f"partial argument {i}", a
        for k, v in fn.keywords.items():
            yield f"partial argument {k!r}", v
        yield from _carried(fn.func, depth + 1)
        return
    owner = getattr(fn, "__self__", None)
    code = getattr(fn, "__code__", None)
    if owner is not None and not isinstance(owner, (types.ModuleType, type)):
        yield "the bound method's object", owner
        for label, attr in _attributes(owner, code):
            yield f"attribute {label!r}", attr
    if code is None:
        if not isinstance(fn, (types.BuiltinFunctionType, types.MethodType, type)):
            yield "the callable object", fn
            call = getattr(getattr(type(fn), "__call__", None), "__code__", None)
            for label, attr in _attributes(fn, call):
                yield f"attribute {label!r}", attr
        return
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:               # an empty cell
            continue
        yield f"captured {name!r}", value
        # `lambda: self.mm(self.a, self.b)` inside a method: self's attributes the code names
        for label, attr in _attributes(value, code):
            yield f"{name}.{label}", attr
    for i, d in enumerate(fn.__defaults__ or ()):
        yield f"default argument {i}", d
    for k, d in (fn.__kwdefaults__ or {}).items():
        yield f"default argument {k!r}", d
    scope = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in scope and not isinstance(scope[name], types.ModuleType):
            value = scope[name]
            if isinstance(value, types.FunctionType):
                yield from _carried(value, depth + 1)
            else:
                yield f"global {name!r}", value
                for label, attr in _attributes(value, code):
                    yield f"{name}.{label}", attr


def _attributes(owner: Any, code: Any):
    """(name, value) of the owner's attributes that the code names (self.weight in
    `def run(self)`); none for an owner without a __dict__ or a module."""
    names = getattr(code, "co_names", ())
    fields = None if isinstance(owner, (types.ModuleType, type)) else \
        getattr(owner, "__dict__", None)
    if isinstance(fields, dict):
        for name in names:
            if name in fields:
                yield name, fields[name]


def gpu_carried(fn: Any) -> Union[Tuple[str, Any], None]:
    """(what, object) for the first GPU tensor or array the callable carries (_carried), or
    None. Read only: nothing is called."""
    try:
        for label, value in _carried(fn):
            found = _gpu_in(value)
            if found is not None:
                return label, found
    except Exception:           # an exotic callable: it carries nothing kbench can read
        return None
    return None


def _cuda_of(x: Any) -> str:
    """'cuda:N' for the GPU a GPU object lives on: torch's device.index, CuPy's device.id, a
    DLPack producer's device id; 'cuda' (the current device) when it says none. A CuPy array on
    GPU 1 once read 'cuda', and was timed in device 0's context."""
    dev = getattr(x, "device", None)
    for idx in (getattr(dev, "index", None), getattr(dev, "id", None)):
        if isinstance(idx, int) and not isinstance(idx, bool):
            return f"cuda:{idx}"
    dl = getattr(x, "__dlpack_device__", None)
    if callable(dl):
        try:
            kind, idx = dl()
            if int(kind) in (2, 13):            # kDLCUDA, kDLCUDAManaged
                return f"cuda:{int(idx)}"
        except Exception:                       # noqa: BLE001 -- no device to read: current
            pass
    return "cuda"


def choose_device(device: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                  fn: Any = None) -> Tuple[str, Union[Tuple[str, Any], None]]:
    """(device, carried): 'auto' is CUDA when an argument lives on a GPU, or (given fn) a
    tensor or array the callable carries does (gpu_carried: a closure over GPU tensors times on
    the GPU, not as a host-timed launch), else the CPU; carried is gpu_carried's (what, object)
    where that chose the GPU, else None. 'cuda' is the GPU the arguments live on; 'cuda:N'
    must be it (ValueError): kbench's gate, events and flush would go to another GPU."""
    if device in ("cpu", "host"):
        return "cpu", None
    explicit = isinstance(device, str) and (device == "cuda" or device.startswith("cuda:"))
    if device != "auto" and not explicit:
        raise ValueError(f"kbench.bench: device must be 'auto', 'cpu' or 'cuda[:N]', "
                         f"got {device!r}")
    where = next((_cuda_of(a) for a in list(args) + list(kwargs.values()) if is_gpu_object(a)),
                 None)
    if explicit:
        if where is not None and where != "cuda" and device != "cuda" and where != device:
            raise ValueError(f"kbench.bench: device={device!r}, but the arguments live on "
                             f"{where}: pass device={where!r} (or 'auto')")
        return (where if device == "cuda" and where is not None else device), None
    if where is not None:
        return where, None
    carried = gpu_carried(fn) if fn is not None else None
    return (_cuda_of(carried[1]), carried) if carried is not None else ("cpu", None)


def resolve_device(device: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                   fn: Any = None) -> str:
    """choose_device's device alone."""
    return choose_device(device, args, kwargs, fn)[0]


def device_ordinal(device: str) -> int:
    """The GPU ordinal of 'cuda' (torch's current device, else 0) or 'cuda:N'."""
    if device in ("cuda", "auto"):
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return int(torch.cuda.current_device())
        return 0
    try:
        return int(device.split(":", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"device must be 'cuda' or 'cuda:N', got {device!r}") from None


def named_output(args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 out_arg: Union[int, str, None]) -> Any:
    """The argument out_arg names (a position in args or a keyword of kwargs); None if none."""
    if out_arg is None:
        return None
    if isinstance(out_arg, (bool, np.bool_)) or not isinstance(out_arg, (numbers.Integral, str)):
        raise TypeError(f"kbench.bench: out_arg must be a position in args (int) or a keyword "
                        f"name (str), got {type(out_arg).__name__} ({out_arg!r:.60})")
    if isinstance(out_arg, str):
        if out_arg not in kwargs:
            raise ValueError(f"kbench.bench: out_arg={out_arg!r} is not a keyword in kwargs "
                             f"(keywords: {sorted(kwargs)})")
        return kwargs[out_arg]
    if not -len(args) <= out_arg < len(args):
        raise ValueError(f"kbench.bench: out_arg={out_arg} is not a position in the "
                         f"{len(args)} positional argument(s)")
    return args[out_arg]


def poison(out: Any) -> bool:
    """Fill an output with NaN (integers with a -7 pattern) so an output the callable never
    wrote cannot pass the check: writeable NumPy float and integer arrays (bool has no value
    to spare), torch tensors and CuPy arrays. True when it was filled."""
    if isinstance(out, np.ndarray):
        if not out.flags.writeable or out.dtype.kind not in "fiu":
            return False
        if out.dtype.kind == "u":
            out.fill(np.iinfo(out.dtype).max - 6)      # -7 in two's complement, as on the GPU
        else:
            out.fill(np.nan if out.dtype.kind == "f" else -7)
        return True
    return out is not None and is_gpu_object(out) and poison_gpu(out)


def poison_gpu(obj: Any) -> bool:
    """Fill a torch tensor (a ROCm torch's too) or a CuPy array with NaN, integers with a
    pattern, each of a tuple or list of them; False where nothing was (the GPU backends'
    outputs are never host arrays)."""
    if isinstance(obj, (tuple, list)):
        return any([poison_gpu(o) for o in obj])
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            obj.fill_(float("nan"))
        else:
            obj.fill_(-7)
        return True
    if type(obj).__module__.startswith("cupy") and hasattr(obj, "fill"):
        obj.fill(np.nan if obj.dtype.kind == "f" else -7)
        return True
    return False


def _copy_of(x: Any) -> Any:
    """x's values in new memory (NumPy, torch, CuPy arrays), or None for anything else."""
    if isinstance(x, np.ndarray):
        return x.copy()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().clone()
    if type(x).__module__.startswith("cupy") and hasattr(x, "copy"):
        return x.copy()
    return None


def _restore(x: Any, saved: Any) -> None:
    if isinstance(x, np.ndarray):
        np.copyto(x, saved)
    elif hasattr(x, "copy_"):           # torch
        x.copy_(saved)
    else:                               # CuPy
        x[...] = saved


def _returned_none(name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> TypeError:
    where = (f"out_arg=<position> (one of 0..{len(args) - 1})" if args else "") + \
        (" or " if args and kwargs else "") + \
        (f"out_arg=<keyword> (one of {sorted(kwargs)})" if kwargs else "")
    how = (f"name the argument that holds the output with {where}" if where else
           "a closure that writes a captured array must return it (e.g. "
           "`def f(): kernel(x); return x`)")
    return TypeError(f"kbench.bench({name}): check= was given but the callable returned None, so "
                     f"there is no output to compare; nothing was timed. If it writes its "
                     f"output in place, {how}.")


def _reference(check: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], name: str) -> Any:
    """The reference: check itself, or check(*args) computed before fn runs (fn may change its
    arguments in place), copied where it shares memory with an argument fn may write."""
    if not callable(check):
        return check
    try:
        ref = check(*args)
    except Exception as e:
        _note(e, f"raised by kbench.bench({name})'s check= callable (the reference); nothing "
                 f"was timed")
        raise
    if ref is None:
        raise TypeError(f"kbench.bench({name}): the check= callable returned None; it must "
                        f"return the reference output, computed from fn's positional "
                        f"arguments; nothing was timed")
    if any(shares_memory(ref, a) for a in list(args) + list(kwargs.values())):
        ref = _copy_of(ref)
    return ref


def compare_outputs(out: Any, ref: Any, rtol: Any, atol: Any) -> Tuple[Any, str]:
    """(Comparison, which output) of out against ref; a tuple or list of arrays or tensors
    (topk's values and indices, a fused op's out and residual) is compared output by output --
    numpy cannot stack GPU tensors, nor arrays of different shapes -- and the failing one (or
    the one closest to its limit) is named."""
    if not (isinstance(out, (tuple, list)) and isinstance(ref, (tuple, list))
            and len(out) == len(ref) > 1 and all(hasattr(o, "shape") for o in out)):
        return compare(out, ref, rtol=rtol, atol=atol), ""
    worst, which, margin = None, "", -1.0
    for i, (o, r) in enumerate(zip(out, ref)):
        c = compare(o, r, rtol=rtol, atol=atol)
        if not c.ok:
            return c, f"output {i} of {len(out)}"
        m = (abs(c.worst_out - c.worst_ref) / c.worst_tol
             if c.worst_index is not None and c.worst_tol else 0.0)
        if worst is None or m > margin:
            worst, which, margin = c, f"output {i} of {len(out)}", m
    return worst, which


def _call_for_check(fn, args, kwargs, name, named, out_arg):
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        _note(e, f"raised by kbench.bench({name})'s first call, the correctness check; "
                 f"nothing was timed")
        raise
    if out_arg is not None:
        return named            # the caller said where the output is: not the return value
    if out is None:
        if "out" not in kwargs:
            raise _returned_none(name, args, kwargs)
        return kwargs["out"]
    return out


def _failed(name: str, cmp: Any, which: str, note: str = "") -> AssertionError:
    what = f" ({which})" if which else ""
    return AssertionError(f"kbench.bench({name}): output{what} does not match the reference; "
                          f"nothing was timed.{note}\n{cmp.report()}")


def check_before_timing(fn, args, kwargs, check, rtol, atol, name,
                        out_arg: Union[int, str, None] = None) -> Dict[str, Any]:
    """Call fn once on a poisoned output and compare what it produced with check (a reference,
    or a callable computing it, before that call, from the same arguments); AssertionError when
    they differ. A callable that reads its output too (in place) reads the poison: on a
    mismatch the output's contents are restored and fn called again, which passes only if fn
    changed them and matches -- an output it never writes still fails."""
    named = named_output(args, kwargs, out_arg)
    target = named if out_arg is not None else kwargs.get("out")
    ref = _reference(check, args, kwargs, name)
    try:
        saved = _copy_of(target)
    except Exception:       # noqa: BLE001 -- no memory for a second copy of a huge output:
        saved = None        # checked as before, poisoned, without the in-place retry
    poisoned = poison(target)
    out = _call_for_check(fn, args, kwargs, name, named, out_arg)
    cmp, which = compare_outputs(out, ref, rtol, atol)
    if cmp.ok:
        return dict(cmp.to_dict(), output=which or None)
    if not (poisoned and saved is not None):
        raise _failed(name, cmp, which)
    _restore(target, saved)
    out = _call_for_check(fn, args, kwargs, name, named, out_arg)
    unchanged = compare(target, saved, rtol=0.0, atol=0.0, equal_nan=True).ok
    if unchanged:
        raise _failed(name, cmp, which, " The output was filled with NaN (integers: -7) before "
                      "the call, so that one the callable never writes cannot pass; called "
                      "again on its original contents, the callable left them unchanged.")
    cmp2, which2 = compare_outputs(out, ref, rtol, atol)
    if not cmp2.ok:
        raise _failed(name, cmp2, which2, " (Called on the output's original contents: a "
                      "first call on a poisoned output did not match either.)")
    # in place: the output is an input too, so poisoning it fed the poison in
    return dict(cmp2.to_dict(), output=which2 or None, in_place=True)


def _note(e: BaseException, text: str) -> None:
    """Say where a user's exception came from, without replacing it."""
    if hasattr(e, "add_note"):          # Python >= 3.11
        e.add_note(text)
