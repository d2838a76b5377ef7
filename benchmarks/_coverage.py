"""The CI calibrations' shared arithmetic (cpu_ci_calibration.py, gpu_ci_calibration.py): how
often a run's CI holds the median of the other runs' medians (imported as a script run imports
it: ``python benchmarks/<script>.py`` puts this folder on sys.path)."""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional


def finite_median(xs) -> Optional[float]:
    """The median of the finite values; None when there is none (NaN in every run)."""
    vals = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(vals) if vals else None


def leave_one_out(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per case: the share of runs whose CI (ci_low_s..ci_high_s) holds the median of the other
    runs' medians, the same for the independent CI (plain_*), how far each run's median lies
    from the others', and the runs' spread, CI widths, inflation and stops."""
    medians = [r["median_s"] for r in runs]
    covered = plain = 0
    devs = []
    for i, r in enumerate(runs):
        others = statistics.median(medians[:i] + medians[i + 1:])
        covered += r["ci_low_s"] <= others <= r["ci_high_s"]
        plain += r["plain_low_s"] <= others <= r["plain_high_s"]
        devs.append(abs(r["median_s"] / others - 1))
    n = len(runs)
    return {"runs": n, "covered": covered / n, "covered_if_independent": plain / n,
            "median_of_medians_s": statistics.median(medians),
            "spread_of_medians": max(medians) / min(medians) - 1,
            "loo_dev_median": statistics.median(devs), "loo_dev_max": max(devs),
            "rel_ci_median": statistics.median(r["rel_ci"] for r in runs),
            "plain_rel_ci_median": statistics.median(r["plain_rel_ci"] for r in runs),
            "inflated_runs": sum(r["ci_inflation"] > 1.0 for r in runs),
            "serial_vif_median": finite_median(r["serial_vif"] for r in runs),
            "precision_stops": sum(r["stop"] == "precision" for r in runs)}
