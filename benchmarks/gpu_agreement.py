"""kbench's GPU figures against CUPTI truth (torch.profiler), triton's do_bench, and HBM.

For each case, from an empty kernel to a ~10 ms GEMM, hot L2 so every tool sees the same work:
  kbench mode=cupti / events / graph, torch.profiler's kernel durations (Kineto = CUPTI),
  triton.testing.do_bench and do_bench_cudagraph, and time-to-result of kbench (default
  precision) vs do_bench (defaults).
Then a 16 MB copy hot and cold against the measured HBM ceiling.

Each case runs in its own process: 3 s of back-to-back calls (past kbench's own 1 s warm-up: a
power-capped GEMM is still settling after 1 s), kbench, torch.profiler, kbench again. Why:
  * the same clock state: a power-capped GEMM reads 9% slower after seconds of load than in a
    profile taken from an idle GPU (first run of this script, at 958dd46); kbench's two runs
    bracket the profile and their mean cancels a linear drift;
  * order: kbench detaches CUPTI after a run when it was CUPTI's only client, so a profile can
    follow it; once Kineto has configured CUPTI, kbench keeps it attached and takes over its
    buffer callbacks, so one profile per process keeps the comparison safe (whether a second
    profile still records: a GPU test of its own, passed at 26d39c6);
  * the two kbench runs, one before Kineto touched CUPTI and one after, show whether the
    profiler's presence moves kbench's figure (a Triton empty kernel read 40-70 ns above the
    profile in three runs of the previous protocol).
The profile has two launch regimes, because a kernel's duration can depend on whether the GPU
idled before it: `host` (each call launched from Python as it comes: a tiny kernel finds the
GPU idle, as with kbench's gate=False) and `queued` (the calls queued behind torch.cuda._sleep,
back to back, as behind kbench's gate).
The host-side launch cost of the callable is timed before the profile, after it and after
kbench.
kbench mode=cupti is compared with the regime it runs in: gated -> queued, gate=False -> host.

    python benchmarks/gpu_agreement.py --out benchmarks/results/h200_agreement.json \
        --md benchmarks/results/h200_agreement.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import kbench
from kbench import _core
from kbench.backends import cuda
from _launch_cost import launch_cost_s

try:
    import triton
    from triton.testing import do_bench, do_bench_cudagraph
except ImportError:                       # pragma: no cover
    triton = None

CASES = ["triton empty", "ptx empty", "add 1K f32", "mul 1M f32", "add 16M f32", "gelu 64M f32",
         "bf16 mm 8192^3", "bf16 mm 16384^3"]
SPIN_NAME = "spin_kernel"                 # torch.cuda._sleep's kernel


def make_case(name: str):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    if name == "triton empty":
        @triton.jit
        def empty_kernel(X):
            pass

        xs = torch.empty(1, device=dev)
        empty_kernel[(1,)](xs)
        return lambda: empty_kernel[(1,)](xs)
    if name == "ptx empty":
        # kbench's own empty kernel (PTX, cuLaunchKernel from C) on torch's stream: does the
        # Triton empty kernel's 40-70 ns offset follow the Triton launch or the kernel's size?
        # the stream is looked up per call: graph capture runs on a side stream
        def ptx_empty():
            _core.launch_empty(int(torch.cuda.current_stream().cuda_stream), 0)
        ptx_empty()
        return ptx_empty
    if name == "add 1K f32":
        a = torch.randn(1024, device=dev, generator=g)
        o = torch.empty_like(a)
        return lambda: torch.add(a, 1.0, out=o)
    if name == "mul 1M f32":
        a = torch.randn(1 << 20, device=dev, generator=g)
        o = torch.empty_like(a)
        return lambda: torch.mul(a, 3.0, out=o)
    if name == "add 16M f32":
        a = torch.randn(16 << 20, device=dev, generator=g)
        o = torch.empty_like(a)
        return lambda: torch.add(a, a, out=o)
    if name == "gelu 64M f32":
        a = torch.randn(64 << 20, device=dev, generator=g)
        return lambda: torch.nn.functional.gelu(a)
    if name.startswith("bf16 mm "):
        n = int(name.split()[2].split("^")[0])
        m = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
        return lambda: torch.matmul(m, m)
    raise ValueError(f"unknown case {name!r}")


def steady(fn, seconds: float) -> None:
    """Back-to-back calls for `seconds`: the clock/power state kbench's 1 s warm-up reaches."""
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(8):
            fn()
        torch.cuda.synchronize()


def histogram_ns(values_s) -> dict:
    """{ns: count} of the 8 commonest per-call values, for kernels under 5 us: CUPTI's kernel
    timestamps come in 32 ns steps, so tiny kernels are best compared as distributions."""
    v = np.round(np.asarray(values_s, dtype=float) * 1e9).astype(np.int64)
    if v.size == 0 or np.median(v) >= 5000:
        return {}
    vals, counts = np.unique(v, return_counts=True)
    top = np.argsort(counts)[::-1][:8]
    return {int(vals[i]): int(counts[i]) for i in sorted(top, key=lambda i: vals[i])}


def _per_call(evs, calls: int):
    """Median over calls of the summed durations, and the median start-to-start gap."""
    k = max(1, round(len(evs) / calls))
    n = len(evs) // k
    per_call = [sum(d for _, d, _ in evs[i * k:(i + 1) * k]) for i in range(n)]
    starts = [s for s, _, _ in evs[::k]]
    gaps = np.diff(starts) if len(starts) > 1 else np.array([np.nan])
    return {"median_s": float(np.median(per_call)) * 1e-9 if per_call else float("nan"),
            "min_s": float(np.min(per_call)) * 1e-9 if per_call else float("nan"),
            "calls": n, "activities_per_call": k,
            "start_gap_median_s": float(np.median(gaps)) * 1e-9,
            "hist_ns": histogram_ns(np.asarray(per_call) * 1e-9)}


QUEUE_BURST = 200        # launches queued behind one spin: 200 fit the launch queue on the H200


def kineto_regime(fn, calls: int, queued: bool, launch_s: float) -> dict:
    """torch.profiler's kernel durations per call, the stream laid out as kbench lays it out:
    event, fn(), event per call; `queued` puts them behind a torch.cuda._sleep spin in bursts
    (as behind kbench's gate), otherwise each call runs as Python launches it (gate=False).
    NVML samples the clocks over the same window."""
    from torch.profiler import ProfilerActivity, profile
    kbench.release_cupti()      # back-to-back benches leave CUPTI attached for 1 s
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(calls)]
    burst = min(calls, QUEUE_BURST) if queued else calls
    # the spin must outlast the host queueing a burst: its launch cost plus two event records
    spin_cycles = int((burst * (launch_s + 8e-6) * 1.5 + 2e-3) * 2.0e9)
    sampler = _core.nvml_sampler_start(0, 0.005)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for first in range(0, calls, burst):
                if queued:
                    torch.cuda._sleep(spin_cycles)
                for a, b in ev[first:first + burst]:
                    a.record()
                    fn()
                    b.record()
                torch.cuda.synchronize()
    finally:
        clocks = _core.clock_summary(_core.nvml_sampler_stop(sampler))
    evs = []
    for e in prof.profiler.kineto_results.events():
        if not str(e.device_type()).endswith("CUDA"):
            continue
        try:
            start, dur = e.start_ns(), e.duration_ns()
        except AttributeError:           # older Kineto bindings: microseconds
            start, dur = int(e.start_us() * 1000), int(e.duration_us() * 1000)
        if dur > 0 and SPIN_NAME not in e.name():
            evs.append((start, dur, e.name()))
    evs.sort()
    out = _per_call(evs, calls)
    out["names"] = sorted({n for _, _, n in evs})
    out["events_median_s"] = float(np.median([a.elapsed_time(b) for a, b in ev])) * 1e-3
    out["clocks"] = clocks.get("summary")
    out["sm_mhz_median"] = clocks.get("sm_mhz_median")
    return out


def profile_over_kbench(fn, names, seconds: float) -> dict:
    """Kineto's durations of the case's kernels while kbench times it in events mode (kbench
    leaves CUPTI to Kineto there): the profiler's view of kbench's own stream. Next to
    kbench's CUPTI figure and the profile's, it tells whether a sub-us offset comes from what
    kbench's stream does around the kernel or from how kbench configures CUPTI."""
    from torch.profiler import ProfilerActivity, profile
    kbench.release_cupti()      # back-to-back benches leave CUPTI attached for 1 s
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        r = kbench.bench(fn, device="cuda", mode="events", cold_cache=None, warmup_s=0.2,
                         max_time_s=seconds, floor=False)
    durs = []
    for e in prof.profiler.kineto_results.events():
        if not str(e.device_type()).endswith("CUDA") or e.name() not in names:
            continue
        try:
            durs.append(e.duration_ns())
        except AttributeError:           # older Kineto bindings: microseconds
            durs.append(int(e.duration_us() * 1000))
    d = np.asarray(durs, dtype=float) * 1e-9
    return {"median_s": float(np.median(d)) if d.size else None, "n": int(d.size),
            "hist_ns": histogram_ns(d), "kbench_events_median_s": r.median}


def profile_calls(fn, quick: bool) -> int:
    """Calls covering ~0.5 s of GPU time (30..2000): a power-capped kernel's speed swings over
    tens of ms, and a 30-call profile is a snapshot of one swing."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - t0) / 5
    n = int(0.5 / max(per_call, 1e-6))
    return max(30, min(n, 200 if quick else 2000))


def run_case(name: str, quick: bool) -> dict:
    torch.cuda.init()
    fn = make_case(name)
    fn()
    torch.cuda.synchronize()
    mt = 1.0 if quick else 2.0
    rec = {"case": name}

    steady(fn, 3.0)
    launch = {"before_profile_s": launch_cost_s(fn)}
    # kbench brackets the profile: once before it (CUPTI clean, then detached, so the profile
    # can follow) and once after (Kineto has configured CUPTI). The verdict uses their mean,
    # which cancels a linear drift of the GPU's clock state; the two say whether the
    # profiler's presence itself moves kbench's figure.
    # The profile times calls run back to back: kbench is compared with it in the same regime,
    # sustained. kbench's default (burst: each batch from a recovered GPU) is the last figure
    # below, kbench_default_s; under a power cap the two regimes differ by the clock.
    def kb(label, gate):
        r = kbench.bench(fn, device="cuda", mode="cupti", cold_cache=None, max_time_s=mt,
                         gate=gate, regime="sustained")
        clocks = r.extra.get("clocks", {})
        return r, {"median_s": r.median, "ci": [r.stats["ci_low"], r.stats["ci_high"]],
                   "clocks": clocks.get("summary"), "sm_mhz_median": clocks.get("sm_mhz_median"),
                   "cupti_detach": r.extra.get("cupti_detach"),
                   "ticks_per_ns": r.extra.get("cupti_ticks_per_ns"),
                   "events_median_s": r.extra.get("events_median_s"),
                   "timed_fraction": r.extra.get("gpu_timed_fraction"),
                   "settle": r.extra.get("clock_settle"),
                   "between_batches": r.extra.get("between_batches"),
                   "cupti_flushes": r.extra.get("cupti_flushes"),
                   "hist_ns": histogram_ns(r.samples), "warnings": r.warnings, "label": label}
    _, k1 = kb("gated, before the profile", True)
    _, k1u = kb("gate=False, before the profile", False)
    calls = profile_calls(fn, quick)
    host = kineto_regime(fn, calls, False, launch["before_profile_s"])
    queued = kineto_regime(fn, calls, True, launch["before_profile_s"])
    rec["libcupti_mapped"] = cuda.cupti_copies_mapped()
    rec["profiler_host_s"] = host["median_s"]
    rec["profiler_queued_s"] = queued["median_s"]
    rec["profiler_clocks"] = f"host: {host['clocks']}; queued: {queued['clocks']}"
    rec["profiler"] = {"host": host, "queued": queued}
    if queued["activities_per_call"] == 1 and queued["median_s"] < 5e-6:
        try:
            rec["profile_over_kbench_events"] = profile_over_kbench(fn, set(queued["names"]),
                                                                    0.5)
        except Exception as e:           # a diagnosis: never costs the case its verdicts
            rec["profile_over_kbench_events"] = {"error": repr(e)[:300]}
    launch["after_profile_s"] = launch_cost_s(fn)
    if triton is not None:
        rec["do_bench_before_kbench_s"] = do_bench(fn) * 1e-3

    rc, k2 = kb("gated, after the profile", True)
    ru, k2u = kb("gate=False, after the profile", False)
    rec["kbench_runs"] = [k1, k1u, k2, k2u]
    rec["kbench_cupti_s"] = 0.5 * (k1["median_s"] + k2["median_s"])
    rec["kbench_cupti_ungated_s"] = 0.5 * (k1u["median_s"] + k2u["median_s"])
    rec["kbench_cupti_ci"] = k2["ci"]
    rec["kernels_per_call"] = rc.extra.get("kernels_per_call")
    rec["kernel_names"] = [k["name"] for k in rc.extra.get("kernels", [])]
    rec["kbench_cupti_span_s"] = rc.extra.get("span_median_s")
    rec["kbench_cupti_events_s"] = rc.extra.get("events_median_s")
    rec["clocks"] = rc.extra.get("clocks", {}).get("summary")
    sm = [k["sm_mhz_median"] for k in (k1, k2) if k["sm_mhz_median"]]
    rec["sm_mhz_cupti"] = float(np.mean(sm)) if sm else None
    rec["kbench_cupti_warnings"] = rc.warnings
    rec["clocks_ungated"] = ru.extra.get("clocks", {}).get("summary")
    re_ = kbench.bench(fn, device="cuda", mode="events", cold_cache=None, max_time_s=mt,
                       regime="sustained")
    rec["kbench_events_s"] = re_.median
    rec["events_floor_s"] = re_.extra["floor"].get("median_s")
    rg = kbench.bench(fn, device="cuda", mode="graph", cold_cache=None, max_time_s=mt,
                      regime="sustained")
    rec["kbench_graph_s"] = rg.median
    rec["graph_unroll"] = rg.extra.get("unroll")
    rec["graph_floor_s"] = rg.extra["floor"].get("median_s")
    rec["graph_warnings"] = rg.warnings
    launch["after_kbench_s"] = launch_cost_s(fn)
    rec["launch_cost"] = launch
    if triton is not None:
        rec["do_bench_s"] = do_bench(fn) * 1e-3
        rec["do_bench_cudagraph_s"] = do_bench_cudagraph(fn) * 1e-3
    # time to result at each tool's defaults (kbench: cold L2, 0.5% CI, auto mode)
    t0 = time.perf_counter()
    rd = kbench.bench(fn, device="cuda")
    rec["kbench_time_to_result_s"] = time.perf_counter() - t0
    rec["kbench_default_s"] = rd.median
    rec["kbench_default_stop"] = rd.stop["stop"]
    rec["metadata"] = rd.metadata
    if triton is not None:
        t0 = time.perf_counter()
        do_bench(fn)
        rec["do_bench_time_to_result_s"] = time.perf_counter() - t0

    # verdicts: cupti against the profile in the same launch regime; events and graph against
    # the queued profile (both queue their launches)
    def close(a, b):
        return abs(a - b) <= max(0.03 * b, 50e-9)
    truth = rec["profiler_queued_s"]
    rec["cupti_agrees"] = close(rec["kbench_cupti_s"], truth)
    rec["cupti_ungated_agrees"] = close(rec["kbench_cupti_ungated_s"], rec["profiler_host_s"])
    long_ = truth >= 50e-6
    rec["events_ok"] = (abs(re_.median - truth) <= 0.05 * truth) if long_ else \
        re_.median >= truth
    rec["graph_ok"] = (abs(rg.median - truth) <= 0.05 * truth) if long_ else \
        rg.median >= truth * 0.97
    return rec


def copy16(out: dict) -> None:
    """16 MB copy: cold under the HBM ceiling, hot above it."""
    from kbench.roofline.peaks import load_gpu_peaks
    from kbench.roofline.peaks_gpu import measure_gpu_peaks
    info = cuda.device_info(0)
    peaks = load_gpu_peaks(info) or measure_gpu_peaks(0)
    src = torch.randn(4 << 20, device="cuda")
    dst = torch.empty_like(src)
    hot = kbench.bench(dst.copy_, src, bytes=2 * src.nbytes, cold_cache=None, mode="cupti")
    cold = kbench.bench(dst.copy_, src, bytes=2 * src.nbytes, cold_cache="flush", mode="cupti")
    out["peaks"] = peaks
    out["copy16MB"] = {
        "hbm_peak_bytes_per_s": peaks["hbm_bytes_per_s"],
        "hot_bytes_per_s": hot.throughput["bytes_per_s"], "hot_warnings": hot.warnings,
        "cold_bytes_per_s": cold.throughput["bytes_per_s"], "cold_warnings": cold.warnings,
        "hot_median_s": hot.median, "cold_median_s": cold.median,
        "cold_flush_bytes": cold.extra.get("cold", {}).get("flush_bytes")
        if isinstance(cold.extra.get("cold"), dict) else None}


def us(v) -> str:
    return f"{v * 1e6:.2f}" if isinstance(v, (int, float)) and v == v else "nan"


def pct(v) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) else "n/a"


def yes(b) -> str:
    return "yes" if b else "**NO**"


def clock_note(r: dict) -> str:
    """The SM clocks of the two windows when they differ by more than 2%: then the two tools
    timed the kernel at different speeds, and the verdict is about the GPU, not the timer."""
    a = r["profiler"]["queued"].get("sm_mhz_median")
    b = r.get("sm_mhz_cupti")
    if a and b and abs(a - b) > 0.02 * b:
        return f" (SM {a:.0f} vs {b:.0f} MHz)"
    return ""


def settled(k: dict) -> str:
    st = k.get("settle") or {}
    if st.get("settled") is None:
        return "not judged"
    word = "" if st["settled"] else "NOT settled, "
    return f"{word}{st['at_s']:.2f} ({st['sm_mhz']:.0f})"


def gaps(k: dict) -> str:
    bb = k.get("between_batches") or {}
    return f"{bb['mean_s'] * 1e6:.0f} ({bb['n']})" if bb.get("n") else "-"


def flushes(k: dict) -> str:
    f = k.get("cupti_flushes") or {}
    return f"{f['default']}/{f['forced']}" if f else "-"


def markdown(out: dict) -> str:
    lines = [
        "| case | kbench cupti (gated) | prof queued | ok | kbench cupti gate=False | prof host "
        "| ok | events (floor) | ok | graph (unroll) | ok | do_bench | do_bench_cudagraph "
        "| ttr kbench s | ttr do_bench s | kbench default (burst) "
        "| clocks: profile / kbench cupti |",
        "|---|---:|---:|---|---:|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in out["cases"]:
        if "error" in r:
            lines.append(f"| {r['case']} | error: {r['error'][:120]} |" + " |" * 16)
            continue
        lines.append(
            f"| {r['case']} | {us(r['kbench_cupti_s'])} | {us(r['profiler_queued_s'])} "
            f"| {yes(r['cupti_agrees'])}{clock_note(r)} | {us(r['kbench_cupti_ungated_s'])} "
            f"| {us(r['profiler_host_s'])} | {yes(r['cupti_ungated_agrees'])} "
            f"| {us(r['kbench_events_s'])} ({us(r['events_floor_s'])}) | {yes(r['events_ok'])} "
            f"| {us(r['kbench_graph_s'])} ({r['graph_unroll']}) | {yes(r['graph_ok'])} "
            f"| {us(r.get('do_bench_s'))} | {us(r.get('do_bench_cudagraph_s'))} "
            f"| {r['kbench_time_to_result_s']:.2f} | {r.get('do_bench_time_to_result_s', 0):.2f} "
            f"| {us(r.get('kbench_default_s'))} | {r['profiler_clocks']} / {r['clocks']} |")
    lines += ["", "| case | host launch us: before profile / after profile / after kbench "
              "| do_bench us: before kbench / after | clocks: kbench cupti gate=False |",
              "|---|---|---|---|"]
    for r in out["cases"]:
        if "error" in r:
            continue
        lc = r["launch_cost"]
        lines.append(f"| {r['case']} | {us(lc['before_profile_s'])} / "
                     f"{us(lc['after_profile_s'])} / {us(lc['after_kbench_s'])} "
                     f"| {us(r.get('do_bench_before_kbench_s'))} / {us(r.get('do_bench_s'))} "
                     f"| {r.get('clocks_ungated')} |")
    lines += ["", "kbench around the profile (gated | gate=False, us; SM MHz; how CUPTI was left):",
              "", "| case | before profile | after profile | prof queued / host "
              "| SM before / after | GPU timed fraction before / after "
              "| warm-up: clock settled at s (SM MHz), before / after "
              "| GPU between batches, mean us (batches), before / after "
              "| CUPTI batch reads, default/forced flush, before / after "
              "| CUPTI after the first run | histograms (ns: count), "
              "kbench before / profile queued / kbench after |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["cases"]:
        runs = r.get("kbench_runs")
        if not runs:
            continue
        k1, k1u, k2, k2u = runs
        hists = " / ".join(str(h) for h in (k1["hist_ns"], r["profiler"]["queued"]["hist_ns"],
                                              k2["hist_ns"]) ) if k1["hist_ns"] else ""
        lines.append(f"| {r['case']} | {us(k1['median_s'])} \\| {us(k1u['median_s'])} "
                     f"| {us(k2['median_s'])} \\| {us(k2u['median_s'])} "
                     f"| {us(r['profiler_queued_s'])} / {us(r['profiler_host_s'])} "
                     f"| {k1['sm_mhz_median']} / {k2['sm_mhz_median']} "
                     f"| {pct(k1.get('timed_fraction'))} / {pct(k2.get('timed_fraction'))} "
                     f"| {settled(k1)} / {settled(k2)} | {gaps(k1)} / {gaps(k2)} "
                     f"| {flushes(k1)} / {flushes(k2)} | {k1['cupti_detach']} "
                     f"| {hists} |")
    over = [(r["case"], r["profile_over_kbench_events"]) for r in out["cases"]
            if r.get("profile_over_kbench_events")]
    if over:
        lines += ["", "torch.profiler over kbench's own stream (kbench in events mode, Kineto "
                  "owning CUPTI): the profile's durations of the kernels kbench timed", "",
                  "| case | Kineto median us (kernels) | kbench events us "
                  "| histogram (ns: count) |",
                  "|---|---|---|---|"]
        for case, o in over:
            if "error" in o:
                lines.append(f"| {case} | error: {o['error'][:120]} | | |")
                continue
            lines.append(f"| {case} | {us(o['median_s'])} ({o['n']}) "
                         f"| {us(o['kbench_events_median_s'])} | {o['hist_ns']} |")
    c = out["copy16MB"]
    lines += ["", f"16 MB copy: HBM ceiling {c['hbm_peak_bytes_per_s'] / 1e12:.2f} TB/s; hot "
              f"{c['hot_bytes_per_s'] / 1e12:.2f} TB/s ({us(c['hot_median_s'])} us), warnings "
              f"{c['hot_warnings']}; cold {c['cold_bytes_per_s'] / 1e12:.2f} TB/s "
              f"({us(c['cold_median_s'])} us), warnings {c['cold_warnings']}"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_agreement.json")
    ap.add_argument("--md", default=None, help="also write the table as markdown here")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", help="comma-separated subset of: " + ", ".join(CASES))
    ap.add_argument("--case", help=argparse.SUPPRESS)      # child: one case, JSON to --out
    args = ap.parse_args()
    if args.case:
        with open(args.out, "w") as f:
            json.dump(run_case(args.case, args.quick), f, default=str)
        return

    records = []
    with tempfile.TemporaryDirectory() as tmp:
        chosen = [c.strip() for c in args.cases.split(",")] if args.cases else CASES
        unknown = sorted(set(chosen) - set(CASES))
        if unknown:
            ap.error(f"unknown case(s) {unknown}; known: {CASES}")
        for i, name in enumerate(chosen):
            if name == "triton empty" and triton is None:
                continue
            path = os.path.join(tmp, f"{i}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--case", name, "--out", path]
            cmd += ["--quick"] if args.quick else []
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
            if p.returncode != 0 or not os.path.exists(path):
                tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
                print(f"{name}: child failed rc={p.returncode}: {' | '.join(tail)}", flush=True)
                records.append({"case": name, "error": " | ".join(tail)})
                continue
            with open(path) as f:
                rec = json.load(f)
            records.append(rec)
            print(f"{name:16s} cupti {us(rec['kbench_cupti_s'])} vs queued "
                  f"{us(rec['profiler_queued_s'])} {yes(rec['cupti_agrees'])}; ungated "
                  f"{us(rec['kbench_cupti_ungated_s'])} vs host {us(rec['profiler_host_s'])} "
                  f"{yes(rec['cupti_ungated_agrees'])}; events {us(rec['kbench_events_s'])} "
                  f"{yes(rec['events_ok'])}; graph {us(rec['kbench_graph_s'])} "
                  f"{yes(rec['graph_ok'])}; do_bench {us(rec.get('do_bench_s'))} "
                  f"cg {us(rec.get('do_bench_cudagraph_s'))}; ttr "
                  f"{rec['kbench_time_to_result_s']:.2f}s/"
                  f"{rec.get('do_bench_time_to_result_s', float('nan')):.2f}s", flush=True)

    torch.cuda.init()
    out = {"schema": "kbench.bench_record/1", "what": "gpu agreement", "cases": records,
           "torch": torch.__version__, "triton": getattr(triton, "__version__", None),
           "argv": sys.argv}
    copy16(out)
    meta = next((r["metadata"] for r in records if "metadata" in r), None)
    out["metadata"] = meta
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=str)
    table = markdown(out)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table)
    print()
    print(table)


if __name__ == "__main__":
    main()
