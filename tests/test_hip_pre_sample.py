"""pre_sample on the HIP backend: kbench.distributed's barrier, run before every replay (warm-up
included) outside the timed interval, as on the CPU and CUDA backends.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pytest

from kbench import _core
from kbench.backends import hip

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hip_forward"))
from run_fake import fake_dir, run_fake  # noqa: E402,F401 (fake_dir: a fixture)

pytestmark = pytest.mark.skipif(not getattr(_core, "HAVE_HIP", 0),
                                reason="kbench._core built with KBENCH_NO_CUDA=1: no HIP")


def test_pre_sample_before_every_replay_untimed(fake_dir):
    res = run_fake(fake_dir, """
        import time
        a = np.ones(1024, np.float32)
        g = c.hip_graph_capture(lambda x: x * 2, ((a,),), None, stream=1)
        calls = []
        def pre():
            calls.append(FAKE.kb_fake_launches())
            end = time.perf_counter() + 2e-3
            while time.perf_counter() < end:
                pass
        raw = c.measure_hip((g,), stream=1, pre_sample=pre, warmup_s=0.0, min_samples=5,
                            max_samples=5)
        out["calls"] = len(calls)
        out["launches_between"] = sorted(set(b - a for a, b in zip(calls, calls[1:])))
        out["n"], out["warmup"] = len(raw["samples"]), raw["warmup_iters"]
        out["max"] = max(raw["samples"])
        out["flag"] = raw["hip"]["pre_sample"]
        def boom():
            raise RuntimeError("barrier broke")
        out["boom"] = err(lambda: c.measure_hip((g,), stream=1, pre_sample=boom))
        out["after"] = len(c.measure_hip((g,), stream=1, warmup_s=0.0, min_samples=3,
                                         max_samples=3)["samples"])
        out["none"] = c.measure_hip((g,), stream=1, pre_sample=None, warmup_s=0.0,
                                    min_samples=3, max_samples=3)["hip"]["pre_sample"]
    """)
    assert res["flag"] is True and res["none"] is False
    assert res["calls"] == res["n"] + res["warmup"]          # one before every replay
    assert res["launches_between"] == [1]
    assert res["max"] < 1e-3, res["max"]       # the 2 ms in pre_sample is in no sample
    assert res["boom"]["type"] == "RuntimeError" and "barrier broke" in res["boom"]["msg"]
    assert any("pre_sample" in n and "gate was opened" in n for n in res["boom"]["notes"])
    assert res["after"] == 3


def test_a_fired_watchdog_with_pre_sample_raises_instead_of_running_the_chunk_again(fake_dir):
    """Re-measuring a chunk the watchdog opened calls pre_sample again on this rank alone: the
    other ranks' barriers go unmatched (a hang). As measure_cuda does, it raises, and the
    process stays usable. The fake blocks every launch behind the closed gate."""
    res = run_fake(fake_dir, """
        a = np.ones(1024, np.float32)
        g = c.hip_graph_capture(lambda x: x * 2, ((a,),), None, stream=1)
        calls = []
        out["fired"] = err(lambda: c.measure_hip((g,), stream=1, pre_sample=lambda: calls.append(1),
                                                 gate_timeout_s=0.02, warmup_s=0.0,
                                                 min_samples=5, max_samples=5))
        out["calls"] = len(calls)
        out["after"] = len(c.measure_hip((g,), stream=1, gate=False, warmup_s=0.0,
                                         min_samples=3, max_samples=3)["samples"])
    """, KB_FAKE_FULL_QUEUE="1")
    assert res["fired"]["type"] == "KbenchError", res
    assert "pre_sample the same number of times" in res["fired"]["msg"]
    assert "gate_timeout_s=0.02" in res["fired"]["msg"]
    assert res["calls"] >= 1 and res["after"] == 3


def test_distributed_bench_on_hip(fake_dir, tmp_path):
    """kbench.distributed at world 2 (a fake communicator playing rank 1) passes the barrier as
    pre_sample, keep_busy=False and regime='burst': the HIP backend takes all three, and the
    barrier runs once before every replay."""
    res = run_fake(fake_dir, f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from test_distributed import FakeComm
        import kbench.distributed as kd
        n = [0]
        orig = kd.Ranks.pre_sample
        def counted(self):
            n[0] += 1
            orig(self)
        kd.Ranks.pre_sample = counted
        r = kd.bench(lambda x: x * 2, np.ones(1024, np.float32), group=FakeComm(),
                     cold_cache=None, **B)
        out.update(n=r.n, warmup=r.stop["warmup_iters"], barriers=n[0],
                   flag=r.extra["hip"]["pre_sample"], barrier=r.extra["distributed"]["barrier"],
                   warnings=r.warnings)
    """, KBENCH_DIST_DIR=str(tmp_path))
    assert res["flag"] is True and res["barrier"] == "host barrier (allgather)"
    assert res["barriers"] == res["n"] + res["warmup"]
    assert any("regime='burst' is not applied" in w for w in res["warnings"])


def test_eager_estimate_follows_pre_sample_and_is_agreed():
    """The unroll estimate (torch path): each call after its barrier, and the slowest rank's
    figure, so every rank captures the same calls per graph."""
    import contextlib
    log = []

    class Side:
        def synchronize(self):
            log.append("s")

    class Torch:
        class cuda:
            @staticmethod
            def stream(side):
                return contextlib.nullcontext()

    class Peer:
        def reduce(self, stage, index, samples, values):
            log.append(stage)
            return np.maximum(samples, 1.0), values
    t = hip._eager_estimate(lambda: log.append("c"), [()], {}, Torch, Side(),
                            {"pre_sample": lambda: log.append("b"), "ranks": Peer()})
    assert "".join(x for x in log if x in "bc") == "bc" * 5
    assert t == 1.0 and "hip unroll estimate" in log
