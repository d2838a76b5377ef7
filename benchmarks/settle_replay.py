"""The carried settle rule judged again on recorded NVML traces, with and without a refresh margin.

A GPU case after another settles on the carried state once one window of its own readings
agrees with it; today that window waits out a fixed response time (0.1 s: NVML refreshes about
every 0.1 s), so a carried case costs ~0.15 s where do_bench takes ~0.11 s (#17). The rule can
instead start from NVML's first refresh seen after the load began plus a margin
(``carry_update_margin_s``, 0.05 s since this replay on the H200): it settles once a snapshot of this load is
read, if that snapshot shows the load itself. Whether it does depends on how long the
instantaneous power takes to follow a load, which only real readings tell. This replays every
carried kbench case of a ``gpu_time_to_figure.py --traces`` file through the core's rule
(``_core.clock_settled_carried_at``) at several margins, and says for each:

- when each variant settles (seconds of load), and by which rule;
- what the first fresh snapshot's instantaneous power read against the load's later median
  (a margin too short for the power to follow reads low, and would pass a heavy load as
  unlimited);
- whether a limit reason showed later in the load (a carried-unlimited settle that was wrong);
- how often NVML refreshed (the intervals between detected refreshes).

    python benchmarks/settle_replay.py benchmarks/results/h200_time_to_figure_traces.json \
        benchmarks/results/h200_time_to_figure.json --md benchmarks/results/h200_settle_replay.md
"""
from __future__ import annotations

import argparse
import json
import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from _gpu import LIMIT_REASONS
from kbench import _core

MARGINS = (None, 0.0, 0.02, 0.05)       # None: today's rule (the fixed response time)


def _arr(v: Sequence[Any]) -> np.ndarray:
    return np.array([math.nan if x is None else x for x in v], dtype=float)


def refreshes(trace: Dict[str, Any], after_s: Optional[float] = None) -> np.ndarray:
    """Indices of the readings that show an NVML refresh, by the core's rule (either power
    changed; the reading before taken at or after after_s)."""
    return _core.nvml_refreshes(_arr(trace["t_s"]), _arr(trace["power_w"]),
                                _arr(trace["power_inst_w"]), after_s=after_s)


def replay(trace: Dict[str, Any], row: Dict[str, Any],
           margins: Sequence[Optional[float]] = MARGINS) -> Dict[str, Any]:
    """The carried rule at each margin on one case's readings: {margin: (settled_after_s, by)},
    plus the first fresh snapshot's power against the load's, and any later limit reason."""
    t, sm, pa, pi = (_arr(trace[k]) for k in ("t_s", "sm_mhz", "power_w", "power_inst_w"))
    reasons = np.array(trace["reasons"], dtype=np.uint64)
    start = trace["load_start_s"]
    kw = dict(carried_mhz=row["carried_sm_mhz"],
              carried_under_limit=bool(row.get("carried_under_limit")),
              carried_ago_s=row["carried_from_s_ago"],
              carried_loaded_s=row.get("carried_loaded_s") or 0.0, load_start_s=start,
              power_limit_w=trace.get("power_limit_w"), max_sm_mhz=trace.get("max_sm_clock_mhz"))
    out: Dict[str, Any] = {"settle": {}}
    for m in margins:
        i, med, limited, by = _core.clock_settled_carried_at(t, sm, reasons, pa, pi,
                                                             carry_update_margin_s=m, **kw)
        out["settle"][m] = (None if i < 0 else float(t[i] - start), by, bool(limited))
    later = t >= start + 0.2
    steady = float(np.nanmedian(pi[later])) if later.any() else math.nan
    fresh = refreshes(trace, after_s=start)
    first = int(fresh[0]) + 1 if fresh.size else len(t)
    out["fresh_at_s"] = float(t[first] - start) if first < len(t) else None
    out["fresh_inst_w"] = float(pi[first]) if first < len(t) else None
    out["steady_inst_w"] = steady
    out["limit_later"] = bool(np.any(reasons[t >= start] & np.uint64(LIMIT_REASONS)))
    return out


def markdown(traces: Dict[str, Any], results: Dict[str, Any],
             margins: Sequence[Optional[float]] = MARGINS) -> str:
    rows = {f"{c['section']} / {c['case']} / {c['tool']}": c for c in results.get("cases", [])}
    name = lambda m: "response 0.1 s" if m is None else f"margin {m:g} s"  # noqa: E731
    lines = [f"# The carried settle rule replayed on recorded NVML traces "
             f"({traces.get('gpu')}, commit {traces.get('commit')})", "",
             "Settled after (s of load), by: 1 carry, 2 maximum clock, 0 two-window rule. "
             "'fresh' is NVML's first refresh after the load began: when its readings came and "
             "what its instantaneous power read against the load's median from 0.2 s on.", "",
             "| case | carried | online (s of warm-up) | " + " | ".join(name(m) for m in margins) +
             " | fresh at | fresh / steady W | limit later |",
             "|---|---|---:|" + "---:|" * len(margins) + "---:|---:|---|"]
    intervals: List[float] = []
    for key, trace in traces.get("cases", {}).items():
        intervals += np.diff(_arr(trace["t_s"])[refreshes(trace)]).tolist()
        row = rows.get(key) or {}
        if row.get("carried_from_s_ago") is None or row.get("carried_sm_mhz") is None:
            continue
        r = replay(trace, row, margins)
        cells = []
        for m in margins:
            at, by, lim = r["settle"][m]
            cells.append("-" if at is None else f"{at:.3f} ({by}{', capped' if lim else ''})")
        f = lambda v, d: "-" if v is None or not math.isfinite(v) else f"{v:.{d}f}"  # noqa
        carried = (f"{row['carried_sm_mhz']:.0f} MHz"
                   f"{', capped' if row.get('carried_under_limit') else ''}")
        lines.append(f"| {key} | {carried} | {f(row.get('settle_at_s'), 3)} | "
                     + " | ".join(cells) + f" | {f(r['fresh_at_s'], 3)} | "
                     f"{f(r['fresh_inst_w'], 0)} / {f(r['steady_inst_w'], 0)} | "
                     f"{'yes' if r['limit_later'] else 'no'} |")
    if intervals:
        q = np.percentile(intervals, [10, 50, 90])
        lines += ["", f"NVML's refreshes: {len(intervals)} intervals between them, p10 / "
                      f"median / p90 {q[0]:.3f} / {q[1]:.3f} / {q[2]:.3f} s."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", help="gpu_time_to_figure.py --traces JSON")
    ap.add_argument("results", help="gpu_time_to_figure.py --out JSON (the carried states)")
    ap.add_argument("--md", help="write the table here too")
    args = ap.parse_args()
    with open(args.traces) as f:
        traces = json.load(f)
    with open(args.results) as f:
        results = json.load(f)
    md = markdown(traces, results)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    print(md, end="")


if __name__ == "__main__":
    main()
