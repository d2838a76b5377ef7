"""No C function in csrc/ runs over about 120 lines (the project's code rule): a long function
is a pipeline whose steps have no names. Counted from the line that opens a top-level function
body to its closing brace, so comments and blank lines inside count too."""
import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parent.parent / "csrc"
MAX_LINES = 120


def function_lengths(text: str):
    """(name, body lines) of each top-level function: its header starts at column 0, its body
    opens with "{" alone on a line and closes with "}" at column 0 (the project's style)."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if lines[i + 1] != "{":
            continue
        # the header may span several lines: walk back to its first line, at column 0
        start = i
        while start > 0 and lines[start][:1] in (" ", "\t"):
            start -= 1
        name = re.search(r"(\w+)\s*\(", " ".join(lines[start:i + 1]))
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == "}"), None)
        if name and end is not None:
            yield name.group(1), end - i - 2


def test_the_counter_sees_functions():
    text = ("static int f(int a,\n             int b)\n{\n" + "    x;\n" * 5 + "}\n\n"
            "void g(void)\n{\n    if (x) {\n        y;\n    }\n}\n")
    assert list(function_lengths(text)) == [("f", 5), ("g", 3)]


C_FILES = sorted(CSRC.rglob("*.c"))


@pytest.mark.skipif(not C_FILES, reason="not a source checkout (no csrc/): the wheel's suite "
                                        "runs from a copy of tests/")
@pytest.mark.parametrize("path", C_FILES or [CSRC], ids=lambda p: str(p.relative_to(CSRC)) if p != CSRC else "none")
def test_no_c_function_over_120_lines(path: Path):
    long = [(name, n) for name, n in function_lengths(path.read_text()) if n > MAX_LINES]
    assert not long, f"{path.relative_to(CSRC)}: functions over {MAX_LINES} lines: {long}"
