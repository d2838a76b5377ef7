"""The kbench package's imports form no circle.

Every kbench/**/*.py is parsed with ast; each `import` and `from ... import` in it, at module
level or inside a function (a lazy import is a dependency too: it only runs later), becomes an
arrow from that module to the kbench module it names, relative imports resolved. Importing
kbench.a.b also runs kbench/a/__init__.py, so it is an arrow to the subpackage kbench.a too; the
root package kbench/__init__.py is left out of those implicit arrows (it runs before any kbench
module and, as the public face, sits on top of them all), and so is a subpackage that the
importer itself lives in (it is already running); but an explicit `import kbench` or
`from . import __version__` is an arrow to it like any other.

The package is found through kbench.__file__, so the test reads the installed package when the
suite runs from a copy of tests/ (the wheel's CI) as well as the checkout's.
"""
import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

import kbench

PKG_DIR = Path(kbench.__file__).resolve().parent
ROOT = "kbench"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG_DIR.rglob("*.py"))}


def _is_module(name: str, modules: Set[str]) -> bool:
    """A kbench module: a .py file, or an extension or stub beside them (kbench._core)."""
    if name in modules:
        return True
    rel = Path(*name.split("."))
    folder, stem = PKG_DIR.parent / rel.parent, rel.name
    return any(folder.glob(f"{stem}.*.so")) or any(folder.glob(f"{stem}.*.pyd")) or \
        (folder / f"{stem}.pyi").is_file()


def _base_of_relative(module: str, is_package: bool, level: int) -> str:
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts)


def _targets(node: ast.AST, module: str, is_package: bool, modules: Set[str]) -> List[str]:
    """The kbench modules one import statement names."""
    named: List[str] = []
    if isinstance(node, ast.Import):
        named = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            prefix = _base_of_relative(module, is_package, node.level)
            base = f"{prefix}.{base}" if base else prefix
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            named.append(sub if _is_module(sub, modules) else base)   # a submodule, or a name
    out = []
    for name in named:
        if name != ROOT and not name.startswith(ROOT + "."):
            continue                                                     # not kbench's
        while name != ROOT and not _is_module(name, modules):           # `import kbench.a.b.c`
            name = name.rsplit(".", 1)[0]                                # where c is a name
        out.append(name)
        # the subpackages' __init__ that this import runs: not those the importer lives in
        # (they run before it does)
        parent = name.rsplit(".", 1)[0]
        while parent != ROOT and "." in parent:
            if not (module + ".").startswith(parent + "."):
                out.append(parent)
            parent = parent.rsplit(".", 1)[0]
    return out


def import_graph() -> Dict[str, Set[str]]:
    """module -> the kbench modules it imports (anywhere in it), self-imports dropped."""
    sources = _sources()
    modules = set(sources)
    graph: Dict[str, Set[str]] = {}
    for module, path in sources.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges: Set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_targets(node, module, is_package, modules))
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle as [a, b, ..., a], or None when the graph has none (iterative DFS)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {n: WHITE for n in graph}
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        colour[start] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
                continue
            state = colour.get(nxt, BLACK)           # a name outside the graph is a leaf
            if state == GREY:
                return path[path.index(nxt):] + [nxt]
            if state == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_cycle_finder_finds_a_planted_cycle_and_none_where_there_is_none():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    cycle = find_cycle(planted)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_graph_sees_lazy_relative_and_subpackage_imports():
    """The graph is read as the test says, or an empty graph would pass the test below."""
    if not (PKG_DIR / "bench.py").is_file():
        pytest.skip(f"kbench's sources are not at {PKG_DIR}")
    graph = import_graph()
    assert "kbench.report.result" in graph["kbench.measure.local"]          # module level
    assert "kbench.distributed" in graph["kbench.bench"]                    # inside a function
    assert "kbench.measure.local" in graph["kbench.distributed"]     # from ..measure.local import
    # kbench.distributed._ranks runs kbench/distributed/__init__.py: an arrow to it too
    assert {"kbench.distributed._ranks", "kbench.distributed"} <= \
        set(_targets(ast.parse("from .distributed._ranks import Ranks").body[0], "kbench.x",
                     False, set(graph)))
    assert "kbench._core" in graph["kbench.bench"] or \
        "kbench._core" in graph["kbench.measure.local"]


def test_kbench_imports_form_no_circle():
    if not (PKG_DIR / "__init__.py").is_file():
        pytest.skip(f"kbench's sources are not at {PKG_DIR}")
    cycle = find_cycle(import_graph())
    assert cycle is None, ("kbench's imports run in a circle: " + " -> ".join(cycle) +
                           ". Move what the lower module needs down, into a module that "
                           "imports neither (see docs/design/architecture.md, 'Import layers').")
