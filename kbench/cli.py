"""The kbench command line: demo (the main job), peaks, info, compare."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ._format import fmt_bytes, fmt_pct, fmt_rate, fmt_time, text_table


def _row(case: str, r: Any) -> List[str]:
    tp = r.throughput
    if tp.get("bound_by") == "compute" and "flops_per_s" in tp:
        rate, pct = fmt_rate(tp["flops_per_s"], "FLOP"), fmt_pct(tp.get("compute_pct_peak"))
    elif "bytes_per_s" in tp:
        rate, pct = fmt_rate(tp["bytes_per_s"], "B"), fmt_pct(tp.get("bandwidth_pct_peak"))
    elif "flops_per_s" in tp:
        rate, pct = fmt_rate(tp["flops_per_s"], "FLOP"), fmt_pct(tp.get("compute_pct_peak"))
    else:
        rate, pct = "-", "-"
    ok = "-" if r.correctness is None else ("ok" if r.correctness.get("ok") else "FAIL")
    return [case, r.cold_cache.get("mode", "none"), r.backend, fmt_time(r.median),
            f"+-{fmt_pct(r.stats.get('rel_ci_halfwidth'))}", rate, pct,
            fmt_pct(r.stats.get("cv")), f"{r.stop.get('stop')} (n={r.n})", ok]


HEADERS = ["case", "cache", "timer", "median", "CI95", "throughput", "% peak", "CV", "stop",
           "correct"]


def cmd_demo(args: argparse.Namespace) -> int:
    import kbench
    from .peaks import load_cached_peaks, measure_cpu_peaks, peaks_table

    print("kbench demo: correctness first, then timing, hot and cold, on the CPU"
          + (" and the GPU" if args.gpu else ""))
    if load_cached_peaks() is None:
        print("measuring this machine's ceilings first (kbench peaks, cached) ...")
        print(peaks_table(measure_cpu_peaks(seconds=args.peak_seconds)))
    rng = np.random.default_rng(0)
    rows = []
    # Memory-bound: c = a + b in float32; 3 x 16 MB: far above L2, inside the last-level cache,
    # so hot and cold differ.
    n = 4 << 20
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    c = np.empty_like(a)
    ref_add = (a.astype(np.float64) + b.astype(np.float64))
    # Compute-bound: a float32 matrix product; reference in float64.
    m = 384
    x = rng.standard_normal((m, m), dtype=np.float32)
    y = rng.standard_normal((m, m), dtype=np.float32)
    ref_mm = x.astype(np.float64) @ y.astype(np.float64)
    common = dict(max_time_s=args.seconds, warmup_s=min(1.0, args.seconds / 2))
    results = {}
    for cache in (None, "flush"):
        label = "hot" if cache is None else "cold"
        r = kbench.bench(np.add, a, b, kwargs={"out": c}, bytes=3 * n * 4, check=ref_add,
                         cold_cache=cache, name=f"np.add f32 {n}", **common)
        rows.append(_row(f"add f32 n={n} ({label})", r))
        results[f"add_{label}"] = r
        # fp32 dot products of length m: error grows ~ m * eps * |x||y| (bound ~5e-4 here)
        r = kbench.bench(np.matmul, x, y, flops=2 * m ** 3, bytes=3 * m * m * 4, check=ref_mm,
                         rtol=1e-4, atol=5e-4, cold_cache=cache, name=f"np.matmul f32 {m}^3",
                         **common)
        rows.append(_row(f"matmul f32 {m}^3 ({label})", r))
        results[f"matmul_{label}"] = r
    if args.gpu:
        rows += _gpu_demo(args, results)
    print()
    print(text_table(HEADERS, rows))
    for key, r in results.items():
        for w in r.warnings:
            print(f"  note [{key}]: {w}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: r.to_dict() for k, r in results.items()}, f, indent=1)
        print(f"results written to {args.json}")
    return 0


def _gpu_demo(args: argparse.Namespace, results: Dict[str, Any]) -> List[List[str]]:
    import kbench
    try:
        import torch
    except ImportError:
        print("(GPU present but PyTorch is not installed: GPU demo skipped)")
        return []
    rows = []
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    n = 64 << 20
    src = torch.randn(n, device=dev, generator=gen)
    dst = torch.empty_like(src)
    for cache in (None, "flush"):
        label = "hot" if cache is None else "cold"
        r = kbench.bench(dst.copy_, src, bytes=2 * n * 4, check=src, cold_cache=cache,
                         name="torch copy 256MB", max_time_s=args.seconds)
        rows.append(_row(f"gpu copy 256 MB ({label})", r))
        results[f"gpu_copy_{label}"] = r
    k = 4096
    a = torch.randn(k, k, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, k, device=dev, dtype=torch.bfloat16, generator=gen)
    ref = (a.double() @ b.double())
    # bf16 output of a length-4096 fp32-accumulated dot (|c| ~ 64): half an ulp of bf16 ~ 0.25
    r = kbench.bench(torch.matmul, a, b, flops=2 * k ** 3, bytes=3 * k * k * 2, check=ref,
                     rtol=1.6e-2, atol=0.5, compute_peak="bf16", name=f"bf16 matmul {k}^3",
                     max_time_s=args.seconds)
    rows.append(_row(f"gpu bf16 matmul {k}^3", r))
    results["gpu_matmul"] = r
    return rows


def cmd_peaks(args: argparse.Namespace) -> int:
    from .peaks import measure_cpu_peaks, peaks_table
    if not args.gpu_only:
        print(peaks_table(measure_cpu_peaks(seconds=args.seconds)))
    if not args.cpu_only:
        from . import cuda
        if cuda.available():
            from .peaks_gpu import gpu_peaks_table, measure_gpu_peaks
            print(gpu_peaks_table(measure_gpu_peaks(device=args.device)))
        elif args.gpu_only:
            print("no CUDA device: nothing to measure", file=sys.stderr)
            return 1
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from . import _core
    from .metadata import collect_host_metadata
    md = collect_host_metadata()
    timer = _core.host_timer_info(lambda: None, calls=20000)
    caches = _core.cpu_cache_info()
    from ._build import build_info, describe_build
    info: Dict[str, Any] = {"host": md, "host_timer": timer, "cpu_caches": caches,
                            "cuda_backend_built": bool(_core.HAVE_CUDA),
                            "cuda_headers_version": _core.CUDA_HEADERS_VERSION,
                            "build": build_info()}
    if _core.HAVE_CUDA:
        info["gpu_libraries"] = _core.gpu_library_status()
        try:
            count = _core.cuda_device_count()
            info["cuda_devices"] = [_core.cuda_device_info(i) for i in range(count)]
        except _core.KbenchError as e:
            info["cuda_devices"] = f"unavailable: {e}"
    if args.json:
        print(json.dumps(info, indent=1, default=str))
        return 0
    print(f"kbench {md.get('kbench_version')}  python {md.get('python_version')}  "
          f"numpy {md.get('numpy_version')}")
    print(f"CPU: {md.get('cpu_model')}, {md.get('cpu_count')} logical cores")
    print("caches: " + ", ".join(f"L{c['level']} {c['type']} {fmt_bytes(c['bytes'])}"
                                 for c in caches["levels"])
          + f"; last level {fmt_bytes(caches['llc_bytes'])} ({caches['source']})")
    print(f"host timer: {timer['clock']}, resolution {timer['resolution_ns']} ns, read "
          f"{timer['read_cost_ns']:.1f} ns, per-sample overhead around an empty call "
          f"{timer['call_overhead_min_ns']} ns (min) / {timer['call_overhead_mean_ns']:.0f} ns (mean)")
    print(describe_build())
    if not _core.HAVE_CUDA:
        return 0
    print(f"CUDA backend: built against CUDA headers {_core.CUDA_HEADERS_VERSION}")
    for lib, st in info["gpu_libraries"].items():
        where = st.get("path") if st.get("loaded") else (st.get("error") or "").splitlines()[0]
        print(f"  {lib:6s} {'found' if st.get('loaded') else 'missing'}: {where}")
    devs = info.get("cuda_devices")
    if isinstance(devs, list):
        for i, d in enumerate(devs):
            print(f"  cuda:{i} {d.get('name')}  SMs {d.get('sm_count')}  L2 "
                  f"{fmt_bytes(d.get('l2_bytes'))}  memory {fmt_bytes(d.get('total_memory_bytes'))}  "
                  f"driver {d.get('driver_version')}")
    else:
        print(f"  devices: {devs}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .cli_compare import compare_sets, load_results
    old, new = load_results(args.old), load_results(args.new)
    if len(old) == 1 and len(new) == 1 and set(old) != set(new):
        old = {next(iter(new)): next(iter(old.values()))}   # two single results, renamed
    cmp = compare_sets(old, new, args.fail, old_label="old", new_label="new")
    print(cmp)
    return 1 if (args.fail > 0 and cmp.regressions) else 0


def _percent(s: str) -> float:
    s = s.strip()
    return float(s[:-1]) / 100 if s.endswith("%") else float(s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="kbench", description="trustworthy kernel microbenchmarks")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="benchmark memory- and compute-bound ops hot and cold")
    d.add_argument("--seconds", type=float, default=2.0, help="time cap per case (s)")
    d.add_argument("--peak-seconds", type=float, default=3.0)
    d.add_argument("--json", help="also write the results to this JSON file")
    d.add_argument("--no-gpu", dest="gpu", action="store_false", default=None)
    d.set_defaults(func=cmd_demo)
    pk = sub.add_parser("peaks", help="measure this machine's memory and compute ceilings")
    pk.add_argument("--seconds", type=float, default=5.0)
    pk.add_argument("--device", type=int, default=0)
    pk.add_argument("--cpu-only", action="store_true")
    pk.add_argument("--gpu-only", action="store_true")
    pk.set_defaults(func=cmd_peaks)
    i = sub.add_parser("info", help="machine, caches, timer, GPU libraries found")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)
    c = sub.add_parser("compare", help="deltas between two saved result files, with verdicts")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--fail", type=_percent, default=0.0,  # 0: report only
                   help="exit 1 when a benchmark is slower by more than this (e.g. 8%%)")
    c.set_defaults(func=cmd_compare)
    args = p.parse_args(argv)
    if getattr(args, "cmd", None) == "demo" and args.gpu is None:
        from . import cuda
        args.gpu = cuda.available()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
