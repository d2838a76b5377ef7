"""The README as a new user reads it: short, its set-up the two commands CI runs, and every
quick start runnable as written (on the CPU)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
pytestmark = pytest.mark.skipif(not README.exists(),
                                reason="README.md is not beside tests/ (a copy of the suite)")
SETUP = ['python3 -m pip install -e ".[test]" && python3 -m kbench demo',
         "python3 -m pytest tests/"]


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def run(cmd, cwd, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(README.parent), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_readme_fits_two_screens_and_opens_with_the_two_set_up_commands():
    assert len(README.read_text().splitlines()) <= 150
    assert blocks("bash")[0].strip().splitlines() == SETUP
    ci = (README.parent / ".ci" / "run").read_text()
    assert all(line in ci for line in SETUP)            # CI installs exactly as it says


@pytest.mark.parametrize("index", [0, 2])
def test_a_python_quick_start_runs_as_written(tmp_path, index):
    """The notebook cell and the vLLM-style script: each prints its figure and a stop rule."""
    code = blocks("python")[index]
    p = run([sys.executable, "-c", code], tmp_path)
    assert p.returncode == 0, p.stderr
    assert re.search(r"budget|precision", p.stdout), p.stdout


def test_the_pytest_quick_start_saves_then_gates_as_written(tmp_path):
    test_file = blocks("python")[1]
    assert test_file.startswith("# test_kernels.py\n")
    (tmp_path / "test_kernels.py").write_text(test_file)
    save, gate = blocks("bash")[1].strip().splitlines()
    p = run([sys.executable] + save.split()[1:], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "base.json").exists() and "saved 1 result(s)" in p.stdout
    p = run([sys.executable] + gate.split()[1:], tmp_path)
    # unchanged code: the gate passes, or (a machine that moved between the two sessions)
    # fails; either way pytest's closing line agrees with the exit status
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert "compared with base.json" in p.stdout
    closing = p.stdout.strip().splitlines()[-1]
    assert ("kbench gate failed" in closing) == (p.returncode == 1), p.stdout
