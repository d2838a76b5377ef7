"""The HIP backend: loader, selection, cold-cache arithmetic, errors without an AMD GPU, and --
on an NVIDIA GPU, through the HIP-on-CUDA forwarder of tests/hip_forward/ -- real measurements
through kbench's HIP code path.

The loader remembers its outcome per process, so every test that sets KBENCH_HIP_LIBRARY runs
in a fresh interpreter.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import kbench
from kbench import _core
from kbench.backends import hip
from kbench.measure.coldcache import make_rotation_sets, rotation_count, rotation_shortfall

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hip_forward"))
from build_forwarder import FAKE, build as build_forwarder  # noqa: E402

needs_hip_build = pytest.mark.skipif(not getattr(_core, "HAVE_HIP", 0),
                                     reason="kbench._core built with KBENCH_NO_CUDA=1: no HIP "
                                            "backend")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a "
                                                                   "test library")


def run_py(code: str, env_extra: dict, timeout: int = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


# ------------------------------------------------------------------ loader


@needs_hip_build
def test_import_opens_no_hip_library():
    p = run_py("""
        import json, kbench, kbench._core as c
        print(json.dumps(c.hip_library_status()))
        maps = open('/proc/self/maps').read()
        print('amdhip64' in maps, 'rocm_smi' in maps)
    """, {})
    assert p.returncode == 0, p.stderr
    status, mapped = p.stdout.splitlines()
    st = json.loads(status)
    assert st["hip"]["state"] == "not tried" and st["rocm_smi"]["state"] == "not tried"
    assert mapped == "False False"


@needs_hip_build
def test_missing_library_named_by_the_setting():
    p = run_py("""
        import kbench._core as c
        for _ in range(2):          # remembered: the same error again
            try:
                c.hip_device_count()
            except c.LibraryNotFound as e:
                print(type(e).__name__, '|', e)
        print(c.hip_library_status()['hip']['state'])
    """, {"KBENCH_HIP_LIBRARY": "/nonexistent/libnothere.so"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0].startswith("LibraryNotFound | KBENCH_HIP_LIBRARY=/nonexistent/libnothere.so")
    assert "test-only setting" in lines[0]
    assert "/nonexistent/libnothere.so" in lines[1]
    assert lines[-1] == "failed"


@needs_hip_build
@needs_gcc
def test_library_missing_a_symbol_is_named(tmp_path):
    src = tmp_path / "partial.c"
    src.write_text("unsigned int hipInit(unsigned int f) { return 0; }\n"
                   "const char *hipGetErrorName(unsigned int e) { return \"x\"; }\n")
    lib = tmp_path / "libpartial.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    p = run_py("""
        import kbench._core as c
        try:
            c.hip_device_count()
        except c.LibraryNotFound as e:
            print(e)
    """, {"KBENCH_HIP_LIBRARY": str(lib)})
    assert p.returncode == 0, p.stderr
    msg = p.stdout
    assert "lacks HIP functions kbench needs" in msg
    assert "hipGetErrorString" in msg and "hipStreamBeginCapture" in msg
    assert "hipInit," not in msg and "hipGetErrorName," not in msg   # those it has


def _libcuda_loadable() -> bool:
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@needs_hip_build
@needs_gcc
@pytest.mark.skipif(_libcuda_loadable(), reason="libcuda is here: the forwarder would find a GPU")
def test_no_gpu_error_through_the_forwarder(tmp_path):
    """The forwarder loads (every symbol resolves) and hipInit reports no device: kbench says
    there is no AMD GPU, and the process stays usable."""
    lib = build_forwarder(tmp_path)
    p = run_py("""
        import kbench._core as c
        from kbench.backends import hip
        try:
            hip.device_info(0)
        except c.HipError as e:
            print('HipError |', e)
        st = hip.status()
        print(st['libraries']['hip']['state'], st['libraries']['hip']['requested_by'])
        print(st['devices'], '|', st['why_no_devices'])
        import numpy as np, kbench
        r = kbench.bench(np.add, np.ones(8), np.ones(8), max_time_s=0.2, memory=False)
        print('cpu still works', r.backend)
    """, {"KBENCH_HIP_LIBRARY": str(lib)})
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0].startswith("HipError | kbench's HIP backend needs an AMD GPU")
    assert "hipErrorNoDevice" in out[0] and "libcuda.so.1" in out[0]
    assert out[1] == "loaded KBENCH_HIP_LIBRARY"
    assert out[2].startswith("0 | no AMD GPU is visible")
    assert out[3] == "cpu still works host"


@needs_hip_build
def test_argument_errors_before_any_library():
    with pytest.raises(ValueError, match="at least one HipGraph"):
        _core.measure_hip((), stream=1)
    with pytest.raises(TypeError, match="needs stream="):
        _core.measure_hip((object(),))
    with pytest.raises(TypeError, match="unexpected keyword"):
        _core.measure_hip((object(),), stream=1, bogus=3)
    with pytest.raises(ValueError, match="gate_batch"):
        _core.measure_hip((object(),), stream=1, gate_batch=0)
    with pytest.raises(ValueError, match="non-default stream"):
        _core.hip_graph_capture(lambda: None, ((),), None, stream=0)
    with pytest.raises(ValueError, match="capture_mode"):
        _core.hip_graph_capture(lambda: None, ((),), None, stream=1, capture_mode="loose")
    with pytest.raises(TypeError, match="tuple"):
        _core.hip_graph_capture(lambda: None, [()], None, stream=1)


# ------------------------------------------------------------------ the whole path on the CPU

FAKE_SCRIPT = """
import json, numpy as np, kbench, kbench._core as c
out = {}
a = np.arange(1 << 16, dtype=np.float32)
calls = []
def add(x, y):
    calls.append(x.ctypes.data)
    return x + y
for cold in (None, "rotate", "flush"):
    calls.clear()
    r = kbench.bench(add, a, a, device="cuda", backend="hip", stream=1, cold_cache=cold,
                     check=lambda x, y: x + y, max_time_s=0.3, memory=False)
    out[str(cold)] = {"backend": r.backend, "device": r.device, "median": r.median,
                      "n": len(r.samples), "hip": r.extra["hip"], "cold": r.cold_cache,
                      "graphs": r.extra["graph"]["graphs"], "unroll": r.extra["unroll"],
                      "distinct_captured": len(set(calls)), "post": r.extra.get("post_check"),
                      "warnings": r.warnings, "attribution": r.extra["attribution"],
                      "clocks": r.extra["clocks"]["summary"], "gpu": r.metadata.get("gpu", {})}
try:
    kbench.bench(add, a, a, device="cuda", backend="hip", stream=1, unroll=4,
                 cold_cache="flush", memory=False)
except ValueError as e:
    out["flush_unroll"] = str(e)
# the adapter forwards only the gate options given: C holds their defaults and checks them
try:
    kbench.bench(add, a, a, device="cuda", backend="hip", stream=1, gate_batch=2.5,
                 cold_cache=None, memory=False)
except TypeError as e:
    out["bad_gate_batch"] = str(e)
r = kbench.bench(add, a, a, device="cuda", backend="hip", stream=1, gate_batch=8,
                 cold_cache=None, max_time_s=0.1, memory=False)
out["gate_batch_8"] = r.extra["hip"]["gate"]
g = c.hip_graph_capture(add, ((a, a), (a, a)), None, stream=1)
out["graph_calls"] = g.calls
try:
    c.hip_graph_capture(lambda: 1 / 0, ((),), None, stream=1)
except ZeroDivisionError as e:
    out["raised_in_capture"] = e.__notes__[0]
g2 = c.hip_graph_capture(add, ((a, a),), None, stream=1)     # the capture was ended
out["after_failed_capture"] = g2.calls
print("RESULT" + json.dumps(out, default=str))
"""


@needs_hip_build
@needs_gcc
@pytest.mark.parametrize("gated", [True, False])
def test_whole_hip_path_on_a_fake_runtime(tmp_path, gated):
    """Loader, capture, gate, the shared loop, flush, rotation and the report, through a CPU
    stand-in of libamdhip64 (tests/hip_forward/hip_fake.c: a 'launch' busy-waits 20 us)."""
    lib = build_forwarder(tmp_path, FAKE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "librocm_smi64.so"),
                    str(HERE / "hip_forward" / "rsmi_fake.c")], check=True)
    env = {"KBENCH_HIP_LIBRARY": str(lib), "LD_LIBRARY_PATH": str(tmp_path)}
    if not gated:
        env["KB_FAKE_NO_WAIT"] = "1"
    p = run_py(FAKE_SCRIPT, env, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads(p.stdout.split("RESULT", 1)[1])
    for cold in ("None", "rotate", "flush"):
        r = res[cold]
        assert r["backend"] == "hip" and r["device"] == "kbench fake HIP device"
        assert r["post"]["ok"] and r["n"] >= 10
        # each sample is one replay's event time / calls in it: ~20 us of busy-wait per call
        assert 15e-6 < r["median"] < 200e-6, r["median"]
        assert r["hip"]["gate"]["gated"] is gated
        if not gated:
            assert any("ungated" in w and "hipStreamWaitValue32" in w for w in r["warnings"])
        assert "no per-kernel attribution" in r["attribution"]
        assert r["clocks"].startswith("ROCm SMI before: 2100 MHz, 350 W, 65 C")
        assert r["gpu"]["llc_bytes"] == 4 << 20 and r["gpu"]["backend"] == "hip"
        assert any("not AMD figures" in w for w in r["warnings"])
    rot = res["rotate"]
    # 4 MB cache, 256 KB sets (add(a, a): a counts once, and each copy passes its clone twice):
    # ceil(2 x 4 MB / 256 KB) + 1 sets, one graph each (unroll 1)
    assert rot["cold"]["arg_sets"] == 33 and rot["cold"]["evicts"] is True
    assert rot["cold"]["set_bytes"] == 256 << 10
    assert rot["graphs"] == 33 and rot["distinct_captured"] == 33
    assert res["flush"]["hip"]["flush_bytes"] == 8 << 20
    assert res["flush"]["cold"]["flush_bytes"] == 8 << 20
    assert res["None"]["hip"]["flush_bytes"] == 0 and res["None"]["graphs"] == 1
    assert "unroll=4" in res["flush_unroll"]
    assert res["bad_gate_batch"].startswith("measure_hip: gate_batch must be an int"), \
        res["bad_gate_batch"]
    assert res["gate_batch_8"]["batch"] == 8, res["gate_batch_8"]
    assert res["None"]["hip"]["gate"]["batch"] != 8     # the default is C's, not the last given
    assert res["graph_calls"] == 2
    assert "during HIP graph capture" in res["raised_in_capture"]
    assert res["after_failed_capture"] == 1


@needs_hip_build
@needs_gcc
def test_gate_watchdog_opens_a_blocked_queue(tmp_path):
    """A host blocked in a launch behind its own closed gate (a full queue; simulated by the
    fake, which blocks every launch) is freed by the watchdog: batches shrink to one iteration;
    single-replay chunks that still fire are kept, and after the third the rest is timed
    ungated, not one timeout per sample to the time cap. The result says so."""
    lib = build_forwarder(tmp_path, FAKE)
    p = run_py("""
        import json, numpy as np, kbench
        a = np.ones(1024, dtype=np.float32)
        # warmup_s leaves room for the warm-up's second batch (2 calls, each held ~20 ms by the
        # gate) on a loaded machine: a shorter budget is cut to 1-call batches (the loop never
        # plans past it), no chunk of more than one call fires, and nothing shrinks
        r = kbench.bench(lambda x: x * 2, a, device="cuda", backend="hip", stream=1,
                         cold_cache=None, gate_timeout_s=0.02, warmup_s=0.5, max_time_s=0.3,
                         memory=False)
        print("RESULT" + json.dumps({"gate": r.extra["hip"]["gate"], "n": len(r.samples),
                                     "warnings": r.warnings}))
    """, {"KBENCH_HIP_LIBRARY": str(lib), "KB_FAKE_FULL_QUEUE": "1"}, timeout=120)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads(p.stdout.split("RESULT", 1)[1])
    g = res["gate"]
    assert g["watchdog_fired"] > 0
    assert g["batch"] == 32 and g["batch_final"] == 1 and g["fired_kept"] == 3
    assert g["gated"] is False and "single-replay chunks 3 times" in g["why_not"]
    assert res["n"] >= 10
    assert any("watchdog fired" in w for w in res["warnings"])
    assert any(w.startswith("ungated: the watchdog opened") for w in res["warnings"])


def test_forwarders_export_what_the_loader_resolves(tmp_path):
    """Every hip* name in KB_HIP_REQUIRED / KB_HIP_OPTIONAL is exported by the forwarder and by
    the CPU stand-in (a name added to the table without them would fail only on the GPU)."""
    import re
    decls = (HERE.parent / "csrc" / "hip" / "hip_decls.h")
    if not decls.is_file() or shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("needs a source checkout, gcc and nm")
    text = decls.read_text()
    table = text[text.index("#define KB_HIP_REQUIRED"):text.index("#define KB_HIP_FN_TYPE_")]
    names = set(re.findall(r"X\((hip\w+),", table))
    assert len(names) >= 30
    for src in (FAKE, FAKE.with_name("hip_forward.c")):
        lib = build_forwarder(tmp_path, src)
        nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                            text=True, check=True).stdout
        exported = set(re.findall(r" T (hip\w+)$", nm, re.M))
        assert names <= exported, f"{src.name} lacks {sorted(names - exported)}"


@needs_hip_build
@needs_gcc
@pytest.mark.parametrize("layout", ["5", "6"])
def test_rocm_smi_readings_both_layouts(tmp_path, layout):
    """ROCm SMI is opened lazily and read through either rsmi_frequencies_t layout (ROCm 6 put a
    bool first); a stand-in librocm_smi64 on LD_LIBRARY_PATH answers."""
    src = HERE / "hip_forward" / "rsmi_fake.c"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "librocm_smi64.so"),
                    str(src)], check=True)
    p = run_py("""
        import json, kbench._core as c
        before = c.hip_library_status()["rocm_smi"]["state"]
        snap = c.rocm_smi_snapshot(0)
        try:
            c.rocm_smi_snapshot(3)
        except ValueError as e:
            bad = str(e)
        print(json.dumps({"before": before, "snap": snap, "bad": bad,
                          "after": c.hip_library_status()["rocm_smi"]["state"]}))
    """, {"LD_LIBRARY_PATH": str(tmp_path), "KB_FAKE_RSMI_LAYOUT": layout})
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["before"] == "not tried" and res["after"] == "loaded"
    snap = res["snap"]
    assert snap["sclk_mhz"] == 2100 and snap["mclk_mhz"] == 1300
    assert snap["power_w"] == 350 and snap["temp_c"] == 65
    assert "sees 1 device" in res["bad"]


# ------------------------------------------------------------------ selection


def fake_torch(hip_version):
    return types.SimpleNamespace(version=types.SimpleNamespace(hip=hip_version,
                                                               cuda=None if hip_version
                                                               else "13.0"))


def test_rocm_torch_picks_hip(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch("6.2.41133"))
    assert hip.is_rocm_torch()
    opts = {"backend": None, "gate": True}
    assert hip.selected(opts) is True
    assert opts == {"gate": True}           # popped, the rest left for the backend
    assert hip.selected({"backend": "cuda"}) is False


def test_cuda_torch_keeps_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(None))
    assert not hip.is_rocm_torch()
    assert hip.selected({}) is False
    assert hip.selected({"backend": "auto"}) is False
    assert hip.selected({"backend": "hip"}) is True     # forced: the forwarder test's way


def test_no_torch_and_bad_backend(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert hip.selected({}) is False
    with pytest.raises(ValueError, match="backend must be one of"):
        hip.selected({"backend": "rocm"})


def test_bench_dispatches_to_hip(monkeypatch):
    """bench(..., backend='hip') goes to kbench.backends.hip.run with the backend's own options."""
    seen = {}

    def fake_run(fn, sets, kwargs, **kw):
        seen.update(kw)
        samples = np.full(20, 1e-5)
        raw = {"samples": samples, "backend": "hip", "stop": "precision", "ci_level": 0.95}
        return raw, {"mode": "none"}, {"warnings": [hip.NO_ATTRIBUTION]}, "Fake MI300X", None

    monkeypatch.setattr(hip, "run", fake_run)
    r = kbench.bench(lambda: None, device="cuda", backend="hip", gate_batch=8, memory=False,
                     cold_cache=None)
    assert r.backend == "hip" and r.device == "Fake MI300X"
    assert seen["gate_batch"] == 8 and "backend" not in seen
    assert any("no per-kernel attribution" in w for w in r.warnings)


def test_hip_refuses_cupti_mode_before_anything_runs_and_unknown_options(monkeypatch):
    calls = []
    monkeypatch.setattr(hip, "run", lambda *a, **k: calls.append(a))
    with pytest.raises(ValueError, match="mode 'cupti' needs a CUDA device: on HIP, mode must "
                                         "be None or 'graph'"):
        kbench.bench(lambda: calls.append("fn"), device="cuda", backend="hip", mode="cupti")
    assert calls == []
    monkeypatch.undo()
    with pytest.raises(TypeError, match="unexpected options for the HIP backend"):
        hip.run(lambda: None, [()], {}, plan=_core.plan("hip", None, None), flush_bytes=None,
                device="cuda", loop={}, sample_clocks=True)


def test_cold_cache_needs_a_known_llc(monkeypatch):
    monkeypatch.setattr(hip, "device_info", lambda ordinal: {"name": "mystery", "l2_bytes": 0})
    for cold in ("rotate", "flush"):
        with pytest.raises(ValueError, match="last-level cache size.*unknown"):
            hip.run(lambda x: x, [(np.ones(4),)], {}, plan=_core.plan("hip", cold, None),
                    flush_bytes=None, device="cuda", loop={}, stream=1)


def test_rccl_capture_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch("6.2"))
    monkeypatch.delenv("TORCH_NCCL_BLOCKING_WAIT", raising=False)
    assert "TORCH_NCCL_BLOCKING_WAIT=1" in hip.rccl_capture_warning()
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")
    assert hip.rccl_capture_warning() is None
    monkeypatch.setitem(sys.modules, "torch", fake_torch(None))
    monkeypatch.delenv("TORCH_NCCL_BLOCKING_WAIT")
    assert hip.rccl_capture_warning() is None


# ------------------------------------------------------------------ last-level cache, rotation

MiB = 1 << 20


@pytest.mark.parametrize("name,l2,expect,what", [
    ("AMD Instinct MI300X", 4 * MiB, 256 * MiB, "Infinity Cache"),
    ("AMD Instinct MI300A", 4 * MiB, 256 * MiB, "Infinity Cache"),
    ("AMD Instinct MI250X", 8 * MiB, 8 * MiB, "GPU L2"),      # the attribute, equal to the table
    ("AMD Instinct MI210", 0, 8 * MiB, "MI210"),
    ("AMD Radeon RX 7900 XTX", 6 * MiB, 96 * MiB, "Infinity Cache"),
    ("Some future GPU", 16 * MiB, 16 * MiB, "GPU L2"),
    ("NVIDIA H200", 60 * MiB, 60 * MiB, "GPU L2"),          # the forwarder: the L2 attribute
])
def test_llc_table(name, l2, expect, what):
    size, desc = hip.last_level_cache({"name": name, "l2_bytes": l2})
    assert size == expect and what in desc


def test_llc_unknown():
    size, desc = hip.last_level_cache({"name": "mystery", "l2_bytes": None})
    assert size == 0 and desc.startswith("unknown")


def test_rotation_past_the_infinity_cache():
    """The rotation is sized from the Infinity Cache, not the 4 MB L2 attribute: with the L2
    alone, the sets would fit in the MALL and read warm."""
    llc, _ = hip.last_level_cache({"name": "AMD Instinct MI300X", "l2_bytes": 4 * MiB})
    set_bytes = 48 * MiB
    k = rotation_count(set_bytes, llc, margin=2.0)
    assert (k - 1) * set_bytes >= 2 * llc and (k - 2) * set_bytes < 2 * llc
    l2_only = rotation_count(set_bytes, 4 * MiB, margin=2.0)
    assert rotation_shortfall([set_bytes] * l2_only, llc) is not None   # not cold on MI300
    assert rotation_shortfall([set_bytes] * k, llc) is None


def test_rotation_sets_are_distinct_copies():
    a = np.ones(1 << 16, dtype=np.float32)
    sets = make_rotation_sets((a,), cache_bytes=1 << 20, margin=2.0)
    assert len(sets) == rotation_count(a.nbytes, 1 << 20)
    assert len({s[0].ctypes.data for s in sets}) == len(sets)


def test_info_shows_hip(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kbench", "info"], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, KBENCH_HIP_LIBRARY="/nonexistent.so"))
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if "HIP" in ln or ln.startswith("  hip")]
    if getattr(_core, "HAVE_HIP", 0):
        assert any("no per-kernel attribution" in ln for ln in lines)
        assert any(ln.startswith("  hip ") and "KBENCH_HIP_LIBRARY=/nonexistent.so" in ln
                   for ln in lines)
    else:
        assert any("not built" in ln for ln in lines)


# ------------------------------------------------------------------ on a GPU, forwarded

GPU_SCRIPT = """
import json, sys, torch, kbench
assert torch.cuda.is_available()
out = {}
n = 1 << 24
x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda")
add = lambda a, b: a + b
for cold in (None, "rotate", "flush"):
    r = kbench.bench(add, x, y, backend="hip", cold_cache=cold, check=lambda a, b: a + b,
                     bytes=3 * 4 * n, max_time_s=3, memory=False)
    out[f"add_{cold}"] = {"median": r.median, "backend": r.backend, "cold": r.cold_cache,
                          "hip": r.extra["hip"], "post": r.extra.get("post_check"),
                          "warnings": r.warnings, "n": len(r.samples)}
m = 4096
a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
r = kbench.bench(torch.matmul, a, b, backend="hip", cold_cache="rotate",
                 check=lambda a, b: (a.float() @ b.float()).to(torch.bfloat16), rtol=2e-2,
                 atol=2e-1, flops=2 * m ** 3, max_time_s=3, memory=False)
out["gemm"] = {"median": r.median, "backend": r.backend, "post": r.extra.get("post_check"),
               "tflops": 2 * m ** 3 / r.median / 1e12, "cold": r.cold_cache}
print("RESULT" + json.dumps(out, default=str))
"""


def _torch_cuda_reason():
    try:
        import torch
    except ImportError:
        return "needs torch"
    if not torch.cuda.is_available():
        return "needs a GPU visible to torch"
    if getattr(torch.version, "hip", None):
        return "a ROCm torch: test_hip_on_amd covers this machine"
    return None


@pytest.mark.gpu
@needs_hip_build
@pytest.mark.skipif(_torch_cuda_reason() is not None, reason=str(_torch_cuda_reason()))
def test_hip_backend_through_forwarder(tmp_path):
    lib = build_forwarder(tmp_path)
    p = run_py(GPU_SCRIPT, {"KBENCH_HIP_LIBRARY": str(lib)}, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads(p.stdout.split("RESULT", 1)[1])
    for key in ("add_None", "add_rotate", "add_flush"):
        r = res[key]
        assert r["backend"] == "hip" and r["post"]["ok"], r
        assert r["hip"]["gate"]["gated"], r["hip"]["gate"]
        assert any("not AMD figures" in w for w in r["warnings"])
        # 16M floats, 3 arrays: 200 MB at most ~4.8 TB/s on an H200 is >= 40 us
        assert 20e-6 < r["median"] < 5e-3, r
    assert res["add_rotate"]["cold"]["evicts"] is True
    assert res["add_flush"]["hip"]["flush_bytes"] > 0
    assert res["gemm"]["backend"] == "hip" and res["gemm"]["post"]["ok"]
    assert 50 < res["gemm"]["tflops"] < 1500, res["gemm"]


def _rocm_torch_reason():
    try:
        import torch
    except ImportError:
        return "needs torch"
    if not getattr(torch.version, "hip", None):
        return "needs a ROCm build of torch and an AMD GPU"
    if not torch.cuda.is_available():
        return "a ROCm torch, but no AMD GPU visible"
    return None


# not marked gpu: conftest's gpu skip asks for a CUDA device, which an AMD machine lacks
@needs_hip_build
@pytest.mark.skipif(_rocm_torch_reason() is not None, reason=str(_rocm_torch_reason()))
def test_hip_on_amd():
    """On a ROCm machine: the same cases with the real libamdhip64 (shared with torch's)."""
    p = run_py(GPU_SCRIPT.replace('backend="hip"', 'backend="auto"'), {}, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads(p.stdout.split("RESULT", 1)[1])
    assert all(res[k]["backend"] == "hip" and res[k]["post"]["ok"] for k in res)
