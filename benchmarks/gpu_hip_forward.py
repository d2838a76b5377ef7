"""kbench's HIP backend run for real on an NVIDIA GPU, through the HIP-on-CUDA forwarder
(tests/hip_forward/), beside the CUDA backend's CUPTI figures for the same kernels.

The HIP figures are NOT AMD figures: the forwarder maps each hip* call kbench makes onto the
CUDA driver, so what is measured is kbench's HIP code path (graph capture per rotation chunk,
the hipStreamWaitValue32 gate, HIP events around each replay, the shared loop and stop rules)
on the H200. What the comparison shows is whether that path reads the same kernels as the CUDA
backend does:
  * cuda cupti: kernel durations from CUPTI activity records (the CUDA backend's default);
  * cuda graph: the CUDA backend's graph mode (CUPTI-timed replays);
  * hip: HIP-event time around each graph replay / calls in the replay. Events bracket the
    replay, so the gaps between kernels inside it and the replay's own start count; CUPTI counts
    kernel time only. The gap column is hip vs cuda cupti.

    python benchmarks/gpu_hip_forward.py --out benchmarks/results/h200_hip_forward.json \
        --md benchmarks/results/h200_hip_forward.md
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hip_forward"))
from build_forwarder import build  # noqa: E402

# The HIP loader reads this on its first use, so it is set before kbench touches HIP.
_lib = build(Path(tempfile.mkdtemp(prefix="kbench-hipfwd-")))
os.environ["KBENCH_HIP_LIBRARY"] = str(_lib)

import torch  # noqa: E402

import kbench  # noqa: E402


def cases():
    n = 1 << 24
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    add = {"fn": torch.add, "args": (x, y), "bytes": 3 * 4 * n, "flops": None,
           "check": lambda p, q: p + q, "tol": {}}
    mm = {"fn": torch.matmul, "args": (a, b), "bytes": None, "flops": 2 * m ** 3,
          "check": lambda p, q: (p.float() @ q.float()).to(torch.bfloat16),
          "tol": {"rtol": 2e-2, "atol": 5e-1}}
    return [("add 16M f32", None, add), ("add 16M f32", "rotate", add),
            ("bf16 mm 8192^3", None, mm), ("bf16 mm 8192^3", "rotate", mm)]


def one(case, cold, backend, mode=None):
    kw = dict(cold_cache=cold, bytes=case["bytes"], flops=case["flops"], check=case["check"],
              memory=False, max_time_s=5, **case["tol"])
    if backend == "hip":
        r = kbench.bench(case["fn"], *case["args"], backend="hip", **kw)
    else:
        r = kbench.bench(case["fn"], *case["args"], backend="cuda", mode=mode, **kw)
    d = {"median_s": r.median, "ci_rel": r.stop.get("achieved"), "n": len(r.samples),
         "stop": r.stop.get("stop"), "cold": r.cold_cache, "warnings": r.warnings}
    if backend == "hip":
        d.update(unroll=r.extra.get("unroll"), gate=r.extra["hip"]["gate"],
                 graphs=r.extra["graph"]["graphs"], post_check=r.extra.get("post_check"))
    else:
        d.update(mode=r.extra.get("mode"), timer=r.extra.get("timer"))
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    rows = []
    for name, cold, case in cases():
        row = {"case": name, "cold": cold or "hot"}
        for label, backend, mode in (("cuda_cupti", "cuda", "cupti"), ("cuda_graph", "cuda",
                                                                        "graph"),
                                     ("hip", "hip", None)):
            t0 = time.perf_counter()
            row[label] = one(case, cold, backend, mode)
            row[label]["wall_s"] = time.perf_counter() - t0
        row["gap_hip_vs_cupti"] = row["hip"]["median_s"] / row["cuda_cupti"]["median_s"] - 1
        rows.append(row)
        print(f"{name:16s} {row['cold']:6s} cupti {row['cuda_cupti']['median_s'] * 1e6:9.2f} us  "
              f"graph {row['cuda_graph']['median_s'] * 1e6:9.2f} us  hip(fwd) "
              f"{row['hip']['median_s'] * 1e6:9.2f} us  gap {row['gap_hip_vs_cupti']:+.2%}",
              flush=True)
    commit = os.environ.get("KBENCH_GIT_COMMIT")
    if not commit:
        import subprocess
        git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True)
        commit = git.stdout.strip() or None
    out = {"commit": commit, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "forwarder": str(_lib), "note": "HIP figures through the HIP-on-CUDA forwarder: "
           "kbench's HIP code path on an NVIDIA GPU, not AMD figures", "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    if args.md:
        lines = [f"# kbench HIP backend through the HIP-on-CUDA forwarder, {out['device']}", "",
                 f"commit {commit}, torch {torch.__version__}", "",
                 "Not AMD figures: kbench's HIP code path (HIP graph capture, hipStreamWaitValue32 "
                 "gate, HIP events per replay) with every hip* call forwarded to the CUDA driver. "
                 "CUPTI counts kernel time only; HIP events bracket each graph replay, so the "
                 "replay's start and the gaps between the kernels inside it count too.", "",
                 "| case | cache | CUDA cupti (us) | CUDA graph (us) | HIP fwd (us) | unroll | "
                 "HIP vs cupti |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['case']} | {r['cold']} | {r['cuda_cupti']['median_s'] * 1e6:.2f} "
                         f"| {r['cuda_graph']['median_s'] * 1e6:.2f} | "
                         f"{r['hip']['median_s'] * 1e6:.2f} | {r['hip']['unroll']} | "
                         f"{r['gap_hip_vs_cupti']:+.2%} |")
        Path(args.md).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
