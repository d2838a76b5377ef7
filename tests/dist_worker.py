"""One rank of the multi-rank tests: tests/test_distributed_ranks.py runs it under mpirun
(mpi4py) and under torchrun (torch.distributed with gloo, where torch is installed).

    mpirun -n 2 python tests/dist_worker.py SCENARIO OUTDIR
    KBENCH_TEST_ENGINE=torch torchrun --nproc_per_node=2 tests/dist_worker.py SCENARIO OUTDIR

Each rank writes OUTDIR/rank<r>.json: what it measured, or the error it raised.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np

import kbench
from kbench import distributed as kd

if os.environ.get("KBENCH_TEST_ENGINE") == "torch":
    _dist = kd.init_process_group("gloo")
    COMM = _dist.group.WORLD
    RANK = _dist.get_rank()
else:
    from mpi4py import MPI
    COMM = MPI.COMM_WORLD
    RANK = COMM.Get_rank()
FAST = dict(warmup_s=0.02, max_time_s=0.3, min_samples=20, cold_cache=None, memory=False)


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def basic(out: dict) -> None:
    """Rank 1 is slower: the figures are its times (MAX), both ranks agree on everything."""
    cost = 200e-6 if RANK == 1 else 50e-6
    r = kd.bench(spin, cost, group=COMM, name="spin", **FAST)
    d = r.extra["distributed"]
    per = kd._ranks_of[id(COMM)].per_rank()
    out.update(samples=r.samples.tolist(), per_rank=per.tolist(), stop=r.stop["stop"],
               n=r.n, report={k: v for k, v in d.items() if k != "topology"},
               text=repr(r), metadata=r.metadata.get("distributed"))


def via_bench(out: dict) -> None:
    """kbench.bench(..., group=...) is the same entry point."""
    r = kbench.bench(spin, 30e-6 * (1 + RANK), group=COMM, **FAST)
    out.update(n=r.n, world=r.extra["distributed"]["world"], median=r.median)


def order(out: dict) -> None:
    """pre_sample runs before every call, outside the timed interval: rank 0's barrier is made
    5 ms slow, so rank 1 waits 5 ms in each barrier; no sample may include that wait."""
    log = []
    orig = kd.Ranks.pre_sample

    def logged(self):
        if RANK == 0:
            spin(5e-3)
        log.append("b")
        orig(self)
    kd.Ranks.pre_sample = logged

    def fn():
        log.append("c")
        spin(20e-6)
    r = kd.bench(fn, group=COMM, warmup_s=0.01, max_time_s=0.2, min_samples=10,
                 max_samples=30, cold_cache=None, memory=False)
    kd.Ranks.pre_sample = orig
    out.update(log="".join(log), samples=r.samples.tolist(), n=r.n,
               warmup_iters=r.stop["warmup_iters"])


def noisy(out: dict) -> None:
    """Rank 1 is noisy, rank 0 steady: the stop is still agreed (same count, same rule)."""
    rng = np.random.default_rng(kd.rank_seed(RANK, 7))

    def fn():
        spin(40e-6 * (1 + (rng.random() * 3 if RANK == 1 else 0)))
    r = kd.bench(fn, group=COMM, warmup_s=0.02, max_time_s=0.5, min_samples=20,
                 cold_cache=None, memory=False)
    out.update(n=r.n, stop=r.stop["stop"], warmup_iters=r.stop["warmup_iters"],
               median=r.median)


def skip(out: dict) -> None:
    """Rank 1 skips the reduce of the 3rd sampling batch."""
    kd.bench(spin, 20e-6, group=COMM, dist_timeout_s=5.0, _plant={"skip": "sample batch 3"},
             **FAST)


def stall(out: dict) -> None:
    """Rank 1 stalls past the deadline before the 5th sample's barrier."""
    kd.bench(spin, 20e-6, group=COMM, dist_timeout_s=2.0,
             _plant={"stall": "sample 5 barrier", "s": 4.0}, **FAST)


def check(out: dict) -> None:
    """Rank 1's output is wrong: every rank fails, naming rank 1, and nothing is timed."""
    a = kd.rank_rng(RANK, 3).random(64)
    ref = a * 2
    bad = RANK == 1

    def fn(x):
        return x * (3 if bad else 2)
    kd.bench(fn, a, group=COMM, check=ref, **FAST)


def absent(out: dict) -> None:
    """Rank 1 never calls kd.bench (it failed in its own set-up): rank 0's first bench ends in
    a DistributedTimeout at set-up within dist_timeout_s (its host exchange once blocked)."""
    if RANK == 1:
        time.sleep(6.0)
        return
    kd.bench(spin, 20e-6, group=COMM, dist_timeout_s=2.0, **FAST)


def _allreduce_one() -> None:
    if os.environ.get("KBENCH_TEST_ENGINE") == "torch":
        import torch
        _dist.all_reduce(torch.ones(1))
    else:
        COMM.allreduce(1)


def profiled(out: dict) -> None:
    """Profile mode with a collective inside fn, rank 1 three times slower: both ranks make
    the same number of warm-up calls (a time-based count differed, and one rank waited in fn's
    collective for ever)."""
    calls = []

    def fn():
        spin(300e-6 if RANK == 1 else 100e-6)
        _allreduce_one()
        calls.append(1)
    r = kd.bench(fn, group=COMM, profile=True, dist_timeout_s=10.0, warmup_s=0.05,
                 cold_cache=None, memory=False)
    out.update(calls=len(calls), stop=r.stop.get("stop"))


def options(out: dict) -> None:
    """Rank 1 alone asks for 50 samples and the entropy rule: every rank refuses at once,
    naming both options and each rank's value."""
    extra = dict(min_samples=50, criterion="entropy") if RANK == 1 else {}
    kd.bench(spin, 20e-6, group=COMM, **dict(FAST, **extra))


def abandoned(out: dict) -> None:
    """Rank 1 takes one 4 s call; rank 0 (dist_timeout_s=2) catches the DistributedTimeout and
    carries on with arrays of its own while MPI progresses: when rank 1 arrives, the collective
    rank 0 gave up on completes into buffers kbench kept, not into rank 0's arrays. The next
    bench on that communicator is refused by name."""
    calls = [0]

    def fn():
        calls[0] += 1
        if RANK == 1 and calls[0] == 60:
            time.sleep(4.0)
        spin(20e-6)
    try:
        kd.bench(fn, group=COMM, dist_timeout_s=2.0, warmup_s=0.02, max_time_s=1.0,
                 min_samples=200, cold_cache=None, memory=False)
    except kd.DistributedError as e:
        out["first"] = type(e).__name__
    mine = [np.full((2, 4), 7.0) for _ in range(2000)]
    t = time.monotonic()
    while time.monotonic() - t < 5.0:          # any MPI call drives progress
        if os.environ.get("KBENCH_TEST_ENGINE") != "torch":
            COMM.Iprobe()
        time.sleep(0.01)
    out["changed"] = sum(1 for a in mine if not (a == 7.0).all())
    kd.bench(spin, 20e-6, group=COMM, dist_timeout_s=2.0, **FAST)


def one_bad_input(out: dict) -> None:
    """Rank 1 alone passes fn=None: every rank refuses at once, naming rank 1 (its peers
    waited dist_timeout_s for it)."""
    out["wait_peers"] = True
    kd.bench(spin if RANK == 0 else None, 20e-6, group=COMM, dist_timeout_s=30.0, **FAST)


def one_profiled(out: dict) -> None:
    """A profiler injected on rank 0 only (nsys on rank 0: CUDA_INJECTION64_PATH; played here by
    kbench.measure.profile.wanted, as a GPU would see it): refused by name on every rank."""
    out["wait_peers"] = True
    if RANK == 0:
        import kbench.measure.profile as kp
        kp.wanted = lambda profile, device: "CUDA_INJECTION64_PATH=/x/libinject.so: a profiler"
    kd.bench(spin, 20e-6, group=COMM, dist_timeout_s=10.0, **FAST)


def peer_failed(out: dict) -> None:
    """Rank 1 is 4 s late to the second bench: rank 0 times out (2 s) and stays up a while;
    rank 1's own timeout then names rank 0's failure, not 'marker not visible'."""
    out["wait_peers"] = True
    kd.bench(spin, 20e-6, group=COMM, **FAST)
    if RANK == 1:
        time.sleep(4.0)
    kd.bench(spin, 20e-6, group=COMM, dist_timeout_s=2.0, **FAST)


def equal_values(out: dict) -> None:
    """Equal values written differently (1 and 1.0, np.int64(20) and 20, None and left out)
    are the same call."""
    extra = (dict(max_time_s=1, min_samples=np.int64(20), mode=None) if RANK == 0 else
             dict(max_time_s=1.0, min_samples=20))
    r = kd.bench(spin, 20e-6, group=COMM, **dict(FAST, **extra))
    out.update(n=r.n)


SCENARIOS = {f.__name__: f for f in (basic, via_bench, order, noisy, skip, stall, check,
                                     absent, profiled, options, abandoned, one_bad_input,
                                     one_profiled, peer_failed, equal_values)}


def main() -> None:
    scenario, outdir = sys.argv[1], sys.argv[2]
    out: dict = {"rank": RANK, "scenario": scenario}
    t0 = time.monotonic()
    try:
        SCENARIOS[scenario](out)
        out["ok"] = True
    except BaseException as e:
        out.update(ok=False, error_type=type(e).__name__, error=str(e),
                   traceback=traceback.format_exc())
    out["elapsed_s"] = time.monotonic() - t0
    with open(os.path.join(outdir, f"rank{RANK}.json"), "w") as f:
        json.dump(out, f)
    sys.stdout.flush()
    if out.get("wait_peers"):
        # mpirun ends the job when a rank exits without finalize: stay until every rank wrote
        t = time.monotonic()
        while time.monotonic() - t < 30 and not all(
                os.path.exists(os.path.join(outdir, f"rank{r}.json")) for r in range(2)):
            time.sleep(0.05)
    if not out["ok"]:
        # A rank that raised may leave a collective pending: MPI_Finalize could wait on it.
        os._exit(0)


if __name__ == "__main__":
    main()
