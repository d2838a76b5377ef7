"""Do the keep-busy bridges cost kbench its default CUPTI flush, and what does that cost a figure?

kbench reads each batch with CUPTI's default flush when the batch's sentinel record is back
(a forced flush lengthens later kernels' records: benchmarks/cupti_config_probe.c). A bridge
still runs while the host reads the batch, so its records would keep the buffer incomplete and
force the flush; kbench therefore switches the kernel/memcpy/memset records off while it
queues a bridge. This script times kernels long enough to get bridges, in pairs:
  off: the default (device records off while a bridge is queued);
  on:  KBENCH_CUPTI_BRIDGE_RECORDS=on (records left on: the flush is forced);
and, as the truth, torch.profiler's durations of the same calls queued behind a spin.

    python benchmarks/gpu_flush_bridges.py --out flush_bridges.json
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

import kbench
from gpu_agreement import kineto_regime, steady
from kbench import cuda


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1 << 22, device="cuda", generator=g)
    y = torch.empty_like(x)
    m = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    big = torch.randn(16 << 20, device="cuda", generator=g)
    big_out = torch.empty_like(big)
    return {"mul 4M f32": lambda: torch.mul(x, 3.0, out=y),
            "bf16 mm 2048^3": lambda: torch.matmul(m, m),
            "add 16M f32": lambda: torch.add(big, big, out=big_out)}


def one(fn, records: str) -> dict:
    if records == "on":
        os.environ["KBENCH_CUPTI_BRIDGE_RECORDS"] = "on"
    else:
        os.environ.pop("KBENCH_CUPTI_BRIDGE_RECORDS", None)
    r = kbench.bench(fn, device="cuda", mode="cupti", cold_cache=None, max_time_s=1.0)
    kb = r.extra.get("keep_busy") or {}
    return {"median_s": r.median, "flushes": r.extra.get("cupti_flushes"),
            "bridges": kb.get("bridges"), "busy": r.extra.get("gpu_busy_fraction"),
            "n": len(r.samples), "warnings": r.warnings}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    torch.cuda.init()
    info = cuda.device_info(0)
    out = {"device": torch.cuda.get_device_name(), "cases": []}
    for name, fn in cases().items():
        steady(fn, 1.0)
        runs = {"off": [], "on": []}
        for i in range(args.pairs):
            for rec in (("off", "on") if i % 2 == 0 else ("on", "off")):
                runs[rec].append(one(fn, rec))
        os.environ.pop("KBENCH_CUPTI_BRIDGE_RECORDS", None)
        prof = kineto_regime(fn, 400, True, 10e-6, info)
        row = {"case": name, "runs": runs, "profile_queued_s": prof["median_s"]}
        out["cases"].append(row)
        med = {k: float(np.median([r["median_s"] for r in v])) for k, v in runs.items()}
        fl = {k: v[0]["flushes"] for k, v in runs.items()}
        br = {k: v[0]["bridges"] for k, v in runs.items()}
        print(f"{name:16s} profile {prof['median_s'] * 1e6:9.3f} us | records off (default) "
              f"{med['off'] * 1e6:9.3f} us flushes {fl['off']} bridges {br['off']} | "
              f"records on {med['on'] * 1e6:9.3f} us flushes {fl['on']} bridges {br['on']}",
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
