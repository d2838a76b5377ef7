"""kbench's HIP backend through the HIP-on-CUDA forwarder (tests/hip_forward/hip_forward.c) over
the fake libcuda (tests/fake_cuda/fake_libcuda.c), on this machine: the fake driver sees every
HIP call as its CUDA twin, so it can fail one (FAKE_FAIL) and report what measure_hip left
behind -- work queued on the stream and never waited for, events, pinned memory and device
memory still alive -- and whether a host wait or a device-synchronizing free (hipFree and
hipHostFree are cuMemFree and cuMemFreeHost here) ran with the GIL held.

Each case runs in a subprocess (LD_LIBRARY_PATH, KBENCH_HIP_LIBRARY), so this process's kbench
never sees the fakes. Skipped where there is no gcc, no cuda.h or no HIP backend.
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "hip_forward"))
from build_forwarder import build as build_forwarder  # noqa: E402
from test_cuda_pipeline_fake_driver import _cuda_include, build_fake  # noqa: E402


@pytest.fixture(scope="module")
def forwarder_on_fake_driver(tmp_path_factory):
    if not getattr(_core, "HAVE_HIP", 0):
        pytest.skip("kbench._core built without the HIP backend")
    gcc, inc = shutil.which("gcc"), _cuda_include()
    if gcc is None or inc is None:
        pytest.skip("building the fake libcuda needs gcc and cuda.h")
    out = tmp_path_factory.mktemp("hip_on_fake_cuda")
    build_fake("fake_libcuda.c", out / "libcuda.so.1")
    return out, build_forwarder(out)


SCRIPT = textwrap.dedent('''
    import ctypes, json, os, sys
    from kbench import _core
    L = ctypes.CDLL("libcuda.so.1")
    spec = json.loads(sys.argv[1])
    g = _core.hip_graph_capture(lambda: None, ((),), None, stream=1)
    opts = dict(stream=spec["stream"], cold="flush", flush_bytes=1 << 20, min_samples=64,
                max_samples=64, warmup_s=0.0, **spec.get("kw", {}))
    out = {}
    before = L.fake_waits_with_gil()
    try:
        r = _core.measure_hip((g,), **opts)
        out["raised"] = None
        out["gated"] = r["hip"]["gate"]["gated"]
    except Exception as e:
        out["raised"] = type(e).__name__
        out["call"] = getattr(e, "call", None)
    out["waits_with_gil"] = L.fake_waits_with_gil() - before
    out["state"] = {f: getattr(L, "fake_" + f)() for f in (
        "unwaited", "events_alive", "pinned_alive", "dev_alive", "hung_syncs",
        "freed_while_waiting")}
    os.environ.pop("FAKE_FAIL", None)
    out["next"] = _core.measure_hip((g,), **opts)["backend"]
    print(json.dumps(out))
''')


def run(libs, spec, **env):
    lib_dir, forwarder = libs
    env = dict(os.environ, **env, KBENCH_HIP_LIBRARY=str(forwarder),
               LD_LIBRARY_PATH=f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    p = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


CLEAN = {"unwaited": 0, "events_alive": 0, "pinned_alive": 0, "dev_alive": 0, "hung_syncs": 0,
         "freed_while_waiting": 0}


@pytest.mark.parametrize("stream", [1, 0])
def test_measure_hip_waits_and_frees_without_the_gil(forwarder_on_fake_driver, stream):
    """The flush buffer's hipFree and the gate flag's hipHostFree synchronize the device, as
    the stream waits do: with the GIL held, a host callback another thread queued (one that
    takes the GIL) could never run, and the free never return."""
    out = run(forwarder_on_fake_driver, {"stream": stream})
    assert out["raised"] is None and out["gated"] is True, out
    assert out["waits_with_gil"] == 0
    assert out["state"] == CLEAN


@pytest.mark.parametrize("stream", [1, 0])
def test_a_failed_replay_leaves_nothing_queued_on_the_stream(forwarder_on_fake_driver, stream):
    """hipGraphLaunch fails inside a chunk: the chunk's wait is skipped (the first failure is
    the one raised), so ctx_fini must drain the stream before the events, the flush buffer and
    the gate's flag go. It skipped that for stream 0, the null stream."""
    out = run(forwarder_on_fake_driver, {"stream": stream}, FAKE_FAIL="cuGraphLaunch:20")
    assert out["raised"] == "HipError" and "hipGraphLaunch" in out["call"], out
    assert out["state"] == CLEAN
    assert out["waits_with_gil"] == 0
    assert out["next"] == "hip"


@pytest.mark.parametrize("fail,call", [
    ("cuStreamSynchronize:1", "hipStreamSynchronize"),     # the gate's probe: its flag is freed
    ("cuEventCreate:3", "hipEventCreate"),
    ("cuMemAlloc:1", "hipMalloc"),                         # the flush buffer
])
def test_a_failed_set_up_is_named_and_leaves_nothing_behind(forwarder_on_fake_driver, fail, call):
    out = run(forwarder_on_fake_driver, {"stream": 1}, FAKE_FAIL=fail)
    assert out["raised"] == "HipError" and call in out["call"], out
    assert out["state"] == CLEAN
    assert out["waits_with_gil"] == 0
    assert out["next"] == "hip"
