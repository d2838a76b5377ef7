"""kbench.measure.threadpools: the BLAS and OpenMP thread pools loaded in this process, read and
sized.

A pool of N threads on a host whose other processes leave fewer than N cores free spins on
preempted threads: a 384^3 f32 matmul with numpy's 2-thread OpenBLAS pool on a 2-core VM read
1.5-6x its quiet figure beside one busy process, and moved +126..+430% in a gate's sessions,
where the same matmul on 1 thread read within 6% of the quiet 2-thread figure. Such a figure
times the scheduler, not the code. kbench.bench therefore times an oversubscribed call again
with its pools sized to the cores the others left (kbench.measure.local), and says so.

Only libraries already loaded are touched (RTLD_NOLOAD): OpenBLAS (numpy's scipy_openblas
builds included), OpenMP (libgomp, libiomp), MKL and BLIS. Linux only; elsewhere no pool is
found and nothing is sized.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

# (kind, file name pattern, [(getter, setter), ...] tried in turn)
_KINDS: Tuple[Tuple[str, str, Tuple[Tuple[str, str], ...]], ...] = (
    ("openblas", r"lib(scipy_)?openblas[^/]*\.so",
     (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
      ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
      ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
      ("openblas_get_num_threads", "openblas_set_num_threads"))),
    ("openmp", r"lib(g|i)omp[^/]*\.so", (("omp_get_max_threads", "omp_set_num_threads"),)),
    ("mkl", r"libmkl_rt[^/]*\.so", (("MKL_Get_Max_Threads", "MKL_Set_Num_Threads"),)),
    ("blis", r"libblis[^/]*\.so", (("bli_thread_get_num_threads",
                                     "bli_thread_set_num_threads"),)),
)


class Pool(NamedTuple):
    kind: str
    path: str
    get: "ctypes._CFuncPtr"
    set: "ctypes._CFuncPtr"

    def threads(self) -> int:
        return int(self.get())


def _loaded_paths() -> List[str]:
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return []
    return sorted({ln.split(None, 5)[5].strip() for ln in maps.splitlines()
                   if len(ln.split(None, 5)) == 6 and ".so" in ln})


def pools() -> List[Pool]:
    """The pools of the thread libraries loaded now (an empty list where none is, or off
    Linux)."""
    out = []
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 1)
    for path in _loaded_paths():
        name = os.path.basename(path)
        for kind, pattern, symbols in _KINDS:
            if not re.match(pattern, name):
                continue
            try:
                lib = ctypes.CDLL(path, mode=mode)
            except OSError:
                continue
            for getter, setter in symbols:
                get, set_ = getattr(lib, getter, None), getattr(lib, setter, None)
                if get is not None and set_ is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    set_.restype, set_.argtypes = None, [ctypes.c_int]
                    out.append(Pool(kind, path, get, set_))
                    break
    return out


def ladder(threads: int) -> List[int]:
    """The sizes below `threads` a busy host may size a pool to: 1, 2, 4, ... A baseline
    records its figure at each (kbench.workflow.baseline), so that a busy session's sized figure
    meets one timed with as many threads, not the full pool's."""
    return [1 << i for i in range(max(0, threads - 1).bit_length())]


def rung(free: int) -> int:
    """The ladder's size for `free` cores: the largest power of two not above it (at least 1)."""
    return 1 << (max(1, free).bit_length() - 1)


def describe(found: List[Pool]) -> List[Dict[str, object]]:
    """The pools as a result records them: kind, library file name, threads."""
    return [{"kind": p.kind, "library": os.path.basename(p.path), "threads": p.threads()}
            for p in found]


@contextlib.contextmanager
def sized(threads: int, found: Optional[List[Pool]] = None) -> Iterator[List[Pool]]:
    """Every pool (of `found`, else those loaded now) that has more than `threads` threads
    limited to `threads` inside the block; each restored to its own count after it."""
    found = pools() if found is None else found
    before = [(p, p.threads()) for p in found]
    changed = [(p, n) for p, n in before if n > threads]
    try:
        for p, _ in changed:
            p.set(threads)
        yield [p for p, _ in changed]
    finally:
        for p, n in changed:
            p.set(n)
