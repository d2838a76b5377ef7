"""benchmarks/gpu_ceilings.py's reporting, from a made-up peaks record and case (no GPU): the
ceilings table measured beside the datasheet, and each case's ceiling and warnings."""
from pathlib import Path

import pytest

from kbench.roofline import datasheet

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
pytestmark = pytest.mark.skipif(not (BENCHMARKS / "gpu_ceilings.py").exists(),
                                reason="not a source checkout (no benchmarks/): the wheel's "
                                "suite runs from a copy of tests/")


def test_the_report_sets_measured_beside_datasheet_and_names_each_cases_ceiling(load_benchmark):
    gc = load_benchmark("gpu_ceilings")
    assert gc.sdpa_flops(8, 32, 4096, 128) == 4 * 8 * 32 * 4096 ** 2 * 128
    record = {"fp32_flops_per_s": 60e12, "fp32_fma": {"kernel": "kb_fma"},
              "bf16_flops_per_s": 800e12,
              "gemm": {"bf16": {"how": "torch.matmul torch.bfloat16", "shape": [8192] * 3}},
              "absent": {"fp4": "not measured yet"},
              "datasheet": datasheet.lookup("NVIDIA H100 80GB HBM3")}
    rows = {r["precision"]: r for r in gc.ceilings_rows(record)}
    assert rows["bf16"]["measured_of_datasheet"] == pytest.approx(800 / 989.5)
    assert rows["bf16"]["how"] == "torch.matmul torch.bfloat16 8192x8192x8192"
    assert rows["fp4"]["absent"] == "not measured yet" and rows["fp4"]["how"] is None
    report = {"gpu": "NVIDIA H100 80GB HBM3", "ceilings": list(rows.values()),
              "datasheet": "H100 SXM", "hbm_bytes_per_s": 3e12, "datasheet_bytes_per_s": 3.35e12,
              "cases": [{"case": "f16 mm", "median_us": 200.0, "flops_per_s": 690e12,
                         "compute_peak": {"name": "fp16", "why": "inferred from fp16 inputs"},
                         "compute_pct_peak": 0.9, "compute_pct_datasheet": 0.7, "warnings": []}]}
    md = gc.markdown(report)
    assert "| bf16 | 800.0 | 989.5 | 80.8% | torch.matmul torch.bfloat16 8192x8192x8192 |" in md
    assert "| fp32 | 60.0 | 67.0 | 89.6% | kb_fma FMA loop |" in md
    assert "| f16 mm | 200.0 us | 690.0 | fp16 (inferred from fp16 inputs) | 90.0% | 70.0% | " \
           "none |" in md
