"""kbench.distributed in one process: the C loop with a rank reducer over a fake communicator
that plays a second rank, the header check, the watchdog, the report and bad inputs."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from kbench import _core
from kbench.workflow.cli_compare import compare_sets
from kbench.distributed import (DistributedError, DistributedTimeout, Ranks, rank_rng,
                                rank_seed, set_lent_machine_env)
from kbench.distributed._comm import Communicator, Pending, communicator
from kbench.distributed._report import skew_stats
from kbench.report.result import Result


class _Done(Pending):
    def __init__(self, rows):
        self.rows = rows

    def test(self):
        return True

    def result(self):
        return self.rows


class _Never(Pending):
    def test(self):
        return False


class FakeComm(Communicator):
    """Rank 0 of 2; rank 1's payload rows are other(row). Headers alternate with payloads
    (a header's third entry is its payload's length)."""
    engine, backend, world, rank, local_world, nodes = "fake", "fake", 2, 0, 2, 1

    def __init__(self, other=lambda row: row, header=lambda h: h, hang_at=None):
        self.other, self.header, self.hang_at = other, header, hang_at
        self.payload_next, self.calls = False, 0

    def start_allgather(self, row):
        self.calls += 1
        if self.hang_at is not None and self.calls >= self.hang_at:
            return _Never()
        if self.payload_next:
            self.payload_next = False
            return _Done(np.stack([row, self.other(row.copy())]))
        self.payload_next = row[2] > 0
        return _Done(np.stack([row, self.header(row.copy())]))

    def bcast_str(self, text, timeout_s=60.0):
        return text


@pytest.fixture
def ranks_of(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_DIST_DIR", str(tmp_path))
    made = []

    def make(comm, timeout_s=5.0):
        r = Ranks(comm, timeout_s)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_loop_times_the_maxima_of_every_sample(ranks_of):
    def other(row):           # rank 1: every sample 3x this rank's, decision values as here
        return row * 3
    ranks = ranks_of(FakeComm(other))
    raw = _core.measure_host(spin, ((20e-6,),), None, ranks=ranks, pre_sample=ranks.pre_sample,
                             warmup_s=0.01, max_time_s=0.3, min_samples=10)
    per = ranks.per_rank()
    assert per.shape == (2, len(raw["samples"]))
    assert np.array_equal(raw["samples"], per.max(axis=0))
    assert np.allclose(per[1], 3 * per[0])
    assert np.median(raw["samples"]) >= 3 * 20e-6


def test_time_decisions_are_the_slowest_ranks():
    """Another rank reports huge elapsed times: this rank's warm-up and sampling stop on them,
    though its own clock says almost no time has passed. The rank wrapper agrees every step's
    (elapsed, timer step, sampling floor), and the loop reads its clock."""
    class SlowPeer:
        def reduce(self, stage, index, samples, values):
            if values.size == 3:
                values[0] = 1e4 * (index + 1)    # its elapsed time, 1e4 s a step
            return samples, values
    t0 = time.monotonic()
    raw = _core.measure_host(spin, ((5e-6,),), None, ranks=SlowPeer(), warmup_s=5.0,
                             max_time_s=60.0, min_samples=10, target=1e-9)
    assert time.monotonic() - t0 < 2.0
    assert raw["stop"] == "time_cap" and len(raw["samples"]) == 10
    assert raw["warmup_iters"] == 1       # warmup_min: the peer's 1e4 s is past warmup_s


def test_a_peers_timer_step_and_sampling_floor_hold_this_rank_too():
    """The wrapper agrees the backend's timer step and sampling floor after every step: a peer
    whose timer is coarser and whose floor is longer sets both here. The reducer sees the
    warm-up, its end once, then the sampling."""
    class CoarsePeer:
        def __init__(self):
            self.stages = []

        def reduce(self, stage, index, samples, values):
            self.stages.append(stage)
            if values.size == 3:
                values[1], values[2] = max(values[1], 1e-3), max(values[2], 0.2)
            return samples, values
    peer = CoarsePeer()
    raw = _core.measure_host(spin, ((5e-6,),), None, ranks=peer, warmup_s=0.01,
                             max_time_s=0.05, min_samples=10)
    assert raw["resolution_s"] == 1e-3
    assert raw["stop"] in ("budget", "precision") and raw["sampling_s"] >= 0.2
    end = peer.stages.index("warmup end")
    assert set(peer.stages[:end]) == {"warmup batch"} and peer.stages.count("warmup end") == 1
    assert set(peer.stages[end + 1:]) == {"sample batch"}


def test_pre_sample_runs_before_every_call_untimed(ranks_of):
    log = []
    raw = _core.measure_host(lambda: log.append("c"), ((),), None,
                             pre_sample=lambda: (log.append("b"), spin(2e-3)),
                             warmup_s=0.0, min_samples=5, max_samples=5)
    assert "".join(log) == "bc" * (5 + raw["warmup_iters"])
    assert max(raw["samples"]) < 1e-3       # the 2 ms in pre_sample is outside every sample


def test_pre_sample_error_leaves_the_process_usable():
    def boom():
        raise RuntimeError("barrier broke")
    with pytest.raises(RuntimeError, match="barrier broke") as ei:
        _core.measure_host(lambda: None, ((),), None, pre_sample=boom)
    assert any("pre_sample" in n for n in getattr(ei.value, "__notes__", []))
    assert len(_core.measure_host(lambda: None, ((),), None, warmup_s=0.0, min_samples=3,
                                  max_samples=3)["samples"]) == 3


def test_header_mismatch_names_the_stage_and_the_rank(ranks_of):
    def ahead(h):
        h[0] += 1             # rank 1 is one collective ahead: it skipped one
        return h
    ranks = ranks_of(FakeComm(header=ahead))
    with pytest.raises(DistributedError, match=r"out of step at stage 'check'.*rank 1"):
        ranks.barrier("check")


def test_payload_length_mismatch(ranks_of):
    def longer(h):
        h[2] += 1
        return h
    ranks = ranks_of(FakeComm(header=longer))
    with pytest.raises(DistributedError, match="sent"):
        ranks.exchange("report", np.ones(3))


def test_watchdog_names_the_stage_and_the_rank_within_the_bound(ranks_of):
    ranks = ranks_of(FakeComm(hang_at=1), timeout_s=0.3)
    # rank 1's marker: stuck one collective earlier
    with open(os.path.join(ranks.markers.dir, "rank1"), "w") as f:
        f.write(f"0 {time.time():.3f} sample 36 barrier\n")
    t0 = time.monotonic()
    with pytest.raises(DistributedTimeout) as ei:
        ranks.barrier("sample 37 barrier")
    took = time.monotonic() - t0
    assert 0.3 <= took < 1.0
    msg = str(ei.value)
    assert "stage 'sample 37 barrier'" in msg and "rank 1 (at 'sample 36 barrier'" in msg


def test_watchdog_without_a_visible_marker(ranks_of):
    ranks = ranks_of(FakeComm(hang_at=1), timeout_s=0.2)
    with pytest.raises(DistributedTimeout, match="rank 1 \\(marker not visible"):
        ranks.barrier("report")


def test_an_engine_failure_names_the_stage(ranks_of):
    class Broken(Pending):
        def test(self):
            return True

        def result(self):
            raise RuntimeError("Connection closed by peer")

    class PeerGone(FakeComm):
        def start_allgather(self, row):
            return Broken()
    ranks = ranks_of(PeerGone())
    with pytest.raises(DistributedError, match="stage 'report'.*Connection closed by peer"):
        ranks.barrier("report")


def test_skew_stats():
    per = np.array([[1.0, 1.0, 1.0, 2.0], [2.0, 2.0, 2.0, 1.0]])
    s = skew_stats(per)
    assert s["per_rank_median_s"] == [1.0, 2.0] and s["slowest_rank"] == 1
    assert s["skew"] == pytest.approx(0.5) and s["max_share"] == [0.25, 0.75]


def test_report_rows_and_round_trip():
    samples = np.array([1e-3, 1.1e-3, 1.2e-3])
    r = Result(name="allreduce", device="cuda:0", backend="events", samples=samples,
               stats=_core.summarize(samples, 0.95), stop={"stop": "precision"},
               cold_cache={"mode": "none"},
               extra={"distributed": {"world": 2, "local_world": 2, "nodes": 1,
                                      "multi_node": False, "engine": "torch.distributed",
                                      "backend": "nccl", "versions": {"nccl": "2.21.5"},
                                      "per_rank_median_s": [1e-3, 1.1e-3], "skew": 0.08,
                                      "slowest_rank": 1, "barrier": "device",
                                      "topology": {"pairs": [{"a": 0, "b": 1, "read": "OK",
                                                              "nvlink": "OK", "atomics": "OK",
                                                              "common_ancestor": "x"}]}}})
    text = repr(Result.from_dict(r.to_dict()))
    for want in ("Ranks:", "world 2", "Per rank:", "slowest rank 1", "nccl 2.21.5",
                 "Topology:", "NVLink OK"):
        assert want in text


def test_compare_notes_a_change_of_world_size():
    def res(world, median):
        s = median * (1 + 0.01 * np.random.default_rng(world).standard_normal(50))
        extra = {"distributed": {"world": world}} if world > 1 else {}
        return Result(name="ar", device="cuda:0", backend="events", samples=s,
                      stats=_core.summarize(s, 0.95), stop={}, cold_cache={},
                      extra=extra).to_dict()
    cmp = compare_sets({"ar": res(1, 1e-3)}, {"ar": res(2, 2e-3)})
    assert "world size 1 -> 2" in cmp.deltas[0].note
    same = compare_sets({"ar": res(2, 1e-3)}, {"ar": res(2, 2e-3)})
    assert "world size" not in same.deltas[0].note


def test_rank_seeds_are_distinct_and_reproducible():
    assert rank_seed(0) != rank_seed(1) and rank_seed(1, 5) == rank_seed(1, 5)
    assert rank_rng(2, 9).random() == rank_rng(2, 9).random()


def test_lent_machine_env_is_set_without_overriding():
    env = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "7"}
    set_lent_machine_env(env)
    assert env == {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "7",
                   "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    assert os.environ.get("NCCL_NVLS_ENABLE") == "0"     # set on import of kbench.distributed


def test_bad_inputs(ranks_of):
    with pytest.raises(TypeError, match="ranks must be None or a rank reducer"):
        _core.measure_host(lambda: None, ((),), None, ranks=3)
    with pytest.raises(TypeError, match="pre_sample must be None or a callable"):
        _core.measure_host(lambda: None, ((),), None, pre_sample=3)
    with pytest.raises(ValueError, match="dist_timeout_s"):
        ranks_of(FakeComm(), timeout_s=-1)
    with pytest.raises(ValueError, match="group must be"):
        communicator("everyone")
    with pytest.raises(TypeError, match="group must be"):
        communicator(object())


def test_a_reducer_returning_the_wrong_length_is_refused():
    class Short:
        def reduce(self, stage, index, samples, values):
            return samples[:-1] if samples.size else samples, values
    with pytest.raises(ValueError, match="maxima"):
        _core.measure_host(lambda: None, ((),), None, ranks=Short(), warmup_s=0.0,
                           min_samples=3)


def test_graph_modes_eager_probe_is_agreed(ranks_of, monkeypatch):
    """mode='graph' chooses its unroll from an eager probe: under kbench.distributed that probe
    gets the run's reducer and barrier too, and the reducer forgets the probe's samples."""
    from kbench.backends import cuda as kcuda
    seen, restarted = {}, []

    def fake_measure_cuda(fn, sets, kwargs, **opts):
        seen.update(opts)
        return {"samples": [1e-6, 2e-6, 3e-6]}
    monkeypatch.setattr(_core, "measure_cuda", fake_measure_cuda, raising=False)
    ranks = ranks_of(FakeComm())
    monkeypatch.setattr(ranks, "start_run", lambda: restarted.append(1))
    t, _ = kcuda._estimate_eager(lambda: None, [()], {}, 1, 0, "events", ranks.pre_sample, ranks)
    assert t == 2e-6 and seen["ranks"] is ranks
    assert seen["pre_sample"] == ranks.pre_sample
    assert restarted == [1]
    seen.clear()
    kcuda._estimate_eager(lambda: None, [()], {}, 1, 0, "events")
    assert "ranks" not in seen and seen["pre_sample"] is None


class SoloComm(Communicator):
    """World 1: every allgather returns this rank's row; counts the barriers it carries."""
    engine, backend, world, rank, local_world, nodes = "fake", "fake", 1, 0, 1, 1

    def __init__(self):
        self.calls = 0

    def start_allgather(self, row):
        self.calls += 1
        return _Done(np.asarray(row, dtype=np.float64)[None, :])

    def bcast_str(self, text, timeout_s=60.0):
        return text


def test_world_1_skips_the_per_call_barrier_unless_asked(tmp_path, monkeypatch):
    """One rank has nobody to line up with: by default no barrier runs before each call (its
    idle let a power-capped GEMM clock higher than the single-GPU path); barrier=True forces it."""
    import kbench.distributed as kd
    monkeypatch.setenv("KBENCH_DIST_DIR", str(tmp_path))
    a = np.ones(1000)
    opts = dict(device="cpu", cold_cache=None, min_samples=50, max_samples=50, warmup_s=0.0)
    solo = SoloComm()
    r = kd.bench(np.sum, a, group=solo, **opts)
    default_calls = solo.calls
    assert r.extra["distributed"]["barrier"].startswith("none (world 1")
    forced = SoloComm()
    rf = kd.bench(np.sum, a, group=forced, barrier=True, **opts)
    assert rf.extra["distributed"]["barrier"] == "host barrier (allgather)"
    # one header exchange per barrier: at least one per timed call when forced
    assert forced.calls - default_calls >= rf.n, (forced.calls, default_calls, rf.n)


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf"), True, "5"])
def test_dist_timeout_s_is_checked_on_every_call_not_only_the_first(tmp_path, monkeypatch, bad):
    # a later call's NaN never expired (monotonic() > nan is never true), -1 timed out at once
    import kbench.distributed as kd
    monkeypatch.setenv("KBENCH_DIST_DIR", str(tmp_path))
    solo = SoloComm()
    opts = dict(device="cpu", cold_cache=None, min_samples=20, max_samples=20, warmup_s=0.0)
    kd.bench(np.sum, np.ones(100), group=solo, dist_timeout_s=5.0, **opts)
    with pytest.raises(ValueError, match="dist_timeout_s must be a positive number"):
        kd.bench(np.sum, np.ones(100), group=solo, dist_timeout_s=bad, **opts)


def test_a_collective_given_up_on_is_kept_and_its_communicator_refused(ranks_of, tmp_path,
                                                                      monkeypatch):
    """A DistributedTimeout (or Ctrl-C) left the engine owning buffers kbench then freed: the
    late rank's allgather wrote into reused memory. The pending collective is kept; the next
    collective and the next bench on that communicator are refused by name."""
    import kbench.distributed as kd
    from kbench.distributed import _comm
    comm = FakeComm(hang_at=1)
    ranks = ranks_of(comm, timeout_s=0.2)
    with pytest.raises(DistributedTimeout):
        ranks.barrier("report")
    kept = _comm._abandoned[-1]
    assert isinstance(kept, _Never)
    with pytest.raises(DistributedError, match="this communicator is unusable.*stage 'report'"):
        ranks.barrier("again")
    monkeypatch.setenv("KBENCH_DIST_DIR", str(tmp_path))
    with pytest.raises(DistributedError, match="this communicator is unusable"):
        kd.bench(np.sum, np.ones(10), group=comm, device="cpu", cold_cache=None)

    class Interrupted(Pending):        # Ctrl-C while polling: kept the same way
        polled = 0

        def test(self):
            self.polled += 1
            if self.polled == 1:
                raise KeyboardInterrupt
            return False

    class CtrlC(FakeComm):
        def start_allgather(self, row):
            return Interrupted()
    ranks = ranks_of(CtrlC())
    with pytest.raises(KeyboardInterrupt):
        ranks.barrier("report")
    assert any(isinstance(p, Interrupted) for p in _comm._abandoned)
    with pytest.raises(DistributedError, match="unusable.*KeyboardInterrupt"):
        ranks.barrier("again")


def test_a_completed_abandoned_collective_is_let_go():
    from kbench.distributed import _comm

    class Later(Pending):
        done = False

        def test(self):
            return self.done
    first = Later()
    _comm.abandon(object(), first, "test")
    assert first in _comm._abandoned
    first.done = True
    _comm.abandon(object(), Later(), "test")
    assert first not in _comm._abandoned


class _FakeTensor:
    def __init__(self, a):
        self.a = a

    def numpy(self):
        return self.a


def _fake_torch(monkeypatch, world, members, new_group):
    """torch and torch.distributed as far as TorchCommunicator uses them: an NCCL subgroup of
    `members`, this rank its first."""
    import sys
    import types
    torch = types.ModuleType("torch")
    dist = types.ModuleType("torch.distributed")
    torch.distributed = dist
    torch.__version__ = "fake"
    torch.from_numpy = _FakeTensor
    torch.empty_like = lambda t: _FakeTensor(np.empty_like(t.a))

    class Work:
        def is_completed(self):
            return True

        def wait(self):
            return None

    def all_gather(parts, t, group=None, async_op=False):
        for p in parts:
            p.a[...] = t.a
        return Work()
    dist.group = types.SimpleNamespace(WORLD=object())
    dist.get_backend = lambda g: "nccl"
    dist.get_rank = lambda g=None: 0
    dist.get_world_size = lambda g=None: world if g is None else len(members)
    dist.get_process_group_ranks = lambda g: list(members)
    dist.new_group = new_group
    dist.all_gather = all_gather
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    return dist


def test_an_nccl_subgroups_gloo_side_group_is_made_by_its_members_alone(monkeypatch):
    """Only the members call kbench: a plain new_group (every rank must enter it) named the
    side group by the global counter, so TP groups [0,1] and [2,3] met in one rendezvous; and
    it waited torch's timeout, not dist_timeout_s."""
    from datetime import timedelta
    from kbench.distributed._comm import TorchCommunicator
    calls = []

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
                  use_local_synchronization=False, group_desc=None, device_id=None):
        calls.append(dict(ranks=ranks, backend=backend, timeout=timeout,
                          use_local_synchronization=use_local_synchronization))
        return object()
    _fake_torch(monkeypatch, 4, [2, 3], new_group)
    c = TorchCommunicator(object(), timeout_s=7.0)
    assert calls == [dict(ranks=[2, 3], backend="gloo", timeout=timedelta(seconds=7.0),
                          use_local_synchronization=True)]
    assert c.world == 2 and c.local_world == 2
    # the whole world: every rank calls kbench, the plain collective call is right
    calls.clear()
    _fake_torch(monkeypatch, 2, [0, 1], new_group)
    TorchCommunicator(object(), timeout_s=7.0)
    assert calls[0]["use_local_synchronization"] is False and calls[0]["ranks"] == [0, 1]
    assert calls[0]["timeout"] == timedelta(seconds=7.0)


def test_a_new_group_never_gets_the_side_group_of_a_freed_one(monkeypatch):
    """The gloo side groups were cached by id(group) alone: a group made where a freed one had
    been got the freed one's side group, of other members (and a test's fresh object() skipped
    new_group on the cp313 wheel). The cache holds the group, so its id cannot come back."""
    import gc
    import weakref
    from kbench.distributed._comm import TorchCommunicator
    calls = []

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
                  use_local_synchronization=False, group_desc=None, device_id=None):
        calls.append(ranks)
        return object()

    class Group:
        pass
    _fake_torch(monkeypatch, 4, [2, 3], new_group)
    first = Group()
    held = weakref.ref(first)
    TorchCommunicator(first, timeout_s=7.0)
    TorchCommunicator(first, timeout_s=7.0)     # the same group: its side group again
    assert calls == [[2, 3]]
    del first
    gc.collect()
    assert held() is not None
    TorchCommunicator(Group(), timeout_s=7.0)
    assert calls == [[2, 3], [2, 3]]


def test_an_nccl_subgroup_on_a_torch_without_local_synchronization_is_refused(monkeypatch):
    from kbench.distributed._comm import TorchCommunicator

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None):
        raise AssertionError("would hang: the non-members never enter it")
    _fake_torch(monkeypatch, 4, [2, 3], new_group)
    with pytest.raises(DistributedError, match=r"NCCL subgroup \(ranks \[2, 3\]\) needs torch 2.1"):
        TorchCommunicator(object(), timeout_s=7.0)


def test_left_over_marker_directories_are_removed(tmp_path, ranks_of):
    """A failed rank keeps its marker on purpose and a killed job never reaches atexit: rank 0
    removes job directories untouched for over a day when it sets up."""
    old, recent = tmp_path / "kbench-dist-0123456789abcdef", tmp_path / "kbench-dist-fedcba"
    other = tmp_path / "not-kbench"
    for d in (old, recent, other):
        d.mkdir()
        (d / "rank1").write_text("5 0.0 failed: RuntimeError: x\n")
    two_days = time.time() - 2 * 86400
    for p in (old / "rank1", old, other / "rank1", other):
        os.utime(p, (two_days, two_days))
    ranks = ranks_of(FakeComm())
    assert not old.exists() and recent.exists() and other.exists()
    assert os.path.isdir(ranks.markers.dir)


def test_option_values_compare_by_value():
    from kbench.distributed import _same_key
    assert _same_key(1) == _same_key(1.0) == _same_key(np.int64(1)) == _same_key(np.float32(1))
    assert _same_key(True) != _same_key(1) and _same_key("1") != _same_key(1)
    assert _same_key(None) != _same_key("auto")


@pytest.mark.parametrize("kind", ["file", "read-only directory", "under a file"])
def test_a_dist_dir_that_cannot_hold_the_markers_is_named(kind, tmp_path, monkeypatch):
    # a bare NotADirectoryError / PermissionError named neither KBENCH_DIST_DIR nor kbench
    import os
    import kbench.distributed as kd
    from kbench import KbenchError
    base = tmp_path / "dist"
    if kind == "file":
        base.write_text("x")
    elif kind == "under a file":
        (tmp_path / "f").write_text("x")
        base = tmp_path / "f" / "dist"
    else:
        base.mkdir()
        base.chmod(0o500)
        if os.geteuid() == 0:       # root writes there anyway: answer as for anyone else
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(base)
                                else real(p, mode, **kw))
    monkeypatch.setenv("KBENCH_DIST_DIR", str(base))
    opts = dict(device="cpu", cold_cache=None, min_samples=20, max_samples=20, warmup_s=0.0)
    with pytest.raises(KbenchError, match=rf"KBENCH_DIST_DIR='{base}': .*it must be a "
                                          r"writable directory") as ei:
        kd.bench(np.sum, np.ones(100), group=SoloComm(), **opts)
    assert isinstance(ei.value, kd.DistributedError)
    monkeypatch.setenv("KBENCH_DIST_DIR", str(tmp_path / "made" / "on" / "demand"))
    assert kd.bench(np.sum, np.ones(100), group=SoloComm(), **opts).n == 20
