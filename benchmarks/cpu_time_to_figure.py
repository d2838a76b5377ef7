"""Time to a trustworthy figure on the CPU (issue 17): kbench against timeit and pytest-benchmark.

One call, each tool at its defaults: a 16 MB float32 ``np.add(a, b, out=c)`` (4M elements a
vector). Per round, in one process and alternating which goes first:

* kbench: ``kbench.bench(np.add, a, b, kwargs={"out": c})``, its defaults (cold cache: a 2x-LLC
  flush before each sample, outside the timed region; 0.5% CI of the median), and the same
  with ``cold_cache=None`` (hot, like the other two tools);
* timeit: what ``python -m timeit`` does, ``Timer.autorange()`` (to 0.2 s) then
  ``repeat(5, number)``;
* pytest-benchmark (where installed, unless --no-pytest-benchmark): one pytest session per round
  at its defaults; the wall time of the ``benchmark()`` call inside the test.

Reported: each tool's wall time, kbench's per round divided by timeit's of the same round (the
ratio, paired, so machine drift cancels), kbench's CI and where its time went (warm-up,
sampling, the flushes inside each, overhead). Medians over rounds.

    PYTHONPATH=$PWD python3 benchmarks/cpu_time_to_figure.py --rounds 7 --out-dir benchmarks/results
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

import kbench
from kbench import _core
from kbench.provenance import metadata

ROOT = Path(__file__).resolve().parents[1]
N = 1 << 22         # float32 elements: 16 MB an array


def arrays():
    a, b = np.random.default_rng(0).random((2, N), dtype=np.float32)
    return a, b, np.empty_like(a)


def run_kbench(a, b, c, **kw) -> Dict[str, Any]:
    t0 = time.perf_counter()
    r = kbench.bench(np.add, a, b, kwargs={"out": c}, **kw)
    wall = time.perf_counter() - t0
    st, cc = r.stop, r.cold_cache
    return {"wall_s": wall, "n": r.n, "median_s": r.median,
            "rel_ci_halfwidth": r.stats["rel_ci_halfwidth"], "stop": st["stop"],
            "serial_vif": r.stats.get("serial_vif"), "ci_inflation": r.stats.get("ci_inflation"),
            "iqr_over_median": r.stats["iqr"] / r.median, "max_time_s": st["max_time_s"],
            "warmup_s": st["warmup_s"], "warmup_iters": st["warmup_iters"],
            "warmup_stable": st.get("warmup_stable"), "sampling_s": st["sampling_s"],
            "bench_wall_s": st.get("wall_s"), "flush_s": cc.get("flush_s"),
            "flush_warmup_s": cc.get("flush_warmup_s"), "flush_setup_s": cc.get("setup_s"),
            "flush_bytes": cc.get("flush_bytes"),
            "host_busy": (r.extra.get("host_load") or {}).get("busy"),
            "host_others_cpus": (r.extra.get("host_load") or {}).get("others_cpus"),
            "time_row": next(
                (ln.split(":", 1)[1].strip() for ln in repr(r).splitlines()
                 if ln.strip().startswith("Time:")), None)}


def run_timeit(a, b, c) -> Dict[str, Any]:
    t0 = time.perf_counter()
    t = timeit.Timer(lambda: np.add(a, b, out=c))
    number, _ = t.autorange()
    raw = t.repeat(repeat=5, number=number)
    wall = time.perf_counter() - t0
    per_call = [x / number for x in raw]
    return {"wall_s": wall, "number": number, "best_s": min(per_call),
            "median_s": statistics.median(per_call),
            "range_over_best": (max(per_call) - min(per_call)) / min(per_call)}


PYTEST_FILE = '''
import json, os, time
import numpy as np

a, b = np.random.default_rng(0).random((2, {n}), dtype=np.float32)
c = np.empty_like(a)


def test_add_16mb(benchmark):
    t0 = time.perf_counter()
    benchmark(np.add, a, b, out=c)
    with open(os.environ["TTF_WALL"], "w") as f:
        json.dump({{"wall_s": time.perf_counter() - t0}}, f)
'''


def run_pytest_benchmark() -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kbench_ttf_") as tmp:
        test_file = Path(tmp) / "test_ttf.py"
        test_file.write_text(textwrap.dedent(PYTEST_FILE.format(n=N)))
        json_path, wall_path = Path(tmp) / "bench.json", Path(tmp) / "wall.json"
        env = dict(os.environ, TTF_WALL=str(wall_path))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kbench",
               "--rootdir", tmp, f"--benchmark-json={json_path}", str(test_file)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=600)
        session = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"pytest-benchmark failed ({proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        st = json.loads(json_path.read_text())["benchmarks"][0]["stats"]
        wall = json.loads(wall_path.read_text())["wall_s"]
    return {"wall_s": wall, "session_wall_s": session, "rounds": st["rounds"],
            "iterations": st["iterations"], "median_s": st["median"], "min_s": st["min"],
            "iqr_over_median": st["iqr"] / st["median"]}


def med(xs: List[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return float(statistics.median(xs)) if xs else None


def fmt(x: Optional[float], spec: str = ".2f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


def calibration(runs: List[Dict[str, Any]]) -> str:
    """The rounds' medians, their spread and the CIs they claimed."""
    medians = [x["median_s"] for x in runs]
    cis = [x["rel_ci_halfwidth"] * 100 for x in runs]
    return (", ".join(f"{m * 1e3:.3f}" for m in medians) +
            f" ms (spread {(max(medians) / min(medians) - 1) * 100:.1f}%, CIs "
            f"+-{min(cis):.2f}..{max(cis):.2f}%)")


def host_caveat(md: Dict[str, Any]) -> str:
    """How to read a run on this host: a VM's figures move with its neighbours' load."""
    vm = md.get("hypervisor")
    where = ("A VM: its figures move with its neighbours' load" if vm else
             "Not a VM" if vm is False else "Virtualisation unknown")
    return f"{where}; quote medians and the paired ratios."


def markdown(res: Dict[str, Any]) -> str:
    rounds = res["rounds"]
    md = res["machine"]
    kb = [r["kbench"] for r in rounds]
    hot = [r["kbench_hot"] for r in rounds]
    ti = [r["timeit"] for r in rounds]
    pb = [r["pytest_benchmark"] for r in rounds if r.get("pytest_benchmark")]

    def row(label, xs, key="wall_s"):
        v = [x[key] for x in xs]
        return f"| {label} | {med(v):.2f} s | {min(v):.2f}..{max(v):.2f} s |"

    lines = [
        "# Time to a figure on the CPU: kbench vs timeit vs pytest-benchmark",
        "",
        f"`np.add(a, b, out=c)`, float32, 4M elements (16 MB an array), each tool at its "
        f"defaults; {len(rounds)} rounds in one process, alternating which tool goes first. "
        f"Machine: {md['cpu']}, {md['cpus']} logical CPUs, last-level cache "
        f"{md['llc_bytes'] / 2**20:.0f} MB (kbench's flush: {md['flush_bytes'] / 2**20:.0f} MB "
        f"before each sample); Python {md['python']}, numpy {md['numpy']}, kbench at "
        f"{md['commit']}. {host_caveat(md)}",
        "",
        "Generated by `benchmarks/cpu_time_to_figure.py`; numbers in "
        f"`{res.get('stem', 'cpu_time_to_figure')}.json`.",
        "",
        "## Wall time to the figure",
        "",
        "| tool | median | range |",
        "|---|---:|---:|",
        row("kbench defaults (cold: flush before each sample)", kb),
        row("kbench cold_cache=None (hot)", hot),
        row("timeit autorange + repeat(5) (hot)", ti),
    ]
    if pb:
        lines.append(row("pytest-benchmark defaults, benchmark() call (hot)", pb))
    ratios = [r["kbench"]["wall_s"] / r["timeit"]["wall_s"] for r in rounds]
    hot_ratios = [r["kbench_hot"]["wall_s"] / r["timeit"]["wall_s"] for r in rounds]
    free_ratios = [(r["kbench"]["wall_s"] - sum(r["kbench"].get(k) or 0.0 for k in (
        "flush_s", "flush_warmup_s", "flush_setup_s"))) / r["timeit"]["wall_s"] for r in rounds]
    call_ratios = [r["kbench"]["n"] * r["kbench"]["median_s"] / r["timeit"]["wall_s"]
                   for r in rounds]
    lines += [
        "",
        f"**kbench / timeit, paired by round: {med(ratios):.2f}x** (rounds: "
        f"{', '.join(f'{x:.2f}' for x in ratios)}); hot kbench / timeit {med(hot_ratios):.2f}x "
        f"({', '.join(f'{x:.2f}' for x in hot_ratios)}).",
        "",
        # the bound on any cheaper eviction: the same bench with every flush free, and the cold
        # calls alone (samples x median), each over the same round's timeit
        f"Without the flushes (every flush free, same samples): {med(free_ratios):.2f}x timeit "
        f"({', '.join(f'{x:.2f}' for x in free_ratios)}); the cold calls alone (samples x "
        f"median): {med(call_ratios):.2f}x ({', '.join(f'{x:.2f}' for x in call_ratios)}).",
        "",
        "## kbench's figure and where its time went (medians over rounds)",
        "",
        "| | cold (defaults) | hot |",
        "|---|---:|---:|",
        f"| median per call | {med([x['median_s'] for x in kb]) * 1e3:.3f} ms | "
        f"{med([x['median_s'] for x in hot]) * 1e3:.3f} ms |",
        f"| 95% CI of the median, half-width | "
        f"{fmt(med([x['rel_ci_halfwidth'] for x in kb]) * 100, '.2f', '%')} (max "
        f"{max(x['rel_ci_halfwidth'] for x in kb) * 100:.2f}%) | "
        f"{fmt(med([x['rel_ci_halfwidth'] for x in hot]) * 100, '.2f', '%')} |",
        f"| samples | {med([x['n'] for x in kb]):.0f} | {med([x['n'] for x in hot]):.0f} |",
        f"| CI inflation from the samples' order (rounds inflated) | "
        f"{fmt(med([x.get('ci_inflation') for x in kb]), '.2f', 'x')} "
        f"({sum((x.get('ci_inflation') or 1.0) > 1.0 for x in kb)} of {len(kb)}) | "
        f"{fmt(med([x.get('ci_inflation') for x in hot]), '.2f', 'x')} "
        f"({sum((x.get('ci_inflation') or 1.0) > 1.0 for x in hot)} of {len(hot)}) |",
        f"| serial_vif, the estimate (range) | "
        f"{fmt(med([x.get('serial_vif') for x in kb]), '.2f')} "
        f"({min(x.get('serial_vif') or 0.0 for x in kb):.2f}.."
        f"{max(x.get('serial_vif') or 0.0 for x in kb):.2f}) | "
        f"{fmt(med([x.get('serial_vif') for x in hot]), '.2f')} |",
        f"| warm-up | {med([x['warmup_s'] for x in kb]):.2f} s "
        f"({med([x['warmup_iters'] for x in kb]):.0f} calls) | "
        f"{med([x['warmup_s'] for x in hot]):.2f} s |",
        f"| sampling | {med([x['sampling_s'] for x in kb]):.2f} s | "
        f"{med([x['sampling_s'] for x in hot]):.2f} s |",
        f"| of which flushes | {fmt(med([x['flush_s'] for x in kb]), unit=' s')} | - |",
        f"| flushes while warming up | {fmt(med([x['flush_warmup_s'] for x in kb]), unit=' s')} "
        f"| - |",
        f"| flush buffer set-up (in overhead) | "
        f"{fmt(med([x['flush_setup_s'] for x in kb]), unit=' s')} | - |",
        "",
        # the CI's calibration: how far the rounds' own figures lie apart, against the CI each
        # claimed (the rounds are seconds apart in one process)
        "Round by round, the figures and their CIs: cold " + calibration(kb) + "; hot " +
        calibration(hot) + ".",
        "",
        "The printed result's Time row, last round: `" + str(kb[-1]["time_row"]) + "`.",
        "",
        f"timeit's figure (best of 5, per call): {med([x['best_s'] for x in ti]) * 1e3:.3f} ms "
        f"hot; its 5 repeats spread {med([x['range_over_best'] for x in ti]) * 100:.1f}% "
        f"(max-min over best) and give no CI.",
    ]
    if pb:
        lines.append(f"pytest-benchmark: {med([x['rounds'] for x in pb]):.0f} rounds, median "
                     f"{med([x['median_s'] for x in pb]) * 1e3:.3f} ms hot, IQR/median "
                     f"{med([x['iqr_over_median'] for x in pb]) * 100:.1f}%; its whole pytest "
                     f"session {med([x['session_wall_s'] for x in pb]):.2f} s.")
    lines += ["", res["reading"], ""]
    return "\n".join(lines)


def reading(res: Dict[str, Any]) -> str:
    """What the run says about where a cold figure's time goes, from this run's numbers (the
    machines differ between sessions: a 32 MB-LLC EPYC, a 48 MB-LLC Xeon)."""
    md, rounds = res["machine"], res["rounds"]
    kb = [r["kbench"] for r in rounds]
    hot = [r["kbench_hot"] for r in rounds]
    flush_mb = md["flush_bytes"] / 2**20
    per_flush = med([x["flush_s"] / x["n"] for x in kb if x.get("flush_s") and x["n"]])
    flush_share = med([x["flush_s"] / x["sampling_s"] for x in kb if x.get("flush_s")])
    cold, warm = med([x["median_s"] for x in kb]), med([x["median_s"] for x in hot])
    ci = med([x["rel_ci_halfwidth"] for x in kb])
    footprint = 3 * N * 4
    # n the 0.5% CI of the median needs: half-width ~ 1.96 * 1.2533 * sigma / sqrt(n), sigma
    # taken robustly from the IQR (IQR / 1.349 for a normal spread)
    spread = med([x["iqr_over_median"] for x in kb]) / 1.349
    need = (1.96 * 1.2533 * spread / 0.005) ** 2
    per_sample = med([x["sampling_s"] / x["n"] for x in kb])
    capped = sum(x["stop"] in ("time_cap", "budget") for x in kb)
    gap = cold / warm - 1
    parts = [
        f"Reading (computed from this run). Each cold sample pays a {flush_mb:.0f} MB flush "
        f"(2x the last-level cache, written outside the timed call, inside the wall time): "
        f"{per_flush * 1e3:.1f} ms a flush, {flush_mb / 1024 / per_flush:.1f} GB/s of buffer "
        f"written (each line also read for ownership, and written back later), "
        f"{flush_share * 100:.0f}% of the sampling time. The call moves {footprint / 2**20:.0f} MB (a, b and c), "
        f"{footprint / md['llc_bytes']:.2f}x this LLC, at "
        f"{footprint / 2**30 / cold:.1f} GB/s cold.",
        f"Cold against hot median: {gap * 100:+.1f}% (the cold CI is +-{ci * 100:.2f}%)" +
        (": the flush moves the figure, so it is not redundant here." if abs(gap) > ci else
         ": here the call's own traffic already evicts most of its data, but that is a property "
         "of this shape on this machine, which kbench cannot know without measuring both, so "
         "cold stays the default."),
        f"The spread of single calls (IQR/1.349 over the median) is {spread * 100:.1f}%: a "
        f"0.5% CI of the median needs about {need:.0f} samples, {need * per_sample:.1f} s at "
        f"{per_sample * 1e3:.1f} ms a sample (flush and call), if the samples are "
        f"independent (the CI widens by the inflation their order shows); the default's "
        f"budget is {kb[0]['max_time_s']:g} s of sampling, and {capped} of {len(kb)} rounds "
        f"stopped there, stating the CI they reached.",
        "Warm-up ends once a window of >= 5 calls (and >= 5 ms) is no more than 2% faster than "
        "the window before it, and sampling ends at the stop rule's first met check, so the "
        "remaining cost is samples x (flush + call): only a quieter machine (fewer samples) or "
        "fewer flushed bytes make it cheaper. The 'without the flushes' and 'cold calls alone' "
        "ratios above bound any cheaper eviction. Rotating argument copies instead of flushing "
        "would leave the out= array, passed as a keyword and shared by every set, written hot "
        "every call.",
    ]
    return " ".join(parts)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--stem", default="cpu_time_to_figure",
                    help="the result files' name, without .json/.md (another host's run)")
    ap.add_argument("--no-pytest-benchmark", action="store_true")
    ap.add_argument("--busy", action="store_true",
                    help="a second process spins on a core for the whole run (a busy host)")
    args = ap.parse_args(argv)
    hog = None
    if args.busy:
        import multiprocessing as mp
        hog = mp.Process(target=_spin, daemon=True)
        hog.start()
    try:
        return _run(args)
    finally:
        if hog is not None:
            hog.terminate()
            hog.join()


def _spin() -> None:
    while True:
        pass


def _run(args: argparse.Namespace) -> int:
    try:
        import pytest_benchmark  # noqa: F401
        with_pb = not args.no_pytest_benchmark
    except ImportError:
        with_pb = False

    a, b, c = arrays()
    np.add(a, b, out=c)                         # page c in before any tool
    first = run_kbench(a, b, c, max_time_s=0.05)    # first bench in the process: metadata, git
    rounds = []
    for i in range(args.rounds):
        rnd: Dict[str, Any] = {}
        order = ["kbench", "timeit", "kbench_hot"] if i % 2 == 0 else \
            ["timeit", "kbench_hot", "kbench"]
        for tool in order:
            if tool == "kbench":
                rnd[tool] = run_kbench(a, b, c)
            elif tool == "kbench_hot":
                rnd[tool] = run_kbench(a, b, c, cold_cache=None)
            else:
                rnd[tool] = run_timeit(a, b, c)
        if with_pb:
            rnd["pytest_benchmark"] = run_pytest_benchmark()
        k, t = rnd["kbench"], rnd["timeit"]
        print(f"round {i}: kbench {k['wall_s']:.2f} s (n={k['n']}, CI "
              f"{k['rel_ci_halfwidth'] * 100:.2f}%, {k['time_row']}), hot "
              f"{rnd['kbench_hot']['wall_s']:.2f} s, timeit {t['wall_s']:.2f} s, ratio "
              f"{k['wall_s'] / t['wall_s']:.2f}", flush=True)
        rounds.append(rnd)

    info = _core.cpu_cache_info()
    git = metadata.git_info(str(ROOT)) or {}
    res = {"machine": {"cpu": metadata.cpu_model(), "hypervisor": metadata.cpu_hypervisor(),
                       "cpus": os.cpu_count(), "llc_bytes": info["llc_bytes"],
                       "flush_bytes": rounds[0]["kbench"]["flush_bytes"],
                       "python": sys.version.split()[0], "numpy": np.__version__,
                       "commit": (git.get("commit") or "unknown")[:7]},
           "first_bench_in_process": first, "rounds": rounds, "busy_process": args.busy}
    res["reading"] = reading(res)
    res["stem"] = args.stem
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / f"{args.stem}.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
