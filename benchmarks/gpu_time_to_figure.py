"""Time to a figure on the GPU: a sweep and single cases, kbench against triton's do_bench.

The sweep is torch.add over 8 sizes (16 K to 268 M float32 elements), in one loop per tool;
then single cases after the first in the process. Wall times and figures side by side, with
where kbench's time went (warm-up and settle, sampling). FlashInfer's CUPTI timer is listed
when flashinfer is importable (it is not on the device image), else said so.

    python benchmarks/gpu_time_to_figure.py --out benchmarks/results/h200_time_to_figure.json
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

import kbench

SIZES = [1 << k for k in (14, 16, 18, 20, 22, 24, 26, 28)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    from triton.testing import do_bench
    bufs = {n: (torch.randn(n, device="cuda"), torch.empty(n, device="cuda")) for n in SIZES}
    res = {"gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("KBENCH_GIT_COMMIT"),
           "sweep": {}, "single": {}}
    try:
        import flashinfer  # noqa: F401
        res["flashinfer"] = "importable (not timed by this script yet)"
    except ImportError:
        res["flashinfer"] = "not installed on this machine: left out"
    # first bench in the process (includes CUPTI's set-up)
    x, y = bufs[SIZES[0]]
    t0 = time.perf_counter()
    kbench.bench(torch.add, x, 1.0, kwargs={"out": y})
    res["first_bench_s"] = time.perf_counter() - t0
    for tool in ("kbench", "do_bench"):
        rows = {}
        t0 = time.perf_counter()
        for n in SIZES:
            x, y = bufs[n]
            t1 = time.perf_counter()
            if tool == "kbench":
                r = kbench.bench(torch.add, x, 1.0, kwargs={"out": y}, bytes=2 * x.nbytes)
                fig = r.median * 1e6
                extra = {"warmup_s": r.stop.get("warmup_s"), "sampling_s": r.stop.get("sampling_s")}
            else:
                fig = do_bench(lambda: torch.add(x, 1.0, out=y), return_mode="median") * 1e3
                extra = {}
            rows[str(n)] = dict(figure_us=fig, wall_s=time.perf_counter() - t1, **extra)
        res["sweep"][tool] = {"total_s": time.perf_counter() - t0, "rows": rows}
        print(f"sweep {tool:8}: {res['sweep'][tool]['total_s']:.2f} s  " +
              " ".join(f"{v['figure_us']:.2f}" for v in rows.values()), flush=True)
    a = torch.randn(8192, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    for tool in ("kbench", "do_bench"):
        t0 = time.perf_counter()
        if tool == "kbench":
            fig = kbench.bench(torch.matmul, a, b).median * 1e6
        else:
            fig = do_bench(lambda: torch.matmul(a, b), return_mode="median") * 1e3
        res["single"][f"f16 mm 8192x4096x4096 ({tool})"] = {
            "figure_us": fig, "wall_s": time.perf_counter() - t0}
        print(f"single {tool:8}: {fig:.1f} us in {time.perf_counter() - t0:.2f} s", flush=True)
    print(f"first bench in the process: {res['first_bench_s']:.2f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
