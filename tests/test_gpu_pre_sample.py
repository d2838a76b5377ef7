"""measure_cuda's pre_sample hook on a CUDA GPU: called once before every call of fn (priming and
warm-up included), never timed, never attributed, and an exception from it leaves kbench usable.

Skipped with the reason where no CUDA device is present (tests/conftest.py).
"""
import pytest

from kbench import _core

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="the GPU tests drive kernels through PyTorch")

# kbench.bench passes cupti_allow_foreign=True once torch.profiler is over (Kineto stays subscribed
# after a profile earlier in the session); calling _core directly, so do these tests.
QUICK = dict(device=0, warmup_s=0.05, max_time_s=0.3, busy_warmup_s=0.0, sample_clocks=False,
             cupti_allow_foreign=True)


def _counting(stream):
    """fn launching kbench's empty kernel, and a hook; both log their calls in order."""
    log = []

    def fn():
        log.append("fn")
        _core.launch_empty(stream, 0)

    def hook():
        log.append("hook")
    return fn, hook, log


@pytest.mark.parametrize("mode", ["events", "cupti"])
def test_the_hook_runs_once_before_every_call_of_fn(mode):
    s = torch.cuda.current_stream().cuda_stream
    fn, hook, log = _counting(s)
    raw = _core.measure_cuda(fn, ((),), None, stream=s, mode=mode, pre_sample=hook, **QUICK)
    assert log[0] == "hook" and log.count("hook") == log.count("fn")
    assert all(log[i:i + 2] == ["hook", "fn"] for i in range(0, len(log), 2))
    assert log.count("fn") > len(raw["samples"])          # priming and warm-up calls too
    cu = raw["cuda"]
    assert cu["pre_sample"] is True
    # bridges are extra calls of fn without a hook before them: off with a hook
    assert cu["keep_busy"]["enabled"] is False and cu["keep_busy"]["bridges"] == 0


def test_the_hooks_work_is_never_attributed_to_a_sample():
    s = torch.cuda.current_stream().cuda_stream
    buf = _core.DeviceBuffer(1 << 20, device=0)
    y = torch.ones(1 << 16, device="cuda")
    raw = _core.measure_cuda(lambda: _core.launch_empty(s, 0), ((),), None, stream=s,
                             mode="cupti", pre_sample=lambda: (buf.memset(0, s), y.mul_(1.0)),
                             **QUICK)
    cu = raw["cuda"]
    assert set(cu["kernels_per_iter"].tolist()) == {1}      # the empty kernel alone
    assert set(cu["copies_per_iter"].tolist()) == {0}       # the hook's memset is not in it
    assert len(cu["names"]) == 1


def test_the_hooks_work_is_not_timed():
    s = torch.cuda.current_stream().cuda_stream
    plain = _core.measure_cuda(lambda: _core.launch_empty(s, 0), ((),), None, stream=s,
                               mode="events", **QUICK)
    # ~0.5 ms of device time queued by the hook before each sample, outside its event pair
    hooked = _core.measure_cuda(lambda: _core.launch_empty(s, 0), ((),), None, stream=s,
                                mode="events", pre_sample=lambda: torch.cuda._sleep(1_000_000),
                                **QUICK)
    med = lambda r: float(sorted(r["samples"])[len(r["samples"]) // 2])   # noqa: E731
    assert med(hooked) < 3 * med(plain) + 20e-6


def test_graph_replays_each_get_one_hook_call():
    side = torch.cuda.Stream()
    s = side.cuda_stream
    g = _core.graph_capture(_core.launch_empty, ((s, 0),), None, stream=s, device=0, unroll=4)
    _, hook, log = _counting(s)
    replays = []

    def replay():
        replays.append(1)
        g.launch(s)
    raw = _core.measure_cuda(replay, ((),), None, stream=s, mode="cupti", unroll=4,
                             pre_sample=hook, **QUICK)
    assert log.count("hook") == len(replays) > len(raw["samples"])
    # the graph-replay timer divides each launch by its 4 calls
    assert set(raw["cuda"]["kernels_per_iter"].tolist()) == {4}


@pytest.mark.parametrize("mode", ["events", "cupti"])
def test_an_exception_from_the_hook_aborts_cleanly_and_propagates(mode):
    s = torch.cuda.current_stream().cuda_stream
    calls = []

    def hook():
        calls.append(1)
        if len(calls) == 20:            # inside a gated warm-up batch
            raise OSError("the hook failed")
    with pytest.raises(OSError, match="the hook failed") as e:
        _core.measure_cuda(lambda: _core.launch_empty(s, 0), ((),), None, stream=s, mode=mode,
                           pre_sample=hook, **QUICK)
    assert any("pre_sample" in n for n in getattr(e.value, "__notes__", []))
    # gate opened, CUPTI released, stream usable: the next measurement runs
    torch.cuda.synchronize()
    raw = _core.measure_cuda(lambda: _core.launch_empty(s, 0), ((),), None, stream=s,
                             mode=mode, **QUICK)
    assert len(raw["samples"]) > 0 and raw["cuda"]["pre_sample"] is False


def test_bench_passes_pre_sample_through():
    import kbench
    x = torch.ones(1 << 20, device="cuda")
    calls = []
    r = kbench.bench(torch.mul, x, 2.0, mode="events", cold_cache=None, warmup_s=0.05,
                     max_time_s=0.3, memory=False, pre_sample=lambda: calls.append(1))
    assert len(calls) > r.n       # every sample, and the priming and warm-up calls
