"""Importing kbench is cheap and touches no GPU library."""
import subprocess
import sys

import kbench

GPU_LIBS = ("libcuda.so", "libcupti", "libnvidia-ml", "libnvrtc")


# What `import kbench` may bring in beyond numpy besides its own modules: small pure-Python
# stdlib modules. The cost in milliseconds is a benchmark figure (benchmarks/cpu_overhead.py),
# not a unit test's: under load a timed import fails for reasons that are not kbench's.
# kbench's own top-level imports (and what they import) are listed, so a numpy that stops
# importing one of them first does not fail the test.
LIGHT_STDLIB = {"__future__", "_csv", "_json", "copy", "csv", "dataclasses", "html",
                "html.entities", "json", "json.decoder", "json.encoder", "json.scanner",
                "threading", "numbers", "functools", "typing", "warnings", "math", "enum", "io",
                "itertools", "time", "inspect", "keyword", "re", "collections", "operator",
                "types", "weakref", "contextlib", "abc", "_weakrefset", "_thread",
                # inspect's own imports (Python 3.10 with a numpy that does not import it first)
                "dis", "opcode", "_opcode", "token", "tokenize", "linecache", "importlib",
                "importlib._bootstrap", "importlib._bootstrap_external", "importlib.machinery"}


def test_import_brings_only_kbench_and_light_stdlib_modules_beyond_numpy():
    code = ("import sys, numpy; before = set(sys.modules); import kbench; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    new = set(p.stdout.split())
    assert "kbench" in new and "kbench._core" in new
    others = {m for m in new if m != "kbench" and not m.startswith("kbench.")}
    assert others <= LIGHT_STDLIB, f"import kbench now also imports {sorted(others - LIGHT_STDLIB)}"


def test_import_maps_no_gpu_library_and_loads_no_framework():
    code = ("import kbench, sys\n"
            "maps = open('/proc/self/maps').read()\n"
            f"print([l for l in {GPU_LIBS!r} if l in maps])\n"
            "print([m for m in ('torch', 'cupy', 'triton', 'pandas', 'matplotlib') if m in sys.modules])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    libs, mods = p.stdout.splitlines()
    assert libs == "[]", libs
    assert mods == "[]", mods


def test_public_api():
    for name in ("bench", "compare", "assert_close", "Result", "Comparison", "KbenchError",
                 "LibraryNotFound", "CudaError", "CaptureError", "CuptiError", "CuptiBusy"):
        assert hasattr(kbench, name), name
    assert callable(kbench.compare) and callable(kbench.bench)
    assert issubclass(kbench.CuptiBusy, kbench.CuptiError)
    assert issubclass(kbench.LibraryNotFound, OSError)
    assert kbench.__version__


def test_dir_lists_the_api_and_submodules_not_import_helpers():
    # `from __future__ import annotations` and typing.Any once showed up as kbench.annotations
    # and kbench.Any, public-looking names that are not kbench's.
    import types
    public = {n for n in dir(kbench) if not n.startswith("_")}
    assert set(kbench.__all__) - {"__version__"} <= public
    assert "testing" in public
    strays = {n for n in public - set(kbench.__all__)
              if not isinstance(getattr(kbench, n), types.ModuleType)}
    assert not strays, strays
