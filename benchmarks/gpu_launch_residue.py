"""Does kbench leave CUPTI state behind that taxes later launches? (clean process, no profiler)

The host cost of one launch, the least of 9 loops of 500, for kbench's C empty-kernel launch
and for torch.add on 1K elements: at start, after each of 4 kbench cupti runs, after 2 graph
runs, after a run whose callable raised, after a torch.profiler session. A step after the
CUPTI session that stays is CUPTI left attached (disabling activity kinds and unsubscribing
do not detach it); kbench detaches it (cuptiFinalize) when it was CUPTI's only client, so the
cost should return to the start level. KBENCH_CUPTI_DETACH=0 shows the attached state.

    python benchmarks/gpu_launch_residue.py [--out residue.json]
"""
import argparse
import json
import time

import torch

import kbench
from kbench import _core


def cost(fn, calls=500, reps=9):
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.cuda.init()
    s = int(torch.cuda.current_stream().cuda_stream)
    x = torch.ones(1024, device="cuda")
    y = torch.empty_like(x)
    empty = lambda: _core.launch_empty(s, 0)
    add = lambda: torch.add(x, 1.0, out=y)
    fast = dict(device="cuda", cold_cache=None, warmup_s=0.2, max_time_s=0.5)
    rows = []

    def probe(label):
        rows.append((label, cost(empty), cost(add)))
        print(f"{label:28s} empty {rows[-1][1] * 1e6:6.2f} us   torch.add {rows[-1][2] * 1e6:6.2f} us",
              flush=True)

    probe("start")
    probe("start (again)")
    for i in range(4):
        t0 = time.perf_counter()
        r = kbench.bench(add, mode="cupti", **fast)
        print(f"  cupti run {i + 1}: {time.perf_counter() - t0:.2f} s, CUPTI "
              f"{r.extra.get('cupti_detach')}", flush=True)
        probe(f"after cupti run {i + 1}")
    for i in range(2):
        kbench.bench(add, mode="graph", **fast)
        probe(f"after graph run {i + 1}")
    n = [0]

    def raises():
        n[0] += 1
        add()
        if n[0] > 50:
            raise RuntimeError("planted")
    try:
        kbench.bench(raises, mode="cupti", **fast)
    except RuntimeError:
        pass
    probe("after a raising cupti run")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]):
        add()
        torch.cuda.synchronize()
    probe("after torch.profiler")
    if args.out:
        with open(args.out, "w") as f:
            json.dump([{"after": a, "empty_launch_s": e, "torch_add_launch_s": t}
                       for a, e, t in rows], f, indent=1)


if __name__ == "__main__":
    main()
