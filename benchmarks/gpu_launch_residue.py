"""Does kbench leave CUPTI state behind that taxes later launches? (clean process, no profiler)

The host cost of one launch, the least of 9 loops of 500, for kbench's C empty-kernel launch
and for torch.add on 1K elements: at start, after each of 4 kbench cupti runs, after 2 graph
runs, after a run whose callable raised, after a torch.profiler session. A step after the
CUPTI session that stays is CUPTI left attached (disabling activity kinds and unsubscribing
do not detach it); kbench detaches it (cuptiFinalize) when it was CUPTI's only client, so the
cost should return to the start level. KBENCH_CUPTI_DETACH=0 shows the attached state.

    python benchmarks/gpu_launch_residue.py [--out residue.json]
    python benchmarks/gpu_launch_residue.py --paired [--out paired.json]   # interleaved pairs
"""
import argparse
import json
import os
import time

import numpy as np
import torch

import kbench
from kbench import _core
from _launch_cost import launch_cost_s


def cost(fn):
    return launch_cost_s(fn, calls=500, reps=9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--paired", action="store_true",
                    help="only the interleaved attached/detached pairs, in a fresh process")
    args = ap.parse_args()
    torch.cuda.init()
    s = int(torch.cuda.current_stream().cuda_stream)
    x = torch.ones(1024, device="cuda")
    y = torch.empty_like(x)
    empty = lambda: _core.launch_empty(s, 0)
    add = lambda: torch.add(x, 1.0, out=y)
    fast = dict(device="cuda", cold_cache=None, warmup_s=0.2, max_time_s=0.5)
    if args.paired:
        paired = paired_detach(empty, add, fast)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"paired": paired}, f, indent=1)
        return
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
            json.dump({"sequence": [{"after": a, "empty_launch_s": e, "torch_add_launch_s": t}
                                    for a, e, t in rows]}, f, indent=1)


def paired_detach(empty, add, fast, pairs: int = 8) -> dict:
    """Attached and detached states interleaved in one fresh process (run it first: a
    torch.profiler session would pin CUPTI attached): each pair runs kbench once with
    KBENCH_CUPTI_DETACH=0 and once with the default, in alternating order, and probes the
    launch cost after each. The per-pair difference attached - detached is the tax."""
    diffs_empty, diffs_add, states = [], [], []
    for i in range(pairs):
        got = {}
        for detach in (("1", "0") if i % 2 else ("0", "1")):
            os.environ["KBENCH_CUPTI_DETACH"] = detach
            r = kbench.bench(add, mode="cupti", **fast)
            states.append(r.extra.get("cupti_detach"))
            got[detach] = (cost(empty), cost(add))
        diffs_empty.append(got["0"][0] - got["1"][0])
        diffs_add.append(got["0"][1] - got["1"][1])
    os.environ.pop("KBENCH_CUPTI_DETACH", None)
    out = {"pairs": pairs, "empty_diff_s": diffs_empty, "add_diff_s": diffs_add,
           "empty_diff_median_s": float(np.median(diffs_empty)),
           "add_diff_median_s": float(np.median(diffs_add)),
           "empty_attached_slower": int(sum(d > 0 for d in diffs_empty)),
           "add_attached_slower": int(sum(d > 0 for d in diffs_add)), "states": states}
    print(f"paired, attached - detached over {pairs} pairs: empty launch median "
          f"{out['empty_diff_median_s'] * 1e6:+.2f} us (attached slower in "
          f"{out['empty_attached_slower']}/{pairs}); torch.add {out['add_diff_median_s'] * 1e6:+.2f}"
          f" us ({out['add_attached_slower']}/{pairs})", flush=True)
    return out


if __name__ == "__main__":
    main()
