"""kbench.testing drop-ins: triton's do_bench / do_bench_cudagraph and FlashInfer's
bench_gpu_time* return conventions, on the CPU (no GPU here)."""
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import kbench.testing as kt
from kbench.testing import (CpuFallbackWarning, _summarize, bench_gpu_time,
                            bench_gpu_time_with_cuda_event, bench_gpu_time_with_cudagraph,
                            bench_gpu_time_with_cupti, cuda_device_status, do_bench,
                            do_bench_cudagraph)

HOT = dict(cold_cache=None)
pytestmark = pytest.mark.skipif(cuda_device_status()[0],
                                reason="these tests pin the CPU fallback; a GPU is present")


def spin(seconds=1e-3):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_summarize_follows_triton_conventions():
    t = np.array([4.0, 1.0, 3.0, 2.0])
    assert _summarize(t, None, "mean") == 2.5
    assert _summarize(t, None, "min") == 1.0 and _summarize(t, None, "max") == 4.0
    assert _summarize(t, None, "median") == 2.5          # statistics.median, as Triton now
    assert _summarize(t, None, "all") == [4.0, 1.0, 3.0, 2.0]
    assert _summarize(t, [0.5], "mean") == 2.5           # one quantile: a float
    q = _summarize(t, [0.2, 0.5, 0.8], "mean")           # linear, as torch.quantile
    assert q == pytest.approx([1.6, 2.5, 3.4])
    assert isinstance(q, list)


def test_do_bench_returns_milliseconds_in_each_mode():
    ms = do_bench(spin, warmup=5, rep=40, **HOT)
    assert isinstance(ms, float) and ms >= 1.0           # spin() lasts at least 1 ms
    q = do_bench(spin, warmup=5, rep=40, quantiles=[0.2, 0.5, 0.8], **HOT)
    assert isinstance(q, list) and len(q) == 3 and q[0] <= q[1] <= q[2] and q[0] >= 1.0
    one = do_bench(spin, warmup=5, rep=40, quantiles=[0.5], **HOT)
    assert isinstance(one, float) and one >= 1.0
    r = do_bench(spin, warmup=5, rep=40, return_result=True, **HOT)
    assert r.device == "cpu" and r.cold_cache["mode"] == "none"
    assert r.stop["max_time_s"] == pytest.approx(0.040) and r.stop["warmup_s"] >= 0.005
    times = do_bench(spin, warmup=5, rep=40, return_mode="all", **HOT)
    assert isinstance(times, list) and len(times) >= 10 and min(times) >= 1.0


def test_do_bench_flushes_by_default_and_resets_grads():
    class Param:
        grad = "stale"

    params = [Param(), Param()]
    seen = []

    def step():
        seen.append(tuple(p.grad for p in params))
        for p in params:
            p.grad = "accumulated"

    r = do_bench(step, warmup=1, rep=5, grad_to_none=params, return_result=True,
                 flush_bytes=1 << 20)
    assert r.cold_cache["mode"] == "flush"
    assert seen and all(g == (None, None) for g in seen)


def test_do_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="return_mode must be one of"):
        do_bench(spin, return_mode="p99")
    with pytest.raises(ValueError, match="quantiles must be a list of numbers in"):
        do_bench(spin, quantiles=[0.5, 1.5])
    with pytest.raises(ValueError, match="rep must be a non-negative number of milliseconds"):
        do_bench(spin, rep=-1)
    with pytest.raises(TypeError, match="fn must be callable"):
        do_bench(42)


def test_do_bench_cudagraph_times_hot_on_the_cpu():
    r = do_bench_cudagraph(spin, rep=20, return_result=True)
    assert r.backend == "host" and r.cold_cache["mode"] == "none"
    ms = do_bench_cudagraph(spin, rep=20, quantiles=[0.1, 0.9])
    assert len(ms) == 2 and 1.0 <= ms[0] <= ms[1]


def test_cupti_dropin_returns_per_iteration_milliseconds():
    calls = []

    def kernel(a, scale=1.0):
        calls.append(1)
        spin(1e-3)
        return a * scale

    a = np.ones(16)
    times = bench_gpu_time_with_cupti(kernel, dry_run_iters=3, repeat_iters=25, input_args=(a,),
                                      input_kwargs={"scale": 2.0}, cold_l2_cache=False)
    assert isinstance(times, list) and len(times) == 25
    assert all(isinstance(t, float) and t >= 1.0 for t in times)
    assert len(calls) >= 3 + 25
    free = bench_gpu_time_with_cupti(kernel, input_args=(a,), repeat_time_ms=30,
                                     dry_run_time_ms=5, cold_l2_cache=False)
    assert len(free) >= 10 and min(free) >= 1.0
    r = bench_gpu_time_with_cupti(kernel, input_args=(a,), repeat_iters=10, dry_run_iters=1,
                                  return_result=True, flush_bytes=1 << 20)
    assert r.cold_cache["mode"] == "flush" and r.n == 10


def test_cupti_dropin_deprecations_and_errors():
    with pytest.warns(DeprecationWarning, match="l2_flush, l2_flush_size_mb, and "
                                                "l2_flush_device are deprecated"):
        r = bench_gpu_time_with_cupti(spin, repeat_iters=10, dry_run_iters=1, l2_flush=True,
                                      l2_flush_size_mb=1, return_result=True)
    assert r.cold_cache["mode"] == "flush" and r.cold_cache["flush_bytes"] == 1 << 20
    with pytest.warns(UserWarning, match="sleep_after_run is not supported"):
        bench_gpu_time_with_cupti(spin, repeat_iters=10, dry_run_iters=1,
                                  sleep_after_run=True, cold_l2_cache=False)
    with pytest.raises(ValueError, match="repeat_iters must be a non-negative integer"):
        bench_gpu_time_with_cupti(spin, repeat_iters=-1)
    with pytest.raises(ValueError, match="dry_run_time_ms must be a non-negative number"):
        bench_gpu_time_with_cupti(spin, dry_run_time_ms=-1)
    with pytest.raises(TypeError, match="input_args must be a tuple"):
        bench_gpu_time_with_cupti(spin, input_args=3)


# ------------------------------------------------------------------ upstream conformance

class Counter:
    """A callable that counts its calls (and does next to nothing)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1


class Param:
    grad = "stale"


class FakeTensor(Param):
    """Records what do_bench_cudagraph does to it, as a torch tensor would receive it."""

    def __init__(self):
        self.log = []

    def detach_(self):
        self.log.append("detach_")
        return self

    def requires_grad_(self, flag=True):
        self.log.append(("requires_grad_", flag))
        return self


def test_median_is_the_mean_of_the_two_middle_times_as_triton():
    # Triton >= PR #5490 summarises with statistics.median, as kbench's own Result median
    assert _summarize(np.array([1.0, 2.0, 3.0, 4.0]), None, "median") == 2.5
    assert _summarize(np.array([3.0, 1.0, 2.0]), None, "median") == 2.0
    r = do_bench(spin, warmup=0, rep=0, min_samples=4, return_result=True, **HOT)
    assert r.n == 4
    assert _summarize(np.asarray(r.samples) * 1e3, None, "median") == \
        pytest.approx(r.stats["median"] * 1e3)


def test_dropins_leave_peak_memory_alone_unless_asked():
    fn = Counter()
    r = do_bench(fn, warmup=1, rep=5, return_result=True, **HOT)
    assert r.memory is None                       # no probe: no calls, no counters reset
    assert fn.calls == r.stop["warmup_iters"] + r.n
    assert do_bench_cudagraph(fn, rep=5, return_result=True).memory is None
    assert bench_gpu_time_with_cupti(fn, dry_run_iters=1, repeat_iters=2, cold_l2_cache=False,
                                     return_result=True).memory is None
    asked = do_bench(fn, warmup=1, rep=5, memory=True, return_result=True, **HOT)
    assert asked.memory is not None               # still a kbench option


def test_zero_warmup_and_rep_are_accepted_as_triton_does():
    r = do_bench(spin, warmup=0, rep=0, return_result=True, **HOT)
    assert r.stop["warmup_s"] < 0.1 and r.stop["warmup_iters"] >= 1
    from kbench import _core
    assert r.n == _core.LOOP_DEFAULTS["min_samples"]      # rep=0: kbench's fewest samples
    assert do_bench(spin, warmup=0, rep=0, min_samples=1, return_result=True, **HOT).n == 1
    assert isinstance(do_bench(spin, warmup=0, rep=0, **HOT), float)
    assert isinstance(do_bench_cudagraph(spin, rep=0), float)


def test_numpy_scalars_are_accepted_and_bad_values_named():
    assert isinstance(do_bench(spin, warmup=np.int64(1), rep=np.float32(5), **HOT), float)
    assert isinstance(do_bench_cudagraph(spin, rep=np.int64(5)), float)
    times = bench_gpu_time_with_cupti(spin, dry_run_iters=np.int64(1), repeat_iters=np.int32(3),
                                      cold_l2_cache=False)
    assert len(times) == 3
    assert len(bench_gpu_time_with_cupti(spin, dry_run_time_ms=np.float64(1.0),
                                         repeat_iters=np.uint8(2), cold_l2_cache=False)) == 2
    with pytest.raises(TypeError, match=r"rep must be a number of milliseconds, got True \(bool"):
        do_bench(spin, rep=True)
    with pytest.raises(TypeError, match=r"warmup must be a number of milliseconds, got '5'"):
        do_bench(spin, warmup="5")
    with pytest.raises(ValueError, match=r"warmup must be a non-negative number of "
                                         r"milliseconds, got -1"):
        do_bench(spin, warmup=-1)
    with pytest.raises(ValueError, match=r"rep must be a non-negative number of milliseconds, "
                                         r"got nan"):
        do_bench_cudagraph(spin, rep=float("nan"))
    with pytest.raises(TypeError, match=r"repeat_iters must be a non-negative integer or None, "
                                        r"got 2.5 \(float"):
        bench_gpu_time_with_cupti(spin, repeat_iters=2.5)
    with pytest.raises(TypeError, match=r"dry_run_iters must be a non-negative integer or "
                                        r"None, got np.True_ \(bool"):
        bench_gpu_time_with_cupti(spin, dry_run_iters=np.True_)
    with pytest.raises(ValueError, match=r"dry_run_iters must be a non-negative integer or "
                                         r"None, got np.int64\(-2\)"):
        bench_gpu_time_with_cupti(spin, dry_run_iters=np.int64(-2))


def test_zero_counts_and_empty_quantiles_as_upstream():
    fn = Counter()
    assert bench_gpu_time_with_cupti(fn, repeat_iters=0, dry_run_iters=3) == []
    assert fn.calls == 0                                  # nothing to time: fn is not called
    with pytest.raises(ValueError, match="repeat_iters=0 times nothing"):
        bench_gpu_time_with_cupti(fn, repeat_iters=0, return_result=True)
    assert len(bench_gpu_time_with_cupti(fn, dry_run_iters=0, repeat_iters=3,
                                         cold_l2_cache=False)) == 3
    assert len(bench_gpu_time_with_cupti(fn, dry_run_time_ms=0, repeat_iters=3,
                                         cold_l2_cache=False)) == 3
    # a time budget is checked only where it is used: a count given replaces it
    assert len(bench_gpu_time_with_cupti(fn, dry_run_iters=1, dry_run_time_ms="unused",
                                         repeat_iters=2, repeat_time_ms=None,
                                         cold_l2_cache=False)) == 2
    from kbench import _core
    r = bench_gpu_time_with_cupti(fn, dry_run_iters=0, repeat_time_ms=0, cold_l2_cache=False,
                                  return_result=True)
    assert r.n == _core.LOOP_DEFAULTS["min_samples"]
    assert do_bench(spin, warmup=0, rep=0, quantiles=[], **HOT) == []
    assert do_bench_cudagraph(spin, rep=0, quantiles=[]) == []


def test_signatures_are_upstreams():
    import inspect

    def params(f):
        return [(p.name, p.default) for p in inspect.signature(f).parameters.values()
                if p.kind is p.POSITIONAL_OR_KEYWORD]
    # triton 3.9.0's python/triton/testing.py
    assert params(do_bench) == [("fn", inspect.Parameter.empty), ("warmup", 25), ("rep", 100),
                                ("grad_to_none", None), ("quantiles", None),
                                ("return_mode", "mean")]
    assert params(do_bench_cudagraph) == [("fn", inspect.Parameter.empty), ("rep", 20),
                                          ("grad_to_none", None), ("quantiles", None),
                                          ("return_mode", "mean")]
    # flashinfer/testing/utils.py
    assert params(bench_gpu_time_with_cupti) == [
        ("fn", inspect.Parameter.empty), ("dry_run_iters", None), ("repeat_iters", None),
        ("dry_run_time_ms", 25), ("repeat_time_ms", 100), ("l2_flush", None),
        ("l2_flush_size_mb", None), ("l2_flush_device", None), ("sleep_after_run", False),
        ("use_cuda_graph", False), ("input_args", ()), ("input_kwargs", None),
        ("cold_l2_cache", True), ("aggregate_op", max)]
    # older triton's fast_flush, by keyword: accepted, ignored
    assert isinstance(do_bench(spin, 1, 5, None, None, "min", fast_flush=False, **HOT), float)
    with pytest.raises(ValueError, match="took fast_flush in this position"):
        do_bench(spin, 1, 5, None, None, True)
    # aggregate_op, the 14th positional parameter: no effect in one process
    fn = Counter()
    times = bench_gpu_time_with_cupti(fn, 1, 3, 25, 100, None, None, None, False, False, (),
                                      None, False, min)
    assert len(times) == 3


def test_aggregate_op_warns_where_torch_distributed_has_ranks(monkeypatch):
    import sys
    import types

    import kbench.testing as kt
    dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 get_world_size=lambda: 4)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=dist))
    assert kt._world_size() == 4
    monkeypatch.undo()                          # the rest runs without the stand-in torch
    if "torch" not in sys.modules:
        assert kt._world_size() == 1
    monkeypatch.setattr(kt, "_world_size", lambda: 4)
    with pytest.warns(UserWarning, match="aggregate_op is not applied: the times are this "
                                         "rank's own"):
        times = bench_gpu_time_with_cupti(spin, dry_run_iters=1, repeat_iters=2,
                                          cold_l2_cache=False)
    assert len(times) == 2


def test_gpu_only_options_are_dropped_on_the_cpu_fallback(recwarn):
    ms = do_bench(spin, warmup=1, rep=5, mode="events", **HOT)
    assert isinstance(ms, float)
    mine = [w for w in recwarn if "GPU-only" in str(w.message)]
    assert len(mine) == 1 and "do_bench: no CUDA device" in str(mine[0].message)
    assert "mode='events'" in str(mine[0].message) and mine[0].filename == __file__
    recwarn.clear()
    r = do_bench_cudagraph(spin, rep=5, mode="graph", stream=None, return_result=True)
    assert r.backend == "host"
    (w,) = [w for w in recwarn if "GPU-only" in str(w.message)]
    assert "mode='graph'" in str(w.message) and "stream=None" in str(w.message)
    with pytest.warns(UserWarning, match=r"ignores the GPU-only options mode='cupti', gate=False"):
        times = bench_gpu_time_with_cupti(spin, dry_run_iters=1, repeat_iters=2,
                                          cold_l2_cache=False, mode="cupti", gate=False)
    assert len(times) == 2
    # what is simply invalid still raises, and so does a GPU mode on a device asked for
    with pytest.raises(ValueError, match="mode must be None or 'host' on the CPU"):
        do_bench(spin, mode="bogus")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        do_bench(spin, device="cpu", mode="events")
    with pytest.raises(TypeError, match="unexpected options"):
        do_bench(spin, targt=0.1)


def test_l2_flush_device_never_chooses_the_timing_device():
    for where in ("cuda:0", "cuda", "cuda:1"):
        with pytest.warns(DeprecationWarning, match="l2_flush_device are deprecated"):
            r = bench_gpu_time_with_cupti(spin, dry_run_iters=1, repeat_iters=2, l2_flush=False,
                                          l2_flush_device=where, return_result=True)
        assert r.device == "cpu" and r.n == 2


def test_dry_run_iters_untimed_call_count():
    # docs/dropin.md: dry_run_iters=N -> N untimed calls, then kbench's own warm-up, one call
    # on the CPU (warmup_s=0); nothing else
    fn = Counter()
    r = bench_gpu_time_with_cupti(fn, dry_run_iters=3, repeat_iters=5, cold_l2_cache=False,
                                  return_result=True)
    assert r.stop["warmup_iters"] == 1 and fn.calls == 3 + 1 + 5
    fn = Counter()
    times = bench_gpu_time_with_cupti(fn, dry_run_iters=0, repeat_iters=4, cold_l2_cache=False)
    assert len(times) == 4 and fn.calls == 0 + 1 + 4


def test_grad_to_none_is_tested_with_is_none_and_prepared_for_graphs():
    seen = []
    params = np.array([Param(), Param()], dtype=object)   # no truth value, as a tensor

    def step():
        seen.append(tuple(p.grad for p in params))
        for p in params:
            p.grad = "accumulated"

    do_bench(step, warmup=1, rep=5, grad_to_none=params, **HOT)
    assert seen and all(g == (None, None) for g in seen)
    # do_bench_cudagraph first makes each tensor a leaf that requires grad, as triton does;
    # a non-torch object without those methods only has its grad reset
    fake, plain = FakeTensor(), Param()
    seen.clear()

    def step2():
        seen.append((fake.grad, plain.grad))
        fake.grad = plain.grad = "accumulated"

    do_bench_cudagraph(step2, rep=5, grad_to_none=[fake, plain])
    assert fake.log == ["detach_", ("requires_grad_", True)]
    assert seen and all(g == (None, None) for g in seen)
    fake = FakeTensor()
    do_bench(spin, warmup=1, rep=5, grad_to_none=[fake], **HOT)
    assert fake.log == []                                  # do_bench only resets grads
    with pytest.raises(TypeError, match="grad_to_none must be an iterable"):
        do_bench(spin, grad_to_none=3)


# ------------------------------------------------------------------ issue 47: FlashInfer's
# other timers, the CPU fallback said, the module's names

FLASHINFER = (bench_gpu_time, bench_gpu_time_with_cupti, bench_gpu_time_with_cuda_event,
              bench_gpu_time_with_cudagraph)

def _params(f):
    import inspect
    return [(p.name, None if p.default is p.empty else p.default)
            for p in inspect.signature(f).parameters.values()
            if p.kind is p.POSITIONAL_OR_KEYWORD]


# flashinfer-python 0.7.4, flashinfer/testing/utils.py (fn has no default: None here)
_COMMON = [("fn", None), ("dry_run_iters", None), ("repeat_iters", None),
           ("dry_run_time_ms", 25), ("repeat_time_ms", 100)]
_L2 = [("l2_flush", None), ("l2_flush_size_mb", None), ("l2_flush_device", None)]
_INPUTS = [("input_args", ()), ("input_kwargs", None), ("cold_l2_cache", True),
           ("aggregate_op", max)]
FLASHINFER_0_7_4 = {
    "bench_gpu_time": _COMMON + _L2 + [("sleep_after_run", False), ("enable_cupti", False),
                                       ("use_cuda_graph", False),
                                       ("num_iters_within_graph", 10)] + _INPUTS,
    "bench_gpu_time_with_cuda_event": _COMMON + _L2 + [("sleep_after_run", False)] + _INPUTS,
    "bench_gpu_time_with_cudagraph": _COMMON + [("num_iters_within_graph", 10)] + _L2 +
    [("sleep_after_run", False)] + _INPUTS,
    "bench_gpu_time_with_cupti": _COMMON + _L2 + [("sleep_after_run", False),
                                                  ("use_cuda_graph", False)] + _INPUTS,
}


def test_flashinfer_signatures_are_0_7_4s():
    for f in FLASHINFER:
        assert _params(f) == FLASHINFER_0_7_4[f.__name__], f.__name__


def test_flashinfer_signatures_match_the_vendored_file_where_present():
    """Against FlashInfer's own file where a checkout has it (.whl/, git-ignored), read with
    ast: no torch needed."""
    import ast
    from pathlib import Path
    src = Path(kt.__file__).resolve().parents[1] / ".whl/flashinfer/flashinfer_testing_utils.py"
    if not src.is_file():
        pytest.skip(f"{src} is not here")
    tree = ast.parse(src.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in FLASHINFER_0_7_4:
            names = [a.arg for a in node.args.args]
            defaults = [None] * (len(names) - len(node.args.defaults)) + [
                ast.literal_eval(d) if not isinstance(d, ast.Name) else eval(d.id)
                for d in node.args.defaults]
            assert list(zip(names, defaults)) == FLASHINFER_0_7_4[node.name], node.name


@pytest.mark.parametrize("f", FLASHINFER, ids=lambda f: f.__name__)
def test_flashinfer_dropins_return_per_iteration_milliseconds(f):
    calls = []

    def kernel(a, scale=1.0):
        calls.append(1)
        spin(1e-3)
        return a * scale

    a = np.ones(16)
    times = f(kernel, dry_run_iters=2, repeat_iters=12, input_args=(a,),
              input_kwargs={"scale": 2.0}, cold_l2_cache=False)
    assert isinstance(times, list) and len(times) == 12
    assert all(isinstance(t, float) and t >= 1.0 for t in times)
    assert len(calls) >= 2 + 12
    free = f(kernel, input_args=(a,), repeat_time_ms=20, dry_run_time_ms=2, cold_l2_cache=False)
    assert len(free) >= 10 and min(free) >= 1.0
    r = f(kernel, input_args=(a,), repeat_iters=10, dry_run_iters=1, return_result=True,
          flush_bytes=1 << 20)
    assert r.cold_cache["mode"] == "flush" and r.n == 10 and r.device == "cpu"
    assert f(kernel, input_args=(a,), repeat_iters=0) == []


def test_bench_gpu_time_dispatches_as_flashinfer(monkeypatch):
    seen = []
    monkeypatch.setattr(kt, "_flashinfer", lambda where, mode, fn, budget, cold, sleep, args,
                        kwargs, calls, ret, opts: seen.append((mode, calls, cold)) or [])
    bench_gpu_time(spin)
    bench_gpu_time(spin, use_cuda_graph=True, num_iters_within_graph=4, cold_l2_cache=False)
    bench_gpu_time(spin, enable_cupti=True)
    bench_gpu_time(spin, enable_cupti=True, use_cuda_graph=True)
    with pytest.warns(DeprecationWarning, match="l2_flush_device are deprecated"):
        bench_gpu_time(spin, l2_flush=False)
    assert seen == [("events", None, (True, None)), ("graph", 4, (False, None)),
                    ("cupti", None, (True, None)), ("graph", None, (True, None)),
                    ("events", None, (False, None))]
    with pytest.raises(ValueError, match="num_iters_within_graph must be a positive integer"):
        bench_gpu_time(spin, use_cuda_graph=True, num_iters_within_graph=0)


def test_flashinfer_flags_as_kbench_options_on_a_gpu():
    """What each timer asks kbench for on a GPU device (no GPU needed to read it)."""
    small, big = (np.ones(16),), (np.ones(1 << 19),)            # 128 B and 4 MiB
    assert kt._fi_timer("events", True, small, "cuda:0", None) == \
        {"cold_cache": "flush", "mode": "events"}
    assert kt._fi_timer("cupti", False, small, "cuda:0", None) == \
        {"cold_cache": None, "mode": "cupti"}
    # cudagraph: rotating copies where the positional inputs suit it, else a flush between
    # replays of one call each; hot: num_iters_within_graph calls per replay
    assert kt._fi_timer("graph", True, big, "cuda:0", 10) == \
        {"cold_cache": "rotate", "mode": "graph", "unroll": 10}
    assert kt._fi_timer("graph", True, small, "cuda:0", 10) == \
        {"cold_cache": "flush", "mode": "graph"}
    assert kt._fi_timer("graph", False, small, "cuda:0", 10) == \
        {"cold_cache": None, "mode": "graph", "unroll": 10}
    assert kt._fi_timer("graph", True, big, "cpu", 10) == {"cold_cache": "flush"}
    assert kt._fi_flush(None, None, None, True, 1) == (True, None)
    with pytest.warns(DeprecationWarning):
        assert kt._fi_flush(None, 8, "cuda", True, 1) == (True, 8 << 20)


def test_cudagraph_dropin_deprecations_and_ignored_flags():
    with pytest.warns(DeprecationWarning, match="For CUDA graphs, cold_l2_cache uses rotating"):
        r = bench_gpu_time_with_cudagraph(spin, repeat_iters=3, dry_run_iters=0, l2_flush=False,
                                          return_result=True)
    assert r.cold_cache["mode"] == "none"
    for f in FLASHINFER:
        with pytest.warns(UserWarning, match=f"{f.__name__}: sleep_after_run is not supported"):
            f(spin, repeat_iters=2, dry_run_iters=0, sleep_after_run=True, cold_l2_cache=False)
    with pytest.raises(TypeError, match="num_iters_within_graph must be a non-negative integer"):
        bench_gpu_time_with_cudagraph(spin, num_iters_within_graph=2.5)


def test_the_cpu_fallback_is_said_once_per_process(monkeypatch):
    monkeypatch.setattr(kt, "_cpu_fallback_said", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        do_bench(spin, warmup=0, rep=0, device="cpu", **HOT)       # the CPU asked for: quiet
        bench_gpu_time(spin, repeat_iters=2, device="cpu", cold_l2_cache=False)
    assert not [w for w in caught if w.category is CpuFallbackWarning]
    with pytest.warns(CpuFallbackWarning) as said:
        bench_gpu_time(spin, repeat_iters=2, cold_l2_cache=False)
    (w,) = [w for w in said if w.category is CpuFallbackWarning]
    assert issubclass(CpuFallbackWarning, UserWarning) and w.filename == __file__
    msg = str(w.message)
    assert msg.startswith("kbench.testing.bench_gpu_time: no CUDA device (")
    assert "CPU times, not GPU kernel times" in msg and "device='cpu'" in msg
    assert "\n" not in msg and "Tried" not in msg
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for f in (do_bench, do_bench_cudagraph):
            f(spin, rep=0)
        for f in FLASHINFER:
            f(spin, repeat_iters=2, cold_l2_cache=False)
    assert not [w for w in caught if w.category is CpuFallbackWarning]


def test_a_triton_script_on_a_cpu_host_is_told_once(tmp_path):
    script = tmp_path / "bench_matmul.py"
    script.write_text("import numpy as np\n"
                      "from kbench.testing import do_bench, bench_gpu_time\n"
                      "a = np.ones((64, 64))\n"
                      "for _ in range(3):\n"
                      "    print(do_bench(lambda: a @ a, rep=5))\n"
                      "print(len(bench_gpu_time(lambda: a @ a, repeat_iters=3)))\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("CpuFallbackWarning: kbench.testing.do_bench: no CUDA device") == 1
    assert p.stderr.count("CpuFallbackWarning") == 1, p.stderr
    # a CI can refuse it (-W cannot name it: -W is read before site-packages is on sys.path)
    strict = tmp_path / "strict.py"
    strict.write_text("import warnings\nfrom kbench.testing import CpuFallbackWarning\n"
                      "warnings.simplefilter('error', CpuFallbackWarning)\n"
                      + script.read_text())
    p = subprocess.run([sys.executable, str(strict)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "CpuFallbackWarning: kbench.testing.do_bench" in p.stderr


def test_the_module_lists_only_what_it_offers():
    assert dir(kt) == sorted(kt.__all__)
    assert not {"Any", "Callable", "np", "functools", "annotations", "warnings"} & set(dir(kt))
    assert all(callable(getattr(kt, name)) for name in kt.__all__)
    assert set(kt.__all__) >= {f.__name__ for f in FLASHINFER} | {"do_bench",
                                                                   "do_bench_cudagraph"}
