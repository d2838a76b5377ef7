"""benchmarks/gpu_breadth.py's reference side, on the CPU: the profile's device records split
into calls at its flush kernels, each call's time the union of its records (as kbench counts a
CUPTI sample), and the report's verdicts."""
from pathlib import Path

import pytest

from kbench import _core

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_breadth.py"
pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="not a source checkout (no benchmarks/): "
                       "the wheel's suite runs from a copy of tests/"),
    pytest.mark.skipif(not _core.HAVE_CUDA, reason="busy_time is part of the CUDA backend"),
]


@pytest.fixture(scope="module")
def breadth(load_benchmark):
    return load_benchmark("gpu_breadth")


def test_records_split_at_the_flush_and_overlap_counts_once(breadth):
    flush = "void at::native::vectorized_elementwise_kernel<bitwise_not_kernel_cuda>"
    recs = [
        (0, 50_000, "spin_kernel(long)"),              # the queue's spin: never a call's
        (50_000, 50_100, "kernel before any flush"),   # not a call's either
        (60_000, 61_000, flush),
        (61_100, 61_600, "gemm_a"), (61_700, 62_000, "gelu"),       # call 0: serial, 800 ns
        (63_000, 64_000, flush),
        (64_100, 65_100, "gemm_a"), (64_300, 65_300, "gemm_side"),  # call 1: forked, overlap
    ]
    calls = breadth.calls_from_records(list(reversed(recs)))   # any order
    assert calls == [{"busy_ns": 800, "summed_ns": 800, "records": 2},
                     {"busy_ns": 1200, "summed_ns": 2000, "records": 2}]


def test_a_memset_flush_after_its_marker_is_not_the_calls_but_the_calls_own_memset_is(breadth):
    marker = "void at::native::vectorized_elementwise_kernel<bitwise_not_kernel_cuda>"
    recs = [
        (0, 100, marker), (200, 30_200, "Memset (Device)"),             # the flush
        (30_300, 31_300, "reduce_kernel"),                              # call 0
        (31_400, 31_500, marker), (31_600, 61_600, "Memset (Device)"),  # the flush
        (61_700, 61_800, "Memset (Device)"), (61_900, 62_900, "reduce_kernel"),  # call 1
    ]
    calls = breadth.calls_from_records(recs, flush_after_marker=1)
    assert [c["busy_ns"] for c in calls] == [1000, 1100]
    assert [c["records"] for c in calls] == [1, 2]
    # read as if the marker were the whole flush, the memset would count in the call
    assert breadth.calls_from_records(recs)[0]["busy_ns"] == 31_000


def _rec(kb_s, prof_s, burst_s=None, capped=False):
    k = {"median_s": kb_s, "rel_ci": 0.004, "records_per_call": 1.0,
         "sm_mhz_median": 1980, "warnings": [], "power_capped": capped, "wall_s": 0.3,
         "overlap_median_s": 0.0, "summed_median_s": kb_s}
    rec = {"case": "c", "kbench": [k, k], "kbench_s": kb_s,
           "profile": {"median_s": prof_s, "summed_median_s": prof_s, "records_per_call": 1.0,
                       "sm_mhz_median": 1980},
           "profile_memset": {"median_s": prof_s * 1.01},
           "diff": kb_s / prof_s - 1, "diff_memset": kb_s / (prof_s * 1.01) - 1,
           "diff_burst": None}
    if burst_s is not None:
        rec["kbench_burst"] = dict(k, median_s=burst_s)
        rec["diff_burst"] = burst_s / prof_s - 1
    return rec


def test_verdicts_and_report(breadth):
    assert breadth.verdict(_rec(100e-6, 102e-6)) == "agrees"
    assert breadth.verdict(_rec(110e-6, 100e-6)) == "DIFFERS"
    # a few ns on a sub-us kernel are a CUPTI step, not a disagreement
    assert breadth.verdict(_rec(0.60e-6, 0.56e-6)) == "agrees"
    # a capped kernel: the profile's partly ramped bursts read between burst and sustained
    capped = _rec(110e-6, 100e-6, burst_s=95e-6, capped=True)
    assert breadth.verdict(capped) == "capped: between burst and sustained"
    assert breadth.verdict(_rec(110e-6, 100e-6, burst_s=103e-6, capped=True)) == "DIFFERS"
    assert breadth.verdict({"case": "x", "error": "RuntimeError: boom"}) == "error"
    out = {"metadata": {"gpu": "G", "driver": "d", "torch": "t", "commit": "abc"},
           "cases": [_rec(100e-6, 102e-6), capped, {"case": "x", "error": "RuntimeError: boom"}]}
    md = breadth.markdown(out)
    assert "| c | 100.00 |" in md and "95.00 (-5.0%)" in md and "error: RuntimeError: boom" in md
    # beside the kernel-flushed profile, the memset-flushed one and kbench against it
    assert "| 102.00 | -2.0% | 103.02 | -2.9% |" in md
    assert "overlapped" not in md
    # records overlapping by a rounding nanosecond are not listed; a forked call's are
    rounding, forked = _rec(805e-6, 805e-6), _rec(47.4e-6, 47.6e-6)
    rounding["case"], forked["case"] = "sort", "forked"
    rounding["kbench"][1] = dict(rounding["kbench"][1], overlap_median_s=1e-9)
    forked["kbench"][1] = dict(forked["kbench"][1], overlap_median_s=22.4e-6,
                               summed_median_s=69.8e-6)
    md = breadth.markdown(dict(out, cases=[rounding, forked]))
    assert "- forked: kbench 47.40 us, its records summed 69.80 us" in md
    assert "- sort" not in md
