"""What a CUDA measurement's raw record says: the Result's fields and warnings.

kbench._core.measure_cuda returns the samples and a record of how they were taken (the gate,
CUPTI's attribution and health, NVML clocks, the settle rule, keep-busy bridges, the regime)
with C's verdicts on it (csrc/clocks/regime.c: the clock summary, the GPU's timed and busy
fractions, the power cap, whether the regime held and why). This module copies that record into
the Result's `extra` fields and phrases the warnings a reader needs. It decides nothing about
the measurement itself: C has settled every field it reads.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from .. import _core

# An events/graph floor at or above this share of a figure puts the figure at risk.
FLOOR_SHARE_WARN = 0.10


def names_per_call(names: Dict[str, Any], raw: Dict[str, Any], unroll: float) -> List[Dict]:
    n = max(1, len(raw["samples"]))
    rows = []
    for name, d in sorted(names.items(), key=lambda kv: -kv[1]["total_ns"]):
        rows.append({"name": name, "kind": d["kind"], "per_call": d["count"] / n / unroll,
                     "mean_us": d["total_ns"] / d["count"] / 1e3,
                     "min_us": d["min_ns"] / 1e3, "max_us": d["max_ns"] / 1e3})
    return rows


def kinds(names: Dict[str, Any], n: int, unroll: int) -> Dict[str, float]:
    """Activity per call by name, rounded: what the comparison of eager and graph looks at."""
    n = max(1, n) * max(1, unroll)
    return {name: round(d["count"] / n, 2) for name, d in sorted(names.items())}


def read_cold(cold: Dict[str, Any], cuda: Dict[str, Any], flushed: bool, l2: int,
              warn: List[str]) -> None:
    """The cold-cache fields C settled: the flush buffer it used (flushed: the plan's flush),
    the persisting-L2 limit."""
    cold["flush_bytes"] = cuda["flush_bytes"]
    if flushed and l2 and cuda["flush_bytes"] < l2:
        # kept (it still evicts part of L2), but not called cold
        cold["evicts"] = False
        warn.append(f"flush_bytes={cuda['flush_bytes']} is smaller than the {l2}-byte L2: the "
                    f"flush cannot evict it, so the figure is not cold")
    if cuda.get("persisting_l2_limit_bytes"):
        # a fact of the context (its default limit, or a library's), not a risk: kbench resets
        # the persisting lines before measuring, so the flush evicts them
        cold["persisting_l2_limit_bytes"] = cuda["persisting_l2_limit_bytes"]
        cold["persisting_l2_note"] = "persisting lines reset to normal before measuring"


TRACE_KEYS = ("t_s", "sm_mhz", "mem_mhz", "power_w", "power_inst_w", "temp_c", "reasons")


def clock_trace(clocks: Any, load_start_s: Optional[float]) -> Optional[Dict[str, Any]]:
    """The NVML readings of the whole measurement on one time axis, for a plot of what the
    clocks and the power did (and for judging the settle rules again offline): 0 is where the
    timed part began, the warm-up's readings come before it at negative times and
    ``load_start_s`` is where the callable's load began; ``timed_from`` is the index of the
    timed part's first reading. None where the clocks were not sampled."""
    if not isinstance(clocks, dict) or clocks.get("t_s") is None:
        return None
    warm = clocks.get("warmup") or {}
    trace: Dict[str, Any] = {}
    for k in TRACE_KEYS:
        timed = np.asarray(clocks[k])
        trace[k] = np.concatenate([np.asarray(warm.get(k, ()), dtype=timed.dtype), timed])
    mark = clocks.get("mark_s")
    trace["load_start_s"] = (load_start_s - mark if load_start_s is not None and mark is not None
                             else None)
    trace["timed_from"] = len(warm.get("t_s", ()))
    trace["period_s"] = clocks.get("period_s")
    trace["power_limit_w"] = clocks.get("power_limit_w")
    trace["max_sm_clock_mhz"] = clocks.get("max_sm_clock_mhz")
    return trace


def read_record(raw: Dict[str, Any], extra: Dict[str, Any], warn: List[str], *, timer: str,
                expected_launches: Optional[int]) -> None:
    """The Result's fields and warnings from the record C returned (raw["cuda"]): attribution,
    CUPTI's health, the gate, clocks, settle, GPU busy time, the regime. Fills extra and warn."""
    cuda = raw["cuda"]
    # Attribution: what ran per iteration (a launch count is how a code path is proven).
    kpi = np.asarray(cuda["kernels_per_iter"])
    if timer == "cupti" and kpi.size:
        u = max(1.0, float(cuda.get("unroll", 1.0)))
        lo, hi = int(kpi.min()), int(kpi.max())
        extra["kernels_per_call"] = {"min": lo / u, "max": hi / u}
        extra["kernels"] = names_per_call(cuda.get("names") or {}, raw, u)
        if lo != hi:
            warn.append(f"the number of kernels per iteration varied ({lo}..{hi}): the "
                        f"callable does not launch the same work every call")
        if expected_launches is not None and (lo / u != expected_launches or
                                              hi / u != expected_launches):
            warn.append(f"expected {expected_launches} kernel launch(es) per call, CUPTI saw "
                        f"{lo / u:g}..{hi / u:g}")
        # medians from C: numpy's median imports numpy.ma on first use, 0.05 s of a
        # process's first bench on the H200
        span = np.asarray(cuda["span_s"], dtype=np.float64)
        ev = np.asarray(cuda["events_s"], dtype=np.float64)
        extra["span_median_s"] = _core.quantile(span, 0.5) if span.size else None
        extra["events_median_s"] = _core.quantile(ev, 0.5) if ev.size else None
        # A call's activities can overlap (a second stream, programmatic dependent launch): the
        # figure counts the overlapped time once (busy_time.c), the summed durations do not.
        summed = np.asarray(cuda.get("summed_s", ()), dtype=np.float64)
        if summed.size:
            extra["summed_median_s"] = _core.quantile(summed, 0.5)
            busy = np.asarray(raw["samples"], dtype=np.float64)
            if busy.size == summed.size:
                extra["overlap_median_s"] = _core.quantile(summed - busy, 0.5)
        extra["cupti_ticks_per_ns"] = cuda.get("cupti_ticks_per_ns")
        extra["cupti_detach"] = cuda.get("cupti_detach")
        med = _core.quantile(np.asarray(raw["samples"], dtype=np.float64), 0.5)
        # The kernels run inside the event bracket of their iteration: CUPTI time above the
        # event time of the same iterations means its timestamps cannot be trusted.
        if ev.size and med > 1.02 * extra["events_median_s"] + 0.5e-6:
            warn.append(f"CUPTI's kernel time {med * 1e6:.2f} us exceeds the CUDA-event time "
                        f"{extra['events_median_s'] * 1e6:.2f} us of the same iterations: "
                        f"CUPTI timestamps are unreliable in this process (another tool "
                        f"configured CUPTI?); compare with mode='events'")
        if cuda.get("cupti_ticks_per_ns", 1.0) != 1.0:
            # a profiler registered its own timestamp callback (torch.profiler's TSC clock):
            # kbench measured the unit and converted, so the figure is not at risk
            extra["cupti_timestamp_unit_ns"] = 1 / cuda["cupti_ticks_per_ns"]
    if cuda.get("stepped_min_sampling_s"):
        # a CUPTI figure under 2 us (or whose 32 ns step is wider than the CI asked for): its
        # records sit on a few steps whose mix moved between short runs, so the C loop sampled
        # it for at least this long
        extra["stepped_min_sampling_s"] = cuda["stepped_min_sampling_s"]
    if "cupti_flushes" in cuda:
        # batches read with a forced flush: it lengthens later kernels' records (cupti_trace.c)
        extra["cupti_flushes"] = cuda["cupti_flushes"]
    if cuda.get("cupti_dropped"):
        warn.append(f"CUPTI dropped {cuda['cupti_dropped']} activity records "
                    "(buffers full, or returned unfinished by a flush)")
    g = cuda["gate"]
    extra["gate"] = g
    if g.get("watchdog_fired"):
        warn.append(f"the host could not keep the gated queue ahead: the watchdog opened the "
                    f"gate {g['watchdog_fired']} time(s); batches shrank from {g['batch']} to "
                    f"{g['batch_final']} iterations and affected samples were re-measured"
                    + (f" ({g['fired_kept']} kept at batch 1)" if g.get("fired_kept") else ""))
    # the timed part's NVML samples summarised, and (burst) steady judged at batch starts
    extra["clocks"] = dict(cuda["clocks_summary"])
    extra["busy_warmup_s"] = cuda.get("busy_warmup_s")
    # subscribe (or take the lingering subscriber), enable, calibrate; the first batch's read
    extra["cupti_setup"] = cuda.get("cupti_setup")
    # the callable's own warm-up on CUDA is held to this (the busy kernel warmed the clocks)
    extra["callable_warmup_max_s"] = cuda.get("callable_warmup_max_s")
    settle = {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
              for k, v in (cuda.get("settle") or {}).items()}
    extra["clock_settle"] = settle
    extra["clock_trace"] = clock_trace(cuda.get("clocks"), settle.get("load_start_s"))
    extra["gpu_timed_fraction"] = cuda["gpu_timed_fraction"]
    # GPU idle from one timed sub-batch's end (or its keep-busy bridge's) to the next one's
    # first event: what the bridges left of the host's turnaround
    bb = cuda.get("between_batches") or {}
    extra["between_batches"] = dict(bb, mean_s=bb["total_s"] / bb["n"]) if bb.get("n") else bb
    extra["keep_busy"] = cuda.get("keep_busy") or {}
    extra["gpu_busy_fraction"] = cuda["gpu_busy_fraction"]
    extra["regime"] = dict(cuda["regime"])
    if not extra["regime"]["held"]:
        warn.append(f"the {extra['regime']['name']} clock regime did not hold: "
                    f"{extra['regime']['why']}; {extra['clocks']['summary']}")


def floor_share(extra: Dict[str, Any], mode: str, raw: Dict[str, Any], warn: List[str]) -> None:
    """How much of the figure the mode's floor (extra["floor"]) may be: events and graph modes
    only (an event pair's floor is launch and event overhead that may sit inside every sample;
    cupti mode probes none, kbench.backends.cuda._run says why)."""
    med = _core.quantile(np.asarray(raw["samples"], dtype=np.float64), 0.5)
    if med > 0:
        share = extra["floor"]["median_s"] / med
        extra["floor"]["share_of_figure"] = share
        if share >= FLOOR_SHARE_WARN:
            warn.append(f"this mode's floor ({extra['floor']['median_s'] * 1e6:.2f} us, what "
                        f"{mode} reads for an empty kernel) may be up to {share:.0%} of the "
                        f"{med * 1e6:.2f} us figure; use mode='cupti' for kernel time")


def gpu_neighbours(ordinal: int) -> Dict[str, Any]:
    import os
    try:
        snap = dict(_core.nvml_snapshot(ordinal))
    except _core.KbenchError as e:
        return {"snapshot": {"error": str(e)}}
    procs = snap.get("compute_processes") or []
    mine = os.getpid()
    others = [p for p in procs if p.get("pid") != mine]
    return {"snapshot": snap, "other_processes": len(others),
            "other_memory_bytes": sum(int(p.get("used_memory_bytes") or 0) for p in others)}


def theoretical_bandwidth(info: Dict[str, Any]) -> Optional[float]:
    """Device memory bandwidth from its attributes: 2 transfers per memory clock x bus width
    (read + write together; HBM and GDDR alike as CUDA reports their clocks)."""
    khz, bits = info.get("memory_clock_rate_khz"), info.get("memory_bus_width_bits")
    if not khz or not bits:
        return None
    return 2.0 * float(khz) * 1e3 * float(bits) / 8.0


def check_compute_peak(compute_peak: Any) -> Optional[str]:
    """compute_peak= as a ceiling's name (None: follow the arguments' dtypes); ValueError
    listing the accepted names otherwise (kbench.roofline.ceilings)."""
    from ..roofline.ceilings import check_compute_peak as check
    return check(compute_peak)


def gpu_peaks(info: Dict[str, Any], compute_peak: Any) -> Optional[Dict[str, Any]]:
    """Cached `kbench peaks` ceilings and the datasheet's; compute_peak (a ceiling's name, or
    kbench.roofline.ceilings.choose_compute_peak's choice) picks the FLOP rate to compare with.
    Without a measured ceiling, the theoretical bandwidth still bounds a cold figure."""
    from ..roofline.ceilings import choose_compute_peak, gpu_ceiling
    choice = compute_peak if isinstance(compute_peak, dict) else \
        choose_compute_peak(compute_peak, None, (), {})
    try:
        from ..roofline.peaks import load_gpu_peaks
        d = load_gpu_peaks(info)
    except Exception:                    # unreadable cache: as if none
        d = None
    return gpu_ceiling(info, choice, d, theoretical_bandwidth(info))
