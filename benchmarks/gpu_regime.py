"""Do kbench's GPU figures depend on the GPU's history? The fidelity regime's benchmark.

1. Three states, both regimes. In a fresh process per regime: a bf16 GEMM 4000x4096x11008 and a
   256 MB f32 mul, each benched (a) first in the process, (b) right after 8 s of back-to-back
   GEMMs, (c) after 6 s idle. The figures of one regime must agree within 1%.
   Beside them: torch.profiler's kernel time with a 2xL2 flush before each call ("profile").
2. Graph-cold against CUPTI-cold: torch.clamp_min on 12 MB and 16 MB f32, cold L2, kbench
   mode='graph' and mode='cupti' against the profile with a flush before each call.
3. Every figure's warnings, to show that nothing is said when nothing is wrong.

    python benchmarks/gpu_regime.py --out benchmarks/results/h200_regime.json \
        --md benchmarks/results/h200_regime.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _profile_us(fn, flush, n=50) -> float:
    """torch.profiler's median kernel time of fn, each call after an L2 flush (2x L2)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    import kbench
    kbench.release_cupti()      # back-to-back benches leave CUPTI attached for 1 s
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            flush()
            fn()
        torch.cuda.synchronize()
    # per call: the kernels that are not the flush's fill
    per_call: list = []
    evs = [e for e in prof.events() if e.device_type.name == "CUDA"]
    evs.sort(key=lambda e: e.time_range.start)
    cur = 0.0
    started = False
    for e in evs:
        if "fill" in e.name.lower() or "memset" in e.name.lower():
            if started:
                per_call.append(cur)
            cur, started = 0.0, True
            continue
        cur += e.time_range.elapsed_us()
    if started:
        per_call.append(cur)
    return float(np.median(per_call[1:])) if len(per_call) > 1 else float("nan")


def _summary(r) -> dict:
    reg = r.extra.get("regime") or {}
    return {"median_us": r.median * 1e6, "rel_ci": r.stats.get("rel_ci_halfwidth"),
            "serial_vif": r.stats.get("serial_vif"), "ci_inflation": r.stats.get("ci_inflation"),
            "n": r.n, "stop": r.stop.get("stop"), "sampling_s": r.stop.get("sampling_s"),
            "warmup_s": r.stop.get("warmup_s"), "regime": reg.get("name"),
            "held": reg.get("held"), "why": reg.get("why"), "loaded_s": reg.get("loaded_s"),
            "burst": reg.get("burst") if reg.get("name") == "burst" else None,
            "clocks": (r.extra.get("clocks") or {}).get("summary"),
            "settle": r.extra.get("clock_settle"),
            "gpu_busy_fraction": r.extra.get("gpu_busy_fraction"),
            "warnings": list(r.warnings)}


def child(regime: str) -> dict:
    import torch
    import kbench
    torch.manual_seed(0)
    dev = "cuda"
    a = torch.randn(4000, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 11008, device=dev, dtype=torch.bfloat16)
    x = torch.randn(64 << 20, device=dev)          # 256 MB f32
    y = torch.empty_like(x)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    scratch = torch.empty(2 * l2 // 4, device=dev)

    def gemm():
        return a @ b

    def mul():
        return torch.mul(x, 2.0, out=y)

    def flush():
        scratch.fill_(1.0)

    cases = {"bf16 gemm 4000x4096x11008": (gemm, dict(flops=2 * 4000 * 4096 * 11008,
                                                      compute_peak="bf16")),
             "mul 256 MB f32": (mul, dict(bytes=2 * x.nbytes))}
    out: dict = {"regime": regime, "states": {}}

    def bench_all(state: str) -> None:
        row = {}
        for name, (fn, kw) in cases.items():
            t0 = time.perf_counter()
            r = kbench.bench(fn, device=dev, regime=regime, name=name, **kw)
            row[name] = dict(_summary(r), wall_s=time.perf_counter() - t0)
            print(f"[{regime}] {state:>14} {name:28} {r.median * 1e6:9.2f} us  "
                  f"held={row[name]['held']} n={r.n} warn={len(r.warnings)}", flush=True)
        out["states"][state] = row

    bench_all("first")
    t_end = time.perf_counter() + 8.0
    while time.perf_counter() < t_end:             # 8 s of back-to-back GEMMs
        for _ in range(20):
            gemm()
        torch.cuda.synchronize()
    bench_all("after 8 s load")
    time.sleep(6.0)
    bench_all("after 6 s idle")
    if regime == "sustained":
        out["profile_us"] = {name: _profile_us(fn, flush) for name, (fn, _) in cases.items()}
        # graph-cold against CUPTI-cold on 12 and 16 MB elementwise ops
        gc = {}
        for mb in (12, 16):
            t = torch.randn(mb * (1 << 20) // 4, device=dev)
            o = torch.empty_like(t)

            def clamp(t=t, o=o):
                return torch.clamp_min(t, 0.0, out=o)
            row = {}
            for mode in ("cupti", "graph", "events"):
                r = kbench.bench(clamp, device=dev, mode=mode, bytes=2 * t.nbytes,
                                 name=f"clamp_min {mb} MB ({mode})")
                row[mode] = dict(_summary(r), bytes_per_s=r.throughput.get("bytes_per_s"),
                                 pct_peak=r.throughput.get("bandwidth_pct_peak"),
                                 ceiling=r.throughput.get("bytes_ceiling"),
                                 unroll=r.extra.get("unroll"))
            row["profile_us"] = _profile_us(clamp, flush)
            gc[f"clamp_min {mb} MB f32"] = row
            print(f"clamp_min {mb} MB: cupti {row['cupti']['median_us']:.2f} graph "
                  f"{row['graph']['median_us']:.2f} events {row['events']['median_us']:.2f} "
                  f"profile {row['profile_us']:.2f} us", flush=True)
        out["graph_cold"] = gc
    return out


def spread(states: dict, name: str) -> float:
    v = [states[s][name]["median_us"] for s in states]
    return (max(v) - min(v)) / min(v)


def _ci_note(d: dict) -> str:
    ci, infl = d.get("rel_ci"), d.get("ci_inflation") or 1.0
    if ci is None:
        return ""
    return f" +-{ci:.2%}" + (f" (x{infl:.0f}, {d.get('stop')} {d.get('sampling_s') or 0:.1f} s)"
                              if infl > 1.0 else "")


def markdown(res: dict) -> str:
    lines = ["# Figures against the GPU's history (benchmarks/gpu_regime.py)", "",
             f"GPU {res.get('gpu')}, driver {res.get('driver')}, commit {res.get('commit')}, "
             f"{res.get('when')}", "",
             "| regime | case | first | after 8 s load | after 6 s idle | spread | held | "
             "profile (flush) |", "|---|---|---:|---:|---:|---:|---|---:|"]
    prof = res["sustained"].get("profile_us", {})
    for regime in ("sustained", "burst"):
        st = res[regime]["states"]
        for name in next(iter(st.values())):
            # each figure with its CI (and the inflation its samples' order showed, if any)
            cells = [f"{st[s][name]['median_us']:.2f}" + _ci_note(st[s][name]) for s in st]
            held = all(st[s][name]["held"] for s in st)
            lines.append(f"| {regime} | {name} | " + " | ".join(cells) +
                         f" | {spread(st, name):.2%} | {held} | {prof.get(name, float('nan')):.2f} |")
    lines += ["", "Figures in us (kbench defaults, cold L2), each with its 95% CI half-width; "
              "(xN, stop, s): the CI was widened N-fold by its samples' order, and the run "
              "stopped so after s of sampling. Warnings per figure:", ""]
    for regime in ("sustained", "burst"):
        for s, row in res[regime]["states"].items():
            for name, d in row.items():
                w = "; ".join(d["warnings"]) or "none"
                lines.append(f"- {regime} / {s} / {name}: {w}")
    lines += ["", "## Graph-cold against CUPTI-cold (torch.clamp_min, cold L2)", "",
              "| case | cupti | graph | events | profile (flush) | graph/profile | ceiling |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for name, row in res["sustained"].get("graph_cold", {}).items():
        g, p = row["graph"]["median_us"], row["profile_us"]
        lines.append(f"| {name} | {row['cupti']['median_us']:.2f} | {g:.2f} | "
                     f"{row['events']['median_us']:.2f} | {p:.2f} | {g / p:.3f} | "
                     f"{row['cupti'].get('ceiling')} |")
    for name, row in res["sustained"].get("graph_cold", {}).items():
        for mode in ("cupti", "graph", "events"):
            w = "; ".join(row[mode]["warnings"]) or "none"
            lines.append(f"- {name} / {mode}: {w}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=("sustained", "burst"))
    ap.add_argument("--out")
    ap.add_argument("--md")
    args = ap.parse_args()
    if args.child:
        print("JSON " + json.dumps(child(args.child)))
        return
    import torch
    res = {"gpu": torch.cuda.get_device_name(0), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
           "commit": os.environ.get("KBENCH_GIT_COMMIT"),
           "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                     "--format=csv,noheader"], capture_output=True,
                                    text=True).stdout.strip()}
    for regime in ("sustained", "burst"):
        p = subprocess.run([sys.executable, __file__, "--child", regime], capture_output=True,
                           text=True)
        sys.stdout.write(p.stdout.replace("JSON ", "")[:4000] if p.returncode else
                         "".join(l + "\n" for l in p.stdout.splitlines()
                                 if not l.startswith("JSON ")))
        if p.returncode:
            sys.stdout.write(p.stderr[-4000:])
            raise SystemExit(f"child {regime} failed")
        res[regime] = json.loads(next(l for l in p.stdout.splitlines()
                                      if l.startswith("JSON "))[5:])
    md = markdown(res)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1, default=str)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    print(md)


if __name__ == "__main__":
    main()
