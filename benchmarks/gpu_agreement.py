"""kbench's GPU figures against CUPTI truth (torch.profiler), triton's do_bench, and HBM.

For each case, from an empty kernel to a ~10 ms GEMM, hot L2 so every tool sees the same work:
  kbench mode=cupti / events / graph, torch.profiler's kernel durations (Kineto = CUPTI),
  triton.testing.do_bench and do_bench_cudagraph, and time-to-result of kbench (default
  precision) vs do_bench (defaults).
Then a 16 MB copy hot and cold against the measured HBM ceiling.

    python benchmarks/gpu_agreement.py --out benchmarks/results/h200_agreement.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import kbench
from kbench import _core, cuda

try:
    import triton
    import triton.language as tl
    from triton.testing import do_bench, do_bench_cudagraph
except ImportError:                       # pragma: no cover
    triton = None


def make_cases():
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    cases = []
    if triton is not None:
        @triton.jit
        def empty_kernel(X):
            pass

        xs = torch.empty(1, device=dev)
        empty_kernel[(1,)](xs)
        cases.append(("triton empty", lambda: empty_kernel[(1,)](xs)))
    a1k = torch.randn(1024, device=dev, generator=g)
    o1k = torch.empty_like(a1k)
    cases.append(("add 1K f32", lambda: torch.add(a1k, 1.0, out=o1k)))
    a1m = torch.randn(1 << 20, device=dev, generator=g)
    o1m = torch.empty_like(a1m)
    cases.append(("mul 1M f32", lambda: torch.mul(a1m, 3.0, out=o1m)))
    a16 = torch.randn(16 << 20, device=dev, generator=g)
    o16 = torch.empty_like(a16)
    cases.append(("add 16M f32", lambda: torch.add(a16, a16, out=o16)))
    a64 = torch.randn(64 << 20, device=dev, generator=g)
    o64 = torch.empty_like(a64)
    cases.append(("gelu 64M f32", lambda: torch.nn.functional.gelu(a64)))
    m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    cases.append(("bf16 mm 8192^3", lambda: torch.matmul(m, m)))
    big = torch.randn(16384, 16384, device=dev, dtype=torch.bfloat16, generator=g)
    cases.append(("bf16 mm 16384^3", lambda: torch.matmul(big, big)))
    return cases


def kineto_per_call(fn, calls: int, kernels_per_call: int = 0):
    """Median over calls of the summed kernel durations torch.profiler (Kineto/CUPTI) reports."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    evs = []
    for e in prof.profiler.kineto_results.events():
        if not str(e.device_type()).endswith("CUDA"):
            continue
        try:
            start, dur = e.start_ns(), e.duration_ns()
        except AttributeError:           # older Kineto bindings: microseconds
            start, dur = int(e.start_us() * 1000), int(e.duration_us() * 1000)
        if dur > 0:
            evs.append((start, dur, e.name()))
    evs.sort()
    # activities per call: given, or what the profile itself shows (every call does the same)
    k = max(1, kernels_per_call or round(len(evs) / calls))
    n = len(evs) // k
    per_call = [sum(d for _, d, _ in evs[i * k:(i + 1) * k]) for i in range(n)]
    return (float(np.median(per_call)) * 1e-9 if per_call else float("nan")), len(evs), \
        sorted({name for _, _, name in evs})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200_agreement.json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.cuda.init()
    # Let torch.profiler load its CUPTI first, so kbench uses the same copy (two copies in one
    # process corrupt each other's kernel timestamps: seen here as 2.1x durations).
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]):
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    print("libcupti mapped:", cuda.cupti_copies_mapped(), flush=True)
    cases = make_cases()
    rows, records = [], []
    mt = 1.0 if args.quick else 2.0
    # torch.profiler first, for every case: kbench registers its own CUPTI buffer callbacks on
    # the shared copy, and Kineto does not register its callbacks again for a later profile.
    truth = {name: kineto_per_call(fn, 30 if not args.quick else 10) for name, fn in cases}
    for name, fn in cases:
        rec = {"case": name}
        t0 = time.perf_counter()
        rc = kbench.bench(fn, device="cuda", mode="cupti", cold_cache=None, max_time_s=mt)
        rec["kbench_cupti_s"] = rc.median
        rec["kbench_cupti_ci"] = [rc.stats["ci_low"], rc.stats["ci_high"]]
        rec["kernels_per_call"] = rc.extra.get("kernels_per_call")
        rec["kernel_names"] = [k["name"] for k in rc.extra.get("kernels", [])]
        rec["kbench_cupti_span_s"] = rc.extra.get("span_median_s")
        rec["kbench_cupti_events_s"] = rc.extra.get("events_median_s")
        rec["clocks"] = rc.extra.get("clocks", {}).get("summary")
        re_ = kbench.bench(fn, device="cuda", mode="events", cold_cache=None, max_time_s=mt)
        rec["kbench_events_s"] = re_.median
        rec["events_floor_s"] = re_.extra["floor"].get("median_s")
        rg = kbench.bench(fn, device="cuda", mode="graph", cold_cache=None, max_time_s=mt)
        rec["kbench_graph_s"] = rg.median
        rec["graph_unroll"] = rg.extra.get("unroll")
        rec["graph_floor_s"] = rg.extra["floor"].get("median_s")
        rec["graph_warnings"] = rg.warnings
        prof_s, n_ev, prof_names = truth[name]
        rec["torch_profiler_s"] = prof_s
        rec["profiler_kernel_names"] = prof_names
        if triton is not None:
            rec["do_bench_s"] = do_bench(fn) * 1e-3
            rec["do_bench_cudagraph_s"] = do_bench_cudagraph(fn) * 1e-3
        # time to result at each tool's defaults (kbench: cold L2, 0.5% CI, auto mode)
        t0 = time.perf_counter()
        rd = kbench.bench(fn, device="cuda")
        rec["kbench_default_s"] = rd.median
        rec["kbench_default_stop"] = rd.stop["stop"]
        rec["kbench_time_to_result_s"] = time.perf_counter() - t0
        if triton is not None:
            t0 = time.perf_counter()
            do_bench(fn)
            rec["do_bench_time_to_result_s"] = time.perf_counter() - t0
        # agreement verdicts
        tol = max(0.03 * prof_s, 50e-9)
        rec["cupti_agrees"] = abs(rc.median - prof_s) <= tol
        long_ = prof_s >= 50e-6
        rec["events_ok"] = (abs(re_.median - prof_s) <= 0.05 * prof_s) if long_ else \
            re_.median >= prof_s
        rec["graph_ok"] = (abs(rg.median - prof_s) <= 0.05 * prof_s) if long_ else \
            rg.median >= prof_s * 0.97
        records.append(rec)
        us = lambda v: f"{v * 1e6:9.2f}" if v is not None and v == v else "      nan"
        rows.append(f"{name:16s} {us(rc.median)} {us(prof_s)} {'ok ' if rec['cupti_agrees'] else 'BAD'}"
                    f" {us(re_.median)} {'ok ' if rec['events_ok'] else 'BAD'}"
                    f" {us(rg.median)} {'ok ' if rec['graph_ok'] else 'BAD'}"
                    f" {us(rec.get('do_bench_s'))} {us(rec.get('do_bench_cudagraph_s'))}"
                    f" {rec['kbench_time_to_result_s']:6.2f}s {rec.get('do_bench_time_to_result_s', float('nan')):6.2f}s")
        print(rows[-1], flush=True)

    # 16 MB copy: cold under the HBM ceiling, hot above it
    from kbench.peaks_gpu import load_gpu_peaks, measure_gpu_peaks
    info = cuda.device_info(0)
    peaks = load_gpu_peaks(info) or measure_gpu_peaks(0)
    n = 4 << 20
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    hot = kbench.bench(dst.copy_, src, bytes=2 * src.nbytes, cold_cache=None, mode="cupti")
    cold = kbench.bench(dst.copy_, src, bytes=2 * src.nbytes, cold_cache="flush", mode="cupti")
    copy16 = {"hbm_peak_bytes_per_s": peaks["hbm_bytes_per_s"],
              "hot_bytes_per_s": hot.throughput["bytes_per_s"], "hot_warnings": hot.warnings,
              "cold_bytes_per_s": cold.throughput["bytes_per_s"], "cold_warnings": cold.warnings,
              "hot_median_s": hot.median, "cold_median_s": cold.median}
    out = {"schema": "kbench.bench_record/1", "what": "gpu agreement", "cases": records,
           "libcupti_mapped": cuda.cupti_copies_mapped(),
           "copy16MB": copy16, "peaks": peaks,
           "metadata": rd.metadata, "device": rd.extra.get("device") if hasattr(rd, "extra")
           else None, "torch": torch.__version__,
           "triton": getattr(triton, "__version__", None), "argv": sys.argv}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=str)
    print()
    print("case             cupti_us  prof_us  ok  events_us ok  graph_us ok  do_bench  do_bench_cg  ttr_kb  ttr_db")
    for r in rows:
        print(r)
    print(f"16MB copy: HBM {peaks['hbm_bytes_per_s'] / 1e12:.2f} TB/s, hot "
          f"{copy16['hot_bytes_per_s'] / 1e12:.2f} TB/s, cold {copy16['cold_bytes_per_s'] / 1e12:.2f} TB/s")


if __name__ == "__main__":
    main()
