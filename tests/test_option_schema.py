"""The option schema (csrc/core/kb_schema.h -> _core.OPTION_SCHEMA, and kbench.options for the
Python layer) against everything that restates it: the C parsers' ranges and defaults, the
pyi, kbench.bench's signature, the docstrings of bench/ab/sweep and the docs' reference. Each
test drives the real parser or reads the real text: a row changed in one place only fails."""
import ast
import inspect
import math
import os
import re
import subprocess
import sys

import pytest

import kbench
from kbench import _core, options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the wheel's suite runs from a copy of tests/: the checkout's docs, scripts and C sources are
# not beside it, and the pyi is the installed package's
in_checkout = pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, "docs")) or
                                 not os.path.isdir(os.path.join(ROOT, "csrc")),
                                 reason="needs the checkout's docs/ and csrc/ (the wheel's "
                                        "suite runs from a copy of tests/)")
ROWS = {r["name"]: r for r in _core.OPTION_SCHEMA}
needs_cuda_build = pytest.mark.skipif(not _core.HAVE_CUDA,
                                      reason="kbench built without the CUDA backend")


def _noop():
    return None


def _outside(row):
    """Values just outside the row's range, each with the bound it breaks."""
    out = []
    lo, hi = row["min"], row["max"]
    if row["type"] == "int":
        if lo is not None:
            out.append(lo - 1)
        if hi is not None and row["name"] != "device":      # device: its own message
            out.append(hi + 1)
    elif row["type"].startswith("float"):
        if lo is not None:
            out.append(lo if row["min_open"] else lo - max(abs(lo) * 1e-6, 1e-9))
        if hi is not None:
            out.append(hi if row["max_open"] else hi * (1 + 1e-6))
        out.append(float("nan"))
    return out


def _inside(row):
    """Values at the edges the row allows (an open end: just inside it)."""
    lo, hi = row["min"], row["max"]
    vals = []
    if lo is not None:
        vals.append(lo if not row["min_open"] else (lo + 1e-3 if hi is None else
                                                    lo + (hi - lo) * 1e-3))
    if hi is not None:
        vals.append(hi if not row["max_open"] else hi - (hi - (lo or 0)) * 1e-3)
    if row["type"] == "int":
        vals = [int(v) for v in vals]
    return vals


LOOP = [r for r in _core.OPTION_SCHEMA if r["layer"] == "loop" and r["type"] != "str"]
GPU_CUDA = [r for r in _core.OPTION_SCHEMA if r["layer"] == "backend" and "cuda" in r["backends"]
            and r["type"] not in ("str", "bool")]


def test_every_row_is_complete_and_its_default_is_in_its_range():
    assert len(ROWS) == len(_core.OPTION_SCHEMA), "an option is written twice"
    for r in _core.OPTION_SCHEMA:
        assert r["doc"] and r["backends"] and r["layer"] in ("loop", "backend"), r
        d = r["default"]
        if r["type"] == "str":
            assert d in r["choices"], r
        elif r["type"] in ("int", "float") and not isinstance(d, bool):
            if r["min"] is not None:
                assert d > r["min"] if r["min_open"] else d >= r["min"], r
            if r["max"] is not None:
                assert d < r["max"] if r["max_open"] else d <= r["max"], r


@pytest.mark.parametrize("row", LOOP, ids=[r["name"] for r in LOOP])
def test_the_loop_parser_refuses_what_the_row_excludes_and_takes_what_it_allows(row):
    name = row["name"]
    for bad in _outside(row):
        with pytest.raises(ValueError, match=rf"\b{name} must be"):
            _core.measure_host(_noop, ((),), None, **{name: bad})
    for good in _inside(row):
        if name in ("max_time_s", "warmup_s") and good > 1:
            continue            # accepted, it would run that long
        # the row's edge, the run kept short by the others (min <= max samples)
        short = dict(max_time_s=0.01, warmup_s=0.0, min_samples=1, max_samples=5)
        if name == "min_samples":
            short["max_samples"] = good
        short[name] = good
        _core.measure_host(_noop, ((),), None, **short)


def test_the_loop_defaults_are_the_rows_and_a_run_uses_them():
    for name, value in _core.LOOP_DEFAULTS.items():
        base = name.removesuffix("_with_target")
        row = ROWS[base]
        assert value == (row["with_target"] if name.endswith("_with_target") else row["default"])
    r = kbench.bench(_noop, cold_cache=None, memory=False)
    assert r.stop["max_time_s"] == ROWS["max_time_s"]["default"]
    assert r.stop["target"] == ROWS["target"]["default"]
    r = kbench.bench(_noop, cold_cache=None, memory=False, target=0.5)
    assert r.stop["max_time_s"] == ROWS["max_time_s"]["with_target"]


def test_a_choice_row_lists_what_the_parser_takes():
    for choice in ROWS["criterion"]["choices"]:
        _core.measure_host(_noop, ((),), None, criterion=choice, max_time_s=0.01, warmup_s=0.0)
    # the schema's list is the criterion table's (criterion.c), which names its rules
    known = ", ".join(repr(c) for c in ROWS["criterion"]["choices"])
    with pytest.raises(ValueError, match=f"known rules: {known}$"):
        _core.measure_host(_noop, ((),), None, criterion="median", max_time_s=0.01)


@needs_cuda_build
@pytest.mark.parametrize("row", GPU_CUDA, ids=[r["name"] for r in GPU_CUDA])
def test_measure_cuda_refuses_what_the_row_excludes(row):
    name = row["name"]
    for bad in _outside(row):
        with pytest.raises(ValueError, match=rf"\b{name} must be"):
            _core.measure_cuda(_noop, ((),), None, stream=0, **{name: bad})
    for good in _inside(row):
        # parsed, then the GPU is needed: whatever fails next is not this option's range
        try:
            _core.measure_cuda(_noop, ((),), None, stream=0, **{name: good})
        except ValueError as e:
            assert f"{name} must be" not in str(e), e
        except Exception:
            pass


@needs_cuda_build
def test_measure_cuda_choices_and_defaults_are_the_rows():
    for name in ("mode", "regime"):
        with pytest.raises(ValueError, match=" or ".join(repr(c) for c in ROWS[name]["choices"])):
            _core.measure_cuda(_noop, ((),), None, stream=0, **{name: "none-of-them"})
    for r in _core.OPTION_SCHEMA:
        if r["layer"] == "backend" and "cuda" in r["backends"]:
            assert _core.CUDA_DEFAULTS[r["name"]] == r["default"], r["name"]


def _pyi_keywords(function):
    pyi = os.path.join(os.path.dirname(kbench.__file__), "_core.pyi")     # as installed
    tree = ast.parse(open(pyi).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return {a.arg for a in node.args.args + node.args.kwonlyargs}
    raise AssertionError(f"{function} is not in _core.pyi")


@pytest.mark.parametrize("function, backend", [("measure_cuda", "cuda"), ("measure_hip", "hip"),
                                               ("measure_host", "host")])
def test_the_pyi_names_every_gpu_row_of_its_backend(function, backend):
    named = _pyi_keywords(function)
    rows = {r["name"] for r in _core.OPTION_SCHEMA if r["layer"] == "backend"
            and backend in r["backends"]}
    assert rows <= named, f"{function} in _core.pyi lacks {sorted(rows - named)}"
    others = named - rows - {"fn", "arg_sets", "kwargs", "graphs", "stream", "plan", "cold",
                             "pre_sample", "ranks", "evict"}
    assert not others, f"{function} in _core.pyi names options the schema lacks: {others}"


def test_every_option_bench_takes_has_one_row_and_the_signature_agrees():
    from kbench.backends import cuda, hip
    taken = {n for n in inspect.signature(kbench.bench).parameters
             if n not in ("fn", "args", "backend_options")}
    taken |= set(cuda.OPTIONS) | set(hip.OPTIONS) | {"backend"}
    rows = [o.name for o in options.bench_options()]
    assert len(rows) == len(set(rows)), "an option has two rows"
    assert taken == set(rows), (f"undocumented: {sorted(taken - set(rows))}; documented but "
                                f"not taken: {sorted(set(rows) - taken)}")
    sig = inspect.signature(kbench.bench).parameters
    for o in options.PY_OPTIONS:
        if o.name in sig and sig[o.name].default is not inspect.Parameter.empty:
            assert o.default == repr(sig[o.name].default), o.name


@pytest.mark.parametrize("entry", [kbench.bench, kbench.ab, kbench.sweep],
                         ids=["bench", "ab", "sweep"])
def test_help_lists_every_option_with_its_default(entry):
    doc = inspect.getdoc(entry)
    for o in options.bench_options():
        assert re.search(rf"^{re.escape(o.name)}={re.escape(o.default)}$", doc, re.M), \
            f"help({entry.__name__}) lacks {o.name}={o.default}"


@in_checkout
def test_the_docs_option_reference_is_generated_from_the_schema():
    page = open(os.path.join(ROOT, "docs", "options.md")).read()
    assert page == options.markdown(), "docs/options.md is stale: run scripts/options_doc.py"
    for r in _core.OPTION_SCHEMA:
        assert f"| `{r['name']}` |" in page, r["name"]
    # the script's own check agrees
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "options_doc.py"),
                        "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


@in_checkout
def test_the_guide_details_only_options_that_exist_and_restates_no_default():
    guide = open(os.path.join(ROOT, "docs", "guide.md")).read()
    after = guide.split("#### Option details", 1)[1].lstrip("\n").splitlines()
    table = []
    for line in after:
        if not line.startswith("|"):
            break
        table.append(line)
    known = {o.name for o in options.bench_options()}
    assert table and table[0].startswith("| option | details |"), \
        "the details table gained a column (a default restated?)"
    for line in table[2:]:
        names = re.findall(r"`([a-z_]+)`", line.split(" | ")[0])
        assert names and set(names) <= known, f"the guide details {names}, not all options"


@in_checkout
def test_no_c_file_restates_a_default_the_schema_holds():
    """The values that were written in several places (gate_batch 32, gate_timeout_s 1.0,
    settle_max_s 4.0, max_time_s 0.3) are the schema's alone now."""
    pattern = re.compile(r"\.(gate_batch|gate_timeout_s|settle_max_s|max_time_s|warmup_s)\s*=\s*"
                         r"[0-9]")
    for d, _, files in os.walk(os.path.join(ROOT, "csrc")):
        for f in files:
            if f.endswith((".c", ".h")):
                text = open(os.path.join(d, f)).read()
                assert not pattern.search(text), f"{f} restates a default: " \
                    f"{pattern.search(text).group(0)}"


@pytest.mark.parametrize("function", ["measure_host", "measure_cuda", "measure_hip"])
def test_the_measure_functions_docstrings_restate_no_default(function):
    """Their docstrings stated warmup_s=1.0, max_time_s=10.0 and settle_max_s=3.0 long after
    the defaults had moved: they point to the schema instead."""
    fn = getattr(_core, function, None)
    if fn is None:
        pytest.skip(f"{function} is not in this build")
    for name in ROWS:
        m = re.search(rf"\b{name}=((?:[0-9'\"-]|True|False)[^,)]*)", fn.__doc__)
        assert m is None, f"{function}'s docstring restates {name}={m.group(1)}"


@pytest.mark.parametrize("backend", sorted(options.MODES))
def test_the_mode_row_lists_what_the_plan_takes(backend):
    """kbench.options.MODES (the docs' and help()'s mode row) against plan.c's list: each
    value is taken, and the list _core.plan names when it refuses one is the same."""
    for mode in (None, *options.MODES[backend]):
        p = _core.plan(backend, "flush", mode, cupti=lambda: (True, False, ""))
        assert p.cold == "flush" and p.measurement == (mode or p.measurement)
    with pytest.raises(ValueError) as e:
        _core.plan(backend, "flush", "none-of-them")
    named = re.findall(r"'([a-z]+)'", str(e.value).split(", got")[0])
    assert tuple(named) == options.MODES[backend]
    with pytest.raises(KeyError):
        options.row("no_such_option")
