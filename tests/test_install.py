"""The build and the installed package: what _core was built with, the files an install must
carry, `kbench info`, the missing-backend error.

scripts/test_wheel.sh runs the whole suite against a wheel installed in a fresh venv, from a
copy of tests/ outside the source tree, with KBENCH_TEST_INSTALLED=1: then the tests below also
check that the kbench under test is that install and not a checkout.
"""
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import kbench
from kbench import _core
from kbench._build import build_info, describe_build

PKG = Path(kbench.__file__).resolve().parent
INSTALLED = os.environ.get("KBENCH_TEST_INSTALLED") == "1"
# what _core may link: glibc's own libraries (every GPU library is opened with dlopen)
ALLOWED_NEEDED = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6"}


def test_every_build_has_the_cuda_backend_unless_asked_not_to():
    b = build_info()
    assert b["backends"][0] == "host"
    assert bool(_core.HAVE_CUDA) == ("cuda" in b["backends"])
    assert bool(getattr(_core, "HAVE_HIP", 0)) == ("hip" in b["backends"])   # built with CUDA
    # the compiler's own flags are recorded too: the interpreter's (-fwrapv, -DNDEBUG) and
    # $CFLAGS come before kbench's
    assert "-std=gnu11" in b["cflags"] and b["cflags"].split()[0] != "-std=gnu11"
    if not _core.HAVE_CUDA:
        assert os.environ.get("KBENCH_NO_CUDA"), (
            "a CPU-only _core, but KBENCH_NO_CUDA is not set: the build should have found the "
            "CUDA headers (pip packages or a toolkit) or failed")
        return
    assert b["cuda_version"] == _core.CUDA_HEADERS_VERSION
    assert b["cuda_version"] // 1000 == 13, b        # pyproject pins CUDA 13 header packages
    assert b["cupti_api_version"] // 10000 == b["cuda_version"] // 1000
    assert b["headers"]
    assert b["python"].split(".")[:2] == [str(v) for v in sys.version_info[:2]]


@pytest.mark.skipif(not INSTALLED, reason="only for a wheel install (scripts/test_wheel.sh)")
def test_a_wheel_is_built_from_the_pinned_header_packages():
    # a wheel's headers are reproducible: the pinned packages, not the build machine's toolkit
    assert build_info()["headers"].startswith("pip packages: nvidia-cuda-runtime 13.0.48"), \
        build_info()


def test_core_links_nothing_but_glibc():
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    out = subprocess.run([readelf, "-d", _core.__file__], capture_output=True, text=True,
                         check=True).stdout
    needed = {line.split("[", 1)[1].rstrip("]").strip() for line in out.splitlines()
              if "(NEEDED)" in line}
    if any(n.startswith(("libasan", "libubsan")) for n in needed):
        pytest.skip(f"a sanitizer build (KBENCH_SANITIZE) links its runtime: {sorted(needed)}")
    assert needed and needed <= ALLOWED_NEEDED, needed
    assert "(RPATH)" not in out and "(RUNPATH)" not in out, out


def test_package_data_is_installed():
    assert (PKG / "py.typed").is_file()
    assert (PKG / "_core.pyi").is_file()
    for name in ("copy.cu", "fma.cu"):   # as kbench.roofline.peaks_gpu reads them
        src = resources.files("kbench.kernels").joinpath("cuda", name).read_text()
        assert "__global__" in src
    from kbench.roofline.peaks_gpu import _kernel_source
    assert "kb_copy16" in _kernel_source("copy.cu")
    assert "kb_fma" in _kernel_source("fma.cu")


def test_a_checkout_reads_the_kernels_from_its_own_folder_without_package_data():
    """peaks_gpu's fallback climbs from kbench/roofline/ to the checkout's kernels/."""
    if not (PKG.parent / "kernels" / "cuda" / "fma.cu").is_file():
        pytest.skip("not a checkout: no kernels/ beside the package")
    from unittest import mock
    from kbench.roofline import peaks_gpu
    with mock.patch.object(peaks_gpu.resources, "files", side_effect=ModuleNotFoundError):
        assert "kb_fma" in peaks_gpu._kernel_source("fma.cu")


@pytest.mark.skipif(not INSTALLED, reason="only for a wheel install (scripts/test_wheel.sh)")
def test_the_kbench_under_test_is_the_install_not_a_checkout():
    assert "site-packages" in PKG.parts, PKG
    assert not (PKG.parent / "setup.py").exists()
    assert not (PKG.parent / "csrc").exists()
    assert Path(_core.__file__).resolve().parent == PKG
    # and the tests themselves do not sit in the checkout either
    assert not (Path(__file__).resolve().parents[1] / "setup.py").exists()


def test_info_shows_the_build():
    p = subprocess.run([sys.executable, "-m", "kbench", "info"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    line = next(line for line in p.stdout.splitlines() if line.startswith("build: "))
    assert line == describe_build()
    if _core.HAVE_CUDA:
        v = build_info()["cuda_version"]
        assert f"backends host, cuda, hip; CUDA headers {v // 1000}.{v % 1000 // 10}" in line
        assert f"CUDA_VERSION {v}" in line and "CUPTI API" in line
    else:
        assert "pip install" in line


def test_missing_backend_error_says_how_to_get_it_with_pip(monkeypatch):
    from kbench.backends.cuda import require_backend
    monkeypatch.setattr(_core, "HAVE_CUDA", 0)
    with pytest.raises(_core.LibraryNotFound) as e:
        require_backend()
    msg = str(e.value)
    assert "KBENCH_NO_CUDA" in msg and "pip install" in msg and "nvidia-cuda-cupti" in msg
