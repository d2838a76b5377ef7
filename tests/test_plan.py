"""kbench.bench's choices are checked and decided once, in C (csrc/core/plan.c, _core.plan),
before anything calls the function: the error names the parameter and the values it accepts,
on every backend, and the plan says how the call is measured (measurement, timer, cold cache).
The measure functions take the plan and decide nothing again. No GPU needed: the plan is made
before one is touched, and CUPTI's usability is a fact the caller hands in."""
import sys

import numpy as np
import pytest

import kbench
from kbench import _core

FAST = dict(warmup_s=0.0, max_time_s=0.05)


def usable():
    return True, False, ""


def _facts(ok, busy=False, why="libcupti not found"):
    asked = []

    def cupti():
        asked.append(1)
        return ok, busy, "" if ok else why
    return cupti, asked


@pytest.mark.parametrize("backend, cold, mode, measurement, timer", [
    ("host", "flush", None, "host", "host"), ("host", "rotate", "host", "host", "host"),
    ("host", None, None, "host", "host"),
    ("cuda", "flush", "cupti", "cupti", "cupti"), ("cuda", None, "events", "events", "events"),
    ("cuda", "rotate", "graph", "graph", "cupti"), ("cuda", None, None, "cupti", "cupti"),
    ("hip", "flush", None, "graph", "events"), ("hip", None, "graph", "graph", "events"),
])
def test_each_backend_decides_its_measurement_timer_and_cold_cache(backend, cold, mode,
                                                                  measurement, timer):
    p = _core.plan(backend, cold, mode, cupti=usable)
    assert (p.backend, p.measurement, p.timer, p.cold) == (backend, measurement, timer, cold)
    assert (p.flush, p.rotate, p.graph) == (cold == "flush", cold == "rotate",
                                            measurement == "graph")
    assert p.note is None and p.profile is None
    assert p.as_dict() == {"backend": backend, "measurement": measurement, "timer": timer,
                           "cold": cold, "flush": cold == "flush", "rotate": cold == "rotate",
                           "graph": measurement == "graph", "profile": None, "note": None}


def test_cuda_asks_about_cupti_only_when_its_answer_decides_something():
    cupti, asked = _facts(False)
    # events: nothing to decide; profile: a profiler owns CUPTI, which must not be touched
    assert _core.plan("cuda", None, "events", cupti=cupti).timer == "events"
    p = _core.plan("cuda", "flush", None, profile="KBENCH_PROFILE=1", cupti=cupti)
    assert (p.measurement, p.timer, p.profile) == ("profile", None, "KBENCH_PROFILE=1")
    assert asked == []
    # the backend's pick falls back to events and says why; graph replays are read by events
    p = _core.plan("cuda", None, None, cupti=cupti)
    assert (p.measurement, p.timer) == ("events", "events")
    assert p.note == "CUPTI unavailable (libcupti not found); timed with CUDA events instead"
    p = _core.plan("cuda", "rotate", "graph", cupti=cupti)
    assert (p.measurement, p.timer, p.note) == ("graph", "events", None)
    assert len(asked) == 2


@pytest.mark.parametrize("busy, error", [(True, _core.CuptiBusy),
                                         (False, _core.LibraryNotFound)])
def test_cupti_asked_for_by_name_where_it_is_not_usable_says_why(busy, error):
    cupti, _ = _facts(False, busy, "torch.profiler is running and owns CUPTI")
    with pytest.raises(error, match="mode='cupti' is not usable: torch.profiler is running"):
        _core.plan("cuda", None, "cupti", cupti=cupti)


@pytest.mark.parametrize("cupti, message", [
    (None, "plan: a CUDA plan with mode None, 'cupti' or 'graph' needs cupti="),
    (lambda: (True, False), r"plan: cupti\(\) must return \(usable, busy, why: str\)"),
    (lambda: None, r"plan: cupti\(\) must return"),
    (3, "plan: cupti must be None or a callable, got int"),
])
def test_bad_cupti_facts_are_refused(cupti, message):
    with pytest.raises(TypeError, match=message):
        _core.plan("cuda", None, None, cupti=cupti)


def test_an_error_in_the_cupti_question_propagates():
    def broken():
        raise OSError("no /proc")
    with pytest.raises(OSError, match="no /proc"):
        _core.plan("cuda", None, None, cupti=broken)


@pytest.mark.parametrize("backend, cold, mode, message", [
    ("host", "lukewarm", None, "cold_cache must be None, 'flush' or 'rotate', got 'lukewarm'"),
    ("cuda", "none", None, "cold_cache must be None, 'flush' or 'rotate', got 'none'"),
    ("hip", 1, "graph", "cold_cache must be None, 'flush' or 'rotate', got 1"),
    ("host", None, "events", "mode 'events' needs a CUDA device: on the CPU, mode must be None "
                             "or 'host'"),
    ("hip", None, "cupti", "mode 'cupti' needs a CUDA device: on HIP, mode must be None or "
                           "'graph'"),
    ("cuda", None, "host", "mode 'host' needs the CPU: on CUDA, mode must be None, 'cupti', "
                           "'events' or 'graph'"),
    ("cuda", None, "bogus", "mode must be None, 'cupti', 'events' or 'graph' on CUDA, got "
                            "'bogus'"),
    ("host", None, 3, "mode must be None or 'host' on the CPU, got 3"),
    ("tpu", None, None, "plan: backend must be 'host', 'cuda' or 'hip', got 'tpu'"),
])
def test_a_bad_choice_names_the_parameter_and_what_it_accepts(backend, cold, mode, message):
    cupti, asked = _facts(True)
    with pytest.raises(ValueError) as ei:
        _core.plan(backend, cold, mode, cupti=cupti)
    assert str(ei.value) == message
    assert asked == []          # checked before any GPU library is asked


def test_a_plan_is_read_only_and_made_only_by_plan():
    p = _core.plan("host", "flush", None)
    with pytest.raises(TypeError, match="cannot create"):
        _core.Plan()
    with pytest.raises(AttributeError):
        p.cold = None
    assert repr(p) == "Plan(backend='host', measurement='host', timer='host', cold='flush')"


def test_measure_host_takes_the_plan_and_nothing_beside_it():
    x = np.ones(1 << 10)
    raw = _core.measure_host(np.sum, ((x,),), None, plan=_core.plan("host", "flush", None),
                             flush_bytes=1 << 20, **FAST)
    assert raw["cold"]["mode"] == "flush"
    raw = _core.measure_host(np.sum, ((x,),), None, plan=_core.plan("host", None, None), **FAST)
    assert raw["cold"]["mode"] == "none"
    with pytest.raises(TypeError, match="measure_host: cold= comes from plan=: give one or the "
                                        "other"):
        _core.measure_host(np.sum, ((x,),), None, plan=_core.plan("host", None, None),
                           cold="flush", **FAST)
    with pytest.raises(ValueError, match="measure_host: the plan is for cuda, measurement "
                                         "'events', not a timed run here"):
        _core.measure_host(np.sum, ((x,),), None, plan=_core.plan("cuda", None, "events"),
                           **FAST)
    with pytest.raises(ValueError, match="the plan is for host, measurement 'profile'"):
        _core.measure_host(np.sum, ((x,),), None,
                           plan=_core.plan("host", None, None, profile="profile=True"), **FAST)
    with pytest.raises(TypeError, match="measure_host: plan must be a _core.Plan"):
        _core.measure_host(np.sum, ((x,),), None, plan="flush", **FAST)


def test_bench_records_its_plan():
    r = kbench.bench(np.add, np.ones(64), np.ones(64), **FAST)
    assert r.extra["plan"]["measurement"] == "host" and r.extra["plan"]["cold"] == "flush"
    assert r.cold_cache["mode"] == "flush"
    r = kbench.bench(np.add, np.ones(64), np.ones(64), cold_cache=None, **FAST)
    assert r.extra["plan"]["cold"] is None and r.cold_cache["mode"] == "none"


@pytest.mark.parametrize("options", [dict(cold_cache="lukewarm"), dict(mode="events"),
                                     dict(cold_cache="bogus", profile=True)])
def test_bench_refuses_a_bad_choice_before_it_calls_fn(options):
    """Before the check and the memory probe call fn, and in profile mode too (which never
    reaches a C measure function)."""
    calls = []

    def fn(x):
        calls.append(1)
        return x

    with pytest.raises(ValueError, match="cold_cache must be|mode 'events' needs"):
        kbench.bench(fn, np.ones(4), check=np.ones(4), **FAST, **options)
    assert calls == []


def test_a_bad_cuda_mode_is_refused_before_any_gpu_library_is_asked(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)     # no ROCm torch: CUDA
    with pytest.raises(ValueError, match="mode must be None, 'cupti', 'events' or 'graph' on "
                                         "CUDA, got 'cupt'"):
        kbench.bench(lambda: None, device="cuda", mode="cupt", memory=False)
