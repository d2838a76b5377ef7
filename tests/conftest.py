"""Shared test configuration.

Tests that need a CUDA GPU carry ``@pytest.mark.gpu`` (the marker is declared in
pyproject.toml); here they are skipped, with the reason, when no CUDA device is visible.
The ``load_benchmark`` fixture loads a benchmarks/ script as a module, for tests of its
CPU-side logic.
"""
import functools
import importlib.util
import os
import sys
from pathlib import Path

import pytest

# Each bench adds its median to this machine's run history and widens its CI by the spread
# between runs (kbench.measure.runhistory). A test's figure must not depend on which tests ran
# before it, nor on the developer's own history: off, unless the caller named a file.
# tests/test_runhistory.py turns it on with a file of its own.
os.environ.setdefault("KBENCH_RUN_HISTORY", "off")

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load_benchmark(name):
    """benchmarks/<name>.py as a module: the scripts are files, not a package. Their shared
    helpers (_coverage.py, _launch_cost.py) import as a script run finds them."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_benchmark():
    return _load_benchmark


@functools.lru_cache(maxsize=None)
def cuda_unavailable_reason():
    """None when a CUDA device is usable, else why not (shown as the skip reason)."""
    try:
        from kbench import _core
    except ImportError as exc:  # pragma: no cover - the build is broken
        return f"kbench._core does not import: {exc}"
    if not getattr(_core, "HAVE_CUDA", 0):
        return "kbench._core was built without the CUDA headers"
    try:
        count = _core.cuda_device_count()
    except Exception as exc:  # LibraryNotFound, CudaError: say which
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        first_line = first_line.removesuffix(" Tried:")
        return f"no CUDA device: {type(exc).__name__}: {first_line}"
    if count == 0:
        return "no CUDA device visible (cuda_device_count() == 0)"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = cuda_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


def _cpu_s(pid):
    """CPU seconds (user + system, all threads) a process has run: /proc/<pid>/stat, in ticks."""
    import os
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interrupt_child(proc, wait_ready, timeout_s=30.0, cpu=False):
    """SIGINT to a child process alone, once wait_ready() returned; then its output and the
    seconds from the signal to the KeyboardInterrupt it reported on a line "KI <monotonic>"
    (CLOCK_MONOTONIC, shared by both processes). The child is killed whatever happens.
    cpu=True: the child's line is "KI <monotonic> <time.process_time()>", and the CPU seconds
    the child ran between the signal and it come fourth: the work it did before stopping,
    which a loaded host's scheduler does not stretch as it stretches the wall time."""
    import os
    import signal
    import subprocess
    import time
    try:
        wait_ready()
        cpu_sent = _cpu_s(proc.pid) if cpu else None
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"SIGINT was ignored for {timeout_s:g} s (output {out!r} {err!r})")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"child failed:\n{out}\n{err}"
    ki = [ln for ln in out.splitlines() if ln.startswith("KI ")]
    assert ki, f"the child ended without KeyboardInterrupt:\n{out}\n{err}"
    if cpu:
        return out, err, float(ki[0].split()[1]) - sent, float(ki[0].split()[2]) - cpu_sent
    return out, err, float(ki[0].split()[1]) - sent


@pytest.fixture
def interrupt_child():
    """_interrupt_child, for the tests that Ctrl-C a child process."""
    return _interrupt_child
