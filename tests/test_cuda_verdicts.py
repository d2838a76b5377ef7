"""C's verdicts on a CUDA record (csrc/clocks/regime.c) through their _core wrappers: the clock
summary and its steady rule, the GPU's timed and busy fractions, the power cap, and whether the
clock regime held -- one test per branch with the verdict spelled out, then degenerate and random
records, none of which may raise: this code runs in every GPU bench."""
import math
import random

import numpy as np
import pytest

from kbench import _core

NAN = float("nan")


def clocks(sm, reasons=None, *, mem=3201.0, power=650.0, temp=60.0, spec=1980, n=None):
    k = len(sm)
    return {"n": k if n is None else n, "period_s": 0.005, "before_mark": 7,
            "sm_mhz": np.asarray(sm, float),
            "mem_mhz": None if mem is None else np.full(k, mem),
            "power_w": None if power is None else np.full(k, power),
            "temp_c": None if temp is None else np.full(k, temp),
            "reasons": np.asarray(reasons if reasons is not None else [0] * k, np.uint64),
            "max_sm_clock_mhz": spec}


SUMMARY_KEYS = {"sm_mhz_median", "sm_mhz_min", "sm_mhz_p95", "mem_mhz_median", "power_w_median",
                "temp_c_max", "n", "period_s", "warmup_samples", "reasons_seen",
                "throttle_reasons", "steady", "sm_mhz_max_spec", "summary", "power_capped"}


# ---------------------------------------------------------------- the clock summary

def test_a_clock_that_held_is_steady_and_says_so():
    s = _core.clock_summary(clocks([1980.0] * 20))
    assert set(s) == SUMMARY_KEYS
    assert s["summary"] == "SM 1980 MHz / mem 3201 MHz / 650 W (steady, 20 samples)"
    assert s["steady"] is True and s["power_capped"] is False
    assert (s["sm_mhz_median"], s["sm_mhz_min"], s["sm_mhz_p95"]) == (1980.0, 1980.0, 1980.0)
    assert s["n"] == 20 and s["period_s"] == 0.005 and s["warmup_samples"] == 7
    assert s["sm_mhz_max_spec"] == 1980 and s["reasons_seen"] == [] and s["temp_c_max"] == 60.0


def test_a_clock_that_fell_under_a_power_cap_moved_and_is_power_capped():
    s = _core.clock_summary(clocks([1980.0] * 10 + [1500.0] * 10, [0] * 10 + [4] * 10))
    assert s["steady"] is False and s["power_capped"] is True
    assert s["summary"] == ("SM 1740 MHz / mem 3201 MHz / 650 W (MOVED: SM fell to 1500 MHz "
                            "(p95 1980), throttled by sw_power_cap, 20 samples)")


def test_a_fall_of_3_percent_is_still_steady_and_more_is_not():
    # the lowest sample within 3% of the 95th percentile
    assert _core.clock_summary(clocks([1980.0] * 19 + [1930.0]))["steady"] is True
    low = _core.clock_summary(clocks([1980.0] * 19 + [1900.0]))
    assert low["steady"] is False and low["power_capped"] is False   # no cap: moved, not capped
    assert low["summary"].endswith("(MOVED: SM fell to 1900 MHz (p95 1980), 20 samples)")


def test_a_cap_flagged_at_full_clock_is_steady_only_against_a_known_maximum():
    flagged = clocks([1980.0] * 20, [4] * 20)
    s = _core.clock_summary(flagged)
    assert s["steady"] is True and s["power_capped"] is False
    assert "(steady; sw_power_cap flagged at full clock, 20 samples)" in s["summary"]
    # within 1% of the maximum counts as full clock; further below does not
    assert _core.clock_summary(flagged, 1995)["steady"] is True
    assert _core.clock_summary(flagged, 2100)["steady"] is False
    # the maximum unknown (None, 0, NaN in the dict): a flagged cap is a move
    for spec in (None, 0, NAN):
        s = _core.clock_summary(clocks([1980.0] * 20, [4] * 20, spec=spec))
        assert s["steady"] is False and s["power_capped"] is True, spec
        assert s["sm_mhz_max_spec"] is None


def test_limit_reasons_are_listed_by_name_and_only_a_power_cap_is_power_capped():
    s = _core.clock_summary(clocks([1980.0] * 10 + [1500.0] * 10, [0x20 | 0x84 | 0x1] * 20))
    assert s["throttle_reasons"] == ["hw_power_brake_slowdown", "sw_power_cap",
                                     "sw_thermal_slowdown"]
    assert s["reasons_seen"] == ["gpu_idle", "sw_power_cap", "sw_thermal_slowdown",
                                 "hw_power_brake_slowdown"]
    assert "throttled by hw_power_brake_slowdown, sw_power_cap, sw_thermal_slowdown" in \
        s["summary"]
    thermal = _core.clock_summary(clocks([1980.0] * 10 + [1500.0] * 10, [0x40] * 20))
    assert thermal["steady"] is False and thermal["power_capped"] is False
    # idle and unknown bits are seen but limit nothing
    idle = _core.clock_summary(clocks([1980.0] * 20, [1 | (1 << 40)] * 20))
    assert idle["steady"] is True and idle["throttle_reasons"] == []
    assert idle["reasons_seen"] == ["gpu_idle", "unknown_0x10000000000"]


def test_missing_clock_data_gives_no_verdict_never_an_error():
    not_sampled = {"summary": "not sampled (NVML unavailable)", "steady": None,
                   "power_capped": False}
    assert _core.clock_summary(None) == not_sampled
    assert _core.clock_summary({}) == not_sampled
    # the sampler ran, but no reading fell inside the timed part: said so, not "no NVML"
    for rec in (clocks([], []), clocks([1980.0] * 3, n=0)):
        between = _core.clock_summary(rec)
        assert between["steady"] is None and between["power_capped"] is False
        assert between["summary"].startswith("no NVML reading inside the timed part")
    failed = {"summary": "NVML reads failed", "steady": None, "power_capped": False}
    assert _core.clock_summary(clocks([NAN] * 5, [4] * 5)) == failed
    assert _core.clock_summary({"n": 4, "sm_mhz": None}) == failed
    # one sample: its own median, minimum and p95
    one = _core.clock_summary(clocks([1410.0]))
    assert one["steady"] is True and one["summary"].endswith("(steady, 1 samples)")
    # no power, no memory clock, no temperature, no reasons array: left out, not invented
    bare = _core.clock_summary({"n": 3, "sm_mhz": [1980.0, NAN, 1965.0]})
    assert bare["summary"] == "SM 1972 MHz (steady, 3 samples)"
    assert bare["power_w_median"] is None and bare["mem_mhz_median"] is None
    assert bare["temp_c_max"] is None and bare["period_s"] is None
    part = _core.clock_summary(clocks([1980.0] * 4, power=NAN, mem=0.0))
    assert part["summary"] == "SM 1980 MHz (steady, 4 samples)"


# ---------------------------------------------------------------- duty cycle

def test_busy_fraction_adds_the_bridges_and_caps_at_one():
    assert _core.busy_fraction(0.5, 0.045, 0.1) == pytest.approx(0.95)
    assert _core.busy_fraction(0.5, 0.2, 0.1) == 1.0
    assert _core.busy_fraction(0.5, None, 0.1) == 0.5
    assert _core.busy_fraction(0.5, NAN, 0.1) == 0.5
    assert _core.busy_fraction(None, 0.045, 0.1) is None
    assert _core.busy_fraction(0.5, 0.045, 0.0) == 0.5      # nothing to divide: the timed part
    assert _core.timed_fraction([1e-3, NAN], 0.1) is None
    assert _core.timed_fraction([1e-3] * 10, 0.1, NAN) == pytest.approx(0.1)   # unroll: 1


# ---------------------------------------------------------------- the regime

def verdict(**kw):
    return _core.regime_verdict(**kw)


def test_a_sustained_regime_that_settled_and_stayed_held():
    v = verdict(settled=True, settle_at_s=0.4, settle_max_s=3.0, settle_sm_mhz=1980.0,
                clocks_read=True, timed_sm_mhz=1965.0, busy_fraction=0.97)
    assert v == {"held": True, "why": "held", "note": None, "clocks_steady": None}


def test_a_load_that_never_settled_breaks_the_sustained_regime():
    v = verdict(settled=False, settle_at_s=3.02, settle_max_s=3.0, settle_sm_mhz=1530.0)
    assert v["held"] is False
    assert v["why"] == ("the load had not settled after 3.0 s of warm-up (settle_max_s=3.0; "
                        "last window median 1530 MHz)")
    # unknown figures read as Python printed them: 0.0 s, nan MHz, the limit as given
    v = verdict(settled=False, settle_max_s=0.5)
    assert v["why"] == ("the load had not settled after 0.0 s of warm-up (settle_max_s=0.5; "
                        "last window median nan MHz)")
    for limit in (10.0, 1e16, 1.5e-05, 123456789.0, 30.25):
        assert f"(settle_max_s={limit!r};" in verdict(settled=False, settle_max_s=limit)["why"]


def test_no_clock_readings_for_the_settle_rule_break_the_regime_only_where_clocks_were_read():
    assert verdict(settled=None, clocks_read=True)["why"] == \
        "the settle rule had no clock readings to judge"
    assert verdict(settled=None, clocks_read=False)["held"] is True


def test_idling_while_power_capped_breaks_the_sustained_regime_when_hot():
    v = verdict(settled=True, settle_sm_mhz=1470.0, clocks_read=True, timed_sm_mhz=1470.0,
                power_capped=True, busy_fraction=0.5)
    assert v["why"] == ("power capped the SM clock while the GPU was busy only 50% of the "
                        "sampling time (idle between batches): under continuous load this "
                        "kernel may run slower than measured")
    assert verdict(power_capped=True, busy_fraction=0.9)["held"] is True     # 90% is busy
    assert verdict(power_capped=True, busy_fraction=0.5, cold=True)["held"] is True
    assert verdict(power_capped=True, busy_fraction=None)["held"] is True
    assert verdict(power_capped=False, busy_fraction=0.1)["held"] is True


def test_a_clock_that_moved_from_where_it_settled_breaks_the_sustained_regime():
    v = verdict(settled=True, settle_sm_mhz=1980.0, clocks_read=True, timed_sm_mhz=1500.0)
    assert v["why"] == ("the SM clock moved from 1980 MHz (settled) to 1500 MHz (timed part)")
    # within 10% of the settled window: a dip of the controller, not another state
    assert verdict(settled=True, settle_sm_mhz=1500.0, timed_sm_mhz=1425.0)["held"] is True
    assert verdict(settled=True, settle_sm_mhz=NAN, timed_sm_mhz=1425.0)["held"] is True


def test_a_limit_while_timed_after_an_unlimited_settle_breaks_the_sustained_regime():
    """Settled with nothing limiting the clock, then sw_power_cap (0x4) while timed: the load
    drew more than it did settling, and the figure mixes the states even where the clock's
    median stayed within 10% (a bf16 GEMM 2048^3 on the H200: 1935-1980 MHz)."""
    kw = dict(settled=True, settle_sm_mhz=1980.0, clocks_read=True, timed_sm_mhz=1965.0)
    v = verdict(settled_unlimited=True, timed_limits=0x4, **kw)
    assert v["held"] is False
    assert v["why"] == ("the load settled with nothing limiting its clock, but sw_power_cap "
                        "limited it while it was timed: the figure mixes the two states (its "
                        "sustained state is the limited one)")
    # thermal slowdown names itself; the lowest limit bit is named
    assert "hw_slowdown limited" in verdict(settled_unlimited=True, timed_limits=0x28, **kw)["why"]
    # a load that settled under the limit is expected to show it; a reason that is no limit
    # (idle 0x1, applications clocks 0x2) says nothing; nothing timed-limited: held
    assert verdict(settled_unlimited=False, timed_limits=0x4, **kw)["held"] is True
    assert verdict(settled_unlimited=True, timed_limits=0x1 | 0x2, **kw)["held"] is True
    assert verdict(settled_unlimited=True, timed_limits=0, **kw)["held"] is True
    # a load that never settled is judged by that alone
    v = verdict(settled=False, settle_max_s=4.0, settled_unlimited=True, timed_limits=0x4)
    assert "had not settled" in v["why"] and "nothing limiting" not in v["why"]


def test_locked_clocks_need_no_settling_but_a_move_still_counts():
    v = verdict(clocks_locked=True, settled=None, clocks_read=True, timed_sm_mhz=1410.0)
    assert v["held"] is True
    assert v["note"] == "clocks set or locked by the user: no settling needed"
    assert verdict(clocks_locked=True, settled=False, settle_max_s=3.0)["held"] is True
    moved = verdict(clocks_locked=True, settle_sm_mhz=1980.0, timed_sm_mhz=1410.0)
    assert moved["held"] is False and "moved from 1980 MHz" in moved["why"]


def test_burst_batches_that_started_unrecovered_or_at_spread_clocks_break_the_regime():
    v = verdict(regime="burst", batches=40, unrecovered=3, recover_max_s=2.0,
                start_sm_mhz_min=1980.0, start_sm_mhz_max=1980.0)
    assert v == {"held": False, "note": None, "clocks_steady": True,
                 "why": "3 of 40 batches started before the GPU had recovered (waited at most "
                        "2 s each)"}
    spread = verdict(regime="burst", batches=40, start_sm_mhz_min=1500.0,
                     start_sm_mhz_max=1980.0)
    assert spread["why"] == "batches started at SM 1500-1980 MHz"
    assert spread["clocks_steady"] is False
    both = verdict(regime="burst", batches=5, unrecovered=1, start_sm_mhz_min=1500.0,
                   start_sm_mhz_max=1980.0)
    assert both["why"] == ("1 of 5 batches started before the GPU had recovered; batches "
                           "started at SM 1500-1980 MHz")
    # within 5% of the fastest start: held, and steady whatever the clocks did between batches
    ok = verdict(regime="burst", batches=40, start_sm_mhz_min=1900.0, start_sm_mhz_max=1980.0)
    assert ok == {"held": True, "why": "held", "note": None, "clocks_steady": True}


def test_burst_ignores_the_sustained_rules_and_needs_no_batches():
    v = verdict(regime="burst", settled=False, power_capped=True, busy_fraction=0.1,
                settle_sm_mhz=1980.0, timed_sm_mhz=1000.0)
    assert v == {"held": True, "why": "held", "note": None, "clocks_steady": None}
    assert verdict(regime="burst", batches=0)["held"] is True


def test_an_unknown_regime_is_refused_by_name():
    with pytest.raises(ValueError, match="regime must be 'sustained' or 'burst'"):
        verdict(regime="turbo")


# ---------------------------------------------------------------- degenerate and random records

def _random_array(rng, n):
    pick = rng.choice(["fine", "nan", "mixed", "wild", "none", "short"])
    if pick == "none":
        return None
    if pick == "short":
        n = rng.randint(0, max(0, n - 1))
    if pick == "fine":
        return np.array([rng.choice([1980.0, 1500.0, 1410.0]) for _ in range(n)])
    if pick == "nan":
        return np.full(n, NAN)
    values = [NAN, math.inf, -math.inf, -1.0, 0.0, 1e308, 5e-324, 1980.0, 1470.0]
    return np.array([rng.choice(values) if pick == "wild" else
                     rng.choice([NAN, rng.uniform(0, 2500)]) for _ in range(n)])


def test_random_and_degenerate_records_always_get_a_verdict():
    rng = random.Random(20261201)
    for _ in range(3000):
        n = rng.choice([0, 1, 2, 3, 17, 400])
        rec = None if rng.random() < 0.05 else {
            "n": rng.choice([n, n, 0, None, -3]), "period_s": rng.choice([0.005, None]),
            "before_mark": rng.choice([0, 12, None]), "sm_mhz": _random_array(rng, n),
            "mem_mhz": _random_array(rng, n), "power_w": _random_array(rng, n),
            "temp_c": _random_array(rng, n),
            "reasons": None if rng.random() < 0.1 else np.array(
                [rng.choice([0, 1, 4, 0x84, 0xFFFFFFFFFFFFFFFF, 1 << 63]) for _ in range(n)],
                np.uint64),
            "max_sm_clock_mhz": rng.choice([None, 0, 1980, -5, NAN, math.inf])}
        s = _core.clock_summary(rec, rng.choice([None, None, 1980.0, 0.0, NAN]))
        assert isinstance(s["summary"], str) and s["summary"]
        assert s["steady"] in (None, True, False) and s["power_capped"] in (True, False)
        if s["steady"] is None:
            assert s["power_capped"] is False and set(s) == {"summary", "steady", "power_capped"}
        else:
            assert set(s) == SUMMARY_KEYS and s["sm_mhz_min"] <= s["sm_mhz_median"]
        ev = _random_array(rng, n)
        sampling = rng.choice([None, 0.0, -1.0, NAN, math.inf, 0.1, 1e-9])
        t = _core.timed_fraction(ev if ev is not None else [], sampling,
                                 rng.choice([1.0, 0.0, NAN, 100.0]))
        b = _core.busy_fraction(t, rng.choice([None, 0.0, NAN, -1.0, 0.05, math.inf]), sampling)
        for f in (t, b):
            assert f is None or (math.isfinite(f) and f <= 1.0)
        v = _core.regime_verdict(
            regime=rng.choice(["sustained", "burst"]), clocks_locked=rng.random() < 0.3,
            settled=rng.choice([None, True, False]),
            settle_at_s=rng.choice([None, NAN, 0.0, 3.02, math.inf]),
            settle_max_s=rng.choice([None, NAN, 0.0, 3.0, 1e300, -math.inf]),
            settle_sm_mhz=rng.choice([None, NAN, 0.0, 1530.0, -1.0]),
            clocks_read=s["steady"] is not None, timed_sm_mhz=s.get("sm_mhz_median"),
            power_capped=s["power_capped"], cold=rng.random() < 0.2, busy_fraction=b,
            batches=rng.choice([0, 1, 40, 2 ** 62]), unrecovered=rng.choice([0, 3, -1]),
            recover_max_s=rng.choice([0.0, 2.0, NAN, 1e300]),
            start_sm_mhz_min=rng.choice([None, NAN, 0.0, 1500.0, 1980.0]),
            start_sm_mhz_max=rng.choice([None, NAN, 1980.0, math.inf]))
        assert v["held"] is (v["why"] == "held")
        assert isinstance(v["why"], str) and len(v["why"]) < 1024
        assert v["clocks_steady"] in (None, True, False)
