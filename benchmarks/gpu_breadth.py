"""kbench's default figure on kinds of callables its other benchmarks do not cover, against
torch.profiler timing the same calls the same way (cold L2, queued).

The agreement benchmark (gpu_agreement.py) checks eight cases hot and in depth. This one checks
breadth, at kbench's defaults (cold L2 by a flush, the sustained regime, the auto mode): fused
and library kernels (softmax, layer norm, flash attention, cuDNN convolution, fp8 and int8
GEMMs), multi-kernel calls (an MLP, CUB's sort, topk), irregular memory (a gather, a transpose),
copies (device to device, pinned host to device), a CuPy kernel, a user's Triton kernel, two
chained Triton kernels under programmatic dependent launch, a launch-bound tiny GEMM, and work
forked onto a second stream and joined.

Each case runs in its own process: 2 s of back-to-back calls, kbench, the profiles, kbench
again (their mean cancels a linear drift of the clock state). The profile flushes L2 before
every call with its own kernel (a bitwise_not_ over twice the L2, so it is told apart by name),
queues the calls behind a torch.cuda._sleep spin in bursts, and splits the records into calls
at the flush kernels. A call's time is the union of its records' intervals, as kbench counts
it; the summed durations are kept too (they differ only where records overlapped).

A second profile flushes as kbench does, with a driver memset of twice the L2 (marked by a
one-byte bitwise_not_ before it, so a call's own memsets are not taken for the flush). A cold
call that writes depends on what the flush left in L2: on the H200 a Triton add 16M read
49.2-49.4 us after torch's fill_, 49.7-50.1 after a memset and 44.0 after a read-only pass
(probes at 8ef1715, GPU-0387609b; NOTES). The verdict holds kbench against the kernel flush,
the field's way (Triton's do_bench and FlashInfer zero_() a buffer); the memset column is the
same procedure as kbench's.

A power-capped case also runs `regime="burst"` (each batch on a recovered GPU at peak clocks):
the sustained figure is the capped clock's, and the profile's bursts of calls after a spin ramp
the clock down partway, so a capped kernel's profile reads between the two.

    python benchmarks/gpu_breadth.py --out benchmarks/results/h200_breadth.json \\
        --md benchmarks/results/h200_breadth.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

try:
    import torch
except ImportError:      # the record splitting and the report are tested without PyTorch
    torch = None

import kbench
from kbench import _core
from kbench.report.result import overlap_worth_showing

SPIN_NAME = "spin_kernel"          # torch.cuda._sleep's kernel
FLUSH_NAME = "bitwise_not"         # the profile's flush kernel


def _gemm_inputs(m, n, k, dtype, g):
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=g).to(dtype)
    return a, b


def build(name: str):
    """The callable of a case, its inputs made once (seeded)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    F = torch.nn.functional
    if name == "softmax bf16 8192x8192":
        x = torch.randn(8192, 8192, device="cuda", generator=g).bfloat16()
        return lambda: torch.softmax(x, -1)
    if name == "layer_norm f16 16384x4096":
        x = torch.randn(16384, 4096, device="cuda", generator=g).half()
        w, b = torch.ones(4096, device="cuda").half(), torch.zeros(4096, device="cuda").half()
        return lambda: F.layer_norm(x, (4096,), w, b)
    if name == "sdpa causal bf16 4x16x4096x128":
        q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", generator=g).bfloat16()
                   for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if name == "mlp bf16 4096x4096x11008 (3 kernels)":
        x, w1 = _gemm_inputs(4096, 11008, 4096, torch.bfloat16, g)
        w2 = torch.randn(11008, 4096, device="cuda", generator=g).bfloat16()
        return lambda: F.gelu(x @ w1) @ w2
    if name == "fp8 scaled_mm 8192^3":
        a = torch.randn(8192, 8192, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(8192, 8192, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    if name == "int8 _int_mm 8192^3":
        a = torch.randint(-8, 8, (8192, 8192), device="cuda", dtype=torch.int8, generator=g)
        b = torch.randint(-8, 8, (8192, 8192), device="cuda", dtype=torch.int8, generator=g)
        return lambda: torch._int_mm(a, b)
    if name == "conv2d bf16 32x128x56x56 3x3":
        x = torch.randn(32, 128, 56, 56, device="cuda", generator=g).bfloat16()
        w = torch.randn(128, 128, 3, 3, device="cuda", generator=g).bfloat16()
        return lambda: F.conv2d(x, w, padding=1)
    if name == "embedding gather 64K of 1M x 256 bf16":
        table = torch.randn(1 << 20, 256, device="cuda", generator=g).bfloat16()
        idx = torch.randint(0, 1 << 20, (1 << 16,), device="cuda", generator=g)
        return lambda: F.embedding(idx, table)
    if name == "sort 16M f32":
        x = torch.rand(1 << 24, device="cuda", generator=g)
        return lambda: torch.sort(x)
    if name == "topk 16M f32 k=1024":
        x = torch.rand(1 << 24, device="cuda", generator=g)
        return lambda: torch.topk(x, 1024)
    if name == "cumsum 64M f32":
        x = torch.rand(1 << 26, device="cuda", generator=g)
        return lambda: torch.cumsum(x, 0)
    if name == "sum 64M f32":
        x = torch.rand(1 << 26, device="cuda", generator=g)
        return lambda: x.sum()
    if name == "transpose copy 8192^2 f32":
        x = torch.rand(8192, 8192, device="cuda", generator=g)
        return lambda: x.t().contiguous()
    if name == "copy_ D2D 256 MB":
        src = torch.rand(1 << 26, device="cuda", generator=g)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    if name == "copy_ H2D 64 MB pinned":
        src = torch.rand(1 << 24).pin_memory()
        dst = torch.empty(1 << 24, device="cuda")
        return lambda: dst.copy_(src, non_blocking=True)
    if name == "cupy elementwise 16M f32":
        import cupy as cp
        a = cp.random.default_rng(0).random(1 << 24, dtype=cp.float32)
        out = cp.empty_like(a)
        k = cp.ElementwiseKernel("float32 x", "float32 y", "y = x * x + 1.0f", "kb_sq1")
        return lambda: k(a, out)
    if name == "triton add 16M f32":
        import triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) +
                     tl.load(y_ptr + offs, mask=mask), mask=mask)

        x = torch.rand(1 << 24, device="cuda", generator=g)
        y, o = torch.rand_like(x), torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 1024),)
        return lambda: add_kernel[grid](x, y, o, x.numel(), BLOCK=1024)
    if name == "triton 2 chained adds 16M f32, PDL":
        # programmatic dependent launch (triton's tutorial 11): the second kernel's blocks may
        # start while the first drains, waiting in griddepcontrol.wait, so the records overlap
        import triton
        import triton.language as tl

        @triton.jit
        def add_gdc(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
            tl.extra.cuda.gdc_wait()
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
            y = tl.load(y_ptr + offs, mask=mask)
            tl.extra.cuda.gdc_launch_dependents()
            tl.store(o_ptr + offs, x + y, mask=mask)

        x = torch.rand(1 << 24, device="cuda", generator=g)
        y, t, o = torch.rand_like(x), torch.empty_like(x), torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 1024),)

        def chained():
            add_gdc[grid](x, y, t, x.numel(), BLOCK=1024, launch_pdl=True)
            add_gdc[grid](t, y, o, x.numel(), BLOCK=1024, launch_pdl=True)
        return chained
    if name == "tiny mm f32 64^3":
        a, b = _gemm_inputs(64, 64, 64, torch.float32, g)
        return lambda: a @ b
    if name == "forked: 2 bf16 GEMMs 2048^3 on two streams":
        a, b = _gemm_inputs(2048, 2048, 2048, torch.bfloat16, g)
        c, d = _gemm_inputs(2048, 2048, 2048, torch.bfloat16, g)
        side = torch.cuda.Stream()

        def forked():
            cur = torch.cuda.current_stream()
            side.wait_stream(cur)
            torch.mm(a, b)
            with torch.cuda.stream(side):
                torch.mm(c, d)
            cur.wait_stream(side)
        return forked
    raise ValueError(f"unknown case {name!r}")


CASES = ["softmax bf16 8192x8192", "layer_norm f16 16384x4096", "sdpa causal bf16 4x16x4096x128",
         "mlp bf16 4096x4096x11008 (3 kernels)", "fp8 scaled_mm 8192^3", "int8 _int_mm 8192^3",
         "conv2d bf16 32x128x56x56 3x3", "embedding gather 64K of 1M x 256 bf16", "sort 16M f32",
         "topk 16M f32 k=1024", "cumsum 64M f32", "sum 64M f32", "transpose copy 8192^2 f32",
         "copy_ D2D 256 MB", "copy_ H2D 64 MB pinned", "cupy elementwise 16M f32",
         "triton add 16M f32", "triton 2 chained adds 16M f32, PDL", "tiny mm f32 64^3",
         "forked: 2 bf16 GEMMs 2048^3 on two streams"]


def steady(fn, seconds: float) -> None:
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()


def per_call_s(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / 5


def _flush_kernel(l2: int):
    buf = torch.zeros(2 * l2, dtype=torch.uint8, device="cuda")
    return buf.bitwise_not_


def _flush_memset(l2: int):
    """kbench's kind of flush, a driver memset, after a one-byte marker kernel."""
    buf = _core.DeviceBuffer(2 * l2, 0)
    marker = torch.zeros(1, dtype=torch.uint8, device="cuda")
    value = [0]

    def flush():
        marker.bitwise_not_()
        value[0] = value[0] % 255 + 1
        buf.memset(value[0], torch.cuda.current_stream().cuda_stream)
    return flush


def profile_cold(fn, flush_kind: str = "kernel") -> dict:
    """torch.profiler's records of flush-then-call, queued behind a spin in bursts; per call
    the union of its records' intervals and their summed durations."""
    from torch.profiler import ProfilerActivity, profile
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flushes = {"kernel": _flush_kernel, "memset": _flush_memset}
    if flush_kind not in flushes:
        raise ValueError(f"flush_kind must be one of {sorted(flushes)}, got {flush_kind!r}")
    flush = flushes[flush_kind](l2)
    flush()
    calls = int(min(max(0.3 / max(per_call_s(fn), 1e-6), 30), 1000))
    burst = min(calls, 100)
    # the host's time to queue one flush and one call, behind a spin long enough for a burst
    torch.cuda._sleep(int(0.05 * 1.98e9))
    t0 = time.perf_counter()
    for _ in range(10):
        flush()
        fn()
    host = (time.perf_counter() - t0) / 10
    torch.cuda.synchronize()
    spin = int((burst * host * 1.5 + 2e-3) * 1.98e9)
    kbench.release_cupti()
    sampler = _core.nvml_sampler_start(0, 0.005)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for first in range(0, calls, burst):
                torch.cuda._sleep(spin)
                for _ in range(min(burst, calls - first)):
                    flush()
                    fn()
                torch.cuda.synchronize()
    finally:
        clocks = _core.clock_summary(_core.nvml_sampler_stop(sampler))
    recs = []
    for e in prof.profiler.kineto_results.events():
        if str(e.device_type()).endswith("CUDA"):
            recs.append((e.start_ns(), e.start_ns() + e.duration_ns(), e.name()))
    per_call = calls_from_records(recs, flush_after_marker=int(flush_kind == "memset"))
    busy = [c["busy_ns"] * 1e-9 for c in per_call]
    return {"flush": flush_kind, "calls": calls, "calls_seen": len(per_call),
            "median_s": float(np.median(busy)) if busy else None,
            "summed_median_s": float(np.median([c["summed_ns"] for c in per_call])) * 1e-9
            if per_call else None,
            "records_per_call": float(np.median([c["records"] for c in per_call]))
            if per_call else None,
            "sm_mhz_median": clocks.get("sm_mhz_median"), "clocks": clocks.get("summary")}


def calls_from_records(recs, flush_after_marker: int = 0) -> list:
    """Device records (start_ns, end_ns, name), any order, split into calls at the flush
    kernels (spins dropped): per call its busy time (the union of its intervals, as kbench
    counts a sample), summed durations and record count. flush_after_marker: how many records
    right after each marker are the flush itself (1 where the marker precedes a memset)."""
    call, skip, keys, starts, ends = -1, 0, [], [], []
    for start, end, name in sorted(recs):
        if SPIN_NAME in name:
            continue
        if FLUSH_NAME in name:
            call += 1
            skip = flush_after_marker
        elif skip:
            skip -= 1
        elif call >= 0:
            keys.append(call)
            starts.append(start)
            ends.append(end)
    busy = _core.busy_time(keys, starts, ends)
    out = {k: {"busy_ns": b, "summed_ns": 0, "records": 0} for k, b in busy.items()}
    for k, s, e in zip(keys, starts, ends):
        out[k]["summed_ns"] += e - s
        out[k]["records"] += 1
    return [out[k] for k in sorted(out)]


def kb_record(r, wall_s: float) -> dict:
    clocks = r.extra.get("clocks") or {}
    reg = r.extra.get("regime") or {}
    return {"median_s": r.median, "rel_ci": r.stats.get("rel_ci_halfwidth"),
            "n": r.n, "wall_s": wall_s, "backend": r.backend, "stop": r.stop.get("stop"),
            "kernels_per_call": r.extra.get("kernels_per_call"),
            # kernels, memcpys and memsets: what the profile's records count
            "records_per_call": round(sum(k["per_call"] for k in r.extra.get("kernels") or []),
                                      2),
            "summed_median_s": r.extra.get("summed_median_s"),
            "overlap_median_s": r.extra.get("overlap_median_s"),
            "events_median_s": r.extra.get("events_median_s"),
            "sm_mhz_median": clocks.get("sm_mhz_median"), "clocks": clocks.get("summary"),
            "power_capped": "sw_power_cap" in (clocks.get("throttle_reasons") or []),
            "regime_held": reg.get("held"),
            "regime_why": reg.get("why"), "warnings": r.warnings}


def timed_bench(fn, **kw):
    t0 = time.perf_counter()
    r = kbench.bench(fn, device="cuda", **kw)
    return kb_record(r, time.perf_counter() - t0)


def run_case(name: str) -> dict:
    fn = build(name)
    fn()
    torch.cuda.synchronize()
    steady(fn, 2.0)
    rec = {"case": name}
    k1 = timed_bench(fn)
    rec["profile"] = profile_cold(fn)
    rec["profile_memset"] = profile_cold(fn, "memset")
    k2 = timed_bench(fn)
    rec["kbench"] = [k1, k2]
    rec["kbench_s"] = 0.5 * (k1["median_s"] + k2["median_s"])
    if k1["power_capped"] or k2["power_capped"]:
        rec["kbench_burst"] = timed_bench(fn, regime="burst")
    ref = rec["profile"]["median_s"]
    rec["diff"] = rec["kbench_s"] / ref - 1 if ref else None
    burst = rec.get("kbench_burst")
    rec["diff_burst"] = burst["median_s"] / ref - 1 if burst and ref else None
    ref_m = rec["profile_memset"]["median_s"]
    rec["diff_memset"] = rec["kbench_s"] / ref_m - 1 if ref_m else None
    return rec


def us(x) -> str:
    return "-" if x is None else f"{x * 1e6:.2f}"


def pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def verdict(rec: dict) -> str:
    """Within 3% (or 64 ns): agrees. A power-capped kernel has no one figure: kbench's sustained
    one is the capped clock's, its burst one a recovered GPU's at peak clocks, and a profile's
    bursts of calls ramp the clock down partway, so it reads between the two (when it does, that
    is the verdict)."""
    if rec.get("error"):
        return "error"
    ref, kb = rec["profile"]["median_s"], rec["kbench_s"]
    if abs(kb - ref) <= max(0.03 * ref, 64e-9):
        return "agrees"
    burst = (rec.get("kbench_burst") or {}).get("median_s")
    if burst is not None and burst * 0.99 <= ref <= kb * 1.01:
        return "capped: between burst and sustained"
    return "DIFFERS"


def markdown(out: dict) -> str:
    md = out["metadata"]
    lines = [
        "# kbench defaults on other kinds of callables, against torch.profiler (cold, queued)",
        "",
        f"{md.get('gpu')}, driver {md.get('driver')}, torch {md.get('torch')}, "
        f"commit {md.get('commit')}. Generated by `benchmarks/gpu_breadth.py`; the numbers "
        f"are in `h200_breadth.json`. kbench: `kbench.bench(fn, device='cuda')`, defaults, "
        f"the mean of a run before and after the profiles. Profile: flush, call; the union of "
        f"the call's records; flushed by a kernel (bitwise_not_ over 2x L2, the verdict's "
        f"reference) and, in the memset columns, by a driver memset of 2x L2 as kbench "
        f"flushes. Agrees: within 3% (or 64 ns).",
        "",
        "| case | kbench (us) | CI | profile (us) | kbench - profile | profile, memset flush "
        "(us) | kbench - that | records a call (kbench / profile) | SM MHz kbench / profile "
        "| burst (us) | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for rec in out["cases"]:
        if rec.get("error"):
            lines.append(f"| {rec['case']} | | | | | | | | | | error: {rec['error'][:120]} |")
            continue
        k1, k2 = rec["kbench"]
        p = rec["profile"]
        burst = rec.get("kbench_burst")
        pm = (rec.get("profile_memset") or {}).get("median_s")
        lines.append(
            f"| {rec['case']} | {us(rec['kbench_s'])} | +-{(k2['rel_ci'] or 0) * 100:.2f}% | "
            f"{us(p['median_s'])} | {pct(rec['diff'])} | {us(pm)} | "
            f"{pct(rec.get('diff_memset'))} | {k1.get('records_per_call', '-')} / "
            f"{p['records_per_call']:g} | {k2['sm_mhz_median'] or '-'} / "
            f"{p['sm_mhz_median'] or '-'} | "
            f"{us(burst['median_s']) + ' (' + pct(rec['diff_burst']) + ')' if burst else '-'} | "
            f"{verdict(rec)} |")
    # the printed result's Overlap row's rule
    overl = [r for r in out["cases"] if not r.get("error") and
             overlap_worth_showing(r["kbench"][1].get("overlap_median_s") or 0.0,
                                   r["kbench"][1]["median_s"])]
    if overl:
        lines += ["", "Calls whose records overlapped (the figure counts the overlap once):", ""]
        for r in overl:
            k, p = r["kbench"][1], r["profile"]
            lines.append(f"- {r['case']}: kbench {us(k['median_s'])} us, its records summed "
                         f"{us(k['summed_median_s'])} us; profile union {us(p['median_s'])} us, "
                         f"summed {us(p['summed_median_s'])} us")
    warned = [(r["case"], w) for r in out["cases"] if not r.get("error")
              for k in r["kbench"] for w in k["warnings"]]
    if warned:
        lines += ["", "kbench's warnings:", ""]
        lines += [f"- {c}: {w}" for c, w in dict.fromkeys(warned)]
    walls = [k["wall_s"] for r in out["cases"] if not r.get("error") for k in r["kbench"]]
    if walls:
        lines += ["", f"kbench's wall time a figure: median {np.median(walls):.2f} s, "
                      f"max {max(walls):.2f} s, over {len(walls)} runs."]
    return "\n".join(lines) + "\n"


def metadata() -> dict:
    from kbench.backends import cuda
    info = cuda.device_info(0)
    commit = os.environ.get("KBENCH_GIT_COMMIT")
    if not commit:
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        commit = git.stdout.strip() or None
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                          "-i", "0"], capture_output=True, text=True)
    return {"gpu": f"{info.get('name')} ({info.get('uuid')})",
            "driver": smi.stdout.strip() or None, "cuda_driver_api": info.get("driver_version"),
            "torch": torch.__version__, "commit": commit,
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", help="run one case in this process (internal)")
    ap.add_argument("--out", default="h200_breadth.json")
    ap.add_argument("--md", default=None)
    ap.add_argument("--cases", nargs="*", default=CASES)
    args = ap.parse_args()
    if args.case:
        try:
            rec = run_case(args.case)
        except Exception as e:           # the case's failure is a result, not the run's end
            rec = {"case": args.case, "error": f"{type(e).__name__}: {e}"}
        with open(args.out, "w") as f:
            json.dump(rec, f, default=str)
        return
    out = {"metadata": metadata(), "cases": []}
    for name in args.cases:
        tmp = args.out + ".case"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--case", name, "--out", tmp],
                              capture_output=True, text=True, timeout=240)
        if proc.returncode == 0 and os.path.exists(tmp):
            with open(tmp) as f:
                rec = json.load(f)
            os.remove(tmp)
        else:
            rec = {"case": name, "error": f"exit {proc.returncode}: {proc.stderr[-400:]}"}
        rec["process_wall_s"] = time.perf_counter() - t0
        out["cases"].append(rec)
        print(f"{name:45s} {verdict(rec):10s} kbench {us(rec.get('kbench_s'))} profile "
              f"{us((rec.get('profile') or {}).get('median_s'))} ({pct(rec.get('diff'))}), "
              f"memset-flushed {us((rec.get('profile_memset') or {}).get('median_s'))} "
              f"({pct(rec.get('diff_memset'))}) {rec['process_wall_s']:.1f} s", flush=True)
        with open(args.out, "w") as f:      # after every case: a cut-short run keeps its part
            json.dump(out, f, indent=1, default=str)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(out))


if __name__ == "__main__":
    main()
