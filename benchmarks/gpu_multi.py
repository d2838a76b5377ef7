"""Multi-GPU benchmarks with kbench.distributed (issue #16): run on every rank with torchrun.

    torchrun --nproc_per_node=2 benchmarks/gpu_multi.py \
        --out benchmarks/results/h200x2_multi.json --md benchmarks/results/h200x2_multi.md
    timeout 300 torchrun --nproc_per_node=2 benchmarks/gpu_multi.py --phases hang \
        --out benchmarks/results/h200x2_hang.json --md benchmarks/results/h200x2_hang.md

(the hang phase under `timeout`: if the rank left waiting on NCCL held the GIL, its own exit
timer could not run and torchrun would wait for it.)

Phases (--phases, comma-separated; default sweep,tp):
  sweep  all_reduce (sum) of bf16 tensors, 1 MB to 1 GB, each size checked first (rank-seeded
         small integers, exact in bf16, against the sum of every rank's input regenerated from
         its seed); kbench: every rank timed, MAX per sample, median of the maxima with its CI,
         per-rank medians and skew; bus bandwidth by NCCL's convention (busbw = algbw *
         2(n-1)/n). Beside it, torch.distributed timed by hand with CUDA events: per sample
         (barrier, event, all_reduce, event; MAX across ranks; median) and nccl-tests style (20
         back-to-back calls between two events, averaged).
  tp     a tensor-parallel GEMM followed by reduce-scatter (X[:, K/n shard] @ W[K/n shard, :],
         then reduce_scatter over rows), eager and as a CUDA graph, checked first against the
         full product in fp32 (every rank's shards regenerated from their seeds).
  hang   a planted hang: rank 1 skips one collective of kbench's reducer ('sample batch 3');
         it must end in DistributedError/DistributedTimeout naming the stage and the rank within
         --timeout s. Run it by itself (last): the rank that ran ahead is left waiting on NCCL,
         so each rank ends the process itself once the outcome is recorded.
Rank 0 writes --out (JSON) and --md (markdown). NVLink multicast stays off (kbench.distributed
sets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 before the
process group exists).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, Dict, List

import numpy as np

import kbench
from kbench import distributed as kd

dist = kd.init_process_group("nccl")        # sets the lent-machine variables first
import torch                                  # noqa: E402  (after the variables are set)

RANK, WORLD = dist.get_rank(), dist.get_world_size()
LOCAL = int(os.environ.get("LOCAL_RANK", "0"))
DEV = torch.device("cuda", LOCAL)
MB = 1 << 20


def log(*a: Any) -> None:
    if RANK == 0:
        print(*a, flush=True)


def seeded(rank: int, numel: int, salt: int) -> torch.Tensor:
    """Rank `rank`'s input: small integers (exact in bf16 and in their sums)."""
    g = torch.Generator(device=DEV).manual_seed(kd.rank_seed(rank, salt))
    return torch.randint(-4, 5, (numel,), generator=g, device=DEV).to(torch.bfloat16)


def allreduce(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    return x


def hand_timed(x: torch.Tensor, samples: int = 30, back_to_back: int = 20) -> Dict[str, float]:
    """torch.distributed timed by hand with CUDA events: per sample, MAX across ranks; and
    nccl-tests style, back-to-back calls averaged."""
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = []
    for _ in range(samples):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        dist.all_reduce(x)
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) * 1e-3)
    t = torch.tensor(per, device=DEV, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.barrier()
    torch.cuda.synchronize()
    start.record()
    for _ in range(back_to_back):
        dist.all_reduce(x)
    end.record()
    end.synchronize()
    avg = torch.tensor([start.elapsed_time(end) * 1e-3 / back_to_back], device=DEV,
                       dtype=torch.float64)
    dist.all_reduce(avg, op=dist.ReduceOp.MAX)
    return {"per_sample_max_median_s": float(t.median()), "back_to_back_avg_s": float(avg)}


def busbw(nbytes: float, t: float) -> float:
    return nbytes / t * 2 * (WORLD - 1) / WORLD if t > 0 else float("nan")


def sweep(args: argparse.Namespace) -> List[Dict[str, Any]]:
    rows = []
    size = args.min_mb * MB
    while size <= args.max_mb * MB:
        numel = size // 2
        x = seeded(RANK, numel, 100)
        ref = sum(seeded(r, numel, 100).float() for r in range(WORLD)).to(torch.bfloat16)
        r = kd.bench(allreduce, x, check=ref, device=f"cuda:{LOCAL}", mode="events",
                     cold_cache=None, bytes=size, name=f"all_reduce bf16 {size // MB} MB",
                     max_time_s=args.max_time_s, dist_timeout_s=args.timeout,
                     global_shapes=[{"shape": [numel], "dtype": "bfloat16"}])
        del ref
        d = r.extra["distributed"]
        hand = hand_timed(x)
        row = {"bytes": size, "median_s": r.median, "ci": [r.stats["ci_low"], r.stats["ci_high"]],
               "n": r.n, "stop": r.stop["stop"], "per_rank_median_s": d["per_rank_median_s"],
               "skew": d["skew"], "slowest_rank": d["slowest_rank"],
               "algbw_GBps": size / r.median / 1e9, "busbw_GBps": busbw(size, r.median) / 1e9,
               "hand": hand,
               "hand_busbw_GBps": busbw(size, hand["per_sample_max_median_s"]) / 1e9,
               "nccl_tests_style_busbw_GBps": busbw(size, hand["back_to_back_avg_s"]) / 1e9,
               "correctness": r.correctness}
        rows.append(row)
        log(f"all_reduce {size // MB:5d} MB: kbench {r.median * 1e6:9.1f} us "
            f"(busbw {row['busbw_GBps']:6.1f} GB/s, skew {d['skew']:.1%}); by hand "
            f"{hand['per_sample_max_median_s'] * 1e6:9.1f} us, back-to-back "
            f"{hand['back_to_back_avg_s'] * 1e6:9.1f} us")
        if rows[-1] is rows[0]:
            rows[0]["report"] = {k: v for k, v in d.items() if k not in ("per_rank_median_s",)}
        del x
        torch.cuda.empty_cache()
        size *= args.step
    return rows


def tp_gemm(args: argparse.Namespace) -> Dict[str, Any]:
    m, n, k = args.tp_m, args.tp_n, args.tp_k
    ks = k // WORLD

    def shards(rank: int):
        g = torch.Generator(device=DEV).manual_seed(kd.rank_seed(rank, 200))
        xs = torch.randn(m, ks, generator=g, device=DEV).to(torch.bfloat16)
        ws = (torch.randn(ks, n, generator=g, device=DEV) / ks ** 0.5).to(torch.bfloat16)
        return xs, ws
    x, w = shards(RANK)
    out = torch.empty(m // WORLD, n, device=DEV, dtype=torch.bfloat16)
    full = sum(a.float() @ b.float() for a, b in (shards(r) for r in range(WORLD)))
    ref = full[RANK * (m // WORLD):(RANK + 1) * (m // WORLD)].to(torch.bfloat16)
    del full

    def tp(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        y = x @ w
        dist.reduce_scatter_tensor(out, y)
        return out
    flops = 2.0 * m * n * ks
    res: Dict[str, Any] = {"m": m, "n": n, "k": k, "per_rank": {"x": [m, ks], "w": [ks, n],
                                                              "out": [m // WORLD, n]}}
    for mode in ("events", "graph"):
        stream = torch.cuda.Stream(device=DEV) if mode == "graph" else None
        # bf16 partial products rounded before the reduce-scatter's sum: a bf16 tolerance
        try:
            r = kd.bench(tp, x, w, out, check=ref, rtol=2e-2, atol=5e-2,
                         device=f"cuda:{LOCAL}", mode=mode, stream=stream,
                         cold_cache=None, flops=flops, name=f"tp gemm+reduce_scatter {mode}",
                         max_time_s=args.max_time_s, dist_timeout_s=args.timeout,
                         global_shapes=[{"x": [m, k], "w": [k, n], "y": [m, n]}])
        except Exception as e:          # recorded: the other phases' results are kept
            import traceback
            res[mode] = {"error": f"{type(e).__name__}: {e}",
                         "where": traceback.format_exc(limit=-4)[-1500:]}
            log(f"tp {mode} failed: {type(e).__name__}: {e}")
            continue
        d = r.extra["distributed"]
        res[mode] = {"median_s": r.median, "ci": [r.stats["ci_low"], r.stats["ci_high"]],
                     "n": r.n, "stop": r.stop["stop"],
                     "per_rank_median_s": d["per_rank_median_s"], "skew": d["skew"],
                     "tflops_per_rank": flops / r.median / 1e12,
                     "graph": r.extra.get("graph"), "unroll": r.extra.get("unroll"),
                     "correctness": r.correctness, "report": repr(r)}
        log(repr(r))
    return res


def planted_hang(args: argparse.Namespace) -> Dict[str, Any]:
    x = seeded(RANK, 4 * MB // 2, 300)
    t0 = time.monotonic()
    # If this rank is the one left waiting on NCCL, end the process once the bound has passed
    # (the rank that raised has recorded the outcome).
    threading.Timer(args.timeout + 30, lambda: (print(f"rank {RANK}: still inside the planted "
                                                      f"hang after {args.timeout + 30:.0f} s; "
                                                      f"exiting", file=sys.stderr, flush=True),
                                                os._exit(0))).start()
    try:
        kd.bench(allreduce, x, device=f"cuda:{LOCAL}", mode="events", cold_cache=None,
                 max_time_s=args.max_time_s, dist_timeout_s=args.timeout,
                 _plant={"skip": "sample batch 3", "rank": 1})
        outcome = {"raised": False}
    except kd.DistributedError as e:
        outcome = {"raised": True, "type": type(e).__name__, "message": str(e)}
    outcome.update(rank=RANK, seconds=time.monotonic() - t0, bound_s=args.timeout)
    print(f"rank {RANK}: {outcome}", file=sys.stderr, flush=True)
    return outcome


def markdown(doc: Dict[str, Any]) -> str:
    lines = [f"# kbench.distributed on {doc['world']} GPUs", "",
             f"torch {doc['versions'].get('torch')}, CUDA {doc['versions'].get('cuda')}, "
             f"NCCL {doc['versions'].get('nccl')}; world {doc['world']}, "
             f"{doc['local_world']} per node, {doc['nodes']} node(s). "
             f"Topology: {doc.get('topology_text', '-')}", ""]
    if doc.get("sweep"):
        lines += ["## all_reduce, bf16 (sum), checked first", "",
                  "| size | kbench median (MAX of ranks) | 95% CI | n | busbw GB/s | skew | "
                  "per-rank medians | by hand, per sample (MAX) | busbw | nccl-tests style "
                  "(back-to-back avg) | busbw |", "|" + "---|" * 11]
        for r in doc["sweep"]:
            lines.append(
                f"| {r['bytes'] // MB} MB | {r['median_s'] * 1e6:.1f} us | "
                f"{r['ci'][0] * 1e6:.1f}-{r['ci'][1] * 1e6:.1f} | {r['n']} | "
                f"{r['busbw_GBps']:.1f} | {r['skew']:.1%} | "
                f"{', '.join(f'{m * 1e6:.1f}' for m in r['per_rank_median_s'])} us | "
                f"{r['hand']['per_sample_max_median_s'] * 1e6:.1f} us | "
                f"{r['hand_busbw_GBps']:.1f} | {r['hand']['back_to_back_avg_s'] * 1e6:.1f} us | "
                f"{r['nccl_tests_style_busbw_GBps']:.1f} |")
        lines += ["", "busbw = bytes / time x 2(n-1)/n (NCCL's all_reduce convention). "
                  "nccl-tests itself was not built (no registry package).", ""]
    if doc.get("tp"):
        t = doc["tp"]
        lines += [f"## tensor-parallel GEMM + reduce-scatter, M={t['m']} N={t['n']} K={t['k']} "
                  f"(bf16), checked first", "", "| mode | median | 95% CI | n | TFLOP/s per rank "
                  "| skew |", "|---|---|---|---|---|---|"]
        for mode in ("events", "graph"):
            r = t[mode]
            if "error" in r:
                lines.append(f"| {mode} | failed: {r['error'][:300]} | | | | |")
                continue
            lines.append(f"| {mode} | {r['median_s'] * 1e6:.1f} us | {r['ci'][0] * 1e6:.1f}-"
                         f"{r['ci'][1] * 1e6:.1f} | {r['n']} | {r['tflops_per_rank']:.1f} | "
                         f"{r['skew']:.1%} |")
        lines.append("")
    if doc.get("hang"):
        h = doc["hang"]
        lines += ["## planted hang (rank 1 skips the reduce of 'sample batch 3')", "",
                  f"rank 0: {'raised ' + h.get('type', '') if h.get('raised') else 'did NOT raise'}"
                  f" after {h['seconds']:.1f} s (bound {h['bound_s']:g} s):", "",
                  f"    {h.get('message', '')}", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", default="sweep,tp")
    ap.add_argument("--out")
    ap.add_argument("--md")
    ap.add_argument("--min-mb", type=int, default=1)
    ap.add_argument("--max-mb", type=int, default=1024)
    ap.add_argument("--step", type=int, default=2)
    ap.add_argument("--max-time-s", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=30.0, help="dist_timeout_s")
    ap.add_argument("--tp-m", type=int, default=8192)
    ap.add_argument("--tp-n", type=int, default=8192)
    ap.add_argument("--tp-k", type=int, default=8192)
    args = ap.parse_args()
    phases = args.phases.split(",")
    comm = kd.communicator("auto")
    from kbench.report.result import topology_text
    from kbench.distributed._topology import p2p_topology
    topo = p2p_topology()
    doc: Dict[str, Any] = {"world": WORLD, "local_world": comm.local_world, "nodes": comm.nodes,
                           "versions": comm.versions(), "topology": topo,
                           "topology_text": topology_text(topo),
                           "env": {k: os.environ.get(k) for k in kd.LENT_MACHINE_ENV},
                           "argv": sys.argv, "kbench": kbench.__version__,
                           "commit": os.environ.get("KBENCH_GIT_COMMIT")}
    if "sweep" in phases:
        doc["sweep"] = sweep(args)
    if "tp" in phases:
        doc["tp"] = tp_gemm(args)
    if "hang" in phases:
        doc["hang"] = planted_hang(args)
    if RANK == 0:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=1, default=str)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(doc) + "\n")
        print(markdown(doc), flush=True)
    if "hang" in phases:
        os._exit(0)         # the other rank may still wait on NCCL: no orderly shutdown
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
