"""measure_cuda's pipeline (parse, set up, settle, sample, read, bridge, result, tear down) run
on this machine against a fake libcuda.so.1 (tests/fake_cuda/fake_libcuda.c): every driver call
succeeds and events read 1 ms apart, so what is checked is the pipeline's own bookkeeping --
pre_sample before every call of fn, the graph-replay timer's division, bridges, the error paths
and that every event is destroyed. Timing itself is the GPU tests' business.

The fake is built with gcc against cuda.h and loaded in a subprocess (LD_LIBRARY_PATH), so this
process's kbench never sees it. Skipped where there is no gcc, no cuda.h or no CUDA backend.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kbench import _core

HERE = Path(__file__).resolve().parent


def _cuda_include() -> Path:
    candidates = [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH")
                  if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda/include"))
    candidates += [Path(p) / "nvidia" / "cuda_runtime" / "include" for p in sys.path if p]
    return next((c for c in candidates if (c / "cuda.h").is_file()), None)


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    if not _core.HAVE_CUDA:
        pytest.skip("kbench built without the CUDA backend")
    gcc, inc = shutil.which("gcc"), _cuda_include()
    if gcc is None or inc is None:
        pytest.skip("building the fake libcuda needs gcc and cuda.h")
    out = tmp_path_factory.mktemp("fake_cuda")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", f"-I{inc}", "-o", str(out / "libcuda.so.1"),
                    str(HERE / "fake_cuda" / "fake_libcuda.c")], check=True)
    return out


SCENARIOS = textwrap.dedent('''
    import ctypes, json, sys
    import numpy as np
    from kbench import _core
    QUICK = dict(stream=0, busy_warmup_s=0.0, warmup_s=0.0, min_samples=64, max_samples=64,
                 sample_clocks=False)   # a real NVML (on a GPU machine) would read a real GPU
    out = {}
    log = []
    fn = lambda: log.append("fn")
    r = _core.measure_cuda(fn, ((),), None, pre_sample=lambda: log.append("hook"), **QUICK)
    out["hook"] = {"order_ok": all(log[i:i + 2] == ["hook", "fn"] for i in range(0, len(log), 2)),
                   "fn": log.count("fn"), "hook": log.count("hook"), "n": len(r["samples"]),
                   "keep_busy": r["cuda"]["keep_busy"]["enabled"],
                   "bridges": r["cuda"]["keep_busy"]["bridges"],
                   "pre_sample": r["cuda"]["pre_sample"]}
    r = _core.measure_cuda(fn, ((),), None, unroll=4, cold="flush", **QUICK)
    out["unroll"] = {"samples": sorted(set(np.round(r["samples"], 9).tolist())),
                     "events": sorted(set(np.round(r["cuda"]["events_s"], 9).tolist())),
                     "keep_busy": r["cuda"]["keep_busy"]["enabled"],
                     "flush_bytes": r["cuda"]["flush_bytes"], "backend": r["backend"]}
    calls = []
    def bad_hook():
        calls.append(1)
        if len(calls) == 20:
            raise OSError("the hook failed")
    try:
        _core.measure_cuda(fn, ((),), None, pre_sample=bad_hook, **QUICK)
        out["hook_error"] = None
    except OSError as e:
        out["hook_error"] = [str(e)] + list(getattr(e, "__notes__", []))
    r = _core.measure_cuda(fn, ((),), None, regime="burst", **QUICK)
    out["burst"] = {"batches": r["cuda"]["regime"]["burst"]["batches"],
                    "keep_busy": r["cuda"]["keep_busy"]["enabled"]}
    out["events_alive"] = ctypes.CDLL("libcuda.so.1").fake_events_alive()
    print(json.dumps(out))
''')


def test_the_pipeline_runs_against_a_fake_driver(fake_driver):
    env = dict(os.environ, LD_LIBRARY_PATH=f"{fake_driver}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    p = subprocess.run([sys.executable, "-c", SCENARIOS], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    h = out["hook"]
    # once before every call of fn, priming and warm-up included; bridges off with a hook
    assert h["order_ok"] and h["fn"] == h["hook"] > h["n"] == 64
    assert h["keep_busy"] is False and h["bridges"] == 0 and h["pre_sample"] is True
    u = out["unroll"]
    # the graph-replay timer divides the 1 ms launch by its 4 calls; no hook: bridges allowed
    assert u["samples"] == [0.00025] and u["events"] == [0.00025] and u["backend"] == "events"
    assert u["keep_busy"] is True and u["flush_bytes"] == 2 << 20    # 2x the fake's 1 MiB L2
    assert out["hook_error"][0] == "the hook failed"
    assert any("raised by pre_sample" in n for n in out["hook_error"][1:])
    assert out["burst"]["batches"] >= 1 and out["burst"]["keep_busy"] is False
    assert out["events_alive"] == 0
