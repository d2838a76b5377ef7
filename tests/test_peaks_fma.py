"""The CPU FMA ceiling's calibration (kbench.roofline.peaks._fma) on a fake clock: a call of n
iterations costs n x 10 ns, and the machine can pre-empt any call. The calibration must size
the timed calls to their share of the budget whatever one pre-empted call read."""
import types

import pytest

from kbench.roofline import peaks

NS_PER_ITER = 10


def fake_machine(monkeypatch, delays_s):
    """fma_loop on a fake clock; delays_s[i] is added to the i-th call (pre-emption)."""
    clock = {"ns": 0, "calls": 0, "sizes": []}

    def fma_loop(n_iter, threads=None, dtype="float64"):
        i = clock["calls"]
        clock["calls"] += 1
        clock["sizes"].append(n_iter)
        clock["ns"] += n_iter * NS_PER_ITER + int(1e9 * (delays_s[i] if i < len(delays_s)
                                                          else 0.0))
        return 2 * n_iter

    fake_core = types.SimpleNamespace(fma_loop=fma_loop, fma_loop_isa=lambda: "fake")
    monkeypatch.setattr(peaks, "_core", fake_core)
    monkeypatch.setattr(peaks.time, "perf_counter_ns", lambda: clock["ns"])
    return clock


@pytest.mark.parametrize("preempted", [[], [0.012], [0.0, 0.0, 0.012], [0.012, 0.012]])
def test_one_preempted_calibration_call_does_not_shrink_the_timed_calls(monkeypatch, preempted):
    # budget 1 s: a tenth (0.1 s) a timed call, 1e7 iterations at 10 ns
    clock = fake_machine(monkeypatch, preempted)
    d = peaks._fma(threads=2, budget_s=1.0, min_repeats=3, max_repeats=50)
    assert d["n_iter"] * NS_PER_ITER * 1e-9 >= 0.1 / 4, (preempted, clock["sizes"])
    assert d["n_iter"] * NS_PER_ITER * 1e-9 <= 0.1 * 4
    assert d["best_GFLOPs"] == pytest.approx(2 / NS_PER_ITER, rel=1e-6)   # 0.2 GFLOP/s
