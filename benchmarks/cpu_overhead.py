"""kbench's host timer against `timeit` and pytest-benchmark on the same CPU callables.

Two questions, three tools (kbench, timeit, pytest-benchmark), three callables (an empty lambda,
np.sum over 1e3 and over 1e6 float64 elements):

* Per-sample overhead: the per-call time each tool reports for the empty callable, i.e. what the
  tool's own loop adds to every sample. kbench: bench(..., cold_cache=None) min/median and
  _core.host_timer_info(fn); timeit: Timer.repeat(number=1) and autorange + repeat(5), per call;
  pytest-benchmark: its defaults (calibrated iterations per round) and pedantic(iterations=1).
* Time-to-result: wall time from the call to the result at each tool's default settings (kbench
  defaults except cold_cache=None; timeit as `python -m timeit` runs it: autorange, then
  repeat(5); pytest-benchmark defaults), and the spread each achieved. The spread of every tool's
  per-call samples is summarised by the same function (kbench._core.summarize): the relative
  half-width of the distribution-free CI of the median, and IQR / median.

pytest-benchmark runs in a pytest subprocess over a generated test file and is read back from
its --benchmark-json; its time-to-result is reported twice: inside the test (the benchmark()
call alone) and for the whole session (interpreter start, collection and reporting included).

    PYTHONPATH=$PWD python3 benchmarks/cpu_overhead.py --out-dir benchmarks/results
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import kbench
from kbench import _core
from kbench.provenance.metadata import collect_host_metadata

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"sum 1e3 f64": 1_000, "sum 1e6 f64": 1_000_000}


def make_cases() -> Dict[str, Callable[[], Any]]:
    """Zero-argument callables, so every tool times exactly the same call."""
    rng = np.random.default_rng(0)
    cases: Dict[str, Callable[[], Any]] = {"empty lambda": lambda: None}
    for name, n in SIZES.items():
        a = rng.random(n)
        cases[name] = (lambda a=a: np.sum(a))
    return cases


def spread(per_call_s) -> Dict[str, Any]:
    """min/median and the spread of per-call samples, the same way for every tool."""
    x = np.asarray(per_call_s, dtype=np.float64)
    s = _core.summarize(x, 0.95)
    rel = s["rel_ci_halfwidth"]
    return {
        "n": int(s["n"]),
        "min_s": float(s["min"]),
        "median_s": float(s["median"]),
        "mean_s": float(s["mean"]),
        "rel_ci_halfwidth": rel if math.isfinite(rel) else None,   # None: too few samples
        "iqr_over_median": float(s["iqr"] / s["median"]) if s["median"] > 0 else None,
        "range_over_median": float((s["max"] - s["min"]) / s["median"]) if s["median"] > 0
        else None,
    }


# ------------------------------------------------------------------ kbench


def kbench_run(fn, **kw) -> Dict[str, Any]:
    t0 = time.perf_counter()
    r = kbench.bench(fn, cold_cache=None, **kw)
    wall = time.perf_counter() - t0
    st = r.stats
    return {
        "wall_s": wall,
        "n": r.n,
        "min_s": r.min,
        "median_s": r.median,
        "rel_ci_halfwidth": st["rel_ci_halfwidth"],            # as kbench reports it
        "iqr_over_median": st["iqr"] / st["median"] if st["median"] > 0 else None,
        "stop": r.stop.get("stop"),
        "warmup_s": r.stop.get("warmup_s"),
        "sampling_s": r.stop.get("sampling_s"),
        "warmup_iters": r.stop.get("warmup_iters"),
        "warmup_stable": r.stop.get("warmup_stable"),
        "bench_wall_s": r.stop.get("wall_s"),
    }


# ------------------------------------------------------------------ timeit


def timeit_number1(fn, repeat: int) -> Dict[str, Any]:
    """One call per measurement: the timer's own cost lands in every sample."""
    t0 = time.perf_counter()
    times = timeit.Timer(fn).repeat(repeat=repeat, number=1)
    d = spread(times)
    d["wall_s"] = time.perf_counter() - t0
    d["number"] = 1
    return d


def timeit_cli(fn, repeat: int = 5) -> Dict[str, Any]:
    """What `python -m timeit` does: autorange (>= 0.2 s per measurement), then repeat(5)."""
    t0 = time.perf_counter()
    t = timeit.Timer(fn)
    number, _ = t.autorange()
    raw = t.repeat(repeat=repeat, number=number)
    wall = time.perf_counter() - t0
    d = spread([x / number for x in raw])
    d["wall_s"] = wall
    d["number"] = number
    d["best_s"] = min(raw) / number                  # the number `python -m timeit` prints
    return d


# ------------------------------------------------------------------ pytest-benchmark

PYTEST_FILE = '''
import json, os, time
import numpy as np

rng = np.random.default_rng(0)
CASES = {{"empty lambda": lambda: None}}
for _name, _n in {sizes!r}.items():
    _a = rng.random(_n)
    CASES[_name] = (lambda a=_a: np.sum(a))
WALL = {{}}


def _record(key, t0):
    WALL[key] = time.perf_counter() - t0
    with open(os.environ["CPU_OVERHEAD_WALL"], "w") as f:
        json.dump(WALL, f)


def _check(benchmark, name):
    t0 = time.perf_counter()
    benchmark(CASES[name])
    _record(name, t0)


def test_empty_lambda(benchmark):
    _check(benchmark, "empty lambda")


def test_sum_1e3(benchmark):
    _check(benchmark, "sum 1e3 f64")


def test_sum_1e6(benchmark):
    _check(benchmark, "sum 1e6 f64")
'''

PYTEST_PEDANTIC = '''

def test_empty_lambda_iterations1(benchmark):
    t0 = time.perf_counter()
    benchmark.pedantic(CASES["empty lambda"], rounds={rounds}, iterations=1)
    _record("empty lambda iterations=1", t0)
'''

PYTEST_NAMES = {"test_empty_lambda": "empty lambda", "test_sum_1e3": "sum 1e3 f64",
                "test_sum_1e6": "sum 1e6 f64",
                "test_empty_lambda_iterations1": "empty lambda iterations=1"}


def pytest_benchmark_session(pedantic_rounds: Optional[int]) -> Dict[str, Any]:
    """One pytest session at pytest-benchmark's defaults; per test its stats, the in-test wall
    time of the benchmark() call and the session's wall time."""
    with tempfile.TemporaryDirectory(prefix="kbench_cpu_overhead_") as tmp:
        src = PYTEST_FILE.format(sizes=SIZES)
        if pedantic_rounds:
            src += PYTEST_PEDANTIC.format(rounds=pedantic_rounds)
        test_file = Path(tmp) / "test_overhead_cases.py"
        test_file.write_text(textwrap.dedent(src))
        json_path, wall_path = Path(tmp) / "bench.json", Path(tmp) / "wall.json"
        env = dict(os.environ, CPU_OVERHEAD_WALL=str(wall_path))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kbench",
               "--rootdir", tmp, f"--benchmark-json={json_path}", str(test_file)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=600)
        session_wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"pytest-benchmark session failed ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        report = json.loads(json_path.read_text())
        walls = json.loads(wall_path.read_text())
    out: Dict[str, Any] = {"session_wall_s": session_wall,
                           "pytest_benchmark_version": report.get("version"), "tests": {}}
    for b in report["benchmarks"]:
        case = PYTEST_NAMES[b["name"]]
        st = b["stats"]
        d = spread(st["data"])                     # per-iteration seconds, one per round
        d.update(rounds=st["rounds"], iterations=st["iterations"],
                 reported_min_s=st["min"], reported_median_s=st["median"],
                 wall_s=walls.get(case))
        out["tests"][case] = d
    return out


# ------------------------------------------------------------------ report


def med(xs: List[float]) -> float:
    return float(statistics.median(xs))


def fmt_t(s: Optional[float]) -> str:
    if s is None:
        return "-"
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= f:
            return f"{s / f:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def import_cost(runs: int = 7) -> Dict[str, Any]:
    """What `import kbench` adds beyond numpy (-X importtime's cumulative figure for kbench,
    numpy imported first), in fresh interpreters with bytecode compiled beforehand."""
    import compileall
    import re
    compileall.compile_dir(os.path.dirname(kbench.__file__), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    us = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import numpy; import kbench"],
                           capture_output=True, text=True, env=env, check=True)
        us += [int(m.group(1)) for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| kbench$",
                                                    p.stderr, re.M)]
    return {"runs": runs, "cumulative_us": us, "min_ms": min(us) / 1e3,
            "median_ms": statistics.median(us) / 1e3}


def markdown(res: Dict[str, Any]) -> str:
    md = res["metadata"]
    ov = res["overhead_empty_callable"]
    lines = [
        "# CPU host overhead and time-to-result: kbench vs timeit vs pytest-benchmark",
        "",
        f"Machine: {md.get('cpu_model', 'unknown')}, {md.get('cpu_count')} logical CPUs, "
        f"{md.get('system')} {md.get('release')}; Python {md.get('python_version')}, numpy "
        f"{np.__version__}, pytest-benchmark {res['tools']['pytest_benchmark']}. "
        f"{res['note']}",
        "",
        "Generated by `benchmarks/cpu_overhead.py`; numbers in `cpu_overhead.json`.",
        "",
        f"`import kbench` beyond numpy (-X importtime, {res['import']['runs']} fresh "
        f"interpreters, bytecode compiled): min {res['import']['min_ms']:.1f} ms, median "
        f"{res['import']['median_ms']:.1f} ms.",
        "",
        "## Per-sample overhead (empty callable)",
        "",
        "Per-call time each tool reports for `lambda: None`: the floor its loop puts under "
        "every sample.",
        "",
        "| tool / method | samples | min | median |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (("kbench_bench", "kbench.bench(cold_cache=None)"),
                       ("kbench_host_timer_info", "kbench._core.host_timer_info(fn)"),
                       ("timeit_number1", "timeit repeat(number=1)"),
                       ("timeit_autorange", "timeit autorange + repeat(5), per call"),
                       ("pytest_benchmark_default", "pytest-benchmark defaults (per iteration)"),
                       ("pytest_benchmark_iterations1",
                        "pytest-benchmark pedantic(iterations=1)")):
        d = ov.get(key)
        if not d:
            continue
        n = d.get("n")
        extra = f" x{d['number']}" if d.get("number", 1) > 1 else ""
        extra = extra or (f" x{d['iterations']}" if d.get("iterations", 1) > 1 else "")
        lines.append(f"| {label} | {n}{extra} | {fmt_t(d['min_s'])} | "
                     f"{fmt_t(d.get('median_s'))} |")
    lines += [
        "",
        "host_timer_info reports a mean, not a median (shown in the median column).",
        "",
        "## Time-to-result at each tool's defaults",
        "",
        f"Wall time from the call to the result, median of {res['repeats']} runs [min..max]; "
        "per-call median and spread of the last run. Rel. CI = half-width of the 95% "
        "distribution-free CI of the median relative to it (computed the same way for every "
        "tool; n/a: too few samples for a 95% CI). pytest-benchmark: the benchmark() call inside "
        "the test (the whole session is below). Samples: measurements x calls per measurement.",
        "",
        "| callable | tool | time-to-result | samples | per-call median | rel. CI | IQR/median |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for case, tools in res["time_to_result"].items():
        for tool, d in tools.items():
            walls = d["wall_s"]
            tt = f"{med(walls):.2f} s [{min(walls):.2f}..{max(walls):.2f}]"
            last = d["last"]
            ns = f"{last['n']}"
            if last.get("number", 1) > 1:
                ns += f" x{last['number']}"
            if last.get("iterations", 1) > 1:
                ns += f" x{last['iterations']}"
            lines.append(f"| {case} | {tool} | {tt} | {ns} | {fmt_t(last['median_s'])} | "
                         f"{fmt_pct(last.get('rel_ci_halfwidth'))} | "
                         f"{fmt_pct(last.get('iqr_over_median'))} |")
    sess = next(iter(res["time_to_result"].values()))["pytest-benchmark"]["session_wall_s"]
    lines += ["", f"The whole pytest-benchmark session for the three tests (interpreter start, "
              f"collection, machine info, JSON): {med(sess):.2f} s "
              f"[{min(sess):.2f}..{max(sess):.2f}].", "",
              "Where kbench's time goes (last run): " + "; ".join(
                  f"{case}: warm-up {t['kbench']['last']['warmup_s']:.2f} s + sampling "
                  f"{t['kbench']['last']['sampling_s']:.2f} s, stop={t['kbench']['last']['stop']}"
                  for case, t in res["time_to_result"].items()) + ".",
              "", "The empty callable's samples are whole nanoseconds on a clock that reads "
              "in steps of ~10 ns, with many ties: its CI of the median is as narrow as one "
              "timer step (0.00% when both bounds equal the median), and the stop rule stops "
              "there (stop.resolution_s).",
              "", "kbench's warm-up on the CPU ends once per-call times have stopped falling: "
              "after a first call, windows of >= 5 calls and >= 5 ms, until one is no more than "
              "2% (warmup_tol) faster than the one before; warmup_s (1.0) is its limit. "
              "Sampling stops at the first check of the stop rule that is met (checks every "
              "n/16 samples).",
              "", "pytest-benchmark sets rounds = max_time / (duration of its calibration "
              "measurement); a slow first call (cold caches, page faults) makes that estimate "
              "large and the run short.", ""]
    lines += ["kbench's first bench() call in a process also collects host metadata "
              f"(git, CPU, packages): {res['kbench_first_call_wall_s']:.2f} s here, "
              "excluded above.", ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--repeats", type=int, default=3, help="time-to-result runs per tool/case")
    ap.add_argument("--number1-repeat", type=int, default=100_000,
                    help="timeit repeat(number=1) measurements and pytest-benchmark "
                         "pedantic(iterations=1) rounds")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = make_cases()
    empty = cases["empty lambda"]

    import pytest_benchmark
    res: Dict[str, Any] = {
        "schema": "kbench.cpu_overhead/1",
        "note": (f"Shared {os.cpu_count()}-core VM: other processes share the cores, so the "
                 "tails and the time-to-result vary between runs; minima are the most stable "
                 "figures."),
        "tools": {"kbench": kbench.__version__, "timeit": platform.python_version(),
                  "pytest_benchmark": pytest_benchmark.__version__,
                  "numpy": np.__version__},
        "repeats": args.repeats,
    }

    res["import"] = import_cost()
    print(f"== import kbench beyond numpy: min {res['import']['min_ms']:.1f} ms", flush=True)
    # The first bench() of a process collects host metadata (runs git): timed apart.
    t0 = time.perf_counter()
    kbench.bench(empty, cold_cache=None, warmup_s=0, min_samples=1, max_samples=1)
    res["kbench_first_call_wall_s"] = time.perf_counter() - t0

    print("== per-sample overhead, empty callable", flush=True)
    ov: Dict[str, Any] = {}
    ov["kbench_bench"] = kbench_run(empty)
    hti = _core.host_timer_info(empty)
    ov["kbench_host_timer_info"] = {"n": 100000, "min_s": hti["call_overhead_min_ns"] * 1e-9,
                                    "median_s": hti["call_overhead_mean_ns"] * 1e-9,
                                    "median_is_mean": True, "raw": hti}
    ov["timeit_number1"] = timeit_number1(empty, args.number1_repeat)
    ov["timeit_autorange"] = timeit_cli(empty)
    pb = pytest_benchmark_session(args.number1_repeat)
    ov["pytest_benchmark_default"] = pb["tests"]["empty lambda"]
    ov["pytest_benchmark_iterations1"] = pb["tests"]["empty lambda iterations=1"]
    res["overhead_empty_callable"] = ov
    for k, d in ov.items():
        print(f"  {k:30s} min {fmt_t(d['min_s']):>9s}  median {fmt_t(d.get('median_s')):>9s}",
              flush=True)

    print("== time-to-result at defaults", flush=True)
    ttr: Dict[str, Dict[str, Any]] = {c: {"kbench": {"wall_s": []}, "timeit": {"wall_s": []},
                                          "pytest-benchmark": {"wall_s": [],
                                                               "session_wall_s": []}}
                                      for c in cases}
    for rep in range(args.repeats):
        for case, fn in cases.items():
            for tool, run in (("kbench", lambda: kbench_run(fn)), ("timeit", lambda: timeit_cli(fn))):
                d = run()
                ttr[case][tool]["wall_s"].append(d["wall_s"])
                ttr[case][tool]["last"] = d
        pb = pytest_benchmark_session(None)
        for case in cases:
            d = pb["tests"][case]
            ttr[case]["pytest-benchmark"]["wall_s"].append(d["wall_s"])
            ttr[case]["pytest-benchmark"]["session_wall_s"].append(pb["session_wall_s"])
            ttr[case]["pytest-benchmark"]["last"] = d
        print(f"  repeat {rep + 1}/{args.repeats} done", flush=True)
    res["time_to_result"] = ttr
    for case, tools in ttr.items():
        for tool, d in tools.items():
            print(f"  {case:12s} {tool:17s} wall {med(d['wall_s']):5.2f} s  median "
                  f"{fmt_t(d['last']['median_s']):>9s}  rel CI "
                  f"{fmt_pct(d['last'].get('rel_ci_halfwidth'))}", flush=True)

    res["metadata"] = collect_host_metadata()
    (out_dir / "cpu_overhead.json").write_text(json.dumps(res, indent=1, default=float))
    (out_dir / "cpu_overhead.md").write_text(markdown(res))
    print(f"wrote {out_dir / 'cpu_overhead.json'} and {out_dir / 'cpu_overhead.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
