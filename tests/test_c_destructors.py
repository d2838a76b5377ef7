"""A destructor in csrc/ keeps the exception being raised. A type's dealloc or a capsule's
destructor runs while an error path unwinds (graph_capture freed its half-built graph with a
CaptureError pending); one that clears "its own" errors with PyErr_Clear wiped that exception
too, and the C function returned NULL with none set (Python's SystemError, the cause lost).
So a destructor that calls PyErr_Clear fetches the pending exception first and restores it."""
import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parent.parent / "csrc"
C_FILES = sorted(CSRC.rglob("*.c"))
DESTRUCTOR = re.compile(r"(_dealloc|_destructor)$")


def destructor_bodies(text: str):
    """(name, body) of each top-level function named *_dealloc or *_destructor (the project's
    style: the body opens with "{" alone on a line and closes with "}" at column 0)."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if lines[i + 1] != "{":
            continue
        name = re.search(r"(\w+)\s*\(", line)
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == "}"), None)
        if name and end is not None and DESTRUCTOR.search(name.group(1)):
            yield name.group(1), "\n".join(lines[i + 2:end])


def keeps_the_exception(body: str) -> bool:
    if "PyErr_Clear" not in body:
        return True
    fetched = "PyErr_Fetch" in body or "PyErr_GetRaisedException" in body
    restored = "PyErr_Restore" in body or "PyErr_SetRaisedException" in body
    return fetched and restored and body.index("PyErr_Clear") > min(
        body.find(k) for k in ("PyErr_Fetch", "PyErr_GetRaisedException") if k in body)


def test_the_rule_sees_a_destructor_that_clears():
    bad = "static void x_dealloc(X *self)\n{\n    free(self->p);\n    PyErr_Clear();\n}\n"
    good = ("static void y_dealloc(Y *self)\n{\n    PyObject *t, *v, *tb;\n"
            "    PyErr_Fetch(&t, &v, &tb);\n    PyErr_Clear();\n    PyErr_Restore(t, v, tb);\n}\n")
    (name, body), = destructor_bodies(bad)
    assert name == "x_dealloc" and not keeps_the_exception(body)
    (name, body), = destructor_bodies(good)
    assert name == "y_dealloc" and keeps_the_exception(body)


@pytest.mark.skipif(not C_FILES, reason="not a source checkout (no csrc/): the wheel's suite "
                                        "runs from a copy of tests/")
def test_every_destructor_that_clears_errors_keeps_the_pending_one():
    seen, bad = 0, []
    for path in C_FILES:
        for name, body in destructor_bodies(path.read_text()):
            seen += 1
            if not keeps_the_exception(body):
                bad.append(f"{path.relative_to(CSRC)}:{name}")
    assert seen >= 4                        # graph, device buffer, kernel, NVML sampler box
    assert not bad, f"destructors that clear a pending exception: {bad}"
