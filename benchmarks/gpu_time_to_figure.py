"""Time to a figure on the GPU: a sweep and single cases, kbench against triton's do_bench and
FlashInfer's CUPTI timer.

In one process, in this order:
  1. the first kbench bench in the process (torch.add, 16 K float32), with CUPTI's own set-up;
  2. the sweep: torch.add over 8 sizes (16 K to 268 M float32), kbench then do_bench;
  3. a single f16 GEMM 8192x4096x4096: kbench (after the sweep: a different load), kbench again
     (right after itself: the settled state carried), do_bench, then kbench in the burst regime
     (peak clocks, the figure a short timer on a rested GPU reads: FlashInfer's, the profiler's);
  4. FlashInfer's ``bench_gpu_time_with_cupti`` (its defaults: 25 ms dry run, 100 ms of repeats,
     cold L2) on the same cases, in a process of its own: it registers its own CUPTI activity
     callbacks and finalizes CUPTI at the end of each call, which would tear down the CUPTI
     kbench keeps attached. Its first call in that process is recorded and discarded (section
     'first'): on an f16 GEMM it read 0.854 ms there and 0.382 ms on the next call.
Each kbench case records where its wall time went: the busy kernel, the warm-up with its clock
settle (and whether it was carried from the previous bench: ``carried_from_s_ago``), sampling,
overhead, and CUPTI's set-up. A failing case is recorded with its error and the run goes on; the
JSON (``--out``), the markdown table (``--md``) and each kbench case's NVML readings
(``--traces``: r.extra["clock_trace"], warm-up and timed part, to judge the settle rules again
offline) are rewritten after every section, so a late failure loses nothing. FlashInfer is
taken from an installed package or, where it cannot be installed, from its timer's file
(``--flashinfer-utils``, fetched by scripts/fetch_flashinfer_timer.sh with the cupti-python
wheel it needs; ``--flashinfer-site`` is where that wheel was installed); a FlashInfer that fell
back to CUDA events is said so. A short table is printed last.

    python benchmarks/gpu_time_to_figure.py --out benchmarks/results/h200_time_to_figure.json \
        --md benchmarks/results/h200_time_to_figure.md
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import traceback
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from _gpu import finite_or_none as _num

SIZES = [1 << k for k in (14, 16, 18, 20, 22, 24, 26, 28)]
GEMM = (8192, 4096, 4096)
GEMM_NAME = "f16 mm 8192x4096x4096"
# the linear layers of an 8B model, bf16: M tokens x (N, K)
SHAPES = [(m, n, k) for m in (16, 256, 4096) for n, k in ((6144, 4096), (4096, 4096),
                                                            (28672, 4096))]
# kbench.ab: two bf16 GEMMs, the second with 4.7% more work (K 4096 -> 4288), and identical arms
AB_SHAPE, AB_K2 = (4096, 4096, 4096), 4288
SECTIONS = ("first", "sweep", "single", "shapes", "ab", "flashinfer")


def shape_name(s: Tuple[int, int, int]) -> str:
    return f"bf16 mm {s[0]}x{s[1]}x{s[2]}"


def trace_lists(trace: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A result's clock trace (r.extra["clock_trace"]) as JSON lists, rounded to what NVML
    resolves (1 us of time, 1 MHz, 0.1 W, 1 C)."""
    if not trace:
        return None
    digits = {"t_s": 6, "sm_mhz": 0, "mem_mhz": 0, "power_w": 1, "power_inst_w": 1, "temp_c": 0}
    out: Dict[str, Any] = {k: [None if not math.isfinite(v) else round(v, d)
                               for v in map(float, trace[k])] for k, d in digits.items()}
    out["reasons"] = [int(v) for v in trace["reasons"]]
    out.update({k: trace.get(k) for k in ("load_start_s", "timed_from", "period_s",
                                          "power_limit_w", "max_sm_clock_mhz")})
    return out


def kbench_row(r: Any, wall_s: float) -> Dict[str, Any]:
    """The figure and where a kbench bench's wall time went (missing fields stay None)."""
    st, ex = dict(r.stop or {}), dict(r.extra or {})
    settle = ex.get("clock_settle") or {}
    cupti = ex.get("cupti_setup") or {}
    regime = ex.get("regime") or {}
    warm, samp = _num(st.get("warmup_s")) or 0.0, _num(st.get("sampling_s")) or 0.0
    overlap = _num(st.get("sampling_overlap_s")) or 0.0     # sampling inside the warm-up
    busy = _num(ex.get("busy_warmup_s")) or 0.0
    return {
        "figure_us": r.median * 1e6, "wall_s": wall_s,
        "ci_rel": _num(st.get("achieved")), "stop": st.get("stop"), "n": len(r.samples),
        "ci_inflation": _num((r.stats or {}).get("ci_inflation")),
        "busy_s": busy, "warmup_s": warm, "sampling_s": samp,
        "sampling_overlap_s": overlap, "kept_from_load_s": _num(settle.get("kept_from_load_s")),
        "overhead_s": max(wall_s - busy - warm - (samp - overlap), 0.0),
        "settled": settle.get("settled"), "settle_at_s": _num(settle.get("at_s")),
        "settle_sm_mhz": _num(settle.get("sm_mhz")), "by_carry": settle.get("by_carry"),
        "at_max_clock": settle.get("at_max_clock"),
        "carried_from_s_ago": _num(settle.get("carried_from_s_ago")),
        "carried_sm_mhz": _num(settle.get("carried_sm_mhz")),
        "carried_under_limit": settle.get("carried_under_limit"),
        "carried_loaded_s": _num(settle.get("carried_loaded_s")),
        "min_sampling_s": _num(settle.get("min_sampling_s")),
        "cupti_setup_s": _num(cupti.get("total_s")), "cupti_begin_s": _num(cupti.get("begin_s")),
        "cupti_first_read_s": _num(cupti.get("first_read_s")),
        "cupti_detach": ex.get("cupti_detach"),
        "regime": regime.get("name"), "regime_held": regime.get("held"),
        "regime_why": regime.get("why"), "warnings": list(getattr(r, "warnings", []) or []),
        "ci_level": _num(st.get("ci_level")), "budget_s": _num(st.get("budget_s")),
        "ci_low_us": _num((r.stats or {}).get("ci_low", float("nan")) * 1e6),
        "ci_high_us": _num((r.stats or {}).get("ci_high", float("nan")) * 1e6),
        "burst": {k: (regime.get("burst") or {}).get(k) for k in ("batches", "wait_s",
                                                                    "unrecovered")}
        if regime.get("name") == "burst" else None,
        "clock_trace": trace_lists(ex.get("clock_trace")),     # Run.case moves it aside
    }


def environment_of(r: Any) -> Dict[str, Any]:
    """What a result says it ran on: the board, the driver's build, the GPU libraries."""
    gpu = r.metadata.get("gpu") or {}
    return {"gpu_uuid": gpu.get("uuid"), "driver": gpu.get("nvml_driver_version"),
            "cuda_driver_api": gpu.get("driver_version"),
            "power_limit_w": gpu.get("nvml_power_limit_w"),
            "gpu_libraries": r.metadata.get("gpu_libraries") or {}}


def environment_text(env: Optional[Dict[str, Any]]) -> str:
    if not env:
        return "-"
    libs = ", ".join(f"{k} {v.get('version') or os.path.basename(str(v.get('path')))}"
                     for k, v in sorted(env.get("gpu_libraries", {}).items()))
    return (f"{env.get('gpu_uuid')}, driver {env.get('driver')}, power limit "
            f"{env.get('power_limit_w')} W; libraries: {libs or '-'}")


class Run:
    """Cases run one by one, each recorded (or its error), the files rewritten as it goes."""

    def __init__(self, out: Optional[str], md: Optional[str], budget_s: float,
                 traces: Optional[str] = None) -> None:
        self.out, self.md, self.budget_s, self.traces_path = out, md, budget_s, traces
        self.t0 = time.perf_counter()
        self.res: Dict[str, Any] = {"commit": os.environ.get("KBENCH_GIT_COMMIT"),
                                    "cases": [], "errors": 0}
        # each kbench case's NVML readings, warm-up and timed part (kept apart: they are most
        # of the bytes, and what the settle rules can be judged on again offline)
        self.traces: Dict[str, Any] = {}
        self.skip_tools: set = set()

    def case(self, section: str, name: str, tool: str, fn: Callable[[], Dict[str, Any]]) -> None:
        row: Dict[str, Any] = {"section": section, "case": name, "tool": tool}
        if time.perf_counter() - self.t0 > self.budget_s:
            row["skipped"] = f"past the {self.budget_s:.0f} s budget"
        else:
            try:
                row.update(fn())
            except Exception as e:          # recorded; the next case still runs
                row["error"] = f"{type(e).__name__}: {e}"
                row["traceback"] = traceback.format_exc(limit=6)
                self.res["errors"] += 1
        trace = row.pop("clock_trace", None)
        if trace:
            self.traces[f"{section} / {name} / {tool}"] = trace
        self.res["cases"].append(row)
        status = (row.get("error") or row.get("skipped") or
                  f"{row['figure_us']:.2f} us in {row['wall_s']:.2f} s")
        print(f"{section:7} {tool:9} {name:24} {status}", flush=True)

    def rows(self, section: str, tool: Optional[str] = None) -> List[Dict[str, Any]]:
        return [c for c in self.res["cases"] if c["section"] == section and
                (tool is None or c["tool"] == tool)]

    def total(self, section: str, tool: str) -> Optional[float]:
        rows = self.rows(section, tool)
        if not rows or any("wall_s" not in c for c in rows):
            return None
        return sum(c["wall_s"] for c in rows)

    def save(self) -> None:
        self.res["wall_s"] = time.perf_counter() - self.t0
        self.res["summary"] = self.summary()
        if self.out:
            with open(self.out, "w") as f:
                json.dump(self.res, f, indent=1, default=str)
        if self.traces_path:
            with open(self.traces_path, "w") as f:
                json.dump({"commit": self.res["commit"], "gpu": self.res.get("gpu"),
                           "cases": self.traces}, f, separators=(",", ":"))
        if self.md:
            with open(self.md, "w") as f:
                f.write(self.markdown())

    def summary(self) -> Dict[str, Any]:
        first = (self.rows("first", "kbench") or [{}])[0]
        return {"sweep_kbench_s": self.total("sweep", "kbench"),
                "sweep_do_bench_s": self.total("sweep", "do_bench"),
                "sweep_flashinfer_s": self.total("sweep", "flashinfer"),
                "first_bench_s": first.get("wall_s"),
                "first_bench_cupti_setup_s": first.get("cupti_setup_s"),
                "first_bench_minus_cupti_s": (first["wall_s"] - first["cupti_setup_s"]
                                              if first.get("wall_s") is not None and
                                              first.get("cupti_setup_s") is not None else None)}

    def markdown(self) -> str:
        r, s = self.res, self.summary()
        f2 = lambda v, u="": "-" if v is None else f"{v:.2f}{u}"   # noqa: E731
        f3 = lambda v: "-" if v is None else f"{v:.3f}"              # noqa: E731
        lines = [f"# Time to a figure: kbench vs do_bench and FlashInfer ({r.get('gpu', '?')})", "",
                 f"commit {r.get('commit')}, torch {r.get('torch')}, triton {r.get('triton')}, "
                 f"kbench defaults (CUPTI, cold L2, burst regime, 0.5% CI or the 0.3 s "
                 f"sampling budget, whichever first). "
                 f"FlashInfer: {r.get('flashinfer')}.", "",
                 f"Ran on: {environment_text(r.get('environment'))}.", "",
                 f"- first bench in the process: {f2(s['first_bench_s'], ' s')} "
                 f"(CUPTI's set-up {f3(s['first_bench_cupti_setup_s'])} s)",
                 f"- sweep, 8 sizes: kbench {f2(s['sweep_kbench_s'], ' s')}, do_bench "
                 f"{f2(s['sweep_do_bench_s'], ' s')}, FlashInfer "
                 f"{f2(s['sweep_flashinfer_s'], ' s')}", "",
                 "Sampling counts from the first sample kept; 'of it settling' is the part "
                 "taken while the warm-up settled (samples kept from where the readings showed "
                 "the settled state, at 'kept from' s of load).", "",
                 "| section | case | tool | figure (us) | wall (s) | busy | warm-up | settle at "
                 "| carried from (s ago) | sampling | of it settling | kept from | overhead "
                 "| CUPTI set-up | regime |",
                 "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: "
                 "| ---: | ---: | --- |"]
        for c in r["cases"]:
            if "figure_us" not in c:
                lines.append(f"| {c['section']} | {c['case']} | {c['tool']} | "
                             f"{c.get('error') or c.get('skipped')} | | | | | | | | | | | |")
                continue
            carried = ("-" if c.get("carried_from_s_ago") is None else
                       f"{c['carried_from_s_ago']:.2f} ({'used' if c.get('by_carry') else 'no match'})")
            if c.get("at_max_clock"):
                carried += " (settled at max clock)"
            regime = "-" if c.get("regime") is None else (
                f"{c['regime']} {'held' if c.get('regime_held') else 'NOT held'}")
            lines.append(
                f"| {c['section']} | {c['case']} | {c['tool']} | {c['figure_us']:.2f} | "
                f"{c['wall_s']:.3f} | {f3(c.get('busy_s'))} | {f3(c.get('warmup_s'))} | "
                f"{f3(c.get('settle_at_s'))} | {carried} | {f3(c.get('sampling_s'))} | "
                f"{f3(c.get('sampling_overlap_s'))} | {f3(c.get('kept_from_load_s'))} | "
                f"{f3(c.get('overhead_s'))} | {f3(c.get('cupti_setup_s'))} | {regime} |")
        return "\n".join(lines) + "\n"

    def print_shapes(self) -> None:
        """The 9-shape sweep's wall per tool, each shape's figure, and the A/B verdicts."""
        tools = sorted({c["tool"] for c in self.rows("shapes")})
        if tools:
            print("\nshape" + " " * 25 + "".join(f"{t[:16]:>18}" for t in tools))
            for sh in SHAPES:
                cs = [next((c for c in self.rows("shapes", t) if c["case"] == shape_name(sh)),
                           {}) for t in tools]
                print(f"{shape_name(sh):30}" + "".join(
                    f"{c['figure_us']:>9.2f}us {c['wall_s']:>5.2f}s" if "figure_us" in c
                    else f"{'-':>18}" for c in cs))
            print("sweep wall: " + ", ".join(
                f"{t} {self.total('shapes', t):.2f} s" if self.total("shapes", t) is not None
                else f"{t} -" for t in tools))
        for c in self.rows("ab"):
            print(f"ab {c['case']}: " + (c.get("error") or c.get("skipped") or
                  f"{c['verdict']} (median delta {c['figure_us']:+.2f}%, CI "
                  f"{c['ci_pct'][0]:+.2f}..{c['ci_pct'][1]:+.2f}%) in {c['wall_s']:.2f} s "
                  f"(the arms' first calls before it: {c.get('first_calls_s', float('nan')):.2f} s)"))

    def print_table(self) -> None:
        self.print_shapes()
        s = self.summary()
        tools = ("kbench", "do_bench", "flashinfer")
        print("\ncase                         " + "".join(f"{t + ' (s)':>16}" for t in tools)
              + "".join(f"{t + ' (us)':>16}" for t in tools))

        def pick(section: str, tool: str, case: str) -> Dict[str, Any]:
            return next((c for c in self.rows(section, tool) if c["case"] == case), {})

        def cell(c: Dict[str, Any], key: str, fmt: str) -> str:
            return fmt.format(c[key]) if c.get(key) is not None else (
                "error" if c.get("error") else "-")
        lines = [("first bench", [(self.rows("first", t) or [{}])[0] for t in tools])]
        for n in SIZES:
            lines.append((f"add {n}", [pick("sweep", t, f"add {n}") for t in tools]))
        for again in ("", " again"):
            lines.append((f"GEMM{again}", [pick("single", "kbench", f"{GEMM_NAME} (kbench{again})"),
                                           pick("single", "do_bench", GEMM_NAME) if not again else {},
                                           pick("single", "flashinfer",
                                                f"{GEMM_NAME} (flashinfer{again})")]))
        burst = pick("single", "kbench", f"{GEMM_NAME} (kbench burst)")
        lines.append(("GEMM, kbench burst", [burst, {}, {}]))
        for name, cs in lines:
            print(f"{name:28} " + "".join(f"{cell(c, 'wall_s', '{:.3f}'):>16}" for c in cs)
                  + "".join(f"{cell(c, 'figure_us', '{:.2f}'):>16}" for c in cs))
        f = lambda v: "-" if v is None else f"{v:.2f} s"   # noqa: E731
        print(f"sweep total: kbench {f(s['sweep_kbench_s'])}, do_bench {f(s['sweep_do_bench_s'])}, "
              f"FlashInfer {f(s['sweep_flashinfer_s'])}; first bench {f(s['first_bench_s'])} of "
              f"which CUPTI set-up {f(s['first_bench_cupti_setup_s'])}; FlashInfer: "
              f"{self.res.get('flashinfer')}; errors: {self.res['errors']}")

def load_flashinfer_timer(utils_path: Optional[str]) -> Tuple[Callable[..., Any], str]:
    """FlashInfer's bench_gpu_time_with_cupti and where it came from: the installed package, else
    its flashinfer/testing/utils.py loaded as that module (unmodified). The package's own import
    needs its kernels, cutlass-dsl and tvm-ffi; the file's only import from the package is
    flashinfer.utils.round_up (for fp8 helpers, not the timer), given here as a stand-in."""
    try:
        import flashinfer
        from flashinfer.testing import bench_gpu_time_with_cupti
        return bench_gpu_time_with_cupti, f"flashinfer {flashinfer.__version__} (installed)"
    except ImportError as e:
        if not utils_path:
            raise ImportError(f"flashinfer not installed ({e}) and no --flashinfer-utils") from e
    package = types.ModuleType("flashinfer")
    package.__path__ = []                                    # a package, with nothing on disk
    helpers = types.ModuleType("flashinfer.utils")
    helpers.round_up = lambda x, y: (x + y - 1) // y * y     # type: ignore[attr-defined]
    sys.modules.update({"flashinfer": package, "flashinfer.utils": helpers})
    spec = importlib.util.spec_from_file_location("flashinfer.testing.utils", utils_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {utils_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = os.path.join(os.path.dirname(utils_path), "SOURCE.txt")
    label = open(source).readline().strip() if os.path.exists(source) else utils_path
    return module.bench_gpu_time_with_cupti, f"its timer's file alone: {label}"


def flashinfer_child(utils_path: Optional[str]) -> None:
    """Time the cases with FlashInfer's CUPTI timer in this (fresh) process; print one JSON line:
    {"source", "rows": [{section, case, figure_us, wall_s, n, timer, ...} | {..., error}]} or
    {"error"}."""
    import warnings
    import numpy as np
    import torch
    try:
        timer, source = load_flashinfer_timer(utils_path)
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return
    rows: List[Dict[str, Any]] = []

    def case(section: str, name: str, fn: Callable[[], Any]) -> None:
        row: Dict[str, Any] = {"section": section, "case": name}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t = time.perf_counter()
                times_ms = timer(fn)
                torch.cuda.synchronize()
                row["wall_s"] = time.perf_counter() - t
            said = [str(w.message) for w in caught]
            fell_back = [m for m in said if "Falling back" in m]
            row.update(figure_us=float(np.median(times_ms)) * 1e3, n=len(times_ms),
                       timer="CUDA events (fell back)" if fell_back else "CUPTI",
                       warnings=said[:3])
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        rows.append(row)

    bufs = {n: (torch.randn(n, device="cuda"), torch.empty(n, device="cuda")) for n in SIZES}
    torch.cuda.synchronize()
    x, y = bufs[SIZES[0]]
    case("first", f"add {SIZES[0]} (discarded)", lambda: torch.add(x, 1.0, out=y))
    for n in SIZES:
        x, y = bufs[n]
        case("sweep", f"add {n}", lambda x=x, y=y: torch.add(x, 1.0, out=y))
    m, k, nn = GEMM
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, nn, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    case("single", f"{GEMM_NAME} (flashinfer)", lambda: torch.matmul(a, b))
    case("single", f"{GEMM_NAME} (flashinfer again)", lambda: torch.matmul(a, b))
    for s in SHAPES:
        m, n, k = s
        x2 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w2 = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        o2 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        case("shapes", shape_name(s), lambda x2=x2, w2=w2, o2=o2: torch.mm(x2, w2, out=o2))
    print(json.dumps({"source": source, "rows": rows}))


def run_flashinfer(run: Run, utils_path: Optional[str], site: Optional[str],
                   timeout_s: float) -> None:
    """FlashInfer's rows, from a child process (flashinfer_child); what kept it out, if it
    could not run, goes to res['flashinfer']."""
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--flashinfer-child"]
    if utils_path:
        cmd += ["--flashinfer-utils", os.path.abspath(utils_path)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            said = p.stderr.strip().splitlines() or ["(nothing on stderr)"]
            raise RuntimeError(f"exit {p.returncode}: {said[-1][:300]}")
        got = json.loads(lines[-1])
    except Exception as e:
        run.res["flashinfer"] = f"not timed: {type(e).__name__}: {e}"
        return
    if "error" in got:
        run.res["flashinfer"] = f"not timed: {got['error']}"
        return
    timers = sorted({r["timer"] for r in got["rows"] if "timer" in r})
    run.res["flashinfer"] = f"{got['source']}; timer: {', '.join(timers) or '-'}"

    def recorded(row: Dict[str, Any]) -> Callable[[], Dict[str, Any]]:
        def go() -> Dict[str, Any]:
            if "error" in row:
                raise RuntimeError(row["error"])
            return {k: v for k, v in row.items() if k not in ("section", "case")}
        return go
    for row in got["rows"]:
        run.case(row["section"], row["case"], "flashinfer", recorded(row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--md", help="markdown table")
    ap.add_argument("--traces", help="JSON of each kbench case's NVML readings (clock_trace)")
    ap.add_argument("--budget-s", type=float, default=55.0,
                    help="cases not started by then are recorded as skipped")
    ap.add_argument("--flashinfer-utils",
                    help="FlashInfer's flashinfer/testing/utils.py, where flashinfer is not "
                         "installed (scripts/fetch_flashinfer_timer.sh)")
    ap.add_argument("--flashinfer-site", help="a folder to put on FlashInfer's PYTHONPATH "
                                              "(where the cupti-python wheel was installed)")
    ap.add_argument("--flashinfer-timeout-s", type=float, default=60.0)
    ap.add_argument("--flashinfer-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"which of {','.join(SECTIONS)} to run (default: all)")
    ap.add_argument("--kbench-opts", default="{}",
                    help="JSON of options added to every kbench call of shapes and ab")
    ap.add_argument("--skip-tools", default="kbench burst,kbench sustained",
                    help="comma-separated shape rows to leave out (kbench's default is the "
                         "burst regime, so its own row is that regime's; 'kbench sustained' "
                         "adds the opt-in regime, about 3 s a capped shape)")
    args = ap.parse_args()
    if args.flashinfer_child:
        flashinfer_child(args.flashinfer_utils)
        return
    run = Run(args.out, args.md, args.budget_s, args.traces)
    sections = set(args.sections.split(","))
    extra = json.loads(args.kbench_opts)
    run.skip_tools = set(t for t in args.skip_tools.split(",") if t)
    run.res["kbench_opts"] = extra
    import torch
    import kbench
    res = run.res
    res.update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__)
    try:
        import triton
        from triton.testing import do_bench
        res["triton"] = triton.__version__
    except ImportError as e:
        res["triton"] = f"not importable: {e}"
        do_bench = None

    bufs = {n: (torch.randn(n, device="cuda"), torch.empty(n, device="cuda")) for n in SIZES}
    torch.cuda.synchronize()

    def kb(fn: Callable, *a: Any, **kw: Any) -> Callable[[], Dict[str, Any]]:
        def go() -> Dict[str, Any]:
            t = time.perf_counter()
            r = kbench.bench(fn, *a, **kw)
            wall = time.perf_counter() - t
            res["environment"] = environment_of(r)  # the last: the GEMM's cuBLAS included
            return kbench_row(r, wall)
        return go

    def db(fn: Callable) -> Callable[[], Dict[str, Any]]:
        def go() -> Dict[str, Any]:
            if do_bench is None:
                raise RuntimeError(f"triton: {res['triton']}")
            t = time.perf_counter()
            fig = do_bench(fn, return_mode="median") * 1e3
            torch.cuda.synchronize()
            return {"figure_us": fig, "wall_s": time.perf_counter() - t}
        return go

    x, y = bufs[SIZES[0]]
    if "first" in sections:
        run.case("first", f"add {SIZES[0]}", "kbench", kb(torch.add, x, 1.0, kwargs={"out": y},
                                                        bytes=2 * x.nbytes))
        run.save()
    for n in (SIZES if "sweep" in sections else []):
        x, y = bufs[n]
        run.case("sweep", f"add {n}", "kbench", kb(torch.add, x, 1.0, kwargs={"out": y},
                                                  bytes=2 * x.nbytes))
    run.save()
    for n in (SIZES if "sweep" in sections else []):
        x, y = bufs[n]
        run.case("sweep", f"add {n}", "do_bench",
                 db(lambda x=x, y=y: torch.add(x, 1.0, out=y)))
    run.save()
    try:
        m, k, nn = GEMM
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, nn, device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
    except Exception as e:
        res["gemm_setup_error"] = f"{type(e).__name__}: {e}"
        a = b = None
    if a is not None and "single" in sections:
        # after the sweep and do_bench's loop: a different load, then right after itself
        run.case("single", f"{GEMM_NAME} (kbench)", "kbench", kb(torch.matmul, a, b))
        run.case("single", f"{GEMM_NAME} (kbench again)", "kbench", kb(torch.matmul, a, b))
        run.case("single", GEMM_NAME, "do_bench", db(lambda: torch.matmul(a, b)))
        # the regime a short timer's figure is taken in: peak clocks, the GPU recovered first
        # (here after do_bench's capped load); beside FlashInfer's and the profiler's GEMM
        run.case("single", f"{GEMM_NAME} (kbench burst)", "kbench",
                 kb(torch.matmul, a, b, regime="burst"))
    run.save()
    if "shapes" in sections:
        shapes(run, kb, db, extra)
        run.save()
    if "ab" in sections:
        ab_cases(run, extra)
        run.save()
    if "flashinfer" in sections:
        run_flashinfer(run, args.flashinfer_utils, args.flashinfer_site,
                       args.flashinfer_timeout_s)
        run.save()
    run.print_table()


def shapes(run: Run, kb: Callable[..., Callable[[], Dict[str, Any]]],
           db: Callable[[Callable], Callable[[], Dict[str, Any]]], extra: Dict[str, Any]) -> None:
    """The 9-shape bf16 sweep: kbench's defaults, kbench burst, do_bench, each over all 9."""
    import torch
    ops = {}
    for s in SHAPES:
        m, n, k = s
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ops[s] = (a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    for label, kw in (("kbench", {}), ("kbench burst", {"regime": "burst"}),
                      ("kbench sustained", {"regime": "sustained"})):
        if label in run.skip_tools:
            continue
        for s, (a, b, c) in ops.items():
            run.case("shapes", shape_name(s), label,
                     kb(torch.mm, a, b, kwargs={"out": c}, flops=2.0 * s[0] * s[1] * s[2],
                        **dict(extra, **kw)))
    for s, (a, b, c) in ops.items():
        run.case("shapes", shape_name(s), "do_bench",
                 db(lambda a=a, b=b, c=c: torch.mm(a, b, out=c)))


def ab_cases(run: Run, extra: Dict[str, Any]) -> None:
    """kbench.ab of two bf16 GEMMs: B with 4.7% more work (expected: B slower), and identical
    arms (expected: no difference)."""
    import torch
    import kbench
    m, n, k = AB_SHAPE
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    a2 = torch.randn(m, AB_K2, device="cuda", dtype=torch.bfloat16)
    b2 = torch.randn(AB_K2, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    arms = {"+4.7% work": {"A": lambda: torch.mm(a, b), "B": lambda: torch.mm(a2, b2)},
            "identical": {"A": lambda: torch.mm(a, b), "B": lambda: torch.mm(a, b)}}
    for label, pair in arms.items():
        def go(pair: Dict[str, Callable[[], Any]] = pair) -> Dict[str, Any]:
            # each arm's own first call (cuBLAS picks a kernel for a new shape) timed apart,
            # as the first bench's goal counts it: beyond the callable's own first call
            t = time.perf_counter()
            for fn in pair.values():
                fn()
            torch.cuda.synchronize()
            first_calls = time.perf_counter() - t
            t = time.perf_counter()
            r = kbench.ab(pair, device="cuda", **extra)
            wall = time.perf_counter() - t
            cmp_ = r.comparisons[0]
            return {"figure_us": 100.0 * cmp_.median_delta, "wall_s": wall,
                    "first_calls_s": first_calls,
                    "verdict": cmp_.verdict, "ci_pct": [100.0 * cmp_.ci_low, 100.0 * cmp_.ci_high],
                    "trials": len(r.trials),
                    "trial_walls_s": None}
        run.case("ab", f"bf16 mm {m}x{n}x{k} vs K={AB_K2} ({label})", "kbench ab", go)


if __name__ == "__main__":
    main()
