"""The CUDA backend's pure diagnostics (no GPU needed): how much of the sampling time the GPU
spent in timed iterations, and what the sampled clocks say."""
import pytest

from kbench import cuda


def test_timed_fraction_is_event_time_over_sampling_time():
    raw = {"events_s": [1e-3] * 100, "unroll": 1.0}
    assert cuda.timed_fraction(raw, 0.125) == pytest.approx(0.8)
    # a graph iteration replays `unroll` calls and events_s is per call
    graph = {"events_s": [1e-4] * 100, "unroll": 10.0}
    assert cuda.timed_fraction(graph, 0.125) == pytest.approx(0.8)
    # never above 1 (event rounding), None when there is nothing to divide
    assert cuda.timed_fraction({"events_s": [1.0]}, 0.5) == 1.0
    assert cuda.timed_fraction({"events_s": []}, 0.5) is None
    assert cuda.timed_fraction(raw, 0.0) is None
    assert cuda.timed_fraction(raw, None) is None


def _clocks(sm, reasons):
    n = len(sm)
    return {"n": n, "period_s": 0.01, "sm_mhz": sm, "mem_mhz": [3201.0] * n,
            "power_w": [650.0] * n, "temp_c": [60.0] * n, "reasons": reasons}


def test_clock_summary_flags_a_power_cap_and_a_fall():
    info = {"max_sm_clock_mhz": 1980}
    steady = cuda._clock_summary(_clocks([1980.0] * 20, [0] * 20), info)
    assert steady["steady"] is True and "steady" in steady["summary"]
    capped = cuda._clock_summary(_clocks([1980.0] * 10 + [1500.0] * 10, [0] * 10 + [4] * 10),
                                 info)
    assert capped["steady"] is False
    assert capped["throttle_reasons"] == ["sw_power_cap"]
    assert "MOVED: SM fell to 1500 MHz" in capped["summary"]
    assert cuda._clock_summary(None, info)["steady"] is None
