"""The same GPU figures from two installs of kbench: the wheel and the source build.

Run twice, once with the wheel on sys.path (installed with `pip install --no-deps --target`)
and once with the source build, from a directory outside the checkout so neither shadows the
other; each run prints one JSON line: where kbench came from, its build record, and figures.

    python benchmarks/gpu_wheel_check.py --label wheel --out wheel.json
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

import kbench
from kbench import _core


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(16 << 20, device="cuda", generator=g)
    y = torch.empty_like(x)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, generator=g)
    cases = {
        "add 16M f32 (cupti, cold)": lambda: kbench.bench(torch.add, x, 1.0, kwargs={"out": y},
                                                          bytes=2 * x.nbytes, name="add"),
        "add 16M f32 (events, cold)": lambda: kbench.bench(torch.add, x, 1.0,
                                                           kwargs={"out": y}, mode="events",
                                                           bytes=2 * x.nbytes, name="add ev"),
        "bf16 mm 4096^3 (cupti, sustained)": lambda: kbench.bench(
            torch.matmul, a, a, flops=2 * 4096 ** 3, compute_peak="bf16", name="mm"),
    }
    out = {"label": args.label, "kbench_file": os.path.abspath(kbench.__file__),
           "core_file": os.path.abspath(_core.__file__),
           "build": getattr(_core, "BUILD", None), "figures": {}}
    for name, run in cases.items():
        t0 = time.perf_counter()
        r = run()
        out["figures"][name] = {"median_us": r.median * 1e6,
                                "rel_ci": r.stats.get("rel_ci_halfwidth"),
                                "wall_s": time.perf_counter() - t0,
                                "regime_held": (r.extra.get("regime") or {}).get("held"),
                                "warnings": r.warnings}
    line = json.dumps(out, default=str)
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
