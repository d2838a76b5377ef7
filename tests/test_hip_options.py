"""The HIP backend's options are checked as the CUDA backend's are (csrc/cuda/cuda_options.c):
each refused value names its option, counts are ints (numpy's too, never a bool), floats
finite and bounded, a device 0..63, and None means the default. Checks that fail before any
library is opened run here; the rest on the CPU stand-ins in a fresh interpreter.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbench import _core

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hip_forward"))
from run_fake import fake_dir, run_fake  # noqa: E402,F401 (fake_dir: a fixture)

pytestmark = pytest.mark.skipif(not getattr(_core, "HAVE_HIP", 0),
                                reason="kbench._core built with KBENCH_NO_CUDA=1: no HIP")


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), 1e20, 2e6, 0.0,
                                 -1.0])
def test_gate_timeout_must_be_finite_and_bounded(bad):
    """inf / 1e20 were accepted and stalled the gate's watchdog: refused, naming the option,
    before any library is opened."""
    with pytest.raises(ValueError, match="measure_hip: gate_timeout_s must be > 0 and finite, "
                                         "at most 1e"):
        _core.measure_hip((object(),), stream=1, gate_timeout_s=bad)


def test_gate_timeout_inf_does_not_hang(fake_dir):
    """On the whole path, behind a blocked launch queue that only the watchdog can free:
    refused at once (inf stalled the watchdog, and the bench hung)."""
    res = run_fake(fake_dir, """
        out["e"] = err(lambda: kbench.bench(lambda x: x * 2, np.ones(8, np.float32),
                                            cold_cache=None, gate_timeout_s=float("inf"), **B))
    """, timeout=60, KB_FAKE_FULL_QUEUE="1")
    assert res["e"]["type"] == "ValueError" and "gate_timeout_s" in res["e"]["msg"]


@pytest.mark.parametrize("kw,exc,match", [
    ({"gate_batch": True}, TypeError, "measure_hip: gate_batch must be an int, got bool"),
    ({"gate_batch": 2.5}, TypeError, "measure_hip: gate_batch must be an int, got float"),
    ({"gate_batch": 0}, ValueError, "measure_hip: gate_batch must be 1..4096"),
    ({"gate_batch": 5000}, ValueError, "measure_hip: gate_batch must be 1..4096"),
    ({"flush_bytes": -1}, ValueError, "measure_hip: flush_bytes must be >= 0"),
    ({"gate_timeout_s": "1"}, TypeError, "measure_hip: gate_timeout_s must be a number"),
    ({"unroll": 0.5}, ValueError, "measure_hip: unroll must be >= 1"),
    ({"unroll": float("inf")}, ValueError, "measure_hip: unroll must be >= 1 and finite"),
    ({"pre_sample": 3}, TypeError, "measure_hip: pre_sample must be a callable or None"),
])
def test_measure_hip_options_checked_as_cuda_checks_them(kw, exc, match):
    with pytest.raises(exc, match=match):
        _core.measure_hip((object(),), stream=1, **kw)


@pytest.mark.parametrize("dev,exc", [(2 ** 32, ValueError), (2 ** 70, ValueError),
                                     (64, ValueError), (-1, ValueError), (True, TypeError),
                                     (1.0, TypeError)])
def test_device_out_of_range_is_refused_not_truncated(dev, exc):
    """device=2**32 was cast to int and became device 0."""
    with pytest.raises(exc, match="device must be"):
        _core.measure_hip((object(),), stream=1, device=dev)
    with pytest.raises(exc, match="hip_device_info: device must be"):
        _core.hip_device_info(dev)
    with pytest.raises(exc, match="hip_graph_capture: device must be"):
        _core.hip_graph_capture(lambda: None, ((),), None, stream=1, device=dev)
    if exc is ValueError:
        with pytest.raises(ValueError, match="a HIP ordinal 0..63"):
            _core.hip_device_info(dev)


def test_capture_mode_none_is_the_default_and_a_bad_type_is_named():
    with pytest.raises(TypeError, match="hip_graph_capture: capture_mode must be"):
        _core.hip_graph_capture(lambda: None, ((),), None, stream=1, capture_mode=3)


def test_bench_options_as_on_cuda(fake_dir):
    """None is "not given" (the default applies), counts take numpy ints and refuse bools, and
    a bad unroll is named; each case on the whole path."""
    res = run_fake(fake_dir, """
        a = np.arange(4096, dtype=np.float32)
        add = lambda x, y: x + y
        def gate(**kw):
            return kbench.bench(add, a, a, cold_cache=None, **B, **kw).extra["hip"]["gate"]
        out["gate_none"] = gate(gate=None)["gated"]
        out["timeout_none"] = gate(gate_timeout_s=None)["timeout_s"]
        out["batch_np"] = gate(gate_batch=np.int64(8))["batch"]
        out["batch_none"] = gate(gate_batch=None)["batch"]
        out["capture_none"] = kbench.bench(add, a, a, cold_cache=None, capture_mode=None,
                                           **B).backend
        out["margin_none"] = kbench.bench(add, a, a, cold_cache="rotate", rotate_margin=None,
                                          **B).cold_cache["evicts"]
        out["batch_bool"] = err(lambda: gate(gate_batch=True))
        out["timeout_inf"] = err(lambda: gate(gate_timeout_s=float("inf")))
        out["unroll_float"] = err(lambda: kbench.bench(add, a, a, cold_cache=None, unroll=2.5,
                                                       **B))
        out["unroll_zero"] = err(lambda: kbench.bench(add, a, a, cold_cache=None, unroll=0, **B))
        out["unroll_np"] = kbench.bench(add, a, a, cold_cache=None, unroll=np.int64(2),
                                        **B).extra["unroll"]
        out["regime"] = err(lambda: kbench.bench(add, a, a, cold_cache=None, regime="fast", **B))
        out["keep_busy"] = kbench.bench(add, a, a, cold_cache=None, keep_busy=True, **B).warnings
    """)
    assert res["gate_none"] is True, "gate=None turned the gate off"
    assert res["timeout_none"] == 1.0 and res["batch_none"] == 32
    assert res["batch_np"] == 8
    assert res["capture_none"] == "hip" and res["margin_none"] is True
    assert res["batch_bool"]["type"] == "TypeError" and "gate_batch" in res["batch_bool"]["msg"]
    assert res["timeout_inf"]["type"] == "ValueError"
    assert "gate_timeout_s" in res["timeout_inf"]["msg"]
    assert res["unroll_float"]["type"] == "TypeError"
    assert "unroll must be an int" in res["unroll_float"]["msg"]
    assert res["unroll_zero"]["type"] == "ValueError" and "unroll" in res["unroll_zero"]["msg"]
    assert res["unroll_np"] == 2
    assert res["regime"]["type"] == "ValueError" and "regime" in res["regime"]["msg"]
    assert any("keep_busy=True is not applied" in w for w in res["keep_busy"])
