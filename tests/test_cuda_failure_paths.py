"""measure_cuda, DeviceBuffer, CudaKernel and the CUPTI timer after a failed driver, CUPTI or
NVRTC call, on this machine: the fake libcuda (tests/fake_cuda/fake_libcuda.c, FAKE_FAIL), the
fake libcupti (tests/fake_cuda/fake_libcupti.c, FAKE_CUPTI_FAIL, loaded through
KBENCH_CUPTI_PATH) and the fake libnvrtc (fake_libnvrtc.c, FAKE_NVRTC_FAIL) fail the named
call, and what is checked is the project's rule for the C core: the exception names the call
that failed (its .call, not a variable the code kept the result in), and the process is left
usable -- no host wait or device-synchronizing free made with the GIL held (the gate's
cuMemFreeHost and the flush buffer's cuMemFree were), no context left pushed, no event, pinned flag or flush buffer left alive, no host
wait behind a closed gate, CUPTI unsubscribed with every activity kind disabled and no external
correlation id left pushed, no NVRTC program left, and the next measurement runs.

Each case runs in a subprocess (LD_LIBRARY_PATH), so this process's kbench never sees the fakes.
Skipped where there is no gcc, no cuda.h/cupti.h or no CUDA backend.
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
from test_cuda_pipeline_fake_driver import _cuda_include, build_fake  # noqa: E402


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    """A directory holding the fake libcuda.so.1, libcupti.so and libnvrtc.so.13."""
    if not _core.HAVE_CUDA:
        pytest.skip("kbench built without the CUDA backend")
    gcc, inc = shutil.which("gcc"), _cuda_include()
    if gcc is None or inc is None or not (inc / "cupti.h").is_file():
        pytest.skip("building the fakes needs gcc, cuda.h and cupti.h")
    out = tmp_path_factory.mktemp("fake_cuda_failures")
    for src, lib in (("fake_libcuda.c", "libcuda.so.1"), ("fake_libcupti.c", "libcupti.so"),
                     ("fake_libnvrtc.c", "libnvrtc.so.13")):
        build_fake(src, out / lib)
    return out


SCRIPT = textwrap.dedent('''
    import ctypes, json, os, sys
    import numpy as np
    from kbench import _core
    L = ctypes.CDLL("libcuda.so.1")
    C = ctypes.CDLL(os.environ["KBENCH_CUPTI_PATH"])
    R = ctypes.CDLL("libnvrtc.so.13")
    spec = json.loads(sys.argv[1])
    GOOD = 'extern "C" __global__ void f() {}'
    Q = dict(stream=0, regime="sustained", busy_warmup_s=0.0, warmup_s=0.0, min_samples=64, max_samples=64,
             sample_clocks=False)
    Q.update(spec.get("kw", {}))
    out = {}

    calls = [0]

    def fn():
        calls[0] += 1
        if spec.get("raise") and calls[0] == spec["raise_at"]:
            raise {"ValueError": ValueError, "KeyboardInterrupt": KeyboardInterrupt}[
                spec["raise"]]("the callable failed")

    dtype = (spec["dtype"],) if "dtype" in spec else ()     # to_numpy's argument, or none

    def buffer():
        b = _core.DeviceBuffer(64)
        a = b.to_numpy(*dtype)
        return {"dtype": str(a.dtype), "n": len(a), "bytes": sorted(set(a.tolist())),
                "float32": len(b.to_numpy("float32"))}

    def state():
        s = {f: getattr(L, "fake_" + f)() for f in (
            "ctx_depth", "events_alive", "pinned_alive", "dev_alive", "hung_syncs",
            "freed_while_waiting", "capturing", "waits_with_gil")}
        s.update({f: getattr(C, "fake_cupti_" + f)() for f in (
            "subscribers", "kinds_enabled", "pushed")})
        s["cupti_waits_with_gil"] = C.fake_cupti_waits_with_gil()
        s["nvrtc_programs"] = R.fake_nvrtc_programs()
        return s

    try:
        if spec["what"] == "measure":
            r = _core.measure_cuda(fn, ((),), None, **Q)
            out["result"] = {
                "backend": r["backend"],
                "samples": sorted(set(np.round(r["samples"], 12).tolist())),
                "kernels": sorted(set(np.asarray(r["cuda"]["kernels_per_iter"]).tolist())),
                "bridges": r["cuda"]["keep_busy"]["bridges"],
                "cupti_detach": r["cuda"].get("cupti_detach")}
        elif spec["what"] == "buffer":
            out["result"] = buffer()
        elif spec["what"] == "kernel":
            k = _core.CudaKernel(spec["source"], "f")
            k.launch(1, 32, "", ())
            out["result"] = {"registers": k.registers, "log": k.log}
            del k
        out["raised"] = None
    except BaseException as e:
        out["raised"] = type(e).__name__
        out["message"] = str(e)
        out["call"] = getattr(e, "call", None)
    out["state"] = state()
    # the process is left usable: the same again, nothing failing
    os.environ.pop("FAKE_FAIL", None)
    os.environ.pop("FAKE_CUPTI_FAIL", None)
    os.environ.pop("FAKE_NVRTC_FAIL", None)
    spec.pop("raise", None)
    try:
        if spec["what"] == "measure":
            out["next"] = _core.measure_cuda(fn, ((),), None, **Q)["backend"]
        elif spec["what"] == "kernel":
            out["next"] = _core.CudaKernel(GOOD, "f").registers
        else:
            out["next"] = len(_core.DeviceBuffer(64).to_numpy(*dtype))
    except BaseException as e:
        out["next"] = f"{type(e).__name__}: {e}"
    out["state_after_next"] = state()
    print(json.dumps(out))
''')


def run(lib_dir, spec, **env):
    env = dict(os.environ, **env, KBENCH_CUPTI_PATH=str(lib_dir / "libcupti.so"),
               LD_LIBRARY_PATH=f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    env.pop("CUDA_INJECTION64_PATH", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


CLEAN = {"ctx_depth": 0, "events_alive": 0, "pinned_alive": 0, "dev_alive": 0, "hung_syncs": 0,
         "freed_while_waiting": 0, "capturing": 0, "subscribers": 0, "kinds_enabled": 0,
         "pushed": 0, "nvrtc_programs": 0, "waits_with_gil": 0, "cupti_waits_with_gil": 0}


def assert_clean(state, builtins=False):
    # kbench's built-in kernels (the busy kernel's sink) stay loaded for the process
    expected = dict(CLEAN, dev_alive=1 if builtins else 0)
    assert state == expected


# (FAKE_FAIL, measure_cuda's options, the call the exception must name)
DRIVER_FAILURES = [
    ("cuMemAlloc:1", {"cold": "flush"}, "cu->cuMemAlloc(&f->buf, bytes)"),     # was "r"
    ("cuCtxGetLimit:1", {}, "cu->cuCtxGetLimit(limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE)"),
    ("cuEventCreate:1", {}, "cuEventCreate("),                  # the timer's first event
    ("cuEventCreate:66", {}, "cuEventCreate(&c->marks[i]"),     # a marker, after 64 timer events
    ("cuMemHostAlloc:1", {}, "cuMemHostAlloc("),                # the gate's flag
    ("cuMemHostGetDevicePointer:1", {}, "cuMemHostGetDevicePointer("),
    ("cuStreamWaitValue32:3", {}, "cuStreamWaitValue32("),      # a batch's gate
    ("cuEventRecord:5", {}, "cuEventRecord("),
    ("cuEventElapsedTime:3", {}, "cuEventElapsedTime("),
    ("cuStreamSynchronize:2", {}, "cuStreamSynchronize("),
    ("cuMemsetD32Async:3", {"cold": "flush"}, "cuMemsetD32Async("),
    ("cuLaunchKernel:2", {"busy_warmup_s": 0.3, "gate": False}, "cuLaunchKernel(k->busy"),
]


@pytest.mark.parametrize("fail,kw,call", DRIVER_FAILURES, ids=[f[0] for f in DRIVER_FAILURES])
def test_a_failed_driver_call_is_named_and_leaves_nothing_behind(fakes, fail, kw, call):
    out = run(fakes, {"what": "measure", "kw": kw}, FAKE_FAIL=fail)
    assert out["raised"] == "CudaError", out
    assert call in out["call"] and out["message"].startswith(out["call"] + " failed: "), out
    builtins = "busy_warmup_s" in kw
    assert_clean(out["state"], builtins)
    assert out["next"] == "events"
    assert_clean(out["state_after_next"], builtins)


@pytest.mark.parametrize("raised", ["ValueError", "KeyboardInterrupt"])
@pytest.mark.parametrize("mode", ["events", "cupti"])
@pytest.mark.parametrize("at", [1, 30])     # the priming call; inside a gated batch
def test_a_raising_callable_leaves_nothing_behind(fakes, mode, raised, at):
    out = run(fakes, {"what": "measure", "kw": {"mode": mode}, "raise": raised, "raise_at": at})
    assert out["raised"] == raised and out["message"] == "the callable failed"
    # CUPTI is taken (and its sentinel, the built-in empty kernel, loaded) after the priming call
    assert_clean(out["state"], builtins=mode == "cupti" and at > 1)
    assert out["next"] == mode


def test_the_cupti_timer_runs_against_the_fake_cupti(fakes):
    """The fake's records: one 1000 ns kernel per pushed id, attributed by external
    correlation as a real CUPTI's are."""
    out = run(fakes, {"what": "measure", "kw": {"mode": "cupti"}})
    assert out["raised"] is None, out
    assert out["result"]["backend"] == "cupti"
    assert out["result"]["samples"] == [1e-6] and out["result"]["kernels"] == [1]
    assert_clean(out["state"], builtins=True)


# (FAKE_CUPTI_FAIL, measure_cuda's options, the call the exception must name)
CUPTI_FAILURES = [
    ("cuptiSubscribe:1", {}, "api->cuptiSubscribe(&t->sub, trace_callback, &g_session)"),  # was r
    ("cuptiActivityRegisterCallbacks:1", {}, "cuptiActivityRegisterCallbacks("),
    ("cuptiActivityEnable:5", {}, "cuptiActivityEnable("),      # a kind half-way through
    ("cuptiGetTimestamp:3", {}, "cuptiGetTimestamp("),          # the unit check
    ("cuptiActivityFlushAll:1", {}, "t->api->cuptiActivityFlushAll(0)"),          # was "r"
    ("cuptiActivityPushExternalCorrelationId:10", {}, "cuptiActivityPushExternalCorrelationId("),
    # the device records switched off for the first keep-busy bridge (gate_batch=1 bridges
    # nearly every sub-batch against the fake's 1 ms events)
    ("cuptiActivityDisable:1", {"gate_batch": 1, "max_samples": 200},
     "t->api->cuptiActivityDisable(KINDS[i])"),                                   # was "r"
]


@pytest.mark.parametrize("fail,kw,call", CUPTI_FAILURES, ids=[f[0] for f in CUPTI_FAILURES])
def test_a_failed_cupti_call_is_named_and_cupti_is_restored(fakes, fail, kw, call):
    out = run(fakes, {"what": "measure", "kw": dict(kw, mode="cupti")}, FAKE_CUPTI_FAIL=fail)
    if out["raised"] is None and "Disable" in fail:
        assert out["result"]["bridges"] == 0
        pytest.skip("no keep-busy bridge ran on this host: nothing switched the records off")
    assert out["raised"] == "CuptiError", out
    assert call in out["call"] and out["message"].startswith(out["call"] + " failed: "), out
    # CUPTI's sentinel kernel loads kbench's built-in kernels once CUPTI is taken
    builtins = not fail.startswith(("cuptiSubscribe", "cuptiActivityRegister",
                                    "cuptiActivityEnable", "cuptiGetTimestamp"))
    assert_clean(out["state"], builtins)
    assert out["next"] == "cupti"
    assert_clean(out["state_after_next"], builtins=True)


@pytest.mark.parametrize("fail,call", [("cuMemAlloc:1", "cu->cuMemAlloc(&p, (size_t)nbytes)"),
                                       ("cuMemcpyDtoH:1",
                                        "cu->cuMemcpyDtoH(dst, self->ptr, self->nbytes)")])
def test_a_device_buffer_names_the_failed_call(fakes, fail, call):
    out = run(fakes, {"what": "buffer", "dtype": "float32"}, FAKE_FAIL=fail)  # were "r failed"
    assert out["raised"] == "CudaError" and out["call"] == call, out
    assert_clean(out["state"])
    assert out["next"] == 16


def test_a_device_buffer_reads_back_without_a_dtype(fakes):
    """to_numpy()'s default dtype: PyArray_DescrConverter2 was handed NULL for the missing
    argument and the process died (SIGSEGV); it takes None."""
    out = run(fakes, {"what": "buffer"})
    assert out["raised"] is None, out
    # the fake's cuMemcpyDtoH fills 0xab
    assert out["result"] == {"dtype": "uint8", "n": 64, "bytes": [0xab], "float32": 16}
    assert_clean(out["state"])
    assert out["next"] == 64


GOOD = 'extern "C" __global__ void f() {}'


def test_a_kernel_compiles_loads_and_launches_through_the_fakes(fakes):
    out = run(fakes, {"what": "kernel", "source": GOOD})
    assert out["raised"] is None, out
    assert out["result"] == {"registers": 1, "log": ""}
    assert_clean(out["state"])


def test_a_compile_error_names_nvrtc_compile_program_and_keeps_the_log(fakes):
    """It was a bare NvrtcError("NVRTC failed to compile f (...): ...") with no .call, .code or
    .name, the one NVRTC failure that named no call."""
    out = run(fakes, {"what": "kernel", "source": "#error no such kernel\n"})
    assert out["raised"] == "NvrtcError", out
    assert out["call"] == "rt->nvrtcCompileProgram(prog, n_opts + 1, opts)"
    head, rest = out["message"].split("\n", 1)
    assert head.startswith(out["call"] + " failed: NVRTC_ERROR_COMPILATION"), head
    assert rest.startswith("NVRTC failed to compile f (-arch=sm_")     # the log stays in str(e)
    assert "fake.cu(1): error: #error no such kernel" in rest
    assert_clean(out["state"])                  # the program destroyed, the context popped
    assert out["next"] == 1


@pytest.mark.parametrize("env,exc,call", [
    ({"FAKE_NVRTC_FAIL": "nvrtcGetCUBIN"}, "NvrtcError", "rt->nvrtcGetCUBIN(prog, cubin)"),
    ({"FAKE_FAIL": "cuModuleLoadData:1"}, "CudaError",
     "cu->cuModuleLoadData(&self->cumod, cubin)"),
])
def test_a_failed_kernel_build_step_is_named_and_leaves_nothing_behind(fakes, env, exc, call):
    out = run(fakes, {"what": "kernel", "source": GOOD}, **env)
    assert out["raised"] == exc and out["call"] == call, out
    assert_clean(out["state"])
    assert out["next"] == 1


def test_a_kind_cupti_would_not_disable_at_the_end_is_said_where_cupti_stays_attached(fakes):
    """The fake has no cuptiFinalize, so CUPTI stays attached as with a lingering subscriber:
    a kind whose disable failed goes on recording every launch of the process, and the result
    says so where it says how CUPTI was left (it was dropped in silence). No keep-busy bridges:
    whether one ran depended on the host's pace, and its disable, failing first, raised."""
    out = run(fakes, {"what": "measure", "kw": {"mode": "cupti", "keep_busy": False}},
              FAKE_CUPTI_FAIL="cuptiActivityDisable:-1")
    assert out["raised"] is None, out
    how = out["result"]["cupti_detach"]
    assert how.startswith("kept attached") and \
        "cuptiActivityDisable(kind " in how and "it may still record" in how, how
    clean = run(fakes, {"what": "measure", "kw": {"mode": "cupti"}})
    assert "cuptiActivityDisable" not in clean["result"]["cupti_detach"]
