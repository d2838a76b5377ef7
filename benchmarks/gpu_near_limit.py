"""Loads near the power limit, or that reach it only once timed: does kbench's figure depend on
how and when its settle rule let the sampling start?

kbench's sustained regime settles a load as unlimited once nothing limits its clock and its
instantaneous power is under a headroom of the limit (80%, or 90% from 0.1 s of load on), else
once the one-second averaged power has caught up with it; a load that a limit reason limits
while it is timed settles again as a capped load (kb_cuda_resettle). This benchmark sets those
rules against the loads themselves. For each case, in one process:

1. Time course: from an idle GPU (IDLE_S), the load back to back for --course-s seconds, in
   chunks of about 2 ms of calls timed with CUDA events, beside kbench's NVML sampler (5 ms).
   Per 0.1 s of load: the per-call time, SM clock, instantaneous power and limit reasons. What
   the rules guess at: whether the per-call time early in the load (0.1-0.5 s) is the time
   later on (the last 3 s), and when a limit first shows.
2. kbench's defaults (cold L2, CUPTI, sustained), three benches back to back as a sweep runs
   them, after an idle gap: each figure, its wall time, how it settled (a carried state, the
   board's maximum clock, two windows; settled again after a limit while timed) and whether
   the regime held.
3. A long bench (--long-s seconds, a target it cannot meet): the median of its second half is
   the load's sustained figure; each default's figure is set against it.

    python benchmarks/gpu_near_limit.py --out benchmarks/results/h200_near_limit.json \
        --md benchmarks/results/h200_near_limit.md
"""
from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from _gpu import LIMIT_REASONS, finite_or_none as _num, gpu_facts

IDLE_S = 3.0
BIN_S = 0.1
CHUNK_S = 0.002
EARLY = (0.1, 0.5)          # s of load: where a settle at 0.15 s would start sampling
LATE_S = 3.0                # the last seconds of the course


def cases() -> Dict[str, Dict[str, Any]]:
    """name -> fn, args, kwargs. A small bf16 GEMM (the H200 settled it at its maximum clock
    and capped it once timed), a larger one, an f32 GEMM near the limit, a 256 MB add."""
    import torch
    torch.manual_seed(0)
    dev = "cuda"
    out: Dict[str, Dict[str, Any]] = {}
    for n in (2048, 3072):
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        out[f"bf16 mm {n}^3"] = dict(fn=torch.mm, args=(a, b), kwargs=None)
    a = torch.randn(4096, 4096, device=dev)
    b = torch.randn(4096, 4096, device=dev)
    out["f32 mm 4096^3"] = dict(fn=torch.mm, args=(a, b), kwargs=None)
    x, y = torch.randn(1 << 26, device=dev), torch.randn(1 << 26, device=dev)
    out["add 256 MB f32"] = dict(fn=torch.add, args=(x, y), kwargs={"out": torch.empty_like(x)})
    return out


def _call(case: Dict[str, Any]) -> Callable[[], Any]:
    fn, args, kw = case["fn"], case["args"], case["kwargs"] or {}
    return lambda: fn(*args, **kw)


def time_course(case: Dict[str, Any], seconds: float) -> Dict[str, Any]:
    """The load from an idle GPU for `seconds`: chunk start times (s of load) and per-call
    times, and the NVML readings on the same axis."""
    import torch
    from kbench import _core
    call = _call(case)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    call()
    e0.record()
    for _ in range(5):
        call()
    e1.record()
    torch.cuda.synchronize()
    per_call = e0.elapsed_time(e1) / 5e3
    calls = max(1, round(CHUNK_S / per_call))
    chunks = max(1, int(seconds / (calls * per_call)))
    time.sleep(IDLE_S)
    before = time.monotonic()
    sampler = _core.nvml_sampler_start(0, 0.005)
    sampler_zero = (before + time.monotonic()) / 2
    time.sleep(0.2)                 # idle readings before the load
    events = [torch.cuda.Event(enable_timing=True) for _ in range(chunks + 1)]
    load_host = time.monotonic()
    events[0].record()
    for i in range(chunks):
        for _ in range(calls):
            call()
        events[i + 1].record()
    torch.cuda.synchronize()
    trace = _core.nvml_sampler_stop(sampler)
    ends_ms = np.array([events[0].elapsed_time(e) for e in events[1:]])
    starts_ms = np.concatenate(([0.0], ends_ms[:-1]))
    return {"chunk_t_s": (starts_ms / 1e3).tolist(),
            "per_call_s": (np.diff(np.concatenate(([0.0], ends_ms))) / 1e3 / calls).tolist(),
            "calls_per_chunk": calls,
            "nvml": {k: np.asarray(trace[k]).tolist()
                     for k in ("t_s", "sm_mhz", "power_inst_w", "power_w", "reasons")},
            "nvml_load_start_s": load_host - sampler_zero}


def course_bins(course: Dict[str, Any], bin_s: float = BIN_S) -> List[Dict[str, Any]]:
    """Per bin_s of load: the median per-call time of the chunks that began in it, and the
    NVML readings taken in it (SM median, mean instantaneous and averaged power, reasons)."""
    t = np.asarray(course["chunk_t_s"])
    pc = np.asarray(course["per_call_s"])
    nv = course["nvml"]
    nt = np.asarray(nv["t_s"]) - course["nvml_load_start_s"]
    rows = []
    end = float(t[-1]) if len(t) else 0.0
    for lo in np.arange(0.0, end, bin_s):
        hi = lo + bin_s
        m = (t >= lo) & (t < hi)
        if not m.any():
            continue
        k = (nt >= lo) & (nt < hi)
        reasons = 0
        for r in np.asarray(nv["reasons"], dtype=np.uint64)[k]:
            reasons |= int(r)
        sm, inst, avg = (np.asarray(nv[f], dtype=float)[k]
                         for f in ("sm_mhz", "power_inst_w", "power_w"))
        rows.append({"t_s": round(float(lo), 3), "per_call_s": float(np.median(pc[m])),
                     "sm_mhz": float(np.median(sm)) if k.any() else None,
                     "power_inst_w": float(np.nanmean(inst)) if k.any() else None,
                     "power_w": float(np.nanmean(avg)) if k.any() else None,
                     "limited": bool(reasons & LIMIT_REASONS)})
    return rows


def course_summary(course: Dict[str, Any], limit_w: Optional[float]) -> Dict[str, Any]:
    """The early per-call time (EARLY s of load) against the last LATE_S s; the power early and
    late as shares of the limit; when a limit first showed."""
    t = np.asarray(course["chunk_t_s"])
    pc = np.asarray(course["per_call_s"])
    end = float(t[-1]) if len(t) else 0.0
    early = pc[(t >= EARLY[0]) & (t < EARLY[1])]
    late = pc[t >= end - LATE_S]
    nv = course["nvml"]
    nt = np.asarray(nv["t_s"]) - course["nvml_load_start_s"]
    inst = np.asarray(nv["power_inst_w"], dtype=float)
    reasons = np.asarray(nv["reasons"], dtype=np.uint64)
    limited = [float(x) for x, r in zip(nt, reasons) if x >= 0 and int(r) & LIMIT_REASONS]

    def share(lo: float, hi: float) -> Optional[float]:
        m = (nt >= lo) & (nt < hi) & np.isfinite(inst)
        return float(np.mean(inst[m]) / limit_w) if limit_w and m.any() else None

    e, la = (float(np.median(x)) if len(x) else None for x in (early, late))
    return {"early_us": e * 1e6 if e else None, "late_us": la * 1e6 if la else None,
            "early_vs_late": e / la - 1 if e and la else None,
            "power_early_share": share(0.1, 0.3), "power_late_share": share(end - LATE_S, end),
            "first_limit_s": limited[0] if limited else None, "load_s": end}


def bench_row(case: Dict[str, Any], **opts: Any) -> Dict[str, Any]:
    """One kbench bench: figure, wall, settle, regime."""
    import kbench
    t0 = time.perf_counter()
    r = kbench.bench(case["fn"], *case["args"], kwargs=case["kwargs"], **opts)
    wall = time.perf_counter() - t0
    s, st = r.stats, dict(r.stop or {})
    settle = r.extra.get("clock_settle") or {}
    regime = r.extra.get("regime") or {}
    clocks = r.extra.get("clocks") or {}
    samples = np.asarray(r.samples, dtype=np.float64)
    how = ("carry" if settle.get("by_carry") else "max clock" if settle.get("at_max_clock")
           else "two windows" if settle.get("settled") else "not settled")
    trace = r.extra.get("clock_trace") or {}
    temp = [float(t) for t, x in zip(trace.get("temp_c", ()), trace.get("t_s", ()))
            if x >= 0 and math.isfinite(t)]        # the timed part's readings
    half = len(samples) // 2
    return {"median_s": s["median"], "rel_ci": s["rel_ci_halfwidth"], "n": r.n,
            "wall_s": wall, "stop": st.get("stop"), "warmup_s": _num(st.get("warmup_s")),
            "sampling_s": _num(st.get("sampling_s")), "settled_by": how,
            "settle_at_s": _num(settle.get("at_s")), "settle_sm_mhz": _num(settle.get("sm_mhz")),
            "under_limit": bool(settle.get("min_sampling_s")),
            "resettle_reason": settle.get("resettle_reason"),
            "resettle_timed_s": _num(settle.get("resettle_timed_s")),
            "resettle_dropped": st.get("resettle_dropped"),
            "limits": list(clocks.get("throttle_reasons") or []),
            "timed_sm_mhz": _num(clocks.get("sm_mhz_median")),
            "power_w_median": _num(clocks.get("power_w_median")),
            "held": regime.get("held"), "why": regime.get("why"),
            "first_half_s": float(np.median(samples[:half])) if half else None,
            "second_half_s": float(np.median(samples[half:])) if r.n else None,
            "temp_c_median": float(np.median(temp)) if temp else None,
            # how long the GPU idled between the last measurement's load and this one's
            # (None: over the carry's 1 s), not the Python gap between the two calls
            "idle_before_s": _num(settle.get("carried_from_s_ago")),
            "warnings": list(r.warnings)}


def versus_long(defaults: Sequence[Dict[str, Any]], long: Dict[str, Any]) -> List[Optional[float]]:
    """Each default's figure against the long bench's second half - 1."""
    ref = long.get("second_half_s")
    return [d["median_s"] / ref - 1 if ref else None for d in defaults]


def markdown(res: Dict[str, Any]) -> str:
    g = res["gpu"]
    lines = [
        "# Loads near the power limit: the figure against how the load settled",
        "",
        f"GPU {g['gpu']} ({g['uuid']}), power limit {g['power_limit_w']} W, torch {g['torch']}, "
        f"commit {g['commit']}, Python {g['python']}. Generated by "
        "`benchmarks/gpu_near_limit.py`; numbers in the JSON beside this page.",
        "",
        f"## 1. Time course from an idle GPU ({res['course_s']:g} s of load, events per ~2 ms "
        "chunk, hot L2)",
        "",
        "| case | 0.1-0.5 s | last 3 s | early vs late | power 0.1-0.3 s | power last 3 s | "
        "first limit |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    pct = lambda v: "-" if v is None else f"{v:.0%}"
    for name, c in res["cases"].items():
        s = c.get("course_summary") or {}
        if not s:
            lines.append(f"| {name} | {c.get('error', '-')} | | | | | |")
            continue
        first = "-" if s["first_limit_s"] is None else f"{s['first_limit_s']:.2f} s"
        lines.append(f"| {name} | {s['early_us']:.2f} us | {s['late_us']:.2f} us | "
                     f"{s['early_vs_late']:+.2%} | {pct(s['power_early_share'])} | "
                     f"{pct(s['power_late_share'])} | {first} |")
    lines += ["", "## 2-3. kbench's defaults, three back to back, against a long bench's "
              f"second half ({res['long_s']:g} s)", "",
              "| case | bench | figure | vs long | 2nd half vs 1st | idle before | wall | "
              "settled by (at) | settled again | limits while timed | temp | held |",
              "|---|---|---:|---:|---:|---:|---:|---|---|---|---:|---|"]
    for name, c in res["cases"].items():
        rows = list(zip(range(1, 4), c.get("defaults") or [], c.get("vs_long") or []))
        if c.get("long"):
            rows.append(("long", c["long"], None))
        for i, d, v in rows:
            again = (f"{d['resettle_reason']} at {d['resettle_timed_s']:.2f} s timed"
                     if d.get("resettle_reason") else "-")
            at = f" ({d['settle_at_s']:.2f} s)" if d.get("settle_at_s") is not None else ""
            halves = (f"{d['second_half_s'] / d['first_half_s'] - 1:+.2%}"
                      if d.get("first_half_s") and d.get("second_half_s") else "-")
            temp = f"{d['temp_c_median']:.0f} C" if d.get("temp_c_median") is not None else "-"
            idle = (f"{d['idle_before_s']:.2f} s" if d.get("idle_before_s") is not None
                    else "> 1 s")
            lines.append(f"| {name} | {i} | {d['median_s'] * 1e6:.2f} us +-{d['rel_ci']:.2%} | "
                         f"{'-' if v is None else f'{v:+.2%}'} | {halves} | {idle} | "
                         f"{d['wall_s']:.2f} s | "
                         f"{d['settled_by']}{at} | {again} | "
                         f"{', '.join(d['limits']) or '-'} | {temp} | {d['held']} |")
    lines += ["", "Regimes that did not hold, and warnings:", ""]
    for name, c in res["cases"].items():
        for i, d in enumerate((c.get("defaults") or []) + [c.get("long") or {}]):
            if d and (not d.get("held") or d.get("warnings")):
                lines.append(f"- {name} / {'long' if i == 3 else i + 1}: "
                             f"{d.get('why')}; {'; '.join(d.get('warnings') or []) or '-'}")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--course-s", type=float, default=8.0)
    ap.add_argument("--long-s", type=float, default=8.0)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    args = ap.parse_args(argv)
    todo = cases()
    if args.only:
        todo = {k: v for k, v in todo.items() if k in args.only.split(",")}
    facts = gpu_facts()
    res: Dict[str, Any] = {"gpu": facts, "course_s": args.course_s, "long_s": args.long_s,
                           "cases": {}}

    def save() -> None:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(res))

    for name, case in todo.items():
        c: Dict[str, Any] = {}
        res["cases"][name] = c
        try:
            course = time_course(case, args.course_s)
            c["course_bins"] = course_bins(course)
            c["course_summary"] = course_summary(course, facts["power_limit_w"])
            time.sleep(IDLE_S)
            c["defaults"] = [bench_row(case) for _ in range(3)]
            c["long"] = bench_row(case, max_time_s=args.long_s, target=1e-9)
            c["vs_long"] = versus_long(c["defaults"], c["long"])
        except Exception as e:      # recorded: the other cases still run
            c["error"] = f"{type(e).__name__}: {e}"
        s = c.get("course_summary") or {}
        print(f"{name}: course early vs late {s.get('early_vs_late')}, defaults "
              + ", ".join(f"{d['median_s'] * 1e6:.2f} us in {d['wall_s']:.2f} s "
                          f"({d['settled_by']}{', again' if d['resettle_reason'] else ''})"
                          for d in c.get("defaults") or [])
              + (f"; error {c['error']}" if "error" in c else ""), flush=True)
        save()
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
