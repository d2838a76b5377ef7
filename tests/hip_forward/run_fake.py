"""Run kbench's HIP path on the CPU stand-ins (hip_fake.c, rsmi_fake.c) in a fresh interpreter:
the loader keeps its outcome per process, so each environment (KB_FAIL=..., KB_FAKE_BUSES=...,
see the top of each fake) gets its own. For tests/test_hip_*.py:

    from run_fake import fake_dir, run_fake       # fake_dir: a pytest fixture
    res = run_fake(fake_dir, "out['n'] = len(kbench.bench(..., **B).samples)", KB_FAIL="...")
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_forwarder import FAKE, build

HERE = Path(__file__).resolve().parent

# what run_fake's code starts with: the fake's own handle (the loader's copy: one state), the
# bench options of the fake device, `out` (printed as JSON at the end) and err(f), which
# returns the exception f raised as a dict (type, msg, call, notes), or None
PRELUDE = """
import ctypes, json, os, numpy as np, kbench, kbench._core as c
FAKE = ctypes.CDLL(os.environ["KBENCH_HIP_LIBRARY"])
B = dict(device="cuda", backend="hip", stream=1, warmup_s=0.01, max_time_s=0.05, memory=False)
out = {}
def err(f):
    try:
        f()
        return None
    except Exception as e:
        return {"type": type(e).__name__, "msg": str(e), "call": getattr(e, "call", None),
                "notes": list(getattr(e, "__notes__", []))}
"""

KNOBS = ("KB_FAIL", "KB_FAKE_BUSES", "KB_FAKE_NO_L2", "KB_FAKE_INIT_ERROR", "KB_FAKE_NO_WAIT", "KB_FAKE_FULL_QUEUE",
         "KB_FAKE_RSMI_BUSES", "KB_FAKE_RSMI_NO_PCI", "KB_FAKE_RSMI_NO_TEMP",
         "KB_FAKE_RSMI_NO_POWER", "KB_FAKE_RSMI_LAYOUT", "KB_FAKE_RSMI_INIT_MS")


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory) -> Path:
    """A directory with libhip_fake.so and librocm_smi64.so built from the stand-ins."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the HIP and ROCm SMI stand-ins")
    d = tmp_path_factory.mktemp("hipfake")
    build(d, FAKE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "librocm_smi64.so"),
                    str(HERE / "rsmi_fake.c")], check=True)
    return d


def run_fake(fake_dir: Path, code: str, timeout: int = 120, **env: str) -> dict:
    """PRELUDE + code in a fresh interpreter on the stand-ins, with only the knobs in env set;
    the `out` dict it filled."""
    full = {k: v for k, v in os.environ.items() if k not in KNOBS}
    full.update(KBENCH_HIP_LIBRARY=str(fake_dir / "libhip_fake.so"),
                LD_LIBRARY_PATH=str(fake_dir), **env)
    src = PRELUDE + textwrap.dedent(code) + "\nprint('RESULT' + json.dumps(out, default=str))\n"
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                       timeout=timeout, env=full)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.split("RESULT", 1)[1])
