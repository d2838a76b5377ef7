"""A vLLM-style kernel benchmark (benchmarks/kernels/ shape) run with kbench's drop-ins.

The body below is what such a script looks like with triton.testing.do_bench and FlashInfer's
bench_gpu_time_with_cupti. Only the import block changes: KBENCH_DROPIN=kbench (default) takes
kbench.testing; KBENCH_DROPIN=triton takes triton.testing (FlashInfer is not installed on the
GPU machine, so its half is absent there). The kernel is a fused SiLU-and-mul in Triton, as in
vLLM's activation kernels; correctness is checked against PyTorch in float32 first.

    python benchmarks/gpu_dropin_vllm.py --out benchmarks/results/
"""
import argparse
import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

# ---- the only lines that differ between the two runs --------------------------------------
if os.environ.get("KBENCH_DROPIN", "kbench") == "kbench":
    from kbench.testing import bench_gpu_time_with_cupti, do_bench
else:
    from triton.testing import do_bench
    bench_gpu_time_with_cupti = None
# --------------------------------------------------------------------------------------------


@triton.jit
def silu_and_mul_kernel(out_ptr, x_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * 2 * d + cols, mask=mask).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * d + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(out, x):
    n, d = out.shape
    BLOCK = 1024
    silu_and_mul_kernel[(n, triton.cdiv(d, BLOCK))](out, x, d, BLOCK=BLOCK)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for num_tokens in (1, 16, 256, 4096, 16384):
        d = 14336                                  # Llama-3-8B intermediate size
        x = torch.randn(num_tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(num_tokens, d, device="cuda", dtype=torch.bfloat16)
        silu_and_mul(out, x)
        xf = x.float()
        ref = (torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]).to(torch.bfloat16)
        torch.testing.assert_close(out, ref, rtol=1.6e-2, atol=1e-2)
        nbytes = x.numel() * 2 + out.numel() * 2
        t0 = time.perf_counter()
        ms = do_bench(lambda: silu_and_mul(out, x), quantiles=[0.5, 0.2, 0.8])
        t_db = time.perf_counter() - t0
        row = {"num_tokens": num_tokens, "d": d, "bytes": nbytes,
               "do_bench_ms_p50_p20_p80": ms, "do_bench_GBps": nbytes / (ms[0] * 1e-3) / 1e9,
               "do_bench_wall_s": t_db}
        if bench_gpu_time_with_cupti is not None:
            t0 = time.perf_counter()
            times = bench_gpu_time_with_cupti(lambda: silu_and_mul(out, x), repeat_iters=100)
            med = sorted(times)[len(times) // 2]
            row.update({"cupti_ms_median": med, "cupti_GBps": nbytes / (med * 1e-3) / 1e9,
                        "cupti_n": len(times), "cupti_wall_s": time.perf_counter() - t0})
        rows.append(row)
        print(json.dumps(row), flush=True)
    impl = os.environ.get("KBENCH_DROPIN", "kbench")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"h200_dropin_vllm_{impl}.json"), "w") as f:
        json.dump({"schema": "kbench.bench_record/1", "what": "vLLM-style silu_and_mul with "
                   f"{impl} drop-ins", "impl": impl, "rows": rows, "torch": torch.__version__,
                   "triton": triton.__version__, "gpu": torch.cuda.get_device_name(),
                   "argv": sys.argv}, f, indent=1)
    print(f"{'tokens':>7} {'do_bench us':>12} {'GB/s':>8} {'cupti us':>9} {'GB/s':>8}")
    for r in rows:
        print(f"{r['num_tokens']:7d} {r['do_bench_ms_p50_p20_p80'][0] * 1e3:12.2f} "
              f"{r['do_bench_GBps']:8.0f} {r.get('cupti_ms_median', float('nan')) * 1e3:9.2f} "
              f"{r.get('cupti_GBps', float('nan')):8.0f}")


if __name__ == "__main__":
    main()
