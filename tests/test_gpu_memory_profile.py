"""On a GPU: the peak-memory figure of a torch matmul that allocates its output, gated in a
pytest run where a planted 2x workspace fails --kbench-fail-mem=10%; and profile mode under
torch.profiler, whose trace shows exactly one call of the kernel inside the profile window
(nsys is not on the GPU machine: torch.profiler stands in for it)."""
import json
import os
import subprocess
import sys

import pytest

import kbench
from kbench.measure.profile import ProfileRun

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GATE_MODULE = os.path.join(ROOT, "tests", "data", "kbench_mem_gate_module.py")
MiB = 1 << 20


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def test_torch_matmul_peak_is_its_output(torch):
    n = 2048
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    r = kbench.bench(torch.matmul, a, b, warmup_s=0.05, settle_max_s=0.0, max_time_s=0.3,
                     floor=False)
    m = r.memory
    out_bytes = n * n * 4                                 # 16 MiB, allocated by the call
    print(f"\n{r}")
    assert m["method"] == "torch" and m["lower_bound"] is False and m["device"] == "cuda:0"
    assert out_bytes <= m["peak_bytes"] <= out_bytes + 64 * MiB, m
    assert out_bytes <= m["retained_bytes"] <= out_bytes + 64 * MiB, m   # the output, held
    assert "torch caching allocator" in repr(r)


def _pytest(tmp_path, *args, plant=False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    env.pop("KB_PLANT_WORKSPACE", None)
    if plant:
        env["KB_PLANT_WORKSPACE"] = "1"
    cmd = [sys.executable, "-m", "pytest", GATE_MODULE, "-q", "-s", "-p", "no:cacheprovider",
           f"--rootdir={ROOT}"] + list(args)
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def test_planted_2x_workspace_fails_the_memory_gate(tmp_path, torch):
    base = str(tmp_path / "base.json")
    rc, out = _pytest(tmp_path, f"--kbench-save={base}")
    assert rc == 0, out
    doc = json.load(open(base))
    (res,) = doc["results"].values()
    assert res["memory"]["method"] == "torch", res["memory"]
    compare = (f"--kbench-compare={base}", "--kbench-fail=off", "--kbench-fail-mem=10%")
    rc, out = _pytest(tmp_path, *compare)
    print(out)
    assert rc == 0, out                                   # same kernel, same memory: passes
    assert "different harness" not in out
    rc, out = _pytest(tmp_path, *compare, plant=True)
    print(out)
    assert rc == 1, out
    assert "MORE MEMORY" in out and "using more peak memory than baseline beyond 10%" in out


def test_profile_mode_puts_exactly_one_call_in_the_window(tmp_path, torch):
    x = torch.randn(1 << 22, device="cuda")
    y = torch.empty_like(x)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        r = kbench.bench(torch.mul, x, 2.0, kwargs={"out": y}, name="mul 4M", profile=True,
                         warmup_s=0.0)
    print(f"\n{r}\n{json.dumps(r.extra['profile'], indent=1)}")
    assert isinstance(r, ProfileRun)
    p = r.extra["profile"]
    assert p["calls_in_range"] == 1 and p["range"]["profiler"] == "cuProfilerStart/Stop"
    assert p["range"]["nvtx"] == "torch.cuda.nvtx"
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    (window,) = [e for e in events if e.get("cat") == "user_annotation"
                 and e.get("name") == "kbench.measure.profile::mul 4M"]
    lo, hi = window["ts"], window["ts"] + window["dur"]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in (e.get("args") or {})}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    inside = [k for k in kernels if lo <= launch_ts.get(k["args"].get("correlation"), -1) <= hi]
    names = sorted({k["name"] for k in kernels})
    print(f"kernels in the trace: {len(kernels)} ({names}); inside the window: {len(inside)}")
    assert len(inside) == 1, inside
    # the warm-up calls ran too, outside the window
    assert len(kernels) == p["warmup_calls"] + 1, names


def test_profile_mode_calls_fn_on_the_stream_given(torch):
    """A timed bench makes stream= torch's current stream while it calls fn; profile mode's
    one call and its warm-up must too (it ran them on the default stream)."""
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    seen = []

    def fn():
        seen.append(torch.cuda.current_stream().cuda_stream)
        torch.mul(x, 2.0, out=y)

    r = kbench.bench(fn, device="cuda", stream=side, profile=True, warmup_s=0.0)
    assert isinstance(r, ProfileRun)
    assert seen and set(seen) == {side.cuda_stream}, (seen, side.cuda_stream)
    assert torch.cuda.current_stream().cuda_stream != side.cuda_stream   # restored after
