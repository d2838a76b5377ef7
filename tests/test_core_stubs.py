"""kbench/_core.pyi against the C core it describes: every public function of kbench._core has
a stub, and each stub names the parameters, in order, that the function's own docstring
signature names (its first line, `name(a, b=..., *, c=...)`). A stub that drifts from the C
code misleads type checkers and readers alike; summarize's `ordered` and criterion_check's
`resolution` were missing from it before this test."""
import ast
import inspect
import re
from pathlib import Path

import kbench
from kbench import _core

PYI = Path(kbench.__file__).parent / "_core.pyi"


def stubs():
    tree = ast.parse(PYI.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def split_top_level(text):
    """The comma-separated parts of the text up to the parenthesis that closes the one before
    it, not splitting inside brackets or quotes (defaults such as `t_s[0]`, `None|'flush'`)."""
    parts, cur, depth, quote = [], "", 0, None
    for ch in text:
        if quote:
            cur += ch
            quote = None if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                parts.append(cur)
                return parts
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    raise AssertionError(f"no closing parenthesis in {text!r:.80}")


def doc_parameters(fn):
    """The parameter names of the docstring's signature line (or of the text signature Python
    took from it, for a docstring written `name(...)\n--\n\n`), None when it has none. A
    placeholder such as `<loop options>` stands for keywords the stub takes as **kwargs."""
    if getattr(fn, "__text_signature__", None):
        return list(inspect.signature(fn).parameters)
    doc = (fn.__doc__ or "").lstrip()
    if not doc.startswith(fn.__name__ + "("):
        return None
    names = []
    for part in split_top_level(doc[len(fn.__name__) + 1:]):
        part = part.strip()
        if part in ("", "*", "/") or part.startswith(("<", "...", "**")):
            continue
        names.append(re.split(r"[=:\s]", part, maxsplit=1)[0])
    return names


def stub_parameters(node):
    a = node.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs], a.kwarg is not None


def public_functions():
    return {k for k in dir(_core) if not k.startswith("__")
            and callable(getattr(_core, k)) and not isinstance(getattr(_core, k), type)}


def test_every_public_function_of_the_core_has_a_stub():
    missing = sorted(public_functions() - set(stubs()))
    assert not missing, f"kbench/_core.pyi has no stub for {missing}"


def test_every_stub_names_a_function_of_this_build():
    # the CUDA and HIP names exist only in a build with those backends
    absent = sorted(set(stubs()) - public_functions())
    if _core.HAVE_CUDA and _core.HAVE_HIP:
        assert not absent, f"stubs without a function: {absent}"
    else:
        assert all(n.startswith(("cuda", "nvml", "cupti", "hip", "rocm", "measure_", "graph",
                                 "launch", "gpu", "prefer", "_raise")) for n in absent), absent


def test_stubs_name_the_parameters_the_docstrings_name():
    checked, drift = 0, []
    for name, node in sorted(stubs().items()):
        fn = getattr(_core, name, None)
        doc = doc_parameters(fn) if fn is not None else None
        if doc is None:
            continue
        stub, takes_more = stub_parameters(node)
        checked += 1
        # a stub with **kwargs may leave the documented keywords past its named ones to them
        if not (stub == doc or (takes_more and doc[:len(stub)] == stub)):
            drift.append(f"{name}: docstring {doc}, stub {stub}")
    assert not drift, "\n".join(drift)
    assert checked >= 30            # most of the core documents its signature; a parser that
                                    # finds none must not pass by checking nothing


def test_every_exception_of_the_core_has_its_stub_and_is_exported():
    """The C list (KB_EXCEPTIONS, kbench.h) is the one place the types are written: each has a
    class stub with the same bases, and kbench exports it."""
    tree = ast.parse(PYI.read_text())
    classes = {n.name: [ast.unparse(b) for b in n.bases] for n in tree.body
               if isinstance(n, ast.ClassDef)}
    errors = [name for name, obj in vars(_core).items()
              if isinstance(obj, type) and issubclass(obj, _core.KbenchError)]
    assert len(errors) >= 10
    for name in errors:
        t = getattr(_core, name)
        bases = [b.__name__ for b in t.__bases__]
        assert classes.get(name) == bases, f"_core.pyi: class {name}{classes.get(name)} " \
                                           f"against the core's {bases}"
        assert getattr(kbench, name, None) is t and name in kbench.__all__, name
