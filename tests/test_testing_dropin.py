"""kbench.testing drop-ins: triton's do_bench / do_bench_cudagraph and FlashInfer's
bench_gpu_time_with_cupti return conventions, on the CPU (no GPU here)."""
import time

import numpy as np
import pytest

from kbench.testing import (_summarize, bench_gpu_time_with_cupti, cuda_device_status,
                            do_bench, do_bench_cudagraph)

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
    assert _summarize(t, None, "median") == 2.0          # torch.median: the lower median
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
    with pytest.raises(ValueError, match="rep must be a positive number of milliseconds"):
        do_bench(spin, rep=0)
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
    with pytest.raises(ValueError, match="repeat_iters must be a positive integer"):
        bench_gpu_time_with_cupti(spin, repeat_iters=0)
    with pytest.raises(ValueError, match="dry_run_time_ms must be a positive number"):
        bench_gpu_time_with_cupti(spin, dry_run_time_ms=-1)
    with pytest.raises(TypeError, match="input_args must be a tuple"):
        bench_gpu_time_with_cupti(spin, input_args=3)
