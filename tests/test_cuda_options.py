"""measure_cuda's options: written once in C (_core.CUDA_DEFAULTS), validated there before the
GPU is touched, and passed by kbench.backends.cuda only when the caller gave them. No GPU needed:
every bad value below is refused while parsing, before libcuda is opened."""
import pytest

from kbench import _core

needs_cuda_build = pytest.mark.skipif(not _core.HAVE_CUDA,
                                      reason="kbench built without the CUDA backend")


def _noop():
    return None


@needs_cuda_build
def test_cuda_defaults_are_published_once_by_the_core():
    d = _core.CUDA_DEFAULTS
    assert d["mode"] == "events" and d["regime"] == "burst" and d["cold"] is None
    assert d["gate"] is True and d["keep_busy"] is True and d["pre_sample"] is None
    assert d["gate_batch"] >= 1 and d["gate_timeout_s"] > 0 and d["unroll"] == 1.0
    assert 0 < d["callable_warmup_max_s"] <= _core.LOOP_DEFAULTS["warmup_s"]
    assert d["callable_warmup_min"] >= 1


@needs_cuda_build
@pytest.mark.parametrize("option, value, error, message", [
    ("gate_batch", 0, ValueError, "gate_batch must be 1..4096, got 0"),
    ("gate_batch", 2.5, TypeError, "gate_batch must be an int, got float"),
    # past a launch queue's depth every gated batch waits on the watchdog
    ("gate_batch", 5000, ValueError, "gate_batch must be 1..4096, got 5000"),
    ("flush_bytes", -1, ValueError, "flush_bytes must be >= 0"),
    ("device", True, TypeError, "device must be an int, got bool"),
    ("device", 99, ValueError, "device must be a CUDA ordinal"),
    ("gate_timeout_s", 0.0, ValueError, "gate_timeout_s must be > 0"),
    # a bool is no number (it ran at 1 s), as in the loop's options
    ("gate_timeout_s", True, TypeError, "gate_timeout_s must be a number, got bool"),
    ("gate_timeout_s", float("inf"), ValueError, "gate_timeout_s must be > 0 and finite"),
    ("gate_timeout_s", 1e20, ValueError, r"gate_timeout_s must be > 0 and finite, at most 1e\+06"),
    ("unroll", 0.5, ValueError, "unroll must be >= 1"),
    ("clock_period_s", "fast", TypeError, "clock_period_s must be a number, got str"),
    ("settle_max_s", -1.0, ValueError, "settle_max_s must be >= 0"),
    ("busy_warmup_s", float("nan"), ValueError, "busy_warmup_s must be >= 0"),
    # 1e15 s of 50 ms launches never ended (seconds - 0.05 stops moving past 2^49)
    ("busy_warmup_s", 1e15, ValueError, "busy_warmup_s must be >= 0 and finite, at most 3600"),
    ("mode", "graph", ValueError, "mode must be 'events' or 'cupti', got 'graph'"),
    ("regime", "hot", ValueError, "regime must be 'sustained' or 'burst', got 'hot'"),
    ("cold", "evict", ValueError, "cold must be None, 'flush' or 'rotate'"),
    ("pre_sample", 3, TypeError, "pre_sample must be a callable or None, got int"),
    ("bogus", 1, TypeError, r"unexpected keyword arguments \['bogus'\]"),
])
def test_a_bad_option_names_itself_before_the_gpu_is_touched(option, value, error, message):
    with pytest.raises(error, match=message):
        _core.measure_cuda(_noop, ((),), None, stream=0, **{option: value})


@needs_cuda_build
def test_stream_is_required_and_rotate_needs_two_sets():
    with pytest.raises(TypeError, match="needs stream="):
        _core.measure_cuda(_noop, ((),), None)
    with pytest.raises(ValueError, match="at least 2 argument sets"):
        _core.measure_cuda(_noop, ((),), None, stream=0, cold="rotate")


@needs_cuda_build
def test_a_refused_pre_sample_does_not_leak_it():
    import sys
    hook = lambda: None   # noqa: E731
    before = sys.getrefcount(hook)
    for _ in range(50):
        with pytest.raises(ValueError):
            _core.measure_cuda(_noop, ((),), None, stream=0, pre_sample=hook, gate_batch=0)
    assert sys.getrefcount(hook) == before
    if not _gpu_present():
        # parsed, then the set-up fails (no driver here): the tear-down releases the hook too
        for _ in range(50):
            with pytest.raises(_core.KbenchError):
                _core.measure_cuda(_noop, ((),), None, stream=0, pre_sample=hook)
        assert sys.getrefcount(hook) == before


def _gpu_present() -> bool:
    try:
        return _core.cuda_device_count() > 0
    except _core.KbenchError:
        return False


def _captured_run(monkeypatch, **options):
    """kbench.backends.cuda.run over a fake core that records what crosses to measure_cuda."""
    from kbench.backends import cuda
    seen = {}

    class Stop(Exception):
        pass

    class FakeCore:
        KbenchError = _core.KbenchError

        @staticmethod
        def measure_cuda(fn, sets, kwargs, **kw):
            seen.update(kw)
            raise Stop

    for name, value in {"require_backend": lambda: None,
                        "device_info": lambda o: {"l2_bytes": 1 << 26},
                        "stream_handle": lambda s, o, t=True: 0, "_uses_torch": lambda *a: False,
                        "gpu_neighbours": lambda o: {}, "_core": FakeCore}.items():
        monkeypatch.setattr(cuda, name, value)
    with pytest.raises(Stop):
        cuda.run(lambda: None, [()], {}, plan=_core.plan("cuda", None, "events"),
                 flush_bytes=None, device="cuda", loop={}, **options)
    return seen


def test_only_the_options_the_caller_gave_cross_to_c(monkeypatch):
    seen = _captured_run(monkeypatch)
    for name in ("gate", "keep_busy", "gate_batch", "gate_timeout_s", "sample_clocks",
                 "settle_max_s", "regime", "pre_sample"):
        assert name not in seen, f"{name} crossed to C although the caller did not give it"
    hook = lambda: None   # noqa: E731
    seen = _captured_run(monkeypatch, gate=False, gate_batch=8, regime="burst", pre_sample=hook)
    assert seen["gate"] is False and seen["gate_batch"] == 8 and seen["regime"] == "burst"
    assert seen["pre_sample"] is hook


def test_pytorchs_cupti_is_handed_to_c_as_an_argument_not_through_the_environment(monkeypatch):
    """kbench.backends.cuda used to set KBENCH_CUPTI_PATH around the load; the user's variable is
    read by the C loader alone, and the environment stays as it was throughout."""
    import os
    from kbench.backends import cuda
    seen = {}

    class FakeCore:
        @staticmethod
        def prefer_cupti(path):
            seen["preferred"] = path
            return True

        @staticmethod
        def gpu_library_status():
            seen["env_during_load"] = os.environ.get("KBENCH_CUPTI_PATH")
            return {"cupti": {"loaded": True, "path": seen.get("preferred")}}

    monkeypatch.delenv("KBENCH_CUPTI_PATH", raising=False)
    monkeypatch.setattr(cuda, "framework_cupti", lambda: "/torch/nvidia/cu13/lib/libcupti.so.13")
    monkeypatch.setattr(cuda, "_core", FakeCore)
    st = cuda._cupti_status()
    assert seen == {"preferred": "/torch/nvidia/cu13/lib/libcupti.so.13", "env_during_load": None}
    assert st["loaded"] and "KBENCH_CUPTI_PATH" not in os.environ
