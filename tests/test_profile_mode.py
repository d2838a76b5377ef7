"""Run once for a profiler (kbench.measure.profile): when profile mode is on, its control flow
(warm-up, flush, then exactly one call inside the profiler range) with the device calls faked, the
CPU path for real, the switch under a profiler's injection, and the plugin leaving profile runs out
of save/compare."""
import json
import math
import os

import numpy as np
import pytest

import kbench
from kbench.measure import profile

pytest_plugins = ["pytester"]

KBENCH_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__)))


def _plan(backend, cold, why):
    """A profile-mode plan, as kbench.bench makes it (CUPTI is not asked about)."""
    from kbench import _core as core
    return core.plan(backend, cold, None, profile=why)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv(profile.ENV, raising=False)
    monkeypatch.delenv(profile.INJECTION_ENV, raising=False)


def test_wanted_argument_then_environment_then_injection(monkeypatch):
    assert profile.wanted(None, "cuda:0") == ""
    assert profile.wanted(True, "cpu") == "profile=True"
    monkeypatch.setenv(profile.INJECTION_ENV, "/opt/nsight/libToolsInjection64.so")
    assert profile.INJECTION_ENV in profile.wanted(None, "cuda:0")
    assert profile.wanted(None, "cpu") == ""          # the host timer needs no CUPTI
    assert profile.wanted(False, "cuda:0") == ""      # asked to time: kbench times
    monkeypatch.setenv(profile.ENV, "0")
    assert profile.wanted(None, "cuda:0") == ""
    monkeypatch.setenv(profile.ENV, "1")
    assert profile.wanted(None, "cpu") == "KBENCH_PROFILE=1"
    monkeypatch.setenv(profile.ENV, "maybe")
    with pytest.raises(ValueError, match="KBENCH_PROFILE"):
        profile.wanted(None, "cpu")
    with pytest.raises(TypeError, match="profile must be"):
        profile.wanted("yes", "cpu")


class FakeGpu:
    """Records the device calls profile mode makes, in order."""

    def __init__(self, log):
        self.log = log

    def sync(self):
        self.log.append("sync")

    def flush(self, nbytes):
        self.log.append("flush")
        return nbytes or 100 << 20

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")


def test_one_call_sits_between_start_and_stop_after_warm_up_and_flush():
    log = []

    def fn(x):
        log.append("call")
        return x

    run = profile.run_once(fn, [(1,)], {}, name="case", device="cuda:0",
                           plan=_plan("cuda", "flush", "profile=True"), flush_bytes=None,
                           warmup_s=0.0, correctness=None, backend=FakeGpu(log))
    start, stop = log.index("start"), log.index("stop")
    assert log[start:stop + 1] == ["start", "call", "sync", "stop"]
    assert log[:start].count("call") == profile.WARMUP_MIN_CALLS
    assert log.index("flush") > max(i for i, e in enumerate(log[:start]) if e == "call")
    assert run.extra["profile"]["calls_in_range"] == 1
    assert run.extra["profile"]["warmup_calls"] == profile.WARMUP_MIN_CALLS
    assert run.extra["profile"]["range"]["nvtx_name"] == "case"
    assert run.cold_cache["mode"] == "flush" and run.cold_cache["flush_bytes"] == 100 << 20


def test_hot_cache_skips_the_flush_and_a_raising_call_still_stops_the_range():
    log = []

    def boom():
        log.append("call")
        if log.count("call") > profile.WARMUP_MIN_CALLS:
            raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        profile.run_once(boom, [()], {}, name="c", device="cuda:0", plan=_plan("cuda", None, "t"),
                         flush_bytes=None, warmup_s=0.0, correctness=None, backend=FakeGpu(log))
    assert "flush" not in log and log[-1] == "stop" and "start" in log


def test_profile_true_on_the_cpu_runs_the_checked_setup_then_one_call(tmp_path):
    calls = []

    def fn(a):
        calls.append(1)
        return a * 2

    a = np.arange(8.0)
    r = kbench.bench(fn, a, check=lambda a: a * 2, profile=True, warmup_s=0.0)
    assert isinstance(r, profile.ProfileRun) and r.profile is True
    p = r.extra["profile"]
    # the check's call, the warm-up, the one call in the range
    assert len(calls) == 1 + p["warmup_calls"] + 1
    assert r.correctness["ok"] and r.backend == "profile" and r.n == 0
    assert math.isnan(r.median) and r.memory is None
    assert r.cold_cache["mode"] == "flush" and r.cold_cache["flush_bytes"] > 0
    assert r.metadata["harness"]["script"]["path"] == os.path.abspath(__file__)
    assert "profile run, not timed (profile=True)" in repr(r)
    json.loads(r.to_json(str(tmp_path / "p.json")))    # serialisable


def test_kbench_profile_env_switches_scripts_without_a_change(monkeypatch):
    monkeypatch.setenv(profile.ENV, "1")
    r = kbench.bench(np.add, np.ones(4), np.ones(4), warmup_s=0.0)
    assert isinstance(r, profile.ProfileRun)
    assert r.extra["profile"]["why"] == "KBENCH_PROFILE=1"
    assert isinstance(kbench.bench(np.add, np.ones(4), np.ones(4), profile=False, warmup_s=0.0,
                                   max_time_s=0.05, min_samples=5), kbench.Result)


def test_the_do_bench_drop_in_runs_unchanged_under_kbench_profile(monkeypatch):
    # triton-style scripts crashed: np.quantile / np.min of no times
    from kbench.testing import do_bench
    monkeypatch.setenv(profile.ENV, "1")
    a = np.ones(1000)
    q = do_bench(lambda: a.sum(), warmup=5, rep=20, quantiles=[0.5, 0.2, 0.8])
    assert len(q) == 3 and all(np.isnan(q))
    assert np.isnan(do_bench(lambda: a.sum(), quantiles=[0.5]))
    for mode in ("min", "max", "mean", "median"):
        assert np.isnan(do_bench(lambda: a.sum(), return_mode=mode))
    assert do_bench(lambda: a.sum(), return_mode="all") == []


def test_under_a_profilers_injection_a_gpu_case_runs_once_instead_of_timing(monkeypatch):
    """The switch happens in Python before the CUDA timer (which would raise CuptiBusy)."""
    log = []
    monkeypatch.setenv(profile.INJECTION_ENV, "/opt/nsight/libToolsInjection64.so")
    monkeypatch.setattr(profile, "_Gpu", lambda device, stream: FakeGpu(log))
    from kbench.backends import cuda

    def no_timer(*a, **k):
        raise AssertionError("the CUDA timer must not run under a profiler's injection")
    monkeypatch.setattr(cuda, "run", no_timer)
    r = kbench.bench(lambda: log.append("call"), device="cuda:0", warmup_s=0.0)
    assert isinstance(r, profile.ProfileRun)
    assert "CUDA_INJECTION64_PATH" in r.extra["profile"]["why"]
    assert r.extra["profile"]["injection"] == "/opt/nsight/libToolsInjection64.so"
    i = log.index("start")
    assert log[i:i + 2] == ["start", "call"] and log.count("call") == 1 + profile.WARMUP_MIN_CALLS


def test_nvtx_without_torch_cupy_or_libnvtoolsext_is_reported_not_raised(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    n = profile._Nvtx()
    if n.source is None:
        assert n.push("x") is False and n.why
    else:                                   # a machine with libnvToolsExt: it is used
        assert n.source.startswith("libnvToolsExt")


PLUGIN_TESTS = """
import numpy as np

def test_add(kbench):
    r = kbench(np.add, np.ones(4), np.ones(4), warmup_s=0.0)
    assert kbench.disabled or r.profile
"""


def test_plugin_keeps_profile_runs_out_of_save_and_compare(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (KBENCH_ROOT, os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv(profile.ENV, "1")
    pytester.makepyfile(kbp_profile_test=PLUGIN_TESTS)
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                       "--kbench-save=out.json")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*1 benchmark(s) ran once for a profiler*"])
    assert not (pytester.path / "out.json").exists()


def test_the_profiled_call_runs_with_the_stream_made_current(monkeypatch):
    """profile mode ignored stream=: a torch/CuPy callable launched on its framework's current
    stream, not on the one the flush used and a timed bench measured."""
    from kbench.backends import cuda
    log = []
    entered = []

    class Ctx:
        def __enter__(self):
            entered.append(True)
            log.append("enter")

        def __exit__(self, *exc):
            entered.pop()
            log.append("exit")

    seen = []
    monkeypatch.setattr(cuda, "on_stream", lambda stream, ordinal, sets, kwargs:
                        seen.append((stream, ordinal)) or Ctx())

    def fn():
        log.append("call" if entered else "call off-stream")

    profile.run_once(fn, [()], {}, name="c", device="cuda:1", plan=_plan("cuda", "flush", "t"),
                     flush_bytes=None, warmup_s=0.0, correctness=None, backend=FakeGpu(log),
                     stream=1234)
    assert seen == [(1234, 1)]
    assert "call off-stream" not in log and log[0] == "enter" and log[-1] == "exit"
    # without a stream, the current one is entered all the same (cuda.on_stream picks it)
    log.clear()
    seen.clear()
    profile.run_once(fn, [()], {}, name="c", device="cuda:0", plan=_plan("cuda", None, "t"),
                     flush_bytes=None, warmup_s=0.0, correctness=None, backend=FakeGpu(log))
    assert seen == [(None, 0)] and "call off-stream" not in log
    # on the CPU there is no stream
    seen.clear()
    profile.run_once(lambda: None, [()], {}, name="c", device="cpu", plan=_plan("host", None, "t"),
                     flush_bytes=None, warmup_s=0.0, correctness=None, backend=FakeGpu(log))
    assert seen == []
