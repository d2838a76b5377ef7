"""kbench.workflow.baseline: a gate baseline taken over several sessions.

One session's CI says how well that session pinned its own median. It does not see what moves
between sessions: where the allocator placed the arrays, which core the scheduler chose, the
turbo state of the moment. On a 2-core VM, a cold 16 MB np.add and a 384^3 matmul moved -18%
to +16% between quiet pytest sessions whose CIs were +-5%, so an 8% gate against one session
failed unchanged code 2 times in 10. ``pytest --kbench-save=PATH --kbench-save-append`` adds a
session to the baseline already in PATH; the gate then judges the current figure against the
range the baseline's sessions covered (their CIs' envelope), and against its median of
medians.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional, Tuple

#: The sessions kept per benchmark: the latest ones. More only widen the envelope with age.
SESSIONS_KEPT = 10


def own_ci(st: Dict[str, Any]) -> Tuple[Any, Any]:
    """A result's CI from its own samples: the stated CI may be widened to the spread of the
    benchmark's earlier runs (kbench.measure.runhistory), which a gate learns from its baseline's
    sessions instead -- counted twice, it would let a regression pass as noise."""
    if st.get("ci_low_within") is not None and st.get("ci_high_within") is not None:
        return st["ci_low_within"], st["ci_high_within"]
    return st.get("ci_low"), st.get("ci_high")


def session_figure(d: Dict[str, Any]) -> Dict[str, Any]:
    """One session's figure as a baseline keeps it: median, its own CI, when, and the host's
    state."""
    st = d.get("stats") or {}
    load = (d.get("extra") or {}).get("host_load") or {}
    lo, hi = own_ci(st)
    out = {"median": st.get("median"), "ci_low": lo, "ci_high": hi,
           "created": (d.get("metadata") or {}).get("created"),
           "host_busy": bool(load.get("busy"))}
    ladder = ((d.get("extra") or {}).get("pool_ladder") or {}).get("figures")
    if ladder:
        out["sized"] = ladder        # {threads: figure}: the call at fewer pool threads
    return out


def sessions_of(d: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The sessions a saved result holds (an empty list: one session, the result itself)."""
    s = (d or {}).get("sessions")
    return s if isinstance(s, list) else []


def check_sessions(d: Dict[str, Any], where: str) -> None:
    """A malformed sessions list is refused, naming the entry: a gate must not read a figure
    that is not one (a missing CI would count as overlapping and pass anything). So is a
    malformed figure at fewer pool threads (a session's "sized", a result's pool_ladder)."""
    ladder = (d.get("extra") or {}).get("pool_ladder") if isinstance(d.get("extra"), dict) \
        else None
    if ladder is not None:
        _check_sized((ladder or {}).get("figures") if isinstance(ladder, dict) else ladder,
                     f"{where}: extra.pool_ladder.figures")
    s = d.get("sessions")
    if s is None:
        return
    if not isinstance(s, list) or not s:
        raise ValueError(f"kbench compare: {where}: 'sessions' is not a non-empty list of "
                         f"session figures")
    for i, e in enumerate(s):
        _check_figure(e, f"{where}: sessions[{i}]")
        if "sized" in e:
            _check_sized(e["sized"], f"{where}: sessions[{i}].sized")


def _check_figure(e: Any, where: str) -> None:
    """A figure as a baseline keeps one: an object with a finite median, ci_low and ci_high,
    ci_low <= median <= ci_high, all positive."""
    if not isinstance(e, dict):
        raise ValueError(f"kbench compare: {where} is a {type(e).__name__}, not an object")
    vals = [e.get(k) for k in ("median", "ci_low", "ci_high")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in vals):
        raise ValueError(f"kbench compare: {where} needs a finite median, ci_low and ci_high, "
                         f"got {vals!r}")
    med, lo, hi = vals
    if not (0 < lo <= med <= hi):
        raise ValueError(f"kbench compare: {where}: ci_low .. ci_high is {lo!r} .. {hi!r}, "
                         f"not a confidence interval around the median {med!r}")


def _check_sized(sized: Any, where: str) -> None:
    """{threads: figure}, threads a positive integer."""
    if not isinstance(sized, dict) or not sized:
        raise ValueError(f"kbench compare: {where} is not an object of figures by thread count")
    for k, e in sized.items():
        if not (isinstance(k, str) and k.isdigit() and int(k) > 0):
            raise ValueError(f"kbench compare: {where}: {k!r} is not a thread count")
        _check_figure(e, f"{where}[{k!r}]")


def _summary(figs: List[Dict[str, Any]]) -> Tuple[float, List[float], int]:
    """(median of the medians, [lowest ci_low, highest ci_high], how many)."""
    med = statistics.median(float(e["median"]) for e in figs)
    return (med, [min(float(e["ci_low"]) for e in figs), max(float(e["ci_high"]) for e in figs)],
            len(figs))


def figure(d: Dict[str, Any]) -> Optional[Tuple[float, List[float], int]]:
    """(median of the sessions' medians, [lowest ci_low, highest ci_high], sessions) where the
    result holds two or more sessions; None where it holds one."""
    s = sessions_of(d)
    return _summary(s) if len(s) >= 2 else None


def sized_figure(d: Dict[str, Any], threads: int) -> Optional[Tuple[float, List[float], int]]:
    """As figure, for the call with its thread pools at `threads`
    (kbench.measure.threadpools.ladder): from the sessions that timed it (one is enough: it is
    the only figure at that size), or from a single result's pool_ladder; None where none did."""
    key = str(threads)
    s = [e["sized"][key] for e in sessions_of(d)
         if isinstance(e.get("sized"), dict) and key in e["sized"]]
    if not s and not sessions_of(d):
        one = (((d.get("extra") or {}).get("pool_ladder") or {}).get("figures") or {}).get(key)
        s = [one] if one else []
    return _summary(s) if s else None


def append_session(old: Optional[Dict[str, Any]], new: Dict[str, Any],
                   harness_changes: List[str]) -> Tuple[Dict[str, Any], Optional[str]]:
    """The result to save for one benchmark when this session is added to a baseline: the new
    result, carrying the old sessions and its own (the last SESSIONS_KEPT), and a note on why
    a session was not added (None when both were)."""
    out = dict(new)
    mine = session_figure(new)
    if old is None:
        out["sessions"] = [mine]
        return out, None
    before = sessions_of(old) or [session_figure(old)]
    if harness_changes:
        # another callable, script or arguments: the old sessions timed something else
        out["sessions"] = [mine]
        return out, "harness changed (" + "; ".join(harness_changes) + "): sessions restarted"
    if mine["host_busy"]:
        # a busy host's figure would stretch the range every later run is judged against
        keep = dict(old)
        keep["sessions"] = before[-SESSIONS_KEPT:]
        return keep, "host busy: this session not added"
    out["sessions"] = (before + [mine])[-SESSIONS_KEPT:]
    return out, None
