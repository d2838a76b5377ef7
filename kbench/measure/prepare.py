"""Before timing: the steps that every path through kbench.bench shares, whatever the backend.

The case's name, the device its arguments live on, one bench at a time per process, and the
correctness check with the output poisoned first. kbench.measure.local, each rank's run in
kbench.distributed, the backends (kbench.backends.cuda, kbench.backends.hip, kbench.measure.memory)
and the pytest plugin all use these, so this module imports no backend and no framework: torch and
CuPy are asked only through sys.modules, when the process already imported them.
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
from ..correctness.compare import compare

F = TypeVar("F", bound=Callable[..., Any])

# kbench.bench's defaults other than None, written once: kbench.measure.local.bench_local's
# signature
# (which kbench.bench shows as its own, and kbench.distributed calls with only what its caller
# gave) and kbench.distributed read them here. The loop's and the backends' defaults live in C
# (_core.LOOP_DEFAULTS, _core.CUDA_DEFAULTS).
BENCH_DEFAULTS: Dict[str, Any] = {"cold_cache": "flush", "device": "auto", "rotate_sets": 0,
                                  "memory": True}

# One bench at a time per process, its untimed calls (check, memory probe) included: the C
# loop holds its own lock only while timing, and a memory probe overlapping another thread's
# loop would disturb its times and read its allocations (peak RSS is per process). Reentrant:
# kbench.distributed's bench holds it around each rank's kbench.measure.local run.
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


def held(x: Any, parameters: Union[int, None] = 1):
    """x, then what it holds that a callable reads: a torch.nn.Module's parameters and buffers
    (the first `parameters` of them; None: all), or the items of a short list, tuple or dict
    (16 at most). Read only: nothing is called but the module's iterators."""
    yield x
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.nn.Module):
        yield from itertools.islice(itertools.chain(x.parameters(), x.buffers()), parameters)
        return
    items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
    yield from itertools.islice(items, 16)


def _gpu_in(x: Any) -> Any:
    """x, or the first GPU object x holds (a module's first parameter, an item of a short list,
    tuple or dict: held), where one is on a GPU; else None."""
    return next((o for o in held(x) if is_gpu_object(o)), None)


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


def carried_signature(fn: Any, limit: int = 32) -> str:
    """What the callable carries (_carried), as shapes, dtypes and short values: two
    `lambda: a + a` over arrays of other sizes are other benchmarks though one source."""
    from ..report._format import describe
    try:
        return ", ".join(f"{label}={describe(value)}"
                         for label, value in itertools.islice(_carried(fn), limit))
    except Exception as e:      # an exotic callable: say what stopped the walk
        return f"unreadable ({type(e).__name__})"


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
    wrote cannot pass the check: writeable NumPy float, complex and integer arrays, ml_dtypes
    ones (bfloat16, float8 ...), torch tensors on any device, CuPy arrays, each of a tuple or
    list of them (bool has no value to spare). True when anything was filled."""
    if isinstance(out, (tuple, list)):
        return any([poison(o) for o in out])
    if isinstance(out, np.ndarray):
        return out.flags.writeable and _poison_numpy(out)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(out, torch.Tensor):
        return poison_gpu(out)          # CPU tensors too: poison_gpu fills any tensor
    return out is not None and is_gpu_object(out) and poison_gpu(out)


def _poison_numpy(out: np.ndarray) -> bool:
    dt = out.dtype
    if dt.kind in "fc":
        out.fill(complex(np.nan, np.nan) if dt.kind == "c" else np.nan)
        return True
    if dt.kind == "u":
        out.fill(np.iinfo(dt).max - 6)      # -7 in two's complement, as on the GPU
        return True
    if dt.kind == "i":
        out.fill(-7)
        return True
    if dt.kind != "V" or dt.fields is not None or \
            getattr(dt.type, "__module__", "") != "ml_dtypes":
        return False                        # bool, str, records: nothing to spare
    ml = sys.modules.get("ml_dtypes")
    try:
        info = ml.finfo(dt)                 # bfloat16, float8, float6, float4 ...
    except Exception:                       # noqa: BLE001 -- not a float: int4, uint4, int2
        info = None
    if info is not None:
        probe = np.full(1, np.nan, dtype=dt)
        # a format without NaN (float4_e2m1fn) stores NaN as -0, a value outputs often hold
        out.fill(np.nan if np.isnan(probe.astype(np.float32))[0] else float(info.max))
        return True
    try:
        lo, hi = int(ml.iinfo(dt).min), int(ml.iinfo(dt).max)
    except Exception:                       # noqa: BLE001 -- an ml_dtypes type not known here
        return False
    out.fill(-7 if lo <= -7 else (hi - 6 if lo == 0 and hi >= 6 else lo))
    return True


def poison_gpu(obj: Any) -> bool:
    """Fill a torch tensor (a ROCm torch's too, or a CPU one) or a CuPy array with NaN,
    integers with a pattern, each of a tuple or list of them; False where nothing was (the
    GPU backends' outputs are never host arrays)."""
    if isinstance(obj, (tuple, list)):
        return any([poison_gpu(o) for o in obj])
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        with torch.no_grad():               # a leaf that requires grad refuses fill_ otherwise
            if obj.is_floating_point():
                obj.fill_(float("nan"))
            elif obj.is_complex():
                obj.fill_(complex(float("nan"), float("nan")))
            else:
                obj.fill_(-7)
        return True
    if type(obj).__module__.startswith("cupy") and hasattr(obj, "fill"):
        obj.fill(np.nan if obj.dtype.kind in "fc" else -7)
        return True
    return False


def _copy_of(x: Any) -> Any:
    """x's values in new memory (NumPy, torch, CuPy arrays, a tuple or list of them), or None
    for anything else (a tuple or list with anything else in it too)."""
    if isinstance(x, (tuple, list)):
        items = [_copy_of(o) for o in x]
        return None if any(o is None for o in items) else _same_sequence(x, items)
    if isinstance(x, np.ndarray):
        return x.copy()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().clone()
    if type(x).__module__.startswith("cupy") and hasattr(x, "copy"):
        return x.copy()
    return None


def _same_sequence(like: Any, items: list) -> Any:
    """items as a sequence of like's type: a list, a tuple, a namedtuple or torch's topk
    result; a plain tuple where the type cannot be rebuilt."""
    if isinstance(like, list):
        return items
    try:
        return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)
    except Exception:                       # noqa: BLE001 -- a tuple subclass of its own
        return tuple(items)


def _restore(x: Any, saved: Any) -> None:
    if isinstance(x, (tuple, list)):
        for o, s in zip(x, saved):
            _restore(o, s)
    elif isinstance(x, np.ndarray):
        np.copyto(x, saved)
    elif hasattr(x, "copy_"):           # torch
        torch = sys.modules.get("torch")
        with torch.no_grad():
            x.copy_(saved)
    else:                               # CuPy
        x[...] = saved


def _detached(ref: Any, inputs: list, name: str) -> Any:
    """ref with each part that shares memory with an argument copied (fn may overwrite the
    argument); a tuple or list part by part. A part that cannot be copied is kept, with a
    warning: the check then reads whatever fn leaves there."""
    if isinstance(ref, (tuple, list)):
        return _same_sequence(ref, [_detached(r, inputs, name) for r in ref])
    if not any(shares_memory(ref, a) for a in inputs):
        return ref
    copy = _copy_of(ref)
    if copy is None:
        import warnings
        warnings.warn(f"kbench.bench({name}): the check= reference ({type(ref).__name__}) "
                      f"shares memory with an argument and kbench cannot copy it, so it is "
                      f"compared as fn leaves it; return a copy from the check= callable",
                      RuntimeWarning, stacklevel=4)
        return ref
    return copy


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
        add_note(e, f"raised by kbench.bench({name})'s check= callable (the reference); nothing "
                 f"was timed")
        raise
    if ref is None:
        raise TypeError(f"kbench.bench({name}): the check= callable returned None; it must "
                        f"return the reference output, computed from fn's positional "
                        f"arguments; nothing was timed")
    return _detached(ref, list(args) + list(kwargs.values()), name)


def _is_seq(x: Any) -> bool:
    return isinstance(x, (tuple, list))


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (numbers.Number, np.generic))


def _rows_of(x: Any, n: int) -> bool:
    shape = getattr(x, "shape", None)
    return not _is_seq(x) and shape is not None and len(shape) >= 1 and shape[0] == n


def _pairs(out: Any, ref: Any, path: str, found: list) -> None:
    """Pair the outputs with the references, nested tuples and lists item by item; a tuple of
    numbers on either side is one array. ValueError when the two do not line up."""
    seq_out = _is_seq(out) and not all(_is_scalar(o) for o in out)
    seq_ref = _is_seq(ref) and not all(_is_scalar(r) for r in ref)
    if not (seq_out or seq_ref):
        found.append((path, out, ref))
        return
    where = f" (at output {path})" if path else ""
    # a stacked array against a sequence of its rows: what np.asarray of the sequence compared
    if seq_out and _rows_of(ref, len(out)):
        ref = [ref[i] for i in range(len(out))]
    elif seq_ref and _rows_of(out, len(ref)):
        out = [out[i] for i in range(len(ref))]
    if not (_is_seq(out) and _is_seq(ref)):
        what_out = f"{len(out)} outputs" if _is_seq(out) else f"one {type(out).__name__}"
        what_ref = f"{len(ref)}" if _is_seq(ref) else f"one {type(ref).__name__}"
        raise ValueError(f"kbench check: fn returned {what_out}{where}, the reference (check=) "
                         f"has {what_ref}: return the same structure from both")
    if len(out) != len(ref):
        raise ValueError(f"kbench check: fn returned {len(out)} outputs{where}, the reference "
                         f"(check=) has {len(ref)}: return the same number from both")
    for i, (o, r) in enumerate(zip(out, ref)):
        _pairs(o, r, f"{path}[{i}]" if path else str(i), found)


def compare_outputs(out: Any, ref: Any, rtol: Any, atol: Any) -> Tuple[Any, str]:
    """(Comparison, which output) of out against ref; a tuple or list of arrays or tensors
    (topk's values and indices, a fused op's out and residual), nested ones too, is compared
    output by output -- numpy cannot stack GPU tensors, nor arrays of different shapes -- and
    the failing one (or the one closest to its limit) is named. ValueError when the outputs
    and references do not pair up (2 outputs, 3 references)."""
    pairs: list = []
    _pairs(out, ref, "", pairs)
    if len(pairs) == 1 and not pairs[0][0]:
        return compare(out, ref, rtol=rtol, atol=atol), ""
    n = len(out)
    worst, which, margin = None, "", -1.0
    for path, o, r in pairs:
        c = compare(o, r, rtol=rtol, atol=atol)
        label = f"output {path} of {n}"
        if not c.ok:
            return c, label
        m = (abs(c.worst_out - c.worst_ref) / c.worst_tol
             if c.worst_index is not None and c.worst_tol else 0.0)
        if worst is None or m > margin:
            worst, which, margin = c, label, m
    return worst, which


def _call_for_check(fn, args, kwargs, name, named, out_arg):
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        add_note(e, f"raised by kbench.bench({name})'s first call, the correctness check; "
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
    try:
        poisoned = poison(target)
        return _check_poisoned(fn, args, kwargs, ref, rtol, atol, name, named, out_arg,
                               target, saved, poisoned)
    except BaseException as e:
        # poison, fn, the compare or a failed check raised: the caller's output (an in-place
        # input) gets back what it held, not the poison nor half of fn's writes
        if saved is not None:
            try:
                _restore(target, saved)
            except Exception as r:      # noqa: BLE001 -- the first error is the one to see
                add_note(e, f"kbench could not restore the output's contents after it: "
                         f"{type(r).__name__}: {r}")
        raise


def _check_poisoned(fn, args, kwargs, ref, rtol, atol, name, named, out_arg, target, saved,
                    poisoned):
    out = _call_for_check(fn, args, kwargs, name, named, out_arg)
    cmp, which = compare_outputs(out, ref, rtol, atol)
    if cmp.ok:
        return dict(cmp.to_dict(), output=which or None)
    if not (poisoned and saved is not None):
        raise _failed(name, cmp, which)
    _restore(target, saved)
    out = _call_for_check(fn, args, kwargs, name, named, out_arg)
    unchanged = _unchanged(target, saved)
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


def _unchanged(target: Any, saved: Any) -> bool:
    if isinstance(target, (tuple, list)):
        return all(_unchanged(t, s) for t, s in zip(target, saved))
    return compare(target, saved, rtol=0.0, atol=0.0, equal_nan=True).ok


def add_note(e: BaseException, text: str) -> None:
    """Say where a user's exception came from, without replacing it. Python 3.10 has no
    add_note: the note goes to __notes__ as PEP 678 keeps it there (pytest shows it; 3.10's
    own traceback does not)."""
    if hasattr(e, "add_note"):          # Python >= 3.11
        e.add_note(text)
        return
    try:
        notes = getattr(e, "__notes__", None)
        e.__notes__ = (list(notes) if isinstance(notes, list) else []) + [text]
    except AttributeError:              # an exception type without a __dict__
        pass
