"""kbench's built-in kernels are PTX text in csrc/cuda/cuda_kernels.c, JIT-compiled by the driver
on first use: a typo there would surface only on a GPU. Here ptxas assembles the same text for
the oldest target ptxas knows and a current one, so the CPU suite catches it."""
import codecs
import pathlib
import re
import shutil
import subprocess

import pytest

SOURCE = pathlib.Path(__file__).resolve().parent.parent / "csrc" / "cuda" / "cuda_kernels.c"
PTXAS = shutil.which("ptxas") or shutil.which("ptxas", path="/usr/local/cuda/bin")
pytestmark = pytest.mark.skipif(not SOURCE.exists(), reason="not a source checkout (no csrc/): "
                                "the wheel's suite runs from a copy of tests/")


def builtin_ptx() -> str:
    """The BUILTIN_PTX string literal, as the C compiler joins it."""
    text = SOURCE.read_text()
    block = text[text.index("BUILTIN_PTX[] ="):]
    block = block[:block.index('";\n') + 2]
    block = re.sub(r"/\*.*?\*/", "", block, flags=re.S)
    pieces = re.findall(r'"((?:[^"\\]|\\.)*)"', block)
    return "".join(codecs.decode(p, "unicode_escape") for p in pieces)


def test_the_builtin_ptx_declares_the_kernels_the_c_code_looks_up():
    ptx = builtin_ptx()
    entries = set(re.findall(r"\.visible \.entry (\w+)\(", ptx))
    looked_up = set(re.findall(r'cuModuleGetFunction\(&k->\w+, k->module, "(\w+)"\)',
                               SOURCE.read_text()))
    assert {"kb_empty", "kb_busy"} <= looked_up     # the pattern still finds the look-ups
    assert looked_up <= entries


@pytest.mark.skipif(PTXAS is None, reason="ptxas (the CUDA toolkit) is not installed")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_the_builtin_ptx_assembles(tmp_path, arch):
    src = tmp_path / "builtin.ptx"
    src.write_text(builtin_ptx())
    out = subprocess.run([PTXAS, f"-arch={arch}", str(src), "-o", str(tmp_path / "b.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
