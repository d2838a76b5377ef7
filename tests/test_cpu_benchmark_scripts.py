"""The CPU benchmarks' reporting, on made-up runs: the calibration survives runs too short to
estimate their dependence, and the time-to-figure page says what kind of host it ran on."""
import math
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
pytestmark = pytest.mark.skipif(not (BENCHMARKS / "cpu_ci_calibration.py").exists(),
                                reason="not a source checkout (no benchmarks/): the wheel's "
                                "suite runs from a copy of tests/")


def run(median, vif):
    return {"median_s": median, "ci_low_s": median * 0.99, "ci_high_s": median * 1.01,
            "plain_low_s": median * 0.995, "plain_high_s": median * 1.005, "rel_ci": 0.01,
            "plain_rel_ci": 0.005, "ci_inflation": 1.0, "serial_vif": vif, "stop": "time_cap"}


def test_calibration_reports_no_dependence_when_no_run_could_estimate_it(load_benchmark):
    calib = load_benchmark("cpu_ci_calibration")
    short = [run(m, math.nan) for m in (1.0, 1.004, 1.006, 1.1)]   # few flushed samples a run
    c = calib.coverage(short)
    assert c["serial_vif_median"] is None
    assert c["covered"] == 0.75     # the 1.1 run's +-1% misses the others' median, 1.004
    page = calib.markdown({"machine": {"cpu": "x", "cpus": 16, "load_before": 0.0,
                                       "python": "3", "numpy": "2", "commit": "abc1234",
                                       "hypervisor": True},
                           "runs": 4, "max_time_s": 1.0, "coverage": {"cold": c}})
    row = next(ln for ln in page.splitlines() if ln.startswith("| cold |"))
    assert row.split("|")[6].strip() == "-"
    assert "16 logical CPUs, a VM" in page
    mixed = calib.coverage([run(1.0, math.nan), run(1.0, 3.0), run(1.0, 5.0)])
    assert mixed["serial_vif_median"] == 4.0


@pytest.mark.parametrize("vm, says", [(True, "A VM: its figures move"), (False, "Not a VM"),
                                      (None, "Virtualisation unknown")])
def test_time_to_figure_page_names_the_kind_of_host(load_benchmark, vm, says):
    ttf = load_benchmark("cpu_time_to_figure")
    assert ttf.host_caveat({"hypervisor": vm, "cpus": 16}).startswith(says)
