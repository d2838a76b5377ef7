"""Result: the samples of one benchmark, their statistics, throughput and metadata."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from ._format import dump_json, fmt_bytes, fmt_ci, fmt_pct, fmt_rate, fmt_time, html_table

SCHEMA = "kbench.result/1"


def dependence_text(stats: Dict[str, Any]) -> str:
    """How many independent samples the run is worth, where their order showed dependence
    (serial_vif above 2; the CI is widened by ci_inflation, any estimate above 1), and whether
    the run was too short to see how much; "" where it did not show."""
    inflation = stats.get("ci_inflation") or 1.0
    # results saved before "dependent" existed widened their CI only where it showed
    if not stats.get("dependent", inflation > 1.0):
        return ""
    return (f"{stats['n']} samples worth {stats['n'] / inflation:.0f} independent ones: their "
            f"order shows dependence")


def saturation_text(stats: Dict[str, Any]) -> str:
    """Where the samples' dependence reached what the run's length can measure (the 'ci' rule
    does not stop on it): "" otherwise."""
    if not stats.get("vif_saturated"):
        return ""
    return ("their dependence is as long as this run can measure: a slower swing than it saw "
            "may move the figure beyond this CI (sample longer: max_time_s)")


def _settle_text(settle: Optional[Dict[str, Any]]) -> str:
    """The CUDA warm-up's clock settle point, in words ('' when not judged)."""
    if not settle or settle.get("settled") is None:
        return ""
    at, mhz = settle.get("at_s"), settle.get("sm_mhz")
    where = f"{at:.2f} s of warm-up" if at is not None else "the warm-up"
    clock = f" (SM {mhz:.0f} MHz)" if mhz is not None else ""
    held = (f"; sampling held to >= {settle['min_sampling_s']:g} s (clock limited or moving)"
            if settle.get("min_sampling_s") else "")
    ago = settle.get("carried_from_s_ago")
    carried = ""
    if ago is not None:
        how = ("one window of its own load agreed with it" if settle.get("by_carry")
               else "its own load did not match it: two windows")
        carried = (f"; carried the state of the measurement that ended {ago:.2f} s before "
                   f"(SM {settle.get('carried_sm_mhz') or 0:.0f} MHz): {how}")
        if settle.get("carried_under_limit"):
            cont = settle.get("continued_s") or 0.0
            # an idle gap drains the averaged power: the controller lets the clock up
            carried += (f", continuing its capped load of {cont:.1f} s" if cont > 0 else
                        ", but too long after its capped load to continue it")
    # settled on no carried state: the load's own window showed the board's maximum clock
    at_max = ("; one window of its own load showed the board's maximum SM clock, unlimited"
              if settle.get("at_max_clock") else "")
    kept = settle.get("samples_while_settling") or 0
    from_s = settle.get("kept_from_load_s")
    kept_s = (f"; {kept} samples kept from {from_s:.2f} s of load, where the readings first "
              f"showed the settled state" if kept and from_s is not None else "")
    # the first settled state (unlimited) did not hold while timed: the samples were dropped
    again = (f"; settled again under the limit after {settle['resettle_reason']} limited the "
             f"load {settle.get('resettle_timed_s') or 0.0:.2f} s into the timed part (it had "
             f"settled with nothing limiting its clock; those samples were dropped)"
             if settle.get("resettle_reason") else "")
    if settle["settled"]:
        return f"settled after {where}{clock}{carried}{at_max}{kept_s}{again}{held}"
    return (f"NOT settled after {where}{clock}, gave up at settle_max_s={settle.get('max_s')}"
            f"{carried}{again}{held}")


def _time_text(st: Dict[str, Any], cc: Dict[str, Any],
               extra: Optional[Dict[str, Any]] = None) -> str:
    """Where the bench's wall time went: warm-up (on CUDA: the busy kernel, the settle, whether
    it was carried), sampling, the flushes inside each (outside the timed calls), and the rest
    (the flush buffer's set-up, CUPTI's set-up, the check, metadata)."""
    extra = extra or {}
    warm, samp, wall = st.get("warmup_s") or 0.0, st.get("sampling_s") or 0.0, st["wall_s"]
    w_note = [f"flush {cc['flush_warmup_s']:.2f}"] if cc.get("flush_warmup_s") else []
    if st.get("warmup_stable") is not None:
        w_note.append("stable" if st["warmup_stable"] else "to its limit")
    settle = extra.get("clock_settle") or {}
    if settle.get("settled") is not None and settle.get("at_s") is not None:
        carried = (" carried" if settle.get("by_carry")
                   else " at max clock" if settle.get("at_max_clock") else "")
        w_note.append(f"settle{carried} {settle['at_s']:.2f}")
    if st.get("resettle_sampled_s") is not None:
        # counted in the warm-up: the samples were dropped when the settled state ended
        w_note.append(f"{st['resettle_sampled_s']:.2f} of sampling dropped, settled again")
    w_note_s = f" ({'; '.join(w_note)})" if w_note else ""
    busy = extra.get("busy_warmup_s") or 0.0
    busy_s = f"busy kernel {busy:.2f}, " if busy else ""
    # samples kept from the settle began inside the warm-up: counted once
    overlap = st.get("sampling_overlap_s") or 0.0
    s_notes = [f"flush {cc['flush_s']:.2f}"] if cc.get("flush_s") is not None else []
    if overlap > 0:
        s_notes.append(f"{overlap:.2f} of it while settling")
    s_note = f" ({'; '.join(s_notes)})" if s_notes else ""
    o_notes = [f"flush buffer set-up {cc['setup_s']:.2f}"] if cc.get("setup_s") else []
    cupti = extra.get("cupti_setup") or {}
    if cupti.get("total_s") is not None:
        o_notes.append(f"CUPTI set-up {cupti['total_s']:.3f}")
    o_note = f" ({'; '.join(o_notes)})" if o_notes else ""
    return (f"{wall:.2f} s: {busy_s}warm-up {warm:.2f}{w_note_s}, sampling {samp:.2f}{s_note}, "
            f"overhead {max(wall - warm - (samp - overlap) - busy, 0.0):.2f}{o_note}")


def _regime_text(regime: Optional[Dict[str, Any]], cold_mode: Optional[str] = None) -> str:
    """The clock/power regime and whether it held ('' for results without one). Under a cache
    flush the load is the kernel and the flush before each call, which power and clocks follow:
    on the H200 a bf16 GEMM 2048^3 stayed at its maximum clock flushed, and was capped within
    0.22 s back to back."""
    if not regime or not regime.get("name"):
        return ""
    name = regime["name"]
    load = ("the continuous load of the kernel and the cache flush before each call"
            if cold_mode == "flush" else "the kernel's own continuous load")
    what = {"sustained": f"under {load}, settled",
            "burst": "short batches, each on a recovered GPU"}.get(name, "")
    held = "held" if regime.get("held") else f"NOT held: {regime.get('why')}"
    b = regime.get("burst") or {}
    detail = ""
    if name == "burst" and b.get("batches"):
        lo, hi = b.get("sm_mhz_min"), b.get("sm_mhz_max")
        clocks = f", SM {lo:.0f}-{hi:.0f} MHz at batch starts" if lo and hi else ""
        detail = f" ({b['batches']} batches, {fmt_time(b.get('wait_s') or 0.0)} waiting{clocks})"
    elif name == "sustained" and regime.get("loaded_s"):
        detail = f" (after {regime['loaded_s']:.2f} s of load)"
    note = f"; {regime['note']}" if regime.get("note") else ""
    return f"{name}: {what}{detail}; {held}{note}"


def overlap_worth_showing(overlap_s: float, median_s: Optional[float]) -> bool:
    """Whether a call's records overlapped by more than CUPTI's rounding: above one 32 ns step
    and 0.5% of the figure (back-to-back records on one stream overlap by 1 ns in some calls)."""
    return bool(median_s) and overlap_s > max(32e-9, 0.005 * median_s)


def _duty_text(fraction: Optional[float], between: Optional[Dict[str, Any]],
               keep_busy: Optional[Dict[str, Any]] = None) -> str:
    """How busy the GPU was while sampling ('' when unknown)."""
    parts = []
    if fraction is not None:
        parts.append(f"{fraction:.0%} of the sampling time in timed iterations")
    if keep_busy and keep_busy.get("bridges"):
        parts.append(f"{keep_busy['iterations']} untimed keep-busy iterations in "
                     f"{keep_busy['bridges']} bridges ({fmt_time(keep_busy['gpu_s'])})")
    if between and between.get("n"):
        parts.append(f"idle {fmt_time(between['total_s'] / between['n'])} between batches "
                     f"(mean of {between['n']}, max {fmt_time(between['max_s'])})")
    return "; ".join(parts)


class Throughput(dict):
    """Result.throughput. Rates are per second (flops_per_s, bytes_per_s). The share of the peak
    is a fraction under bandwidth_pct_peak / compute_pct_peak (0.638 for 63.8%: the old names,
    kept); bandwidth_pct / compute_pct read the same share in percent (63.8). Those two are
    derived on reading (``[]`` and ``get``), so they never go stale and are not stored."""

    PERCENT_OF = {"bandwidth_pct": "bandwidth_pct_peak", "compute_pct": "compute_pct_peak"}

    def __missing__(self, key: Any) -> float:
        fraction = self.PERCENT_OF.get(key)
        if fraction is None or fraction not in self:
            raise KeyError(key)
        return 100.0 * self[fraction]

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


# eq=False: a measurement is equal to itself only (the generated __eq__ compared the sample
# arrays and raised numpy's "truth value of an array is ambiguous")
@dataclass(eq=False)
class Result:
    """One benchmark: per-call times in seconds and everything needed to trust and reproduce them.

    ``samples`` are seconds per call. ``stats`` holds the summary of the samples (seconds);
    ``median``, ``mean`` and ``min`` are seconds too (the printout shows ms or us), and
    ``median_s``, ``mean_s``, ``min_s`` say so in their names. ``throughput`` (a
    :class:`Throughput`) is computed from the caller's theoretical ``flops``/``bytes`` per call
    and the median time; ``*_pct_peak`` compare it with the measured peaks of this machine when
    known, as a fraction (0.638), and ``bandwidth_pct`` / ``compute_pct`` in percent (63.8).
    """

    name: str
    device: str                      # "cpu" or "cuda:N"
    backend: str                     # "host", "events", "cupti", "graph"
    samples: np.ndarray
    stats: Dict[str, Any]
    stop: Dict[str, Any]
    cold_cache: Dict[str, Any]
    flops: Optional[float] = None
    bytes: Optional[float] = None
    throughput: Dict[str, Any] = field(default_factory=dict)
    correctness: Optional[Dict[str, Any]] = None
    metadata: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)   # backend specifics (kernels, clocks, floor)
    memory: Optional[Dict[str, Any]] = None  # one untimed call's peak (kbench.measure.memory)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "throughput" and isinstance(value, dict) and not isinstance(value, Throughput):
            value = Throughput(value)           # for the percent keys, however it was set
        object.__setattr__(self, name, value)

    # -- the numbers people ask for first (seconds)
    @property
    def median(self) -> float:
        """The median time per call, in seconds (as median_s)."""
        return float(self.stats["median"])

    @property
    def median_s(self) -> float:
        return self.median

    @property
    def mean_s(self) -> float:
        return self.mean

    @property
    def min_s(self) -> float:
        return self.min

    @property
    def mean(self) -> float:
        return float(self.stats["mean"])

    @property
    def min(self) -> float:
        return float(self.stats["min"])

    @property
    def n(self) -> int:
        return int(self.stats["n"])

    # -- serialisation
    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": SCHEMA,
            "name": _jsonable(self.name),
            "device": self.device,
            "backend": self.backend,
            "samples_s": [float(x) for x in np.asarray(self.samples, dtype=np.float64)],
            "stats": _jsonable(self.stats),
            "stop": _jsonable(self.stop),
            "cold_cache": _jsonable(self.cold_cache),
            "flops": _jsonable(self.flops),
            "bytes": _jsonable(self.bytes),
            "throughput": _jsonable(self.throughput),
            "correctness": _jsonable(self.correctness),
            "metadata": _jsonable(self.metadata),
            "warnings": list(self.warnings),
            "extra": _jsonable(self.extra),
            "memory": _jsonable(self.memory),
        }

    def to_json(self, path: Optional[str] = None, indent: int = 1) -> str:
        return dump_json(self.to_dict(), path, indent)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Result":
        if not isinstance(d, dict):
            raise TypeError(f"not a kbench result: a {type(d).__name__}, not a JSON object "
                            f"with schema {SCHEMA!r}")
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a kbench result (schema {d.get('schema')!r}, "
                             f"expected {SCHEMA!r})")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"kbench result without {', '.join(missing)}")
        for k, kind in _REQUIRED.items():
            if not isinstance(d[k], kind):
                raise ValueError(f"kbench result field {k!r} is a {type(d[k]).__name__}, not "
                                 f"a {_KIND_NAMES[kind]}")
        try:
            samples = np.asarray(d["samples_s"], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("kbench result field 'samples_s' is not a list of numbers") \
                from None
        return cls(name=d["name"], device=d["device"], backend=d["backend"],
                   samples=samples, stats=d["stats"],
                   stop=d["stop"], cold_cache=d["cold_cache"], flops=d.get("flops"),
                   bytes=d.get("bytes"), throughput=d.get("throughput") or {},
                   correctness=d.get("correctness"), metadata=d.get("metadata") or {},
                   warnings=list(d.get("warnings") or []), extra=d.get("extra") or {},
                   memory=d.get("memory") if isinstance(d.get("memory"), dict) else None)

    @classmethod
    def from_json(cls, text: str) -> "Result":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a kbench result: invalid or truncated JSON ({e})") from None
        return cls.from_dict(doc)

    @classmethod
    def load(cls, path: str) -> "Result":
        """Read a result written by to_json(path). A file that is not one raises ValueError
        (TypeError for JSON of another type) naming the file and the problem."""
        with open(path) as f:
            try:
                text = f.read()
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: not a kbench result: not UTF-8 text ({e.reason} at "
                                 f"byte {e.start})") from None
        try:
            return cls.from_json(text)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{path}: {e}") from None

    # -- presentation
    def _rows(self) -> List[List[str]]:
        s, st, tp = self.stats, self.stop, self.throughput
        level = f"{100 * s.get('ci_level', 0.95):.10g}"     # 99.9, not a rounded 100
        # CI and CV answer different questions, and a high CV beside a tight CI looks like a
        # contradiction unless each says what it is.
        # samples in runs on one side of the median (a controller's swings, a drift) carry
        # less than independent ones, and the CI says so
        dependence = dependence_text(s)
        counted = f"n={s['n']}" + (f"; {dependence}" if dependence else "")
        # a CI that closed on the timer's steps (even to zero width) is not the precision:
        # one step is (the Timer steps row)
        what = ("the samples sit on the timer's steps: one step is the precision (Timer steps)"
                if st.get("at_resolution") else
                f"this run's precision; {saturation_text(s)}" if saturation_text(s) else
                "the precision of this figure")
        between = self.extra.get("between_runs") or {}
        if between.get("widened"):
            alone = fmt_ci(s.get("median"), s.get("ci_low_within"), s.get("ci_high_within"))
            what = (f"widened to the spread between runs, {between_runs_text(between)}; this "
                    f"run alone {alone}")
        rows = [["Wall", f"{fmt_time(s['median'])} median ({counted}; {level}% CI of the "
                         f"median {fmt_time(s['ci_low'])} .. {fmt_time(s['ci_high'])}, "
                         f"{fmt_ci(s.get('median'), s.get('ci_low'), s.get('ci_high'))}: "
                         f"{what})"],
                ["Spread", f"min {fmt_time(s['min'])}, mean {fmt_time(s['mean'])}, "
                           f"max {fmt_time(s['max'])}, CV {fmt_pct(s.get('cv'))} (the spread "
                           f"of single calls, not the precision of the median), "
                           f"outliers {s.get('outliers_low', 0) + s.get('outliers_high', 0)}"]]
        parts = []
        for kind, unit, pct_key in (("bytes", "B", "bandwidth_pct_peak"),
                                    ("flops", "FLOP", "compute_pct_peak")):
            if tp.get(f"{kind}_per_s") is None:
                continue
            p = ""
            if tp.get(pct_key):
                peak = tp.get(f"peak_{kind}_name") or "ceiling"
                p = (f" ({fmt_pct(tp[pct_key])} of the measured {peak} peak, "
                     f"{fmt_rate(tp[f'peak_{kind}_per_s'], unit)})")
            parts.append(fmt_rate(tp[f"{kind}_per_s"], unit) + p)
        if parts:
            rows.append(["Throughput", "; ".join(parts)])
        if tp.get("bound_by"):
            rows.append(["Bound by", f"{tp['bound_by']} ({tp.get('bound_reason', '')})"])
        from ..roofline.ceilings import ceiling_text      # which compute ceiling, why; the datasheet's
        ceiling = ceiling_text(self.extra.get("compute_peak"), tp)
        if ceiling:
            rows.append(["Ceiling", ceiling])
        clocks = self.extra.get("clocks")
        if clocks and clocks.get("summary"):
            rows.append(["Clocks live", clocks["summary"]])
        regime = _regime_text(self.extra.get("regime"), (self.cold_cache or {}).get("mode"))
        if regime:
            rows.append(["Regime", regime])
        settle = _settle_text(self.extra.get("clock_settle"))
        if settle:
            rows.append(["Clock settle", settle])
        if self.extra.get("stepped_min_sampling_s"):
            step = st.get("resolution_s") or 0.0
            # under 2 us, or a step wider than the CI asked for of this figure (cuda_batch.c)
            step_s = (f"CUPTI reads in {step * 1e9:.0f} ns steps, coarse for this figure, so a "
                      f"CI one step wide ({fmt_pct(0.5 * step / s['median'])}) stops the run"
                      if step and s.get("median") else "CUPTI reads in coarse steps")
            rows.append(["Timer steps", f"{step_s}; sampled for >= "
                         f"{self.extra['stepped_min_sampling_s']:g} s so the run mixes them"])
        elif st.get("at_resolution") and st.get("resolution_s") and s.get("median"):
            # the host clock's step (10 ns on some VMs) against a sub-microsecond call: the
            # Stop row's CI is one step wide, short of the target, and says 'precision'
            step = st["resolution_s"]
            rows.append(["Timer steps", f"the clock reads in {fmt_time(step)} steps, coarse for "
                                        f"this figure: the median is known to one step "
                                        f"(+-{fmt_pct(0.5 * step / s['median'])}), not to the "
                                        f"target; time a loop of calls inside fn for a finer "
                                        f"figure"])
        overlap = self.extra.get("overlap_median_s") or 0.0
        if overlap_worth_showing(overlap, s.get("median")):
            rows.append(["Overlap", f"the call's kernels/copies overlapped by "
                                    f"{fmt_time(overlap)} (a second stream, or programmatic "
                                    f"dependent launch): the figure counts that time once; "
                                    f"their durations summed read "
                                    f"{fmt_time(self.extra.get('summed_median_s'))}"])
        duty = _duty_text(self.extra.get("gpu_timed_fraction"), self.extra.get("between_batches"),
                          self.extra.get("keep_busy"))
        if duty:
            rows.append(["GPU busy", duty])
        if self.extra.get("device_from"):
            rows.append(["Device", f"{self.device}, chosen from "
                                   f"{self.extra['device_from']}"])
        cc = self.cold_cache
        mode = cc.get("mode", "none")
        flush = (f"evict the operands' {fmt_bytes(cc.get('evict_bytes'))} ({cc.get('instruction')}"
                 f" on each line) before each sample, where a flush would write "
                 f"{fmt_bytes(cc.get('flush_bytes'))}; what fn reads beyond its arguments "
                 f"would stay cached, and kbench saw none"
                 if cc.get("method") == "evict" else
                 f"flush {fmt_bytes(cc.get('flush_bytes'))} before each sample"
                 + (f" (not an eviction of the operands' lines: {cc['evict_refused']})"
                    if cc.get("evict_refused") else ""))
        detail = {"flush": flush,
                  "rotate": f"rotate {cc.get('arg_sets')} argument sets, "
                            f"{fmt_bytes(cc.get('footprint_bytes'))} in all",
                  }.get(mode, "hot: no flush, no rotation")
        rows.append(["Cold cache", f"{mode}: {detail} (cache {fmt_bytes(cc.get('cache_bytes'))})"])
        from ..measure.hostload import text as host_load_text
        host = host_load_text(self.extra.get("host_load"))
        if host:
            rows.append(["Host load", host])
        if self.extra.get("distributed"):
            rows.extend(_ranks_rows(self.extra["distributed"]))
        ach = st.get("achieved")
        # 'ci' reads a relative half-width (a %); 'entropy' a slope in bits per sample
        as_text = (lambda v: f"{v:.3g} bits/sample") if st.get("criterion") == "entropy" \
            else fmt_pct
        ach_s = as_text(ach) if isinstance(ach, (int, float)) and math.isfinite(ach) else "-"
        target = st.get("target")
        target_s = as_text(target) if isinstance(target, (int, float)) else "-"
        if st.get("stop") == "budget":
            # the default contract: a bounded time, the CI it bought (target= asks for more)
            rule = (f"budget: {st.get('criterion')} {ach_s} when the {st.get('max_time_s', 0):g} s "
                    f"sampling budget was spent (target {target_s} not asked for; pass "
                    f"target= to wait for a precision)")
        else:
            rule = f"{st.get('stop')}: {st.get('criterion')} {ach_s} vs target {target_s}"
        rows.append(["Stop rule", f"{rule} after {s['n']} samples "
                                  f"in {st.get('sampling_s', 0):.2f} s; warm-up "
                                  f"{st.get('warmup_iters')} iters / {st.get('warmup_s', 0):.2f} s"])
        mem = memory_text(self.memory)
        if mem:
            rows.append(["Memory", mem])
        if st.get("wall_s") is not None:
            rows.append(["Time", _time_text(st, cc, self.extra)])
        if self.correctness is not None:
            c = self.correctness
            how = " (in place: checked on a second call, from the output's contents before " \
                "the first)" if c.get("in_place") else ""
            rows.append(["Correctness", f"{'ok' if c.get('ok') else 'FAILED'}{how}: max abs "
                                        f"{c.get('max_abs_err', float('nan')):.3g}, rel L2 "
                                        f"{c.get('rel_l2', float('nan')):.3g} "
                                        f"(rtol {c.get('rtol')}, atol {c.get('atol')})"])
        from ..provenance.harness import summary as harness_text
        harness = harness_text(self.metadata.get("harness") or {})
        if harness:
            rows.append(["Harness", harness])
        for w in self.warnings:
            rows.append(["Warning", w])
        return rows

    def __repr__(self) -> str:
        head = f"kbench {self.name}  [{self.device}, {self.backend} timer]"
        rows = self._rows()
        w = max(len(k) for k, _ in rows) + 1
        return "\n".join([head] + [f"  {(k + ':').ljust(w)} {v}" for k, v in rows])

    def _repr_html_(self) -> str:
        return html_table(["", ""], self._rows(),
                          caption=f"kbench {self.name} [{self.device}, {self.backend} timer]")


# What each method's figure is, in words (kbench.measure.memory says how each is measured): what
# the
# figure counts, the word before it, and how it was taken.
_MEMORY_WORDS = {
    "rss": ("resident memory first touched by the call", "peak",
            "process peak RSS, a lower bound (memory reused from the heap is not counted)"),
    "torch": ("memory allocated by the call", "peak", "torch caching allocator"),
    "cupy": ("memory allocated by the call", "peak", "CuPy memory pool"),
    "driver": ("device memory taken by the call", "at least",
               "driver free memory, a lower bound (a peak between polls is missed)"),
}


def _fmt_resolution(n: int) -> str:
    """A method's resolution in the binary units it is set in: 1 MiB, 2 MiB, 512 B."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return fmt_bytes(n)


def memory_text(mem: Optional[Dict[str, Any]]) -> str:
    """The printed result's "Memory" row ('' when not measured): Result.memory, which
    kbench.measure.memory measures, in words: what the method's figure counts, and "< resolution"
    where the figure is below what the method can resolve (its noise, not a size)."""
    if not mem:
        return ""
    if mem.get("peak_bytes") is None:
        return f"not measured: {mem.get('why')}"
    method = mem.get("method")
    what, word, how = _MEMORY_WORDS.get(
        method, ("memory used by the call above what was allocated before it", "peak",
                 str(method)))
    res = mem.get("resolution_bytes") or 0
    peak = mem["peak_bytes"]
    fig = (f"< {_fmt_resolution(res)} (the method's resolution)" if peak < res
           else f"{word} {fmt_bytes(peak)}")
    parts = [f"{what}: {fig}"]
    held = mem.get("retained_bytes") or 0
    if held > 0 and held >= res:
        # what the call left allocated: its output, or memory it cached or leaked
        parts.append(f"{fmt_bytes(held)} still held after it (its output, a cache or a leak)")
    parts.append(f"one untimed call; {how}")
    return "; ".join(parts)


# The multi-rank rows are written here, not in kbench.distributed: a Result sits below the
# distributed entry point (it runs kbench.measure.local, which builds Results).
def topology_text(topo: Optional[Dict[str, Any]]) -> str:
    """The GPU pairs' P2P and NVLink links (kbench.distributed._topology), in one line."""
    if not topo:
        return ""
    if topo.get("error"):
        return f"unknown ({topo['error']})"
    pairs = topo.get("pairs") or []
    if not pairs:
        return topo.get("note", "")
    return "; ".join(f"GPU{p['a']}-GPU{p['b']}: P2P read {p['read']}, NVLink {p['nvlink']}, "
                     f"atomics {p['atomics']} ({p['common_ancestor']})" for p in pairs[:6]) + \
        (f"; ... {len(pairs) - 6} more pairs" if len(pairs) > 6 else "")


def _ranks_rows(rep: Dict[str, Any]) -> List[List[str]]:
    """The report rows of a multi-rank result (kbench.distributed's extra["distributed"])."""
    where = "multi-node" if rep.get("multi_node") else "local (one node)"
    meds = rep.get("per_rank_median_s") or []
    med_text = ", ".join(f"r{r} {fmt_time(m)}" for r, m in enumerate(meds[:8]) if m is not None)
    if len(meds) > 8:
        med_text += f", ... ({len(meds)} ranks)"
    skew = rep.get("skew")
    rows = [["Ranks", f"world {rep.get('world')}, {rep.get('local_world')} per node, "
                      f"{rep.get('nodes')} node(s), {where}; each sample is the MAX across "
                      f"ranks"],
            ["Per rank", f"medians {med_text}; skew {fmt_pct(skew) if skew is not None else '-'}"
                         f" (median of (max-min)/max per sample), slowest rank "
                         f"{rep.get('slowest_rank')}"]]
    v = rep.get("versions") or {}
    vtext = ", ".join(f"{k} {val}" for k, val in v.items() if val)
    rows.append(["Engine", f"{rep.get('engine')} ({rep.get('backend')}){'; ' + vtext if vtext else ''}"
                           f"; barrier before each call: {rep.get('barrier')}"])
    topo = topology_text(rep.get("topology"))
    if topo:
        rows.append(["Topology", topo])
    return rows


def between_runs_text(between: Dict[str, Any]) -> str:
    """Where the between-run spread came from (kbench.measure.runhistory)."""
    if not between.get("source"):
        return between.get("why") or "not known"
    if between["source"] == "this benchmark":
        return f"from {between['runs']} runs of this benchmark on this machine"
    return f"from {between['source']}"


# The statistics of a result with no samples (DisabledRun, ProfileRun): NaN figures, so code
# reading r.median or r.stats runs, and a timing assertion on them is false.
NAN_STATS_KEYS = ("min", "max", "mean", "median", "std", "q1", "q3", "iqr", "mad", "cv",
                  "ci_low", "ci_high", "rel_ci_halfwidth")


def untimed_stats() -> Dict[str, Any]:
    stats: Dict[str, Any] = {k: float("nan") for k in NAN_STATS_KEYS}
    stats.update(n=0, ci_level=0.95, outliers_low=0, outliers_high=0)
    return stats


_REQUIRED = {"name": str, "device": str, "backend": str, "samples_s": list, "stats": dict,
             "stop": dict, "cold_cache": dict}
_KIND_NAMES = {str: "string", list: "list", dict: "JSON object"}


def _jsonable(x: Any) -> Any:
    """Numpy scalars/arrays and tuples to plain JSON types (NaN/inf kept as floats)."""
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return repr(x)
