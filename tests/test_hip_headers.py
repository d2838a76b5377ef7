"""kbench declares the HIP API by hand (csrc/hip/hip_decls.h: no HIP header at build time). This
checks those declarations against the real HIP headers, so the table cannot drift: every
function type kbench calls through is compatible with HIP's prototype and every value matches.
Needs hip/hip_runtime_api.h (Debian: apt-get install libamdhip64-dev, which .ci/run does)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECLS = ROOT / "csrc" / "hip" / "hip_decls.h"
CHECK = Path(__file__).resolve().parent / "hip_headers" / "check_decls.c"


def _hip_include() -> Path | None:
    for d in (Path("/usr/include"), Path("/opt/rocm/include")):
        if (d / "hip" / "hip_runtime_api.h").is_file():
            return d
    return None


HIP_INC = _hip_include()
pytestmark = [
    pytest.mark.skipif(HIP_INC is None, reason="no hip/hip_runtime_api.h (install Debian's "
                                               "libamdhip64-dev, as .ci/run does)"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
    pytest.mark.skipif(not DECLS.is_file(), reason="not a source checkout (no csrc/)"),
]


def compile_check(decls_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    src = tmp_path / "check.c"
    src.write_text(CHECK.read_text())
    return subprocess.run(["gcc", "-std=gnu11", "-fsyntax-only", f"-I{decls_dir}",
                           f"-I{HIP_INC}", str(src)], capture_output=True, text=True)


def test_declarations_match_the_hip_headers(tmp_path):
    p = compile_check(DECLS.parent, tmp_path)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("old,new,name", [
    ("X(hipRuntimeGetVersion, kb_hipError_t, (int *v))",
     "X(hipRuntimeGetVersion, kb_hipError_t, (long *v))", "hipRuntimeGetVersion"),
    ("KB_hipDeviceAttributeL2CacheSize = 19", "KB_hipDeviceAttributeL2CacheSize = 18",
     "hipDeviceAttributeL2CacheSize"),
])
def test_a_drifted_declaration_fails(tmp_path, old, new, name):
    """The check can fail: a wrong parameter type or value does not compile."""
    text = DECLS.read_text()
    assert old in text
    (tmp_path / "hip_decls.h").write_text(text.replace(old, new))
    p = compile_check(tmp_path, tmp_path)
    assert p.returncode != 0 and name in p.stderr
