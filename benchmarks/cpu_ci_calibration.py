"""Does kbench's CI of the median cover what the next run reads? (CPU, one process.)

The CI of a run's median claims where that run's true median lies. On a shared machine the
samples of one run are not independent (a neighbour's burst, frequency steps), and the
independent order-statistic CI is then too narrow; kbench widens it by the variance inflation
the samples' order shows (`serial_vif`, stats.c). This benchmark measures how often each CI
covers the figure the other runs read: several cases, each run many times with a short time
cap, interleaved round-robin so the machine's drift reaches every case alike. For each run:

* covered: its reported CI holds the median of the other runs' medians (leave-one-out);
* covered if independent: the same with the CI summarize gives when told the samples have no
  order (`ordered=False`), which is what kbench reported before the inflation.

A CI at 95% would cover the leave-one-out figure in about 95% of runs if the machine were
stationary and the CI right; drift between runs lowers both rates, so read them side by side.

    PYTHONPATH=$PWD python3 benchmarks/cpu_ci_calibration.py --runs 20 --out-dir benchmarks/results
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import kbench
from kbench import _core, metadata

ROOT = Path(__file__).resolve().parents[1]


def spin(seconds: float) -> Callable[[], None]:
    def fn() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return fn


def cases() -> Dict[str, Dict[str, Any]]:
    rng = np.random.default_rng(0)
    small = rng.random((3, 1 << 18), dtype=np.float32)      # 1 MB an array: cache-resident
    big = rng.random((3, 1 << 22), dtype=np.float32)        # 16 MB an array
    return {
        "spin 50 us (hot)": dict(fn=spin(50e-6), args=(), device="cpu", cold_cache=None),
        "np.add 1 MB (hot)": dict(fn=np.add, args=(small[0], small[1]),
                                  kwargs={"out": small[2]}, cold_cache=None),
        "np.add 16 MB (cold, flush)": dict(fn=np.add, args=(big[0], big[1]),
                                           kwargs={"out": big[2]}),
    }


def one_run(case: Dict[str, Any], max_time_s: float) -> Dict[str, Any]:
    opts = {k: v for k, v in case.items() if k not in ("fn", "args")}
    r = kbench.bench(case["fn"], *case["args"], warmup_s=0.1, max_time_s=max_time_s, **opts)
    plain = _core.summarize(np.asarray(r.samples), r.stats["ci_level"], ordered=False)
    s = r.stats
    return {"median_s": s["median"], "ci_low_s": s["ci_low"], "ci_high_s": s["ci_high"],
            "rel_ci": s["rel_ci_halfwidth"], "serial_vif": s["serial_vif"],
            "ci_inflation": s["ci_inflation"], "plain_low_s": plain["ci_low"],
            "plain_high_s": plain["ci_high"], "plain_rel_ci": plain["rel_ci_halfwidth"],
            "n": r.n, "stop": r.stop["stop"], "wall_s": r.stop.get("wall_s")}


def finite_median(xs) -> Optional[float]:
    vals = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(vals) if vals else None


def coverage(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    medians = [r["median_s"] for r in runs]
    covered = plain = 0
    for i, r in enumerate(runs):
        others = statistics.median(medians[:i] + medians[i + 1:])
        covered += r["ci_low_s"] <= others <= r["ci_high_s"]
        plain += r["plain_low_s"] <= others <= r["plain_high_s"]
    n = len(runs)
    return {"runs": n, "covered": covered / n, "covered_if_independent": plain / n,
            "median_of_medians_s": statistics.median(medians),
            "spread_of_medians": max(medians) / min(medians) - 1,
            "rel_ci_median": statistics.median(r["rel_ci"] for r in runs),
            "plain_rel_ci_median": statistics.median(r["plain_rel_ci"] for r in runs),
            "inflated_runs": sum(r["ci_inflation"] > 1.0 for r in runs),
            # None when no run had enough samples to estimate it (NaN in every run)
            "serial_vif_median": finite_median(r["serial_vif"] for r in runs),
            "precision_stops": sum(r["stop"] == "precision" for r in runs)}


def machine() -> Dict[str, Any]:
    info = _core.cpu_cache_info()
    git = metadata.git_info(str(ROOT)) or {}
    return {"cpu": metadata.cpu_model(), "hypervisor": metadata.cpu_hypervisor(),
            "cpus": os.cpu_count(), "llc_bytes": info.get("llc_bytes"),
            "python": platform.python_version(), "numpy": np.__version__,
            "commit": (git.get("commit") or "unknown")[:7], "load_before": os.getloadavg()[0]}


def markdown(res: Dict[str, Any]) -> str:
    md = res["machine"]
    lines = [
        "# Does the CI of the median cover what the other runs read? (CPU)",
        "",
        f"{res['runs']} runs a case, {res['max_time_s']} s cap each, interleaved round-robin in "
        f"one process. Machine: {md['cpu']}, {md['cpus']} logical CPUs"
        f"{', a VM' if md.get('hypervisor') else ''}, load "
        f"{md['load_before']:.2f} before the run; Python {md['python']}, numpy {md['numpy']}, "
        f"kbench at {md['commit']}. Generated by `benchmarks/cpu_ci_calibration.py`; numbers in "
        f"`{res.get('stem', 'cpu_ci_calibration')}.json`.",
        "",
        "| case | covered (kbench's CI) | covered if independent | CI half-width, median "
        "(independent) | runs inflated | serial_vif median | spread of the runs' medians | "
        "precision stops |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in res["coverage"].items():
        vif = "-" if c["serial_vif_median"] is None else f"{c['serial_vif_median']:.1f}"
        lines.append(
            f"| {name} | {c['covered']:.0%} | {c['covered_if_independent']:.0%} | "
            f"+-{c['rel_ci_median']:.2%} (+-{c['plain_rel_ci_median']:.2%}) | "
            f"{c['inflated_runs']} of {c['runs']} | {vif} | "
            f"{c['spread_of_medians']:.1%} | {c['precision_stops']} of {c['runs']} |")
    lines += [
        "",
        "Covered: the run's 95% CI holds the median of the other runs' medians. A stationary "
        "machine and a right CI would give about 95%; drift between runs (seconds apart) "
        "lowers both columns, so the gap between them is what the inflation buys.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--max-time-s", type=float, default=1.0)
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--stem", default="cpu_ci_calibration",
                    help="the result files' name, without .json/.md (another host's run)")
    args = ap.parse_args(argv)
    res: Dict[str, Any] = {"machine": machine(), "runs": args.runs,
                           "max_time_s": args.max_time_s}
    todo = cases()
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in todo}
    for i in range(args.runs):
        for name, case in todo.items():
            runs[name].append(one_run(case, args.max_time_s))
        print(f"round {i}: " + ", ".join(
            f"{name} {runs[name][-1]['median_s'] * 1e6:.2f} us +-{runs[name][-1]['rel_ci']:.2%}"
            for name in todo), flush=True)
    res["per_run"] = runs
    res["coverage"] = {name: coverage(r) for name, r in runs.items()}
    res["stem"] = args.stem
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.json").write_text(json.dumps(res, indent=1))
    text = markdown(res)
    (out / f"{args.stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
