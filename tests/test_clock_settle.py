"""The clock regimes' rules (csrc/clocks/steady.c) over canned NVML traces.

The GPU backend asks these rules, over its live NVML samples, whether the load has reached its
sustained state (warm-up) or whether the GPU has recovered (burst, before each batch); here the
same C functions are fed traces whose answer is known. tests/data/h200_gemm_power_ramp.json is
a recorded H200 trace (1 s idle, 4 s of bf16 GEMMs, 3 s idle; shared/data's README)."""
import json
from pathlib import Path

import numpy as np
import pytest

from kbench import _core

POWER_CAP = 0x4          # NVML clock event reason: sw_power_cap
PERIOD = 0.005           # the sampler's default period
LIMIT_W = 700.0


def trace(seconds, mhz_of_t, reasons=0):
    t = np.arange(0.0, seconds, PERIOD)
    return t, np.asarray(mhz_of_t(t), dtype=float), np.full(t.size, reasons, dtype=np.uint64)


@pytest.fixture(scope="module")
def h200_ramp():
    d = json.loads((Path(__file__).parent / "data" / "h200_gemm_power_ramp.json").read_text())
    s = d["samples"]
    col = {k: np.array([x[k] for x in s], dtype=float) for k in ("t", "sm", "p_avg", "p_inst")}
    col["reasons"] = np.array([x["reasons"] for x in s], dtype=np.uint64)
    phase = [x["phase"] for x in s]
    col["load_start"] = col["t"][phase.index("gemm")]
    col["load_end_i"] = phase.index("idle_after")
    col["gemm_us"] = np.array(d["gemm_us_by_time"])
    return col


def test_the_recorded_h200_gemm_settles_at_its_capped_clock_after_the_average_catches_up(
        h200_ramp):
    d, end = h200_ramp, h200_ramp["load_end_i"]
    i, med, limited = _core.clock_settled_at(d["t"][:end], d["sm"][:end], d["reasons"][:end],
                                             d["p_avg"][:end], d["p_inst"][:end],
                                             load_start_s=d["load_start"], power_limit_w=LIMIT_W)
    assert i >= 0 and limited
    loaded = d["t"][i] - d["load_start"]
    # the one-second average must have caught up with the instantaneous power (its mean over
    # the same second: what an average converges to) first, and under the limit the load must
    # have run two averaging windows
    assert loaded >= 2.0
    window = (d["t"] > d["t"][i] - 1) & (d["t"] <= d["t"][i])
    assert d["p_avg"][i] >= 0.95 * np.mean(d["p_inst"][window]) - 15
    # at the capped clock, not the burst clock: the GEMM ran ~540 us there, 470 us at 1980 MHz
    assert 1350 <= med <= 1500
    g = d["gemm_us"]
    after = g[g[:, 0] >= loaded, 1]
    assert np.median(after) > 530


def test_the_recorded_capped_gemm_is_sampled_where_its_controller_holds_it(h200_ramp):
    """The clock windows agreed and the average had caught up at 1.05 s of load, but the
    controller had not yet pulled the clock to where it holds it: the GEMMs of the second after
    that ran 1.2% faster than the last second of the load. From two averaging windows on, the
    second after the settle is the load's last second within 0.75%."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    g = d["gemm_us"]
    late = np.median(g[g[:, 0] >= g[-1, 0] - 1.0, 1])
    gap = {}
    for floor in (0.0, 2.0):
        i, _, limited = _core.clock_settled_at(
            d["t"][:end], d["sm"][:end], d["reasons"][:end], d["p_avg"][:end],
            d["p_inst"][:end], load_start_s=d["load_start"], power_limit_w=LIMIT_W,
            capped_min_load_s=floor)
        assert limited
        loaded = d["t"][i] - d["load_start"]
        gap[floor] = abs(np.median(g[(g[:, 0] >= loaded) & (g[:, 0] < loaded + 1.0), 1]) / late - 1)
    assert gap[2.0] < 0.0075 < gap[0.0]


def test_a_capped_load_waits_two_averaging_windows_unless_it_continues_a_capped_one():
    t, sm, r, pa, pi = steady(3.0, mhz=1470.0, inst=690.0, avg=690.0, reasons=POWER_CAP)
    i, _, limited = _core.clock_settled_at(t, sm, r, pa, pi, power_limit_w=LIMIT_W)
    assert limited and t[i] == pytest.approx(2.0, abs=PERIOD)
    # the previous measurement's capped load ran 3 s: this one continues it
    j, _, limited, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1470.0,
                                         carried_under_limit=True, carried_ago_s=0.05,
                                         carried_loaded_s=3.0)
    assert limited and by_carry and t[j] < 0.2
    # one that ran 0.5 s: together they need two windows, by either rule
    k, _, limited, _ = carried_at(t, sm, r, pa, pi, carried_mhz=1470.0,
                                  carried_under_limit=True, carried_ago_s=0.05,
                                  carried_loaded_s=0.5)
    assert limited and t[k] == pytest.approx(1.5, abs=PERIOD)
    # a carried unlimited state continues nothing capped
    m, _, _, _ = carried_at(t, sm, r, pa, pi, carried_mhz=1470.0, carried_ago_s=0.05,
                            carried_loaded_s=3.0)
    assert t[m] == pytest.approx(2.0, abs=PERIOD)
    with pytest.raises(ValueError, match="carried_loaded_s must be >= 0"):
        carried_at(t, sm, r, pa, pi, carried_mhz=1470.0, carried_loaded_s=-1.0)


def test_a_capped_load_continues_only_one_that_ended_just_before_it():
    """An idle gap drains the averaged power and lets the controller raise the clock, and by the
    time the rule judges, the average has filled again: a load that began 0.5 s after a capped
    one waits its own two averaging windows, by either rule; one 0.2 s after continues it."""
    t, sm, r, pa, pi = steady(3.0, mhz=1470.0, inst=690.0, avg=690.0, reasons=POWER_CAP)
    capped = dict(carried_mhz=1470.0, carried_under_limit=True, carried_loaded_s=3.0)
    i, _, limited, by = carried_at(t, sm, r, pa, pi, carried_ago_s=0.2, **capped)
    assert limited and by == 1 and t[i] < 0.2
    j, _, limited, by = carried_at(t, sm, r, pa, pi, carried_ago_s=0.5, **capped)
    assert limited and t[j] == pytest.approx(2.0, abs=PERIOD)
    # the gap is the rule's: at 0.6 s the same 0.5 s gap continues the load
    k, _, _, by = carried_at(t, sm, r, pa, pi, carried_ago_s=0.5, capped_continue_gap_s=0.6,
                             **capped)
    assert by == 1 and t[k] < 0.2
    with pytest.raises(ValueError, match="capped_continue_gap_s >= 0"):
        carried_at(t, sm, r, pa, pi, carried_ago_s=0.5, capped_continue_gap_s=-1.0, **capped)


def test_a_load_with_gaps_settles_when_its_average_meets_its_mean():
    """A memory-bound load with host gaps reads bimodal instantaneous power (580 W busy, 300 W
    between batches): the one-second average converges to the mean, not the median, so a rule
    against the median never settled (a 576 W add in events mode on the H200)."""
    t = np.arange(0.0, 3.0, PERIOD)
    mhz, r = np.full(t.size, 1980.0), np.zeros(t.size, dtype=np.uint64)
    inst = np.where((t * 10).astype(int) % 10 < 7, 640.0, 380.0)   # 70% busy, 100 ms phases
    avg = np.minimum(120.0 + 560.0 * t, 562.0)                      # towards the mean, 562 W
    i, _, _ = _core.clock_settled_at(t, mhz, r, avg, inst, power_limit_w=LIMIT_W)
    assert i >= 0 and t[i] >= (562 - 0.05 * 562 - 120) / 560.0 - PERIOD


def test_a_lagging_power_average_does_not_read_as_settled(h200_ramp):
    """The averaged power climbs for a second while the clock has already dropped: a rule that
    only asked 'is the average still low and the clock high' settled mid-transient."""
    d = h200_ramp
    t, sm, r, pa, pi = d["t"], d["sm"], d["reasons"], d["p_avg"], d["p_inst"]
    for k in np.nonzero((t > d["load_start"] + 0.3) & (t < d["load_start"] + 0.95))[0]:
        # at every reading of the first second, the average is far below the instantaneous
        i, _, _ = _core.clock_settled_at(t[:k + 1], sm[:k + 1], r[:k + 1], pa[:k + 1],
                                         pi[:k + 1], load_start_s=d["load_start"],
                                         power_limit_w=LIMIT_W)
        assert i == -1, f"settled at {t[i]:.3f} s with p_avg {pa[i]:.0f} W"


def test_readings_from_before_the_load_cannot_settle_it(h200_ramp):
    """The H200's first bench read 452 us 'steady at 125 W': the warm-up judged an idle GPU (a
    first call had blocked the host). Readings before load_start_s never count."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    idle_end = np.searchsorted(d["t"], d["load_start"])
    t, sm, r, pa, pi = (d[k][:idle_end] for k in ("t", "sm", "reasons", "p_avg", "p_inst"))
    # the load begins at the last idle reading: nothing loaded yet
    i, _, _ = _core.clock_settled_at(t, sm, r, pa, pi, load_start_s=t[-1],
                                     power_limit_w=LIMIT_W)
    assert i == -1
    # the same idle readings, wrongly taken as load, would settle at the burst clock
    i_wrong, med_wrong, _ = _core.clock_settled_at(t, sm, r, pa, pi, load_start_s=t[0],
                                                   power_limit_w=LIMIT_W)
    assert i_wrong >= 0 and med_wrong == 1980.0
    assert end > idle_end


def test_a_light_load_under_the_headroom_settles_without_waiting_for_the_average():
    # a memory-bound kernel: 420 W instantaneous against a 700 W limit, average lagging
    t, mhz, r = trace(2.0, lambda t: np.full_like(t, 1980.0))
    inst = np.full_like(t, 420.0)
    avg = np.minimum(120.0 + 300.0 * t, 420.0)
    i, med, limited = _core.clock_settled_at(t, mhz, r, avg, inst, power_limit_w=LIMIT_W)
    assert t[i] == pytest.approx(0.5, abs=2 * PERIOD)     # two 0.25 s clock windows
    assert med == 1980.0 and not limited
    # the same load against an unknown limit waits for the average to catch up
    i2, _, _ = _core.clock_settled_at(t, mhz, r, avg, inst)
    assert t[i2] >= (420 - 120 - 21) / 300.0


def test_without_instantaneous_power_a_whole_averaging_window_of_load_is_required():
    t, mhz, r = trace(3.0, lambda t: np.full_like(t, 1980.0))
    avg = np.minimum(120.0 + 600.0 * t, 600.0)
    i, _, _ = _core.clock_settled_at(t, mhz, r, avg)
    # not before one second, and not while the average still rises
    assert t[i] >= 0.8 + 0.25
    i_flat, _, _ = _core.clock_settled_at(t, mhz, r, np.full_like(t, 300.0))
    assert t[i_flat] == pytest.approx(1.0, abs=PERIOD)


def test_a_power_capped_clock_settles_only_once_its_decay_flattens():
    # the controller pulls the clock from 1980 towards 1500 MHz with a 0.3 s time constant
    t, mhz, r = trace(3.0, lambda t: 1500 + 480 * np.exp(-t / 0.3), POWER_CAP)
    mhz = np.round(mhz / 15) * 15                      # clocks move in 15 MHz steps
    p = np.full_like(t, 700.0)
    # the window rule alone (not the two averaging windows a capped load waits)
    i, med, limited = _core.clock_settled_at(t, mhz, r, p, p, power_limit_w=LIMIT_W,
                                             capped_min_load_s=0.0)
    assert i >= 0 and limited
    # two 0.25 s windows differ by under 2% only once the decay has mostly run out
    assert t[i] > 0.7
    assert abs(med - 1500) < 0.03 * 1500


def test_a_clock_still_drifting_under_a_limit_never_settles():
    t, mhz, r = trace(3.0, lambda t: 1800 - 150 * t, POWER_CAP)   # 150 MHz/s thermal drift
    p = np.full_like(t, 700.0)
    i, med, _ = _core.clock_settled_at(t, mhz, r, p, p, power_limit_w=LIMIT_W)
    assert i == -1
    assert med == pytest.approx(1800 - 150 * 2.87, abs=20)


def test_an_oscillating_capped_clock_settles_on_its_medians():
    # a capped GEMM's clock swings +-120 MHz at 20 Hz around a steady 1560 MHz
    t, mhz, r = trace(2.0, lambda t: 1560 + 120 * np.sign(np.sin(2 * np.pi * 20 * t + 0.1)),
                      POWER_CAP)
    p = np.full_like(t, 700.0)
    i, _, limited = _core.clock_settled_at(t, mhz, r, p, p, power_limit_w=LIMIT_W,
                                           capped_min_load_s=0.0)
    assert 0.5 - PERIOD <= t[i] <= 0.6 and limited


def test_failed_reads_are_ignored_not_counted_as_a_clock():
    t, mhz, r = trace(2.5, lambda t: np.full_like(t, 1600.0), POWER_CAP)
    p = np.full_like(t, 690.0)
    mhz[::3] = np.nan
    p[::4] = np.nan
    i, med, _ = _core.clock_settled_at(t, mhz, r, p, p, power_limit_w=LIMIT_W)
    assert i >= 0 and med == 1600.0
    i_none, med_none, _ = _core.clock_settled_at(t, np.full_like(mhz, np.nan), r, p, p)
    assert i_none == -1 and np.isnan(med_none)


def test_burst_waits_for_the_recorded_h200_to_recover(h200_ramp):
    d = h200_ramp
    t, r, pa, pi = d["t"], d["reasons"], d["p_avg"], d["p_inst"]
    ok = np.array([_core.power_recovered(t[:k + 1], r[:k + 1], pa[:k + 1], pi[:k + 1],
                                         power_limit_w=LIMIT_W) for k in range(t.size)])
    end = d["load_end_i"]
    idle = t < d["load_start"]
    assert ok[idle].all()                       # an idle GPU is recovered
    loaded = (t > d["load_start"] + 0.3) & (np.arange(t.size) < end)
    assert not ok[loaded].any()                 # under the GEMM's load, never
    # after it, not while sw_power_cap is still raised and the average still high
    first = end + int(np.argmax(ok[end:]))
    assert t[first] - t[end] > 0.3
    assert not (r[(t > t[first] - 0.03) & (t <= t[first])] & POWER_CAP).any()
    assert pa[first] <= 0.6 * LIMIT_W


def test_burst_recovery_without_a_known_limit_reads_the_reasons_only():
    t = np.arange(0, 0.1, PERIOD)
    r = np.zeros(t.size, dtype=np.uint64)
    assert _core.power_recovered(t, r, np.full_like(t, 650.0))
    r[-2] = POWER_CAP
    assert not _core.power_recovered(t, r)


@pytest.mark.parametrize("bad, match", [
    (dict(t_s=[0.0, 0.1], sm_mhz=[1.0], reasons=[0, 0]), "one length"),
    (dict(t_s=[0.0, 0.1], sm_mhz=[1.0, 1.0], reasons=[0, 0], power_w=[1.0]), "one length"),
    (dict(t_s=[0.0, 0.1], sm_mhz=[1.0, 1.0], reasons=[0, 0], power_inst_w=[1.0]), "one length"),
    (dict(t_s=[0.0, 0.2, 0.1], sm_mhz=[1.0] * 3, reasons=[0] * 3), "non-decreasing"),
    (dict(t_s=[0.0], sm_mhz=[1.0], reasons=[0], window_s=0.0), "window_s > 0"),
    (dict(t_s=[0.0], sm_mhz=[1.0], reasons=[0], power_limit_w="x"), "must be real number"),
])
def test_bad_traces_are_refused_by_name(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _core.clock_settled_at(bad.pop("t_s"), bad.pop("sm_mhz"), bad.pop("reasons"), **bad)


# ---- the state carried from the previous measurement (kb_clock_settled_carried)

def steady(seconds, mhz=1980.0, inst=300.0, avg=300.0, reasons=0):
    t = np.arange(0.0, seconds, PERIOD)
    return (t, np.full(t.size, mhz), np.full(t.size, reasons, dtype=np.uint64),
            np.full(t.size, avg), np.full(t.size, inst))


def carried_at(t, sm, r, pa, pi, **kw):
    kw.setdefault("power_limit_w", LIMIT_W)
    return _core.clock_settled_carried_at(t, sm, r, pa, pi, **kw)


def test_an_unlimited_load_right_after_a_settled_one_settles_on_one_short_window():
    t, sm, r, pa, pi = steady(1.0)
    i, med, limited, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0,
                                           carried_ago_s=0.05)
    assert by_carry and not limited and med == 1980
    # the response time and one window of this load's own readings, not before
    assert 0.15 - PERIOD <= t[i] < 0.2
    # the same load with nothing carried waits for the two-window rule
    j, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=None)
    assert not by and t[j] >= 0.5 and j == _core.clock_settled_at(
        t, sm, r, pa, pi, power_limit_w=LIMIT_W)[0]


def test_a_carried_state_older_than_the_averaging_window_is_not_used():
    t, sm, r, pa, pi = steady(1.0)
    i, _, _, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=1.5)
    assert not by_carry and t[i] >= 0.5


def test_a_load_whose_clock_differs_from_the_carried_one_is_not_settled_by_it():
    t, sm, r, pa, pi = steady(1.0, mhz=1755.0)
    i, _, _, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0)
    assert not by_carry and t[i] >= 0.5


def test_stale_readings_from_before_the_response_cannot_settle_a_capped_load():
    """The first ~0.1 s of readings still show the previous (unlimited) state; the new kernel is
    capped. The carried window lies after the response time, so it sees the cap."""
    t, sm, r, pa, pi = steady(1.0)
    new = t >= 0.09
    sm[new], pi[new], r[new] = 1470.0, 720.0, POWER_CAP
    i, _, _, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0)
    assert not by_carry


def test_a_heavier_load_at_the_carried_clock_is_not_settled_before_its_limit_shows():
    """Same clock as carried, but instantaneous power over the headroom: it may be capped soon."""
    t, sm, r, pa, pi = steady(1.0, inst=650.0)
    assert not carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0)[3]


def test_readings_a_response_time_into_the_load_are_judged_against_the_late_headroom():
    """620 W of 700 (89%): over the 80% headroom, under the 90% one that readings taken 0.1 s
    or more into the load are held to (they read >= 96% of its power). The H200's 256 MB add
    read 566-574 W on two GPUs, never capped."""
    t, sm, r, pa, pi = steady(1.0, inst=620.0)
    i, med, limited, by = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0)
    assert by == 1 and not limited and 0.15 - PERIOD <= t[i] < 0.2
    assert carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0,
                      late_headroom=0.8)[3] != 1
    # the board's maximum clock, nothing carried: the same
    assert carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0)[3] == 2
    with pytest.raises(ValueError, match="late_headroom > 0"):
        carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, late_headroom=0.0)


def test_a_limit_reason_lingering_from_the_previous_load_blocks_an_unlimited_carry():
    t, sm, r, pa, pi = steady(1.0)
    r[t < 0.4] = POWER_CAP          # sw_power_cap outlasts a capped load by ~0.5 s on the H200
    i, _, _, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0)
    assert not by_carry


def test_a_capped_state_is_carried_only_when_the_averaged_power_is_this_loads_power():
    t, sm, r, pa, pi = steady(1.0, mhz=1470.0, inst=700.0, avg=690.0, reasons=POWER_CAP)
    i, med, limited, by_carry = carried_at(t, sm, r, pa, pi, carried_mhz=1470.0,
                                           carried_under_limit=True, carried_ago_s=0.1,
                                           carried_loaded_s=2.0)
    assert by_carry and limited and med == 1470 and t[i] < 0.2
    # the previous load drew less power: the average has not caught up with this one
    pa[:] = 450.0
    assert not carried_at(t, sm, r, pa, pi, carried_mhz=1470.0, carried_under_limit=True,
                          carried_ago_s=0.1, carried_loaded_s=2.0)[3]
    # an unlimited carried state says nothing about a capped load
    pa[:] = 690.0
    assert not carried_at(t, sm, r, pa, pi, carried_mhz=1470.0, carried_ago_s=0.1)[3]


def test_without_instantaneous_power_nothing_is_carried():
    t, sm, r, pa, _ = steady(1.0)
    i, _, _, by_carry = carried_at(t, sm, r, pa, None, carried_mhz=1980.0, carried_ago_s=0.0)
    assert not by_carry


def test_the_recorded_h200_gemm_carried_into_a_second_bench_of_itself(h200_ramp):
    """Second benches of the recorded GEMM, started at every reading after the first one
    settled: where their own readings after the response time agree with the carried capped
    clock and power they settle at once; where the controller has wandered off it (the capped
    clock moves 1395-1500 MHz, more than the 2% tolerance) they wait for the two-window rule,
    which no longer waits for the average (it has caught up already) nor for two averaging
    windows of load (they continue the first bench's)."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    t, sm, r, pa, pi = (d[k][:end] for k in ("t", "sm", "reasons", "p_avg", "p_inst"))
    i, med, limited = _core.clock_settled_at(t, sm, r, pa, pi, load_start_s=d["load_start"],
                                             power_limit_w=LIMIT_W)
    assert i >= 0 and limited
    carried, full = [], []
    for start in t[(t > t[i] + 0.2) & (t < t[end - 1] - 0.8)][::10]:   # later benches
        # the first bench's load ran from load_start to this one's start: this one continues it
        k, med2, lim2, by = carried_at(t, sm, r, pa, pi, carried_mhz=med,
                                       carried_under_limit=True, carried_ago_s=0.02,
                                       carried_loaded_s=start - d["load_start"],
                                       load_start_s=start)
        assert k >= 0 and lim2
        # a bench that carried nothing starts the two averaging windows again
        assert _core.clock_settled_at(t, sm, r, pa, pi, load_start_s=start,
                                      power_limit_w=LIMIT_W)[0] == -1
        if by:
            carried.append(t[k] - start)
            assert abs(med2 - med) <= max(0.02 * med, 15)
        else:
            full.append(t[k] - start)
    # continuing the first bench's load, none waits the two averaging windows again
    assert carried and min(carried) < 0.25 and max(carried + full) < 0.8
    assert full and min(full) >= 0.5


def snapshots(seconds, phase, mhz=1980.0, inst=300.0, avg=300.0, reasons=0):
    """Readings every 5 ms of NVML values refreshed together every 0.1 s from `phase` on (the
    averaged power moving a little at each refresh, as on the recorded H200)."""
    t = np.arange(0.0, seconds, PERIOD)
    k = np.floor((t - phase) / 0.1 + 1e-9)         # the refresh each reading shows
    return (t, np.full(t.size, mhz), np.full(t.size, reasons, dtype=np.uint64),
            avg + 0.01 * k, np.full(t.size, inst))


def test_a_fresh_snapshot_after_the_margin_settles_a_carried_load_without_the_response_wait():
    t, sm, r, pa, pi = snapshots(1.0, phase=0.03)
    kw = dict(carried_mhz=1980.0, carried_ago_s=0.02)
    i_old, _, _, by_old = carried_at(t, sm, r, pa, pi, carry_update_margin_s=None, **kw)
    i, med, limited, by = carried_at(t, sm, r, pa, pi, carry_update_margin_s=0.02, **kw)
    assert by == by_old == 1 and not limited and med == 1980
    assert 0.15 - PERIOD <= t[i_old] < 0.2          # the fixed response time and one window
    # the refresh at 0.03 s shows between the readings at 0.025 and 0.03; the reading after
    # has all of it
    assert t[i] == pytest.approx(0.035)
    # a refresh before the margin (0.01 s) is not this load's: the next one (0.11 s) is
    t, sm, r, pa, pi = snapshots(1.0, phase=0.01)
    i, _, _, by = carried_at(t, sm, r, pa, pi, carry_update_margin_s=0.02, **kw)
    assert by == 1 and t[i] == pytest.approx(0.115)
    # the default margin, 0.05 s (the H200's snapshots read 91-97% of a load's power from
    # 0.055 s on): the refresh at 0.03 s is too early, the one at 0.13 s is taken
    t, sm, r, pa, pi = snapshots(1.0, phase=0.03)
    i, _, _, by = carried_at(t, sm, r, pa, pi, **kw)
    assert by == 1 and t[i] == pytest.approx(0.135)


def test_a_fresh_snapshot_of_a_heavier_or_capped_load_settles_nothing_by_the_carry():
    """The readings before the first refresh still show the previous (unlimited) state; the
    refresh shows the new load: capped (clock down, sw_power_cap) or over the headroom."""
    for change in ({"sm": 1470.0, "pi": 720.0, "r": POWER_CAP}, {"pi": 650.0}):
        t, sm, r, pa, pi = snapshots(1.0, phase=0.03)
        new = t >= 0.03
        sm[new] = change.get("sm", 1980.0)
        pi[new], r[new] = change["pi"], change.get("r", 0)
        assert not carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0,
                              carry_update_margin_s=0.02)[3], change
    # between the headrooms: a snapshot 0.03 s in (it may read 9% low) is held to 80%, so the
    # carry waits for the window after the response time
    t, sm, r, pa, pi = snapshots(1.0, phase=0.03)
    pi[t >= 0.03] = 620.0
    i, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.0,
                             carry_update_margin_s=0.02)
    assert by == 1 and t[i] >= 0.15 - PERIOD


def test_nvml_refreshes_are_the_readings_where_either_power_changed():
    """The rule the carried settle starts from, as recorded traces are read with it: a refresh
    every 0.1 s from 0.03 s shows at the reading at 0.03, 0.13, ...; the reading after it is
    the first wholly of the new snapshot (the carried rule's 0.035 s above)."""
    t, _, _, pa, pi = snapshots(1.0, phase=0.03)
    at = _core.nvml_refreshes(t, pa, pi)
    assert at.dtype == np.int64
    assert t[at] == pytest.approx(np.arange(0.03, 1.0, 0.1), abs=1e-9)
    first = _core.nvml_refreshes(t, pa, pi, after_s=0.02)[0]
    assert t[first + 1] == pytest.approx(0.035)
    # a change of the instantaneous power alone shows one too; failed reads show none
    flat = np.full(t.size, 300.0)
    pi2 = flat.copy()
    pi2[t >= 0.5] = 320.0
    assert t[_core.nvml_refreshes(t, flat, pi2)] == pytest.approx([0.5])
    pa2 = flat.copy()
    pa2[10::7] = np.nan
    assert _core.nvml_refreshes(t, pa2, flat).size == 0
    assert _core.nvml_refreshes(t).size == 0               # no powers: nothing to see
    with pytest.raises(ValueError, match="one length"):
        _core.nvml_refreshes(t, pa[:-1])
    with pytest.raises(ValueError, match="non-decreasing"):
        _core.nvml_refreshes(t[::-1].copy(), pa)


def test_without_a_refresh_to_see_the_fixed_response_time_holds():
    """Readings that never change (no refresh shows), or change only by failed reads, give the
    margin nothing: the carried rule waits out the response time as before."""
    kw = dict(carried_mhz=1980.0, carried_ago_s=0.02)
    t, sm, r, pa, pi = steady(1.0)
    i, _, _, by = carried_at(t, sm, r, pa, pi, carry_update_margin_s=0.02, **kw)
    assert by == 1 and t[i] == t[carried_at(t, sm, r, pa, pi, **kw)[0]] >= 0.15 - PERIOD
    pa[10::7] = np.nan                              # failed reads are not refreshes
    pi[13::11] = np.nan
    i, _, _, by = carried_at(t, sm, r, pa, pi, carry_update_margin_s=0.02, **kw)
    assert by == 1 and t[i] >= 0.15 - PERIOD
    with pytest.raises(ValueError, match="carry_update_margin_s"):
        carried_at(t, sm, r, pa, pi, carry_update_margin_s=-0.01, **kw)


def test_the_recorded_h200_gemm_carried_with_a_refresh_margin_settles_no_later(h200_ramp):
    """Second benches of the recorded GEMM (10 ms readings, refreshes every ~0.1 s): with the
    margin each settles no later than on the response time, never on readings of a refresh
    from before its margin, and on the same clock."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    t, sm, r, pa, pi = (d[k][:end] for k in ("t", "sm", "reasons", "p_avg", "p_inst"))
    i, med, _ = _core.clock_settled_at(t, sm, r, pa, pi, load_start_s=d["load_start"],
                                       power_limit_w=LIMIT_W)
    sooner = 0
    for start in t[(t > t[i] + 0.2) & (t < t[end - 1] - 0.8)][::7]:
        kw = dict(carried_mhz=med, carried_under_limit=True, carried_ago_s=0.02,
                  carried_loaded_s=start - d["load_start"], load_start_s=start)
        k0, m0, _, by0 = carried_at(t, sm, r, pa, pi, carry_update_margin_s=None, **kw)
        k, m, lim, by = carried_at(t, sm, r, pa, pi, carry_update_margin_s=0.02, **kw)
        assert k <= k0 and lim
        if by == 1:
            # the readings it settled on began after a refresh seen after start + margin
            first = next(j for j in range(1, k) if t[j - 1] >= start + 0.02 and
                         (pa[j] != pa[j - 1] or pi[j] != pi[j - 1]))
            assert first + 1 <= k and abs(m - med) <= max(0.02 * med, 15)
            sooner += k < k0
    assert sooner > 0


def test_the_recorded_h200_gemm_state_is_not_carried_to_the_idle_after_it(h200_ramp):
    """Right after the GEMM the clock is back at ~1980 MHz within 0.2 s: a light load there does
    not match the capped state the GEMM left."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    t, sm, r, pa, pi = (d[k] for k in ("t", "sm", "reasons", "p_avg", "p_inst"))
    _, med, _ = _core.clock_settled_at(t[:end], sm[:end], r[:end], pa[:end], pi[:end],
                                       load_start_s=d["load_start"], power_limit_w=LIMIT_W)
    for under in (True, False):
        k, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=med, carried_under_limit=under,
                                 carried_ago_s=0.0, load_start_s=t[end])
        assert not by



# ---- the board's maximum SM clock as a known state (kb_clock_settled_carried, by=2)

def test_a_light_load_at_the_boards_maximum_clock_settles_on_one_short_window():
    """The H200 idles at its maximum SM clock (1980 MHz): a light load there has no ramp left,
    and with its power under the headroom nothing will pull it down."""
    t, sm, r, pa, pi = steady(1.0)
    i, med, limited, by = carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0)
    assert by == 2 and not limited and med == 1980
    # the response time and a whole NVML update period of this load's own readings
    assert 0.2 - PERIOD <= t[i] < 0.25
    # without the maximum known: the two-window rule
    j, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=None)
    assert by == 0 and t[j] >= 0.5
    # one 15 MHz step under it is at it; 2% under it is not (it may still be ramping)
    sm[:] = 1965.0
    assert carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0)[3] == 2
    sm[:] = 1935.0
    k, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0)
    assert by == 0 and t[k] >= 0.5


def test_a_clock_coming_up_to_its_maximum_settles_once_a_window_shows_it():
    t, sm, r, pa, pi = steady(1.0)
    sm[t < 0.3] = 1410.0
    i, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0)
    assert by == 2 and 0.4 - PERIOD <= t[i] < 0.45


@pytest.mark.parametrize("what", ["heavy", "limit"])
def test_the_maximum_clock_settles_nothing_that_may_be_capped(what):
    """At the maximum clock, but drawing more than the headroom (it may be capped once the
    average catches up), or with a limit reason since the load began."""
    t, sm, r, pa, pi = steady(1.0, inst=650.0 if what == "heavy" else 300.0)
    if what == "limit":
        r[(t > 0.02) & (t < 0.05)] = POWER_CAP
    i, _, _, by = carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0)
    assert by != 2


def test_the_recorded_capped_gemm_is_not_settled_by_the_maximum_clock(h200_ramp):
    """The recorded GEMM idled at 1980 MHz; its first call (7.3 ms: cuBLAS's set-up) ended
    0.147 s into the phase and the readings moved 0.08 s later. kbench's load begins after an
    untimed first call, so here it begins at that call's end: the window after the response
    time sees the load's own power and clock, not the idle's."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    t, sm, r, pa, pi = (d[k][:end] for k in ("t", "sm", "reasons", "p_avg", "p_inst"))
    start = d["load_start"] + d["gemm_us"][0, 0]
    plain = _core.clock_settled_at(t, sm, r, pa, pi, load_start_s=start, power_limit_w=LIMIT_W)
    i, med, limited, by = carried_at(t, sm, r, pa, pi, carried_mhz=None, max_sm_mhz=1980.0,
                                     load_start_s=start)
    assert by == 0 and limited and (i, med, limited) == plain


# ---- clock_settled_since: from where the samples taken while settling may be kept


def test_a_clock_coming_up_keeps_samples_only_from_its_last_reading_below_the_settled_clock():
    t, mhz, r = trace(1.0, lambda t: np.where(t < 0.3, 1410.0, 1980.0))
    since = _core.clock_settled_since(t, mhz, r, settled_mhz=1980.0)
    assert since == t[t < 0.3][-1]
    # a reading within 2% (and 15 MHz) of the settled clock is the settled state
    mhz2 = np.where(t < 0.3, 1965.0, 1980.0)
    assert _core.clock_settled_since(t, mhz2, r, settled_mhz=1980.0) == t[0]


def test_a_steady_load_keeps_samples_from_its_start_and_a_failed_read_proves_nothing():
    t, mhz, r = trace(0.5, lambda t: np.full(t.size, 1980.0))
    mhz[40] = np.nan
    assert _core.clock_settled_since(t, mhz, r, settled_mhz=1980.0, load_start_s=0.1) == 0.1


def test_a_limit_reason_on_an_unlimited_settle_keeps_nothing_from_before_it():
    t, mhz, r = trace(0.8, lambda t: np.full(t.size, 1980.0))
    r[(t > 0.2) & (t < 0.25)] = POWER_CAP
    since = _core.clock_settled_since(t, mhz, r, settled_mhz=1980.0)
    assert since == t[(t > 0.2) & (t < 0.25)][-1]


def test_an_unsettled_load_keeps_nothing():
    t, mhz, r = trace(0.5, lambda t: np.full(t.size, 1980.0))
    assert _core.clock_settled_since(t, mhz, r, settled_mhz=None) == float("inf")


def test_the_recorded_capped_gemm_keeps_nothing_from_before_its_settle(h200_ramp):
    """Under a power limit the clock read 1470-1485 MHz from 0.39 s of load on, yet GEMMs ran
    faster until the averaged power caught up (the controller's dips fall between NVML's
    snapshots): nothing from before the settle is kept."""
    d, end = h200_ramp, h200_ramp["load_end_i"]
    i, med, limited = _core.clock_settled_at(d["t"][:end], d["sm"][:end], d["reasons"][:end],
                                             d["p_avg"][:end], d["p_inst"][:end],
                                             load_start_s=d["load_start"], power_limit_w=LIMIT_W)
    assert limited
    since = _core.clock_settled_since(d["t"][:i + 1], d["sm"][:i + 1], d["reasons"][:i + 1],
                                      settled_mhz=med, under_limit=True,
                                      load_start_s=d["load_start"])
    assert since == d["t"][i]
    g, loaded = d["gemm_us"], d["t"][i] - d["load_start"]
    # what keeping the readings' matching clock would have let in: faster GEMMs
    early = g[(g[:, 0] >= 0.3) & (g[:, 0] < 0.5), 1]
    assert np.median(early) < 0.995 * np.median(g[g[:, 0] >= loaded, 1])


def test_the_carried_rule_with_no_clock_readings_settles_nothing_and_does_not_crash():
    # sm_mhz None was read without a check: a segfault
    t, sm, r, pa, pi = steady(1.0)
    i, _, _, _ = carried_at(t, None, r, pa, pi, carried_mhz=1980.0, carried_ago_s=0.05)
    assert i == -1
    i, _, _, _ = carried_at(t, None, r, pa, pi, max_sm_mhz=1980.0)
    assert i == -1
