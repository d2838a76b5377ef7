"""benchmarks/gpu_near_limit.py's reporting, on a made-up time course and benches (no GPU): the
per-bin figures and readings on the load's axis, the early against the late per-call time, the
first limit, and each default bench against the long one."""
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
pytestmark = pytest.mark.skipif(not (BENCHMARKS / "gpu_near_limit.py").exists(),
                                reason="not a source checkout (no benchmarks/): the wheel's "
                                "suite runs from a copy of tests/")


def made_up_course():
    """4 s of load: 10 us a call until 0.9 s, 11 us after, and sw_power_cap from 0.95 s on;
    NVML read every 5 ms from 0.2 s before the load, 600 W then 690 W of a 700 W limit."""
    t = np.arange(0.0, 4.0, 0.002)
    per_call = np.where(t < 0.9, 10e-6, 11e-6)
    nt = np.arange(0.0, 4.2, 0.005)
    load = nt - 0.2
    return {"chunk_t_s": t.tolist(), "per_call_s": per_call.tolist(), "calls_per_chunk": 200,
            "nvml_load_start_s": 0.2,
            "nvml": {"t_s": nt.tolist(),
                     "sm_mhz": np.where(load < 0.9, 1980.0, 1500.0).tolist(),
                     "power_inst_w": np.where(load < 0.9, 600.0, 690.0).tolist(),
                     "power_w": np.full(len(nt), 500.0).tolist(),
                     "reasons": np.where(load >= 0.95, 4, 0).astype(np.uint64).tolist()}}


def test_the_course_is_binned_on_the_loads_axis(load_benchmark):
    nl = load_benchmark("gpu_near_limit")
    bins = nl.course_bins(made_up_course())
    assert len(bins) == 40 and bins[0]["t_s"] == 0.0
    assert bins[5]["per_call_s"] == pytest.approx(10e-6) and bins[25]["per_call_s"] == 11e-6
    # readings before the load (0.2 s of them) fall in no bin; the limit from 0.95 s
    assert bins[5]["sm_mhz"] == 1980.0 and bins[25]["sm_mhz"] == 1500.0
    assert [b["limited"] for b in bins].index(True) == 9
    assert bins[8]["power_inst_w"] == pytest.approx(600.0)


def test_the_summary_sets_the_early_load_against_its_last_seconds(load_benchmark):
    nl = load_benchmark("gpu_near_limit")
    s = nl.course_summary(made_up_course(), 700.0)
    assert s["early_us"] == pytest.approx(10.0) and s["late_us"] == pytest.approx(11.0)
    assert s["early_vs_late"] == pytest.approx(10 / 11 - 1)
    assert s["power_early_share"] == pytest.approx(600 / 700)
    assert s["power_late_share"] == pytest.approx(690 / 700)
    assert s["first_limit_s"] == pytest.approx(0.95, abs=0.006)
    assert nl.course_summary(made_up_course(), None)["power_early_share"] is None


def bench(median, **kw):
    row = {"median_s": median, "rel_ci": 0.004, "n": 1000, "wall_s": 1.0, "stop": "precision",
           "settled_by": "max clock", "settle_at_s": 0.2, "resettle_reason": None,
           "resettle_timed_s": None, "limits": [], "held": True, "why": "held",
           "first_half_s": median, "second_half_s": median, "temp_c_median": 61.0,
           "idle_before_s": 0.12,
           "warnings": []}
    row.update(kw)
    return row


def test_the_page_names_each_default_against_the_long_bench(load_benchmark):
    nl = load_benchmark("gpu_near_limit")
    defaults = [bench(10e-6), bench(11e-6, settled_by="two windows", settle_at_s=2.1,
                                    resettle_reason="sw_power_cap", resettle_timed_s=0.84,
                                    limits=["sw_power_cap"]),
                bench(11.1e-6, held=False, why="the load settled ...")]
    long = bench(11.2e-6, first_half_s=10.5e-6, second_half_s=11e-6, temp_c_median=None,
                 idle_before_s=None)
    vs = nl.versus_long(defaults, long)
    assert vs == pytest.approx([10 / 11 - 1, 0.0, 11.1 / 11 - 1])
    assert nl.versus_long(defaults, bench(1e-6, second_half_s=None)) == [None] * 3
    res = {"gpu": {"gpu": "H200", "uuid": "GPU-x", "power_limit_w": 700.0, "torch": "2.11",
                   "commit": "abc1234", "python": "3.12"}, "course_s": 4.0, "long_s": 8.0,
           "cases": {"bf16 mm 2048^3": {"course_summary": nl.course_summary(made_up_course(),
                                                                           700.0),
                                        "defaults": defaults, "long": long, "vs_long": vs},
                     "broken": {"error": "RuntimeError: no"}}}
    page = nl.markdown(res)
    assert "| bf16 mm 2048^3 | 10.00 us | 11.00 us | -9.09% | 86% | 99% | 0.95 s |" in page
    assert "| bf16 mm 2048^3 | 2 | 11.00 us +-0.40% | +0.00% | +0.00% | 0.12 s | 1.00 s | " \
        "two windows (2.10 s) | sw_power_cap at 0.84 s timed | sw_power_cap | 61 C | True |" \
        in page
    assert "| bf16 mm 2048^3 | long | 11.20 us +-0.40% | - | +4.76% | > 1 s |" in page
    assert "| - | True |" in page          # the long bench: no temperature read
    assert "- bf16 mm 2048^3 / 3: the load settled ...; -" in page
    assert "| broken | RuntimeError: no |" in page
