"""Communicators: the few collectives kbench needs, over an engine that already exists.

kbench builds no transport of its own. A communicator wraps torch.distributed (gloo for the
host-side exchanges, NCCL for the device barrier) or an mpi4py communicator, and offers:
rank/world/local info, a *nonblocking* allgather of equal-length float64 arrays (polled, so
every wait has a deadline), a blocking setup broadcast, and a device barrier.
"""
from __future__ import annotations

import os
import socket
import sys
import time
import zlib
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .._core import KbenchError

# Lent machines: NVLink multicast (NVLS) is never used. Set before a process group exists (the
# module's import, and init_process_group below) and inherited by every child process.
LENT_MACHINE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}


def set_lent_machine_env(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """setdefault the no-multicast variables in env (os.environ by default); returns env."""
    target = os.environ if env is None else env
    for k, v in LENT_MACHINE_ENV.items():
        target.setdefault(k, v)
    return target  # type: ignore[return-value]


class DistributedError(KbenchError):
    """Ranks disagree or one failed: the message names the stage and the ranks."""


class DistributedTimeout(DistributedError):
    """A collective did not complete within dist_timeout_s; the message names the stage and the
    ranks that did not arrive. The communicator is unusable afterwards (a collective is still
    pending on it; kbench keeps its buffers alive and refuses the next bench on it): end the
    job."""


# Collectives given up on (a DistributedTimeout, Ctrl-C): the engine still owns their buffers
# and writes into them when the late rank arrives; freed, that write landed in whatever the
# process had reused the memory for (a numpy array of the caller's). They stay here until they
# complete; the communicator stays refused for good (the ranks are out of step on it).
_abandoned: List["Pending"] = []
_broken: Dict[int, Any] = {}        # id(engine object) -> (engine object, why)


def abandon(owner: Any, pending: "Pending", why: str) -> None:
    """Keep `pending` (and its buffers) alive and refuse `owner` from now on."""
    _broken.setdefault(id(owner), (owner, why))
    _abandoned.append(pending)
    keep = []
    for p in _abandoned[:-1]:       # drop the ones the engine has finished with
        try:
            if not p.test():
                keep.append(p)
        except Exception:           # a failed one is finished too
            pass
    _abandoned[:-1] = keep


def refuse_if_abandoned(owner: Any) -> None:
    """A DistributedError when a collective on `owner` was given up on earlier."""
    hit = _broken.get(id(owner))
    if hit is not None and hit[0] is owner:
        raise DistributedError(
            f"kbench.distributed: this communicator is unusable: an earlier collective on it "
            f"was given up on ({hit[1]}) and is still pending or left the ranks out of step; "
            f"end the job (or use another communicator) instead of benchmarking on it again")


def wait_for(pending: "Pending", timeout_s: float, rank: int, what: str,
             owner: Any = None) -> Any:
    """pending's result, polled until timeout_s: the set-up's exchanges (before the stage
    markers exist) are bounded like every later one. A rank that died in its own set-up, or
    never calls kbench.distributed.bench, is a DistributedTimeout here, not a hang."""
    t0 = time.monotonic()
    try:
        while not pending.test():
            if time.monotonic() - t0 > timeout_s:
                raise DistributedTimeout(
                    f"kbench.distributed: rank {rank} waited {time.monotonic() - t0:.1f} s "
                    f"(dist_timeout_s={timeout_s:g}) at set-up ({what}), the first exchange of "
                    f"kbench.distributed.bench: not every rank arrived (a rank failed before its "
                    f"first kbench.distributed.bench, or makes no such call)")
            time.sleep(50e-6)
    except BaseException as e:      # timeout or Ctrl-C: the engine still owns the buffers
        abandon(owner, pending, f"set-up ({what}): {type(e).__name__}")
        raise
    return pending.result()


def _host_id() -> float:
    """This host as a number every rank can allgather (equal names, equal numbers)."""
    return float(zlib.crc32(socket.gethostname().encode()))


class Pending:
    """A started allgather: test() polls it without blocking, result() is (world, n)."""

    def test(self) -> bool:
        raise NotImplementedError

    def result(self) -> np.ndarray:
        raise NotImplementedError


class Communicator:
    """The engine-facing half of kbench.distributed; see the module docstring."""

    engine: str = ""            # "mpi4py" | "torch.distributed"
    backend: str = ""           # "mpi" | "gloo" | "nccl"
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    nodes: int = 1

    @property
    def owner(self) -> Any:
        """The engine object whose collectives these are (an abandoned one refuses it)."""
        return getattr(self, "_owner", self)

    def start_allgather(self, row: np.ndarray) -> Pending:
        raise NotImplementedError

    def bcast_str(self, text: str, timeout_s: float = 60.0) -> str:
        """Rank 0's text (at most 64 bytes of UTF-8) on every rank, within timeout_s."""
        raise NotImplementedError

    def device_barrier(self) -> Optional[Callable[[], None]]:
        """A callable that enqueues a device-side barrier on the current stream (NCCL), or None
        when the engine has none (the host barrier is used)."""
        return None

    def versions(self) -> Dict[str, Any]:
        return {}


_TEXT_BYTES = 64


def _text_buffer(text: str) -> np.ndarray:
    raw = text.encode()[:_TEXT_BYTES]
    buf = np.zeros(_TEXT_BYTES, dtype=np.uint8)
    buf[:len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return buf


def _buffer_text(buf: np.ndarray) -> str:
    return bytes(np.asarray(buf, dtype=np.uint8)).rstrip(b"\0").decode(errors="replace")


def _hosts_to_counts(hosts: List[Any], rank: int) -> Dict[str, int]:
    mine = hosts[rank]
    local = [r for r, h in enumerate(hosts) if h == mine]
    return {"local_rank": local.index(rank), "local_world": len(local),
            "nodes": len(set(hosts))}


# ------------------------------------------------------------------ mpi4py

class _MpiPending(Pending):
    def __init__(self, req: Any, out: np.ndarray, send: np.ndarray):
        self._req, self._out, self._send = req, out, send    # buffers live until done

    def test(self) -> bool:
        return bool(self._req.Test())

    def result(self) -> np.ndarray:
        return self._out


class MpiCommunicator(Communicator):
    """An mpi4py communicator (CI: Debian's Open MPI). Allgathers are Iallgather + Test."""

    def __init__(self, comm: Any, timeout_s: float = 60.0):
        from mpi4py import MPI
        refuse_if_abandoned(comm)
        self._comm, self._MPI, self._owner = comm, MPI, comm
        self.engine, self.backend = "mpi4py", "mpi"
        self.rank, self.world = comm.Get_rank(), comm.Get_size()
        hosts = wait_for(self.start_allgather(np.array([_host_id()])), timeout_s, self.rank,
                         "hosts", self.owner)[:, 0].tolist()
        for k, v in _hosts_to_counts(hosts, self.rank).items():
            setattr(self, k, v)

    def start_allgather(self, row: np.ndarray) -> Pending:
        send = np.ascontiguousarray(row, dtype=np.float64)
        out = np.empty((self.world, send.size), dtype=np.float64)
        req = self._comm.Iallgather(send, out)
        return _MpiPending(req, out, send)

    def bcast_str(self, text: str, timeout_s: float = 60.0) -> str:
        buf = _text_buffer(text)
        req = self._comm.Ibcast(buf, root=0)
        wait_for(_MpiPending(req, buf, buf), timeout_s, self.rank, "the marker directory",
                 self.owner)
        return _buffer_text(buf)

    def versions(self) -> Dict[str, Any]:
        import mpi4py
        return {"mpi4py": mpi4py.__version__,
                "mpi_library": self._MPI.Get_library_version().strip().split(",")[0]}


# ------------------------------------------------------------------ torch.distributed

class _TorchPending(Pending):
    def __init__(self, work: Any, parts: List[Any]):
        self._work, self._parts = work, parts

    def test(self) -> bool:
        return bool(self._work.is_completed())

    def result(self) -> np.ndarray:
        self._work.wait()           # completed already: returns at once, raises a failed op's error
        return np.stack([p.numpy() for p in self._parts])


# id(group) -> (group, its gloo side group): the group is held so that its id cannot be
# reused by a later group while the entry stands (a new group at a freed one's address got the
# old side group, of other members)
_gloo_groups: Dict[int, Any] = {}


def gloo_side_group(dist: Any, group: Any, timeout_s: float) -> Any:
    """The gloo group for an NCCL group's host exchanges, made by the group's members alone.

    A plain new_group must be entered by every rank of the default group, members or not: only
    the members call kbench, so two subgroups benchmarked at once (TP groups [0,1] and [2,3])
    got the same name from the global group counter and met in one rendezvous, and the members'
    counter ran ahead of the others' (the caller's next new_group was named differently on
    different ranks). use_local_synchronization (torch 2.1+) names the group by its ranks and
    syncs only them; timeout bounds its set-up by dist_timeout_s, not torch's 30 min (it is
    also the gloo exchanges' own limit: a later bench's longer dist_timeout_s is capped by the
    first one's on this group)."""
    import inspect
    from datetime import timedelta
    ranks = None if group is None else dist.get_process_group_ranks(group)
    if ranks is None or len(ranks) == dist.get_world_size():
        # every rank is a member and calls kbench: the plain collective call is right here
        return dist.new_group(ranks=ranks, backend="gloo", timeout=timedelta(seconds=timeout_s))
    if "use_local_synchronization" not in inspect.signature(dist.new_group).parameters:
        raise DistributedError(
            f"kbench.distributed: benchmarking on an NCCL subgroup (ranks {ranks}) needs torch "
            f"2.1 or later (new_group's use_local_synchronization: only the group's members "
            f"call kbench); this torch is {getattr(sys.modules.get('torch'), '__version__', '?')}."
            f" Benchmark on the whole world, or on a gloo group")
    return dist.new_group(ranks=ranks, backend="gloo", use_local_synchronization=True,
                          timeout=timedelta(seconds=timeout_s))


class TorchCommunicator(Communicator):
    """torch.distributed: host exchanges on gloo (a gloo side group when the group is NCCL),
    the device barrier a one-element all_reduce on the group's own backend."""

    def __init__(self, group: Any, timeout_s: float = 60.0):
        import torch
        import torch.distributed as dist
        refuse_if_abandoned(group)
        self._torch, self._dist, self._group, self._owner = torch, dist, group, group
        self.engine = "torch.distributed"
        self.backend = str(dist.get_backend(group)).lower()
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        if "gloo" in self.backend:
            self._host = group
        else:
            held = _gloo_groups.get(id(group))
            if held is None or held[0] is not group:    # once per group, by its members
                held = _gloo_groups[id(group)] = (group, gloo_side_group(dist, group, timeout_s))
            self._host = held[1]
        hosts = wait_for(self.start_allgather(np.array([_host_id()])), timeout_s, self.rank,
                         "hosts", self.owner)[:, 0].tolist()
        for k, v in _hosts_to_counts(hosts, self.rank).items():
            setattr(self, k, v)
        self._tiny: Any = None

    def start_allgather(self, row: np.ndarray) -> Pending:
        t = self._torch.from_numpy(np.ascontiguousarray(row, dtype=np.float64).copy())
        parts = [self._torch.empty_like(t) for _ in range(self.world)]
        work = self._dist.all_gather(parts, t, group=self._host, async_op=True)
        return _TorchPending(work, parts)

    def bcast_str(self, text: str, timeout_s: float = 60.0) -> str:
        t = self._torch.from_numpy(_text_buffer(text))
        src = self._dist.get_global_rank(self._host, 0) if self._host is not None else 0
        work = self._dist.broadcast(t, src=src, group=self._host, async_op=True)
        wait_for(_TorchPending(work, [t]), timeout_s, self.rank, "the marker directory",
                 self.owner)
        return _buffer_text(t.numpy())

    def device_barrier(self) -> Optional[Callable[[], None]]:
        if "nccl" not in self.backend:
            return None
        torch, dist, group = self._torch, self._dist, self._group
        if self._tiny is None:
            self._tiny = torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device()))

        def barrier() -> None:
            # Enqueued on the current (measured) stream: NCCL's stream waits for it and it waits
            # for NCCL; the host does not block.
            dist.all_reduce(self._tiny, group=group)
        return barrier

    def versions(self) -> Dict[str, Any]:
        torch = self._torch
        v: Dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
        if "nccl" in self.backend:
            try:
                nv = torch.cuda.nccl.version()
                v["nccl"] = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
            except Exception as e:      # a version must never lose a measurement
                v["nccl"] = f"unknown ({type(e).__name__}: {e})"
        return v


def communicator(group: Any, timeout_s: float = 60.0) -> Communicator:
    """group: 'auto' (torch.distributed's initialised default group, else mpi4py's
    COMM_WORLD when mpi4py is imported or the job runs under mpirun), a torch ProcessGroup or an
    mpi4py communicator."""
    if isinstance(group, Communicator):
        return group
    if isinstance(group, str):
        if group != "auto":
            raise ValueError(f"kbench.distributed: group must be 'auto', a torch ProcessGroup or "
                             f"an mpi4py communicator, got {group!r}")
        dist = _torch_dist()
        if dist is not None and dist.is_initialized():
            return TorchCommunicator(None, timeout_s)
        if "mpi4py" in sys.modules or any(k in os.environ for k in
                                          ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")):
            from mpi4py import MPI
            return MpiCommunicator(MPI.COMM_WORLD, timeout_s)
        raise RuntimeError("kbench.distributed: group='auto' found no engine: initialise "
                           "torch.distributed (kbench.distributed.init_process_group) or run "
                           "under mpirun with mpi4py installed")
    mod = type(group).__module__ or ""
    if mod.startswith("mpi4py"):
        return MpiCommunicator(group, timeout_s)
    if mod.startswith("torch"):
        return TorchCommunicator(group, timeout_s)
    raise TypeError(f"kbench.distributed: group must be 'auto', a torch ProcessGroup or an "
                    f"mpi4py communicator, got {type(group).__name__}")


def _torch_dist() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        import torch.distributed as dist
    except Exception:
        return None
    return dist if dist.is_available() else None


def init_process_group(backend: Optional[str] = None, **kwargs: Any) -> Any:
    """torch.distributed.init_process_group after the lent-machine variables are set (NVLS
    off); under torchrun it reads env://. backend: 'nccl' when CUDA is available, else 'gloo'.
    Sets the current CUDA device to LOCAL_RANK for NCCL. Returns torch.distributed."""
    set_lent_machine_env()
    import torch
    import torch.distributed as dist
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "nccl" in backend:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        kwargs.setdefault("device_id", torch.device("cuda", local))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, **kwargs)
    return dist
