"""The short table gpu_check.sh prints last: one or two rows per result file a mode left in OUT.

    python scripts/gpu_summary.py OUT_DIR

Reads only what is there (a mode writes a few of these files); a file it cannot read gets a
row saying so rather than stopping the table. The full results stay in the files.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Tuple

Row = Tuple[str, str]


def _pct(v: Optional[float], digits: int = 1) -> str:
    return "?" if v is None else f"{v * 100:+.{digits}f}%"


def _s(v: Optional[float]) -> str:
    return "?" if v is None else f"{v:.2f} s"


def gpu_and_commit(out: str) -> List[Row]:
    text = open(os.path.join(out, "env.txt")).read()
    commit = re.search(r"commit (\S+)", text)
    gpu = re.search(r"^(NVIDIA[^,]*), (GPU-[0-9a-f]{8})", text, re.M)
    return [("GPU, commit", f"{gpu.group(1)} {gpu.group(2)}, {commit.group(1)}"
             if gpu and commit else "env.txt has no GPU line")]


def pytest_logs(out: str) -> List[Row]:
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "*pytest*.log"))):
        found = re.findall(r"^=*\s*(\d+ (?:passed|failed)[^\n=]*?)\s*=*$",
                           open(path).read(), re.M)
        rows.append((os.path.basename(path), found[-1] if found else "no summary line (cut off?)"))
    return rows


def agreement(d: dict) -> List[Row]:
    cases = d["cases"]
    ok = [c["case"] for c in cases if c.get("cupti_agrees")]
    bad = [c["case"] for c in cases if not c.get("cupti_agrees")]
    return [("agreement (cupti vs profile)", f"{len(ok)} of {len(cases)} agree"
             + (f"; not: {', '.join(bad)}" if bad else ""))]


def breadth(d: dict) -> List[Row]:
    cases = d["cases"]
    capped = [c for c in cases if c.get("kbench_burst")]     # a limit held it: burst ran too
    plain = [c["diff_memset"] for c in cases if not c.get("kbench_burst")
             and c.get("diff_memset") is not None]
    rows = [("breadth, never limited, vs memset-flushed profile",
             f"{len(plain)} cases, {_pct(min(plain))}..{_pct(max(plain))}" if plain else "none")]
    if capped:
        rows.append(("breadth, limited: sustained / burst vs profile",
                     f"{len(capped)} cases, {_pct(min(c['diff'] for c in capped))}.."
                     f"{_pct(max(c['diff'] for c in capped))} / "
                     f"{_pct(min(c['diff_burst'] for c in capped))}.."
                     f"{_pct(max(c['diff_burst'] for c in capped))}"))
    return rows


def time_to_figure(d: dict) -> List[Row]:
    s = d.get("summary") or {}
    return [("sweep kbench / do_bench", f"{_s(s.get('sweep_kbench_s'))} / "
                                        f"{_s(s.get('sweep_do_bench_s'))}"),
            ("first bench (CUPTI set-up)", f"{_s(s.get('first_bench_s'))} "
                                           f"({_s(s.get('first_bench_cupti_setup_s'))})")]


def ci_calibration(d: dict) -> List[Row]:
    return [(f"CI coverage {name}", f"{c['covered']:.0%} of {c['runs']} runs, medians spread "
                                    f"{c['spread_of_medians']:.2%}")
            for name, c in d["coverage"].items()]


def near_limit(d: dict) -> List[Row]:
    rows = []
    for name, c in d["cases"].items():
        devs = [v for v in c.get("vs_long") or [] if isinstance(v, (int, float))]
        rows.append((f"near limit {name}", "defaults vs 8 s bench " + (
            ", ".join(_pct(v, 2) for v in devs) if devs else "(no comparison)")))
    return rows


def soak(d: dict) -> List[Row]:
    return [(f"soak {mode}", "device {device_used_mb:+.1f} MB, rss {rss_mb:+.1f} MB".format(
                 **m["growth_after_first_round_mb"]))
            for mode, m in d["modes"].items()]


def tensor_parallel(out: str) -> List[Row]:
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "h200x*_tp.json"))):
        with open(path) as f:
            tp = json.load(f).get("tp") or {}
        for mode in ("events", "graph"):
            r = tp.get(mode)
            if r is not None:
                rows.append((f"TP GEMM {mode} ({os.path.basename(path)})",
                             f"{r['median_s'] * 1e6:.1f} us, skew {r['skew']:.1%}"
                             if "median_s" in r else f"failed: {str(r.get('error', '?'))[:70]}"))
    return rows


def peaks(out: str) -> List[Row]:
    text = open(os.path.join(out, "peaks.txt")).read()
    found = re.findall(r"^\s+(HBM copy|fp32 FMA|bf16 GEMM)\s+([\d.]+ \S+)", text, re.M)
    return [("peaks", ", ".join(f"{k} {v}" for k, v in found) or "no GPU peaks in peaks.txt")]


JSON_SECTIONS: Dict[str, Callable[[dict], List[Row]]] = {
    "h200_agreement.json": agreement, "h200_breadth.json": breadth,
    "h200_time_to_figure.json": time_to_figure, "h200_ci_calibration.json": ci_calibration,
    "h200_near_limit.json": near_limit, "h200_soak.json": soak,
}
TEXT_SECTIONS: Dict[str, Callable[[str], List[Row]]] = {
    "env.txt": gpu_and_commit, "peaks.txt": peaks,
}
GLOB_SECTIONS: List[Callable[[str], List[Row]]] = [pytest_logs, tensor_parallel]


def summary(out: str) -> List[Row]:
    rows: List[Row] = []
    for name, fn in TEXT_SECTIONS.items():
        if os.path.exists(os.path.join(out, name)):
            try:
                rows += fn(out)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                rows.append((name, f"unreadable: {type(e).__name__}: {e}"))
    for fn in GLOB_SECTIONS:
        try:
            rows += fn(out)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            rows.append((fn.__name__, f"unreadable: {type(e).__name__}: {e}"))
    for name, fn in JSON_SECTIONS.items():
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                rows += fn(json.load(f))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            rows.append((name, f"unreadable: {type(e).__name__}: {e}"))
    return rows


def main(argv: List[str]) -> int:
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: python scripts/gpu_summary.py OUT_DIR", file=sys.stderr)
        return 2
    rows = summary(argv[0])
    width = max((len(k) for k, _ in rows), default=0)
    print("== summary")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
