"""Every code block of the docs (docs/*.md) runs as written, on the CPU where it can.

A fenced block says what it is, by its language and, where it cannot run here, a marker on the
nearest non-blank line above its fence (an HTML comment: mkdocs renders nothing for it):

  ```python / ```bash      runs here, in a subprocess in a temporary directory, with a timeout.
                           A python block that opens with `# name.py` is a file: it is written
                           into the directory of every block of its page (a `# test_*.py` file
                           is also run by pytest, with --kbench-max-time to keep it short); a
                           bash block holds kbench, python or pytest commands, run in order.
  <!-- gpu -->             needs what this host has not (a GPU, torch, several ranks, AMD):
                           skipped here, checked statically (it parses, the kbench names and
                           bench options it uses exist), and written out for scripts/gpu_check.sh
                           by `python3 tests/test_docs_blocks.py --emit-gpu DIR`.
  <!-- fragment: why -->    not a program (a sketch with placeholders, a command template): checked
                           statically when it is Python, never run; the reason is required.
  <!-- setup -->           the set-up commands, which CI (.ci/run) runs: must equal the README's.
  ```text                  output, a formula: nothing to run.

README.md's blocks are run by tests/test_readme.py.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKS = ("gpu", "fragment", "setup")
MARK = re.compile(r"^<!--\s*(\w+)\s*(?::\s*(.*?))?\s*-->$")
FENCE = re.compile(r"^```\s*(\S*)\s*$")
FILE_HEADER = re.compile(r"^# ([\w.-]+\.py)\s*$")
#: what a runnable bash line may start with: commands of this package and its test runner
BASH_COMMANDS = ("kbench", "python", "python3", "pytest")
#: per-bench budget for pytest blocks (the plugin's documented --kbench-max-time): a docs
#: block shows how to call, not a figure worth waiting for
MAX_TIME = "0.1"
TIMEOUT_S = 180


@dataclass
class Block:
    page: str
    line: int               # the fence's line, 1-based
    lang: str
    code: str
    mark: Optional[str]     # gpu, fragment, setup or None
    why: str                # the marker's reason
    mark_text: str = ""     # the marker line as written (for the error message)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def filename(self) -> Optional[str]:
        m = FILE_HEADER.match(self.code.split("\n", 1)[0])
        return m.group(1) if m and self.lang == "python" else None


def page_blocks(page: Path) -> List[Block]:
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise ValueError(f"{page.name}:{i + 1}: a fence that never closes")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        above = lines[k].strip() if k >= 0 else ""
        mark = MARK.match(above)
        out.append(Block(page.name, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n",
                         mark.group(1) if mark else None, (mark.group(2) or "") if mark else "",
                         above if mark else ""))
        i = end + 1
    return out


def all_blocks() -> List[Block]:
    return [b for page in sorted(DOCS.glob("*.md")) for b in page_blocks(page)]


def bash_commands(code: str) -> List[List[str]]:
    """The block's commands, one a line (a trailing backslash continues it), comments dropped."""
    joined = re.sub(r"\\\n", " ", code)
    return [words for words in (shlex.split(line, comments=True) for line in joined.splitlines())
            if words]


def problems(b: Block) -> List[str]:
    """Why a block does not say what it is (empty when it does)."""
    where = f"{b.id}"
    if b.mark_text and b.mark not in MARKS:
        return [f"{where}: unknown marker {b.mark_text!r} (one of {', '.join(MARKS)})"]
    if b.lang not in ("python", "bash", "text"):
        return [f"{where}: fence a block as ```python, ```bash or ```text (got "
                f"{b.lang or 'no language'!r}), so this test knows whether to run it"]
    if b.lang == "text":
        return [f"{where}: a ```text block runs nothing: drop {b.mark_text!r}"] if b.mark else []
    if b.mark == "fragment" and not b.why:
        return [f"{where}: say why it is a fragment: <!-- fragment: the reason -->"]
    if b.mark == "setup" and b.lang != "bash":
        return [f"{where}: <!-- setup --> marks the set-up commands, a bash block"]
    if b.lang == "bash" and b.mark is None:
        bad = [" ".join(c) for c in bash_commands(b.code) if c[0] not in BASH_COMMANDS]
        if bad:
            return [f"{where}: {bad[0]!r} is not a kbench, python or pytest command this test "
                    f"can run here: mark the block <!-- gpu --> or <!-- fragment: why -->"]
    return []


def _env() -> Dict[str, str]:
    # the kbench of this checkout, as tests/test_readme.py runs the README's blocks
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def write_page_files(page: str, directory: Path) -> None:
    """The files the page defines (python blocks opening with `# name.py`), as a reader
    following the page would have them."""
    for b in page_blocks(DOCS / page):
        if b.filename:
            (directory / b.filename).write_text(b.code)


def command(words: List[str]) -> List[str]:
    """A documented command as this interpreter runs it; pytest runs get a short budget."""
    if words[0] in ("python", "python3"):
        words = [sys.executable] + words[1:]
    elif words[0] in ("kbench", "pytest"):
        words = [sys.executable, "-m", words[0]] + words[1:]
    if words[1:3] == ["-m", "pytest"]:
        words = words + ["-p", "no:cacheprovider", f"--kbench-max-time={MAX_TIME}"]
    return words


def run_block(b: Block, directory: Path) -> None:
    """Run a block as written; AssertionError with its output when it fails."""
    write_page_files(b.page, directory)
    if b.lang == "python":
        name = b.filename or "docs_block.py"
        (directory / name).write_text(b.code)
        runs = [command(["pytest", "-q", name]) if name.startswith("test_")
                else [sys.executable, name]]
    else:
        runs = [command(words) for words in bash_commands(b.code)]
    for argv in runs:
        p = subprocess.run(argv, cwd=directory, env=_env(), capture_output=True, text=True,
                           timeout=TIMEOUT_S)
        out = p.stdout + p.stderr
        gate = "--kbench-fail" in " ".join(argv) and "--kbench-compare" in " ".join(argv)
        if gate and p.returncode == 1:
            # a regression gate between two sessions on a shared host may fail unchanged code
            # (docs/workflow.md says why): that is the gate working, as long as it says so
            assert "kbench gate failed" in p.stdout.strip().splitlines()[-1], out
            continue
        assert p.returncode == 0, f"{b.id}: `{' '.join(argv)}` exited {p.returncode}:\n{out}"


# -- the static check of blocks that cannot run here ------------------------------------------

def _bench_options() -> set:
    import inspect

    import kbench
    from kbench.backends import cuda, hip
    return (set(inspect.signature(kbench.bench).parameters) - {"fn", "args", "backend_options"}
            ) | set(cuda.OPTIONS) | set(hip.OPTIONS)


def static_problems(b: Block) -> List[str]:
    """For a python block that does not run here: it parses, the kbench names it imports or
    reads exist, and the options it passes to kbench.bench are options bench takes."""
    import importlib
    try:
        tree = ast.parse(b.code)
    except SyntaxError as e:
        return [f"{b.id}: does not parse: {e}"]
    out: List[str] = []
    modules: Dict[str, object] = {}          # local name -> kbench module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "kbench":
                    modules[a.asname or a.name.split(".")[0]] = importlib.import_module(
                        a.name if a.asname else "kbench")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kbench":
            mod = importlib.import_module(node.module)
            for a in node.names:
                if not hasattr(mod, a.name):
                    try:
                        modules[a.asname or a.name] = importlib.import_module(
                            f"{node.module}.{a.name}")
                    except ImportError:
                        out.append(f"{b.id}: {node.module} has no {a.name}")
                else:
                    value = getattr(mod, a.name)
                    if type(value).__name__ == "module":
                        modules[a.asname or a.name] = value
    options = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in modules and not hasattr(modules[node.value.id], node.attr):
            out.append(f"{b.id}: {modules[node.value.id].__name__} has no {node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "bench" and isinstance(node.func.value, ast.Name) \
                and getattr(modules.get(node.func.value.id), "__name__", None) == "kbench":
            options = options or _bench_options()
            out += [f"{b.id}: kbench.bench takes no option {k.arg!r}"
                    for k in node.keywords if k.arg is not None and k.arg not in options]
    return out


# -- writing the GPU blocks out for scripts/gpu_check.sh --------------------------------------

def emit_gpu(directory: str) -> List[str]:
    """Write every <!-- gpu --> block to DIRECTORY as a file scripts/gpu_check.sh runs (python
    blocks with the device's python, bash blocks with bash), with the files of its page beside
    it; returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for b in all_blocks():
        if b.mark != "gpu":
            continue
        write_page_files(b.page, d)
        stem = f"{Path(b.page).stem}_{b.line}"
        path = d / (f"{stem}.py" if b.lang == "python" else f"{stem}.sh")
        comment = f"# docs/{b.page}, the block at line {b.line} (<!-- gpu -->)\n"
        path.write_text(comment + b.code)
        written.append(str(path))
    return written


# -- the tests --------------------------------------------------------------------------------

pytestmark = pytest.mark.skipif(not DOCS.is_dir(),
                                reason="docs/ is not beside tests/ (a copy of the suite)")
BLOCKS = all_blocks() if DOCS.is_dir() else []
RUNNABLE = [b for b in BLOCKS if b.lang in ("python", "bash") and b.mark != "setup"]


def test_every_docs_block_says_what_it_is():
    assert BLOCKS, "no code blocks found under docs/"
    assert [p for b in BLOCKS for p in problems(b)] == []


def test_no_indented_code_blocks_hide_from_this_test():
    # an indented code block has no fence and no language: this test would not see it
    found = []
    for page in sorted(DOCS.glob("*.md")):
        lines, fenced = page.read_text().splitlines(), False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and i and not lines[i - 1].strip() \
                    and re.match(r"( {4}|\t)\S", line):
                found.append(f"{page.name}:{i + 1}: {line.strip()}")
    assert found == [], "fence these as ```text (or a language): " + "; ".join(found)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_a_docs_block_runs_as_written(block, tmp_path):
    if block.mark == "gpu":
        pytest.skip(f"{block.id} needs a GPU (<!-- gpu -->): scripts/gpu_check.sh docs "
                    f"runs it")
    if block.mark == "fragment":
        pytest.skip(f"{block.id} is a fragment: {block.why}")
    run_block(block, tmp_path)


STATIC = [b for b in BLOCKS if b.lang == "python" and b.mark in ("gpu", "fragment")]


@pytest.mark.parametrize("block", STATIC, ids=[b.id for b in STATIC])
def test_a_block_that_cannot_run_here_names_what_kbench_has(block):
    assert static_problems(block) == []


def test_the_static_check_catches_a_stale_option_and_a_missing_name():
    b = Block("x.md", 1, "python", "import kbench\nfrom kbench import distributed as kd\n"
              "kbench.bench(f, x, cold_cache=None, flush_size=1)\nkd.no_such_thing()\n"
              "from kbench.testing import no_such_function\n", "gpu", "")
    said = "\n".join(static_problems(b))
    assert "kbench.bench takes no option 'flush_size'" in said
    assert "kbench.distributed has no no_such_thing" in said
    assert "kbench.testing has no no_such_function" in said
    assert "cold_cache" not in said


def test_the_set_up_block_is_the_readmes():
    readme = ROOT / "README.md"
    if not readme.exists():
        pytest.skip("README.md is not beside tests/")
    first = re.findall(r"```bash\n(.*?)```", readme.read_text(), flags=re.S)[0]
    setup = [b for b in BLOCKS if b.mark == "setup"]
    assert setup, "docs/index.md shows the set-up commands, marked <!-- setup -->"
    for b in setup:             # tests/test_readme.py checks .ci/run runs the README's
        assert b.code == first, f"{b.id} differs from the README's set-up block"


def test_gpu_blocks_are_written_out_for_the_gpu_check(tmp_path):
    gpu = [b for b in BLOCKS if b.mark == "gpu"]
    written = emit_gpu(str(tmp_path))
    assert len(written) == len(gpu)
    for b, path in zip(gpu, written):
        text = Path(path).read_text()
        assert text.endswith(b.code) and f"docs/{b.page}" in text.splitlines()[0]
        if path.endswith(".py"):
            compile(text, path, "exec")
    p = subprocess.run([sys.executable, __file__, "--emit-gpu", str(tmp_path / "cli")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == len(gpu)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emit-gpu", metavar="DIR", required=True,
                    help="write the <!-- gpu --> blocks into DIR, one file each")
    args = ap.parse_args(argv)
    for path in emit_gpu(args.emit_gpu):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
