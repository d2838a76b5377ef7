"""The lazily loaded GPU libraries (libcuda, libcupti, libnvidia-ml, libnvrtc), device queries,
the NVML snapshot and the NVML sampler thread.

Without a GPU the tests check the failure paths: the messages name every path tried with the
loader's reason, failures are remembered and the process stays usable. Tests marked ``gpu`` check
real values on a CUDA device (conftest.py skips them elsewhere).
"""
import ctypes
import gc
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

core = pytest.importorskip("kbench._core")

pytestmark = pytest.mark.skipif(
    not getattr(core, "HAVE_CUDA", 0),
    reason="kbench._core was built without CUDA headers, so it has no GPU loaders",
)

ROOT = Path(__file__).resolve().parents[1]
LIBS = ("cuda", "cupti", "nvml", "nvrtc")
GPU_LIBRARY_FILES = ("libcuda.so", "libcupti.so", "libnvidia-ml.so", "libnvrtc.so")


def status():
    return core.gpu_library_status()


def libcuda_loaded():
    # evaluated by skipif even in a build without CUDA, where the module-level mark skips all
    return bool(getattr(core, "HAVE_CUDA", 0)) and status()["cuda"]["loaded"]


needs_no_libcuda = pytest.mark.skipif(
    "libcuda_loaded()", reason="libcuda.so.1 is present: the missing-driver path cannot run here"
)


def run_python(code, **env_overrides):
    """Run `code` in a fresh interpreter that imports this worktree's kbench; return stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def tried_paths(message):
    """The paths listed under 'Tried:' in a LibraryNotFound message."""
    paths = []
    in_list = False
    for line in message.splitlines():
        if line.rstrip().endswith("Tried:"):
            in_list = True
            continue
        if in_list:
            if not line.startswith("  "):
                break
            path, sep, reason = line.strip().partition(": ")
            assert sep and reason, f"no loader reason on line {line!r}"
            paths.append(path)
    return paths


# ------------------------------------------------------------------ exception types


def test_exception_hierarchy():
    assert issubclass(core.LibraryNotFound, core.KbenchError)
    assert issubclass(core.LibraryNotFound, OSError)
    assert issubclass(core.CuptiBusy, core.CuptiError)
    for name in ("CudaError", "CuptiError", "NvmlError", "NvrtcError"):
        assert issubclass(getattr(core, name), core.KbenchError)


# ------------------------------------------------------------------ gpu_library_status


def test_status_reports_every_library_without_raising():
    st = status()
    assert set(st) == set(LIBS)
    for lib, entry in st.items():
        assert isinstance(entry["loaded"], bool), lib
        if entry["loaded"]:
            assert entry["path"] and os.path.exists(entry["path"]), (lib, entry)
            assert entry["version"] is not None, (lib, entry)
        else:
            assert entry["path"] is None, (lib, entry)
            assert entry["version"] is None, (lib, entry)
            assert isinstance(entry["error"], str) and entry["error"], (lib, entry)


def test_status_failures_name_each_path_tried_and_it_really_fails():
    st = status()
    failed = {lib: e for lib, e in st.items() if not e["loaded"]}
    if not failed:
        pytest.skip("every GPU library loads here")
    for lib, entry in failed.items():
        paths = tried_paths(entry["error"])
        assert paths, (lib, entry["error"])
        for path in paths:
            # each path the loader says it tried must indeed not open
            with pytest.raises(OSError):
                ctypes.CDLL(path)


def test_status_is_remembered():
    first = status()
    second = status()
    for lib in LIBS:
        assert first[lib]["error"] == second[lib]["error"]
        assert first[lib]["path"] == second[lib]["path"]


def test_cuda_headers_version_is_reported():
    assert status()["cuda"]["headers_version"] == core.CUDA_HEADERS_VERSION >= 12000


# ------------------------------------------------------------------ no driver


@needs_no_libcuda
@pytest.mark.parametrize("call", [
    lambda: core.cuda_device_count(),
    lambda: core.cuda_device_info(),
    lambda: core.cuda_device_info(ordinal=0),
    lambda: core.nvml_snapshot(0),
    lambda: core.nvml_sampler_start(0, 0.005),
], ids=["cuda_device_count", "cuda_device_info", "cuda_device_info_kw", "nvml_snapshot",
        "nvml_sampler_start"])
def test_missing_libcuda_raises_library_not_found_and_remembers(call):
    with pytest.raises(core.LibraryNotFound) as first:
        call()
    message = str(first.value)
    assert "libcuda.so.1" in message
    assert "Tried:" in message and "NVIDIA driver" in message   # how to fix
    assert "libcuda.so.1" in tried_paths(message)
    with pytest.raises(core.LibraryNotFound) as second:
        call()
    assert str(second.value) == message
    # still usable: other calls work, including one that loads nothing
    assert set(status()) == set(LIBS)
    assert core.nvml_clock_event_reason_names(4) == ["sw_power_cap"]


@needs_no_libcuda
def test_missing_libcuda_is_also_an_oserror():
    with pytest.raises(OSError):
        core.cuda_device_count()
    with pytest.raises(core.KbenchError):
        core.cuda_device_count()


# ------------------------------------------------------------------ CUPTI search


def test_cupti_path_env_that_does_not_exist_is_named():
    out = run_python(
        "import json, kbench._core as c; print(json.dumps(c.gpu_library_status()['cupti']))",
        KBENCH_CUPTI_PATH="/nonexistent/libcupti.so",
    )
    entry = json.loads(out)
    assert entry["loaded"] is False
    assert "KBENCH_CUPTI_PATH=/nonexistent/libcupti.so" in entry["error"]
    assert tried_paths(entry["error"]) == ["/nonexistent/libcupti.so"]


def test_cupti_path_env_directory_without_cupti_is_named(tmp_path):
    out = run_python(
        "import json, kbench._core as c; print(json.dumps(c.gpu_library_status()['cupti']))",
        KBENCH_CUPTI_PATH=str(tmp_path),
    )
    entry = json.loads(out)
    assert entry["loaded"] is False
    paths = tried_paths(entry["error"])
    assert paths and all(p.startswith(str(tmp_path) + "/libcupti.so") for p in paths)


def test_cupti_path_env_that_exists_is_used():
    found = status()["cupti"]
    if not found["loaded"]:
        pytest.skip("no libcupti on this machine")
    real = os.path.realpath(found["path"])
    out = run_python(
        "import json, kbench._core as c; print(json.dumps(c.gpu_library_status()['cupti']))",
        KBENCH_CUPTI_PATH=real,
    )
    entry = json.loads(out)
    assert entry["loaded"] is True
    assert os.path.realpath(entry["path"]) == real
    assert entry["from_process"] is False


def test_cupti_copy_already_in_process_wins_over_env():
    found = status()["cupti"]
    if not found["loaded"]:
        pytest.skip("no libcupti on this machine")
    code = (
        "import ctypes, json, sys\n"
        f"ctypes.CDLL({found['path']!r})\n"      # someone (torch) loaded CUPTI first
        "import kbench._core as c\n"
        "print(json.dumps(c.gpu_library_status()['cupti']))\n"
    )
    entry = json.loads(run_python(code, KBENCH_CUPTI_PATH="/nonexistent/libcupti.so"))
    assert entry["loaded"] is True and entry["from_process"] is True
    assert os.path.realpath(entry["path"]) == os.path.realpath(found["path"])


def _cupti_entry_after_preferring(path, env_path=None):
    code = ("import json, kbench._core as c\n"
            f"stored = c.prefer_cupti({str(path)!r})\n"
            "print(json.dumps(dict(c.gpu_library_status()['cupti'], stored=stored)))\n")
    return json.loads(run_python(code, KBENCH_CUPTI_PATH=env_path))


def _real_cupti():
    found = status()["cupti"]
    if not found["loaded"]:
        pytest.skip("no libcupti on this machine")
    return os.path.realpath(found["path"])


def test_a_preferred_cupti_file_is_opened_before_the_default_search(tmp_path):
    """kbench.backends.cuda hands C the copy PyTorch ships: an argument, not an environment
    variable."""
    copy = tmp_path / Path(_real_cupti()).name
    copy.write_bytes(Path(_real_cupti()).read_bytes())
    entry = _cupti_entry_after_preferring(copy)
    assert entry["stored"] is True and entry["loaded"] is True
    assert entry["path"] == str(copy) and entry["from_process"] is False


def test_kbench_cupti_path_wins_over_the_preferred_file(tmp_path):
    real = _real_cupti()
    copy = tmp_path / Path(real).name
    copy.write_bytes(Path(real).read_bytes())
    entry = _cupti_entry_after_preferring(copy, env_path=real)
    assert entry["loaded"] is True and os.path.realpath(entry["path"]) == real


def test_a_preferred_file_that_does_not_open_falls_back_to_the_default_search():
    _real_cupti()
    entry = _cupti_entry_after_preferring("/nonexistent/libcupti.so.13")
    assert entry["loaded"] is True and entry["path"] != "/nonexistent/libcupti.so.13"


def test_a_preference_after_cupti_was_opened_changes_nothing(tmp_path):
    code = ("import json, kbench._core as c\n"
            "first = c.gpu_library_status()['cupti']\n"
            f"stored = c.prefer_cupti({str(tmp_path / 'libcupti.so')!r})\n"
            "print(json.dumps([first, c.gpu_library_status()['cupti'], stored]))\n")
    first, again, stored = json.loads(run_python(code))
    assert stored is False and again == first


def test_prefer_cupti_refuses_what_is_not_a_path():
    with pytest.raises(TypeError, match="prefer_cupti: path must be a str or os.PathLike"):
        core.prefer_cupti(3)


# ------------------------------------------------------------------ import is free


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps")
def test_import_maps_no_gpu_library():
    out = run_python("import kbench._core; print(open('/proc/self/maps').read())")
    assert "_core" in out                     # the extension itself is mapped
    for name in GPU_LIBRARY_FILES:
        assert name not in out, f"importing kbench._core mapped {name}"


# ------------------------------------------------------------------ error checks


@pytest.mark.parametrize("lib,code,exc_name,known_name", [
    ("cuda", 2, "CudaError", "CUDA_ERROR_OUT_OF_MEMORY"),
    ("cupti", 1, "CuptiError", "CUPTI_ERROR_INVALID_PARAMETER"),
    ("cupti", 39, "CuptiBusy", "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"),
    ("nvml", 3, "NvmlError", "NVML_ERROR_NOT_SUPPORTED"),
    ("nvml", 999, "NvmlError", "NVML_ERROR_UNKNOWN"),
    ("nvrtc", 6, "NvrtcError", "NVRTC_ERROR_COMPILATION"),
])
def test_check_raises_typed_error_naming_the_call(lib, code, exc_name, known_name):
    status()   # load what loads, so names come from the library where it is present
    call = "api->someCall(&handle, 42)"
    with pytest.raises(getattr(core, exc_name)) as info:
        core._raise_check_error(lib, code, call)
    exc = info.value
    assert exc.call == call
    assert exc.code == code
    assert exc.name in (known_name, f"{lib.upper()} error {code}")
    message = str(exc)
    assert message.startswith(f"{call} failed: {exc.name}")
    # the source line is for developers (.where); the message users read has none
    assert re.fullmatch(r"cuda_device\.c:\d+", exc.where), exc.where
    assert not re.search(r"\.c:\d+", message), message


@pytest.mark.parametrize("lib,code,fallback", [
    ("cuda", 777, "CUDA error 777"),
    ("nvml", 4242, "NVML error 4242"),
    ("nvrtc", 4242, "NVRTC error 4242"),
])
def test_check_of_unknown_code_names_the_number(lib, code, fallback):
    status()
    with pytest.raises(core.KbenchError) as info:
        core._raise_check_error(lib, code, "f()")
    if lib == "cuda" and libcuda_loaded():
        assert info.value.code == code     # the driver has its own name for unknown codes
    else:
        assert info.value.name == fallback


@pytest.mark.parametrize("lib", LIBS)
def test_check_of_success_returns_none(lib):
    assert core._raise_check_error(lib, 0, "f()") is None


def test_check_of_unknown_library_is_a_value_error():
    with pytest.raises(ValueError, match="hip"):
        core._raise_check_error("hip", 1, "f()")


# ------------------------------------------------------------------ clock event reasons


@pytest.mark.parametrize("mask,names", [
    (0, []),
    (0x1, ["gpu_idle"]),
    (0x4 | 0x20, ["sw_power_cap", "sw_thermal_slowdown"]),
    (0x8 | 0x40 | 0x80, ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]),
    (0x100 | (1 << 40), ["display_clock_setting", "unknown_0x10000000000"]),
    (1 << 63, ["unknown_0x8000000000000000"]),
])
def test_clock_event_reason_names(mask, names):
    assert core.nvml_clock_event_reason_names(mask) == names


def test_clock_event_reason_names_rejects_negative():
    with pytest.raises(OverflowError):
        core.nvml_clock_event_reason_names(-1)


# ------------------------------------------------------------------ sampler arguments


@pytest.mark.parametrize("period", [0.0, -1.0, float("nan"), float("inf"), 1e-6, 1e9])
def test_sampler_rejects_bad_period_before_loading_anything(period):
    with pytest.raises(ValueError, match="period_s"):
        core.nvml_sampler_start(0, period)


@pytest.mark.parametrize("obj", [None, 3, object()])
def test_sampler_stop_rejects_other_objects(obj):
    with pytest.raises(TypeError, match="nvml_sampler_start"):
        core.nvml_sampler_stop(obj)


# ------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
def test_gpu_status_has_driver():
    entry = status()["cuda"]
    assert entry["loaded"] and entry["initialized"] and entry["error"] is None
    assert entry["version"] >= 12000
    assert os.path.exists(entry["path"])


@pytest.mark.gpu
def test_gpu_bad_ordinal_is_a_value_error():
    n = core.cuda_device_count()
    for ordinal in (-1, n):
        with pytest.raises(ValueError, match="out of range"):
            core.cuda_device_info(ordinal)
        with pytest.raises(ValueError, match="out of range"):
            core.nvml_snapshot(ordinal)


@pytest.mark.gpu
def test_gpu_device_info():
    info = core.cuda_device_info(0)
    assert info["name"]
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                        info["uuid"])
    assert re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]",
                        info["pci_bus_id"])
    major, minor = info["compute_capability"]
    assert major >= 5 and minor >= 0
    assert info["sm_count"] > 0
    assert info["l2_bytes"] > 0
    assert 0 <= info["max_persisting_l2_bytes"] <= info["l2_bytes"]
    if info["persisting_l2_limit_bytes"] is not None:
        assert 0 <= info["persisting_l2_limit_bytes"] <= info["max_persisting_l2_bytes"]
    assert 0 < info["free_memory_bytes"] <= info["total_memory_bytes"]
    assert info["driver_version"] >= 12000
    assert info["memory_bus_width_bits"] is None or info["memory_bus_width_bits"] > 0
    assert info["warp_size"] == 32
    if info["nvml_error"] is None:
        assert info["nvml_max_sm_clock_mhz"] >= 100
        assert 0 < info["nvml_sm_clock_mhz"] <= info["nvml_max_sm_clock_mhz"]


@pytest.mark.gpu
def test_gpu_device_info_matches_nvml_device():
    info = core.cuda_device_info(0)
    snap = core.nvml_snapshot(0)
    assert snap["pci_bus_id"] == info["pci_bus_id"]   # the same physical GPU
    assert snap["memory_total_bytes"] >= info["total_memory_bytes"] * 0.9


@pytest.mark.gpu
def test_gpu_nvml_snapshot_values_are_sane():
    snap = core.nvml_snapshot(0)
    assert 0 < snap["sm_clock_mhz"] <= snap["max_sm_clock_mhz"] <= 5000
    assert 0 < snap["memory_clock_mhz"] <= snap["max_memory_clock_mhz"] <= 20000
    assert 0 < snap["power_w"] < 2000
    if snap["power_limit_w"] is not None:
        assert 0 < snap["power_limit_w"] < 2000
    assert 0 < snap["temperature_c"] < 120
    reasons = snap["clock_event_reasons"]
    assert isinstance(reasons, int) and reasons >= 0
    assert snap["clock_event_reason_names"] == core.nvml_clock_event_reason_names(reasons)
    assert 0 <= snap["gpu_utilization_pct"] <= 100
    assert 0 <= snap["memory_utilization_pct"] <= 100
    assert 0 < snap["memory_used_bytes"] <= snap["memory_total_bytes"]
    if snap["compute_processes"] is not None:
        assert snap["compute_process_count"] == len(snap["compute_processes"])
        for proc in snap["compute_processes"]:
            assert proc["pid"] > 0


@pytest.mark.gpu
def test_gpu_sampler_records_while_running():
    period = 0.005
    sampler = core.nvml_sampler_start(0, period)
    time.sleep(0.2)
    out = core.nvml_sampler_stop(sampler)
    n = out["n"]
    assert n >= 10
    for key in ("t_s", "sm_mhz", "mem_mhz", "power_w", "temp_c"):
        assert out[key].dtype == np.float64 and out[key].shape == (n,), key
    assert out["reasons"].dtype == np.uint64 and out["reasons"].shape == (n,)
    t = out["t_s"]
    assert t[0] >= 0 and np.all(np.diff(t) > 0)
    assert t[-1] <= out["duration_s"]
    # ticks sit on a fixed grid: no two closer than most of a period
    assert np.min(np.diff(t)) > 0.5 * period
    assert out["errors"] == 0, (out["first_error"], out["first_error_call"])
    assert out["first_error"] is None and not out["truncated"]
    assert np.all(out["sm_mhz"] > 0) and np.all(out["mem_mhz"] > 0)
    assert np.all((out["power_w"] > 0) & (out["power_w"] < 2000))
    assert np.all((out["temp_c"] > 0) & (out["temp_c"] < 120))
    assert math.isclose(out["period_s"], period)
    # no measurement marked a timed part: nothing is the warm-up's
    assert out["mark_s"] == 0.0 and out["before_mark"] == 0
    assert all(out["warmup"][k].shape == (0,) for k in ("t_s", "sm_mhz", "reasons"))
    with pytest.raises(ValueError, match="already stopped"):
        core.nvml_sampler_stop(sampler)


@pytest.mark.gpu
def test_gpu_sampler_dropped_without_stop_is_joined():
    sampler = core.nvml_sampler_start(0, 0.001)
    time.sleep(0.02)
    del sampler
    gc.collect()
    # the thread is gone and the module still works
    out = core.nvml_sampler_stop(core.nvml_sampler_start(0, 0.001))
    assert out["n"] >= 1


def test_cupti_copy_renamed_by_a_wheel_is_found_in_process(tmp_path):
    found = status()["cupti"]
    if not found["loaded"]:
        pytest.skip("no libcupti on this machine")
    renamed = tmp_path / "libcupti-1a2b3c4d.so.13"       # how auditwheel renames bundled libs
    renamed.write_bytes(Path(found["path"]).read_bytes())
    code = (
        "import ctypes, json\n"
        f"ctypes.CDLL({str(renamed)!r})\n"
        "import kbench._core as c\n"
        "print(json.dumps(c.gpu_library_status()['cupti']))\n"
    )
    entry = json.loads(run_python(code, KBENCH_CUPTI_PATH=None))
    assert entry["loaded"] is True and entry["from_process"] is True
    assert entry["path"] == str(renamed)


def _typedefs_header() -> Path:
    """cudaTypedefs.h of the headers this checkout builds against (or the toolkit's)."""
    import importlib.util
    cands = []
    if os.environ.get("KBENCH_CUDA_INCLUDE"):
        cands.append(Path(os.environ["KBENCH_CUDA_INCLUDE"]))
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        cands.append(Path(base) / "cu13" / "include")
    cands.append(Path("/usr/local/cuda/include"))
    for c in cands:
        if (c / "cudaTypedefs.h").is_file():
            return c / "cudaTypedefs.h"
    pytest.skip("no cudaTypedefs.h (nvidia-cuda-runtime headers or a CUDA toolkit) here")


def test_every_driver_function_is_looked_up_at_the_abi_of_its_prototype():
    """cuGetProcAddress hands out the newest ABI at the lookup version (CUDA_VERSION of the
    headers). A function that gained a new ABI after 12.9 (cuCtxSynchronize_v13000 takes a
    context) must be in KB_CUDA_REQUIRED_PRE13 (looked up at 12.9) or name that version as its
    abi_since; otherwise kbench calls the new ABI with the old arguments."""
    loader_h = ROOT / "csrc" / "loaders" / "loader.h"
    if not loader_h.is_file():
        pytest.skip("not a source checkout (no csrc/): the wheel's suite runs from a copy of tests/")
    loader = loader_h.read_text()
    header = _typedefs_header()
    typedefs = "".join(f.read_text() for f in (header, header.parent / "cudaProfilerTypedefs.h")
                       if f.is_file())
    lists = {}
    for lst in ("KB_CUDA_REQUIRED", "KB_CUDA_OPTIONAL", "KB_CUDA_REQUIRED_PRE13"):
        body = re.search(r"#define %s\(X\)(.*?)(?:\n\n|\n#define|\n/\*)" % lst, loader, re.S).group(1)
        lists[lst] = dict((n, int(v)) for n, v in re.findall(r"X\((\w+), (\d+)\)", body))
    cap = int(re.search(r"#define KB_CUDA_PRE13_LOOKUP (\d+)", loader).group(1))
    assert lists["KB_CUDA_REQUIRED"] and lists["KB_CUDA_REQUIRED_PRE13"]
    header_version = int(re.search(r"#define CUDA_VERSION (\d+)",
                                   (header.parent / "cuda.h").read_text()).group(1))
    wrong = []
    for lst, funcs in lists.items():
        for name, abi_since in funcs.items():
            versions = [int(v) for v in re.findall(r"PFN_%s_v(\d+)\)" % name, typedefs)]
            assert versions, f"{name}: no PFN_{name}_v* in cudaTypedefs.h"
            lookup = min(cap, header_version) if lst.endswith("PRE13") else header_version
            served = max(v for v in versions if v <= lookup)
            if lst.endswith("PRE13"):
                if max(versions) <= cap:
                    wrong.append(f"{name} has no ABI newer than {cap}: move it back to its list")
            elif served > cap and served != abi_since:
                wrong.append(f"{name}: the driver serves its {served} ABI at {lookup}")
    assert not wrong, wrong
