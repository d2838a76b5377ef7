"""kbench.ab: interleaved A/B trials, paired deltas, verdicts."""
import json
import time

import numpy as np
import pytest

from kbench.workflow.ab import _verdict, ab, median_ci, min_trials

FAST = dict(cold_cache=None, warmup_s=0.01, max_time_s=0.08)


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def base():
    spin(2e-4)


def same():
    spin(2e-4)


def twice():
    spin(4e-4)


def half():
    spin(1e-4)


def test_identical_functions_give_a_small_delta_inside_its_ci():
    # the verdict itself is a 2% event for identical arms (1 - the CI's coverage): the
    # synthetic tests below check it; a real run checks only what always holds
    r = ab({"baseline": base, "candidate": same}, trials=10, **FAST)
    c = r.comparisons[0]
    assert len(c.deltas) == 10
    assert abs(c.median_delta) < 0.05
    assert c.ci_low <= c.median_delta <= c.ci_high


def _synthetic_ab(monkeypatch, deltas):
    """ab over arms whose trial medians are 1 ms and 1 ms x (1 + delta[t]): kbench.bench
    replaced by one returning those medians, so the verdict rule is tested without timing."""
    import sys
    from kbench import _core
    from kbench.report.result import Result
    trial = {"base": 0, "cand": 0}

    def fake_bench(fn, *args, name, **kw):
        t = trial[name]
        trial[name] += 1
        med = 1e-3 * (1.0 + (deltas[t] if name == "cand" else 0.0))
        x = np.full(64, med)
        return Result(name=name, device="cpu", backend="host", samples=x,
                      stats=_core.summarize(x, 0.95), stop={"stop": "precision"},
                      cold_cache={"mode": "none"})

    monkeypatch.setattr(sys.modules["kbench.bench"], "bench", fake_bench)
    return ab({"base": lambda: None, "cand": lambda: None}, trials=len(deltas))


def test_a_resolved_change_needs_the_ci_to_exclude_zero_not_every_pair(monkeypatch):
    """40 trials of a +1% change with 0.5% noise: two pairs read negative. The CI of the
    median delta excludes zero, so the change is resolved (the all-pairs rule said 'no
    difference' and lost power as trials were added)."""
    rng = np.random.default_rng(11)
    deltas = 0.01 + 0.005 * rng.standard_normal(40)
    deltas[:2] = [-0.001, -0.002]
    r = _synthetic_ab(monkeypatch, deltas)
    c = r.comparisons[0]
    assert not c.same_sign and c.ci_low > 0
    assert r.verdict.startswith("cand slower by 0.9%")
    assert f"{sum(d > 0 for d in c.deltas)}/40" in repr(r)


def test_no_change_is_not_resolved(monkeypatch):
    deltas = 0.005 * np.random.default_rng(12).standard_normal(10)
    r = _synthetic_ab(monkeypatch, deltas)
    c = r.comparisons[0]
    assert c.ci_low < 0 < c.ci_high and r.verdict == "no difference resolved"


def test_two_times_slower_candidate_is_resolved_slower():
    r = ab({"baseline": base, "candidate": twice}, trials=10, **FAST)
    c = r.comparisons[0]
    assert c.same_sign and c.ci_low > 0
    assert 0.7 < c.median_delta < 1.3                 # about +100%
    assert r.verdict.startswith("candidate slower by ")
    # the paired deltas are the per-trial median ratios
    ratio = r.medians("candidate") / r.medians("baseline") - 1
    np.testing.assert_allclose(c.deltas, ratio)
    assert c.median_delta == pytest.approx(float(np.median(ratio)))
    text = repr(r)
    assert "candidate slower by" in text and "10/10" in text
    assert "<table" in r._repr_html_()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["arms"] == ["baseline", "candidate"] and len(d["trials"]) == 10


def test_more_arms_compare_each_with_the_first_in_alternating_order():
    r = ab([("ref", base), ("fast", half), ("slow", twice)], trials=6, **FAST)
    assert [c.arm for c in r.comparisons] == ["fast", "slow"]
    assert all(c.baseline == "ref" for c in r.comparisons)
    assert r.orders[0] == ["ref", "fast", "slow"] and r.orders[1] == ["slow", "fast", "ref"]
    assert r.orders[2] == r.orders[0]
    assert r.comparisons[0].verdict.startswith("fast faster by ")
    assert r.comparisons[1].verdict.startswith("slow slower by ")


def test_check_runs_once_per_arm():
    seen = []

    def ref(x):
        seen.append(1)
        return x * 2

    x = np.arange(4.0)
    r = ab({"a": lambda x: x * 2, "b": lambda x: x + x}, x, trials=6, check=ref, **FAST)
    assert len(seen) == 2
    assert r.trials[0]["a"].correctness["ok"] and r.trials[1]["a"].correctness is None
    with pytest.raises(AssertionError, match="does not match"):
        ab({"a": lambda x: x * 2, "b": lambda x: x}, x, trials=6, check=ref, **FAST)


def test_verdict_follows_the_ci_and_reports_sign_agreement():
    d = np.full(10, 0.1)
    assert _verdict("cand", d, 0.1, 0.1, 0.1) == (True, "cand slower by 10.0% (1.1x the "
                                                        "baseline's time)")
    same_sign, text = _verdict("cand", -d, -0.1, -0.1, -0.1)
    assert same_sign and text.startswith("cand faster by 10.0%")
    mixed = np.array([0.2] * 9 + [-0.01])
    assert _verdict("cand", mixed, 0.2, 0.1, 0.3) == (False, "cand slower by 20.0% (1.2x the "
                                                             "baseline's time)")
    assert _verdict("cand", d, 0.1, -0.01, 0.3)[1] == "no difference resolved"


def test_median_ci_is_the_order_statistic_interval():
    x = np.array([0.3, -0.1, 0.2, 0.0, 0.5, 0.1, 0.4, -0.2, 0.6, 0.7])
    lo, hi = median_ci(x, 0.95)
    s = np.sort(x)
    assert (lo, hi) == (s[1], s[8])          # n=10, 95%: ranks 2 and 9 (coverage 97.9%)
    assert min_trials(0.95) == 6 and min_trials(0.5) == 2


def test_bad_arms_and_trials_are_refused():
    with pytest.raises(ValueError, match="at least two arms"):
        ab({"only": base})
    with pytest.raises(TypeError, match="not callable"):
        ab({"a": base, "b": 3})
    with pytest.raises(ValueError, match="distinct"):
        ab([("a", base), ("a", same)])
    with pytest.raises(TypeError, match=r"\(name, fn\) pair"):
        ab([("a", base), ("b",)])
    with pytest.raises(ValueError, match="trials must be an integer >= 6"):
        ab({"a": base, "b": same}, trials=3)
    with pytest.raises(TypeError, match="name="):
        ab({"a": base, "b": same}, name="x")


@pytest.mark.parametrize("how", ["env", "argument"])
def test_profile_mode_runs_each_arm_once_and_gives_no_verdict(how, monkeypatch):
    calls = {"a": 0, "b": 0}

    def arm(name):
        def fn():
            calls[name] += 1
        return fn

    if how == "env":
        monkeypatch.setenv("KBENCH_PROFILE", "1")
        opts = {}
    else:
        monkeypatch.delenv("KBENCH_PROFILE", raising=False)
        opts = {"profile": True}
    # the warm-up's call cap, not its time, ends it: a 0.01 s warm-up made 480 calls of one arm
    # and 1000 of the other beside CPU hogs
    from kbench.measure.profile import WARMUP_MAX_CALLS
    r = ab({"a": arm("a"), "b": arm("b")}, trials=6, **dict(FAST, warmup_s=60.0), **opts)
    assert r.profile and len(r.trials) == 1 and r.orders == [["a", "b"]]
    assert all(t.stop["stop"] == "profile" for t in r.trials[0].values())
    assert r.verdict == "no verdict: profile run, not timed"
    assert r.comparisons[0].deltas == []
    # warm-up calls plus the one profiled call, once per arm: not six trials' worth
    assert calls["a"] == calls["b"] == WARMUP_MAX_CALLS + 1
    text = repr(r)
    assert "profile run" in text and "not timed; no verdict" in text
    assert "profile run" in r._repr_html_()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["profile"] is True and d["comparisons"][0]["verdict"].startswith("no verdict")


def test_a_failing_arm_is_named_with_its_trial():
    with pytest.raises(TypeError) as info:
        ab({"old": lambda x: x * 2, "new": lambda x, y: x + y}, np.ones(100), trials=6, **FAST)
    assert "in kbench.ab arm 'new', trial 0" in info.value.__notes__


def test_numpy_scalars_are_accepted_for_trials_and_ci_level():
    r = ab({"a": base, "b": same}, trials=np.int64(6), ci_level=np.float32(0.95), **FAST)
    assert len(r.trials) == 6 and r.options["trials"] == 6
    assert type(r.comparisons[0].ci_level) is float
    assert r.comparisons[0].ci_level == pytest.approx(0.95)


def test_a_saved_ab_run_loads_back_whole(tmp_path):
    from kbench import ABResult, SweepResult
    r = ab({"baseline": base, "candidate": twice}, trials=6, **FAST)
    path = str(tmp_path / "ab.json")
    r.to_json(path)
    back = ABResult.load(path)
    assert back.to_dict() == json.loads(json.dumps(r.to_dict()))
    assert back.verdict == r.verdict and repr(back) == repr(r)
    np.testing.assert_array_equal(back.medians("candidate"), r.medians("candidate"))
    # a file of another kind names what it is and what loads it
    other = tmp_path / "sweep.json"
    other.write_text(json.dumps({"schema": "kbench.sweep/1"}))
    with pytest.raises(ValueError, match=r"sweep.json: not a kbench A/B result .*kbench.sweep/1"):
        ABResult.load(str(other))
    with pytest.raises(ValueError, match="not a kbench sweep"):
        SweepResult.load(path)
    doc = r.to_dict()
    del doc["trials"][1]["candidate"]
    with pytest.raises(ValueError, match="trial 1 does not hold one result per arm"):
        ABResult.from_dict(json.loads(json.dumps(doc)))
