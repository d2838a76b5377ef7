"""kbench.options: every option of kbench.bench, ab and sweep, written once.

Two tables, one per layer. The C core's rows (the timing loop's and the GPU backends': name,
type, default, range, backends, one line) are _core.OPTION_SCHEMA, generated from
csrc/core/kb_schema.h, which also gives the C parsers their defaults and ranges. The Python
layer's rows (what kbench.bench itself takes: the operation's counts, the check, the cold
cache, where it runs) are PY_OPTIONS below. From the two come the option lists of
``help(kbench.bench)``, ``help(kbench.ab)`` and ``help(kbench.sweep)`` and the docs' option
reference (docs/options.md, written by scripts/options_doc.py); tests/test_option_schema.py fails
when a signature, the pyi, a docstring or the docs disagree with them.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import _core


class Option(NamedTuple):
    name: str
    default: str        # as a user writes it ("None", "'flush'", "0.3"), or what None means
    backends: Tuple[str, ...]
    doc: str
    allowed: str = ""   # the values or range taken ("" where the doc says it)
    layer: str = "bench"


_ALL = ("host", "cuda", "hip")
_GPU = ("cuda", "hip")

#: the values of mode= each backend takes besides None (its own pick), as plan.c accepts
#: them (tests/test_option_schema.py holds the two together)
MODES = {"host": ("host",), "cuda": ("cupti", "events", "graph"), "hip": ("graph",)}

#: kbench.bench's own options (its signature's defaults: kbench.measure.prepare.BENCH_DEFAULTS),
#: and
#: the GPU modules' Python-side options (kbench.backends.cuda.OPTIONS,
#: kbench.backends.hip.OPTIONS).
PY_OPTIONS: Tuple[Option, ...] = (
    Option("flops", "None", _ALL, "the operation's theoretical FLOPs per call, for FLOP/s and "
           "% of the compute ceiling"),
    Option("bytes", "None", _ALL, "the operation's theoretical bytes per call (each input read "
           "once, each output written once), for B/s and % of the memory ceiling"),
    Option("check", "None", _ALL, "a reference output, or a callable computing it from the "
           "same arguments: compared before anything is timed"),
    Option("rtol", "None", _ALL, "relative tolerance of check= (None: per dtype)"),
    Option("atol", "None", _ALL, "absolute tolerance of check= (None: per dtype)"),
    Option("out_arg", "None", _ALL, "the argument holding the output of a kernel that returns "
           "None: a position in args or a keyword name"),
    Option("cold_cache", "'flush'", _ALL, "'flush' (write 2x the last-level cache before each "
           "sample; on the CPU past 256 MiB, evict the lines of the arrays the call reads where "
           "kbench sees them all), 'rotate' (cycle argument sets larger than it) or None (hot)",
           "'flush', 'rotate', None"),
    Option("flush_bytes", "None", _ALL, "override the flush size (cold_cache='flush'): None is "
           "twice the last-level cache (CPU) or L2 (GPU)", "1 B .. 1 TiB"),
    Option("arg_sets", "None", _ALL, "argument sets to rotate through instead of args: a list "
           "of tuples, or a factory f(i) -> tuple"),
    Option("rotate_sets", "0", _ALL, "with cold_cache='rotate' and a factory: how many sets "
           "(0: enough to exceed the cache)"),
    Option("kwargs", "None", _ALL, "keyword arguments of fn"),
    Option("name", "None", _ALL, "the result's name (None: fn's module and qualified name)"),
    Option("device", "'auto'", _ALL, "'cpu' or 'cuda[:N]'; 'auto' follows the arguments",
           "'auto', 'cpu', 'cuda[:N]'"),
    Option("mode", "None", _ALL, "the timer: CUDA 'cupti', 'events' or 'graph' (None: 'cupti' "
           "where CUPTI is usable, else 'events'), HIP 'graph', the CPU 'host'",
           "None; " + "; ".join(f"{b} " + ", ".join(repr(m) for m in ms)
                                for b, ms in MODES.items())),
    Option("memory", "True", _ALL, "measure the peak memory of one untimed call (r.memory)"),
    Option("profile", "None", _ALL, "True: run once for a profiler instead of timing; None: "
           "KBENCH_PROFILE=1, or a GPU case under a profiler"),
    Option("group", "None", _ALL, "time on every rank of a torch ProcessGroup or mpi4py "
           "communicator ('auto': the initialised one), MAX per sample"),
    Option("dist_timeout_s", "None", _ALL, "with group=: how long a rank waits for the others "
           "(None: kbench.distributed's default)"),
    Option("stream", "None", _GPU, "a torch/CuPy stream or a raw handle to time on (None: the "
           "current stream)"),
    Option("compute_peak", "None", ("cuda",), "the FLOP ceiling that % of peak refers to "
           "(None: inferred from the input dtypes)", "kbench.roofline.ceilings.PRECISIONS, 'fp8'"),
    Option("expected_launches", "None", ("cuda",), "warn when CUPTI sees another kernel count "
           "per call"),
    Option("floor", "True", ("cuda",), "probe the timer's floor (an empty kernel) and report "
           "the figure's share of it"),
    Option("rotate_margin", "None", _GPU, "cold_cache='rotate': how far the sets' footprint "
           "exceeds the cache (None: kbench.measure.coldcache's default)"),
    Option("capture_mode", "None", ("hip",), "HIP graph capture mode"),
    Option("backend", "'auto'", _GPU, "'cuda' or 'hip' on a host that has both"),
    Option("pre_sample", "None", ("cuda",), "called with no arguments before every call of fn, "
           "outside the timed part (kbench.distributed's barrier); turns keep_busy off"),
)

#: the C rows that kbench.bench does not pass through: measure_cuda/measure_hip take them, and
#: kbench.bench sets them itself (device, mode from its own; the rest for its probes)
C_ONLY = ("device", "mode", "warmup_min", "warmup_tol", "batch_max", "busy_warmup_s",
          "cupti_allow_foreign", "clock_period_s")


_ROWS = {r["name"]: r for r in _core.OPTION_SCHEMA}


def row(name: str) -> Dict[str, Any]:
    """The C core's row of an option (KeyError: no such option in the schema)."""
    return _ROWS[name]


def max_time_cap() -> float:
    """The longest max_time_s kbench takes (the schema's bound: a day)."""
    return float(row("max_time_s")["max"])


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{value:g}" if abs(value) < 1e6 else f"{value:.0f}"
    return repr(value)


def _range(row: Dict[str, Any]) -> str:
    if row["choices"]:
        return ", ".join(repr(c) for c in row["choices"])
    lo, hi = row["min"], row["max"]
    if lo is None and hi is None:
        return ""
    left = "(" if row["min_open"] else "["
    right = ")" if row["max_open"] or hi is None else "]"
    return f"{left}{_fmt(lo)}, {'inf' if hi is None else _fmt(hi)}{right}"


def c_options(public_only: bool = True) -> List[Option]:
    """The C core's rows as Options (kbench.bench's: without C_ONLY)."""
    out = []
    for row in _core.OPTION_SCHEMA:
        if public_only and row["name"] in C_ONLY:
            continue
        default = _fmt(row["default"])
        if row["with_target"] is not None:
            default += f" ({_fmt(row['with_target'])} with target=)"
        out.append(Option(row["name"], default, tuple(row["backends"]), row["doc"],
                          _range(row), row["layer"]))
    return out


def bench_options() -> List[Option]:
    """Every option kbench.bench takes, in the order the reference lists them."""
    py = {o.name for o in PY_OPTIONS}
    return list(PY_OPTIONS) + [o for o in c_options() if o.name not in py]


def _where(backends: Sequence[str]) -> str:
    return "" if tuple(backends) == _ALL else " [" + ", ".join(backends) + "]"


def docstring_section(options: Sequence[Option], title: str) -> str:
    """The option list a docstring ends with: name=default, then its line, indented."""
    import textwrap
    lines = [title, "-" * len(title)]
    for o in options:
        lines.append(f"{o.name}={o.default}")
        lines += textwrap.wrap(o.doc + _where(o.backends), width=88, initial_indent="    ",
                               subsequent_indent="    ")
    return "\n".join(lines)


def bench_docstring_section(title: str = "Options") -> str:
    return docstring_section(bench_options(), f"{title} ([cuda, hip]: GPU only; the "
                             f"reference: docs/options.md)")


def markdown() -> str:
    """docs/options.md: the option reference, generated (scripts/options_doc.py writes it)."""
    def table(options: Sequence[Option]) -> List[str]:
        rows = ["| option | default | values | backends | meaning |",
                "| --- | --- | --- | --- | --- |"]
        for o in options:
            esc = [s.replace("|", "\\|") for s in (o.default, o.allowed, o.doc)]
            rows.append(f"| `{o.name}` | `{esc[0]}` | {esc[1]} | {', '.join(o.backends)} | "
                        f"{esc[2]} |")
        return rows
    py = {o.name for o in PY_OPTIONS}
    loop = [o for o in c_options() if o.layer == "loop" and o.name not in py]
    gpu = [o for o in c_options() if o.layer == "backend" and o.name not in py]
    c_only = [o for o in c_options(public_only=False) if o.name in C_ONLY]
    out = ["# Options", "",
           "<!-- generated by scripts/options_doc.py from kbench/options.py and "
           "csrc/core/kb_schema.h: edit those, not this page -->", "",
           "Every option of `kbench.bench`; `kbench.ab`, `kbench.sweep`, the pytest fixture and "
           "the drop-ins pass them through. Defaults, ranges and one-line meanings come from one "
           "schema per layer, which also gives the C parsers their defaults and ranges and "
           "`help(kbench.bench)` its option list. The [guide](guide.md#option-details) says "
           "more about the ones that need it.", "",
           "## What the call is", ""] + table(PY_OPTIONS) + [
           "", "## The timing loop", ""] + table(loop) + [
           "", "## The timer", ""] + table(gpu) + [
           "", "## Set by kbench.bench itself", "",
           "`_core.measure_cuda` and `_core.measure_hip` take these too; `kbench.bench` sets "
           "them from its own options or for its probes.", ""] + table(c_only)
    return "\n".join(out) + "\n"

