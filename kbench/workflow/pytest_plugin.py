"""kbench's pytest plugin (registered through the ``pytest11`` entry point "kbench").

The ``kbench`` fixture benchmarks a callable inside a test and records the Result under the
test's node id::

    def test_saxpy(kbench):
        x, y = np.random.rand(2, 1 << 20)
        r = kbench(saxpy, 2.0, x, y, bytes=3 * x.nbytes, flops=2 * x.size,
                   check=lambda a, x, y: a * x + y)
        assert r.throughput["bytes_per_s"] > 0

``check=`` (a reference array, or a callable computing it from the same arguments) is verified
before anything is timed; any other keyword goes to :func:`kbench.bench`. A test may call the
fixture several times: the first result is recorded under the node id, later ones under
``"<nodeid>::<name>"`` (``name=`` given) or ``"<nodeid>#<k>"``.

Options (they do not clash with pytest-benchmark's ``--benchmark-*`` or its ``benchmark``
fixture; both plugins load side by side):

``--kbench-save=PATH``
    write every result of the session to one JSON file:
    ``{"schema": "kbench.session/1", "results": {nodeid: Result.to_dict()}, "metadata": {...}}``.
    The file is replaced whole (a temporary file, then a rename). A session that stopped early
    (Ctrl-C, ``-x``/``--maxfail``) or ran no benchmark leaves it as it was and says so;
    ``--kbench-save-partial`` saves what such a session ran. A CPU benchmark that ran threads is
    also timed with its thread pools at each smaller size a busy host may size them to (1, 2,
    4, ...: ``extra["pool_ladder"]``), so a sized figure is later judged against its like.
``--kbench-compare=PATH`` and ``--kbench-fail=8%``
    compare each benchmark's median with the one saved under the same node id in PATH (a
    session file written by ``--kbench-save``) and print a table (benchmark, baseline, current,
    delta, verdict) in the terminal summary. The session fails (exit status 1) when any
    benchmark is *slower*: its median grew by more than the threshold and the two medians'
    confidence intervals do not overlap (see :mod:`kbench.workflow.cli_compare` for the
    verdicts). A benchmark found slower is timed again before it fails, and a CPU benchmark
    slower but unresolved whose thread pool filled the cores is timed at fewer threads
    (:mod:`kbench.workflow.retime`): a regression is slow every time, a host's passing
    slowdown is not.
    New benchmarks are listed as "no baseline". ``--kbench-fail=off`` only reports. PATH is
    read before the tests run, so it may also be the ``--kbench-save`` path (compare with the
    last baseline, then replace it). A session where no benchmark ran (all deselected or
    skipped) compared nothing and fails the gate.
``--kbench-fail-mem=10%``
    with ``--kbench-compare``: also fail the session when a benchmark's peak memory of one call
    (``Result.memory``, see :mod:`kbench.measure.memory`) grew beyond the threshold (and beyond the
    measuring method's resolution). Without it, memory is reported in the table, not gated.
    The table also says when a benchmark's baseline came from a different harness (script
    or cell md5, callable, arguments: :mod:`kbench.provenance.harness`).
``--kbench-disable``
    run each benchmarked callable exactly once, untimed: the fixture checks ``check=`` if given
    (a wrong answer still fails the test) and returns a :class:`DisabledRun`: a Result with no
    samples, NaN figures (``r.median``, ``r.stats[...]``, throughput) and the one call's
    ``.correctness``, plus ``.output`` (what the callable returned) and ``.disabled`` (True), so
    the same tests serve as correctness tests on CPU-only CI. A timing assertion on NaN is
    false: guard it with the fixture's ``kbench.disabled``
    (``assert kbench.disabled or r.median < 1e-3``).
``--kbench-max-time=SECONDS``
    override ``max_time_s`` of every benchmark (e.g. a short budget on CI).

Markers: ``@pytest.mark.kbench_gpu`` (and the project's ``@pytest.mark.gpu``) skip the test with
the reason when no CUDA device is present. Detection is lazy -- only when such a test runs --
and never imports torch: it asks torch only if the process already imported it, else kbench's
core, else the CUDA driver (libcuda) directly.

Results are collected per process: under pytest-xdist each worker keeps its own, so
``--kbench-save``/``--kbench-compare`` are refused with ``-n`` (a usage error).
"""
from __future__ import annotations

import datetime
import inspect
import json
import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

from ..report.result import Result, untimed_stats
from . import retime

SESSION_SCHEMA = "kbench.session/1"


@dataclass(repr=False)
class DisabledRun(Result):
    """What the fixture returns under --kbench-disable: one untimed call, no measurement. A
    Result with no samples and NaN figures, so code reading ``r.median`` or ``r.stats`` runs;
    ``correctness`` is the one call's check (None without check=)."""

    output: Any = None
    disabled: bool = True

    @classmethod
    def of_call(cls, name: str, output: Any,
                correctness: Optional[Dict[str, Any]]) -> "DisabledRun":
        return cls(name=name, device="none", backend="disabled",
                   samples=np.empty(0, dtype=np.float64), stats=untimed_stats(),
                   stop={"stop": "disabled", "criterion": None},
                   cold_cache={"mode": "none"}, correctness=correctness,
                   warnings=["--kbench-disable: called once, not timed"], output=output)

    def __repr__(self) -> str:
        ok = "" if self.correctness is None else \
            f", correctness {'ok' if self.correctness.get('ok') else 'FAILED'}"
        return f"kbench {self.name}: not timed (--kbench-disable){ok}"


@dataclass
class _State:
    save: Optional[str] = None
    compare: Optional[str] = None
    threshold: Optional[float] = 0.08        # None: report only
    mem_threshold: Optional[float] = None    # --kbench-fail-mem; None: report only
    disabled: bool = False
    max_time_s: Optional[float] = None
    save_partial: bool = False      # --kbench-save-partial: save a session that stopped early
    append: bool = False            # --kbench-save-append: add the session to the saved one
    saved_before: Any = None        # that baseline, read at configure time
    append_notes: List[str] = field(default_factory=list)
    results: Dict[str, Any] = field(default_factory=dict)   # key -> Result
    keys: set = field(default_factory=set)      # every key given out (timed, profiled, disabled)
    baseline: Any = None            # --kbench-compare's results, read at configure time
    comparison: Any = None
    save_error: Optional[str] = None
    saved: Optional[str] = None
    save_note: Optional[str] = None     # why --kbench-save wrote nothing
    gpu_status: Optional[Tuple[bool, str]] = None
    profiled: List[str] = field(default_factory=list)       # keys run in profile mode
    # key -> the result as configured, where the gate judged one with its pools sized instead
    # (kbench.workflow.retime): what --kbench-save writes
    configured: Dict[str, Any] = field(default_factory=dict)


_STATE_KEY = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kbench", "kbench kernel benchmarks")
    group.addoption("--kbench-save", metavar="PATH", default=None,
                    help="write every kbench result of the session (with metadata) to PATH as "
                         "JSON (schema kbench.session/1)")
    group.addoption("--kbench-save-partial", action="store_true", default=False,
                    help="with --kbench-save: save even when the session stopped early "
                         "(Ctrl-C, -x/--maxfail); by default such a session leaves the saved "
                         "file as it was, not replaced by the benchmarks that ran")
    group.addoption("--kbench-save-append", action="store_true", default=False,
                    help="with --kbench-save: add this session to the baseline already in PATH "
                         "(the last 10 sessions of each benchmark are kept) instead of "
                         "replacing it; the gate then judges against the range the sessions "
                         "covered, which holds the movement between sessions that one "
                         "session's CI does not see. A session on a busy host is not added")
    group.addoption("--kbench-compare", metavar="PATH", default=None,
                    help="compare each benchmark's median with the one saved in PATH (by test "
                         "node id) and print a table of deltas")
    group.addoption("--kbench-fail", metavar="THRESHOLD", default="8%",
                    help="with --kbench-compare: fail the session when a benchmark is slower "
                         "than its baseline beyond THRESHOLD (e.g. 8%% or 0.08; 'off' only "
                         "reports). Default: 8%%")
    group.addoption("--kbench-fail-mem", metavar="THRESHOLD", default=None,
                    help="with --kbench-compare: also fail the session when a benchmark's peak "
                         "memory of one call grew beyond THRESHOLD (e.g. 10%% or 0.1). Default: "
                         "report only")
    group.addoption("--kbench-disable", action="store_true", default=False,
                    help="run each benchmarked callable once without timing (correctness "
                         "checks still run); the fixture returns a DisabledRun stub")
    group.addoption("--kbench-max-time", metavar="SECONDS", type=float, default=None,
                    help="override max_time_s (the sampling time cap) of every benchmark")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kbench_gpu: needs a CUDA GPU (kbench skips the test "
                                       "with the reason where none is present)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped with a reason where "
                                       "none is present)")
    from .cli_compare import parse_threshold
    fail = config.getoption("kbench_fail")
    try:
        threshold = None if str(fail).strip().lower() in ("off", "none", "") \
            else parse_threshold(fail)
    except ValueError as e:
        raise pytest.UsageError(f"--kbench-fail: {e}") from None
    fail_mem = config.getoption("kbench_fail_mem")
    try:
        mem_threshold = None if fail_mem is None or str(fail_mem).strip().lower() in \
            ("off", "none", "") else parse_threshold(fail_mem)
    except ValueError as e:
        raise pytest.UsageError(f"--kbench-fail-mem: {e}") from None
    max_time = config.getoption("kbench_max_time")
    from ..options import max_time_cap
    cap = max_time_cap()        # kbench.bench's, from the option schema
    if max_time is not None and not (0 < max_time <= cap):      # also nan, inf
        raise pytest.UsageError(f"--kbench-max-time must be a number of seconds > 0 and "
                                f"<= {cap:g}, got {max_time}")
    compare = config.getoption("kbench_compare")
    save = config.getoption("kbench_save")
    if (save or compare) and _under_xdist(config):
        # each worker holds only its own tests' results, and they would all write one file
        raise pytest.UsageError("--kbench-save and --kbench-compare do not work under "
                                "pytest-xdist (-n): each worker sees only its own benchmarks; "
                                "run the benchmarks without -n")
    baseline = None
    if compare is not None:
        if not os.path.isfile(compare):
            raise pytest.UsageError(f"--kbench-compare: no such baseline file: {compare}")
        from .cli_compare import load_results
        # read now: a bad file fails before the tests run, and --kbench-save to the same path
        # at the end cannot replace the baseline before it is compared with
        try:
            baseline = load_results(compare)
        except (OSError, ValueError) as e:
            raise pytest.UsageError(f"--kbench-compare: {_unprefixed(e)}") from None
    if save is not None:
        _check_save_path(save)
    append = config.getoption("kbench_save_append")
    saved_before = None
    if append:
        if save is None:
            raise pytest.UsageError("--kbench-save-append needs --kbench-save=PATH: the "
                                    "baseline to add this session to")
        if os.path.exists(save):
            from .cli_compare import load_results
            # read now: a file that is not a baseline fails before the tests run, not after
            try:
                saved_before = load_results(save)
                with open(save) as f:
                    schema = json.load(f).get("schema")
            except (OSError, ValueError) as e:
                raise pytest.UsageError(f"--kbench-save-append: {_unprefixed(e)}") from None
            if schema != SESSION_SCHEMA:
                raise pytest.UsageError(f"--kbench-save-append: {save} is not a pytest session "
                                        f"baseline (schema {schema!r}, expected "
                                        f"{SESSION_SCHEMA!r}): nothing to add this session to")
    config.stash[_STATE_KEY] = _State(save=save, compare=compare, baseline=baseline,
                                      threshold=threshold,
                                      mem_threshold=mem_threshold,
                                      disabled=config.getoption("kbench_disable"),
                                      max_time_s=max_time,
                                      save_partial=config.getoption("kbench_save_partial"),
                                      append=append, saved_before=saved_before)


def _under_xdist(config: pytest.Config) -> bool:
    """A pytest-xdist worker, or a controller that will start workers (-n N, N > 0)."""
    if hasattr(config, "workerinput"):
        return True
    n = getattr(config.option, "numprocesses", None)
    return bool(n) and getattr(config.option, "dist", "no") != "no"


def _unprefixed(e: Exception) -> str:
    """load_results' message without its own "kbench compare: " prefix (the caller adds one)."""
    return str(e).removeprefix("kbench compare: ")


def _check_save_path(path: str) -> None:
    """--kbench-save must name a file the session can write at the end: fail before any test
    runs, not after the whole suite. Missing directories are created when saving."""
    if os.path.isdir(path):
        raise pytest.UsageError(f"--kbench-save: {path} is a directory; give a file path such "
                                f"as {os.path.join(path, 'kbench.json')}")
    existing = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise pytest.UsageError(f"--kbench-save: cannot write {path}: {existing} is not a "
                                f"directory")
    try:            # a real write: permission bits do not tell for root or /proc
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise pytest.UsageError(f"--kbench-save: cannot write {path}: cannot create a file "
                                f"in {existing} ({e.strerror or e})") from None


# ------------------------------------------------------------------ GPU markers

def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("kbench_gpu") or item.get_closest_marker("gpu")
    if marker is None:
        return
    state = item.config.stash[_STATE_KEY]
    if state.gpu_status is None:
        from ..testing import cuda_device_status
        state.gpu_status = cuda_device_status()
    present, why = state.gpu_status
    if not present:
        pytest.skip(f"needs a CUDA GPU (@pytest.mark.{marker.name}): {why}")


# ------------------------------------------------------------------ the fixture

class KbenchFixture:
    """The callable behind the ``kbench`` fixture; ``.results`` lists this test's results."""

    def __init__(self, nodeid: str, state: _State, node: pytest.Item):
        self.nodeid = nodeid
        self._state = state
        self._node = node
        self.results: List[Any] = []

    @property
    def disabled(self) -> bool:
        """True when this session's benchmarks are not timed: --kbench-disable, or profile mode
        (KBENCH_PROFILE=1, a profiler's injection), whose runs have NaN figures; the guard
        ``assert kbench.disabled or r.median < t`` holds in both."""
        if self._state.disabled:
            return True
        from ..measure.profile import wanted
        return bool(wanted(None, "cuda"))

    def _key(self, name: Optional[str]) -> str:
        if not self.results:
            return self.nodeid
        key = f"{self.nodeid}::{name}" if name else f"{self.nodeid}#{len(self.results) + 1}"
        if key in self._state.keys:
            raise ValueError(f"kbench fixture: a result is already recorded as {key!r}; give "
                             f"each benchmark in a test a distinct name=")
        return key

    def __call__(self, fn, *args: Any, flops: Optional[float] = None,
                 bytes: Optional[float] = None, check: Any = None, **options: Any):
        from ..bench import bench
        if self._state.disabled:
            # the same duplicate-name refusal as when timed: a test that fails timed fails here
            key = self._key(options.get("name"))
            run = self._run_once(fn, args, flops, bytes, check, options)
            self._state.keys.add(key)
            return run
        if self._state.max_time_s is not None:
            options["max_time_s"] = self._state.max_time_s
        key = self._key(options.get("name"))
        if self._state.save and "group" not in options:
            # a baseline also times a CPU call at the pool sizes a busy session may use
            options["_pool_ladder"] = True
        result = bench(fn, *args, flops=flops, bytes=bytes, check=check, **options)
        if self._state.compare and self._state.threshold is not None and \
                getattr(result, "profile", False) is not True:      # a profiler's one call
            judged = retime.judged((self._state.baseline or {}).get(key), result,
                                   self._state.threshold,
                                   lambda: bench(fn, *args, flops=flops, bytes=bytes,
                                                 check=check, **options),
                                   lambda threads: _bench_sized(threads, fn, args, flops,
                                                                bytes, check, options))
            result = judged.result
            if judged.configured is not result:
                self._state.configured[key] = judged.configured
        self.results.append(result)
        self._state.keys.add(key)
        if getattr(result, "profile", False) is True:
            self._state.profiled.append(key)     # one call for a profiler: nothing to compare
            return result
        self._state.results[key] = result
        self._node.user_properties.append((f"kbench_median_s[{key}]", result.median))
        return result

    def _run_once(self, fn, args, flops, bytes, check, options) -> DisabledRun:
        from ..measure.prepare import check_before_timing, name_of
        if not callable(fn):
            raise TypeError(f"kbench fixture: fn must be callable, got {type(fn).__name__}")
        args = _check_bench_options(fn, args, flops, bytes, check, options)
        kwargs = dict(options.get("kwargs") or {})
        name = options.get("name") or name_of(fn)
        if check is not None:
            returned = []

            def call(*a, **kw):         # keeps fn's return value for .output
                returned.append(fn(*a, **kw))
                return returned[-1]
            # the same check bench() runs before timing: poisons the output, calls fn once,
            # compares
            correctness = check_before_timing(call, tuple(args), kwargs, check,
                                              options.get("rtol"), options.get("atol"), name,
                                              options.get("out_arg"))
            run = DisabledRun.of_call(name, returned[0], correctness)
        else:
            run = DisabledRun.of_call(name, fn(*args, **kwargs), None)
        self.results.append(run)
        return run


def _bench_sized(threads: int, fn, args, flops, bytes, check, options) -> Any:
    """kbench.bench with the thread pools loaded now limited to `threads`, restored after."""
    from ..bench import bench
    from ..measure import threadpools
    with threadpools.sized(threads):
        return bench(fn, *args, flops=flops, bytes=bytes, check=check, **options)


def _check_bench_options(fn, args, flops, bytes, check, options) -> Tuple[Any, ...]:
    """Under --kbench-disable: what kbench.bench refuses before it calls fn (kbench.measure.local's
    check_call: a misspelt option, a bad cold_cache/mode/device/out_arg, an async fn), so a
    benchmark that would fail when timed fails on CPU-only CI too; returns the arguments of the
    first call. The timing loop's values (max_time_s, ...) are the C loop's to check."""
    from ..bench import bench
    from ..measure.local import check_call
    # bench's own binding: its named options, the rest are the backend's (as when timed)
    given = inspect.signature(bench).bind(fn, *args, flops=flops, bytes=bytes, check=check,
                                          **options)
    given.apply_defaults()
    opt = given.arguments
    return check_call(fn, tuple(opt["args"]), flops=flops, bytes=bytes, name=opt["name"],
                      kwargs=opt["kwargs"], flush_bytes=opt["flush_bytes"],
                      arg_sets=opt["arg_sets"], rotate_sets=opt["rotate_sets"],
                      out_arg=opt["out_arg"], device=opt["device"],
                      cold_cache=opt["cold_cache"], mode=opt["mode"], memory=opt["memory"],
                      backend_options=opt["backend_options"], check=check, rtol=opt["rtol"],
                      atol=opt["atol"], profile=opt["profile"], timed=False).sets[0]


@pytest.fixture
def kbench(request: pytest.FixtureRequest) -> KbenchFixture:
    """Benchmark a callable: ``kbench(fn, *args, flops=, bytes=, check=, **bench_options)``
    returns a kbench.Result (a DisabledRun under --kbench-disable)."""
    return KbenchFixture(request.node.nodeid, request.config.stash[_STATE_KEY], request.node)


# ------------------------------------------------------------------ save / compare / report

def _session_metadata(config: pytest.Config) -> Dict[str, Any]:
    from .._version import __version__
    from ..provenance.metadata import command_line
    md: Dict[str, Any] = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kbench_version": __version__,
        "pytest_version": pytest.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "argv": command_line(),
        "rootdir": str(config.rootpath),
    }
    from ..provenance.metadata import git_info
    git = git_info(str(config.rootpath))
    if git:
        md["git_commit"] = git["commit"]
    return md


def _appended(before: Any, results: Dict[str, Dict[str, Any]],
              notes: List[str]) -> Dict[str, Dict[str, Any]]:
    """The results to save when this session is added to the baseline `before`: each
    benchmark carries its sessions; a benchmark this session did not run keeps its entry."""
    from .baseline import append_session
    from ..provenance.harness import different
    out = {k: dict(v) for k, v in (before or {}).items()}
    for key, new in results.items():
        old = out.get(key)
        changes = different(old, new) if old is not None else []
        out[key], why = append_session(old, new, changes)
        if why:
            notes.append(f"{key}: {why}")
    return out


def _write_session(path: str, config: pytest.Config, results: Dict[str, Any],
                   state: Optional[_State] = None) -> None:
    docs = {k: r.to_dict() for k, r in results.items()}
    if state is not None and state.append:
        docs = _appended(state.saved_before, docs, state.append_notes)
    doc = {"schema": SESSION_SCHEMA, "results": docs, "metadata": _session_metadata(config)}
    from ..report._format import write_atomic
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # a temporary file of this session's own, then a rename: a crashed run never leaves half
    # a baseline, and two sessions saving to one path never write into one temporary file
    write_atomic(path, json.dumps(doc, indent=1, allow_nan=True))


#: the key of pytest's closing line that counts the benchmarks the gate failed
GATE_FAILED_STAT = "kbench gate failed"


def session_failed(state: _State, cmp: Any) -> bool:
    """Slower or invalid with a time threshold (--kbench-fail), or nothing compared at all (a
    baseline of other benchmarks, or the wrong file, checks nothing), or more peak memory
    with a memory threshold (--kbench-fail-mem). As `kbench compare --fail`."""
    time_failed = state.threshold is not None and (not cmp.compared or any(
        d.verdict in ("slower", "invalid") for d in cmp.deltas))
    return bool(time_failed or cmp.memory_regressions)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_STATE_KEY, None)
    if state is None or state.disabled or not (state.save or state.compare):
        return
    stopped = _stopped_early(session, exitstatus)
    if state.profiled and not state.results:
        # profile mode ran each benchmark once for a profiler: nothing to save, no gate
        state.save_note = ("profile mode: every benchmark ran once for a profiler, not timed; "
                           "nothing saved or compared")
        return
    if state.save and not state.results:
        state.save_note = f"no benchmark ran: nothing saved, {state.save} left as it was"
    elif state.save and stopped and not state.save_partial:
        # a partial session must not replace a full baseline (--kbench-save=X --kbench-compare=X)
        state.save_note = (f"the session {stopped}: {len(state.results)} result(s) not saved, "
                           f"{state.save} left as it was (--kbench-save-partial saves them)")
    elif state.save:
        try:
            _write_session(state.save, session.config,
                           {k: state.configured.get(k, r) for k, r in state.results.items()},
                           state)
            state.saved = state.save
        except OSError as e:        # e.g. the disk filled or the directory went away
            state.save_error = f"--kbench-save: cannot write {state.save}: {e.strerror or e}"
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
    if state.compare:
        # built even when no benchmark ran: a gate that compared nothing has not passed
        from .cli_compare import compare_sets
        current = {k: r.to_dict() for k, r in state.results.items()}
        cmp = compare_sets(state.baseline, current, state.threshold or 0.0,
                           mem_threshold=state.mem_threshold)
        # "not run" rows are noise when only some tests were selected: keep them out
        cmp.deltas = [d for d in cmp.deltas if d.verdict != "not run"]
        state.comparison = cmp
        if session_failed(state, cmp) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _stopped_early(session: pytest.Session, exitstatus: int) -> Optional[str]:
    """How the session stopped before running every selected test (None: it did not)."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "was interrupted"
    if session.shouldfail or session.shouldstop:    # -x / --maxfail, or a plugin's stop
        return f"stopped early ({session.shouldfail or session.shouldstop})"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        return
    tr = terminalreporter
    if state.disabled:
        if state.save or state.compare:
            tr.write_sep("-", "kbench")
            tr.write_line("kbench: --kbench-disable ran each benchmark once without timing; "
                          "nothing was saved or compared")
        return
    if state.profiled:
        tr.write_sep("-", "kbench")
        tr.write_line(f"kbench: {len(state.profiled)} benchmark(s) ran once for a profiler "
                      f"(profile mode), not timed: " + ", ".join(state.profiled))
        if not state.results:
            if state.save or state.compare:
                tr.write_line("kbench: nothing timed, so nothing was saved or compared")
            return
    if not (state.results or state.comparison is not None or state.save_note):
        return
    from ..report._format import fmt_bytes, fmt_ci, fmt_rate, fmt_time, text_table
    tr.write_sep("-", f"kbench: {len(state.results)} benchmark(s)")
    if not state.results and not state.profiled:
        tr.write_line("kbench: no benchmark ran in this session (deselected or skipped)")
    if state.comparison is None and state.results:
        rows = []
        for key, r in state.results.items():
            s, tp = r.stats, r.throughput
            rate = "; ".join(fmt_rate(tp[k], u) for k, u in (("bytes_per_s", "B"),
                                                             ("flops_per_s", "FLOP"))
                             if tp.get(k) is not None) or "-"
            peak = (r.memory or {}).get("peak_bytes")
            rows.append([key, fmt_time(s["median"]),
                         fmt_ci(s.get("median"), s.get("ci_low"), s.get("ci_high")),
                         str(s["n"]), rate, fmt_bytes(peak), str(r.stop.get("stop"))])
        tr.write_line(text_table(["benchmark", "median", "CI95 of median", "n", "throughput",
                                  "peak memory", "stop"], rows))
    if state.save_error:
        tr.write_line(f"kbench: {state.save_error}", red=True)
    if state.comparison is not None:
        cmp = state.comparison
        tr.write_line(f"compared with {state.compare}:")
        tr.write_line(cmp.table())
        failing = session_failed(state, cmp)
        tr.write_line(("FAILED: " if failing else "") + cmp.summary(),
                      red=bool(failing), green=not failing)
        if failing:
            # pytest's own closing line ("2 passed in 3.1s") counts tests only: the gate's
            # failure goes into it too, so the line agrees with the exit status
            failed = [d for d in cmp.deltas if d.verdict in ("slower", "invalid")]
            tr.stats.setdefault(GATE_FAILED_STAT, []).extend(failed or [cmp])
        for line in cmp.notes + cmp.harness_lines() + cmp.environment_lines():
            tr.write_line(line, yellow=True)
    if state.saved:
        if state.append:
            tr.write_line(f"kbench: added this session's {len(state.results)} result(s) to "
                          f"{state.saved}")
            for line in state.append_notes:
                tr.write_line(f"kbench: --kbench-save-append: {line}", yellow=True)
        else:
            tr.write_line(f"kbench: saved {len(state.results)} result(s) to {state.saved}")
    if state.save_note:
        tr.write_line(f"kbench: --kbench-save: {state.save_note}", yellow=True)
