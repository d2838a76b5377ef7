"""kbench.measure.local: one process's bench -- check correctness, then time a callable with the C
core's loop on the CPU or a GPU backend, and put the Result together.

kbench.bench calls it for a single-process run; kbench.distributed calls it on every rank, with
the rank reducer (_ranks) and the barrier (_pre_sample). It imports the backends (lazily, so
`import kbench` stays light) and never kbench.distributed or kbench.bench, which sit above it.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import numbers
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from .. import _core
from ..report._format import fmt_bytes, fmt_time
from ..roofline.ceilings import add_datasheet, ceiling_warnings, cpu_ceilings
from .coldcache import (flag_rotation_sets, make_rotation_sets, normalize_arg_sets,
                        visible_operands)
from .prepare import (BENCH_DEFAULTS, check_before_timing, choose_device, device_ordinal,
                      name_of, named_output, one_at_a_time)
from ..report.result import Result, dependence_text, saturation_text

_LOOP_KEYS = ("warmup_s", "min_samples", "max_samples", "max_time_s", "target", "ci_level",
              "criterion")
_host_timer_cache: Optional[Dict[str, Any]] = None


@one_at_a_time
def bench_local(fn: Callable[..., Any], *args: Any,
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
                _ranks: Any = None,
                _pre_sample: Optional[Callable[[], None]] = None,
                _history: Optional[bool] = None,
                _pool_ladder: Optional[bool] = None,
                **backend_options: Any) -> Result:
    """kbench.bench on this process alone (its docstring has the options). _ranks and
    _pre_sample: kbench.distributed's rank reducer and barrier, for the C loop. _history=False
    keeps this run out of the run history (kbench.ab's short trials, which are not runs of
    their own); None keeps it. _pool_ladder=True (the pytest plugin's --kbench-save) also
    times a CPU call with its thread pools at each size a busy host may size them to
    (threadpools.ladder), so that a gate meets a sized figure with its like."""
    t_start = time.perf_counter()
    c = check_call(fn, args, flops=flops, bytes=bytes, name=name, kwargs=kwargs,
                   flush_bytes=flush_bytes, arg_sets=arg_sets, rotate_sets=rotate_sets,
                   out_arg=out_arg, device=device, cold_cache=cold_cache, mode=mode,
                   memory=memory, backend_options=backend_options, check=check, rtol=rtol,
                   atol=atol, profile=profile)
    flops, bytes, kwargs, sets, name = c.flops, c.bytes, c.kwargs, c.sets, c.name
    dev, carried, gpu, plan = c.device, c.carried, c.gpu, c.plan
    kind = plan.backend
    # Only what the caller gave crosses to C: the loop's defaults live in the C core alone
    # (_core.LOOP_DEFAULTS), which also validates every value.
    loop = {k: v for k, v in dict(warmup_s=warmup_s, min_samples=min_samples,
                                  max_samples=max_samples, max_time_s=max_time_s, target=target,
                                  ci_level=ci_level, criterion=criterion,
                                  # multi-rank (kbench.distributed): the C loop's reducer and
                                  # the measure functions' barrier before each call
                                  ranks=_ranks, pre_sample=_pre_sample).items()
            if v is not None}

    if dev != "cpu":
        _refuse_capture()
    correctness = None
    if check is not None:
        with _callers_stream(kind, backend_options, dev, sets, kwargs):
            correctness = check_before_timing(fn, sets[0], kwargs, check, rtol, atol, name,
                                              out_arg)
    if plan.measurement == "profile":
        from . import profile as _profile
        return _profile.run_once(fn, sets, kwargs, name=name, device=dev, plan=plan,
                                 flush_bytes=flush_bytes,
                                 warmup_s=loop.get("warmup_s",
                                                   _core.LOOP_DEFAULTS["warmup_s"]),
                                 correctness=correctness,
                                 stream=backend_options.get("stream"),
                                 # ranks: a count every rank agrees on, not a time
                                 warmup_calls=(_profile.RANKS_WARMUP_CALLS
                                               if _ranks is not None else None))
    mem = None
    if memory:
        from .memory import measure as _measure_memory
        with _callers_stream(kind, backend_options, dev, sets, kwargs):
            mem = _measure_memory(fn, sets[0], kwargs, dev, called_before=check is not None)

    if dev == "cpu":
        if device == BENCH_DEFAULTS["device"] and _gpu_initialized():
            host_note = ("timed on the CPU with the host clock, although this process uses a "
                         "GPU: a callable that launches GPU work returns before it finishes, so "
                         "pass device='cuda' (or GPU tensors as arguments) to time it there")
        else:
            host_note = None
        raw, cold, extra = _run_host_fitted(fn, sets, kwargs, plan, flush_bytes, loop,
                                            ladder=bool(_pool_ladder))
        device_name, backend = "cpu", "host"
        peaks = cpu_ceilings(fn, sets[0], kwargs, named_output(sets[0], kwargs, out_arg),
                             _cpu_peaks, extra)
        if host_note:
            extra.setdefault("warnings", []).append(host_note)
    else:
        # an in-place kernel's output is its input: not poisoned before the timed run, nor
        # re-checked after it (the timed calls applied it again and again)
        in_place = bool(correctness and correctness.get("in_place"))
        raw, cold, extra, device_name, peaks = gpu.run(
            fn, sets, kwargs, plan=plan, flush_bytes=flush_bytes, device=dev, loop=loop,
            check=None if in_place else check, rtol=rtol, atol=atol,
            output=named_output(sets[0], kwargs, out_arg), **backend_options)
        if in_place:
            extra["post_check"] = {"skipped": "in place: the timed calls re-applied fn to its "
                                              "own output"}
        backend = raw["backend"]
        if carried is not None:
            extra["device_from"] = (f"{carried[0]} of {name} ({type(carried[1]).__name__} on "
                                    f"{dev}); device='cpu' times it on the host instead")
        if peaks:       # which measured GPU ceiling "% of peak" is of (peaks_gpu measures them)
            peaks = {"bytes_name": "GPU HBM copy" if peaks.get("bytes_ceiling") != "theoretical"
                     else "GPU theoretical memory bandwidth", **peaks}

    samples = np.asarray(raw["samples"], dtype=np.float64)
    stats = _core.summarize(samples, raw.get("ci_level", _core.LOOP_DEFAULTS["ci_level"]))
    stop = {k: raw[k] for k in ("stop", "criterion", "target", "achieved", "warmup_iters",
                                "warmup_s", "sampling_s", "min_samples", "max_samples",
                                "max_time_s", "budget", "resolution_s", "at_resolution",
                                "sampling_overlap_s", "tentative_dropped", "resettle_dropped",
                                "resettle_sampled_s") if k in raw}
    result = Result(name=name, device=device_name, backend=backend, samples=samples,
                    stats=stats, stop=stop, cold_cache=cold, flops=flops, bytes=bytes,
                    correctness=correctness, extra=extra, memory=mem)
    result.throughput = throughput(stats["median"], flops, bytes, peaks)
    add_datasheet(result.throughput, peaks)
    result.warnings.extend(_warnings(result))
    result.warnings.extend(extra.pop("warnings", []))
    extra["plan"] = plan.as_dict()      # how it was measured, decided once (_core.plan)
    result.metadata = _metadata(device_name, result, extra)
    from ..provenance.harness import collect
    result.metadata["harness"] = collect(fn, sets[0], kwargs)
    # where the time went: r.stop's warmup_s and sampling_s are parts of wall_s, this call's
    stop.update({k: raw[k] for k in ("warmup_stable", "warmup_tol") if k in raw},
                wall_s=time.perf_counter() - t_start)
    # kbench.distributed states the ranks' MAX, not one rank's run
    if _ranks is None and _history is not False:
        from .runhistory import record
        record(result)
    return result


class CheckedCall(NamedTuple):
    """A call's options as kbench.bench will use them, once check_call accepted them."""
    flops: Optional[float]
    bytes: Optional[float]
    kwargs: Dict[str, Any]
    sets: List[Tuple[Any, ...]]
    name: str
    device: str                 # 'cpu' or 'cuda:N'
    carried: Any                # what fn carries that chose the GPU (None: its arguments)
    gpu: Any                    # the GPU backend module, None on the CPU
    plan: Any                   # _core.Plan: backend, measurement, timer, cold (decided once)


def check_call(fn: Callable[..., Any], args: Tuple[Any, ...], *, flops: Any, bytes: Any,
               name: Any, kwargs: Any, flush_bytes: Any, arg_sets: Any, rotate_sets: Any,
               out_arg: Any, device: str, cold_cache: Any, mode: Any, memory: Any,
               backend_options: Dict[str, Any], check: Any = None, rtol: Any = None,
               atol: Any = None, profile: Any = None, timed: bool = True) -> CheckedCall:
    """Everything kbench.bench refuses before it calls fn, in one place, and the plan it is
    measured by: bench_local runs it first, and the pytest plugin's --kbench-disable runs it
    (timed=False) instead of timing, so a benchmark that would fail when timed fails on
    CPU-only CI too. The loop's own values (max_time_s, ...) are checked by the C loop."""
    if not callable(fn):
        raise TypeError(f"kbench.bench: fn must be callable, got {type(fn).__name__} "
                        f"({fn!r:.60})")
    _refuse_deferred(fn)
    flops, bytes = _count("flops", flops), _count("bytes", bytes)
    _check_tolerances(check, rtol, atol)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"kbench.bench: name must be a str, got {type(name).__name__} "
                        f"({name!r:.60})")
    if not isinstance(memory, (bool, np.bool_)):
        raise TypeError(f"kbench.bench: memory must be True or False, got "
                        f"{type(memory).__name__} ({memory!r:.60})")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kbench.bench: kwargs must be a dict of keyword arguments for fn, got "
                        f"{type(kwargs).__name__}")
    if flush_bytes is not None and (isinstance(flush_bytes, (bool, np.bool_))
                                    or not isinstance(flush_bytes, numbers.Integral)):
        raise TypeError(f"kbench.bench: flush_bytes must be an int number of bytes, got "
                        f"{type(flush_bytes).__name__} ({flush_bytes!r:.60})")
    if arg_sets is not None and not (callable(arg_sets) or isinstance(arg_sets, (list, tuple))):
        raise TypeError(f"kbench.bench: arg_sets must be a list of argument tuples or a "
                        f"factory f(i) -> tuple, got {type(arg_sets).__name__}")
    kwargs = dict(kwargs or {})
    if arg_sets is not None and args:
        raise TypeError("kbench.bench: pass either positional args or arg_sets=, not both")
    sets = normalize_arg_sets(arg_sets, rotate_sets) if arg_sets is not None else [tuple(args)]
    named_output(sets[0], kwargs, out_arg)       # a bad out_arg fails before anything runs
    # carried: 'auto' chose the GPU from what fn carries, not its arguments (the result says so)
    dev, carried = choose_device(device, sets[0], kwargs, fn)
    kind, gpu = _gpu_backend(backend_options) if dev != "cpu" else ("host", None)
    _check_backend_options(kind, () if gpu is None else gpu.OPTIONS, backend_options)
    # How the call is measured is decided once, in C, before anything calls fn: cold_cache and
    # mode checked, the timer chosen (CUPTI asked about only when a CUDA plan needs it, and
    # not in profile mode, where a profiler owns it). Python reads the plan from here on.
    from .profile import wanted
    why = wanted(profile, dev)
    # Not timed (--kbench-disable): CUPTI is not asked about, and a mode='cupti' bench is not
    # refused on a CI host that has no libcupti; that plan is never measured with.
    facts = getattr(gpu, "cupti_facts", None) if timed else _CUPTI_NOT_ASKED
    plan = _core.plan(kind, cold_cache, mode, profile=why or None, cupti=facts)
    _check_cold_options(plan, flush_bytes, arg_sets, rotate_sets)
    return CheckedCall(flops, bytes, kwargs, sets, name or name_of(fn), dev, carried, gpu, plan)


def _CUPTI_NOT_ASKED() -> Tuple[bool, bool, str]:
    return True, False, "not asked: checked without timing"


def _check_tolerances(check: Any, rtol: Any, atol: Any) -> None:
    """rtol/atol are the check's tolerances: without check= nothing would use them, and a
    caller who meant to check the output would get a timing of an unchecked kernel."""
    given = [f"{k}={v!r:.30}" for k, v in (("rtol", rtol), ("atol", atol)) if v is not None]
    if given and check is None:
        raise ValueError(f"kbench.bench: rtol and atol are the correctness check's "
                         f"tolerances, but {' and '.join(given)} came without check= (a "
                         f"reference output, or a callable computing it): pass check= or drop "
                         f"them")


def _check_cold_options(plan: Any, flush_bytes: Any, arg_sets: Any, rotate_sets: Any) -> None:
    """Options that would be silently ignored: a flush size without a flush, a set count for
    sets already given as a list."""
    if flush_bytes is not None and not plan.flush:
        raise ValueError(f"kbench.bench: flush_bytes applies to cold_cache='flush', not "
                         f"cold_cache={plan.cold!r}")
    if flush_bytes is not None and (flush_bytes <= 0 or flush_bytes > _MAX_FLUSH_BYTES):
        raise ValueError(f"kbench.bench: flush_bytes must be 1 .. {_MAX_FLUSH_BYTES} bytes "
                         f"(1 TiB), got {flush_bytes}; leave it out for 2x the cache")
    if rotate_sets != BENCH_DEFAULTS["rotate_sets"] and not callable(arg_sets):
        raise ValueError(f"kbench.bench: rotate_sets (the count of an arg_sets factory's sets) "
                         f"applies to arg_sets=f(i) -> tuple, got rotate_sets={rotate_sets!r} "
                         f"with arg_sets as {type(arg_sets).__name__}")


_MAX_FLUSH_BYTES = 1 << 40


def _gpu_backend(backend_options: Dict[str, Any]) -> Tuple[str, Any]:
    """("hip", kbench.backends.hip) when backend="hip" (or a ROCm torch) picks it, else ("cuda",
    kbench.backends.cuda). The GPU modules are imported only when a GPU is asked for."""
    from ..backends import hip
    if hip.selected(backend_options):
        return "hip", hip
    from ..backends import cuda
    return "cuda", cuda


def _refuse_deferred(fn: Callable[..., Any]) -> None:
    """A call of an async or generator function returns at once without running its body, so
    its 'figure' would be the coroutine's or generator's creation (about 1 us)."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"kbench.bench: {name_of(fn)} is an async function: calling it returns "
                        f"a coroutine without running it, so only its creation would be timed; "
                        f"time a synchronous callable, e.g. lambda: asyncio.run(fn())")
    if inspect.isgeneratorfunction(fn):
        raise TypeError(f"kbench.bench: {name_of(fn)} is a generator function: calling it "
                        f"returns a generator without running its body, so only its creation "
                        f"would be timed; time one that consumes it, e.g. lambda: list(fn())")


_BACKEND_NAMES = {"host": "the CPU backend", "cuda": "the CUDA backend", "hip": "the HIP backend"}


def _check_backend_options(kind: str, known: Tuple[str, ...], options: Dict[str, Any]) -> None:
    """A misspelt or misplaced option fails here, naming itself, before the check, the memory
    probe or a profile calls fn (which, given the wrong arguments, would raise fn's own error
    instead)."""
    unknown = sorted(set(options) - set(known))
    if not unknown:
        return
    takes = f"it takes {list(known)}" if known else "it takes none"
    hints = []
    if "args" in unknown:
        hints.append("fn's arguments are passed positionally, kbench.bench(fn, x, y), or as "
                     "arg_sets=[(x, y), ...]")
    import difflib                      # only on this error: `import kbench` stays light
    names = list(inspect.signature(bench_local).parameters)[2:] + list(known)
    gpu_only = set()
    if kind == "host":              # the GPU modules, on this error only
        from ..backends import cuda, hip
        gpu_only = set(cuda.OPTIONS) | set(hip.OPTIONS)
    for_fn = []
    for name in unknown:
        if name == "args":
            continue
        if name in gpu_only:
            hints.append(f"{name!r} is a GPU option: pass device='cuda' or GPU arguments")
            continue
        close = difflib.get_close_matches(name, [n for n in names if not n.startswith("_")
                                                 and n != "backend_options"], n=1)
        if close:
            hints.append(f"{name!r}: did you mean {close[0]!r}?")
        for_fn.append(name)
    if for_fn:      # kbench.bench(np.add, a, b, out=c): out= was meant for fn
        given = ", ".join(f"{n!r}: ..." for n in for_fn)
        hints.append(f"if {'these are' if len(for_fn) > 1 else 'it is'} fn's keyword "
                     f"argument{'s' if len(for_fn) > 1 else ''}, pass kwargs={{{given}}}")
    raise TypeError(f"kbench.bench: unexpected options for {_BACKEND_NAMES[kind]}: {unknown} "
                    f"({takes})" + "".join(f"; {h}" for h in hints))


def _count(label: str, value: Any) -> Union[int, float, None]:
    """flops=/bytes=: None, or a finite non-negative real (Python or NumPy scalar, not bool),
    as a plain int or float so the Result serialises."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"kbench.bench: {label} must be a number of {label} per call, got "
                        f"{type(value).__name__} ({value!r:.60})")
    plain = int(value) if isinstance(value, numbers.Integral) else float(value)
    try:
        finite = math.isfinite(plain)
    except OverflowError:       # an int past float's range: GB/s could not be computed
        raise ValueError(f"kbench.bench: {label} must be a non-negative number of {label} per "
                         f"call that fits a float, got an int of {len(str(plain))} digits "
                         f"({str(plain)[:20]}...)") from None
    if not finite or plain < 0:
        raise ValueError(f"kbench.bench: {label} must be a non-negative number of {label} per "
                         f"call, got {value!r}")
    return plain


def _gpu_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _refuse_capture() -> None:
    """Before any untimed call (check, memory probe): inside someone else's stream capture
    they would be captured too, and a synchronize there invalidates the capture."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and \
            torch.cuda.is_current_stream_capturing():
        raise _core.CaptureError("the current stream is being captured into a CUDA graph: "
                                 "kbench cannot measure inside a capture")


def _callers_stream(kind: str, backend_options: Dict[str, Any], dev: str,
                    sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any]) -> Any:
    """The untimed calls (the check, the memory probe) on the stream the timed ones use: a
    CUDA bench given stream= made it current for its timed calls only, and fn's first calls
    ran on another stream."""
    stream = backend_options.get("stream")
    if kind != "cuda" or stream is None:
        return contextlib.nullcontext()
    from ..backends import cuda
    return cuda.on_stream(stream, device_ordinal(dev), sets, kwargs)


def _run_host(fn, sets, kwargs, plan, flush_bytes, loop):
    caches = _core.cpu_cache_info()
    llc = int(caches["llc_bytes"])
    warn: List[str] = []
    if plan.rotate and len(sets) == 1:
        if llc <= 0:
            raise ValueError("kbench.bench: cold_cache='rotate' cannot size its argument sets: "
                             "the last-level cache size is unknown (set KBENCH_LLC_BYTES, or "
                             "pass arg_sets=)")
        # the copies may not take more than half the memory free now
        sets = make_rotation_sets(sets[0], llc, margin=2.0, max_bytes=_available_bytes() // 2)
    evict, hidden = visible_operands(fn, sets, kwargs) if plan.flush else (None, "")
    raw = _core.measure_host(fn, tuple(sets), kwargs or None, plan=plan,
                             flush_bytes=int(flush_bytes or 0), evict=evict, **loop)
    cold = dict(raw["cold"])
    if cold.get("method") == "write" and hidden and \
            int(cold.get("flush_bytes") or 0) > _core.CPU_EVICT_FROM_BYTES and not flush_bytes:
        # a flush this large costs tens of ms a sample: say why it was not an eviction
        cold["evict_refused"] = hidden
    cold.update(cache_bytes=llc, cache="CPU last-level cache", cache_source=caches["source"])
    if plan.cold is not None and caches["source"] == "sysconf":
        warn.append(f"the last-level cache size ({llc} bytes) came from glibc's sysconf, not "
                    f"sysfs, and can be far off (320 MiB for a 32 MiB L3 on one VM): set "
                    f"KBENCH_LLC_BYTES if the flush or rotation is mis-sized")
    if plan.flush and cold.get("evicts") is False:
        warn.append(f"flush_bytes={cold.get('flush_bytes')} is smaller than the {llc}-byte "
                    f"last-level cache: the flush cannot evict it, so the figure is not cold")
    if plan.rotate:
        if llc <= 0:
            cold["evicts"] = False
            warn.append("the last-level cache size is unknown: whether the argument sets "
                        "evict it cannot be judged, so the figure is not called cold")
        else:
            flag_rotation_sets(cold, sets, llc, warn, kwargs)
    return raw, cold, {"warnings": warn} if warn else {}


def _run_host_read(fn, sets, kwargs, plan, flush_bytes, loop):
    """_run_host with the host's load read around it (extra["host_load"]: hostload)."""
    from . import hostload
    before = hostload.start()
    raw, cold, extra = _run_host(fn, sets, kwargs, plan, flush_bytes, loop)
    extra["host_load"] = hostload.finish(before)
    return raw, cold, extra


def _run_host_fitted(fn, sets, kwargs, plan, flush_bytes, loop, ladder=False):
    """_run_host_read; a run whose thread pools did not fit the cores the other processes left
    (a busy host) is run again with its pools sized to those cores, rounded down to the
    ladder's sizes 1, 2, 4, ... (kbench.measure.threadpools), and the result says so. With
    ladder, a threaded run on a quiet host is also timed at each of the ladder's sizes below
    its pools' (extra["pool_ladder"])."""
    from . import hostload, threadpools
    raw, cold, extra = _run_host_read(fn, sets, kwargs, plan, flush_bytes, loop)
    load = extra["host_load"]
    if not (load and load["busy"]):
        # a call that ran one thread does not move with the pool's size: no ladder to time
        if ladder and load and load["own_cpus"] > hostload.THREADED_CPUS:
            _time_pool_ladder(fn, sets, kwargs, plan, flush_bytes, loop, extra)
        return raw, cold, extra
    # Sized whether or not the run read oversubscribed: a pool whose threads wait on preempted
    # ones uses little CPU (2-thread matmuls beside a spinning process went unsized and read
    # 5.6x and 22x their quiet time). A core the others used any of is not free: they ran less
    # than they wanted beside this pool (a spinning process read 0.4 CPUs beside a 2-thread
    # pool on 2 cores).
    free = threadpools.rung(load["cpus"] - math.ceil(load["others_cpus"] - 0.05))
    found = threadpools.pools()
    pools = threadpools.describe(found)
    if not any(p["threads"] > free for p in pools):
        return raw, cold, extra
    first = {"median_s": _core.quantile(np.asarray(raw["samples"], dtype=np.float64), 0.5),
             "own_cpus": load["own_cpus"], "others_cpus": load["others_cpus"]}
    with threadpools.sized(free, found):
        raw, cold, extra = _run_host_read(fn, sets, kwargs, plan, flush_bytes, loop)
    extra["host_load"] = extra["host_load"] or {}
    extra["host_load"]["pools_sized"] = {"threads": free, "pools": pools, "first_run": first}
    return raw, cold, extra


def _time_pool_ladder(fn, sets, kwargs, plan, flush_bytes, loop, extra) -> None:
    """extra["pool_ladder"]: the call's figure (median, own CI) with its thread pools at each
    of the ladder's sizes below theirs, each taken on a host that stayed quiet. A baseline
    keeps them; a busy session whose pools were sized is then judged against the same size."""
    from . import threadpools
    found = threadpools.pools()
    top = max((p.threads() for p in found), default=1)
    figures = {}
    for k in threadpools.ladder(top):
        with threadpools.sized(k, found):
            raw, _, ran = _run_host_read(fn, sets, kwargs, plan, flush_bytes, loop)
        if (ran["host_load"] or {}).get("busy"):
            continue                    # a busy figure would stretch what is judged against
        st = _core.summarize(np.asarray(raw["samples"], dtype=np.float64),
                             raw.get("ci_level", _core.LOOP_DEFAULTS["ci_level"]))
        figures[str(k)] = {"median": st["median"], "ci_low": st["ci_low"],
                           "ci_high": st["ci_high"]}
    if figures:
        extra["pool_ladder"] = {"threads": top, "figures": figures}


def _available_bytes() -> int:
    """MemAvailable (0: unknown, no cap)."""
    from ..roofline.peaks import mem_available_bytes
    return mem_available_bytes() or 0


def compute_dtype(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    """The precision a CPU call computes in, for its FMA ceiling: 'float64' when any floating
    argument is 64-bit (numpy promotes a mix to it), else 'float32' -- also when no argument is
    floating, so a FLOP count is never held against the lower float64 ceiling and flagged."""
    for x in list(args) + list(kwargs.values()):
        dt = getattr(x, "dtype", None)
        if dt is None:
            continue
        try:
            d = np.dtype(dt)
            wide = d.kind in "fc" and d.itemsize // (2 if d.kind == "c" else 1) >= 8
        except TypeError:               # a framework's dtype (torch.float64): by its name
            wide = any(w in str(dt) for w in ("float64", "double", "complex128"))
        if wide:
            return "float64"
    return "float32"


def _cpu_peaks(dtype: str) -> Optional[Dict[str, float]]:
    """The ceilings `kbench peaks` measured on this machine (cached), in base units; the FMA
    ceiling of `dtype`'s precision (float32 runs twice the lanes of float64)."""
    try:
        from ..roofline.peaks import FMA_DTYPES, load_cached_peaks, peaks_cache_path
        d = load_cached_peaks()
    except Exception:          # unreadable cache: throughput without % of peak
        return None
    if not d:
        return None
    bw_name = "copy" if d["copy_GBps"] >= d["triad_GBps"] else "triad"
    key, detail = next((k, det) for t, k, det in FMA_DTYPES if t == dtype)
    isa = (d.get(detail) or {}).get("isa")
    return {"bytes_per_s": d[f"{bw_name}_GBps"] * 1e9, "flops_per_s": d[key] * 1e9,
            "bytes_name": f"CPU STREAM {bw_name}",
            "flops_name": f"CPU FMA {dtype}" + (f" ({isa})" if isa else ""),
            "source": f"kbench peaks (STREAM copy/triad best, FMA loop), {peaks_cache_path()}"}


def throughput(median_s: float, flops: Optional[float], nbytes: Optional[float],
               peaks: Optional[Dict[str, float]]) -> Dict[str, Any]:
    """FLOP/s and B/s from the theoretical counts; % of measured peak; roofline bound."""
    tp: Dict[str, Any] = {}
    if median_s <= 0:
        return tp
    peak_bw = _ceiling(peaks, "bytes_per_s")
    peak_fl = _ceiling(peaks, "flops_per_s")
    if nbytes:
        tp["bytes_per_s"] = nbytes / median_s
        if peak_bw:
            tp["peak_bytes_per_s"] = peak_bw
            tp["bandwidth_pct_peak"] = tp["bytes_per_s"] / peak_bw
            if peaks.get("bytes_name"):
                tp["peak_bytes_name"] = peaks["bytes_name"]
    if flops:
        tp["flops_per_s"] = flops / median_s
        if peak_fl:
            tp["peak_flops_per_s"] = peak_fl
            tp["compute_pct_peak"] = tp["flops_per_s"] / peak_fl
            if peaks.get("flops_name"):
                tp["peak_flops_name"] = peaks["flops_name"]
    if flops and nbytes and peak_bw and peak_fl:
        intensity, ridge = flops / nbytes, peak_fl / peak_bw
        tp["intensity_flop_per_byte"] = intensity
        tp["ridge_flop_per_byte"] = ridge
        tp["bound_by"] = "memory" if intensity < ridge else "compute"
        tp["bound_reason"] = (f"intensity {intensity:.3g} FLOP/B "
                              f"{'<' if intensity < ridge else '>='} ridge {ridge:.3g} FLOP/B")
    elif nbytes and not flops:
        tp["bound_by"] = "memory"
        tp["bound_reason"] = "only bytes given"
    elif flops and not nbytes:
        tp["bound_by"] = "compute"
        tp["bound_reason"] = "only flops given"
    if peaks and peaks.get("source"):
        tp["peaks_source"] = peaks["source"]
    if peak_bw and nbytes:
        tp["bytes_ceiling"] = (peaks or {}).get("bytes_ceiling", "measured")
    return tp


def _ceiling(peaks: Optional[Dict[str, Any]], key: str) -> Optional[float]:
    """A cached ceiling as a finite positive float, else None with one warning: the GPU peaks
    cache is read without validation (kbench.roofline.peaks_gpu), and a bad figure must cost the %
    of peak, not the result."""
    value = (peaks or {}).get(key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value > 0:
        return float(value)
    from ..roofline.peaks import _warn_cache_once
    _warn_cache_once(str(peaks.get("source") or "(unknown source)"),
                     f"{key} is {value!r}, not a finite positive number")
    return None


COMPUTE_CEILING_SLACK = 1.10


def _stop_warning(r: Result) -> Optional[str]:
    """What a run that the caps stopped, not the rule, leaves uncertain; None after a rule
    stop."""
    st = r.stop
    # the default budget spent: the CI reached is the result, stated in the Stop rule row (a
    # caller who asks for a precision passes target= and is warned when it is not met)
    if st.get("stop") in ("precision", "budget"):
        return None
    ach = st.get("achieved")
    if st.get("criterion") == "ci" and isinstance(ach, float) and \
            ach <= st.get("target", 0) and r.n < _core.CI_MIN_SAMPLES:
        # the CI met the target, but too few samples to judge their order (max_samples)
        return (f"stopped by {st.get('stop')} at {r.n} samples, before the "
                f"{_core.CI_MIN_SAMPLES} from which kbench judges whether their order shows "
                f"dependence: the CI ({100 * ach:.2f}%) assumes they are independent")
    saturated = saturation_text(r.stats) if st.get("criterion") == "ci" else ""
    if st.get("criterion") == "ci" and isinstance(ach, float) and ach <= st.get("target", 0):
        # the cap came between two checks and the final CI meets the target after all (a
        # capped H200 GEMM: "before the target 0.50% was met (achieved 0.49%)"), unless the
        # rule held on because the run was too short to see its samples' dependence
        if not saturated:
            return None
        return (f"stopped by {st.get('stop')} with the CI at {100 * ach:.2f}%, within the "
                f"target, but {saturated}")
    ach_s = f"{100 * ach:.2f}%" if isinstance(ach, float) and math.isfinite(ach) else "n/a"
    # the likely cause: the figure moved during the run, which a longer run averages only
    # slowly
    dependence = dependence_text(r.stats)
    causes = ("other load on the machine, a clock that changed, or state the callable keeps "
              "between calls (a cache, a list that grows)" if r.backend == "host" else
              "a clock or power controller's swings, other load on the machine")
    why = f"; {dependence}: the figure moved during the run ({causes})" if dependence else ""
    if saturated:
        why += f"; {saturated}"
    # a time cap over slow calls (a 600 MB CPU flush a sample) leaves too few to judge their
    # order: the CI reported is an independent one, however much the figure drifted
    unjudged = (f"; its {r.n} samples are fewer than the {_core.CI_MIN_SAMPLES} from which "
                f"kbench judges whether their order shows dependence, so that CI assumes they "
                f"are independent" if st.get("criterion") == "ci" and
                r.n < _core.CI_MIN_SAMPLES else "")
    return (f"stopped by {st.get('stop')} before the {st.get('criterion')} target "
            f"{100 * st.get('target', 0):.2f}% was met (achieved {ach_s}): the median is "
            f"less certain than asked{why}{unjudged}{_flush_share_note(r)}"
            f"{_capped_clock_hint(r) if dependence else ''}")


FLUSH_SHARE_NOTED = 0.5


def _flush_share_note(r: Result) -> str:
    """Where the host's cache flushes took most of the sampling time (a large last-level cache:
    600 MB a sample on a 300 MB L3), say so: that, not the call, is what capped the samples."""
    cc, st = r.cold_cache, r.stop
    flush_s, sampling_s = cc.get("flush_s"), st.get("sampling_s")
    if not flush_s or not sampling_s or flush_s < FLUSH_SHARE_NOTED * sampling_s:
        return ""
    known = cc.get("cache") and cc.get("cache_bytes")
    cache = f", the {cc['cache']} {fmt_bytes(cc['cache_bytes'])}" if known else ""
    what = (f"evicting the operands' {fmt_bytes(cc.get('evict_bytes'))}"
            if cc.get("method") == "evict" else fmt_bytes(cc.get("flush_bytes")))
    return (f"; the cache flushes took {flush_s / sampling_s:.0%} of the sampling time "
            f"({what} before each sample{cache}), so few samples fit: a larger max_time_s "
            f"takes more")


def _capped_clock_hint(r: Result) -> str:
    """Where the sustained regime settled under a clock limit: the controller's swings are the
    GPU's and no longer run removes them (the H200's capped GEMMs took 1-10 s to a 0.5% CI),
    so name the two ways around them."""
    regime = r.extra.get("regime") or {}
    settle = r.extra.get("clock_settle") or {}
    if regime.get("name") != "sustained" or not settle.get("min_sampling_s"):
        return ""
    return ("; the clock was held by a limit (power, thermal): regime='burst' gives a "
            "peak-clock figure in a fraction of the time (for ranking kernels), kbench.ab "
            "compares two versions in one interleaved run")


#: NVML's clock event reasons that say the power limit held the clock
POWER_LIMIT_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")


def _power_capped_note(r: Result) -> str:
    """A sustained figure that settled under the power limit and met its CI: that CI is the
    run's own precision. Where the power controller holds the clock, the next run can settle
    at another clock, and no run's samples show it ('' when not capped)."""
    regime = r.extra.get("regime") or {}
    settle = r.extra.get("clock_settle") or {}
    clocks = r.extra.get("clocks") or {}
    if regime.get("name") != "sustained" or not settle.get("settled") or \
            not settle.get("min_sampling_s") or \
            not set(clocks.get("throttle_reasons") or ()) & set(POWER_LIMIT_REASONS):
        return ""
    sm = clocks.get("sm_mhz_median")
    at = f" (SM median {sm:.0f} MHz)" if isinstance(sm, (int, float)) else ""
    return (f"power-capped{at}: the CI is this run's precision, not the figure's; the power "
            f"controller can hold another clock on the next run (an H200's f16 GEMM read "
            f"415.3 us +-0.15% at 1485 MHz and 421.0-422.9 us +-0.45-0.49% at 1440-1455 MHz in "
            f"eight benches); compare versions with kbench.ab (interleaved trials), or "
            f"regime='burst' for the peak-clock figure")


def _host_timer() -> Dict[str, Any]:
    """The host clock's step and read cost, probed once a process."""
    global _host_timer_cache
    if _host_timer_cache is None:
        _host_timer_cache = _core.host_timer_info()
    return _host_timer_cache


def _clock_floor_warning(r: Result) -> Optional[str]:
    """A host sample is two clock reads around the call: one read's cost and the loop's call of
    fn are in every sample. abs(-1) read 30 ns against 10-15 ns for a C loop and timeit's
    loop-subtracted minimum, with only the timer step said."""
    if r.backend != "host" or not (r.median and r.median > 0):
        return None
    cost = _host_timer().get("read_cost_ns")
    if not cost or r.median * 1e9 >= 10 * cost:
        return None
    return (f"{fmt_time(r.median)} a call is within 10x of the host clock's read cost "
            f"({cost:.0f} ns): every sample holds one clock read and the loop's call of fn "
            f"besides fn's own work, so the figure reads high by up to about that much; time a "
            f"loop of calls inside fn for calls this short")


def _slow_share_warning(r: Result) -> Optional[str]:
    """A regular share of slow calls (every 10th call 10x slower) sits above the median, which
    reads the fast ones: 10.3 us against 19.5 us a call on average, and a throughput 1.9x the
    sustained one, with nothing said but "outliers". Said where the mean is 25% over the
    median and 5% or more of the samples are high outliers."""
    s = r.stats
    mean, med, n, high = s.get("mean"), s.get("median"), s.get("n"), s.get("outliers_high")
    if not (mean and med and med > 0 and n and high) or mean < 1.25 * med or high < 0.05 * n:
        return None
    return (f"{high} of {n} samples are high outliers and the mean per call ({fmt_time(mean)}) "
            f"is {100 * (mean / med - 1):.0f}% above the median: the median (and throughput "
            f"from it) reads the fast calls; where the slow ones are part of the work (every "
            f"Nth call flushes, compacts, reallocates), the mean is what a run of calls costs")


def _warnings(r: Result) -> List[str]:
    stop = _stop_warning(r)
    out = [stop] if stop else [w for w in (_power_capped_note(r),) if w]
    for extra in (_clock_floor_warning(r), _slow_share_warning(r)):
        if extra:
            out.append(extra)
    tp, mode = r.throughput, r.cold_cache.get("mode")
    pct = tp.get("bandwidth_pct_peak")
    if pct is not None and pct > 1.0:
        ceiling = tp.get("bytes_ceiling", "measured")
        if mode in ("flush", "rotate") and r.cold_cache.get("evicts") is not False:
            out.append(f"DEFECT: cold-cache bandwidth {pct * 100:.0f}% of the {ceiling} memory "
                       f"ceiling: check the byte count, skipped work, or the cold-cache setup")
        else:       # hot, or a flush or rotation that could not evict the cache
            out.append(f"{'hot cache' if mode not in ('flush', 'rotate') else 'not cold'}: "
                       f"{pct * 100:.0f}% of the {ceiling} memory ceiling -- the data is served "
                       f"from cache, not memory")
    # The compute ceiling is one reference kernel (FMA chains, a bf16 8192^3 GEMM): another
    # shape can run a few % faster (a burst 4000x4096x11008 GEMM read 101% on the H200), so only
    # what no shape can explain is said, naming the ceiling used and how to pick another.
    out.extend(ceiling_warnings(r, COMPUTE_CEILING_SLACK))
    return out


_host_md_cache: Dict[str, Dict[str, Any]] = {}


def _metadata(device_name: str, r: Result, extra: Dict[str, Any]) -> Dict[str, Any]:
    """Host metadata, collected once per process and working directory (it runs git), with a
    fresh timestamp, command line, environment, CPU affinity and framework versions for every
    result: a sweep over OMP_/TRITON_ settings, or torch imported after the first bench, in one
    process must record each result's own."""
    import os
    import time
    cwd = os.getcwd()
    fresh = cwd not in _host_md_cache
    if fresh:
        try:
            from ..provenance.metadata import collect_host_metadata
            _host_md_cache[cwd] = collect_host_metadata()
        except Exception as e:      # metadata must never lose a measurement
            _host_md_cache[cwd] = {"error": f"{type(e).__name__}: {e}"}
    md = dict(_host_md_cache[cwd])
    md["timestamp_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if not fresh or "error" in md:
        _refresh_per_result(md, cwd)
    md["host_timer"] = _host_timer()
    md["kbench_core_cuda"] = bool(_core.HAVE_CUDA)
    if "device" in extra:
        md["gpu"] = extra.pop("device")
    return md


def _refresh_per_result(md: Dict[str, Any], cwd: str) -> None:
    """The fields a cached host record re-reads for each result (collect_host_metadata has
    just read them for the first)."""
    if "git" in md:     # re-read as the harness's is (5 s): an edit made mid-session shows
        from ..provenance.metadata import git_cached
        md["git"] = git_cached(cwd)
    try:
        from ..provenance.metadata import (command_line, framework_info, gpu_libraries,
                                           interpreter_command, logical_cores, relevant_env)
        md["argv"] = command_line()
        md.update(interpreter_command())
        md["env"] = relevant_env()
        md["frameworks"] = framework_info()
        md["gpu_libraries"] = gpu_libraries()
        md["cpu_affinity"] = logical_cores()["affinity"]
    except Exception as e:          # metadata must never lose a measurement
        md["error"] = f"{type(e).__name__}: {e}"
