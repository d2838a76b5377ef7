"""Importing kbench is cheap and touches no GPU library."""
import compileall
import os
import re
import subprocess
import sys

import kbench

PKG = os.path.dirname(kbench.__file__)
GPU_LIBS = ("libcuda.so", "libcupti", "libnvidia-ml", "libnvrtc")


def _cumulative_us(out: str, module: str) -> int:
    for line in out.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)$", line)
        if m and m.group(3) == module:
            return int(m.group(1))
    raise AssertionError(f"{module} not in -X importtime output")


def test_import_costs_under_30_ms_beyond_numpy():
    compileall.compile_dir(PKG, quiet=1)        # measure imports, not first-time compilation
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    costs = []
    for _ in range(5):
        p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import numpy; import kbench"],
                           capture_output=True, text=True, env=env, check=True)
        costs.append(_cumulative_us(p.stderr, "kbench"))
    # numpy is imported first, so kbench's cumulative time is what kbench adds beyond it
    assert min(costs) < 30_000, f"import kbench cost {sorted(costs)} us beyond numpy"


def test_import_maps_no_gpu_library_and_loads_no_framework():
    code = ("import kbench, sys\n"
            "maps = open('/proc/self/maps').read()\n"
            f"print([l for l in {GPU_LIBS!r} if l in maps])\n"
            "print([m for m in ('torch', 'cupy', 'triton', 'pandas', 'matplotlib') if m in sys.modules])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    libs, mods = p.stdout.splitlines()
    assert libs == "[]", libs
    assert mods == "[]", mods


def test_public_api():
    for name in ("bench", "compare", "assert_close", "Result", "Comparison", "KbenchError",
                 "LibraryNotFound", "CudaError", "CaptureError", "CuptiError", "CuptiBusy"):
        assert hasattr(kbench, name), name
    assert callable(kbench.compare) and callable(kbench.bench)
    assert issubclass(kbench.CuptiBusy, kbench.CuptiError)
    assert issubclass(kbench.LibraryNotFound, OSError)
    assert kbench.__version__
