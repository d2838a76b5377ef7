"""metadata.gpu_libraries: the GPU libraries a process has loaded and the versions they report,
read from the process's memory map (loading nothing). Fake libraries (tests/fake_gpu_libs)
stand in for cuBLAS, cuDNN and NCCL: each exports only the version call kbench makes."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kbench.provenance import metadata

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_gpu_libs" / "fake_versions.c"

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").is_file(),
                                reason="gpu_libraries reads /proc/self/maps (Linux)")


def _build(gcc: str, out: Path, name: str, **defines) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    lib = out / name
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(SOURCE)]
                   + [f"-D{k}={v}" for k, v in defines.items()], check=True)
    return lib


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("building the fake libraries needs gcc")
    root = tmp_path_factory.mktemp("gpu_libs")
    return {
        "cublas": _build(gcc, root / "a", "libcublas.so.13", MAJOR=13, MINOR=1, PATCH=4),
        "cudnn9": _build(gcc, root / "a", "libcudnn.so.9", VERSION=90100),
        "cudnn8": _build(gcc, root / "b", "libcudnn.so.8", VERSION=8907),
        "nccl": _build(gcc, root / "a", "libnccl.so.2", VERSION=22703),
        "cudart": _build(gcc, root / "a", "libcudart.so.13", VERSION=13000),
        "unloaded": _build(gcc, root / "c", "libcublasLt.so.13", VERSION=130104),
    }


def _in_child(load, maps=None):
    """gpu_libraries() in a fresh process that loaded the libraries `load` (RTLD_GLOBAL, as
    torch's own loads are), read from `maps` (a file) or its own memory map."""
    script = textwrap.dedent(f"""
        import ctypes, json, os
        from kbench.provenance import metadata
        for p in {[str(p) for p in load]!r}:
            ctypes.CDLL(p, mode=os.RTLD_GLOBAL)
        libs = metadata.gpu_libraries(*{[maps] if maps else []!r})
        mapped = open("/proc/self/maps").read()
        print(json.dumps({{"libs": libs, "mapped": mapped}}))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_loaded_libraries_are_named_with_the_versions_they_report(fakes):
    got = _in_child([fakes["cublas"], fakes["cudnn9"], fakes["nccl"], fakes["cudart"]])["libs"]
    assert got["cublas"] == {"path": str(fakes["cublas"]), "version": "13.1.4"}
    assert got["cudnn"] == {"path": str(fakes["cudnn9"]), "version": "9.1.0"}
    assert got["nccl"] == {"path": str(fakes["nccl"]), "version": "2.27.3"}
    assert got["cudart"] == {"path": str(fakes["cudart"]), "version": "13.0"}
    assert "cublasLt" not in got        # not loaded: not listed


def test_two_copies_of_one_library_are_both_recorded(fakes):
    # cuDNN 8's older encoding (major*1000) and cuDNN 9's (major*10000) in one process
    got = _in_child([fakes["cudnn9"], fakes["cudnn8"]])["libs"]["cudnn"]
    assert got["copies"] == [{"path": str(fakes["cudnn9"]), "version": "9.1.0"},    # a/ < b/
                             {"path": str(fakes["cudnn8"]), "version": "8.9.7"}]
    assert got["path"] == str(fakes["cudnn9"]) and got["version"] == "9.1.0"


def test_a_library_only_named_in_the_map_is_not_loaded_to_ask_its_version(fakes, tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(f"7f0000000000-7f0000001000 r--p 00000000 08:01 42 {fakes['unloaded']}\n"
                    f"7f0000002000-7f0000003000 r--p 00000000 08:01 43 /usr/lib/libc.so.6\n")
    out = _in_child([], maps=str(maps))
    assert out["libs"] == {"cublasLt": {"path": str(fakes["unloaded"]), "version": None}}
    assert str(fakes["unloaded"]) not in out["mapped"]


def test_no_memory_map_is_no_libraries(tmp_path):
    assert metadata.gpu_libraries(str(tmp_path / "missing")) == {}


def test_every_result_records_the_libraries_loaded_when_it_was_measured(fakes):
    script = textwrap.dedent(f"""
        import ctypes, json, os
        import numpy as np, kbench
        a = np.ones(256)
        before = kbench.bench(np.sum, a, max_time_s=0.05, min_samples=3, memory=False)
        ctypes.CDLL({str(fakes["cublas"])!r}, mode=os.RTLD_GLOBAL)    # as a first matmul does
        after = kbench.bench(np.sum, a, max_time_s=0.05, min_samples=3, memory=False)
        print(json.dumps([r.metadata.get("gpu_libraries") for r in (before, after)]))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    before, after = json.loads(p.stdout.strip().splitlines()[-1])
    assert "cublas" not in before
    assert after["cublas"] == {"path": str(fakes["cublas"]), "version": "13.1.4"}


@pytest.mark.gpu
def test_a_torch_gpu_result_names_its_cublas_cudnn_and_driver_build():
    torch = pytest.importorskip("torch")
    import re
    import kbench
    a = torch.randn(256, 256, device="cuda")
    r = kbench.bench(torch.matmul, a, a, max_time_s=0.2)
    libs = r.metadata["gpu_libraries"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", libs["cublas"]["version"]), libs["cublas"]
    assert int(libs["cublas"]["version"].split(".")[0]) >= 11
    assert os.path.isfile(libs["cublas"]["path"])
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if cudnn and "cudnn" in libs:       # torch's own reading, in the encoding of its major
        base = 10000 if cudnn >= 90000 else 1000
        assert libs["cudnn"]["version"] == \
            f"{cudnn // base}.{cudnn % base // 100}.{cudnn % 100}"
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", r.metadata["gpu"]["nvml_driver_version"])


def test_the_first_result_reads_git_and_the_libraries_once():
    """The first result of a process collected the host record (git, the libraries, the
    environment) and then re-read the per-result fields at once, and the host record ran its
    own `git status` beside the harness record's: git ran three times (13 ms each on the CI VM)
    and the maps were parsed twice. Later results re-read the libraries, and git only after
    GIT_CACHE_S."""
    script = textwrap.dedent("""
        import json
        import numpy as np, kbench
        from kbench.provenance import metadata
        calls = {"git": 0, "libs": 0}
        def counted(name, f):
            def g(*a, **k):
                calls[name] += 1
                return f(*a, **k)
            return g
        metadata.git_info = counted("git", metadata.git_info)
        metadata.gpu_libraries = counted("libs", metadata.gpu_libraries)
        a = np.ones(256)
        seen, keys = [], []
        for _ in range(2):
            r = kbench.bench(np.sum, a, max_time_s=0.05, min_samples=3, memory=False)
            seen.append(dict(calls))
            keys.append(sorted(r.metadata))
        print(json.dumps({"seen": seen, "same_keys": keys[0] == keys[1]}))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    # git: kbench's own checkout and the working directory's, each once (the harness record
    # and the host record share the second)
    assert out["seen"] == [{"git": 2, "libs": 1}, {"git": 2, "libs": 2}], out
    assert out["same_keys"]
