"""The workflow tools on a CUDA GPU with PyTorch: drop-ins, the fixture, A/B and sweep.
Skipped (with the reason) where there is no GPU or no torch."""
import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.gpu

QUICK = dict(warmup_s=0.05, max_time_s=0.5)


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def test_do_bench_times_on_the_current_device(torch):
    from kbench.testing import do_bench, do_bench_cudagraph
    x = torch.randn(1 << 22, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=5, rep=50)
    assert isinstance(ms, float) and 0 < ms < 10
    r = do_bench(lambda: y.copy_(x), warmup=5, rep=50, return_result=True)
    assert r.device.startswith("cuda") and r.cold_cache["mode"] == "flush"
    q = do_bench(lambda: y.copy_(x), warmup=5, rep=50, quantiles=[0.2, 0.5, 0.8])
    assert len(q) == 3 and q[0] <= q[1] <= q[2]
    g = do_bench_cudagraph(lambda: y.copy_(x), rep=20, return_result=True)
    assert g.extra["mode"] == "graph" and g.cold_cache["mode"] == "none"
    assert isinstance(do_bench_cudagraph(lambda: y.copy_(x), rep=20), float)


def test_cupti_dropin_gives_exactly_repeat_iters_kernel_times(torch):
    from kbench.testing import bench_gpu_time_with_cupti
    a = torch.randn(1024, 1024, device="cuda")
    times = bench_gpu_time_with_cupti(torch.matmul, input_args=(a, a), repeat_iters=30,
                                      dry_run_iters=3)
    assert len(times) == 30 and all(0 < t < 100 for t in times)
    r = bench_gpu_time_with_cupti(torch.matmul, input_args=(a, a), repeat_iters=12,
                                  return_result=True)
    assert r.extra["mode"] == "cupti" and r.n == 12 and r.cold_cache["mode"] == "flush"


def test_flashinfer_timers_map_to_kbench_modes(torch):
    """bench_gpu_time's dispatch (issue 47): events, graph (rotating copies of 16 MB inputs,
    or hot), cupti; exactly repeat_iters times each, in milliseconds, without a CPU fallback."""
    import warnings
    from kbench.testing import (CpuFallbackWarning, bench_gpu_time,
                                bench_gpu_time_with_cuda_event, bench_gpu_time_with_cudagraph)
    a = torch.randn(2048, 2048, device="cuda")
    cases = [(bench_gpu_time_with_cuda_event, {}, "events", "flush"),
             (bench_gpu_time_with_cudagraph, {}, "graph", "rotate"),
             (bench_gpu_time_with_cudagraph, {"cold_l2_cache": False}, "graph", "none"),
             (bench_gpu_time, {}, "events", "flush"),
             (bench_gpu_time, {"use_cuda_graph": True}, "graph", "rotate"),
             (bench_gpu_time, {"enable_cupti": True}, "cupti", "flush")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuFallbackWarning)
        for f, flags, mode, cold in cases:
            times = f(torch.matmul, input_args=(a, a), repeat_iters=12, dry_run_iters=2, **flags)
            assert len(times) == 12 and all(0 < t < 100 for t in times), (f.__name__, flags)
            r = f(torch.matmul, input_args=(a, a), repeat_iters=12, return_result=True, **flags)
            assert (r.extra["mode"], r.cold_cache["mode"]) == (mode, cold), (f.__name__, flags)


def test_ab_and_sweep_on_gpu_kernels(torch):
    import kbench
    x = torch.randn(1 << 22, device="cuda")

    def once(x):
        return x * 2.0

    def twice(x):
        return (x * 2.0) * 1.0 + 0.0

    r = kbench.ab({"baseline": once, "candidate": twice}, x, trials=6, **QUICK)
    assert r.verdict.startswith("candidate slower by")

    def case(n):
        src = torch.ones(n, device="cuda")
        dst = torch.empty_like(src)
        return {"fn": dst.copy_, "args": (src,), "bytes": 2 * src.nbytes}

    s = kbench.sweep(case, {"n": [1 << 16, 1 << 22]}, **QUICK)
    assert [row["n"] for row in s.rows] == [1 << 16, 1 << 22]
    assert s.rows[1]["bytes_per_s"] > s.rows[0]["bytes_per_s"]     # small copies: latency
    assert s.plot().get_xscale() == "log"


def test_fixture_on_gpu(pytester, torch, monkeypatch):
    import os
    import kbench
    root = os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    pytester.makepyfile(kbp_gpu_fixture_test="""
        import pytest
        import torch

        @pytest.mark.kbench_gpu
        def test_copy(kbench):
            x = torch.randn(1 << 20, device="cuda")
            y = torch.empty_like(x)
            r = kbench(y.copy_, x, bytes=2 * x.nbytes, check=x, warmup_s=0.05, max_time_s=0.3)
            assert r.device.startswith("cuda") and r.correctness["ok"]
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kbench-save=s.json")
    res.assert_outcomes(passed=1)
