"""The right ceiling for every precision (issue 46), on a GPU.

1. `kbench peaks`' GPU measurement, every precision (fp32/fp64 FMA, and the torch GEMMs: fp64,
   fp32, tf32, fp16, bf16, fp8 e4m3/e5m2, int8), beside the datasheet's dense figures.
2. Three benches with flops= and no compute_peak=, each recording the ceiling kbench chose from
   the tensors' dtypes, the figure's share of the measured and the datasheet ceilings, and every
   warning: an f16 torch.matmul 4096^3 (the issue's case read 946% of the fp32 FMA ceiling), a
   bf16 scaled_dot_product_attention (batch 8, 32 heads, seq 4096, head dim 128) and an fp8
   torch._scaled_mm 4096x8192x8192 (e4m3, out bf16).

About two minutes on an H100 (the peaks take most of it):

    python benchmarks/gpu_ceilings.py --out benchmarks/results/h100_ceilings.json \
        --md benchmarks/results/h100_ceilings.md
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))          # a checkout's kbench, where not installed


def sdpa_flops(batch: int, heads: int, seq: int, dim: int) -> int:
    """Q K^T and P V, 2 FLOPs a multiply-add each: 4 * b * h * s^2 * d (no causal mask)."""
    return 4 * batch * heads * seq * seq * dim


def ceilings_rows(record: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per precision: measured and datasheet FLOP/s, their ratio, how or why absent."""
    from kbench.roofline.ceilings import PRECISIONS
    sheet = (record.get("datasheet") or {}).get("flops") or {}
    rows = []
    for prec in PRECISIONS:
        got, ds = record.get(f"{prec}_flops_per_s"), sheet.get(prec)
        gemm = (record.get("gemm") or {}).get(prec) or {}
        fma = record.get(f"{prec}_fma") or {}
        how = "; ".join(x for x in (fma.get("kernel") and f"{fma['kernel']} FMA loop",
                                    gemm.get("how") and f"{gemm['how']} "
                                    f"{'x'.join(map(str, gemm.get('shape', [])))}") if x)
        rows.append({"precision": prec, "measured_flops_per_s": got, "datasheet_flops_per_s": ds,
                     "measured_of_datasheet": got / ds if got and ds else None,
                     "how": how if got else None,
                     "absent": None if got else (record.get("absent") or {}).get(prec)})
    return rows


def case_record(name: str, r: Any) -> Dict[str, Any]:
    """What a bench's result says about its ceiling."""
    tp = r.throughput
    return {"case": name, "median_us": r.median * 1e6, "flops_per_s": tp.get("flops_per_s"),
            "compute_peak": r.extra.get("compute_peak"),
            "peak_flops_name": tp.get("peak_flops_name"),
            "compute_pct_peak": tp.get("compute_pct_peak"),
            "compute_pct_datasheet": tp.get("compute_pct_datasheet"),
            "datasheet": (tp.get("datasheet") or {}).get("name") or tp.get("datasheet_missing"),
            "warnings": list(r.warnings)}


def _t(v: Any) -> str:
    return f"{v / 1e12:.1f}" if v else "-"


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if v is not None else "-"


def markdown(report: Dict[str, Any]) -> str:
    """The report as markdown: the ceilings table, then the cases."""
    lines = [f"# Ceilings per precision: {report.get('gpu')}", "",
             f"kbench {report.get('commit', '?')}, torch {report.get('torch', '?')}; peaks took "
             f"{report.get('peaks_s', 0):.0f} s, datasheet: {report.get('datasheet') or 'none'}",
             "", f"HBM copy {_t(report.get('hbm_bytes_per_s'))} TB/s measured, "
             f"{_t(report.get('datasheet_bytes_per_s'))} TB/s datasheet", "",
             "| precision | measured TFLOP/s | datasheet TFLOP/s (dense) | measured / datasheet "
             "| how, or why absent |", "|---|---:|---:|---:|---|"]
    for row in report.get("ceilings", []):
        lines.append(f"| {row['precision']} | {_t(row['measured_flops_per_s'])} | "
                     f"{_t(row['datasheet_flops_per_s'])} | {_pct(row['measured_of_datasheet'])} "
                     f"| {row['how'] or row['absent'] or ''} |")
    lines += ["", "| case | median | TFLOP/s | ceiling (why) | % of measured | % of datasheet "
              "| warnings |", "|---|---:|---:|---|---:|---:|---|"]
    for c in report.get("cases", []):
        cp = c.get("compute_peak") or {}
        warn = "<br>".join(c.get("warnings") or []) or "none"
        lines.append(f"| {c['case']} | {c['median_us']:.1f} us | {_t(c['flops_per_s'])} | "
                     f"{cp.get('name')} ({cp.get('why')}) | {_pct(c['compute_pct_peak'])} | "
                     f"{_pct(c['compute_pct_datasheet'])} | {warn} |")
    return "\n".join(lines) + "\n"


def run_cases() -> List[Dict[str, Any]]:
    import torch
    import torch.nn.functional as F
    import kbench
    g = torch.Generator(device="cuda").manual_seed(0)
    out = []
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g)
    out.append(case_record("f16 torch.matmul 4096^3",
                           kbench.bench(torch.matmul, a, b, flops=2 * n ** 3, name="f16 mm")))
    del a, b
    bsz, heads, seq, dim = 8, 32, 4096, 128
    q, k, v = (torch.randn(bsz, heads, seq, dim, device="cuda", dtype=torch.bfloat16,
                           generator=g) for _ in range(3))
    out.append(case_record("bf16 SDPA b8 h32 s4096 d128",
                           kbench.bench(F.scaled_dot_product_attention, q, k, v,
                                        flops=sdpa_flops(bsz, heads, seq, dim), name="sdpa")))
    del q, k, v
    m, kk, nn = 4096, 8192, 8192
    try:
        a8 = torch.randn(m, kk, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b8 = torch.randn(nn, kk, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        kw = {"scale_a": one, "scale_b": one, "out_dtype": torch.bfloat16}
        out.append(case_record("fp8 torch._scaled_mm 4096x8192x8192",
                               kbench.bench(torch._scaled_mm, a8, b8, kwargs=kw,
                                            flops=2 * m * kk * nn, name="fp8 mm")))
    except Exception as e:          # noqa: BLE001 -- a GPU without fp8: said, not fatal
        out.append({"case": "fp8 torch._scaled_mm 4096x8192x8192", "error": f"{e}"[:300],
                    "median_us": 0.0, "flops_per_s": None, "compute_pct_peak": None,
                    "compute_pct_datasheet": None, "warnings": [f"not run: {e}"[:300]]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the report as JSON here")
    ap.add_argument("--md", help="write the report as markdown here")
    ap.add_argument("--gemm-time-s", type=float, default=2.0,
                    help="time per GEMM ceiling in kbench peaks (s)")
    args = ap.parse_args()
    import torch
    from kbench.provenance import metadata
    from kbench.roofline.peaks_gpu import gpu_peaks_table, measure_gpu_peaks
    t0 = time.perf_counter()
    record = measure_gpu_peaks(0, gemm_time_s=args.gemm_time_s)
    peaks_s = time.perf_counter() - t0
    print(gpu_peaks_table(record), flush=True)
    sheet = record.get("datasheet") or {}
    git = metadata.git_info(os.path.dirname(HERE)) or {}
    report = {"gpu": record.get("device"), "uuid": record.get("uuid"),
              "torch": torch.__version__, "commit": (git.get("commit") or "unknown")[:7],
              "peaks_s": peaks_s, "hbm_bytes_per_s": record.get("hbm_bytes_per_s"),
              "datasheet": sheet.get("name"), "datasheet_source": sheet.get("source"),
              "datasheet_bytes_per_s": sheet.get("bytes_per_s"),
              "ceilings": ceilings_rows(record), "peaks_record": record}
    report["cases"] = run_cases()
    report["wall_s"] = time.perf_counter() - t0
    text = markdown(report)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
