"""One bf16 GEMM 4096^3 timed by FlashInfer's bench_gpu_time and by kbench.testing's drop-in of
it, with the same call and FlashInfer's defaults (CUDA events, 25 ms dry run, 100 ms of
repeats, cold L2): the two medians should agree within a few percent.

FlashInfer comes from an installed package or from its timer's file alone (--flashinfer-utils,
scripts/fetch_flashinfer_timer.sh), loaded as benchmarks/gpu_time_to_figure.py does.

    python benchmarks/gpu_dropin_flashinfer.py --out /tmp/dropin_flashinfer.json
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_time_to_figure import load_flashinfer_timer  # noqa: E402

import kbench.testing as kt  # noqa: E402

UTILS = os.path.join(os.path.dirname(__file__), "..", ".whl", "flashinfer",
                     "flashinfer_testing_utils.py")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON of both medians")
    ap.add_argument("--flashinfer-utils", default=UTILS)
    args = ap.parse_args()
    cupti_timer, source = load_flashinfer_timer(args.flashinfer_utils)
    fi_bench_gpu_time = cupti_timer.__globals__["bench_gpu_time"]   # the same module's dispatcher
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fi = fi_bench_gpu_time(torch.matmul, input_args=(a, b))
    kb = kt.bench_gpu_time(torch.matmul, input_args=(a, b))
    res = {"case": "bf16 mm 4096x4096x4096", "flashinfer_source": source,
           "device": torch.cuda.get_device_name(),
           "flashinfer_median_ms": float(np.median(fi)), "flashinfer_n": len(fi),
           "kbench_median_ms": float(np.median(kb)), "kbench_n": len(kb)}
    res["kbench_over_flashinfer"] = res["kbench_median_ms"] / res["flashinfer_median_ms"]
    print(f"flashinfer bench_gpu_time: {res['flashinfer_median_ms']:.4f} ms median of {len(fi)}; "
          f"kbench.testing.bench_gpu_time: {res['kbench_median_ms']:.4f} ms median of {len(kb)} "
          f"(ratio {res['kbench_over_flashinfer']:.3f})")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
