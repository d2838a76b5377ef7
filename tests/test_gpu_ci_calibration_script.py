"""benchmarks/gpu_ci_calibration.py's reporting, on made-up runs (no GPU): coverage against the
other runs' median, the first second of sampling against the second half, which runs count as
continuing a capped load, and the prefixes of a long run."""
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
pytestmark = pytest.mark.skipif(not (BENCHMARKS / "gpu_ci_calibration.py").exists(),
                                reason="not a source checkout (no benchmarks/): the wheel's "
                                "suite runs from a copy of tests/")


def run(median, half=0.005, first=None, continued=None, limits=("sw_power_cap",)):
    return {"median_s": median, "ci_low_s": median * (1 - half),
            "ci_high_s": median * (1 + half), "plain_low_s": median * 0.9999,
            "plain_high_s": median * 1.0001, "rel_ci": half, "plain_rel_ci": 1e-4,
            "ci_inflation": 100.0, "serial_vif": 100.0, "stop": "precision", "wall_s": 5.0,
            "sampling_s": 3.0, "limits": list(limits), "first_s_vs_late": first,
            "continued_s": continued, "held": True}


def test_coverage_counts_the_runs_whose_ci_holds_the_others_median(load_benchmark):
    cal = load_benchmark("gpu_ci_calibration")
    runs = [run(400.5e-6), run(401e-6), run(402e-6), run(410e-6)]
    c = cal.coverage(runs)
    # the 410 run's +-0.5% (407.95-412.05) misses the others' median (401); the 400.5 run's
    # (398.5-402.5) holds theirs (402); no +-0.01% CI holds the others' median
    assert c["covered"] == 0.75 and c["covered_if_independent"] == 0.0
    assert c["spread_of_medians"] == pytest.approx(410 / 400.5 - 1)
    assert c["loo_dev_max"] == pytest.approx(410 / 401.0 - 1)
    assert c["limited_runs"] == 4 and c["precision_stops"] == 4


def test_the_first_second_is_split_by_whether_the_run_continued_a_capped_load(load_benchmark):
    cal = load_benchmark("gpu_ci_calibration")
    runs = [run(400e-6, first=-0.01, continued=7.5), run(400e-6, first=-0.012, continued=3.0),
            run(400e-6, first=-0.002, continued=0.0), run(400e-6, first=0.001, continued=None),
            run(400e-6, first=None, continued=None)]       # a run under 2 s: not judged
    c = cal.coverage(runs)
    assert c["carried_capped_runs"] == 2
    assert c["first_s_carried_median"] == pytest.approx(-0.011)
    assert c["first_s_median"] == pytest.approx(-0.0005)
    # a run that carried a capped state after too long a gap continued nothing
    assert not cal.carried_capped({"carried_under_limit": True, "continued_s": 0.0})


def test_first_second_against_the_second_half(load_benchmark):
    cal = load_benchmark("gpu_ci_calibration")
    x = np.r_[np.full(100, 0.99), np.full(300, 1.0)]        # 4 s of samples, 100 a second
    assert cal.first_second(x, 4.0) == pytest.approx(-0.01)
    assert cal.first_second(x, 1.9) is None and cal.first_second(x, None) is None


def test_prefixes_set_a_long_runs_start_against_the_whole(load_benchmark):
    cal = load_benchmark("gpu_ci_calibration")
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0.98, 1e-4, 2000), rng.normal(1.0, 1e-4, 18000)]   # 20 s, 1000 a s
    rows = cal.prefixes(x, 20.0, 0.95)
    assert [r["t_s"] for r in rows] == list(cal.PREFIXES_S)
    first = rows[0]
    assert first["n"] == 500 and first["dev_from_whole"] == pytest.approx(-0.02, abs=1e-3)
    assert not first["covers_whole"]            # a tight CI around the early, fast samples
    assert rows[-1]["dev_from_whole"] == pytest.approx(0.0, abs=1e-3)
    # a prefix longer than the run is left out
    assert [r["t_s"] for r in cal.prefixes(x[:3000], 3.0, 0.95)] == [0.5, 1.0, 1.5, 2.0, 3.0]


def test_the_page_reports_each_case_and_a_failed_long_run(load_benchmark):
    cal = load_benchmark("gpu_ci_calibration")
    res = {"gpu": {"gpu": "NVIDIA H200", "uuid": "GPU-x", "torch": "2", "commit": "abc1234"},
           "runs": 3, "coverage": {"f16 mm": cal.coverage([run(4e-4), run(4.01e-4),
                                                            run(4.02e-4)])},
           "long": {"f16 mm": {"error": "RuntimeError: boom"}}}
    page = cal.markdown(res)
    row = next(ln for ln in page.splitlines() if ln.startswith("| f16 mm |"))
    assert "100%" in row.split("|")[2] and "3 of 3" in row
    assert "Long run of f16 mm: failed: RuntimeError: boom" in page
