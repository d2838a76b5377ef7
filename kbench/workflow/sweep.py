"""kbench.sweep: benchmark a family of cases over the cartesian product of axes.

    def copy_case(n, dtype):
        x = np.ones(n, dtype); out = np.empty_like(x)
        return {"fn": np.copyto, "args": (out, x), "bytes": 2 * x.nbytes}

    s = kbench.sweep(copy_case, axes={"n": [1 << 16, 1 << 20, 1 << 24],
                                      "dtype": ["float32", "float64"]})
    s.rows            # one dict per case: axis values, median, CI, throughput, stop rule
    s.to_markdown(); s.to_csv("copy.csv"); s.plot(x="n", y="bytes_per_s")

factory(**case) returns ``(fn, args)`` or a dict with ``fn`` and optionally ``args``, ``kwargs``,
``flops``, ``bytes``, ``check``, ``name`` and any other kbench.bench option for that case (they
override the sweep-wide options).

``isolate=True`` runs every case in a fresh Python process (multiprocessing "spawn"), for sweeps
whose figures drift when cases run back to back (allocator state, clocks, caches of the
previous case). The factory, the axis values and the options then travel by pickle: the
factory must be a module-level function importable by the child (not a lambda, a closure or a
function defined in a notebook or a ``__main__`` script without an ``if __name__ ==
"__main__"`` guard), and options such as ``check=`` must be picklable too. The child imports
the main script again, so a script must start the sweep under that guard: one that does not gets
a KbenchError naming the line before any worker starts. Each case then pays the child's
start-up (imports; CUDA context creation on a GPU).
"""
from __future__ import annotations

import csv
import io
import itertools
import numbers
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..report._format import (dump_json, fmt_bytes, fmt_pct, fmt_rate, fmt_time, html_table,
                              load_json_as, text_table, write_atomic)
from ..options import bench_docstring_section
from ..report.result import Result

_ROW_KEYS = ("name", "median_s", "ci_low_s", "ci_high_s", "rel_ci", "samples", "bytes_per_s",
             "flops_per_s", "bandwidth_pct_peak", "compute_pct_peak", "stop",
             "served_from_cache")
_CASE_KEYS = ("fn", "args")
SWEEP_SCHEMA = "kbench.sweep/1"
# the table's columns after the axes' (row key, header, format); "CI95" follows ci_level
_RATE_COLS = (("bytes_per_s", "GB/s", lambda v: f"{v / 1e9:.3g}"),
              ("flops_per_s", "GFLOP/s", lambda v: f"{v / 1e9:.3g}"),
              ("bandwidth_pct_peak", "% peak BW", fmt_pct),
              ("compute_pct_peak", "% peak FLOP", fmt_pct))
_TABLE_HEADERS = ("median", "stop") + tuple(h for _, h, _ in _RATE_COLS)
# a bandwidth figure that is the cache's, not memory's: marked in the tables
_SERVED_MARK = "*"
_SERVED_NOTE = ("* served from cache (hot; bytes per call fit the cache): the bandwidth is the "
                "cache's, not memory's")


def _label(v: Any) -> Any:
    """A value fit for a table cell / JSON: scalars stay, dtypes and classes get names."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, type):
        return v.__name__
    return str(v)


def _case_spec(out: Any, case: Dict[str, Any]) -> Tuple[Callable, Tuple, Dict[str, Any]]:
    """(fn, args, per-case bench options) from what the factory returned."""
    if isinstance(out, dict):
        if "fn" not in out:
            raise ValueError(f"kbench.sweep: the factory's dict for case {case} has no 'fn' "
                             f"(keys: {sorted(out)})")
        fn, args = out["fn"], out.get("args", ())
        opts = {k: v for k, v in out.items() if k not in _CASE_KEYS}
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        (fn, args), opts = out, {}
    else:
        raise TypeError(f"kbench.sweep: the factory must return (fn, args) or a dict with "
                        f"'fn'; for case {case} it returned {type(out).__name__}")
    if not callable(fn):
        raise TypeError(f"kbench.sweep: case {case}: fn is not callable ({type(fn).__name__})")
    if isinstance(args, list):
        args = tuple(args)
    elif not isinstance(args, tuple):
        args = (args,)
    return fn, args, opts


def _case_name(fn: Any, case: Dict[str, Any]) -> str:
    from ..measure.prepare import name_of
    return f"{name_of(fn)}[" + ", ".join(f"{k}={_label(v)}" for k, v in case.items()) + "]"


def _run_case(factory: Callable, case: Dict[str, Any], options: Dict[str, Any]) -> Result:
    from ..bench import bench
    fn, args, case_opts = _case_spec(factory(**case), case)
    opts = dict(options)
    opts.update(case_opts)
    opts.setdefault("name", _case_name(fn, case))
    return bench(fn, *args, **opts)


def _case_worker(factory: Callable, case: Dict[str, Any], options: Dict[str, Any],
                 script: Optional[Dict[str, Any]] = None):
    """Runs in the spawned child: the Result crosses back as its JSON-able dict. script: the
    parent's record of sweep's caller, for the harness provenance (the child has no caller)."""
    from ..provenance.harness import parent_script
    with parent_script(script):
        return _run_case(factory, case, options).to_dict()


def _is_main_test(test: Any) -> Optional[bool]:
    """True for ``__name__ == "__main__"`` (either way round, or and-ed with other tests),
    False for ``__name__ != "__main__"``, None for any other test."""
    import ast
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return True if any(_is_main_test(v) is True for v in test.values) else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    sides = (test.left, test.comparators[0])
    if not (any(isinstance(n, ast.Name) and n.id == "__name__" for n in sides)
            and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in sides)):
        return None
    return {ast.Eq: True, ast.NotEq: False}.get(type(test.ops[0]))


def _line_is_main_guarded(source: str, line: int) -> bool:
    """Whether line of source runs only under ``if __name__ == "__main__":`` (in the body of
    such an if, or in the else of ``if __name__ != "__main__":``). Raises SyntaxError."""
    import ast

    def within(stmts: List[Any]) -> bool:
        return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in stmts)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If):
            main = _is_main_test(node.test)
            if (main is True and within(node.body)) or (main is False and within(node.orelse)):
                return True
    return False


def _unguarded_main_call() -> Optional[Tuple[str, int, str]]:
    """(script, line, its text) when the caller runs from the main script's top-level code
    outside ``if __name__ == "__main__":``: a spawned worker imports that script again and
    would reach this call again. None when it does not, or when it cannot be told (no main
    script file, one spawn does not re-run, a source that cannot be read or parsed)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return None
    # what multiprocessing.spawn runs again in the child: not a package's __main__.py (run
    # with -m), nor IPython's launcher
    spec_name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if spec_name == "__main__" or spec_name.endswith(".__main__") or \
            os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None
    # the frame running the main script's top-level code: the line it is on runs again at
    # import (the sweep's own caller may be a function it called)
    g = vars(main)
    f = sys._getframe(1)
    while f is not None and not (f.f_globals is g and f.f_code.co_name == "<module>"):
        f = f.f_back
    if f is None:
        return None
    line = f.f_lineno
    del f
    try:
        import tokenize
        with tokenize.open(path) as fh:         # its coding cookie or BOM honoured
            source = fh.read()
        if _line_is_main_guarded(source, line):
            return None
    except (OSError, SyntaxError, ValueError):      # no source to judge by: do not guess
        return None
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return path, line, text


_GUARD_HINT = ('isolate=True runs each case in a fresh process, which imports the main script '
               'again: the code that starts the sweep must be under '
               '`if __name__ == "__main__":`')


def _check_main_guard() -> None:
    """Raise before spawning anything when the worker would start the sweep again."""
    bad = _unguarded_main_call()
    if bad is not None:
        from .._core import KbenchError
        path, line, text = bad
        raise KbenchError(f"kbench.sweep: {_GUARD_HINT}, and {path}:{line} "
                          + (f"({text}) " if text else "")
                          + "is not, so each worker would start the sweep again and die. Move "
                          "it under the guard, or use isolate=False")


def _run_case_isolated(factory: Callable, case: Dict[str, Any], options: Dict[str, Any],
                       script: Optional[Dict[str, Any]] = None) -> Result:
    import concurrent.futures
    import multiprocessing
    import pickle
    try:
        pickle.dumps((factory, case, options))
    except Exception as e:
        raise TypeError(f"kbench.sweep(isolate=True): the factory, case values and options "
                        f"must be picklable to reach a fresh process (a module-level "
                        f"function, not a lambda or closure): {type(e).__name__}: {e}") from None
    ctx = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx)
    procs: List[Any] = []
    try:
        future = pool.submit(_case_worker, factory, case, options, script)
        procs = list((getattr(pool, "_processes", None) or {}).values())   # spawned by submit
        out = future.result()
    except concurrent.futures.process.BrokenProcessPool as e:
        # the worker died (a crash, os._exit, the OOM killer, an error while it imported the
        # main script): the pool says only "terminated abruptly"
        _stop_workers(pool)
        raise _worker_died(case, procs) from e
    except BaseException:
        # Ctrl-C (or any error) while the case runs: leaving a `with` block would wait for the
        # worker to finish its case (seconds, up to max_time_s) when SIGINT reached only this
        # process (a supervisor's kill -INT, not the terminal's process group). Stop it now.
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)
    return Result.from_dict(out)


def _exit_status(procs: List[Any]) -> str:
    """How the dead worker ended, in words: "exit code N", "killed by signal SIGX (-N)", or
    that it could not be read."""
    import signal
    import time
    code = None
    for _ in range(20):     # the pool's manager thread may be reaping it at the same moment
        codes = [p.exitcode for p in procs if p.exitcode is not None]
        if codes:
            code = codes[0]
            break
        time.sleep(0.05)
    if code is None:
        return "its exit code could not be read"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by signal {name} ({code})"
    return f"exit code {code}"


def _worker_died(case: Dict[str, Any], procs: List[Any]) -> Exception:
    from .._core import KbenchError
    return KbenchError(f"kbench.sweep(isolate=True): the worker process running case {case} "
                       f"died before returning its result ({_exit_status(procs)}); the "
                       f"worker's own error, if it printed one, is above on stderr. If the "
                       f"sweep runs from a script: {_GUARD_HINT}")


def _stop_workers(pool: Any) -> None:
    """Terminate a ProcessPoolExecutor's workers and shut it down without waiting for them."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    for p in procs:
        try:
            p.terminate()
        except Exception:
            pass
    try:
        pool.shutdown(wait=False, cancel_futures=True)
    except Exception:
        pass
    # The pool's manager thread sees the worker die and reaps it. Wait for that thread rather
    # than race it: with two threads in waitpid() on one child, the loser reads ECHILD as
    # "still running" while the winner waits for the GIL to record the exit code, so the
    # worker would look alive (to multiprocessing.active_children() too) after this returns.
    if manager is not None:
        try:
            manager.join(1.0)
        except Exception:
            pass
    # then reap what it left (a terminated worker exits at once; SIGKILL one that does not), so
    # none is left behind as a zombie or a stray process
    for p in procs:
        try:
            p.join(0.5)
            if p.is_alive():
                p.kill()
                p.join(0.5)
        except Exception:
            pass


@dataclass
class SweepResult:
    """The cases of a sweep: ``rows`` (plain dicts) and ``results`` (kbench Results)."""

    axes: Dict[str, List[Any]]
    cases: List[Dict[str, Any]]
    results: List[Result]
    isolate: bool = False
    options: Dict[str, Any] = field(default_factory=dict)
    factory_name: str = ""          # what was swept: the plot's title, not a case's name

    @property
    def rows(self) -> List[Dict[str, Any]]:
        out = []
        for case, r in zip(self.cases, self.results):
            s, tp = r.stats, r.throughput
            row = {k: _label(v) for k, v in case.items()}
            row.update(name=r.name, median_s=float(s["median"]), ci_low_s=float(s["ci_low"]),
                       ci_high_s=float(s["ci_high"]),
                       rel_ci=_float(s.get("rel_ci_halfwidth")), samples=int(s["n"]),
                       bytes_per_s=tp.get("bytes_per_s"), flops_per_s=tp.get("flops_per_s"),
                       bandwidth_pct_peak=tp.get("bandwidth_pct_peak"),
                       compute_pct_peak=tp.get("compute_pct_peak"),
                       stop=r.stop.get("stop"), served_from_cache=_cache_served(r))
            out.append(row)
        return out

    # -- tables
    def _display(self) -> Tuple[List[str], List[List[str]], str]:
        """Headers, cells and a footnote ('' when none)."""
        rows = self.rows
        level = round(100 * float(self.results[0].stats.get("ci_level", 0.95))) \
            if self.results else 95
        headers = list(self.axes) + ["median", f"CI{level}"]
        cols = [c for c in _RATE_COLS if any(r[c[0]] is not None for r in rows)]
        headers += [c[1] for c in cols] + ["stop"]
        cells = []
        for r in rows:
            line = [str(r[a]) for a in self.axes]
            line += [fmt_time(r["median_s"]),
                     f"{fmt_time(r['ci_low_s'])} .. {fmt_time(r['ci_high_s'])}"]
            for k, _, f in cols:
                mark = _SERVED_MARK if r["served_from_cache"] and k in (
                    "bytes_per_s", "bandwidth_pct_peak") else ""
                line.append("-" if r[k] is None else f(r[k]) + mark)
            line.append(str(r["stop"]))
            cells.append(line)
        note = _SERVED_NOTE if any(r["served_from_cache"] and r["bytes_per_s"] is not None
                                   for r in rows) else ""
        return headers, cells, note

    def __repr__(self) -> str:
        headers, cells, note = self._display()
        return (f"kbench sweep: {len(self.results)} cases over {', '.join(self.axes)}"
                + (" (isolated)" if self.isolate else "") + "\n" + text_table(headers, cells)
                + (f"\n{note}" if note else ""))

    def _repr_html_(self) -> str:
        headers, cells, note = self._display()
        return html_table(headers, cells, caption=f"kbench sweep: {len(self.results)} cases"
                          + (f" ({note})" if note else ""))

    def to_markdown(self) -> str:
        headers, cells, note = self._display()
        esc = lambda c: str(c).replace("|", "\\|").replace("*", "\\*")
        lines = ["| " + " | ".join(esc(h) for h in headers) + " |",
                 "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(esc(c) for c in line) + " |" for line in cells]
        if note:
            lines += ["", esc(note)]
        return "\n".join(lines) + "\n"

    def to_csv(self, path: Optional[str] = None) -> str:
        """Rows as CSV (seconds, B/s, FLOP/s: full precision); written to path if given."""
        buf = io.StringIO()
        fields = list(self.axes) + list(_ROW_KEYS)
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
        text = buf.getvalue()
        if path is not None:
            write_atomic(path, text, newline="")     # a failed write keeps the old file
        return text

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SWEEP_SCHEMA,
                "axes": {k: [_label(v) for v in vs] for k, vs in self.axes.items()},
                "isolate": self.isolate, "factory_name": self.factory_name, "rows": self.rows,
                "results": [r.to_dict() for r in self.results]}

    def to_json(self, path: Optional[str] = None, indent: int = 1) -> str:
        return dump_json(self.to_dict(), path, indent)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SweepResult":
        """A sweep written by to_dict/to_json: its axes and cases as labels (a dtype reads back
        as its name), each case's Result whole."""
        if not isinstance(d, dict) or d.get("schema") != SWEEP_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a kbench sweep (schema {got!r}, expected {SWEEP_SCHEMA!r}; "
                             f"a single result loads with kbench.Result.load)")
        axes, rows, results = d.get("axes"), d.get("rows"), d.get("results")
        if not (isinstance(axes, dict) and isinstance(rows, list) and isinstance(results, list)
                and len(rows) == len(results)):
            raise ValueError("kbench sweep without matching axes, rows and results")
        for k, vs in axes.items():
            if not isinstance(vs, list):
                raise ValueError(f"kbench sweep: axes[{k!r}] is a {type(vs).__name__}, not a "
                                 f"list of values")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ValueError(f"kbench sweep: rows[{i}] is a {type(row).__name__}, not an "
                                 f"object")
        return cls(axes={k: list(v) for k, v in axes.items()},
                   cases=[{k: row.get(k) for k in axes} for row in rows],
                   results=[Result.from_dict(r) for r in results],
                   isolate=bool(d.get("isolate")), factory_name=d.get("factory_name") or "")

    @classmethod
    def load(cls, path: str) -> "SweepResult":
        """Read a sweep written by to_json(path)."""
        return load_json_as(path, "a kbench sweep", cls.from_dict)

    def to_pandas(self):
        """The rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("SweepResult.to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame(self.rows, columns=list(self.axes) + list(_ROW_KEYS))

    # -- plot
    def plot(self, x: str = "n", y: str = "bytes_per_s", ax: Any = None, peak: bool = True):
        """Throughput (or any numeric row field) against one axis, one line per combination of
        the other axes; log x for positive numeric x; CI error bars; the measured peak as a
        horizontal line when known (FLOP/s: the ceiling of each precision the sweep's cases were
        held against, named; a GPU's datasheet figure, dotted, where none was measured); where the bytes per call cross the cache size, a vertical
        line; points served from cache (hot, and the bytes per call fit the cache) ringed.
        Returns the matplotlib Axes (``ax.figure`` is the Figure)."""
        if x not in self.axes:
            raise ValueError(f"SweepResult.plot: x={x!r} is not an axis of this sweep "
                             f"(axes: {list(self.axes)})")
        rows = self.rows
        if not rows or y not in rows[0]:
            raise ValueError(f"SweepResult.plot: y={y!r} is not a row field "
                             f"(fields: {list(rows[0]) if rows else []})")
        if any(r[y] is not None and not _is_number(r[y]) for r in rows):
            raise ValueError(f"SweepResult.plot: y={y!r} is not a numeric row field "
                             f"(numeric fields: "
                             f"{[k for k in rows[0] if any(_is_number(r[k]) for r in rows)]})")
        if all(r[y] is None for r in rows):
            hint = {"bytes_per_s": "bytes=", "flops_per_s": "flops="}.get(y)
            raise ValueError(f"SweepResult.plot: no case has {y!r}"
                             + (f": have the factory give {hint}" if hint else ""))
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("SweepResult.plot() needs matplotlib: pip install matplotlib") \
                from None
        scale, unit = _Y_UNITS.get(y, (1.0, y))
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 4.0))
        others = [a for a in self.axes if a != x]
        groups: Dict[Tuple, List[Tuple[Dict[str, Any], Result]]] = {}
        for row, r in zip(rows, self.results):
            groups.setdefault(tuple(row[a] for a in others), []).append((row, r))
        numeric_x = all(isinstance(row[x], (int, float)) and not isinstance(row[x], bool)
                        for row in rows)
        served_labelled = False
        cache_marks: set = set()
        for key, members in groups.items():
            pts = [(row[x], row[y], _y_err(row, r, y), r) for row, r in members
                   if row[y] is not None]
            if numeric_x:
                pts.sort(key=lambda p: p[0])
            if not pts:
                continue
            xs = [p[0] if numeric_x else str(p[0]) for p in pts]
            ys = np.array([p[1] * scale for p in pts])
            errs = [p[2] for p in pts]
            label = ", ".join(f"{a}={v}" for a, v in zip(others, key)) or None
            if all(e is not None for e in errs):
                lo = np.array([e[0] * scale for e in errs])
                hi = np.array([e[1] * scale for e in errs])
                yerr = np.vstack([np.clip(ys - np.minimum(lo, hi), 0, None),
                                  np.clip(np.maximum(lo, hi) - ys, 0, None)])
                ax.errorbar(xs, ys, yerr=yerr, marker="o", capsize=3, label=label)
            else:
                ax.plot(xs, ys, marker="o", label=label)
            served = [(xv, yv) for xv, yv, p in zip(xs, ys, pts) if _cache_served(p[3])]
            if served:
                ax.scatter([p[0] for p in served], [p[1] for p in served], s=140,
                           facecolors="none", edgecolors="0.2", linewidths=1.2, zorder=3,
                           label=None if served_labelled else
                           "served from cache (hot; bytes per call fit the cache)")
                served_labelled = True
            if numeric_x:
                for xc, name in _cache_crossings(members, x):
                    if (xc, name) not in cache_marks:
                        cache_marks.add((xc, name))
                        # each line crosses the cache at its own x (dtype=float16 at twice
                        # float32's n): name the line, or the legend repeats one label
                        of = f" ({label})" if label and len(groups) > 1 else ""
                        ax.axvline(xc, color="0.5", linestyle=":", linewidth=1,
                                   label=f"bytes per call = {name}{of}")
        if numeric_x and all(row[x] > 0 for row in rows):
            ax.set_xscale("log")
        if peak:
            # without a cached `kbench peaks`, a GPU's bandwidth ceiling is the theoretical
            # one (memory clock x bus width): the legend says which
            peaks = sorted({_ceiling_line(r.throughput, y) for r in self.results} - {None})
            for p, kind in peaks:     # a FLOP/s sweep: each precision's ceiling, named
                ax.axhline(p * scale, color="0.3", linestyle="--" if "datasheet" not in kind
                           else ":", linewidth=1,
                           label=f"{kind} peak {fmt_rate(p, _RATE_UNIT[y])}")
        ax.set_xlabel(x)
        ax.set_ylabel(unit)
        what = f"kbench sweep of {self.factory_name}" if self.factory_name else "kbench sweep"
        ax.set_title(f"{what}: {unit} vs {x}")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        return ax


_Y_UNITS = {"bytes_per_s": (1e-9, "GB/s"), "flops_per_s": (1e-9, "GFLOP/s"),
            "median_s": (1e6, "median time (us)"), "ci_low_s": (1e6, "us"),
            "ci_high_s": (1e6, "us"), "bandwidth_pct_peak": (100.0, "% of peak bandwidth"),
            "compute_pct_peak": (100.0, "% of peak FLOP/s")}
_PEAK_KEYS = {"bytes_per_s": "peak_bytes_per_s", "flops_per_s": "peak_flops_per_s"}
_RATE_UNIT = {"bytes_per_s": "B", "flops_per_s": "FLOP"}


def _ceiling_line(tp: Dict[str, Any], y: str) -> Optional[Tuple[float, str]]:
    """(ceiling, its label) of one result on a plot of y: a bandwidth's measured or theoretical
    peak; a FLOP rate's measured ceiling of the precision it was held against
    (kbench.roofline.ceilings: "measured GPU bf16 GEMM"), else that precision's datasheet figure
    (GPUs), else None."""
    pkey = _PEAK_KEYS.get(y)
    if pkey is None:
        return None
    if tp.get(pkey):
        kind = _ceiling_kind(tp, y)
        name = tp.get("peak_flops_name") if y == "flops_per_s" else None
        return tp[pkey], f"{kind} {name}" if name else kind
    if y == "flops_per_s" and tp.get("datasheet_flops_per_s"):
        return tp["datasheet_flops_per_s"], f"{tp['datasheet']['name']} datasheet"
    return None


def _ceiling_kind(tp: Dict[str, Any], y: str) -> str:
    """'theoretical' where the bandwidth ceiling was not measured, else 'measured'."""
    return "theoretical" if y == "bytes_per_s" and tp.get("bytes_ceiling") == "theoretical" \
        else "measured"


def _cache_served(r: Result) -> bool:
    """Hot, and the bytes per call fit the cache: the figure is the cache's, not memory's."""
    cc = r.cold_cache or {}
    if cc.get("mode", "none") != "none":
        return False
    cache = cc.get("cache_bytes")
    return bool(r.bytes and cache and r.bytes <= cache)


def _cache_crossings(members: List[Tuple[Dict[str, Any], Result]],
                     x: str) -> List[Tuple[float, str]]:
    """Where along x the bytes per call cross each cache size: [(x, "<cache> <size>")],
    interpolated on log scales between the two points that straddle it."""
    pts = sorted(((row[x], r) for row, r in members if r.bytes and row[x] > 0),
                 key=lambda p: p[0])
    out = []
    for (x0, r0), (x1, r1) in zip(pts, pts[1:]):
        cache = (r1.cold_cache or {}).get("cache_bytes")
        if not cache or not r0.bytes < r1.bytes or not r0.bytes <= cache < r1.bytes:
            continue
        t = (np.log(cache) - np.log(r0.bytes)) / (np.log(r1.bytes) - np.log(r0.bytes))
        xc = float(np.exp(np.log(x0) + t * (np.log(x1) - np.log(x0))))
        name = f"{r1.cold_cache.get('cache') or 'cache'} {fmt_bytes(cache)}"
        out.append((float(f"{xc:.4g}"), name))
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _float(v: Any) -> Optional[float]:
    return None if v is None else float(v)


def _y_err(row: Dict[str, Any], r: Result, y: str) -> Optional[Tuple[float, float]]:
    """The CI of the median carried into y's units (a rate's CI inverts the time's)."""
    lo, hi = row["ci_low_s"], row["ci_high_s"]
    if y == "median_s":
        return lo, hi
    count = {"bytes_per_s": r.bytes, "flops_per_s": r.flops}.get(y)
    if count and lo > 0 and hi > 0:
        return count / hi, count / lo
    return None


def sweep(factory: Callable[..., Any], axes: Dict[str, Sequence[Any]], *,
          isolate: bool = False, **bench_options: Any) -> SweepResult:
    """Run factory(**case) for every case of the cartesian product of axes, benchmark each.

    axes: {"n": [...], "dtype": [...]}: the product runs in the given order, the last axis
    varying fastest; a single value ({"dtype": "float32"}) is an axis of one value.
    bench_options go to kbench.bench for every case; the factory's dict can override them per
    case. isolate=True: one fresh spawned process per case (see the module docstring for what
    that asks of the factory).

    A case that raises (its factory, its check, an out-of-memory) or a Ctrl-C stops the sweep
    with that exception, which carries the cases finished before it as ``e.partial``: a
    SweepResult of the same axes holding only those cases (none: empty rows), so a long sweep
    is not lost to its last case::

        try:
            s = kbench.sweep(case, axes)
        except BaseException as e:
            s = getattr(e, "partial", None)     # save it, then fix the case and rerun
            raise
    """
    if not callable(factory):
        raise TypeError(f"kbench.sweep: factory must be callable, got {type(factory).__name__}")
    if not isinstance(axes, dict) or not axes:
        raise ValueError("kbench.sweep: axes must be a non-empty dict {name: [values]}")
    # a single value (a string, a number, a dtype) is an axis of one value
    axes = {str(k): list(v) if np.iterable(v) and not isinstance(v, (str, bytes)) else [v]
            for k, v in axes.items()}
    for k, vs in axes.items():
        if not vs:
            raise ValueError(f"kbench.sweep: axis {k!r} has no values")
        # a table column's name would appear twice in the table's headers
        if k in _ROW_KEYS or k in _TABLE_HEADERS or re.fullmatch(r"CI\d+", k):
            raise ValueError(f"kbench.sweep: axis name {k!r} collides with a row field or a "
                             f"table column; rename it")
    cases = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
    script = None
    if isolate:
        _check_main_guard()
        from ..provenance.harness import caller_script
        script = caller_script()        # the workers record sweep's caller, as _run_case does
    results: List[Result] = []
    what = getattr(factory, "__qualname__", None) or type(factory).__name__
    for case in cases:
        try:
            r = _run_case_isolated(factory, case, bench_options, script) if isolate else \
                _run_case(factory, case, bench_options)
        except BaseException as e:      # Ctrl-C too: the finished cases must survive it
            try:
                e.partial = SweepResult(axes=axes, cases=cases[:len(results)],
                                        results=list(results), isolate=isolate,
                                        options=dict(bench_options), factory_name=what)
            except AttributeError:      # an exception type without a __dict__
                pass
            from ..measure.prepare import add_note
            kept = (f"; the {len(results)} case(s) finished before it are in the "
                    f"exception's .partial" if results and hasattr(e, "partial") else "")
            add_note(e, f"in kbench.sweep case {case}{kept}")
            raise
        results.append(r)
    return SweepResult(axes=axes, cases=cases, results=results, isolate=isolate,
                       options=dict(bench_options), factory_name=what)


# kbench.bench's options, which sweep passes to every case, from the one schema (kbench.options)
sweep.__doc__ = (f"{sweep.__doc__.rstrip()}\n\n"
                 f"{bench_docstring_section('kbench.bench options, passed to every case')}\n")
