"""kbench.ab: paired, interleaved A/B comparison of two or more implementations.

    r = kbench.ab({"baseline": old_kernel, "candidate": new_kernel}, x, y, trials=10)
    r.verdict        # "candidate faster by 12.3% ..." or "no difference resolved"

Each trial runs a short kbench.bench of every arm, back to back, the order alternating from one
trial to the next (A B, B A, A B, ...), so slow drifts of clock, temperature or background load
hit both arms alike. Each trial gives one paired delta per arm against the first arm:
``median(arm) / median(first) - 1``. The estimate is the median of those paired deltas, with an
order-statistic (distribution-free) confidence interval of that median. A verdict is given when
that interval, at ci_level, excludes zero; otherwise "no difference resolved". How many pairs
agree in sign is reported beside it, not required: all-agree, the earlier rule, lost power as
trials were added (a +1% change under 0.5% trial noise was resolved in 43% of 10-trial runs
and 4% of 40-trial ones, while its interval excluded zero in 81% and 100%). Identical arms
get a verdict in about 1 - ci_level of runs (2.1% at 10 trials and 95%: the interval's exact
coverage).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..report._format import dump_json, fmt_time, html_table, load_json_as, text_table
from ..options import bench_docstring_section
from ..report.result import Result

AB_SCHEMA = "kbench.ab/1"

Arms = Union[Dict[str, Callable[..., Any]], Sequence[Tuple[str, Callable[..., Any]]]]

# A trial is a short measurement: defaults unless the caller says otherwise.
# a trial is a short bench: the pairing cancels drift slower than a trial, so a trial needs
# only a median, not a precise one (ten 0.05 s trials of two capped GEMMs resolve 5%)
_TRIAL_DEFAULTS = dict(warmup_s=0.05, max_time_s=0.05)


def _normalize_arms(arms: Arms) -> List[Tuple[str, Callable[..., Any]]]:
    if isinstance(arms, dict):
        pairs = list(arms.items())
    else:
        try:
            pairs = [tuple(p) for p in arms]
        except TypeError:
            raise TypeError("kbench.ab: arms must be a dict {name: fn} or a list of "
                            "(name, fn) pairs") from None
        for p in pairs:
            if len(p) != 2:
                raise TypeError(f"kbench.ab: each arm must be a (name, fn) pair, got {p!r:.80}")
    if len(pairs) < 2:
        raise ValueError(f"kbench.ab: needs at least two arms (a baseline and a candidate), "
                         f"got {len(pairs)}")
    names = [str(n) for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"kbench.ab: arm names must be distinct, got {names}")
    for n, f in pairs:
        if not callable(f):
            raise TypeError(f"kbench.ab: arm {n!r} is not callable ({type(f).__name__})")
    return [(str(n), f) for n, f in pairs]


def median_ci(x: np.ndarray, level: float) -> Tuple[float, float]:
    """Order-statistic (distribution-free) CI of the median, from the C core."""
    from .. import _core
    lo, hi = _core.median_ci(np.ascontiguousarray(x, dtype=np.float64), level)
    return float(lo), float(hi)


def min_trials(level: float) -> int:
    """Fewest pairs whose order-statistic CI of the median reaches `level`: the widest
    interval, (min, max), covers the median with probability 1 - 2 * 2^-n."""
    n = 1
    while 1.0 - 2.0 * 0.5 ** n < level:
        n += 1
    return n


@dataclass
class ArmComparison:
    """One arm against the first arm, over all trials."""

    arm: str
    baseline: str
    deltas: List[float]               # per trial: median(arm) / median(baseline) - 1
    median_delta: float
    ci_low: float
    ci_high: float
    ci_level: float
    same_sign: bool
    verdict: str

    def to_dict(self) -> Dict[str, Any]:
        return dict(arm=self.arm, baseline=self.baseline, deltas=list(self.deltas),
                    median_delta=self.median_delta, ci_low=self.ci_low, ci_high=self.ci_high,
                    ci_level=self.ci_level, same_sign=self.same_sign, verdict=self.verdict)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ArmComparison":
        if not isinstance(d, dict):
            raise ValueError(f"kbench A/B comparison is a {type(d).__name__}, not an object")
        try:
            return cls(arm=str(d["arm"]), baseline=str(d["baseline"]),
                       deltas=[float(x) for x in d["deltas"]],
                       median_delta=float(d["median_delta"]), ci_low=float(d["ci_low"]),
                       ci_high=float(d["ci_high"]), ci_level=float(d["ci_level"]),
                       same_sign=bool(d["same_sign"]), verdict=str(d["verdict"]))
        except KeyError as e:
            raise ValueError(f"kbench A/B comparison without {e.args[0]!r}") from None
        except (TypeError, ValueError):
            raise ValueError("kbench A/B comparison with a field that is not a number "
                             "(deltas, median_delta, ci_low, ci_high, ci_level)") from None


@dataclass
class ABResult:
    """The trials of an A/B run and each arm's comparison with the first arm."""

    arms: List[str]
    trials: List[Dict[str, Result]]          # per trial: arm -> Result
    orders: List[List[str]]                  # per trial: the order the arms ran in
    comparisons: List[ArmComparison]
    options: Dict[str, Any] = field(default_factory=dict)
    profile: bool = False                    # profile mode: each arm ran once, untimed

    @property
    def verdict(self) -> str:
        """The verdict for the second arm (the candidate); see .comparisons for others."""
        return self.comparisons[0].verdict

    def medians(self, arm: str) -> np.ndarray:
        """The per-trial medians (seconds) of one arm."""
        return np.array([t[arm].median for t in self.trials])

    def _cells(self) -> List[List[str]]:
        first = self.arms[0]
        if self.profile:
            return [[first, "-", "(baseline)", "", "", ""]] + \
                [[c.arm, "-", "-", "-", "-", c.verdict] for c in self.comparisons]
        m0 = float(np.median(self.medians(first)))
        rows = [[first, fmt_time(m0), "(baseline)", "", "", ""]]
        for c in self.comparisons:
            agree = sum(1 for d in c.deltas if (d > 0) == (c.median_delta > 0) and d != 0)
            rows.append([c.arm, fmt_time(float(np.median(self.medians(c.arm)))),
                         f"{100 * c.median_delta:+.2f}%",
                         f"{100 * c.ci_low:+.2f}% .. {100 * c.ci_high:+.2f}%",
                         f"{agree}/{len(c.deltas)}", c.verdict])
        return rows

    def _headers(self) -> List[str]:
        level = round(100 * self.comparisons[0].ci_level)
        return ["arm", "median of trial medians", "paired delta", f"CI{level}",
                "pairs agreeing", "verdict"]

    def _head(self) -> str:
        if self.profile:
            why = self.trials[0][self.arms[0]].extra.get("profile", {}).get("why")
            return (f"kbench A/B: profile run ({why}): each arm ran once for the profiler, "
                    f"not timed; no verdict")
        return (f"kbench A/B: {len(self.trials)} interleaved trials "
                f"(order alternating), deltas vs {self.arms[0]!r}")

    def __repr__(self) -> str:
        head = self._head()
        return head + "\n" + text_table(self._headers(), self._cells())

    def _repr_html_(self) -> str:
        caption = self._head() if self.profile else \
            f"kbench A/B: {len(self.trials)} interleaved trials, deltas vs {self.arms[0]}"
        return html_table(self._headers(), self._cells(), caption=caption)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": AB_SCHEMA,
            "arms": list(self.arms),
            "profile": self.profile,
            "orders": [list(o) for o in self.orders],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "trial_medians_s": {a: self.medians(a).tolist() for a in self.arms},
            "trials": [{a: r.to_dict() for a, r in t.items()} for t in self.trials],
            "options": {k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
                        for k, v in self.options.items()},
        }

    def to_json(self, path: Optional[str] = None, indent: int = 1) -> str:
        return dump_json(self.to_dict(), path, indent)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ABResult":
        """An A/B run written by to_dict/to_json: every trial's Results whole, the comparisons
        and verdicts as they were given (not recomputed), options as written (a value that was
        not a plain number or string reads back as its repr)."""
        if not isinstance(d, dict) or d.get("schema") != AB_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a kbench A/B result (schema {got!r}, expected {AB_SCHEMA!r}; "
                             f"a single result loads with kbench.Result.load, a sweep with "
                             f"kbench.SweepResult.load)")
        arms, trials, orders = d.get("arms"), d.get("trials"), d.get("orders")
        comps = d.get("comparisons")
        if not (isinstance(arms, list) and len(arms) >= 2 and isinstance(trials, list)
                and trials and isinstance(orders, list) and len(orders) == len(trials)
                and isinstance(comps, list) and len(comps) == len(arms) - 1):
            raise ValueError("kbench A/B result without matching arms, trials, orders and "
                             "comparisons")
        arms = [str(a) for a in arms]
        runs: List[Dict[str, Result]] = []
        for t, trial in enumerate(trials):
            if not isinstance(trial, dict) or sorted(trial) != sorted(arms):
                raise ValueError(f"kbench A/B result: trial {t} does not hold one result per "
                                 f"arm ({arms})")
            runs.append({a: Result.from_dict(trial[a]) for a in arms})
        options = d.get("options")
        return cls(arms=arms, trials=runs, orders=[[str(a) for a in o] for o in orders],
                   comparisons=[ArmComparison.from_dict(c) for c in comps],
                   options=dict(options) if isinstance(options, dict) else {},
                   profile=bool(d.get("profile")))

    @classmethod
    def load(cls, path: str) -> "ABResult":
        """Read an A/B run written by to_json(path)."""
        return load_json_as(path, "a kbench A/B result", cls.from_dict)


def _verdict(arm: str, deltas: np.ndarray, med: float, lo: float, hi: float) -> Tuple[bool, str]:
    """(every pair agrees in sign, the verdict): resolved when the CI of the median paired
    delta excludes zero."""
    same_sign = bool(np.all(deltas > 0) or np.all(deltas < 0))
    if not (lo > 0 or hi < 0):
        return same_sign, "no difference resolved"
    ratio = 1.0 + med
    if med > 0:
        return same_sign, f"{arm} slower by {100 * med:.1f}% ({ratio:.3g}x the baseline's time)"
    return same_sign, (f"{arm} faster by {100 * -med:.1f}% ({ratio:.3g}x the baseline's time, "
                       f"{1 / ratio:.3g}x speed-up)")


def _profiled(pairs: List[Tuple[str, Callable[..., Any]]], trial_results: List[Dict[str, Result]],
              orders: List[List[str]], options: Dict[str, Any], ci_level: float) -> ABResult:
    """The result of a profile-mode run: no deltas, no verdict."""
    nan = float("nan")
    base = pairs[0][0]
    comparisons = [ArmComparison(arm=name, baseline=base, deltas=[], median_delta=nan,
                                 ci_low=nan, ci_high=nan, ci_level=ci_level, same_sign=False,
                                 verdict="no verdict: profile run, not timed")
                   for name, _ in pairs[1:]]
    return ABResult(arms=[n for n, _ in pairs], trials=trial_results, orders=orders,
                    comparisons=comparisons, options=options, profile=True)


def ab(arms: Arms, *args: Any, trials: int = 10, ci_level: float = 0.95,
       **bench_options: Any) -> ABResult:
    """Compare implementations with interleaved, order-alternating trials.

    arms: {"baseline": fa, "candidate": fb} or [(name, fn), ...]; two or more; every arm is
    compared with the first. args and bench_options go to kbench.bench for every arm (each
    trial is a short benchmark: warmup_s=0.05, max_time_s=0.05 unless given). check= is verified
    once per arm, in the first trial. ci_level: of both each trial's statistics and the CI of
    the median paired delta. With three or more arms the reversed order keeps the middle arms
    in the middle (A B C, C B A): only the ends swap. In profile mode (profile=True or
    KBENCH_PROFILE=1, see kbench.measure.profile) each arm runs once for the profiler, untimed, and
    the result has ``profile=True`` and no verdict.
    """
    from ..bench import bench
    from ..measure.prepare import add_note
    pairs = _normalize_arms(arms)
    # numpy scalars (np.int64 from a loop, np.float32) are numbers too; bool is not
    if not (isinstance(ci_level, numbers.Real) and not isinstance(ci_level, bool)
            and 0.5 <= ci_level < 1.0):
        raise ValueError(f"kbench.ab: ci_level must be a float in [0.5, 1), got {ci_level!r}")
    ci_level = float(ci_level)
    need = min_trials(ci_level)
    if not isinstance(trials, numbers.Integral) or isinstance(trials, bool) or trials < need:
        raise ValueError(f"kbench.ab: trials must be an integer >= {need} for a "
                         f"{100 * ci_level:g}% confidence interval of the median paired delta, "
                         f"got {trials!r}")
    trials = int(trials)
    if "name" in bench_options:
        raise TypeError("kbench.ab: arms are named by their keys; do not pass name=")
    opts = dict(_TRIAL_DEFAULTS)
    opts.update(bench_options)
    opts["ci_level"] = ci_level
    check = opts.pop("check", None)
    checked = set()

    trial_results: List[Dict[str, Result]] = []
    orders: List[List[str]] = []
    for t in range(trials):
        order = pairs if t % 2 == 0 else pairs[::-1]
        res: Dict[str, Result] = {}
        for name, fn in order:
            kw = dict(opts)
            if check is not None and name not in checked:
                kw["check"] = check
                checked.add(name)
            try:
                # a trial is a slice of one comparison, not a run of its own: kept out of the
                # run history (kbench.measure.runhistory), whose spread is between whole runs
                res[name] = bench(fn, *args, name=name, _history=False, **kw)
            except Exception as e:
                add_note(e, f"in kbench.ab arm {name!r}, trial {t}")
                raise
        trial_results.append(res)
        orders.append([n for n, _ in order])
        # profile mode (kbench.measure.profile) runs each call once, untimed: one run per arm is
        # what
        # a profiler needs, and there are no medians to pair
        if any(r.stop.get("stop") == "profile" for r in res.values()):
            return _profiled(pairs, trial_results, orders, dict(opts, trials=trials), ci_level)

    base = pairs[0][0]
    base_med = np.array([r[base].median for r in trial_results])
    if np.any(base_med <= 0):
        raise ValueError(f"kbench.ab: arm {base!r} has a zero median time in some trial; "
                         f"paired ratios are undefined")
    comparisons = []
    for name, _ in pairs[1:]:
        deltas = np.array([r[name].median for r in trial_results]) / base_med - 1.0
        med = float(np.median(deltas))
        lo, hi = median_ci(deltas, ci_level)
        same, verdict = _verdict(name, deltas, med, lo, hi)
        comparisons.append(ArmComparison(arm=name, baseline=base, deltas=deltas.tolist(),
                                         median_delta=med, ci_low=lo, ci_high=hi,
                                         ci_level=ci_level, same_sign=same, verdict=verdict))
    return ABResult(arms=[n for n, _ in pairs], trials=trial_results, orders=orders,
                    comparisons=comparisons, options=dict(opts, trials=trials))


# kbench.bench's options, which ab passes to every trial, from the one schema (kbench.options)
ab.__doc__ = (f"{ab.__doc__.rstrip()}\n\n"
              f"{bench_docstring_section('kbench.bench options, passed to every trial')}\n")
