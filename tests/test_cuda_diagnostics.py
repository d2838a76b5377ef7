"""The CUDA backend's diagnostics (no GPU needed): how much of the sampling time the GPU spent
in timed iterations, what the sampled clocks say (C's verdicts: csrc/clocks/regime.c), and how
kbench.backends.cuda turns a record carrying them into the Result's fields and warnings."""
import pytest

from kbench import _core
from kbench.backends import cuda


def test_timed_fraction_is_event_time_over_sampling_time():
    ev = [1e-3] * 100
    assert _core.timed_fraction(ev, 0.125, 1.0) == pytest.approx(0.8)
    # a graph iteration replays `unroll` calls and events_s is per call
    assert _core.timed_fraction([1e-4] * 100, 0.125, 10.0) == pytest.approx(0.8)
    # never above 1 (event rounding), None when there is nothing to divide
    assert _core.timed_fraction([1.0], 0.5) == 1.0
    assert _core.timed_fraction([], 0.5) is None
    assert _core.timed_fraction(ev, 0.0) is None
    assert _core.timed_fraction(ev, None) is None


def _clocks(sm, reasons):
    n = len(sm)
    return {"n": n, "period_s": 0.01, "sm_mhz": sm, "mem_mhz": [3201.0] * n,
            "power_w": [650.0] * n, "temp_c": [60.0] * n, "reasons": reasons}


def test_clock_summary_flags_a_power_cap_and_a_fall():
    steady = _core.clock_summary(_clocks([1980.0] * 20, [0] * 20), 1980)
    assert steady["steady"] is True and "steady" in steady["summary"]
    capped = _core.clock_summary(_clocks([1980.0] * 10 + [1500.0] * 10, [0] * 10 + [4] * 10),
                                 1980)
    assert capped["steady"] is False
    assert capped["throttle_reasons"] == ["sw_power_cap"]
    assert "MOVED: SM fell to 1500 MHz" in capped["summary"]
    assert _core.clock_summary(None, 1980)["steady"] is None
    # the cap flagged while every sample stayed at the maximum clock: nothing moved
    flagged = _core.clock_summary(_clocks([1980.0] * 20, [4] * 20), 1980)
    assert flagged["steady"] is True and flagged["throttle_reasons"] == ["sw_power_cap"]
    assert "steady; sw_power_cap flagged at full clock" in flagged["summary"]
    assert "MOVED" not in flagged["summary"]
    # ... but below the maximum, a flagged cap is a move even when the clock held still
    held_low = _core.clock_summary(_clocks([1500.0] * 20, [4] * 20), 1980)
    assert held_low["steady"] is False


def judge(cuda_rec, sampling_s, max_sm_clock_mhz=1980):
    """Add to a canned record what measure_cuda adds to its own (cuda_result.c add_verdicts),
    through the same C: the clock summary, the fractions, the power cap, the regime's verdict."""
    summary = _core.clock_summary(cuda_rec.get("clocks"), max_sm_clock_mhz)
    capped = summary.pop("power_capped")
    timed = _core.timed_fraction(cuda_rec["events_s"], sampling_s, cuda_rec.get("unroll", 1.0))
    busy = _core.busy_fraction(timed, (cuda_rec.get("keep_busy") or {}).get("gpu_s"), sampling_s)
    reg = dict(cuda_rec.get("regime") or {"name": "sustained"})
    settle, b = cuda_rec.get("settle") or {}, reg.get("burst") or {}
    v = _core.regime_verdict(
        regime=reg["name"], clocks_locked=bool(reg.get("clocks_locked")),
        settled=settle.get("settled"), settle_at_s=settle.get("at_s"),
        settle_max_s=settle.get("max_s"), settle_sm_mhz=settle.get("sm_mhz"),
        clocks_read="n" in summary, timed_sm_mhz=summary.get("sm_mhz_median"),
        power_capped=capped, cold=False, busy_fraction=busy, batches=b.get("batches", 0),
        unrecovered=b.get("unrecovered", 0), recover_max_s=b.get("recover_max_s", 0.0),
        start_sm_mhz_min=b.get("sm_mhz_min"), start_sm_mhz_max=b.get("sm_mhz_max"))
    if v["clocks_steady"] is not None:
        summary["steady"] = v["clocks_steady"]
    reg.update(held=v["held"], why=v["why"], **({"note": v["note"]} if v["note"] else {}))
    cuda_rec.update(clocks_summary=summary, gpu_timed_fraction=timed, gpu_busy_fraction=busy,
                    power_capped=capped, regime=reg)


def _fake_run(monkeypatch, events_s, sampling_s, reasons, settle=None, between=None,
              keep_busy=None, sm=None, regime=None, summed_s=None):
    """cuda.run over a canned measure_cuda result: the Python side of the backend, no GPU."""
    import numpy as np

    from kbench import _core as real
    n = len(events_s)
    clocks = _clocks(sm or [1980.0] * 10 + [1500.0] * 10, reasons)
    raw = {"samples": np.asarray(events_s), "sampling_s": sampling_s,
           "cuda": {"backend": "cupti", "events_s": np.asarray(events_s),
                    "span_s": np.asarray(events_s), "kernels_per_iter": np.ones(n, np.uint32),
                    "copies_per_iter": np.zeros(n, np.uint32), "names": {}, "clocks": clocks,
                    "gate": {"enabled": True, "batch": 32, "batch_final": 32,
                             "watchdog_fired": 0, "fired_kept": 0, "timeout_s": 1.0},
                    "unroll": 1.0, "flush_bytes": 0, "arg_sets": 1,
                    "persisting_l2_limit_bytes": 0, "cupti_foreign_subscriber": False,
                    "busy_warmup_s": 1.0, "device": 0, "cupti_dropped": 0,
                    "cupti_ticks_per_ns": 1.0, "cupti_detach": "detached"}}
    if settle is not None:
        raw["cuda"]["settle"] = settle
    if summed_s is not None:
        raw["cuda"]["summed_s"] = np.asarray(summed_s)
    if between is not None:
        raw["cuda"]["between_batches"] = between
    if keep_busy is not None:
        raw["cuda"]["keep_busy"] = keep_busy
    if regime is not None:
        raw["cuda"]["regime"] = regime
    judge(raw["cuda"], sampling_s)

    class FakeCore:
        measure_cuda = staticmethod(lambda *a, **k: raw)
        KbenchError = real.KbenchError

    for name, value in {"require_backend": lambda: None,
                        "device_info": lambda o: {"l2_bytes": 1 << 26, "max_sm_clock_mhz": 1980},
                        "stream_handle": lambda s, o, t=True: 0, "_uses_torch": lambda *a: False,
                        "gpu_neighbours": lambda o: {}, "gpu_peaks": lambda *a: None,
                        "mode_floor": lambda *a: {"median_s": 1e-7}, "_core": FakeCore}.items():
        monkeypatch.setattr(cuda, name, value)
    plan = real.plan("cuda", None, "cupti", cupti=lambda: (True, False, ""))
    return cuda.run(lambda: None, [()], {}, plan=plan, flush_bytes=None, device="cuda",
                    loop={})[2]


IDLE_WARNING = "idle between batches"


def test_power_capped_run_that_idled_between_batches_warns(monkeypatch):
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [0] * 10 + [4] * 10)
    assert extra["gpu_timed_fraction"] == pytest.approx(0.5)
    assert any(IDLE_WARNING in w and "50%" in w for w in extra["warnings"])


def test_busy_or_uncapped_runs_do_not_warn_about_idle(monkeypatch):
    busy = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 10 + [4] * 10)
    assert busy["gpu_timed_fraction"] > 0.9
    assert not any(IDLE_WARNING in w for w in busy["warnings"])
    # idle but never power capped: the clock did not depend on the idle, nothing to say
    uncapped = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [0] * 20)
    assert not any(IDLE_WARNING in w for w in uncapped["warnings"])
    # idle with the cap flagged but the clock at its maximum throughout: nothing to say either
    at_max = _fake_run(monkeypatch, [1e-3] * 50, 0.6, [4] * 20, sm=[1980.0] * 20)
    assert not any(IDLE_WARNING in w or "clocks moved" in w for w in at_max["warnings"])


NAN = float("nan")


def test_a_warm_up_that_never_settled_warns_and_says_so_in_the_table(monkeypatch):
    import numpy as np

    from kbench import _core
    from kbench.report.result import Result
    settle = {"settled": False, "at_s": 3.02, "sm_mhz": 1530.0, "max_s": 3.0,
              "min_sampling_s": 1.0}
    between = {"n": 4, "total_s": 8e-3, "max_s": 3e-3}
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [4] * 20, settle, between)
    assert any("had not settled after 3.0 s" in w and "1530 MHz" in w for w in extra["warnings"])
    assert extra["between_batches"]["mean_s"] == pytest.approx(2e-3)
    samples = np.full(50, 1e-3)
    r = Result(name="gemm", device="cuda:0", backend="cupti", samples=samples,
               stats=_core.summarize(samples, 0.95), stop={"stop": "precision"},
               cold_cache={"mode": "none"}, extra=extra)
    rows = dict(r._rows())
    assert rows["Clock settle"].startswith("NOT settled after 3.02 s of warm-up (SM 1530 MHz)")
    assert "held to >= 1 s" in rows["Clock settle"]
    assert rows["GPU busy"].startswith("50% of the sampling time in timed iterations")
    assert "idle 2.0000 ms between batches (mean of 4, max 3.0000 ms)" in rows["GPU busy"]
    assert "keep-busy" not in rows["GPU busy"]


def test_keep_busy_bridges_count_as_busy_and_are_reported(monkeypatch):
    import numpy as np

    from kbench import _core
    from kbench.report.result import Result
    # timed iterations fill half the sampling time; the bridges ran 0.045 s of the other half
    bridges = {"enabled": True, "bridges": 9, "iterations": 27, "gpu_s": 0.045,
               "turnaround_s": 2e-3}
    between = {"n": 9, "total_s": 9e-5, "max_s": 2e-5}
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [0] * 10 + [4] * 10, None, between, bridges)
    assert extra["gpu_timed_fraction"] == pytest.approx(0.5)
    assert extra["gpu_busy_fraction"] == pytest.approx(0.95)
    assert not any(IDLE_WARNING in w for w in extra["warnings"])
    r = Result(name="gemm", device="cuda:0", backend="cupti", samples=np.full(50, 1e-3),
               stats=_core.summarize(np.full(50, 1e-3), 0.95), stop={"stop": "precision"},
               cold_cache={"mode": "none"}, extra=extra)
    row = dict(r._rows())["GPU busy"]
    assert "27 untimed keep-busy iterations in 9 bridges (45.0000 ms)" in row, row
    assert "idle 10.000 us between batches" in row, row
    # the same run without its bridges' time is half idle, and says so
    idle = _fake_run(monkeypatch, [1e-3] * 50, 0.1, [0] * 10 + [4] * 10, None, between,
                     dict(bridges, gpu_s=0.0))
    assert any(IDLE_WARNING in w and "50%" in w for w in idle["warnings"])


def test_a_settled_or_unjudged_warm_up_does_not_warn(monkeypatch):
    ok = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 20,
                   {"settled": True, "at_s": 0.21, "sm_mhz": 1980.0, "max_s": 3.0,
                    "min_sampling_s": 0.0}, sm=[1980.0] * 20)
    assert not any("settled" in w for w in ok["warnings"])
    assert ok["regime"]["held"] is True and ok["regime"]["name"] == "sustained"
    # settled at 1980 MHz but timed at 1500-1980: the regime did not hold, and it says why
    moved = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 20,
                      {"settled": True, "at_s": 0.21, "sm_mhz": 1980.0, "max_s": 3.0,
                       "min_sampling_s": 0.0})
    assert moved["regime"]["held"] is False
    assert any("regime did not hold" in w and "1980 MHz (settled)" in w
               for w in moved["warnings"])
    # settle_max_s=0 or no clocks: not judged, the NaNs of the C record become None
    unjudged = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 20,
                         {"settled": None, "at_s": NAN, "sm_mhz": NAN, "max_s": 0.0,
                          "min_sampling_s": 0.0})
    assert unjudged["clock_settle"]["at_s"] is None and unjudged["clock_settle"]["sm_mhz"] is None
    assert not any("settled" in w for w in unjudged["warnings"])


def test_the_result_names_its_regime_and_locked_clocks_need_no_settling(monkeypatch):
    import kbench._core as real  # noqa: F401
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 20, sm=[1410.0] * 20,
                      settle={"settled": None, "at_s": NAN, "sm_mhz": NAN, "max_s": 3.0,
                              "min_sampling_s": 0.0},
                      regime={"name": "sustained", "clocks_locked": True, "loaded_s": 0.0})
    assert extra["regime"]["held"] is True
    assert "locked by the user" in extra["regime"]["note"]


def test_burst_batches_that_started_unrecovered_break_the_regime(monkeypatch):
    burst = {"batches": 40, "unrecovered": 3, "wait_s": 6.0, "batch_s": 0.005, "rest": 3.0,
             "recover_max_s": 2.0,
             "sm_mhz_min": 1980.0, "sm_mhz_mean": 1980.0, "sm_mhz_max": 1980.0}
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.5, [0] * 20, sm=[1980.0] * 20,
                      regime={"name": "burst", "clocks_locked": False, "burst": burst})
    assert extra["regime"]["held"] is False
    assert any("3 of 40 batches started before the GPU had recovered (waited at most 2 s each)"
               in w
               for w in extra["warnings"])
    # batch starts at one clock, all recovered: held, and the idle clocks between batches
    # do not make the clocks "moved"
    ok = _fake_run(monkeypatch, [1e-3] * 50, 0.5, [0] * 20,
                   regime={"name": "burst", "clocks_locked": False,
                           "burst": dict(burst, unrecovered=0)})
    assert ok["regime"]["held"] is True and ok["clocks"]["steady"] is True


class _FloorCore:
    """Records what the floor probe asks of _core, in order; capture refuses allocations."""
    KbenchError = _core.KbenchError
    quantile = staticmethod(_core.quantile)     # pure statistics: the real one

    def __init__(self, fail_measure: bool = False):
        self.calls, self.fail_measure, self.loaded = [], fail_measure, False

    def launch_empty(self, stream, ordinal):
        self.calls.append("launch_empty")
        self.loaded = True

    def graph_capture(self, fn, sets, kwargs, **kw):
        self.calls.append("graph_capture")
        if not self.loaded:     # as the driver: the kernels' first load allocates, refused here
            raise _core.CaptureError("cuMemAlloc failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
        return "graph"

    def measure_cuda(self, fn, sets, kwargs, **kw):
        self.calls.append("measure_cuda")
        if self.fail_measure:
            raise _core.KbenchError("probe failed")
        return {"samples": [1e-6, 2e-6, 3e-6]}


def test_the_graph_floor_loads_kbench_kernels_before_its_capture(monkeypatch):
    # On the H200 the capture was the process's first kbench launch: the probe failed on every
    # graph bench, each time loading the module again (+58 KB of host memory a bench)
    fake = _FloorCore()
    monkeypatch.setattr(cuda, "_core", fake)
    monkeypatch.setattr(cuda, "_floor_cache", {})
    f = cuda.mode_floor("graph", "events", 0, 7, True)
    assert fake.calls == ["launch_empty", "graph_capture", "measure_cuda"]
    assert f["median_s"] == pytest.approx(2e-6) and f["timer"] == "events"
    cuda.mode_floor("graph", "events", 0, 7, True)
    assert len(fake.calls) == 3                  # cached


def test_a_failed_floor_probe_is_kept_and_not_run_again(monkeypatch):
    fake = _FloorCore(fail_measure=True)
    monkeypatch.setattr(cuda, "_core", fake)
    monkeypatch.setattr(cuda, "_floor_cache", {})
    for _ in range(3):
        with pytest.raises(_core.KbenchError, match="probe failed"):
            cuda.mode_floor("events", "events", 0, 7, True)
    assert fake.calls == ["measure_cuda"]        # probed once, its failure raised again


def test_cupti_mode_does_not_probe_a_floor(monkeypatch):
    # CUPTI times the kernel itself: no floor warning can come of it, and its stepped probe
    # was a fifth of the first bench in a process (0.2 of 0.93 s on the H200)
    extra = _fake_run(monkeypatch, [1e-3] * 50, 0.052, [0] * 20)   # its mode_floor: 100 ns
    assert extra["floor"]["probed"] is False and "cupti" in extra["floor"]["why"]
    assert "median_s" not in extra["floor"]


def test_graph_modes_eager_probe_is_a_handful_of_calls(monkeypatch):
    # It sizes an integer unroll and names the activity of a call: on the H200 the old probe
    # (the floor's 0.3 s loop at a 1% target) ran its 2000-call cap on every graph bench, 75 ms
    # each, and with CUPTI attached those launches before the capture grew host memory 76 KB a
    # bench (benchmarks/gpu_soak.py); at 5-50 calls (5% target) its batches were most of a graph
    # bench's 84 CUPTI reads, and libcupti keeps 72 B of each (docs/design/gpu-timers.md)
    fake = _FloorCore()
    seen = {}

    def measure_cuda(fn, sets, kwargs, **kw):
        seen.update(kw)
        return {"samples": [4e-6] * 5}
    fake.measure_cuda = measure_cuda
    monkeypatch.setattr(cuda, "_core", fake)
    t, raw = cuda._estimate_eager(lambda: None, [()], {}, 7, 0, "cupti")
    assert t == pytest.approx(4e-6)
    assert seen["max_samples"] <= 5 and seen["max_time_s"] <= 0.05
    assert seen["gate"] is False and seen["cold"] is None and seen["sample_clocks"] is False


def test_overlapped_activities_are_reported_beside_the_figure(monkeypatch):
    """A call whose kernels overlapped (a second stream): the figure is the busy time the C
    timer computed; the summed durations and the overlap are reported beside it, and the
    printed result says what the difference is."""
    from kbench.report.result import Result

    busy = [100e-6] * 40
    extra = _fake_run(monkeypatch, busy, 0.05, [0] * 20, sm=[1980.0] * 20,
                      summed_s=[190e-6] * 40)
    assert extra["summed_median_s"] == pytest.approx(190e-6)
    assert extra["overlap_median_s"] == pytest.approx(90e-6)
    stats = _core.summarize(busy)

    def printed(ex):
        r = Result(name="f", device="cuda:0", backend="cupti", samples=busy, stats=stats,
                   stop={"stop": "precision"}, cold_cache={"mode": "none"}, extra=ex)
        return [row for row in r._rows() if row[0] == "Overlap"]

    rows = printed(extra)
    assert len(rows) == 1 and "counts that time once" in rows[0][1]
    assert "190" in rows[0][1] and "90" in rows[0][1]
    # serial activities: summed equals busy, nothing to say
    serial = _fake_run(monkeypatch, busy, 0.05, [0] * 20, sm=[1980.0] * 20, summed_s=busy)
    assert serial["overlap_median_s"] == 0.0
    assert printed(serial) == []


def test_device_info_reads_free_memory_on_every_bench(monkeypatch):
    # the attributes are read once a process; free memory, which sizes kbench's rotation
    # copies, was the first bench's for the whole session
    free = {"bytes": 80 << 30}
    monkeypatch.setattr(cuda, "_device_info_cache", {})
    monkeypatch.setattr(cuda._core, "cuda_device_info",
                        lambda o: {"l2_bytes": 60 << 20, "free_memory_bytes": 80 << 30})
    monkeypatch.setattr(cuda._core, "cuda_mem_info",
                        lambda o, create=True: (free["bytes"], 140 << 30), raising=False)
    assert cuda.device_info(0)["free_memory_bytes"] == 80 << 30
    free["bytes"] = 10 << 30
    info = cuda.device_info(0)
    assert info["free_memory_bytes"] == 10 << 30 and info["l2_bytes"] == 60 << 20
    assert cuda._device_info_cache[0]["free_memory_bytes"] == 80 << 30   # the cache untouched
