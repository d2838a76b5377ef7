"""The busy-host reading of CPU benches (kbench.measure.hostload)."""
import multiprocessing as mp
import os
import sys
import time

import numpy as np
import pytest

import kbench
from kbench.measure import hostload

linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc/stat")


def _stat(tmp_path, user, system, idle, steal):
    p = tmp_path / "stat"
    p.write_text(f"cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4\n")
    return str(p)


def test_others_cpu_time_and_steal_are_read_from_two_snapshots(tmp_path, monkeypatch):
    hz = os.sysconf("SC_CLK_TCK")
    before = hostload.Reading(wall_s=100.0, busy_ticks=1000, steal_ticks=10,
                              total_ticks=5000, own_s=1.0)
    # one second later on a 2-CPU host: 1.5 CPU-seconds busy, of which 0.5 were ours
    monkeypatch.setattr(hostload.time, "perf_counter", lambda: 101.0)
    monkeypatch.setattr(hostload.os, "times",
                        lambda: os.times_result((1.4, 0.1, 0.0, 0.0, 0.0)))
    path = _stat(tmp_path, 1000 + int(1.5 * hz), 0, 5000 - 1000 - 10 + int(0.5 * hz), 10)
    load = hostload.finish(before, path)
    assert load["cpus"] == 2
    assert load["others_cpus"] == pytest.approx(1.0, abs=0.05)
    assert load["steal_share"] == 0.0 and load["busy"] is True
    assert "BUSY: other processes used 1.00 of 2 CPUs" in hostload.text(load)
    # 0.5 CPUs of ours beside 1.0 of theirs fits on 2 cores: not oversubscribed
    assert load["own_cpus"] == pytest.approx(0.5) and load["oversubscribed"] is False
    assert "OVERSUBSCRIBED" not in hostload.text(load)


def _one_second_on_two_busy_cpus(tmp_path, monkeypatch, own_cpu_s):
    """hostload.finish over one second of a 2-CPU host whose both CPUs were busy, own_cpu_s of
    it this process's (the rest another's)."""
    hz = os.sysconf("SC_CLK_TCK")
    before = hostload.Reading(wall_s=100.0, busy_ticks=1000, steal_ticks=0,
                              total_ticks=5000, own_s=1.0)
    monkeypatch.setattr(hostload.time, "perf_counter", lambda: 101.0)
    monkeypatch.setattr(hostload.os, "times",
                        lambda: os.times_result((1.0 + own_cpu_s, 0.0, 0.0, 0.0, 0.0)))
    return hostload.finish(before, _stat(tmp_path, 1000 + 2 * hz, 0, 5000 - 1000, 0))


def test_a_thread_pool_wider_than_the_free_cores_is_named_oversubscribed(tmp_path, monkeypatch):
    # 1.5 CPU-seconds ours (a 2-thread pool), 0.5 another's
    load = _one_second_on_two_busy_cpus(tmp_path, monkeypatch, 1.5)
    assert load["busy"] is True and load["oversubscribed"] is True
    assert "OVERSUBSCRIBED: this call ran 1.50 CPUs of threads where the others left 1.50" \
        in hostload.text(load)


def test_a_pool_on_every_core_is_oversubscribed_on_a_quiet_host_too(tmp_path, monkeypatch):
    """2 threads on 2 cores beside a daemon's 0.1 CPU: not busy, but any preemption stalls
    the pool (a 384^3 matmul moved +-30% between quiet sessions)."""
    load = _one_second_on_two_busy_cpus(tmp_path, monkeypatch, 1.9)
    assert load["busy"] is False and load["oversubscribed"] is True
    text = hostload.text(load)
    assert text.startswith("quiet: ") and "OVERSUBSCRIBED: this call ran 1.90 CPUs" in text


def test_an_unreadable_stat_or_a_run_too_short_to_read_is_no_reading(tmp_path):
    assert hostload.finish(hostload.start(), str(tmp_path / "missing")) is None
    # under MIN_READ_S the clock ticks of /proc/stat say nothing
    assert hostload.finish(hostload.start()) is None
    assert hostload.finish(None) is None and hostload.text(None) == ""


def _spin(ready):
    ready.set()
    while True:
        pass


@linux_only
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs to run beside a hog")
def test_a_cpu_bench_beside_a_busy_process_says_the_host_was_busy():
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    ready = ctx.Event()
    hog = ctx.Process(target=_spin, args=(ready,), daemon=True)
    hog.start()
    try:
        assert ready.wait(10)
        # a call whose time varies by 2x: the budget, not the target, ends the run
        r = kbench.bench(lambda: time.sleep(0.0005 + 0.0005 * (time.perf_counter_ns() % 7) / 7),
                         cold_cache=None, memory=False)
        assert r.stop["wall_s"] >= hostload.MIN_READ_S
    finally:
        hog.terminate()
        hog.join()
    load = r.extra["host_load"]
    assert load["busy"] is True and load["others_cpus"] >= hostload.BUSY_OTHER_CPUS
    assert "Host load:  BUSY" in repr(r)


@pytest.mark.parametrize("others,own", [(1.0, 1.9), (0.4, 1.9), (1.0, 1.05)])
def test_an_oversubscribed_run_on_a_busy_host_is_timed_again_with_its_pools_sized(monkeypatch,
                                                                                 others, own):
    """Busy and oversubscribed: the pools kbench knows are sized to the cores the others left
    for a second run, which is the figure; the first run's median is kept, the pools restored.
    A core the others used part of is not free: a spinning process read 0.4 CPUs beside a
    2-thread pool on 2 cores. A pool whose threads wait on preempted ones uses little CPU (1.05:
    not read oversubscribed), and is sized all the same: unsized, such matmuls read 5.6x and 22x
    the quiet figure."""
    from kbench.measure import threadpools
    threads = {"n": 2}
    pool = threadpools.Pool("openblas", "/x/libopenblas.so", lambda: threads["n"],
                            lambda n: threads.update(n=n))
    monkeypatch.setattr(threadpools, "pools", lambda: [pool])
    readings = iter([
        dict(others_cpus=others, own_cpus=own, steal_share=0.0, cpus=2, loadavg_1m=2.0,
             wall_s=0.3, busy=True, oversubscribed=own > 1.2),
        dict(others_cpus=1.0, own_cpus=1.0, steal_share=0.0, cpus=2, loadavg_1m=2.0,
             wall_s=0.3, busy=True, oversubscribed=False)])
    monkeypatch.setattr(hostload, "finish", lambda before, stat_path="/proc/stat": next(readings))
    seen = []
    r = kbench.bench(lambda: seen.append(threads["n"]), max_time_s=0.02, warmup_s=0.0,
                     memory=False, cold_cache=None)
    sized = r.extra["host_load"]["pools_sized"]
    assert sized["threads"] == 1 and sized["pools"] == [
        {"kind": "openblas", "library": "libopenblas.so", "threads": 2}]
    assert sized["first_run"]["own_cpus"] == own and sized["first_run"]["median_s"] > 0
    assert 2 in seen and seen[-1] == 1 and threads["n"] == 2       # timed at 1, then restored
    assert "POOLS SIZED" in hostload.text(r.extra["host_load"]) and "OVERSUBSCRIBED" not in repr(r)


def test_a_quiet_host_keeps_the_callers_pools(monkeypatch):
    from kbench.measure import threadpools
    calls = []
    monkeypatch.setattr(threadpools, "pools", lambda: calls.append(1) or [])
    monkeypatch.setattr(hostload, "finish", lambda before, stat_path="/proc/stat": dict(
        others_cpus=0.0, own_cpus=1.9, steal_share=0.0, cpus=2, loadavg_1m=0.1, wall_s=0.3,
        busy=False, oversubscribed=True))
    r = kbench.bench(lambda: None, max_time_s=0.02, warmup_s=0.0, memory=False, cold_cache=None)
    assert "pools_sized" not in r.extra["host_load"] and not calls


def test_numpys_blas_pool_is_found_sized_and_restored():
    np = pytest.importorskip("numpy")
    np.ones((64, 64)) @ np.ones((64, 64))           # the BLAS library is loaded by now
    from kbench.measure import threadpools
    found = threadpools.pools()
    if not found:
        pytest.skip("no BLAS or OpenMP pool kbench knows is loaded in this process")
    before = [p.threads() for p in found]
    with threadpools.sized(1, found) as changed:
        assert all(p.threads() == 1 for p in found)
        assert len(changed) == sum(n > 1 for n in before)
    assert [p.threads() for p in found] == before


def test_the_ladder_is_the_powers_of_two_below_a_pool_and_sizing_rounds_down_to_it():
    from kbench.measure import threadpools
    assert [threadpools.ladder(n) for n in (1, 2, 3, 6, 16)] == [
        [], [1], [1, 2], [1, 2, 4], [1, 2, 4, 8]]
    assert [threadpools.rung(n) for n in (0, 1, 2, 3, 7, 8)] == [1, 1, 2, 2, 4, 8]


def test_a_baseline_run_on_a_quiet_host_times_each_ladder_size_and_restores_the_pools(
        monkeypatch):
    """kbench.bench(_pool_ladder=True), as --kbench-save calls it: a threaded call is also
    timed with its pools at 1, 2 and 4 threads (below its 6), each with a CI, the pools
    restored; a call that ran one thread (1.0 CPUs of its own) does not move with the pool's
    size and is timed once."""
    from kbench.measure import threadpools
    threads = {"n": 6}
    pool = threadpools.Pool("openblas", "/x/libopenblas.so", lambda: threads["n"],
                            lambda n: threads.update(n=n))
    monkeypatch.setattr(threadpools, "pools", lambda: [pool])
    own = {"cpus": 3.5}
    monkeypatch.setattr(hostload, "finish", lambda before, stat_path="/proc/stat": dict(
        others_cpus=0.0, own_cpus=own["cpus"], steal_share=0.0, cpus=8, loadavg_1m=0.1,
        wall_s=0.3, busy=False, oversubscribed=False))
    seen = set()
    r = kbench.bench(lambda: seen.add(threads["n"]), max_time_s=0.02, warmup_s=0.0,
                     memory=False, cold_cache=None, _pool_ladder=True)
    ladder = r.extra["pool_ladder"]
    assert ladder["threads"] == 6 and sorted(ladder["figures"], key=int) == ["1", "2", "4"]
    assert all(0 < f["ci_low"] <= f["median"] <= f["ci_high"] for f in ladder["figures"].values())
    assert seen == {1, 2, 4, 6} and threads["n"] == 6
    plain = kbench.bench(lambda: None, max_time_s=0.02, warmup_s=0.0, memory=False,
                         cold_cache=None)
    assert "pool_ladder" not in plain.extra
    own["cpus"] = 1.0
    seen.clear()
    single = kbench.bench(lambda: seen.add(threads["n"]), max_time_s=0.02, warmup_s=0.0,
                          memory=False, cold_cache=None, _pool_ladder=True)
    assert seen == {6} and "pool_ladder" not in single.extra
