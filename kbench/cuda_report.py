"""What a CUDA measurement's raw record says: the Result's fields and warnings.

kbench._core.measure_cuda returns the samples and a record of how they were taken (the gate,
CUPTI's attribution and health, NVML clocks, the settle rule, keep-busy bridges, the regime);
this module turns that record into the Result's `extra` fields and the warnings a reader needs.
It decides nothing about the measurement itself: C has settled every field it reads.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from . import _core

# An events/graph floor at or above this share of a figure puts the figure at risk.
FLOOR_SHARE_WARN = 0.10
# A regime holds while its SM clock stays within 5% of where it settled (sustained) or of the
# fastest batch start (burst). A capped H200 GEMM's 0.25 s clock medians swing 1410-1470 MHz
# (its controller dips about once a second) while its figure holds to 0.6%.
REGIME_CLOCK_TOL = 0.95
# Sustained: the timed part's SM median against the 0.25 s window the warm-up settled on. A
# window can fall on one of the controller's dips (1425 vs 1500 MHz on the H200, the figure
# within 0.26% across states), so only a different state (1980 vs 1470 MHz) breaks the regime.
SUSTAINED_CLOCK_TOL = 0.90

# NVML clock-event reasons that mean the clocks were pulled down by the board, not by idling.
_THROTTLE = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
             "hw_power_brake_slowdown"}


def clock_summary(clocks: Optional[Dict[str, Any]], info: Dict[str, Any]) -> Dict[str, Any]:
    if not clocks or not clocks.get("n"):
        return {"summary": "not sampled (NVML unavailable)", "steady": None}
    sm = np.asarray(clocks["sm_mhz"], dtype=float)
    mem = np.asarray(clocks["mem_mhz"], dtype=float)
    pw = np.asarray(clocks["power_w"], dtype=float)
    tc = np.asarray(clocks["temp_c"], dtype=float)
    reasons = np.asarray(clocks["reasons"], dtype=np.uint64)
    sm_ok = sm[np.isfinite(sm)]
    if sm_ok.size == 0:
        return {"summary": "NVML reads failed", "steady": None}
    p95 = float(np.percentile(sm_ok, 95))
    low = float(sm_ok.min())
    seen = 0
    for r in reasons:
        seen |= int(r)
    names = list(_core.nvml_clock_event_reason_names(seen))
    throttled = sorted(set(names) & _THROTTLE)
    # a cap flagged while the clock never left its maximum cost nothing (seen on the H200:
    # sw_power_cap raised at 167 W with every sample at 1980 MHz)
    spec = info.get("max_sm_clock_mhz")
    at_max = bool(spec) and low >= 0.99 * float(spec)
    steady = low >= 0.97 * p95 and (not throttled or at_max)
    out = {
        "sm_mhz_median": float(np.median(sm_ok)), "sm_mhz_min": low, "sm_mhz_p95": p95,
        "mem_mhz_median": float(np.nanmedian(mem)) if np.isfinite(mem).any() else None,
        "power_w_median": float(np.nanmedian(pw)) if np.isfinite(pw).any() else None,
        "temp_c_max": float(np.nanmax(tc)) if np.isfinite(tc).any() else None,
        "n": int(clocks["n"]), "period_s": clocks.get("period_s"),
        "warmup_samples": clocks.get("before_mark"),
        "reasons_seen": names, "throttle_reasons": throttled, "steady": bool(steady),
        "sm_mhz_max_spec": info.get("max_sm_clock_mhz"),
    }
    flagged = f"; {', '.join(throttled)} flagged at full clock" if steady and throttled else ""
    state = f"steady{flagged}" if steady else (
        f"MOVED: SM fell to {low:.0f} MHz (p95 {p95:.0f})" +
        (f", throttled by {', '.join(throttled)}" if throttled else ""))
    pw_s = f" / {out['power_w_median']:.0f} W" if out["power_w_median"] is not None else ""
    mem_s = f" / mem {out['mem_mhz_median']:.0f} MHz" if out["mem_mhz_median"] else ""
    out["summary"] = f"SM {out['sm_mhz_median']:.0f} MHz{mem_s}{pw_s} ({state}, {out['n']} samples)"
    return out


def timed_fraction(cuda: Dict[str, Any], sampling_s: Optional[float]) -> Optional[float]:
    """Share of the sampling wall time the GPU spent inside timed iterations (the event
    brackets; a graph iteration replays `unroll` calls). The rest is the gaps between batches
    (collecting, queueing the next batch) and any cold-cache flush. A power-capped kernel
    runs cooler, so faster, the more of that idle it gets."""
    ev = np.asarray(cuda.get("events_s", ()), dtype=float)
    if not sampling_s or sampling_s <= 0 or ev.size == 0:
        return None
    busy = float(ev.sum()) * max(1.0, float(cuda.get("unroll", 1.0)))
    return min(1.0, busy / float(sampling_s))


def busy_fraction(timed: Optional[float], keep_busy: Dict[str, Any],
                  sampling_s: Optional[float]) -> Optional[float]:
    """Share of the sampling time the GPU ran our work: timed iterations plus the untimed
    keep-busy bridges queued behind them (flushes aside)."""
    if timed is None or not sampling_s or sampling_s <= 0:
        return timed
    return min(1.0, timed + float(keep_busy.get("gpu_s") or 0.0) / float(sampling_s))


def regime_report(cuda: Dict[str, Any], extra: Dict[str, Any], cold_arg: Optional[str],
                  power_capped: bool) -> Dict[str, Any]:
    """The clock/power regime the figure was taken in and whether it held.

    sustained: the warm-up settled under the callable's own continuous load (steady.c), the GPU
    stayed busy while sampling where a power cap moved the clock (keep-busy bridges; judged hot
    only, since flush time is not counted as busy: an idle GPU runs a capped kernel faster),
    and the timed part's SM clock stayed with the settled one. burst: every
    batch started on a recovered GPU, at one clock."""
    reg = dict(cuda.get("regime") or {"name": "sustained"})
    settle, clocks = extra.get("clock_settle") or {}, extra.get("clocks") or {}
    why: List[str] = []
    if reg.get("clocks_locked"):
        reg["note"] = "clocks set or locked by the user: no settling needed"
    if reg["name"] == "burst":
        b = reg.get("burst") or {}
        if b.get("unrecovered"):
            waited = f" (waited at most {b['recover_max_s']:g} s each)" \
                if b.get("recover_max_s") else ""
            why.append(f"{b['unrecovered']} of {b.get('batches')} batches started before the GPU "
                       f"had recovered{waited}")
        lo, hi = b.get("sm_mhz_min"), b.get("sm_mhz_max")
        if lo and hi and lo < REGIME_CLOCK_TOL * hi:
            why.append(f"batches started at SM {lo:.0f}-{hi:.0f} MHz")
        if lo and hi:
            # between batches the clock may idle down: what counts is where batches start
            clocks["steady"] = lo >= REGIME_CLOCK_TOL * hi
    else:
        if not reg.get("clocks_locked"):
            if settle.get("settled") is False:
                why.append(f"the load had not settled after {settle.get('at_s') or 0:.1f} s of "
                           f"warm-up (settle_max_s={settle.get('max_s')}; last window median "
                           f"{settle.get('sm_mhz') or float('nan'):.0f} MHz)")
            elif settle.get("settled") is None and clocks.get("n"):
                why.append("the settle rule had no clock readings to judge")
        busy = extra.get("gpu_busy_fraction")
        if power_capped and cold_arg is None and busy is not None and busy < 0.9:
            why.append(f"power capped the SM clock while the GPU was busy only {busy:.0%} of "
                       f"the sampling time (idle between batches): under continuous load this "
                       f"kernel may run slower than measured")
        sm_settled, sm_timed = settle.get("sm_mhz"), clocks.get("sm_mhz_median")
        if sm_settled and sm_timed and abs(sm_timed - sm_settled) > \
                (1 - SUSTAINED_CLOCK_TOL) * sm_settled:
            why.append(f"the SM clock moved from {sm_settled:.0f} MHz (settled) to "
                       f"{sm_timed:.0f} MHz (timed part)")
    reg["held"] = not why
    reg["why"] = "; ".join(why) if why else "held"
    return reg


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


def read_cold(cold: Dict[str, Any], cuda: Dict[str, Any], cold_arg: Optional[str], l2: int,
              warn: List[str]) -> None:
    """The cold-cache fields C settled: the flush buffer it used, the persisting-L2 limit."""
    cold["flush_bytes"] = cuda["flush_bytes"]
    if cold_arg == "flush" and l2 and cuda["flush_bytes"] < l2:
        # kept (it still evicts part of L2), but not called cold
        cold["evicts"] = False
        warn.append(f"flush_bytes={cuda['flush_bytes']} is smaller than the {l2}-byte L2: the "
                    f"flush cannot evict it, so the figure is not cold")
    if cuda.get("persisting_l2_limit_bytes"):
        # a fact of the context (its default limit, or a library's), not a risk: kbench resets
        # the persisting lines before measuring, so the flush evicts them
        cold["persisting_l2_limit_bytes"] = cuda["persisting_l2_limit_bytes"]
        cold["persisting_l2_note"] = "persisting lines reset to normal before measuring"


def read_record(raw: Dict[str, Any], extra: Dict[str, Any], warn: List[str], *,
                info: Dict[str, Any], timer: str, cold_arg: Optional[str],
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
        span = np.asarray(cuda["span_s"])
        ev = np.asarray(cuda["events_s"])
        extra["span_median_s"] = float(np.median(span)) if span.size else None
        extra["events_median_s"] = float(np.median(ev)) if ev.size else None
        extra["cupti_ticks_per_ns"] = cuda.get("cupti_ticks_per_ns")
        extra["cupti_detach"] = cuda.get("cupti_detach")
        med = float(np.median(np.asarray(raw["samples"])))
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
        # a sub-2 us CUPTI figure: its records sit on a few 32 ns steps whose mix moved between
        # short runs, so the C loop sampled it for at least this long
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
    extra["clocks"] = clock_summary(cuda.get("clocks"), info)
    extra["busy_warmup_s"] = cuda.get("busy_warmup_s")
    # subscribe (or take the lingering subscriber), enable, calibrate; the first batch's read
    extra["cupti_setup"] = cuda.get("cupti_setup")
    # the callable's own warm-up on CUDA is held to this (the busy kernel warmed the clocks)
    extra["callable_warmup_max_s"] = cuda.get("callable_warmup_max_s")
    settle = {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
              for k, v in (cuda.get("settle") or {}).items()}
    extra["clock_settle"] = settle
    extra["gpu_timed_fraction"] = timed_fraction(cuda, raw.get("sampling_s"))
    # GPU idle from one timed sub-batch's end (or its keep-busy bridge's) to the next one's
    # first event: what the bridges left of the host's turnaround
    bb = cuda.get("between_batches") or {}
    extra["between_batches"] = dict(bb, mean_s=bb["total_s"] / bb["n"]) if bb.get("n") else bb
    kb = cuda.get("keep_busy") or {}
    extra["keep_busy"] = kb
    extra["gpu_busy_fraction"] = busy_fraction(extra["gpu_timed_fraction"], kb,
                                               raw.get("sampling_s"))
    # a cap counts only where the clock actually moved (see clock_summary)
    power_capped = bool({"sw_power_cap", "hw_power_brake_slowdown"} & set(
        extra["clocks"].get("throttle_reasons") or ())) and extra["clocks"].get("steady") is False
    extra["regime"] = regime_report(cuda, extra, cold_arg, power_capped)
    if not extra["regime"]["held"]:
        warn.append(f"the {extra['regime']['name']} clock regime did not hold: "
                    f"{extra['regime']['why']}; {extra['clocks']['summary']}")


def floor_share(extra: Dict[str, Any], mode: str, raw: Dict[str, Any], warn: List[str]) -> None:
    """How much of the figure the mode's floor (extra["floor"]) may be."""
    med = float(np.median(np.asarray(raw["samples"])))
    # cupti's floor is the empty kernel's own duration, not a blind spot of the timer: a kernel
    # near it is simply that short, measured exactly. An event pair's floor is launch and event
    # overhead that may sit inside every sample.
    if mode != "cupti" and med > 0:
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


def gpu_peaks(info: Dict[str, Any], compute_peak: str) -> Optional[Dict[str, float]]:
    """Cached `kbench peaks` ceilings; compute_peak picks the FLOP rate to compare with.
    Without a measured ceiling, the theoretical bandwidth still bounds a cold figure."""
    if compute_peak not in ("fp32", "bf16"):
        raise ValueError(f"compute_peak must be 'fp32' or 'bf16', got {compute_peak!r}")
    try:
        from .peaks import load_gpu_peaks
        d = load_gpu_peaks(info)
    except Exception:                    # unreadable cache: as if none
        d = None
    if not d:
        bw = theoretical_bandwidth(info)
        if bw is None:
            return None
        return {"bytes_per_s": bw, "flops_per_s": None, "bytes_ceiling": "theoretical",
                "source": "theoretical memory bandwidth (memory clock x bus width); no measured "
                          "ceiling cached: run `kbench peaks`"}
    return {"bytes_per_s": d.get("hbm_bytes_per_s"),
            "flops_per_s": d.get(f"{compute_peak}_flops_per_s"), "bytes_ceiling": "measured",
            "source": f"{d.get('source')}, compute peak {compute_peak}"}
