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


def _fake_run(monkeypatch, events_s, sampling_s, reasons):
    """cuda.run over a canned measure_cuda result: the Python side of the backend, no GPU."""
    import numpy as np

    from kbench import _core as real
    n = len(events_s)
    clocks = _clocks([1980.0] * 10 + [1500.0] * 10, reasons)
    raw = {"samples": np.asarray(events_s), "sampling_s": sampling_s,
           "cuda": {"backend": "cupti", "events_s": np.asarray(events_s),
                    "span_s": np.asarray(events_s), "kernels_per_iter": np.ones(n, np.uint32),
                    "copies_per_iter": np.zeros(n, np.uint32), "names": {}, "clocks": clocks,
                    "gate": {"enabled": True, "batch": 32, "batch_final": 32,
                             "watchdog_fired": 0, "fired_kept": 0, "timeout_s": 1.0},
                    "unroll": 1.0, "flush_bytes": 0, "arg_sets": 1,
                    "persisting_l2_limit_bytes": 0, "cupti_foreign_subscriber": False,
                    "busy_warmup_s": 1.0, "device": 0, "cupti_dropped": 0,
                    "cupti_ticks_per_ns": 1.0, "cupti_detach": "detached"}}

    class FakeCore:
        measure_cuda = staticmethod(lambda *a, **k: raw)
        nvml_clock_event_reason_names = staticmethod(real.nvml_clock_event_reason_names)
        KbenchError = real.KbenchError

    for name, value in {"require_backend": lambda: None,
                        "device_info": lambda o: {"l2_bytes": 1 << 26, "max_sm_clock_mhz": 1980},
                        "_resolve_mode": lambda m, w: ("cupti", True),
                        "stream_handle": lambda s, o: 0, "_uses_torch": lambda *a: False,
                        "_gpu_neighbours": lambda o: {}, "_gpu_peaks": lambda *a: None,
                        "mode_floor": lambda *a: {"median_s": 1e-7}, "_core": FakeCore}.items():
        monkeypatch.setattr(cuda, name, value)
    return cuda.run(lambda: None, [()], {}, cold_cache=None, flush_bytes=None, mode="cupti",
                    device="cuda", loop={})[2]


IDLE_WARNING = "idle between batches"


def test_power_capped_run_that_idled_between_batches_warns(monkeypatch):
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [0] * 10 + [4] * 10)
    assert extra["gpu_timed_fraction"] == pytest.approx(0.5)
    assert any(IDLE_WARNING in w and "50%" in w for w in extra["warnings"])


def test_busy_or_uncapped_runs_do_not_warn_about_idle(monkeypatch):
    busy = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 10 + [4] * 10)
    assert busy["gpu_timed_fraction"] > 0.9
    assert not any(IDLE_WARNING in w for w in busy["warnings"])
    # idle but never power capped: the clock did not depend on the idle, nothing to say
    uncapped = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [0] * 20)
    assert not any(IDLE_WARNING in w for w in uncapped["warnings"])
