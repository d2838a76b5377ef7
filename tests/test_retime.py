"""kbench.workflow.retime: what the gate times again before it judges a benchmark.

The runs are stand-ins with set medians (the timing itself is bench's, tested elsewhere); what
is under test is which runs the gate asks for, which it keeps, and the verdict the kept one
gets against a baseline of sessions.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

import pytest

from kbench.measure import hostload, threadpools
from kbench.workflow import retime
from kbench.workflow.baseline import session_figure
from kbench.workflow.cli_compare import compare_sets


class Run:
    """A result as the gate sees one: a median, its own CI (+-rel), the host's load."""

    def __init__(self, median: float, rel: float = 0.02, **load: Any):
        self.median = median
        self.rel = rel
        self.extra: Dict[str, Any] = {"host_load": dict(
            {"busy": False, "oversubscribed": False, "others_cpus": 0.0, "own_cpus": 1.0,
             "steal_share": 0.0, "cpus": 2}, **load)}

    def to_dict(self) -> Dict[str, Any]:
        return {"name": "k", "device": "cpu", "backend": "host",
                "stats": {"median": self.median, "ci_low": self.median * (1 - self.rel),
                          "ci_high": self.median * (1 + self.rel)},
                "stop": {"stop": "budget"}, "cold_cache": {"mode": "flush"},
                "extra": copy.deepcopy(self.extra)}


def _baseline(sessions: List[tuple]) -> Dict[str, Any]:
    """A baseline of sessions (median at the full 2-thread pool, its own +-rel, the median at
    1 thread or None), as --kbench-save-append keeps one."""
    doc = Run(sessions[0][0]).to_dict()
    doc["sessions"] = []
    for med, rel, med1 in sessions:
        s = session_figure(Run(med, rel, oversubscribed=True, own_cpus=1.9).to_dict())
        if med1 is not None:
            s["sized"] = {"1": {"median": med1, "ci_low": med1 * 0.98, "ci_high": med1 * 1.02}}
        doc["sessions"].append(s)
    return doc


# five quiet sessions of a 2-thread matmul on 2 cores: medians in two modes (0.81..1.53 ms),
# wide CIs; at 1 thread, 1.70 ms +-2% every time
OVERSUBSCRIBED_BASELINE = [(0.90e-3, 0.05, 1.70e-3), (0.81e-3, 0.05, 1.72e-3),
                           (0.92e-3, 0.05, 1.69e-3), (1.53e-3, 0.02, 1.71e-3),
                           (0.84e-3, 0.05, 1.70e-3)]


class Calls:
    """The runs the gate asks for, in order: ('again', None) or ('sized', threads)."""

    def __init__(self, again: List[float], sized: Dict[int, List[float]],
                 oversubscribed: bool = False):
        self.log: List[tuple] = []
        self._load = {"oversubscribed": True, "own_cpus": 1.9} if oversubscribed else {}
        self._again, self._sized = list(again), {k: list(v) for k, v in sized.items()}

    def again(self) -> Run:
        self.log.append(("again", None))
        return Run(self._again.pop(0), **self._load)

    def sized_again(self, threads: int) -> Run:
        self.log.append(("sized", threads))
        return Run(self._sized[threads].pop(0), own_cpus=1.0)


@pytest.fixture
def pauses(monkeypatch) -> List[float]:
    slept: List[float] = []

    class Clock:
        @staticmethod
        def sleep(s: float) -> None:
            slept.append(s)
    monkeypatch.setattr(retime, "time", Clock)
    return slept


@pytest.fixture
def two_thread_pool(monkeypatch):
    pool = threadpools.Pool("openblas", "/x/libopenblas.so", lambda: 2, lambda n: None)
    monkeypatch.setattr(threadpools, "pools", lambda: [pool])


def _verdict(old: Dict[str, Any], kept: Run, threshold: float = 0.08):
    return compare_sets({"k": old}, {"k": kept.to_dict()}, threshold).deltas[0]


@pytest.mark.parametrize("at_one_thread, failed", [(3.4e-3, True), (1.72e-3, False)])
def test_an_unresolved_slowdown_of_a_pool_filling_the_cores_is_judged_at_fewer_threads(
        pauses, two_thread_pool, at_one_thread, failed):
    """A planted 2x of an oversubscribed matmul read +61% and overlapped the baseline's wide
    sessions: it passed. Timed at 1 thread against the baseline's 1-thread figure, the 2x fails;
    unchanged code whose session landed in the slow mode passes."""
    old = _baseline(OVERSUBSCRIBED_BASELINE)
    first = Run(1.45e-3, 0.05, oversubscribed=True, own_cpus=1.9)
    assert _verdict(old, first).verdict == "within noise"          # what the gate saw before
    calls = Calls(again=[], sized={1: [at_one_thread, at_one_thread]})
    got = retime.judged(old, first, 0.08, calls.again, calls.sized_again)
    kept = got.result
    assert got.configured is first        # what a baseline saves: the full pool's figure
    sized = kept.extra["host_load"]["pools_sized"]
    assert sized["threads"] == 1 and sized["reason"] == "unresolved"
    assert sized["first_run"]["median_s"] == pytest.approx(1.45e-3)
    assert sized["pools"] == [{"kind": "openblas", "library": "libopenblas.so", "threads": 2}]
    d = _verdict(old, kept)
    assert d.failure is failed and d.verdict == ("slower" if failed else "within noise")
    assert "sized to 1 (its figure at the full pool, which filled the cores, read slower but " \
           "did not resolve): compared with baseline's figure at 1 thread (5 sessions)" in d.note
    # a sized 2x is timed once more, as any slower figure; unchanged code is not
    assert calls.log == [("sized", 1)] * (2 if failed else 1)
    assert "on a busy or oversubscribed host" not in d.note    # no +50% allowance at 1 thread
    assert "POOLS SIZED by the gate" in hostload.text(kept.extra["host_load"])


def test_a_pool_that_fits_or_a_baseline_without_fewer_threads_is_not_sized(pauses,
                                                                           two_thread_pool):
    """The look at fewer threads needs an oversubscribed figure and a baseline figure to meet:
    otherwise the first reading is judged as it is."""
    old = _baseline(OVERSUBSCRIBED_BASELINE)
    calls = Calls(again=[], sized={1: [1.7e-3]})
    fits = Run(1.45e-3, 0.05)
    assert retime.judged(old, fits, 0.08, calls.again, calls.sized_again) == (fits, fits)
    no_ladder = _baseline([(m, r, None) for m, r, _ in OVERSUBSCRIBED_BASELINE])
    over = Run(1.45e-3, 0.05, oversubscribed=True, own_cpus=1.9)
    assert retime.judged(no_ladder, over, 0.08, calls.again, calls.sized_again) == (over, over)
    within = Run(0.93e-3, 0.05, oversubscribed=True, own_cpus=1.9)    # not slower: no look
    assert retime.judged(old, within, 0.08, calls.again, calls.sized_again) == (within, within)
    assert retime.judged(None, over, 0.08, calls.again, calls.sized_again) == (over, over)
    assert calls.log == [] and pauses == []


def _quiet_baseline(median: float) -> Dict[str, Any]:
    doc = Run(median).to_dict()
    doc["sessions"] = [session_figure(Run(median * f).to_dict()) for f in (0.99, 1.0, 1.01)]
    return doc


def test_a_slow_phase_that_outlasts_the_first_pause_is_timed_a_third_time(pauses):
    """Both runs 1 s apart read +17% (a host's slow phase): a third run, 4 s later, reads
    normal and is judged; a +17% regression reads slower all three times and fails."""
    old = _quiet_baseline(2.3e-3)
    calls = Calls(again=[2.69e-3, 2.31e-3], sized={})
    kept = retime.judged(old, Run(2.7e-3), 0.08, calls.again, calls.sized_again).result
    assert kept.median == pytest.approx(2.31e-3) and pauses == [1.0, 4.0]
    info = kept.extra["gate_retimed"]
    assert info["kept"] == "third" and len(info["medians_s"]) == 3
    d = _verdict(old, kept)
    assert not d.failure
    assert "current timed three times, the first run having read slower: 2.7000 ms then " \
           "2.6900 ms then 2.3100 ms, the fastest judged" in d.note
    calls = Calls(again=[2.68e-3, 2.71e-3], sized={})
    kept = retime.judged(old, Run(2.7e-3), 0.08, calls.again, calls.sized_again).result
    assert _verdict(old, kept).verdict == "slower" and len(calls.log) == 2


def test_a_regression_beyond_what_a_host_moves_is_not_waited_on(pauses):
    """A 2x reads slower beyond +50% on the second run too: no third run, no 4 s pause."""
    old = _quiet_baseline(2.3e-3)
    calls = Calls(again=[4.5e-3], sized={})
    kept = retime.judged(old, Run(4.6e-3), 0.08, calls.again, calls.sized_again).result
    assert pauses == [1.0] and calls.log == [("again", None)]
    d = _verdict(old, kept)
    assert d.verdict == "slower" and "timed twice" in d.note and "the faster judged" in d.note


def test_an_older_files_two_run_record_still_reads():
    """gate_retimed from before the third run: first_median_s and second_median_s only."""
    from kbench.workflow.cli_compare import _retimed_note
    note = _retimed_note("current", {"first_median_s": 2e-3, "second_median_s": 1e-3,
                                     "kept": "second"})
    assert note == ("current timed twice, the first run having read slower: 2.0000 ms then "
                    "1.0000 ms, the faster judged")


def test_a_run_without_a_host_load_reading_gets_one_to_record_the_sizing(pauses,
                                                                           two_thread_pool):
    """A sized run under 0.1 s reads no host load (None): it still records how it was taken,
    and its Host load row says both."""
    old = _baseline(OVERSUBSCRIBED_BASELINE)
    first = Run(1.45e-3, 0.05, oversubscribed=True, own_cpus=1.9)

    def sized_again(threads: int) -> Run:
        r = Run(1.7e-3)
        r.extra["host_load"] = None
        return r
    kept = retime.judged(old, first, 0.08, lambda: None, sized_again).result
    assert kept.extra["host_load"]["pools_sized"]["threads"] == 1
    assert not _verdict(old, kept).failure
    row = hostload.text(kept.extra["host_load"])      # the printed block's row
    assert row.startswith("not read (a run under 0.1 s); POOLS SIZED by the gate")
