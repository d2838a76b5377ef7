"""The rank reducer the C loop calls, the barrier before each sample, and the watchdog.

Every host-side collective is two allgathers: a fixed-size header (sequence number, stage,
payload length) and then the payload. The header makes every exchange the same MPI/gloo
operation, so a rank that skipped one is caught when the headers disagree, and the payload is
exchanged only once all ranks are at the same step. Every wait polls with a deadline
(dist_timeout_s): a rank that never arrives becomes a DistributedTimeout naming the stage and
the ranks, read from the stage markers each rank writes before each collective.

Stage markers are small files, one per rank, in a job directory under $KBENCH_DIST_DIR (else the
system temp directory), named by a token rank 0 broadcasts at set-up. On one node every rank
sees every marker. Across nodes a rank sees only the markers of its own node unless
KBENCH_DIST_DIR is on a file system all nodes share; the error then lists the other ranks as
"not visible from this node" instead of naming their stage.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._core import KbenchError
from ._comm import (Communicator, DistributedError, DistributedTimeout, abandon,
                    refuse_if_abandoned)

DEFAULT_TIMEOUT_S = 60.0
_MARKER_BYTES = 256
_HEADER = 4         # seq, crc32(stage), payload length, 0


def check_timeout(timeout_s: Any) -> float:
    """dist_timeout_s as a float: a positive, finite number of seconds (NaN never expires)."""
    import math
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or \
            not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise ValueError(f"kbench.distributed: dist_timeout_s must be a positive number of "
                         f"seconds, got {timeout_s!r}")
    return float(timeout_s)


_STALE_S = 86400.0      # a job directory untouched this long is left over (see below)


def remove_stale_markers(base: str, older_than_s: float = _STALE_S) -> List[str]:
    """Remove kbench-dist-* job directories whose markers were all last written over a day
    ago. A failed rank keeps its marker on purpose (its peers read the failure), and a job
    killed by a signal never reaches atexit: nothing else ever removed them. Returns what it
    removed."""
    gone = []
    now = time.time()
    try:
        names = [n for n in os.listdir(base) if n.startswith("kbench-dist-")]
    except OSError:
        return gone
    for n in names:
        path = os.path.join(base, n)
        try:
            if not os.path.isdir(path) or os.path.islink(path):
                continue
            times = [os.stat(path).st_mtime] + [os.stat(os.path.join(path, f)).st_mtime
                                                for f in os.listdir(path)]
            if now - max(times) > older_than_s:
                shutil.rmtree(path, ignore_errors=True)
                gone.append(path)
        except OSError:         # another job's rank 0 removed it first, or not ours to read
            continue
    return gone


def _base_problem(base: str, what: str) -> str:
    where = ("KBENCH_DIST_DIR" if os.environ.get("KBENCH_DIST_DIR")
             else "the temporary directory (set KBENCH_DIST_DIR)")
    return (f"kbench.distributed: {where}={base!r}: {what}; it must be a writable directory "
            f"(on a file system every node shares, for multi-node jobs)")


def _check_base(base: str) -> None:
    """DistributedError naming KBENCH_DIST_DIR when `base` cannot hold the stage markers (a
    file or a read-only directory raised a bare NotADirectoryError/PermissionError). A missing
    one is made, as before."""
    if os.path.exists(base) and not os.path.isdir(base):
        raise DistributedError(_base_problem(base, "not a directory"))
    if os.path.isdir(base) and not os.access(base, os.W_OK | os.X_OK):
        raise DistributedError(_base_problem(base, "not writable"))


class StageMarkers:
    """One marker file per rank: '<seq> <unix time> <stage>' (see the module docstring)."""

    def __init__(self, comm: Communicator, timeout_s: float = DEFAULT_TIMEOUT_S):
        base = os.environ.get("KBENCH_DIST_DIR") or tempfile.gettempdir()
        _check_base(base)      # before the broadcast: a rank refused alone, not at the first write
        token = comm.bcast_str(uuid.uuid4().hex[:16] if comm.rank == 0 else "", timeout_s)
        self.dir = os.path.join(base, f"kbench-dist-{token}")
        if comm.rank == 0:
            remove_stale_markers(base)
        self.rank, self.world = comm.rank, comm.world
        try:
            os.makedirs(self.dir, exist_ok=True)
            self._fd: Optional[int] = os.open(self._path(self.rank),
                                              os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        except OSError as e:
            raise DistributedError(_base_problem(base, f"cannot write the stage markers in "
                                                       f"{self.dir}: {e.strerror or e}")) from e
        self.seq, self.stage = 0, "set-up"
        self.write(0, "set-up")

    def _path(self, rank: int) -> str:
        return os.path.join(self.dir, f"rank{rank}")

    def write(self, seq: int, stage: str) -> None:
        self.seq, self.stage = seq, stage
        if self._fd is None:
            return
        rec = f"{seq} {time.time():.3f} {stage}".encode()[:_MARKER_BYTES - 1]
        os.pwrite(self._fd, rec.ljust(_MARKER_BYTES - 1) + b"\n", 0)

    def read(self, rank: int) -> Optional[Tuple[int, float, str]]:
        """(seq, time, stage) of a rank's marker; None when not visible."""
        try:
            with open(self._path(rank), "rb") as f:
                text = f.read(_MARKER_BYTES).decode(errors="replace").strip()
            seq, t, stage = text.split(" ", 2)
            return int(seq), float(t), stage
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.stage.startswith("failed"):
            # a rank that failed and exits leaves its marker: the peers waiting for it read
            # the failure, not "marker not visible from this node"
            return
        try:
            os.unlink(self._path(self.rank))
            if not os.listdir(self.dir):
                shutil.rmtree(self.dir, ignore_errors=True)
        except OSError:
            pass


class Ranks:
    """The rank reducer (the C loop's ranks= option) and the pre-sample barrier.

    reduce(stage, index, samples, values) -> (per-sample MAX, MAX of values); the per-rank
    samples of the sampling batches are kept (per_rank()). pre_sample() is the barrier before
    each call: device-side on NCCL, a host barrier otherwise.
    """

    def __init__(self, comm: Communicator, timeout_s: float = DEFAULT_TIMEOUT_S,
                 device_barrier: bool = True, plant: Optional[Dict[str, Any]] = None):
        self.comm, self.timeout_s = comm, check_timeout(timeout_s)
        self.markers = StageMarkers(comm, self.timeout_s)
        self._seq = 0
        self._rows: List[np.ndarray] = []         # (world, k) per sampling batch
        self._phase = "warmup"
        self._calls = 0
        self._device_barrier = comm.device_barrier() if device_barrier else None
        # tests and the GPU script's planted hang: {"skip": stage prefix} on one rank skips that
        # collective; {"stall": stage prefix, "s": seconds} sleeps before it
        self._plant = plant or {}
        self._fired: set = set()

    # -- the collective with a deadline
    def exchange(self, stage: str, payload: np.ndarray) -> np.ndarray:
        """Allgather equal-length float64 rows after the header check: (world, len)."""
        refuse_if_abandoned(self.comm.owner)  # a collective given up on is still pending
        if self._planted("stall", stage):      # stuck in its own work, before the marker
            time.sleep(float(self._plant.get("s", 3 * self.timeout_s)))
        self._seq += 1
        seq = self._seq
        self.markers.write(seq, stage)
        if self._planted("skip", stage):
            return np.tile(np.asarray(payload, dtype=np.float64), (self.comm.world, 1))
        payload = np.ascontiguousarray(payload, dtype=np.float64).ravel()
        head = np.array([seq, zlib.crc32(stage.encode()), payload.size, 0], dtype=np.float64)
        heads = self._wait(self.comm.start_allgather(head), stage, seq)
        self._check_heads(heads, stage, seq)
        if payload.size == 0:
            return np.empty((self.comm.world, 0))
        return self._wait(self.comm.start_allgather(payload), stage, seq)

    def _planted(self, kind: str, stage: str) -> bool:
        """A planted fault fires once, on its rank, at the first stage starting with its text."""
        want = self._plant.get(kind)
        if not want or self._plant.get("rank", 1) != self.comm.rank or \
                not stage.startswith(want) or kind in self._fired:
            return False
        self._fired.add(kind)
        return True

    def _wait(self, pending: Any, stage: str, seq: int) -> np.ndarray:
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        spins = 0
        try:
            while not pending.test():
                spins += 1
                if spins > 2000:        # past ~a few ms: poll gently, stay interruptible
                    time.sleep(50e-6)
                    if time.monotonic() > deadline:
                        raise DistributedTimeout(self._timeout_text(stage, seq,
                                                                    time.monotonic() - t0))
        except BaseException as e:
            # timeout or Ctrl-C: the engine still owns the buffers and fills them when the late
            # rank arrives; kept alive, and this communicator is refused from now on
            abandon(self.comm.owner, pending, f"stage '{stage}' (collective #{seq}) on rank "
                                              f"{self.comm.rank}: {type(e).__name__}")
            raise
        try:
            return pending.result()
        except Exception as e:      # the engine's own failure, e.g. a peer process exited
            raise DistributedError(f"kbench.distributed: the collective at stage '{stage}' "
                                   f"(collective #{seq}) failed on rank {self.comm.rank}: "
                                   f"{type(e).__name__}: {e} (a peer rank may have exited: "
                                   f"see its error)") from e

    def _timeout_text(self, stage: str, seq: int, waited: float) -> str:
        behind, ahead, arrived, unseen = [], [], [], []
        for r in range(self.comm.world):
            if r == self.comm.rank:
                continue
            m = self.markers.read(r)
            if m is None:
                unseen.append(r)
            elif m[2].startswith("failed"):      # not 'arrived' nor 'skipped': it failed
                behind.append(f"rank {r} (at '{m[2]}', collective #{m[0]}, "
                              f"{time.time() - m[1]:.1f} s ago)")
            elif m[0] == seq and m[2] == stage:
                arrived.append(r)
            elif m[0] <= seq:
                behind.append(f"rank {r} (at '{m[2]}', collective #{m[0]}, "
                              f"{time.time() - m[1]:.1f} s ago)")
            else:
                ahead.append(f"rank {r} (at '{m[2]}', collective #{m[0]}: it skipped this one)")
        missing = behind + ahead + [f"rank {r} (marker not visible from this node)"
                                    for r in unseen]
        return (f"kbench.distributed: rank {self.comm.rank} waited {waited:.1f} s "
                f"(dist_timeout_s={self.timeout_s:g}) at stage '{stage}' (collective #{seq}); "
                f"did not arrive: {', '.join(missing) or 'unknown'}"
                + (f"; arrived: ranks {arrived}" if arrived else "")
                + f". Markers: {self.markers.dir}")

    def _check_heads(self, heads: np.ndarray, stage: str, seq: int) -> None:
        crc = zlib.crc32(stage.encode())
        odd = [r for r in range(heads.shape[0])
               if int(heads[r, 0]) != seq or int(heads[r, 1]) != crc]
        if odd:
            where = []
            for r in odd:
                m = self.markers.read(r)
                name = f"'{m[2]}'" if m is not None and m[0] == int(heads[r, 0]) else "a stage"
                where.append(f"rank {r} is at {name} (collective #{int(heads[r, 0])})")
            raise DistributedError(
                f"kbench.distributed: ranks out of step at stage '{stage}' (collective #{seq} on "
                f"rank {self.comm.rank}): {'; '.join(where)}. A rank skipped or added a "
                f"collective: every rank must make the same calls in the same order")
        sizes = set(int(x) for x in heads[:, 2])
        if len(sizes) > 1:
            raise DistributedError(f"kbench.distributed: at stage '{stage}' the ranks sent "
                                   f"{sorted(sizes)} values (one per rank, in rank order: "
                                   f"{[int(x) for x in heads[:, 2]]}); they must agree")

    # -- the C loop's reducer
    def reduce(self, stage: str, index: int, samples: np.ndarray,
               values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        n = samples.size
        rows = self.exchange(f"{stage} {index}", np.concatenate([samples, values]))
        if stage == "sample batch":
            self._rows.append(rows[:, :n].copy())
        elif stage == "warmup end":
            self._phase = "sample"
            self._calls = 0
        return rows[:, :n].max(axis=0), rows[:, n:].max(axis=0)

    def pre_sample(self) -> None:
        """The barrier before each call (warm-up and timed), outside the timed interval."""
        self._calls += 1
        stage = f"{self._phase} {self._calls} barrier"
        if self._device_barrier is not None:
            self._seq += 1
            self.markers.write(self._seq, stage)
            self._device_barrier()
        else:
            self.exchange(stage, np.empty(0))

    def barrier(self, stage: str) -> None:
        self.exchange(stage, np.empty(0))

    def agree_flag(self, stage: str, ok: bool) -> np.ndarray:
        """Every rank's flag (1.0/0.0), in rank order."""
        return self.exchange(stage, np.array([1.0 if ok else 0.0]))[:, 0]

    def gather_text(self, stage: str, text: str) -> List[str]:
        """Every rank's text, in rank order: lengths first, then the bytes padded."""
        raw = text.encode()
        lens = self.exchange(stage + " (lengths)", np.array([float(len(raw))]))[:, 0]
        width = int(lens.max())
        buf = np.zeros(width, dtype=np.float64)
        buf[:len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        rows = self.exchange(stage, buf)
        return [bytes(rows[r, :int(lens[r])].astype(np.uint8)).decode(errors="replace")
                for r in range(rows.shape[0])]

    def start_run(self) -> None:
        """Before a measurement: forget the last one's samples, warm-up phase again."""
        self._rows, self._phase, self._calls = [], "warmup", 0

    def per_rank(self) -> np.ndarray:
        """(world, n) per-rank samples of the sampling batches, in order."""
        if not self._rows:
            return np.empty((self.comm.world, 0))
        return np.concatenate(self._rows, axis=1)

    def close(self) -> None:
        self.markers.close()
