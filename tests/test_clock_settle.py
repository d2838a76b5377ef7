"""The CUDA warm-up's stopping rule (csrc/steady.c), over synthetic NVML clock traces.

The GPU backend asks this rule, over its live NVML samples, whether the SM clock has settled
under the callable's own load; here the same C function is fed traces whose answer is known."""
import numpy as np
import pytest

from kbench import _core

POWER_CAP = 0x4          # NVML clock event reason: sw_power_cap
PERIOD = 0.005           # the sampler's default period


def trace(seconds, mhz_of_t, reasons=0):
    t = np.arange(0.0, seconds, PERIOD)
    return t, np.asarray(mhz_of_t(t), dtype=float), np.full(t.size, reasons, dtype=np.uint64)


def test_an_unlimited_clock_settles_at_the_minimum_time():
    t, mhz, r = trace(1.0, lambda t: np.full_like(t, 1980.0))
    i, med, limited = _core.clock_settled_at(t, mhz, r, min_s=0.1)
    assert t[i] == pytest.approx(0.1, abs=PERIOD)
    assert med == 1980.0 and not limited
    # with a flat or falling power (a light kernel after the ramp kernel) just the same
    for power in (np.full_like(t, 330.0), 400.0 - 150.0 * t):
        i, _, _ = _core.clock_settled_at(t, mhz, r, power)
        assert t[i] == pytest.approx(0.2, abs=PERIOD)


def test_a_rising_power_without_a_limit_yet_is_not_settled():
    # a heavy kernel: full clock, NVML's averaged power climbing towards the 700 W cap; the cap
    # engages at 0.45 s and trims the clock to a steady 1560 MHz by ~0.6 s
    def clock(t):
        return np.where(t < 0.45, 1980.0, np.maximum(1560.0, 1980.0 - 3000.0 * (t - 0.45)))
    t, mhz, _ = trace(3.0, clock)
    power = np.minimum(300.0 + 900.0 * t, 700.0)
    reasons = np.where(t >= 0.45, POWER_CAP, 0).astype(np.uint64)
    i, med, limited = _core.clock_settled_at(t, mhz, reasons, power)
    assert t[i] > 0.6 and med == 1560.0 and limited
    # the clock alone would have called it at the minimum time, mid-ramp, 27% fast
    i_clock, med_clock, _ = _core.clock_settled_at(t, mhz, reasons)
    assert t[i_clock] == pytest.approx(0.2, abs=PERIOD) and med_clock == 1980.0


def test_a_power_capped_clock_settles_only_once_its_decay_flattens():
    # the controller pulls the clock from 1980 towards 1500 MHz with a 0.3 s time constant
    t, mhz, r = trace(3.0, lambda t: 1500 + 480 * np.exp(-t / 0.3), POWER_CAP)
    mhz = np.round(mhz / 15) * 15                      # clocks move in 15 MHz steps
    i, med, limited = _core.clock_settled_at(t, mhz, r, window_s=0.2, rel_tol=0.015)
    assert i >= 0 and limited
    # two 0.2 s windows differ by under 1.5% only once exp(-t/0.3) * 480 * (1 - e^-0.67) < ~23
    assert t[i] > 0.6
    assert abs(med - 1500) < 0.03 * 1500
    # the same trace judged without the cap reason settles at once: nothing limits the clock
    i_free, _, _ = _core.clock_settled_at(t, mhz, np.zeros_like(r))
    assert t[i_free] == pytest.approx(0.2, abs=PERIOD)


def test_a_clock_still_drifting_under_a_limit_never_settles():
    t, mhz, r = trace(3.0, lambda t: 1800 - 150 * t, POWER_CAP)   # 150 MHz/s thermal drift
    i, med, _ = _core.clock_settled_at(t, mhz, r)
    assert i == -1
    assert med == pytest.approx(1800 - 150 * 2.9, abs=20)


def test_an_oscillating_capped_clock_settles_on_its_medians():
    # a capped GEMM's clock swings +-120 MHz at 20 Hz around a steady 1560 MHz
    t, mhz, r = trace(2.0, lambda t: 1560 + 120 * np.sign(np.sin(2 * np.pi * 20 * t + 0.1)),
                      POWER_CAP)
    i, _, _ = _core.clock_settled_at(t, mhz, r, window_s=0.2)
    assert 0.4 - PERIOD <= t[i] <= 0.5


def test_failed_reads_are_ignored_not_counted_as_a_clock():
    t, mhz, r = trace(1.0, lambda t: np.full_like(t, 1600.0), POWER_CAP)
    mhz[::3] = np.nan
    i, med, _ = _core.clock_settled_at(t, mhz, r)
    assert i >= 0 and med == 1600.0
    i_none, med_none, _ = _core.clock_settled_at(t, np.full_like(mhz, np.nan), r)
    assert i_none == -1 and np.isnan(med_none)


@pytest.mark.parametrize("bad, match", [
    (dict(t_s=[0.0, 0.1], sm_mhz=[1.0], reasons=[0, 0]), "one length"),
    (dict(t_s=[0.0, 0.1], sm_mhz=[1.0, 1.0], reasons=[0, 0], power_w=[1.0]), "one length"),
    (dict(t_s=[0.0, 0.2, 0.1], sm_mhz=[1.0] * 3, reasons=[0] * 3), "non-decreasing"),
    (dict(t_s=[0.0], sm_mhz=[1.0], reasons=[0], window_s=0.0), "window_s > 0"),
])
def test_bad_traces_are_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        _core.clock_settled_at(bad.pop("t_s"), bad.pop("sm_mhz"), bad.pop("reasons"), **bad)
