"""Compare saved benchmark results: deltas of medians with verdicts.

Used by `kbench compare OLD NEW` and by the pytest plugin's --kbench-compare. Either file may be
a single Result JSON (schema kbench.result/1), a session file written by --kbench-save
(schema kbench.session/1: {"results": {nodeid: result dict}}), a sweep (kbench.sweep/1: each
case by its name) or an A/B run (kbench.ab/1: each arm by its name, its figure the median of
its trial medians with the order-statistic CI of that median, as the A/B table shows it).

Verdict rules, per benchmark present in both files, with delta = new median / old median - 1:
  "slower"          delta > +threshold and the medians' confidence intervals do not overlap
  "faster"          delta < -threshold and the intervals do not overlap
  "within noise"    the intervals overlap: no difference is resolved, whatever the delta
  "unchanged"       the intervals do not overlap but |delta| <= threshold
  "busy host"       slower beyond the threshold but by at most +50%, with either figure taken
                    on a busy host or oversubscribed by its own thread pool
                    (Result.extra["host_load"], kbench.measure.hostload): what the host moves
between
                    runs is not judged; a larger slowdown is still "slower"
  "no baseline"     only in the new file;  "not run": only in the old file. Benchmarks pair
                    up by name: two session or sweep files of one benchmark each under
                    different names (test_x and test_y) are not compared, and said so; two
                    single Result files are the pair the user chose: compared across names
  "invalid"         either median is NaN, infinite, zero or negative: not a time, or outside
                    0.1 ns .. 1 day per call: not a plausible one; or the new result has no
                    median at all (the old one lacking it is "no baseline"). In a file, a
                    result without its stats (median, ci_low, ci_high) or whose CI does not
                    hold its median is refused when the file is read, naming both
  "not comparable"  figures whose conditions differ by design, not by the code: GPU figures
                    taken in different clock regimes (sustained vs burst: a power-capped kernel
                    differs), or taken with different cold-cache modes (cold_cache "none",
                    i.e. hot, vs "flush" vs "rotate": a hot figure served from cache is not a
                    cold one). Reported, with a note naming both, never gated. A regime that did
                    not hold on either side is noted; so is a different flush size under the
                    same mode (compared). Such a pair counts as not compared: a gate where
                    every pair is "not comparable" compared nothing and fails as such. A
                    result without a regime or a cold-cache mode (the
                    CPU's regime, older files) is not judged on it.
A baseline saved over several sessions (pytest --kbench-save-append; kbench.workflow.baseline)
gives its median of session medians and, as its interval, the range its sessions' CIs covered.
"slower" is a regression; "slower" and "invalid" are failures (the plugin fails the session on
them, and so does `kbench compare --fail`). A "within noise" whose median is slower beyond the
threshold is not a failure, but the note gives both CIs and the summary names it as not
resolved: a run's CI widens where its samples drifted, and overlapping wide CIs are no
evidence that nothing changed.

Peak memory (Result.memory, kbench.measure.memory), per benchmark with a figure in both files, with
growth = new peak - old peak:
  "more memory"     growth > mem_threshold x old peak and > the method's resolution (512 B for
                    the torch/CuPy allocators, 1 MiB for the CPU's RSS, 2 MiB for the driver)
  "less memory"     the same, shrinking;   "same memory": otherwise
  "not comparable"  measured by different methods (torch allocator vs driver, ...)
"more memory" fails `kbench compare --fail-mem 10%` and the plugin's --kbench-fail-mem=10%.

Harness provenance (metadata["harness"], kbench.provenance.harness): a benchmark whose two results
came from different harnesses (script or notebook cell md5, callable, arguments) gets a note;
it is reported, not failed. So does what changed around the code (kbench.provenance.metadata.
environment_changes): the GPU model or board, driver, power limit, ECC, the versions of the
frameworks and GPU libraries (cuBLAS, cuDNN, NCCL, ...) both runs had loaded, Python, numpy,
and the recorded environment variables.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from ..report._format import fmt_bytes, fmt_time, html_table, text_table
from ..provenance.metadata import environment_changes
from .baseline import own_ci, check_sessions, figure as session_range
from ..provenance.harness import different

SESSION_SCHEMA = "kbench.session/1"
RESULT_SCHEMA = "kbench.result/1"
SWEEP_SCHEMA = "kbench.sweep/1"
AB_SCHEMA = "kbench.ab/1"

ResultSet = Dict[str, Dict[str, Any]]


class _SingleResult(dict):
    """A Result file's one entry: two of these are a pair the user chose, whatever their
    names (kbench.bench names a result after its callable: my_kernel_v1 against _v2)."""


def load_results(path_or_doc: Union[str, Dict[str, Any]]) -> ResultSet:
    """{key: result dict} from a session file, a single Result file, or an already-parsed doc.
    A single Result is keyed by its name."""
    if isinstance(path_or_doc, dict):
        doc, where = path_or_doc, "document"
    else:
        where = str(path_or_doc)
        try:
            with open(path_or_doc) as f:
                doc = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"kbench compare: no such results file: {where}") from None
        except OSError as e:            # a directory, no permission, ...
            raise OSError(f"kbench compare: cannot read {where}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"kbench compare: {where} is not JSON (not UTF-8 text: "
                             f"{e.reason} at byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"kbench compare: {where} is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"kbench compare: {where} holds a {type(doc).__name__}, not a kbench "
                         f"result or session object")
    schema = doc.get("schema")
    if schema == SESSION_SCHEMA:
        results = doc.get("results")
        if not isinstance(results, dict):
            raise ValueError(f"kbench compare: session file {where} has no 'results' object")
        for key, d in results.items():
            _check_result_doc(d, f"{where}, result {key!r}")
        return {str(k): v for k, v in results.items()}
    if schema == RESULT_SCHEMA:
        _check_result_doc(doc, where)
        return _SingleResult({str(doc.get("name", "result")): doc})
    if schema == SWEEP_SCHEMA:
        return _sweep_results(doc, where)
    if schema == AB_SCHEMA:
        return _ab_results(doc, where)
    raise ValueError(f"kbench compare: {where} is not a kbench result, session, sweep or A/B "
                     f"file (schema {schema!r}; expected one of {RESULT_SCHEMA!r}, "
                     f"{SESSION_SCHEMA!r}, {SWEEP_SCHEMA!r}, {AB_SCHEMA!r})")


def _sweep_results(doc: Dict[str, Any], where: str) -> ResultSet:
    """A sweep's cases keyed by their names (fn[n=1024, dtype=float32]). A name several cases
    share (a factory that passes name=) is keyed by each case's axis values as well, never by
    its position: a sweep whose values were reordered or grown still pairs n=1024 with n=1024
    (by position it had paired n=1024 with n=16384: +168% SLOWER); only cases alike in both
    are told apart by their order."""
    results = doc.get("results")
    if not isinstance(results, list):
        raise ValueError(f"kbench compare: sweep file {where} has no 'results' list")
    rows, axes = doc.get("rows"), doc.get("axes")
    names = []
    for i, d in enumerate(results):
        _check_result_doc(d, f"{where}, case {i}")
        names.append(str(d.get("name", f"case {i}")))
    out: ResultSet = {}
    for i, (key, d) in enumerate(zip(names, results)):
        if names.count(key) > 1 and isinstance(rows, list) and i < len(rows) \
                and isinstance(rows[i], dict) and isinstance(axes, dict):
            key += "[" + ", ".join(f"{k}={rows[i].get(k)}" for k in axes) + "]"
        n, base = 1, key
        while key in out:
            key, n = f"{base} #{n}", n + 1
        out[key] = d
    return out


def _ab_results(doc: Dict[str, Any], where: str) -> ResultSet:
    """An A/B run's arms, each as one result: the median of its trial medians (what the A/B
    table prints) and that median's order-statistic CI at the run's level, the trial medians
    as its samples; metadata, regime and memory from its first trial. The A/B verdict itself
    is within one run; comparing two A/B files compares each arm across runs."""
    from .ab import median_ci
    arms, trials = doc.get("arms"), doc.get("trials")
    if not (isinstance(arms, list) and isinstance(trials, list) and trials
            and all(isinstance(t, dict) for t in trials)):
        raise ValueError(f"kbench compare: A/B file {where} has no 'arms' and 'trials'")
    comps = doc.get("comparisons") or [{}]
    if not isinstance(comps, list):
        raise ValueError(f"kbench compare: A/B file {where}: 'comparisons' is a "
                         f"{type(comps).__name__}, not a list")
    level = comps[0].get("ci_level", 0.95) if isinstance(comps[0], dict) else 0.95
    if not (_is_number(level) and 0.5 <= level < 1):
        level = 0.95
    out: ResultSet = {}
    for arm in arms:
        arm = str(arm)
        runs = [t.get(arm) for t in trials]
        for i, d in enumerate(runs):
            if d is None:
                raise ValueError(f"kbench compare: {where}: trial {i} has no result for arm "
                                 f"{arm!r}")
            _check_result_doc(d, f"{where}, arm {arm!r}, trial {i}")
        meds = [(d.get("stats") or {}).get("median") for d in runs]
        if doc.get("profile") or any(m is None for m in meds):
            figure: Dict[str, Any] = {"median": None}        # profile runs: nothing timed
            samples: List[float] = []
        else:
            samples = [float(m) for m in meds]
            try:
                lo, hi = median_ci(samples, float(level))
            except ValueError as e:
                raise ValueError(f"kbench compare: {where}, arm {arm!r}: {e}") from None
            figure = {"median": statistics.median(samples), "ci_low": lo, "ci_high": hi, "ci_level": float(level),
                      "n": len(samples)}
        arm_doc = dict(runs[0])
        arm_doc.update(name=arm, stats=figure, samples_s=samples)
        out[arm] = arm_doc
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# the nested objects a comparison reads with .get (clock regime, world size, harness)
_OBJECT_FIELDS = [("extra", "regime"), ("extra", "distributed"),
                  ("metadata", "harness", "script"), ("metadata", "harness", "callable"),
                  ("metadata", "harness", "args")]


def _check_result_doc(d: Any, where: str) -> None:
    """The fields a comparison reads must have their types: a clear error, not a traceback."""
    if not isinstance(d, dict):
        raise ValueError(f"kbench compare: {where} is a {type(d).__name__}, not a result object")
    stats = d.get("stats")
    if stats is not None:
        if not isinstance(stats, dict):
            raise ValueError(f"kbench compare: {where}: 'stats' is a {type(stats).__name__}, "
                             f"not an object")
        for k in ("median", "ci_low", "ci_high"):
            if stats.get(k) is not None and not _is_number(stats[k]):
                raise ValueError(f"kbench compare: {where}: stats.{k} is {stats[k]!r}, not a "
                                 f"number")
    samples = d.get("samples_s")
    if samples is not None and not (isinstance(samples, list)
                                    and all(_is_number(x) for x in samples)):
        raise ValueError(f"kbench compare: {where}: 'samples_s' is not a list of numbers")
    mem = d.get("memory")
    if mem is not None:
        if not isinstance(mem, dict):
            raise ValueError(f"kbench compare: {where}: 'memory' is a {type(mem).__name__}, "
                             f"not an object")
        for k in ("peak_bytes", "resolution_bytes"):    # counted as int bytes: finite, >= 0
            v = mem.get(k)
            if v is not None and not (_is_number(v) and math.isfinite(v) and v >= 0):
                raise ValueError(f"kbench compare: {where}: memory.{k} is {v!r}, not a "
                                 f"finite number of bytes")
    for path in _OBJECT_FIELDS:
        obj: Any = d
        for i, k in enumerate(path):
            obj = obj.get(k)
            if obj is None:
                break
            if not isinstance(obj, dict):
                raise ValueError(f"kbench compare: {where}: '{'.'.join(path[:i + 1])}' is a "
                                 f"{type(obj).__name__}, not an object")
    _check_figure(d.get("stats"), where)
    check_sessions(d, where)


def _check_figure(stats: Any, where: str) -> None:
    """The median and its CI, which every verdict reads: present, and the CI around a median
    that is a time. Missing, the CI counted as overlapping: a run 3.5x slower passed as
    "within noise". A median that is not a time (NaN, <= 0, implausible) is judged "invalid"
    by compare_sets, naming it."""
    if stats is None:
        raise ValueError(f"kbench compare: {where}: no 'stats' (the median and its confidence "
                         f"interval, which every verdict reads)")
    missing = [k for k in ("median", "ci_low", "ci_high") if stats.get(k) is None]
    if missing:
        raise ValueError(f"kbench compare: {where}: stats.{missing[0]} is missing (the median "
                         f"and its confidence interval are needed to tell a change from noise)")
    med, lo, hi = stats["median"], stats["ci_low"], stats["ci_high"]
    if _median_problem("", med) is None and not (
            math.isfinite(lo) and math.isfinite(hi) and lo <= med <= hi):
        raise ValueError(f"kbench compare: {where}: stats.ci_low .. ci_high is {lo!r} .. "
                         f"{hi!r}, not a confidence interval around the median {med!r}")


def parse_threshold(text: Union[str, float, int, None]) -> float:
    """'8%' -> 0.08; '0.08' -> 0.08. A bare number of 1 or more is refused as ambiguous ('1'
    reads as 1% as readily as 100%); 100% is written '100%'."""
    if text is None:
        return 0.0
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = str(text).strip()
        try:
            value = float(s[:-1]) / 100.0 if s.endswith("%") else float(s)
        except ValueError:
            raise ValueError(f"threshold must look like '8%' or '0.08', got {text!r}") from None
        if not s.endswith("%") and value >= 1.0:
            raise ValueError(f"threshold {text!r} is ambiguous: write '{s}%' for percent or a "
                             f"fraction such as '0.08'")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"threshold must be a non-negative fraction, got {text!r}")
    return value


@dataclass
class Delta:
    """One benchmark across two runs (times in seconds)."""

    key: str
    old_median: Optional[float]
    new_median: Optional[float]
    delta: Optional[float]           # new / old - 1
    verdict: str
    note: str = ""
    old_ci: Optional[List[float]] = None
    new_ci: Optional[List[float]] = None
    old_mem: Optional[int] = None        # peak bytes of one call (Result.memory)
    new_mem: Optional[int] = None
    mem_delta: Optional[float] = None    # new / old - 1 (None: not both, or old 0)
    mem_verdict: str = ""                # "more memory", "less memory", "same memory", ...
    mem_failure: bool = False            # more memory beyond the --fail-mem threshold
    harness: List[str] = field(default_factory=list)   # how the two harnesses differ
    environment: List[str] = field(default_factory=list)   # what changed around the code

    @property
    def regression(self) -> bool:
        return self.verdict == "slower"

    @property
    def failure(self) -> bool:
        """Slower, a median that is not a time (NaN, infinite, zero, negative), or more peak
        memory beyond the memory threshold."""
        return self.verdict in ("slower", "invalid") or self.mem_failure

    def to_dict(self) -> Dict[str, Any]:
        return dict(key=self.key, old_median_s=self.old_median, new_median_s=self.new_median,
                    delta=self.delta, verdict=self.verdict, note=self.note,
                    old_ci_s=self.old_ci, new_ci_s=self.new_ci, old_peak_bytes=self.old_mem,
                    new_peak_bytes=self.new_mem, mem_delta=self.mem_delta,
                    mem_verdict=self.mem_verdict, mem_failure=self.mem_failure,
                    harness=list(self.harness), environment=list(self.environment))


@dataclass
class Comparison:
    """All deltas between two result sets, in the new set's order then the dropped ones."""

    deltas: List[Delta]
    threshold: float
    old_label: str = "baseline"
    new_label: str = "current"
    extra: Dict[str, Any] = field(default_factory=dict)
    mem_threshold: Optional[float] = None    # None: memory is reported, not gated
    notes: List[str] = field(default_factory=list)     # lines printed after the summary

    @property
    def regressions(self) -> List[Delta]:
        return [d for d in self.deltas if d.regression]

    @property
    def invalid(self) -> List[Delta]:
        return [d for d in self.deltas if d.verdict == "invalid"]

    @property
    def failures(self) -> List[Delta]:
        """What fails a check: regressions and invalid medians."""
        return [d for d in self.deltas if d.failure]

    @property
    def compared(self) -> int:
        """How many benchmarks had a median on both sides (a delta) taken under the same
        conditions: a "not comparable" pair has a delta but no verdict, so it checks nothing."""
        return len([d for d in self.deltas if d.delta is not None
                    and d.verdict != "not comparable"])

    @property
    def not_comparable(self) -> List[Delta]:
        return [d for d in self.deltas if d.verdict == "not comparable"]

    @property
    def unresolved_slower(self) -> List[Delta]:
        """Slower beyond the threshold by the medians, but within noise: not a regression, and
        not evidence of none either (a run's CI widens where its samples drifted)."""
        return [d for d in self.deltas if d.verdict == "within noise" and d.delta is not None
                and d.delta > self.threshold]

    @property
    def memory_regressions(self) -> List[Delta]:
        return [d for d in self.deltas if d.mem_failure]

    @property
    def different_harness(self) -> List[Delta]:
        return [d for d in self.deltas if d.harness]

    @property
    def ok(self) -> bool:
        return not self.failures

    def _has_memory(self) -> bool:
        return any(d.old_mem is not None or d.new_mem is not None for d in self.deltas)

    def _cells(self) -> List[List[str]]:
        rows = []
        mem = self._has_memory()
        for d in self.deltas:
            delta = "-" if d.delta is None else f"{100 * d.delta:+.1f}%"
            verdict = d.verdict.upper() if d.verdict in ("slower", "invalid") else d.verdict
            if d.harness:
                verdict += " [different harness]"
            row = [d.key, fmt_time(d.old_median), fmt_time(d.new_median), delta,
                   verdict + (f" ({d.note})" if d.note else "")]
            if mem:
                row.append(_mem_cell(d))
            rows.append(row)
        return rows

    def headers(self) -> List[str]:
        h = ["benchmark", self.old_label, self.new_label, "delta", "verdict"]
        if self._has_memory():
            h.append("peak memory")
        return h

    def table(self) -> str:
        return text_table(self.headers(), self._cells())

    def summary(self) -> str:
        n = self.compared
        reg = self.regressions
        thr = f"{100 * self.threshold:g}%"
        # no threshold: a delta counts once the CIs are apart ("beyond 0%" read as a cut-off)
        beyond = f" beyond {thr}" if self.threshold > 0 else ""
        if reg:
            text = (f"{len(reg)} of {n} benchmarks slower than {self.old_label}{beyond}: "
                    + ", ".join(d.key for d in reg))
        elif not n:
            # a baseline of other benchmarks (or none) checks nothing: say so, not "none slower"
            tally: Dict[str, int] = {}
            for d in self.deltas:
                tally[d.verdict] = tally.get(d.verdict, 0) + 1
            what = ", ".join(f"{c} {v}" for v, c in tally.items()) or "no benchmarks"
            both = "comparable figures" if self.not_comparable else "a median"
            text = (f"nothing compared: no benchmark has {both} in both {self.old_label} and "
                    f"{self.new_label} ({what})")
        else:
            nc = len(self.not_comparable)
            text = (f"no benchmark slower than {self.old_label}{beyond} ({n} compared"
                    + (f", {nc} not comparable" if nc else "") + ")")
        unresolved = self.unresolved_slower
        if unresolved:
            text += (f"; {len(unresolved)} slower{beyond} by the medians but not resolved "
                     f"(their CIs overlap: run longer, or compare in one process with kbench.ab): "
                     + ", ".join(d.key for d in unresolved))
        busy = [d for d in self.deltas if d.verdict == "busy host"]
        if busy:
            text += (f"; {len(busy)} slower{beyond} on a busy host, within the "
                     f"+{100 * BUSY_HOST_THRESHOLD:.0f}% the host can explain (not judged: "
                     f"re-run on a quiet host): " + ", ".join(d.key for d in busy))
        bad = self.invalid
        if bad:
            text += (f"; {len(bad)} with an invalid median (not a time): "
                     + ", ".join(f"{d.key} ({d.note})" for d in bad))
        more = [d for d in self.deltas if d.mem_verdict == "more memory"]
        if self.mem_threshold is not None:
            mthr = f"{100 * self.mem_threshold:g}%"
            gated = self.memory_regressions
            if gated:
                text += (f"; {len(gated)} using more peak memory than {self.old_label} beyond "
                         f"{mthr}: " + ", ".join(d.key for d in gated))
            else:
                n_mem = len([d for d in self.deltas if d.mem_verdict and
                             d.mem_verdict not in ("no figure", "not comparable")])
                text += f"; none using more peak memory beyond {mthr} ({n_mem} compared)"
        elif more:
            text += (f"; {len(more)} using more peak memory (not gated: --fail-mem): "
                     + ", ".join(d.key for d in more))
        return text

    def harness_lines(self) -> List[str]:
        """One line per benchmark whose two results came from different harnesses."""
        return [f"different harness: {d.key}: {'; '.join(d.harness)}"
                for d in self.different_harness]

    def environment_lines(self) -> List[str]:
        """What changed around the code (GPU, driver, libraries, frameworks, environment):
        one line where every compared benchmark saw the same changes (one session against
        another), else one per benchmark. Reported, not failed."""
        changed = [d for d in self.deltas if d.environment]
        if not changed:
            return []
        if len(changed) == len(self.deltas) and \
                all(d.environment == changed[0].environment for d in changed):
            return [f"environment changed: {'; '.join(changed[0].environment)}"]
        return [f"environment changed: {d.key}: {'; '.join(d.environment)}" for d in changed]

    def __str__(self) -> str:
        return "\n".join([self.table(), self.summary()] + self.notes + self.harness_lines()
                         + self.environment_lines())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return html_table(self.headers(), self._cells(), caption=self.summary())

    def to_dict(self) -> Dict[str, Any]:
        return dict(threshold=self.threshold, mem_threshold=self.mem_threshold, ok=self.ok,
                    deltas=[d.to_dict() for d in self.deltas])


def _mem_cell(d: Delta) -> str:
    if d.old_mem is None and d.new_mem is None:
        return "-"
    fig = f"{fmt_bytes(d.old_mem) if d.old_mem is not None else '-'} -> " \
          f"{fmt_bytes(d.new_mem) if d.new_mem is not None else '-'}"
    if d.mem_delta is not None:
        fig += f" ({100 * d.mem_delta:+.1f}%)"
    verdict = d.mem_verdict.upper() if d.mem_failure else d.mem_verdict
    return f"{fig} {verdict}".strip()


def _peak(d: Optional[Dict[str, Any]]) -> Any:
    """(peak bytes, method, resolution) of a result dict; peak None when not measured."""
    mem = (d or {}).get("memory")
    if not isinstance(mem, dict) or not _is_number(mem.get("peak_bytes")):
        return None, None, None
    res = mem.get("resolution_bytes")
    return int(mem["peak_bytes"]), mem.get("method"), (int(res) if _is_number(res) else 0)


def memory_verdict(old: Optional[Dict[str, Any]], new: Optional[Dict[str, Any]],
                   mem_threshold: Optional[float]) -> Dict[str, Any]:
    """The peak-memory fields of a Delta for two result dicts (see the module docstring)."""
    (om, o_method, o_res), (nm, n_method, n_res) = _peak(old), _peak(new)
    out: Dict[str, Any] = {"old_mem": om, "new_mem": nm, "mem_delta": None, "mem_verdict": "",
                           "mem_failure": False}
    if om is None or nm is None:
        if (om is None) != (nm is None) and old is not None:
            out["mem_verdict"] = "no figure"
        return out
    if o_method != n_method:
        out["mem_verdict"] = f"not comparable ({o_method} -> {n_method})"
        return out
    growth = nm - om
    out["mem_delta"] = (nm / om - 1.0) if om > 0 else None
    frac = mem_threshold or 0.0
    floor = max(o_res or 0, n_res or 0)
    if growth > max(frac * om, floor):
        out["mem_verdict"] = "more memory"
        out["mem_failure"] = mem_threshold is not None
    elif -growth > max(frac * om, floor):
        out["mem_verdict"] = "less memory"
    else:
        out["mem_verdict"] = "same memory"
    return out


def _median_and_ci(d: Dict[str, Any]):
    several = session_range(d)
    if several is not None:
        # a baseline of several sessions: their median of medians, and the range their CIs
        # covered, which holds the between-session movement one session's CI does not see
        return several[0], several[1]
    st = d.get("stats") or {}
    med = st.get("median")
    if med is None and d.get("samples_s"):
        s = sorted(d["samples_s"])
        n = len(s)
        med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    lo, hi = own_ci(st)
    ci = [float(lo), float(hi)] if lo is not None and hi is not None else None
    if ci is not None and not all(math.isfinite(x) for x in ci):
        ci = None                   # unknown, as when missing: no difference is resolved
    return (None if med is None else float(med)), ci


# A time per call outside these is no measurement kbench makes: below 0.1 ns is shorter than
# one clock cycle of any CPU or GPU; above a day, no benchmark repeats the call. A corrupt
# baseline far too large would pass any regression as "faster".
_MEDIAN_RANGE_S = (1e-10, 86400.0)


def _median_problem(label: str, median: Optional[float]) -> Optional[str]:
    """Why a median is not a usable time (None: missing, which the caller judges)."""
    if median is None:
        return None
    if not (math.isfinite(median) and median > 0):
        return f"{label} median is {median!r}"
    low, high = _MEDIAN_RANGE_S
    if not low <= median <= high:
        return (f"{label} median is {median!r} s, not a plausible time per call "
                f"({low:g} .. {high:g} s)")
    return None


def _where(d: Dict[str, Any]) -> str:
    return f"{d.get('device')}/{d.get('backend')}"


def _world(d: Optional[Dict[str, Any]]) -> int:
    """The number of ranks a result spans (1 for single-process results)."""
    rep = ((d or {}).get("extra") or {}).get("distributed") or {}
    w = rep.get("world", 1)
    return w if isinstance(w, int) and not isinstance(w, bool) else 1


#: On a busy host (kbench.measure.hostload) a slowdown up to this is the host's, not the code's: a
#: 2-core VM with one busy process moved a cold 16 MB np.add's medians 18-28% between runs.
BUSY_HOST_THRESHOLD = 0.5


def _host_load(d: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return (((d or {}).get("extra") or {}).get("host_load") or {})


def _like_sized(od: Optional[Dict[str, Any]], nd: Dict[str, Any]):
    """(median, ci, sessions, threads) of the baseline's figure at the thread count nd's pools
    were sized to on a busy host, where the baseline timed one (a --kbench-save's pool
    ladder); None otherwise, and where the baseline was itself sized."""
    threads = (_host_load(nd).get("pools_sized") or {}).get("threads")
    if od is None or not isinstance(threads, int) or _host_load(od).get("pools_sized"):
        return None
    from .baseline import sized_figure
    got = sized_figure(od, threads)
    return None if got is None else (*got, threads)


def _retimed_note(label: str, retimed: Dict[str, Any]) -> str:
    """The note of a benchmark the gate timed again (kbench.workflow.retime)."""
    from ..report._format import fmt_time
    medians = retimed.get("medians_s")
    if not isinstance(medians, list) or len(medians) < 2:      # older files: two runs
        medians = [retimed.get("first_median_s"), retimed.get("second_median_s")]
    times = {2: "twice", 3: "three times"}.get(len(medians), f"{len(medians)} times")
    return (f"{label} timed {times}, the first run having read slower: "
            f"{' then '.join(fmt_time(m) for m in medians)}, the "
            f"{'faster' if len(medians) == 2 else 'fastest'} judged")


def _host_busy(d: Optional[Dict[str, Any]]) -> bool:
    """Busy, or oversubscribed by the call's own thread pool: either moves a CPU figure by
    tens of % between sessions (a 2-thread matmul on 2 cores: -30..+36% quiet)."""
    load = _host_load(d)
    return bool(load.get("busy") or load.get("oversubscribed"))


def _regime(d: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """A GPU result's clock regime ({} for results without one: CPU, older files)."""
    return ((d or {}).get("extra") or {}).get("regime") or {}


def _cold(d: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """A result's cold-cache record ({} when absent: older files)."""
    cc = (d or {}).get("cold_cache")
    return cc if isinstance(cc, dict) else {}


def _cold_mode(d: Optional[Dict[str, Any]]) -> Optional[str]:
    mode = _cold(d).get("mode")
    return mode if isinstance(mode, str) and mode else None


def _cold_label(mode: str) -> str:
    return "none (hot)" if mode == "none" else mode


def _incomparable(od: Dict[str, Any], nd: Dict[str, Any]) -> List[str]:
    """Why two results' figures differ by design rather than by the code ([]: comparable)."""
    why = []
    ro, rn = _regime(od).get("name"), _regime(nd).get("name")
    if ro and rn and ro != rn:
        # a sustained and a burst figure of a power-capped kernel differ by design
        why.append(f"clock regime {ro} -> {rn}")
    mo, mn = _cold_mode(od), _cold_mode(nd)
    ho, hn = _cold(od).get("method"), _cold(nd).get("method")
    if mo == mn == "flush" and ho and hn and ho != hn:
        # writing a buffer leaves the cache full of dirty lines the timed call writes back;
        # evicting the operands' lines leaves none: a cold 1 MB add read 0.13 ms evicted,
        # 0.17-0.20 ms write-flushed (hot 0.044; benchmarks/results/cpu_cold_methods.md)
        why.append(f"cold cache by {ho} -> by {hn} (a write flush's dirty lines are written "
                   f"back during the timed call, an eviction's are not)")
    if mo and mn and mo != mn:
        # a hot figure (the data in cache) and a flushed or rotated one measure different things
        why.append(f"cold cache {_cold_label(mo)} -> {_cold_label(mn)}")
    return why


def _flush_size_note(od: Dict[str, Any], nd: Dict[str, Any]) -> Optional[str]:
    """Same cold-cache mode, different flush buffers: compared, but said."""
    fo, fn = _cold(od).get("flush_bytes"), _cold(nd).get("flush_bytes")
    if _is_number(fo) and _is_number(fn) and fo != fn:
        return f"flush size {fmt_bytes(fo)} -> {fmt_bytes(fn)}"
    return None


def compare_sets(old: ResultSet, new: ResultSet, threshold: float = 0.0,
                 old_label: str = "baseline", new_label: str = "current",
                 mem_threshold: Any = None) -> Comparison:
    """Deltas of medians (and of peak memory: gated only when mem_threshold is given)."""
    if isinstance(old, _SingleResult) and isinstance(new, _SingleResult) and \
            set(old) != set(new):
        # two Result files: the user paired them by naming the files
        (old_key, od), (new_key, _) = next(iter(old.items())), next(iter(new.items()))
        cmp = compare_sets({new_key: od}, new, threshold, old_label, new_label, mem_threshold)
        cmp.notes.append(f"two single results compared across names: {old_label} "
                         f"{old_key!r}, {new_label} {new_key!r}")
        return cmp
    threshold = parse_threshold(threshold)
    mem_threshold = None if mem_threshold is None else parse_threshold(mem_threshold)
    deltas: List[Delta] = []
    for key, nd in new.items():
        new_med, new_ci = _median_and_ci(nd)
        od = old.get(key)
        old_med, old_ci = _median_and_ci(od) if od is not None else (None, None)
        # a figure whose pools a busy host sized meets the baseline's at as many threads
        like = _like_sized(od, nd)
        if like is not None:
            old_med, old_ci = like[0], like[1]
        bad = [p for p in (_median_problem(old_label, old_med),
                           _median_problem(new_label, new_med)) if p]
        if new_med is None:     # the run under test gave no time: it must not pass a gate
            bad.append(f"{new_label} has no median")
        mem = memory_verdict(od, nd, mem_threshold)
        harness = different(od, nd) if od is not None else []
        env = environment_changes(od.get("metadata"), nd.get("metadata")) \
            if od is not None else []
        if bad:     # a NaN median compares as neither slower nor faster: it must not pass
            deltas.append(Delta(key, old_med, new_med, None, "invalid", "; ".join(bad),
                                old_ci=old_ci, new_ci=new_ci, harness=harness, environment=env,
                                **mem))
            continue
        if od is None:
            deltas.append(Delta(key, None, new_med, None, "no baseline", new_ci=new_ci, **mem))
            continue
        if old_med is None:
            deltas.append(Delta(key, old_med, new_med, None, "no baseline",
                                note="baseline has no median", old_ci=old_ci, new_ci=new_ci,
                                harness=harness, environment=env, **mem))
            continue
        why = _incomparable(od, nd)
        if why:
            # a sustained and a burst figure of a power-capped kernel, a hot and a cold one,
            # differ by design: not a change of the code, so neither gated nor called faster
            # or slower
            deltas.append(Delta(key, old_med, new_med, new_med / old_med - 1.0,
                                "not comparable", "; ".join(why), old_ci, new_ci,
                                harness=harness, environment=env, **mem))
            continue
        delta = new_med / old_med - 1.0
        overlap = (old_ci is None or new_ci is None
                   or (new_ci[0] <= old_ci[1] and old_ci[0] <= new_ci[1]))
        # against the baseline's figure at as many threads (taken on a quiet host, its pools
        # below the cores), the baseline's own load is not the figure's
        busy = [lab for lab, d in ((old_label, od), (new_label, nd))
                if _host_busy(d) and not (like is not None and d is od)]
        if overlap:
            verdict = "within noise"
        elif delta > threshold and busy and delta <= BUSY_HOST_THRESHOLD:
            # another process on the host moves a CPU figure by tens of % between runs (a
            # 2-core VM: 18-28%), which neither run's CI sees: a gate on such a pair judges
            # only what the host cannot explain, and says so
            verdict = "busy host"
        elif delta > threshold:
            verdict = "slower"
        elif delta < -threshold:
            verdict = "faster"
        else:
            verdict = "unchanged"
        notes = []
        if overlap and abs(delta) > threshold:
            # the runs' own CIs, in the one format every table uses (fmt_ci: two sides where
            # the order-statistic CI is lopsided)
            from ..report._format import fmt_ci
            cis = [fmt_ci(med, *ci) if ci is not None else "-"
                   for med, ci in ((old_med, old_ci), (new_med, new_ci))]
            notes.append("CIs overlap" + (f": {cis[0]} and {cis[1]}"
                                          if "-" not in (cis[0], cis[1]) else ""))
        if _where(od) != _where(nd):
            notes.append(f"{_where(od)} -> {_where(nd)}")
        wo, wn = _world(od), _world(nd)
        if wo != wn:
            # a collective's time grows with the ranks it spans: a change of code or of scale?
            notes.append(f"world size {wo} -> {wn}: different numbers of ranks")
        flush = _flush_size_note(od, nd)
        if flush:
            notes.append(flush)
        several = session_range(od)
        if several is not None:
            from ..report._format import fmt_time
            notes.append(f"{old_label}: {several[2]} sessions, their CIs span "
                         f"{fmt_time(several[1][0])} .. {fmt_time(several[1][1])}")
        over = [lab for lab, d in ((old_label, od), (new_label, nd))
                if _host_load(d).get("oversubscribed")]
        if over:
            notes.append(f"{' and '.join(over)} oversubscribed: the call's thread pool filled "
                         f"the cores (size it to the free ones: OPENBLAS_NUM_THREADS, "
                         f"OMP_NUM_THREADS)")
        sized = [(lab, _host_load(d)["pools_sized"]) for lab, d in ((old_label, od),
                                                                     (new_label, nd))
                 if _host_load(d).get("pools_sized")]
        retimed = (nd.get("extra") or {}).get("gate_retimed")
        if isinstance(retimed, dict):
            notes.append(_retimed_note(new_label, retimed))
        if like is not None:
            why = ("its figure at the full pool, which filled the cores, read slower but did "
                   "not resolve" if _host_load(nd)["pools_sized"].get("reason") == "unresolved"
                   else "on a busy host")
            notes.append(f"{new_label}'s thread pools were sized to {like[3]} ({why}): "
                         f"compared with {old_label}'s figure at {like[3]} "
                         f"thread{'s' if like[3] != 1 else ''} "
                         f"({like[2]} session{'s' if like[2] != 1 else ''})")
            sized = []
        for lab, ps in sized:
            # a figure at fewer threads than the other side's is another configuration: the
            # verdict stands (a regression must not pass), its likely cause is named
            was = "/".join(str(p["threads"]) for p in ps["pools"])
            notes.append(f"{lab}'s thread pools were sized from {was} to {ps['threads']} on a "
                         f"busy host, so part of the difference is the thread count: compare "
                         f"on a quiet host, or with the pool fixed in both (OPENBLAS_NUM_THREADS, "
                         f"OMP_NUM_THREADS)")
        if busy:
            notes.append(f"{' and '.join(busy)} on a busy or oversubscribed host: slowdowns "
                         f"up to +{100 * BUSY_HOST_THRESHOLD:.0f}% are not judged")
        unheld = [lab for lab, r in ((old_label, _regime(od)), (new_label, _regime(nd)))
                  if r.get("held") is False]
        if unheld:
            notes.append(f"{' and '.join(unheld)}: clock regime did not hold")
        deltas.append(Delta(key, old_med, new_med, delta, verdict, "; ".join(notes),
                            old_ci, new_ci, harness=harness, environment=env, **mem))
    for key, od in old.items():
        if key not in new:
            old_med, old_ci = _median_and_ci(od)
            deltas.append(Delta(key, old_med, None, None, "not run", old_ci=old_ci))
    notes = []
    if len(old) == 1 and len(new) == 1 and set(old) != set(new):
        # benchmarks pair up by name only: two files of one benchmark each may hold two
        # unrelated ones (a session of test_x and one of test_y), so no verdict is guessed
        notes.append(f"the names differ: {old_label} has {next(iter(old))!r}, {new_label} has "
                     f"{next(iter(new))!r}; benchmarks pair up by name, so they were not "
                     f"compared")
    return Comparison(deltas, threshold, old_label, new_label, mem_threshold=mem_threshold,
                      notes=notes)


def compare_files(old_path: str, new_path: str, threshold: float = 0.0,
                  mem_threshold: Any = None) -> str:
    """The deltas table with verdicts for two saved JSON files (Result or session files).

    threshold: a fraction (0.08) or text ('8%'): differences within it are "unchanged".
    """
    old, new = load_results(old_path), load_results(new_path)
    cmp = compare_sets(old, new, threshold, old_label="old", new_label="new",
                       mem_threshold=mem_threshold)
    return str(cmp)
