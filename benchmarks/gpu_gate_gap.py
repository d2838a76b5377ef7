"""Where does a gated batch's GPU idle time come from? (diagnosis for the gated GEMM gap)

A gated batch leaves the GPU idle from the previous batch's end marker to its first event:
the host collects and decides, queues the sub-batch behind the gate, opens it, and the GPU
notices. This measures the parts separately:

1. the gate's own latency: a stream waits on cuStreamWaitValue32 over the host-mapped flag for
   X ms; GPU time between an event before the wait and one after it, minus the host's own X;
2. the host cost of queueing one iteration of a bf16 8192^3 GEMM (torch.matmul), with and
   without kbench's per-iteration work (two event records, the flush memset) around it;
3. kbench's between_batches (GPU idle), timed and busy fractions and median for the same GEMM,
   gated and ungated, with and without the keep-busy bridges.

    python benchmarks/gpu_gate_gap.py [--out gate_gap.json]
"""
import argparse
import ctypes
import json
import statistics
import time

import torch

import kbench


def gate_latency(sleeps_ms=(0.0, 0.05, 0.2, 1.0, 3.0), reps=15):
    cu = ctypes.CDLL("libcuda.so.1")
    host = ctypes.c_void_p()
    assert cu.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(4), ctypes.c_uint(3)) == 0
    flag = ctypes.cast(host, ctypes.POINTER(ctypes.c_uint32))
    flag[0] = 0
    dptr = ctypes.c_uint64()
    assert cu.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), host, ctypes.c_uint(0)) == 0
    stream = torch.cuda.current_stream()
    handle = ctypes.c_void_p(stream.cuda_stream)
    gen = 0
    out = {}
    for ms in sleeps_ms:
        lat = []
        for _ in range(reps):
            gen += 1
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record(stream)
            rc = cu.cuStreamWaitValue32_v2(handle, ctypes.c_uint64(dptr.value),
                                           ctypes.c_uint32(gen), ctypes.c_uint(0))  # GEQ
            assert rc == 0, rc
            e1.record(stream)
            e0.synchronize()
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < ms * 1e-3:
                pass
            t1 = time.perf_counter()
            flag[0] = gen
            e1.synchronize()
            lat.append(e0.elapsed_time(e1) * 1e-3 - (t1 - t0))
        out[str(ms)] = {"median_us": statistics.median(lat) * 1e6,
                        "max_us": max(lat) * 1e6, "min_us": min(lat) * 1e6}
        o = out[str(ms)]
        print(f"gate held {ms:5.2f} ms: GPU saw it open {o['median_us']:8.1f} us after the store "
              f"(median; min {o['min_us']:.1f}, max {o['max_us']:.1f})", flush=True)
    cu.cuMemFreeHost(host)
    return out


def queue_cost(a, n=32):
    """Host seconds to queue n iterations while the GPU is busy (so launches never wait)."""
    stream = torch.cuda.current_stream()
    flush = torch.empty(2 * 64 << 20, dtype=torch.uint8, device="cuda")
    res = {}
    for label, extra in (("matmul", False), ("matmul + 2 events + flush memset", True)):
        times = []
        for _ in range(5):
            torch.cuda._sleep(50_000_000)     # ~ tens of ms of GPU work ahead of the launches
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
            t0 = time.perf_counter()
            for i in range(n):
                if extra:
                    flush.zero_()
                    evs[2 * i].record(stream)
                torch.matmul(a, a)
                if extra:
                    evs[2 * i + 1].record(stream)
            times.append((time.perf_counter() - t0) / n)
            torch.cuda.synchronize()
        res[label] = statistics.median(times)
        print(f"host cost per iteration, {label:34s} {res[label] * 1e6:7.1f} us", flush=True)
    return res


def kbench_runs(a):
    rows = []
    configs = [("gated", dict(gate=True)),
               ("gated, keep_busy=False", dict(gate=True, keep_busy=False)),
               ("gate=False", dict(gate=False)),
               ("gate=False, keep_busy=False", dict(gate=False, keep_busy=False)),
               ("gated, events mode", dict(gate=True, mode="events")),
               ("gated again", dict(gate=True)),
               ("gated, keep_busy=False again", dict(gate=True, keep_busy=False))]
    for label, kw in configs:
        kw = {"mode": "cupti", **kw}
        r = kbench.bench(torch.matmul, a, a, **kw)
        bb = r.extra.get("between_batches") or {}
        row = {"label": label, "median_us": r.median * 1e6, "samples": len(r.samples),
               "batches": bb.get("n"), "gap_mean_us": (bb.get("mean_s") or 0) * 1e6,
               "gap_max_us": (bb.get("max_s") or 0) * 1e6,
               "timed_fraction": r.extra.get("gpu_timed_fraction"),
               "busy_fraction": r.extra.get("gpu_busy_fraction"),
               "keep_busy": r.extra.get("keep_busy"), "clocks": r.extra["clocks"].get("summary")}
        rows.append(row)
        kb = row["keep_busy"] or {}
        print(f"{label:29s} median {row['median_us']:8.1f} us  n {row['samples']:4d}  "
              f"idle {row['batches']} x {row['gap_mean_us']:6.1f} us  timed "
              f"{row['timed_fraction']:.3f} busy {row['busy_fraction']:.3f}  bridges "
              f"{kb.get('bridges')} ({kb.get('iterations')} it, turnaround "
              f"{(kb.get('turnaround_s') or 0) * 1e6:.0f} us)", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.cuda.init()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    res = {"gate_latency": gate_latency(), "queue_cost_s": queue_cost(a),
           "kbench": kbench_runs(a), "device": torch.cuda.get_device_name()}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
