"""Does kbench's CI of the median cover what the other runs read? (GPU, one process.)

The GPU counterpart of cpu_ci_calibration.py. A power-capped kernel's samples swing with the
power controller (the H200's capped clock dips about once a second), so kbench widens the CI of
the median by the variance inflation the samples' order shows (`serial_vif`, stats.c), and a
capped GEMM samples for seconds before its CI meets the 0.5% target. This benchmark sets that CI
against what other runs of the same case read. Each case is run --runs times with kbench's
defaults (sustained regime, cold L2, CUPTI, 0.5% target), interleaved round-robin, with an idle
gap of 0, 0.25, 0.5 or 2 s before each run (from a seeded generator), so every case meets several
histories. For each run:

* covered: its CI holds the median of the other runs' medians (leave-one-out);
* covered if independent: the same with the CI summarize gives when told the samples have no
  order (`ordered=False`).

Per case, the spread of the runs' medians stands beside the CIs' half-widths: a CI much wider
than the runs' spread costs sampling time and buys no precision; one narrower does not cover.
Beside them, what is left of the settle's transient when sampling began: each run's first
second of samples against its second half, apart for the runs whose settle continued the time
of a capped load before them (`continued_s`: a GEMM within 0.25 s of the other GEMM's end).

With --long-s S, each GEMM is also benched once for S seconds with no precision stop. Each
prefix of its samples (the first 0.5, 1, 2, ... s of sampling) is set against the whole run:
the prefix's median, its deviation from the whole run's median, and the CI half-width kbench
gives that prefix. --samples writes every run's samples, in order, to an .npz for replaying stop
rules offline.

    python benchmarks/gpu_ci_calibration.py --runs 8 --long-s 20 \
        --out benchmarks/results/h200_ci_calibration.json \
        --md benchmarks/results/h200_ci_calibration.md
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from _coverage import finite_median, leave_one_out
from _gpu import finite_or_none as _num, gpu_facts

HERE = os.path.dirname(os.path.abspath(__file__))
GAPS_S = (0.0, 0.25, 0.5, 2.0)
PREFIXES_S = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)


def cases() -> Dict[str, Dict[str, Any]]:
    """name -> fn, args, kwargs, long (benched once for --long-s too)."""
    import torch
    torch.manual_seed(0)
    dev = "cuda"
    a1 = torch.randn(4000, 4096, device=dev, dtype=torch.bfloat16)
    b1 = torch.randn(4096, 11008, device=dev, dtype=torch.bfloat16)
    a2 = torch.randn(8192, 4096, device=dev, dtype=torch.float16)
    b2 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    x64, y64 = torch.randn(1 << 26, device=dev), torch.randn(1 << 26, device=dev)
    x1, y1 = torch.randn(1 << 20, device=dev), torch.randn(1 << 20, device=dev)
    return {
        "bf16 mm 4000x4096x11008": dict(fn=torch.mm, args=(a1, b1), long=True),
        "f16 mm 8192x4096x4096": dict(fn=torch.mm, args=(a2, b2), long=True),
        "add 64M f32": dict(fn=torch.add, args=(x64, y64), long=False),
        "add 1M f32": dict(fn=torch.add, args=(x1, y1), long=False),
    }


def one_run(case: Dict[str, Any], **opts: Any) -> Tuple[Dict[str, Any], np.ndarray, Any]:
    """One bench: its figures and settle, its samples in order, its NVML trace (or None)."""
    import kbench
    from kbench import _core
    t0 = time.perf_counter()
    r = kbench.bench(case["fn"], *case["args"], **opts)
    wall = time.perf_counter() - t0
    samples = np.asarray(r.samples, dtype=np.float64)
    plain = _core.summarize(samples, r.stats["ci_level"], ordered=False)
    s, st = r.stats, dict(r.stop or {})
    settle = r.extra.get("clock_settle") or {}
    regime = r.extra.get("regime") or {}
    clocks = r.extra.get("clocks") or {}
    return {"median_s": s["median"], "ci_low_s": s["ci_low"], "ci_high_s": s["ci_high"],
            "rel_ci": s["rel_ci_halfwidth"], "serial_vif": _num(s.get("serial_vif")),
            "ci_inflation": s["ci_inflation"], "plain_low_s": plain["ci_low"],
            "plain_high_s": plain["ci_high"], "plain_rel_ci": plain["rel_ci_halfwidth"],
            "n": r.n, "stop": st.get("stop"), "wall_s": wall,
            "warmup_s": _num(st.get("warmup_s")), "sampling_s": _num(st.get("sampling_s")),
            "limits": list(clocks.get("throttle_reasons") or []),
            "timed_sm_mhz": _num(clocks.get("sm_mhz_median")),
            "first_s_vs_late": first_second(samples, _num(st.get("sampling_s"))),
            "settle_at_s": _num(settle.get("at_s")), "settle_sm_mhz": _num(settle.get("sm_mhz")),
            "by_carry": settle.get("by_carry"), "at_max_clock": settle.get("at_max_clock"),
            "carried_from_s_ago": _num(settle.get("carried_from_s_ago")),
            "carried_sm_mhz": _num(settle.get("carried_sm_mhz")),
            "carried_under_limit": settle.get("carried_under_limit"),
            "carried_loaded_s": _num(settle.get("carried_loaded_s")),
            "continued_s": _num(settle.get("continued_s")),
            "held": regime.get("held"), "why": regime.get("why"),
            "warnings": list(r.warnings)}, samples, r.extra.get("clock_trace")


def first_second(samples: np.ndarray, sampling_s: Optional[float]) -> Optional[float]:
    """The median of the first second of sampling against that of the run's second half - 1
    (None for a run under 2 s): what is left of the settle's transient when sampling began."""
    if not sampling_s or sampling_s < 2.0:
        return None
    k = int(len(samples) / sampling_s)
    return float(np.median(samples[:k]) / np.median(samples[len(samples) // 2:]) - 1)


def carried_capped(row: Dict[str, Any]) -> bool:
    """The run continued a capped load's time (a carried state under a limit, by either rule)."""
    return (row.get("continued_s") or 0) > 0


def coverage(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    return dict(leave_one_out(runs),
                sampling_s_median=finite_median(r["sampling_s"] for r in runs),
                wall_s_median=statistics.median(r["wall_s"] for r in runs),
                limited_runs=sum(bool(r["limits"]) for r in runs),
                first_s_median=finite_median(r["first_s_vs_late"] for r in runs
                                             if not carried_capped(r)),
                first_s_carried_median=finite_median(r["first_s_vs_late"] for r in runs
                                                     if carried_capped(r)),
                carried_capped_runs=sum(carried_capped(r) for r in runs),
                held_runs=sum(bool(r["held"]) for r in runs))


def prefixes(samples: np.ndarray, sampling_s: float, ci_level: float) -> List[Dict[str, Any]]:
    """The first t s of a long run's samples against the whole run (sample times taken as
    evenly spread over the sampling time: the calls are back to back)."""
    from kbench import _core
    whole = float(np.median(samples))
    rows = []
    for t in PREFIXES_S:
        k = int(len(samples) * t / sampling_s)
        if t > sampling_s or k < 16:
            continue
        s = _core.summarize(samples[:k], ci_level)
        rows.append({"t_s": t, "n": k, "median_s": s["median"],
                     "dev_from_whole": s["median"] / whole - 1, "rel_ci": s["rel_ci_halfwidth"],
                     "ci_inflation": s["ci_inflation"],
                     "covers_whole": bool(s["ci_low"] <= whole <= s["ci_high"])})
    return rows


def markdown(res: Dict[str, Any]) -> str:
    g = res["gpu"]
    lines = [
        "# Does the CI of the median cover what the other runs read? (GPU)",
        "",
        f"{g['gpu']} ({g.get('uuid') or '?'}), torch {g['torch']}, kbench at {g['commit']}. "
        f"{res['runs']} runs a case with kbench's defaults (sustained, cold L2, CUPTI, 0.5% "
        "target), interleaved round-robin in one process, an idle gap of "
        f"{', '.join(f'{g:g}' for g in res.get('gaps_s', GAPS_S))} s before each. Generated by "
        "`benchmarks/gpu_ci_calibration.py`.",
        "",
        "| case | covered (kbench's CI) | covered if independent | CI half-width, median "
        "(independent) | runs inflated, serial_vif median | spread of the runs' medians | "
        "deviation from the others, median / max | sampling s, median | precision stops | "
        "clock limited | first second against the second half (runs that continued a capped "
        "load) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    pct = lambda v: "-" if v is None else f"{v:+.2%}"   # noqa: E731
    for name, c in res["coverage"].items():
        vif = "-" if c["serial_vif_median"] is None else f"{c['serial_vif_median']:.1f}"
        samp = "-" if c["sampling_s_median"] is None else f"{c['sampling_s_median']:.2f}"
        lines.append(
            f"| {name} | {c['covered']:.0%} | {c['covered_if_independent']:.0%} | "
            f"+-{c['rel_ci_median']:.3%} (+-{c['plain_rel_ci_median']:.3%}) | "
            f"{c['inflated_runs']} of {c['runs']}, {vif} | {c['spread_of_medians']:.3%} | "
            f"{c['loo_dev_median']:.3%} / {c['loo_dev_max']:.3%} | {samp} | "
            f"{c['precision_stops']} of {c['runs']} | {c['limited_runs']} of {c['runs']} | "
            f"{pct(c['first_s_median'])} ({pct(c['first_s_carried_median'])}, "
            f"{c['carried_capped_runs']} runs) |")
    lines += [
        "",
        "Covered: the run's 95% CI holds the median of the other runs' medians. Deviation: "
        "|a run's median / the others' median - 1|. Clock limited: a limit reason (sw_power_cap "
        "on the H200) in the timed part. First second: the median of a run's first second of "
        "sampling against its second half's, the median over runs of 2 s or more, apart for the "
        "runs whose settle continued the time of a capped load before them (`continued_s`: the "
        "case before in the round, ended at most 0.25 s before).",
    ]
    for name, lr in res.get("long", {}).items():
        if "error" in lr:
            lines += ["", f"Long run of {name}: failed: {lr['error']}"]
            continue
        lines += ["", f"## {name}: one run of {lr['sampling_s']:.1f} s, no precision stop",
                  "",
                  f"Whole run: {lr['median_s'] * 1e6:.2f} us, {lr['n']} samples, CI "
                  f"+-{lr['rel_ci']:.3%} (x{lr['ci_inflation']:.0f}), clock limits in the timed "
                  f"part: {', '.join(lr['limits']) or 'none'}. Each prefix of its samples:",
                  "",
                  "| first s | samples | median (us) | from the whole run's | kbench's CI "
                  "half-width (inflation) | holds the whole run's |",
                  "|---:|---:|---:|---:|---:|---|"]
        for p in lr["prefixes"]:
            lines.append(f"| {p['t_s']:g} | {p['n']} | {p['median_s'] * 1e6:.2f} | "
                         f"{p['dev_from_whole']:+.3%} | +-{p['rel_ci']:.3%} "
                         f"(x{p['ci_inflation']:.0f}) | {p['covers_whole']} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--long-s", type=float, default=0.0,
                    help="bench each GEMM once more for this long, no precision stop (0: no)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    ap.add_argument("--samples", help="an .npz for every run's samples, in order")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    todo = cases()
    rng = random.Random(args.seed)
    res: Dict[str, Any] = {"gpu": gpu_facts(), "runs": args.runs, "gaps_s": list(GAPS_S)}
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in todo}
    arrays: Dict[str, np.ndarray] = {}

    def save(samples_too: bool = False) -> None:
        """The JSON and page after each round; the samples' archive (seconds to compress) only
        at the end, so no round starts after an idle pause its gap_s does not show."""
        res["per_run"] = runs
        res["coverage"] = {n: coverage(r) for n, r in runs.items() if len(r) >= 3}
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(res))
        if samples_too and args.samples:
            np.savez_compressed(args.samples, **arrays)

    def keep(key: str, samples: np.ndarray, trace: Any) -> None:
        """The run's samples and, where NVML was read, its trace: t (s, 0 where the timed part
        began), SM clock, instantaneous and averaged power, reasons, and the load's start."""
        arrays[key] = samples
        if trace:
            for field in ("t_s", "sm_mhz", "power_inst_w", "power_w", "reasons"):
                arrays[f"{key}_{field}"] = np.asarray(trace[field])
            arrays[f"{key}_load_start_s"] = np.asarray(trace.get("load_start_s") or np.nan)

    for i in range(args.runs):
        for ci, (name, case) in enumerate(todo.items()):
            gap = rng.choice(GAPS_S)
            time.sleep(gap)
            row, samples, trace = one_run(case)
            row["gap_s"] = gap
            runs[name].append(row)
            keep(f"{ci}_{i}", samples, trace)
        print(f"round {i}: " + ", ".join(
            f"{n} {runs[n][-1]['median_s'] * 1e6:.2f} us +-{runs[n][-1]['rel_ci']:.2%} "
            f"in {runs[n][-1]['sampling_s'] or 0:.1f} s" for n in todo), flush=True)
        save()
    res["long"] = {}
    if args.long_s > 0:
        for ci, (name, case) in enumerate(todo.items()):
            if not case["long"]:
                continue
            try:
                row, samples, trace = one_run(case, max_time_s=args.long_s, target=1e-9)
            except Exception as e:   # recorded: the coverage above still stands
                res["long"][name] = {"error": f"{type(e).__name__}: {e}"}
                continue
            row["prefixes"] = prefixes(samples, row["sampling_s"] or args.long_s, 0.95)
            res["long"][name] = row
            keep(f"{ci}_long", samples, trace)
            save()
    save(samples_too=True)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
