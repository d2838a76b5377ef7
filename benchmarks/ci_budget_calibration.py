"""Is the CI that kbench's default budget states honest? (GPU or CPU.)

kbench's default stops at its 0.5% target or when the sampling budget is spent, whichever comes
first, and states the CI it reached. A stated CI is honest when it holds what other runs of the
same case read. For each case this runs kbench's defaults --runs times in two sets:

* procs: each run in a fresh process, --gap-s seconds apart (a user re-running a script);
* inproc: back to back in one process (a sweep, a pytest session);

and counts, per set, the runs whose CI holds the median of the set's medians (the goal: at
least 9 of 10). Beside it: the spread of the medians, the CIs' half-widths, each run's wall
time and stop rule. CPU cases run with and without a second busy process (--busy: one process
spinning on a core for the whole set).

    python benchmarks/ci_budget_calibration.py --device cuda --runs 10 \
        --out benchmarks/results/h100_ci_budget.json --md benchmarks/results/h100_ci_budget.md
    python benchmarks/ci_budget_calibration.py --device cpu --runs 10 --busy both \
        --out benchmarks/results/cpu_ci_budget.json --md benchmarks/results/cpu_ci_budget.md
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

GPU_CASES = ("bf16 mm 4096^3", "bf16 mm 4096x28672x4096", "add 64M f32")
CPU_CASES = ("np.add 16MB cold",)


def make_case(name: str) -> Tuple[Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]:
    """fn, args and bench options of a named case (seeded inputs)."""
    if name.startswith("np."):
        import numpy as np
        rng = np.random.default_rng(0)
        a, b = rng.random((2, 1 << 22), dtype=np.float32)
        c = np.empty_like(a)
        return np.add, (a, b), {"kwargs": {"out": c}, "bytes": 3 * a.nbytes}
    import torch
    torch.manual_seed(0)
    if name.startswith("add"):
        x = torch.randn(1 << 26, device="cuda")
        y = torch.empty_like(x)
        return torch.add, (x, 1.0), {"kwargs": {"out": y}, "bytes": 2 * x.nbytes}
    m, n, k = {"bf16 mm 4096^3": (4096, 4096, 4096),
               "bf16 mm 4096x28672x4096": (4096, 28672, 4096)}[name]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return torch.mm, (a, b), {"kwargs": {"out": c}, "flops": 2.0 * m * n * k}


def one_run(name: str, opts: Dict[str, Any],
            made: Optional[Tuple[Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]] = None
            ) -> Dict[str, Any]:
    import kbench
    fn, args, kw = made or make_case(name)
    t = time.perf_counter()
    r = kbench.bench(fn, *args, **kw, **opts)
    wall = time.perf_counter() - t
    s = r.stats
    regime = (r.extra.get("regime") or {})
    between = r.extra.get("between_runs") or {}
    return {"median_s": r.median, "ci_low_s": s["ci_low"], "ci_high_s": s["ci_high"],
            "ci_low_within_s": s.get("ci_low_within", s["ci_low"]),
            "ci_high_within_s": s.get("ci_high_within", s["ci_high"]),
            "between_source": between.get("source"), "between_runs": between.get("runs"),
            "widened": between.get("widened"),
            "n": s["n"], "stop": r.stop.get("stop"), "achieved": r.stop.get("achieved"),
            "serial_vif": s.get("serial_vif"), "vif_saturated": s.get("vif_saturated"),
            "wall_s": wall, "regime": regime.get("name"), "regime_held": regime.get("held"),
            "warnings": list(r.warnings)[:3]}


def child_main(name: str, opts_json: str) -> None:
    print("RESULT " + json.dumps(one_run(name, json.loads(opts_json))), flush=True)


def in_processes(name: str, opts: Dict[str, Any], runs: int, gap_s: float) -> List[Dict[str, Any]]:
    out = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name,
                            json.dumps(opts)], capture_output=True, text=True, timeout=120)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        out.append(json.loads(line[-1][7:]) if line else
                   {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]})
        time.sleep(gap_s)
    return out


def in_one_process(name: str, opts: Dict[str, Any], runs: int) -> List[Dict[str, Any]]:
    made = make_case(name)
    return [one_run(name, opts, made) for _ in range(runs)]


def coverage(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    ok = [r for r in rows if "median_s" in r]
    if not ok:
        return {"runs": 0}
    center = statistics.median(r["median_s"] for r in ok)
    held = sum(r["ci_low_s"] <= center <= r["ci_high_s"] for r in ok)
    held_within = sum(r["ci_low_within_s"] <= center <= r["ci_high_within_s"] for r in ok)
    meds = [r["median_s"] for r in ok]
    half = [0.5 * (r["ci_high_s"] - r["ci_low_s"]) / r["median_s"] for r in ok]
    return {"runs": len(ok), "held": held, "held_within": held_within,
            "widened": sum(bool(r.get("widened")) for r in ok), "median_of_medians_s": center,
            "spread_pct": 100 * (max(meds) - min(meds)) / center,
            "ci_halfwidth_pct": [100 * min(half), 100 * statistics.median(half), 100 * max(half)],
            "wall_s": [min(r["wall_s"] for r in ok), statistics.median(r["wall_s"] for r in ok),
                       max(r["wall_s"] for r in ok)],
            "stops": sorted({r["stop"] for r in ok})}


def spin() -> None:
    while True:
        pass


def markdown(res: Dict[str, Any]) -> str:
    lines = [f"# Does the default budget's CI hold other runs' median? ({res['device_name']})", "",
             f"commit {res.get('commit')}; {res['runs']} runs per set; procs: fresh processes "
             f"{res['gap_s']} s apart; inproc: back to back in one process. 'held': runs whose "
             f"95% CI holds the median of the set's medians (goal >= 9 of 10); each set begins with "
             f"no run history (KBENCH_RUN_HISTORY: a fresh file), so its first run states its own "
             f"CI alone and the later ones the between-run spread of the runs before them and "
             f"themselves (kbench.measure.runhistory; the second with Student's t of one "
             f"degree of freedom). 'this run alone': the same count with each run's own CI.", "",
             "| case | options | busy host | set | held | this run alone | widened | median of "
             "medians | spread of medians | CI half-width min / median / max | wall min / "
             "median / max (s) | stops |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for c in res["sets"]:
        cv = c["coverage"]
        if not cv.get("runs"):
            lines.append(f"| {c['case']} | {c['opts']} | {c['busy']} | {c['set']} | no run | "
                         f"| | | | | | |")
            continue
        h = cv["ci_halfwidth_pct"]
        w = cv["wall_s"]
        lines.append(f"| {c['case']} | {json.dumps(c['opts'])} | {c['busy']} | {c['set']} | "
                     f"{cv['held']}/{cv['runs']} | {cv.get('held_within', '-')}/{cv['runs']} | "
                     f"{cv.get('widened', '-')} | {cv['median_of_medians_s'] * 1e6:.2f} us | "
                     f"{cv['spread_pct']:.2f}% | {h[0]:.2f} / {h[1]:.2f} / {h[2]:.2f}% | "
                     f"{w[0]:.2f} / {w[1]:.2f} / {w[2]:.2f} | {', '.join(cv['stops'])} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--cases", help="comma-separated case names (default: the device's)")
    ap.add_argument("--regimes", default="default,sustained",
                    help="GPU: 'default' (kbench's) and/or 'sustained'/'burst'")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--gap-s", type=float, default=2.0)
    ap.add_argument("--sets", default="procs,inproc")
    ap.add_argument("--busy", choices=("no", "yes", "both"), default="no",
                    help="CPU: a second process spinning for the whole set")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    args = ap.parse_args()
    cases = args.cases.split(",") if args.cases else list(
        GPU_CASES if args.device == "cuda" else CPU_CASES)
    regimes = args.regimes.split(",") if args.device == "cuda" else ["default"]
    busy = {"no": [False], "yes": [True], "both": [False, True]}[args.busy]
    if args.device == "cuda":
        import torch
        name = torch.cuda.get_device_name(0)
    else:
        import platform
        name = f"{platform.processor() or 'CPU'}, {os.cpu_count()} CPUs"
    res: Dict[str, Any] = {"device_name": name, "commit": os.environ.get("KBENCH_GIT_COMMIT"),
                           "runs": args.runs, "gap_s": args.gap_s, "sets": []}

    def save() -> None:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(res))
    history_dir = tempfile.mkdtemp(prefix="kbench-ci-budget-")
    for case in cases:
        for regime in regimes:
            opts = {} if regime == "default" else {"regime": regime}
            for is_busy in busy:
                hog = mp.Process(target=spin, daemon=True) if is_busy else None
                if hog:
                    hog.start()
                try:
                    for which in args.sets.split(","):
                        # each set begins with no run history, as a new user does
                        os.environ["KBENCH_RUN_HISTORY"] = os.path.join(
                            history_dir, f"set-{len(res['sets'])}.json")
                        rows = (in_processes(case, opts, args.runs, args.gap_s)
                                if which == "procs" else in_one_process(case, opts, args.runs))
                        cv = coverage(rows)
                        res["sets"].append({"case": case, "opts": opts, "busy": is_busy,
                                            "set": which, "coverage": cv, "rows": rows})
                        print(f"{case:26} {json.dumps(opts):22} busy={is_busy!s:5} {which:6} "
                              f"held {cv.get('held')}/{cv.get('runs')} (alone "
                              f"{cv.get('held_within')}) spread "
                              f"{cv.get('spread_pct', float('nan')):.2f}% CI "
                              f"{cv.get('ci_halfwidth_pct')} wall {cv.get('wall_s')}", flush=True)
                        save()
                finally:
                    if hog:
                        hog.terminate()
                        hog.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
