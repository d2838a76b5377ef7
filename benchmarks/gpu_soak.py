"""Do GPU benches leak? Rounds of short benches per mode, device memory and RSS after each.

A pytest session or a sweep runs thousands of benches in one process: what each bench creates
(graphs and their execs, CUPTI buffers, flush and gate memory, modules) must be freed or reused.
Per round: driver-level used memory (cuMemGetInfo through torch), torch's allocated and reserved
bytes, the process's RSS and glibc's malloc'd bytes in use (mallinfo2). Flat after the first
round is the bar. The same figures are read before a mode's first bench and after its last
round with CUPTI released (kbench.release_cupti(), the detach a sweep gets 1 s after its last
bench): what is in use after the release and was not before was kept past the detach. On the
H200 that is libcupti's own (docs/design/gpu-timers.md, "What stays in use after a
soak").

    python benchmarks/gpu_soak.py --benches 1000 --rounds 4 --out benchmarks/results/h200_soak.json

A mode may name a variant after '@': 'graph@linger0' runs graph mode with
KBENCH_CUPTI_LINGER_S=0 (CUPTI detached after every bench instead of kept attached across the
round), to tell CUPTI's per-attach state apart from kbench's own; 'graph@gc' runs a full
gc.collect() before each round's reading, to tell objects held in reference cycles (freed only
by a full collection, rare in a process with a large heap) from a leak; 'graph@events' runs graph
mode with CUPTI reported unusable, so the eager estimate and the replays are timed with CUDA
events and CUPTI never traces a graph launch: flat there and growing in 'graph' puts the growth
in CUPTI's tracing of graph replays, growing in both puts it in the capture path;
'graph@eager_events' times the replays with CUPTI as 'graph' does, but graph mode's eager
estimate (which sets the unroll) with CUDA events (at 5c802cb it halved graph mode's growth:
the probe's 2000 launches before each capture, with CUPTI attached, were most of it;
docs/design/gpu-timers.md).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import time

import torch

import kbench
import kbench.backends.cuda


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]


def _mallinfo2():
    try:
        f = ctypes.CDLL("libc.so.6").mallinfo2     # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    f.restype = _MallInfo2
    return f


_MALLINFO2 = _mallinfo2()


def malloc_in_use_mb() -> float:
    """Bytes glibc's malloc has handed out and not had back (NaN where there is no mallinfo2)."""
    return _MALLINFO2().uordblks / 2**20 if _MALLINFO2 else float("nan")


def device_used_mb() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


_cupti_facts = kbench.backends.cuda.cupti_facts


def _events_only():
    return False, False, "the soak's events variant"


_estimate_eager = kbench.backends.cuda._estimate_eager


def _eager_on_events(fn, sets, kwargs, s, ordinal, timer, *rest, **kw):
    return _estimate_eager(fn, sets, kwargs, s, ordinal, "events", *rest, **kw)


def _reading(rnd, t0: float) -> dict:
    torch.cuda.synchronize()
    return {"round": rnd, "device_used_mb": device_used_mb(), "rss_mb": rss_mb(),
            "malloc_in_use_mb": malloc_in_use_mb(),
            "torch_allocated_mb": torch.cuda.memory_allocated() / 2**20,
            "torch_reserved_mb": torch.cuda.memory_reserved() / 2**20,
            "elapsed_s": time.perf_counter() - t0}


def _print_row(spec: str, what: str, row: dict) -> None:
    print(f"{spec:14} {what:9}: device {row['device_used_mb']:9.1f} MB  rss {row['rss_mb']:8.1f} MB"
          f"  malloc in use {row['malloc_in_use_mb']:7.1f} MB  torch reserved "
          f"{row['torch_reserved_mb']:7.1f} MB  ({row['elapsed_s']:.1f} s)"
          + (f"  CUPTI flushes {row['cupti_flushes_per_bench']:.1f} a bench, sub-batches "
             f"{row['sub_batches_per_bench']:.1f}" if "cupti_flushes_per_bench" in row else ""),
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benches", type=int, default=1000, help="benches per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--modes", default="cupti,events,graph")
    ap.add_argument("--out")
    args = ap.parse_args()
    x = torch.randn(1 << 20, device="cuda")          # 4 MB
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    res = {"benches_per_round": args.benches, "gpu": torch.cuda.get_device_name(0),
           "commit": os.environ.get("KBENCH_GIT_COMMIT"), "modes": {}}
    for spec in args.modes.split(","):
        mode, _, variant = spec.partition("@")
        if variant not in ("", "linger0", "gc", "events", "eager_events"):
            raise SystemExit(f"unknown variant {variant!r} in {spec!r} "
                             f"(known: linger0, gc, events, eager_events)")
        if variant == "linger0":
            os.environ["KBENCH_CUPTI_LINGER_S"] = "0"
        else:
            os.environ.pop("KBENCH_CUPTI_LINGER_S", None)
        # kbench has no option to time graph replays without CUPTI where CUPTI works: the
        # diagnostic answers the plan's CUPTI question "not usable" for this variant only.
        cuda_adapter = kbench.backends.cuda
        cuda_adapter.cupti_facts = (_events_only if variant == "events" else _cupti_facts)
        cuda_adapter._estimate_eager = (_eager_on_events if variant == "eager_events"
                                        else _estimate_eager)
        rows = []
        t0 = time.perf_counter()
        before = _reading("before", t0)
        _print_row(spec, "before", before)
        for rnd in range(args.rounds):
            flushes = sub_batches = 0
            for _ in range(args.benches):
                if mode == "graph":
                    with torch.cuda.stream(side):
                        r = kbench.bench(torch.mul, x, 2.0, kwargs={"out": y}, mode=mode,
                                         max_time_s=0.02, warmup_s=0.0, settle_max_s=0,
                                         min_samples=5)
                else:
                    r = kbench.bench(torch.mul, x, 2.0, kwargs={"out": y}, mode=mode,
                                     max_time_s=0.02, warmup_s=0.0, settle_max_s=0,
                                     min_samples=5)
                # libcupti keeps 72 B per flush: the bench's own (graph mode's eager probe,
                # a separate measurement, is not in it)
                fl = r.extra.get("cupti_flushes") or {}
                flushes += fl.get("default", 0) + fl.get("forced", 0)
                sub_batches += (r.extra.get("gate") or {}).get("sub_batches", 0)
            torch.cuda.synchronize()
            if variant == "gc":
                gc.collect()
            row = _reading(rnd, t0)
            row["cupti_flushes_per_bench"] = flushes / args.benches
            row["sub_batches_per_bench"] = sub_batches / args.benches
            rows.append(row)
            _print_row(spec, f"round {rnd}", row)
        kbench.release_cupti()
        released = _reading("released", t0)
        _print_row(spec, "released", released)
        keys = ("device_used_mb", "rss_mb", "malloc_in_use_mb")
        growth = {k: rows[-1][k] - rows[0][k] for k in keys}
        kept = {k: released[k] - before[k] for k in keys}
        res["modes"][spec] = {"before": before, "rounds": rows, "released": released,
                              "growth_after_first_round_mb": growth,
                              "kept_after_release_mb": kept}
        print(f"{spec:14} growth after the first round: device {growth['device_used_mb']:+.1f} MB, "
              f"rss {growth['rss_mb']:+.1f} MB, malloc in use {growth['malloc_in_use_mb']:+.1f} MB "
              f"over {args.rounds - 1} rounds; kept after release (against before the mode's first "
              f"bench): malloc in use {kept['malloc_in_use_mb']:+.1f} MB, device "
              f"{kept['device_used_mb']:+.1f} MB", flush=True)
        if args.out:        # after every mode: a run cut by a timeout keeps what it measured
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
