"""Build the HIP-on-CUDA forwarding library (hip_forward.c) with gcc: no CUDA or HIP header is
needed, libcuda is opened at run time. `python tests/hip_forward/build_forwarder.py OUT_DIR` prints the
path; tests and benchmarks import build()."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("hip_forward.c")
FAKE = Path(__file__).with_name("hip_fake.c")      # the CPU stand-in for the CPU tests


def build(out_dir: Path, source: Path = SOURCE) -> Path:
    """Compile lib<source stem>.so into out_dir and return its path; RuntimeError with gcc's
    output when it does not compile."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc) on PATH to build the HIP forwarder")
    out = Path(out_dir) / f"lib{source.stem}.so"
    cmd = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
           "-fvisibility=hidden", "-o", str(out), str(source), "-ldl", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the HIP forwarder failed: {' '.join(cmd)}\n{proc.stderr}")
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
