"""kbench.distributed: benchmarks that span ranks, on an engine that already exists.

Call ``kbench.distributed.bench(fn, *args, ...)`` (or ``kbench.bench(..., group=...)``) on every
rank of a torchrun or mpirun job. Every rank times every sample; each sample's figure is the
MAX across ranks (the collective is done when the slowest rank is), and the result's median,
CI and stop rule are those of the maxima, decided identically on every rank. Before each call,
outside the timed interval, a barrier lines the ranks up: on NCCL a one-element all_reduce on
the measured stream (device-side; then kbench's gate), else a host barrier. The per-rank
medians and the skew between ranks are reported, with the world, the topology and the
versions. A rank that does not arrive at a collective within ``dist_timeout_s`` becomes a
DistributedTimeout naming the stage and the rank.

Seeding: ``rank_seed(rank, base)`` is the seed of rank ``rank`` (numpy's SeedSequence of
(base, rank): distinct, reproducible streams). A reference for a collective is formed with the
same semantics: e.g. for an all_reduce(sum) of rank-seeded inputs, the sum over every rank's
input, each regenerated from its rank's seed.
"""
from __future__ import annotations

import atexit
import inspect
import json
import numbers
import os
import sys
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..measure import profile as _profile
from ..measure.local import bench_local, check_call
from ..measure.prepare import (BENCH_DEFAULTS, check_before_timing, name_of, one_at_a_time,
                               resolve_device)
from ._comm import (LENT_MACHINE_ENV, Communicator, MpiCommunicator, TorchCommunicator,
                    communicator, init_process_group, set_lent_machine_env)
from ._ranks import (DEFAULT_TIMEOUT_S, DistributedError, DistributedTimeout, Ranks,
                     check_timeout)
from ._report import rank_report

__all__ = ["bench", "rank_seed", "rank_rng", "init_process_group", "communicator",
           "Communicator", "MpiCommunicator", "TorchCommunicator", "Ranks", "DistributedError",
           "DistributedTimeout", "DEFAULT_TIMEOUT_S", "LENT_MACHINE_ENV",
           "set_lent_machine_env", "rank_report"]

set_lent_machine_env()      # before any process group exists: NVLink multicast stays off

_ranks_of: Dict[int, Ranks] = {}     # one reducer (and one marker directory) per group


def rank_seed(rank: int, base: int = 0) -> int:
    """The seed of rank `rank`: SeedSequence([base, rank])'s first 31-bit word (for
    torch.manual_seed or numpy), distinct per rank and reproducible."""
    return int(np.random.SeedSequence([int(base), int(rank)]).generate_state(1)[0] >> 1)


def rank_rng(rank: int, base: int = 0) -> np.random.Generator:
    """numpy Generator seeded with rank_seed(rank, base)."""
    return np.random.default_rng(rank_seed(rank, base))


def _ranks_for(group: Any, timeout_s: float) -> Ranks:
    key = id(group) if not isinstance(group, str) else 0
    timeout_s = check_timeout(timeout_s)       # on every call: a later NaN never expired
    r = _ranks_of.get(key)
    if r is None:
        r = _ranks_of[key] = Ranks(communicator(group, timeout_s), timeout_s)
    r.timeout_s = timeout_s
    return r


@atexit.register
def _close_all() -> None:
    for r in _ranks_of.values():
        r.close()
    _ranks_of.clear()


def _sync_devices() -> None:
    """Synchronise before comparing: queued GPU work (collectives) must be done."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _shapes(args: Any, kwargs: Dict[str, Any]) -> List[Any]:
    out = []
    for a in list(args) + list(kwargs.values()):
        shape = getattr(a, "shape", None)
        if shape is not None:
            out.append({"shape": [int(x) for x in shape],
                        "dtype": str(getattr(a, "dtype", ""))})
    return out


@one_at_a_time
def bench(fn: Callable[..., Any], *args: Any, group: Any = "auto",
          dist_timeout_s: Optional[float] = None, barrier: Optional[bool] = None,
          global_shapes: Optional[List[Any]] = None, check: Any = None,
          rtol: Optional[float] = None, atol: Optional[float] = None,
          kwargs: Optional[Dict[str, Any]] = None, name: Optional[str] = None,
          out_arg: Any = None, _plant: Optional[Dict[str, Any]] = None,
          **bench_options: Any) -> Any:
    """kbench.bench on every rank of `group`, reduced with MAX per sample (module docstring).

    group: 'auto', a torch ProcessGroup or an mpi4py communicator. dist_timeout_s: the longest
    wait at any collective before DistributedTimeout (default 60 s). barrier: the barrier before
    each call; None (default): at world size > 1 only (one rank has nobody to line up with, and
    the barrier's idle before each call let a power-capped GEMM clock higher: world 1 on the
    H200 read 173.1 vs 180.5 us with it); True forces it, False drops it. global_shapes: the
    problem's global shapes, recorded beside each rank's (a sharded problem's split is the
    caller's knowledge).
    check/rtol/atol/out_arg: as kbench.bench, verdict agreed: a mismatch on any rank fails every
    rank, naming it. Other options go to kbench.bench.
    """
    ranks = _ranks_for(group, DEFAULT_TIMEOUT_S if dist_timeout_s is None else dist_timeout_s)
    ranks.start_run()
    if barrier is None:
        barrier = ranks.comm.world > 1
    ranks._plant, ranks._fired = dict(_plant or {}), set()
    # Each rank's own refusal (fn, flops, out_arg, a misspelt option, ...) is found here and
    # sent with the options: a rank refusing alone had its peers wait dist_timeout_s.
    local_error: Optional[BaseException] = None
    profile_mode = "timed"
    try:
        name = name or name_of(fn)
        kwargs = dict(kwargs or {})
        first = args
        if bench_options.get("arg_sets") is not None and not callable(bench_options["arg_sets"]):
            first = tuple(bench_options["arg_sets"][0])
        device = bench_options.get("device", BENCH_DEFAULTS["device"])
        if resolve_device(device, first, kwargs, fn) != "cpu":
            # keep-busy bridges call fn untimed a time-dependent number of times: ranks would
            # disagree on the count, and a collective inside fn would hang
            bench_options.setdefault("keep_busy", False)
            # Without bridges the GPU idles between batches, so the sustained regime does not
            # hold: a power-capped GEMM read 12% faster (world 1 on the H200: 182.6 vs 207.1
            # us). Burst is a regime that holds without bridges; the result names it, and
            # kbench compare keeps it apart from sustained figures.
            bench_options.setdefault("regime", "burst")
        profile_mode = _check_locally(fn, args, kwargs, name, out_arg,
                                      dict(bench_options, check=check, rtol=rtol, atol=atol))
    except Exception as e:
        local_error = e
    try:
        # profile mode (KBENCH_PROFILE, or a profiler injected on one rank only) runs fn a
        # fixed number of times with no reduce: every rank must be in it, or none
        _agree_options(ranks, bench_options, local_error, barrier=barrier,
                       check=check is not None, profile_env=os.environ.get("KBENCH_PROFILE"),
                       profile_mode=profile_mode)
        correctness = None
        if check is not None:
            correctness = _agreed_check(ranks, fn, first, kwargs, check, rtol, atol, name,
                                        out_arg, check_before_timing)
        _sync_devices()
        ranks.barrier("before timing")          # and before capture, in mode='graph'
        # the check ran above, agreed: its tolerances are not the timed run's
        result = bench_local(fn, *args, kwargs=kwargs, name=name, out_arg=out_arg, _ranks=ranks,
                             _pre_sample=ranks.pre_sample if barrier else None,
                             **bench_options)
    except BaseException as e:
        # The other ranks wait at their next collective: their timeout names this rank and
        # this text (the marker keeps its sequence number: it is behind them). A
        # DistributedError too: without it the peers read "marker not visible from this node".
        first_line = (str(e).splitlines() or [""])[0]
        ranks.markers.write(ranks.markers.seq, f"failed: {type(e).__name__}: {first_line}"[:200])
        raise
    result.correctness = correctness
    mine = {"shapes": _shapes(first, kwargs), "device": result.device,
            "host": __import__("socket").gethostname()}
    every = [json.loads(t) for t in ranks.gather_text("report", json.dumps(mine))]
    report = rank_report(ranks.per_rank(), np.asarray(result.samples), ranks.comm,
                         every, global_shapes=global_shapes, barrier=barrier,
                         device_barrier=ranks._device_barrier is not None,
                         timeout_s=ranks.timeout_s)
    result.extra["distributed"] = report
    result.metadata["distributed"] = {k: report[k] for k in
                                      ("world", "local_world", "nodes", "engine", "backend",
                                       "versions") if k in report}
    return result


# The options that shape the timing loop and its collectives: every rank must pass the same.
# (device, stream, arguments and data are each rank's own.)
_AGREED = ("warmup_s", "min_samples", "max_samples", "max_time_s", "target", "ci_level",
           "criterion", "cold_cache", "flush_bytes", "mode", "regime", "unroll", "profile",
           "memory", "rotate_sets", "gate", "gate_batch", "keep_busy", "settle_max_s")


def _check_locally(fn: Any, args: Any, kwargs: Dict[str, Any], name: str, out_arg: Any,
                   options: Dict[str, Any]) -> str:
    """What bench_local refuses before it calls fn (check_call: cheap, calls nothing), on this
    rank alone; returns why profile mode would run ('' when timed)."""
    bound = inspect.signature(bench_local).bind(fn, *args, kwargs=kwargs, name=name,
                                                out_arg=out_arg, **options)
    bound.apply_defaults()
    a = bound.arguments
    c = check_call(fn, a["args"], flops=a["flops"], bytes=a["bytes"], name=a["name"],
                   kwargs=a["kwargs"], flush_bytes=a["flush_bytes"], arg_sets=a["arg_sets"],
                   rotate_sets=a["rotate_sets"], out_arg=a["out_arg"], device=a["device"],
                   cold_cache=a["cold_cache"], mode=a["mode"], memory=a["memory"],
                   backend_options=a["backend_options"], check=a["check"], rtol=a["rtol"],
                   atol=a["atol"])
    why = _profile.wanted(a["profile"], c.device)
    # what turned it on, not its value (each rank's profiler path may differ)
    return why.split("=", 1)[0] if why else "timed"


def _same_key(v: Any) -> str:
    """What two ranks' values are compared by: equal numbers are equal (1, 1.0, np.int64(1))."""
    if isinstance(v, (numbers.Real, np.number)) and not isinstance(v, (bool, np.bool_)):
        return repr(float(v))
    return repr(v)


def _defaults() -> Dict[str, str]:
    """bench_local's defaults as compared: passing one is the same call as leaving it out."""
    return {k: _same_key(p.default) for k, p in inspect.signature(bench_local).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _agree_options(ranks: Ranks, options: Dict[str, Any],
                   local_error: Optional[BaseException] = None, **more: Any) -> None:
    """One exchange before anything runs: a rank passing other loop options (min_samples,
    criterion, cold_cache, ...) was found only later, as 'ranks out of step' at a sampling
    batch, or never (each rank reported its own CI level). Names the options and each rank's
    value. It also carries each rank's own refusal (local_error): every rank raises at once,
    the refusing rank its own error, the others a DistributedError naming it."""
    shown = {k: options[k] for k in _AGREED if k in options}
    shown.update(more)
    shown["arg_sets"] = (None if options.get("arg_sets") is None or
                         callable(options["arg_sets"]) else len(options["arg_sets"]))
    defaults = _defaults()
    # each value: [compared as, shown as]; a default passed explicitly is left out
    mine = {k: [_same_key(v), repr(v)] for k, v in shown.items()
            if (defaults[k] != _same_key(v) if k in defaults else v is not None)}
    why = "" if local_error is None else \
        (f"{type(local_error).__name__}: {local_error}".splitlines() or [""])[0][:300]
    text = json.dumps({"options": mine, "error": why}, sort_keys=True)
    every = [json.loads(t) for t in ranks.gather_text("options", text)]
    refused = [(r, e["error"]) for r, e in enumerate(every) if e["error"]]
    if local_error is not None:
        raise local_error
    if refused:
        lines = "; ".join(f"rank {r}: {w}" for r, w in refused)
        raise DistributedError(f"kbench.distributed: rank(s) {[r for r, _ in refused]} of "
                               f"{len(every)} refused the call before anything ran ({lines}); "
                               f"every rank stops")
    every_opts = [e["options"] for e in every]
    keys = sorted(set().union(*every_opts))
    differ = [k for k in keys if len({e.get(k, ["(default)"])[0] for e in every_opts}) > 1]
    if differ:
        detail = "; ".join(f"{k}: " + ", ".join(f"rank {r} {e.get(k, [None, '(default)'])[1]}"
                                               for r, e in enumerate(every_opts))
                           for k in differ)
        raise DistributedError(f"kbench.distributed: the ranks passed different options "
                               f"({detail}); every rank must make the same call")


def _agreed_check(ranks: Ranks, fn, args, kwargs, check, rtol, atol, name, out_arg,
                  check_once) -> Optional[Dict[str, Any]]:
    """Each rank checks its output; the verdict is agreed: any rank's failure fails all."""
    _sync_devices()
    ranks.barrier("check")
    why, correctness = "", None
    try:
        correctness = check_once(fn, args, kwargs, check, rtol, atol, name, out_arg)
        _sync_devices()
    except DistributedError:
        raise
    except Exception as e:
        why = f"{type(e).__name__}: {e}" or "failed"
    texts = ranks.gather_text("check verdict", why)
    bad = [r for r, t in enumerate(texts) if t]
    if bad:
        lines = "\n".join(f"  rank {r}: {texts[r]}" for r in bad)
        raise AssertionError(f"kbench.distributed({name}): the correctness check failed on "
                             f"rank(s) {bad} of {len(texts)}; nothing was timed on any rank.\n"
                             f"{lines}")
    return correctness
