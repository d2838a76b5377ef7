"""kbench.bench on a CUDA GPU: modes, attribution, cold L2, graphs, and every bad input.

Skipped with the reason where no CUDA device is present (tests/conftest.py).
"""
import numpy as np
import pytest

import kbench
from kbench import _core

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="the GPU tests drive kernels through PyTorch")

FAST = dict(warmup_s=0.2, max_time_s=1.0)


@pytest.fixture(scope="module")
def x():
    g = torch.Generator(device="cuda").manual_seed(0)
    return torch.randn(1 << 22, device="cuda", generator=g)


def test_cupti_and_events_agree_for_a_long_kernel(x):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    rc = kbench.bench(torch.matmul, a, a, mode="cupti", cold_cache=None, **FAST)
    assert rc.backend == "cupti"
    # the same iterations, timed both ways: events add a little, never take away
    ev = rc.extra["events_median_s"]
    assert ev == pytest.approx(rc.median, rel=0.05)
    assert ev >= rc.median * 0.999
    re = kbench.bench(torch.matmul, a, a, mode="events", cold_cache=None, **FAST)
    assert re.backend == "events" and re.median >= rc.median * 0.9
    # how much of the sampling time the GPU spent in timed iterations is reported, and the
    # GPU time between batches, one gap per batch after the first
    assert 0.0 < rc.extra["gpu_timed_fraction"] <= 1.0
    bb = rc.extra["between_batches"]
    assert bb["n"] >= 1 and 0.0 <= bb["mean_s"] <= bb["max_s"] < 1.0


def test_keep_busy_bridges_fill_the_gaps_and_are_never_attributed(x):
    y = torch.empty_like(x)

    # a spin of ~0.1 ms at the H200's 1980 MHz: a light load no power limit moves, so the three
    # runs below read the same work at the same clock (a bf16 GEMM 4096^3 here was capped, and
    # two runs of it a few seconds apart read 3.3% apart)
    def spin_and_add():
        torch.cuda._sleep(200_000)
        torch.add(x, 1.0, out=y)

    # enough samples for several timed sub-batches: a bridge is counted by the one after it
    on = kbench.bench(spin_and_add, device="cuda", mode="cupti", cold_cache="flush",
                      min_samples=300, regime="sustained", **FAST)
    kb = on.extra["keep_busy"]
    assert kb["enabled"] is True and kb["bridges"] >= 1, kb
    assert kb["iterations"] >= kb["bridges"] and kb["gpu_s"] > 0
    # bridge launches carry no correlation id: every timed call shows the same kernels, and
    # CUPTI read while a bridge ran lost nothing
    kpc = on.extra["kernels_per_call"]
    assert kpc["min"] == kpc["max"] >= 2, kpc
    assert not any("CUPTI dropped" in w for w in on.warnings), on.warnings
    assert on.extra["events_median_s"] == pytest.approx(on.median, rel=0.05)
    assert on.extra["gpu_busy_fraction"] > on.extra["gpu_timed_fraction"]
    # the bridges are queued with CUPTI's kernel records off, so no batch needed a forced
    # flush (which lengthens later kernels' records)
    assert on.extra["cupti_flushes"]["forced"] == 0 < on.extra["cupti_flushes"]["default"]
    off = kbench.bench(spin_and_add, device="cuda", mode="cupti", cold_cache="flush",
                       keep_busy=False, min_samples=300, regime="sustained", **FAST)
    assert off.extra["keep_busy"]["bridges"] == 0
    assert off.extra["kernels_per_call"] == kpc
    # what the bridges are for: less idle GPU between batches
    assert on.extra["between_batches"]["mean_s"] < off.extra["between_batches"]["mean_s"]
    # events mode bridges too, and still times the same work
    ev = kbench.bench(spin_and_add, device="cuda", mode="events", cold_cache="flush",
                      min_samples=300, regime="sustained", **FAST)
    assert ev.extra["keep_busy"]["bridges"] >= 1 and ev.median >= on.median * 0.97


def test_work_forked_onto_a_second_stream_counts_once():
    """Two spins of ~0.1 ms, one on the measured stream and one forked onto a side stream and
    joined: they run side by side, so the call keeps the GPU busy for one spin, not two. The
    figure is the union of the records' intervals; summed, they read two spins."""
    side = torch.cuda.Stream()
    cycles = 200_000

    def serial():
        torch.cuda._sleep(cycles)
        torch.cuda._sleep(cycles)

    def forked():
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        torch.cuda._sleep(cycles)
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
        cur.wait_stream(side)

    opts = dict(device="cuda", mode="cupti", cold_cache=None, **FAST)
    rs = kbench.bench(serial, **opts)
    rf = kbench.bench(forked, **opts)
    for r in (rs, rf):
        assert r.extra["kernels_per_call"] == {"min": 2, "max": 2}, r.extra["kernels_per_call"]
        # before the union, the forked call's summed time exceeded its own event bracket and
        # kbench blamed CUPTI's timestamps
        assert not any("exceeds the CUDA-event time" in w for w in r.warnings), r.warnings
    one_spin = rs.median / 2
    # one stream: the records meet end to start, so the figure is their sum (CUPTI's
    # timestamps can overlap back-to-back records by a nanosecond: CUB's sort read 1 ns)
    assert 0.0 <= rs.extra["overlap_median_s"] <= 2e-9
    assert rs.extra["summed_median_s"] == pytest.approx(rs.median, abs=2e-9)
    # two streams: about one spin (the side spin starts a launch later), summed about two
    assert one_spin * 0.95 <= rf.median <= one_spin * 1.3, (rf.median, one_spin)
    assert rf.extra["summed_median_s"] == pytest.approx(rs.median, rel=0.1)
    assert rf.extra["overlap_median_s"] >= 0.7 * one_spin
    assert rf.median <= rf.extra["events_median_s"] * 1.001
    assert "Overlap" in repr(rf) and "Overlap" not in repr(rs)


def test_warm_up_waits_for_the_clock_and_the_clocks_cover_the_timed_part(x):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    r = kbench.bench(torch.matmul, a, a, mode="events", cold_cache=None, max_time_s=0.5,
                     regime="sustained")
    settle = r.extra["clock_settle"]
    # judged from NVML samples of the callable's own warm-up: settled, or gave up at the limit
    assert settle["settled"] in (True, False)
    assert 0.1 <= settle["at_s"] <= settle["max_s"] + 0.2
    assert settle["sm_mhz"] > 0
    clocks = r.extra["clocks"]
    if settle["min_sampling_s"]:        # settled under a power cap: sampled across its swings
        assert r.stop["sampling_s"] >= min(settle["min_sampling_s"], 0.5) * 0.99
        # ... and keeps nothing timed before the settle (the capped clock dips between
        # NVML's snapshots until the averaged power has caught up)
        assert settle["samples_while_settling"] == 0 and settle["kept_from_load_s"] is None
        assert r.stop["sampling_overlap_s"] == 0
    assert clocks["warmup_samples"] >= 1          # the warm-up's samples were dropped ...
    assert clocks["n"] >= 1                       # ... and the timed part's kept
    # ... and both are in the trace, on one axis: the warm-up before 0, the load's start in it
    tr = r.extra["clock_trace"]
    k = tr["timed_from"]
    assert k == clocks["warmup_samples"] and len(tr["t_s"]) == k + clocks["n"]
    assert np.all(np.diff(tr["t_s"]) > 0) and tr["t_s"][k - 1] < 0 <= tr["t_s"][k]
    assert tr["t_s"][0] - 0.05 <= tr["load_start_s"] < 0
    assert np.all(tr["sm_mhz"][:k] > 0) and tr["reasons"].dtype == np.uint64
    assert isinstance(r.extra["busy_warmup_s"], float) and r.extra["busy_warmup_s"] >= 0
    # settle_max_s=0 judges nothing and says so
    r0 = kbench.bench(torch.matmul, a, a, mode="events", cold_cache=None, max_time_s=0.3,
                      settle_max_s=0.0, regime="sustained")
    assert r0.extra["clock_settle"]["settled"] is None
    assert not any("had not settled" in w for w in r0.warnings)


def test_a_kernel_under_no_limit_keeps_the_samples_it_took_while_settling(x):
    """Back to back, the second bench of a 4 MB mul carries the first's settled state; its
    settle ran timed batches, and those the readings show at the settled clock (all of them
    for a load nothing limits) open its sampling: counted once in the Time row."""
    y = torch.empty_like(x)
    kbench.bench(torch.mul, x, 2.0, kwargs={"out": y}, max_time_s=0.2, regime="sustained")
    r = kbench.bench(torch.mul, x, 2.0, kwargs={"out": y}, max_time_s=0.2, regime="sustained")
    settle = r.extra["clock_settle"]
    assert settle["settled"] is True and not settle["min_sampling_s"]   # nothing limits it
    assert settle["samples_while_settling"] > 0
    assert 0 <= settle["kept_from_load_s"] < settle["at_s"]
    st = r.stop
    assert 0 < st["sampling_overlap_s"] <= st["sampling_s"]
    assert f"{st['sampling_overlap_s']:.2f} of it while settling" in repr(r)
    assert r.extra["regime"]["held"] is True


def test_the_raw_cuda_record_has_every_key_with_its_type(x):
    # a format/argument mismatch in the C result builder once shifted these keys silently
    raw = _core.measure_cuda(torch.mul, ((x, 2.0),), None, mode="cupti",
                             stream=torch.cuda.current_stream().cuda_stream, device=0,
                             warmup_s=0.05, max_time_s=0.2, busy_warmup_s=0.01,
                             regime="sustained")
    cu = raw["cuda"]
    assert all(isinstance(k, str) for k in cu)
    assert cu["device"] == 0 and cu["backend"] == "cupti"
    assert cu["busy_warmup_s"] in (0.0, pytest.approx(0.01))   # 0: the GPU was warm already
    assert cu["cupti_dropped"] == 0 and cu["unroll"] == 1.0 and cu["arg_sets"] == 1
    assert cu["cupti_ticks_per_ns"] > 0
    st = cu["settle"]
    assert set(st) == {"settled", "at_s", "sm_mhz", "max_s", "min_sampling_s",
                       "carried_from_s_ago", "carried_sm_mhz", "carried_under_limit",
                       "carried_loaded_s", "continued_s", "by_carry", "at_max_clock",
                       "end_settled",
                       "end_sm_mhz", "samples_while_settling", "kept_from_load_s",
                       "load_start_s", "resettle_reason", "resettle_timed_s"}
    # the load's start on the sampler's time axis, inside the sampled span
    assert isinstance(st["load_start_s"], float) and st["load_start_s"] >= 0
    assert isinstance(st["by_carry"], bool) and isinstance(st["end_settled"], bool)
    assert isinstance(st["at_max_clock"], bool) and not (st["by_carry"] and st["at_max_clock"])
    assert isinstance(st["samples_while_settling"], int)
    assert (st["kept_from_load_s"] is None) == (st["samples_while_settling"] == 0)
    assert isinstance(raw["sampling_overlap_s"], float) and raw["sampling_overlap_s"] >= 0
    assert isinstance(raw["tentative_dropped"], int) and raw["tentative_dropped"] >= 0
    # settled again after a limit while timed: both fields, or neither
    assert (st["resettle_reason"] is None) == (raw["resettle_sampled_s"] is None)
    assert (st["resettle_timed_s"] is None) == (raw["resettle_dropped"] == 0)
    carried = st["carried_from_s_ago"]
    assert carried is None or (isinstance(carried, float) and carried >= 0)
    assert (st["carried_under_limit"] is None) == (carried is None)
    assert (st["carried_loaded_s"] is None) == (carried is None)
    # a capped load's time continues only one that was capped itself
    assert (st["continued_s"] is None) == (carried is None)
    assert not st["continued_s"] or st["carried_under_limit"]
    assert not st["by_carry"] or carried is not None   # only a record can settle by carry
    assert set(cu["between_batches"]) == {"n", "total_s", "max_s"}
    kb = cu["keep_busy"]
    assert set(kb) == {"enabled", "bridges", "iterations", "gpu_s", "turnaround_s",
                       "turnaround_end_s"}
    assert kb["enabled"] is True and isinstance(kb["bridges"], int)
    assert isinstance(kb["gpu_s"], float) and kb["turnaround_s"] > 0
    assert len(cu["events_s"]) == len(raw["samples"]) == len(cu["kernels_per_iter"])
    fl = cu["cupti_flushes"]
    assert set(fl) == {"default", "forced", "bridge_records"}
    # every batch is read one way or the other; a sub-10 us kernel gets no bridge, so its
    # sentinel comes back with the default flush
    assert fl["default"] + fl["forced"] >= 1 and fl["default"] >= 1


def test_cupti_attributes_kernels_to_iterations_and_excludes_the_flush(x):
    y = torch.empty_like(x)

    def three_kernels():
        torch.mul(x, 2.0, out=y)
        y.add_(1.0)
        y.sqrt_()

    r = kbench.bench(three_kernels, device="cuda", mode="cupti", cold_cache="flush",
                     expected_launches=3, **FAST)
    assert r.extra["kernels_per_call"] == {"min": 3.0, "max": 3.0}
    names = [k["name"] for k in r.extra["kernels"]]
    assert len(names) == 3 and not any("memset" in n for n in names)
    assert not any("expected 3" in w for w in r.warnings)
    r2 = kbench.bench(three_kernels, device="cuda", mode="cupti", cold_cache=None,
                      expected_launches=2, **FAST)
    assert any("expected 2 kernel launch(es) per call" in w for w in r2.warnings)


def test_cupti_is_read_once_per_loop_batch_not_per_gated_sub_batch(x):
    """libcupti keeps 72 B of host memory per cuptiActivityFlushAll for good, and every flush
    is host time the GPU waits through: the sub-batches of a loop batch are collected with one
    flush. Small sub-batches and three kernels a call: a sample merged into the wrong slot
    would show 0 or 6 kernels, or a NaN figure."""
    y = torch.empty_like(x)

    def three_kernels():
        torch.mul(x, 2.0, out=y)
        y.add_(1.0)
        y.sqrt_()

    for mode in ("cupti", "graph"):
        r = kbench.bench(three_kernels, device="cuda", mode=mode, cold_cache="flush",
                         gate_batch=4, min_samples=400, **FAST)
        fl, sub = r.extra["cupti_flushes"], r.extra["gate"]["sub_batches"]
        assert 1 <= fl["default"] + fl["forced"] <= sub / 4, (mode, fl, sub)
        assert fl["forced"] == 0, (mode, fl)
        assert all(s > 0 for s in r.samples), mode
        if mode == "cupti":
            assert r.extra["kernels_per_call"] == {"min": 3.0, "max": 3.0}
            # each sample's CUPTI time is its own: never above the event pair around it
            assert r.extra["events_median_s"] >= r.median * 0.999
            cupti_median = r.median
    assert r.median == pytest.approx(cupti_median, rel=0.25)


def test_a_short_bench_reads_cupti_a_handful_of_times(x):
    """Sampling batches last >= 2 ms on CUPTI, whatever the time budget: at 1% of a 0.02 s
    budget a bench of a 4 MB mul made 55 collections on the H200 (72 B each kept by libcupti),
    and the first batch starts at the warm-up's pace instead of 1, 2, 4, ... calls."""
    y = torch.empty_like(x)
    for mode in ("cupti", "graph"):
        r = kbench.bench(torch.mul, x, 2.0, kwargs={"out": y}, mode=mode, max_time_s=0.02,
                         warmup_s=0.0, settle_max_s=0, min_samples=5)
        fl = r.extra["cupti_flushes"]
        assert 1 <= fl["default"] + fl["forced"] <= 20, (mode, fl, r.stop)
        assert fl["forced"] == 0 and len(r.samples) >= 5, (mode, fl, r.stop)


def test_graph_mode_times_replays_and_reports_the_unroll(x):
    y = torch.empty_like(x)
    r = kbench.bench(torch.mul, x, 3.0, kwargs={"out": y}, mode="graph", cold_cache=None,
                     check=lambda a, s: a * s, **FAST)
    assert r.extra["unroll"] >= 1 and r.extra["graph"]["captured_with"] == "torch.cuda.graph"
    assert r.extra["post_check"]["ok"]
    re = kbench.bench(torch.mul, x, 3.0, kwargs={"out": y}, mode="cupti", cold_cache=None,
                      **FAST)
    assert r.median == pytest.approx(re.median, rel=0.25)


def test_a_torch_stream_passed_as_stream_is_where_the_callable_runs():
    """stream=side: the callable's launches go to side (made torch's current stream), so the
    gate, the events and CUPTI's sentinel on side bracket them. Before, the GEMM ran on the
    default stream and events on side read a few microseconds for a ~180 us GEMM."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    base = kbench.bench(torch.matmul, a, a, mode="cupti", cold_cache=None, **FAST)
    for mode in ("events", "cupti", "graph"):
        r = kbench.bench(torch.matmul, a, a, mode=mode, stream=side, cold_cache=None, **FAST)
        assert r.extra["stream"] == side.cuda_stream
        assert r.median > 0.8 * base.median, (mode, r.median, base.median)
    assert torch.cuda.current_stream() != side     # the caller's current stream is put back


def test_a_cupy_stream_is_where_a_torch_callable_runs():
    """stream= a CuPy stream, fn a torch callable (and no stream, a CuPy callable under
    `with cupy.cuda.Stream()` while torch is initialised): the callable's launches go to the
    stream kbench times. Before, the CuPy stream was made current in CuPy only, and with no
    stream kbench timed torch's current stream while CuPy launched on its own."""
    cupy = pytest.importorskip("cupy")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    side = cupy.cuda.Stream(non_blocking=True)
    seen = []

    def mm():
        seen.append(torch.cuda.current_stream().cuda_stream)
        torch.matmul(a, a)

    base = kbench.bench(torch.matmul, a, a, mode="cupti", cold_cache=None, **FAST)
    r = kbench.bench(mm, device="cuda", mode="events", stream=side, cold_cache=None, **FAST)
    assert set(seen) == {side.ptr} and r.extra["stream"] == side.ptr
    assert r.median > 0.8 * base.median, (r.median, base.median)
    c = cupy.random.rand(1 << 24, dtype=cupy.float32)
    with cupy.cuda.Stream(non_blocking=True) as cs:
        r = kbench.bench(cupy.multiply, c, 2.0, mode="events", cold_cache=None, **FAST)
    assert r.extra["stream"] == cs.ptr
    assert torch.cuda.current_stream().cuda_stream != side.ptr


def test_floor_is_measured_and_reported(x):
    r = kbench.bench(torch.add, x, 1.0, mode="events", cold_cache=None, **FAST)
    fl = r.extra["floor"]
    assert fl["median_s"] > 0 and fl["gated"] is True
    rc = kbench.bench(_core.launch_empty, int(torch.cuda.current_stream().cuda_stream), 0,
                      device="cuda", mode="cupti", cold_cache=None, **FAST)
    # the empty kernel is far below what events can resolve
    assert rc.median < fl["median_s"]
    # near the floor: events say their figure is mostly the floor; cupti measures the kernel
    # itself, so the same empty kernel draws no such warning there
    re = kbench.bench(_core.launch_empty, int(torch.cuda.current_stream().cuda_stream), 0,
                      device="cuda", mode="events", cold_cache=None, **FAST)
    assert any("this mode's floor" in w and "may be up to" in w for w in re.warnings)
    assert re.extra["floor"]["share_of_figure"] >= 0.5
    assert not any("floor" in w for w in rc.warnings)
    # a sub-2 us CUPTI figure is sampled for >= 0.05 s (its records sit on 32 ns steps), and
    # every batch was read with the default flush (a forced one lengthens later records)
    assert rc.extra["stepped_min_sampling_s"] == 0.05 and rc.stop["sampling_s"] >= 0.05
    assert rc.extra["cupti_flushes"]["forced"] == 0
    # the H200's CUPTI kernel timestamps come in 32 ns steps: the stop rule was told so
    assert rc.stop["resolution_s"] == pytest.approx(32e-9)
    assert "Timer steps" in repr(rc)
    assert "stepped_min_sampling_s" not in re.extra


def test_16mb_copy_is_under_hbm_cold_and_over_it_hot():
    n = 4 << 20                       # 16 MB of float32: fits in the H200's 60 MB L2
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    hot = kbench.bench(dst.copy_, src, bytes=2 * src.nbytes, cold_cache=None, **FAST)
    cold = kbench.bench(dst.copy_, src, bytes=2 * src.nbytes, cold_cache="flush", **FAST)
    assert cold.throughput["bytes_per_s"] < hot.throughput["bytes_per_s"]
    assert cold.cold_cache["flush_bytes"] >= 2 * cold.cold_cache["cache_bytes"]
    peak = hot.throughput.get("peak_bytes_per_s")
    if peak:                          # after `kbench peaks`: the result says which side it is on
        assert cold.throughput["bytes_per_s"] < peak
        assert hot.throughput["bytes_per_s"] > peak
        assert any("served from cache" in w for w in hot.warnings)
        assert not any("DEFECT" in w for w in cold.warnings)


def test_rotation_covers_more_than_the_l2(x):
    a = torch.randn(1 << 20, device="cuda")
    r = kbench.bench(torch.sum, a, cold_cache="rotate", mode="cupti", **FAST)
    assert r.cold_cache["footprint_bytes"] > 2 * r.cold_cache["cache_bytes"]


def test_gpu_tensors_compare_like_numpy_arrays(x):
    c = kbench.compare(x * (1 + 1e-7), x)
    c_np = kbench.compare((x * (1 + 1e-7)).cpu().numpy(), x.cpu().numpy())
    assert c.ok and c_np.ok and c.max_abs_err == pytest.approx(c_np.max_abs_err)
    bad = kbench.compare(x + 1, x)
    assert not bad.ok and "worst" in bad.report().lower()


# ---------------------------------------------------------------- bad inputs

def _still_works(x):
    r = kbench.bench(torch.add, x, 1.0, mode="cupti", cold_cache=None, **FAST)
    assert r.n >= 10 and r.backend == "cupti"


def test_non_callable_on_the_gpu(x):
    with pytest.raises(TypeError, match="callable"):
        kbench.bench(x, device="cuda")
    _still_works(x)


def test_a_callable_that_synchronizes_during_capture(x):
    def syncs(t):
        y = t * 2
        torch.cuda.synchronize()
        return y

    before = torch.cuda.current_stream()
    with pytest.raises(_core.CaptureError, match="capture") as ei:
        kbench.bench(syncs, x, mode="graph", **FAST)
    assert not getattr(ei.value, "__notes__", None)     # nothing was left unrestored
    # torch.cuda.graph's __exit__ stops at the failed capture_end: kbench puts back the caller's
    # stream and ends the default generator's capture, or the next torch.randn raises
    assert torch.cuda.current_stream() == before
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.randn(16, device="cuda").isfinite().all()
    _still_works(x)


def test_a_callable_that_blocks_the_host_behind_the_gate(x):
    def item(t):
        return (t * 2).sum().item()

    with pytest.raises(_core.KbenchError, match="blocks on the host"):
        kbench.bench(item, x, mode="events", gate_timeout_s=0.2, **FAST)
    r = kbench.bench(item, x, mode="events", gate=False, **FAST)
    assert r.n >= 10
    _still_works(x)


def test_cupti_owned_by_torch_profiler(x):
    kbench.release_cupti()          # earlier tests' back-to-back benches left CUPTI attached
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        with pytest.raises(_core.CuptiBusy, match="torch.profiler"):
            kbench.bench(torch.add, x, 1.0, mode="cupti", **FAST)
        r = kbench.bench(torch.add, x, 1.0, **FAST)         # auto: falls back to events
        assert r.backend == "events"
        assert any("CUPTI unavailable" in w for w in r.warnings)
    _still_works(x)


def test_out_of_memory_for_the_flush_buffer(x):
    with pytest.raises(MemoryError, match="L2 flush buffer"):
        kbench.bench(torch.add, x, 1.0, cold_cache="flush", flush_bytes=1 << 40, **FAST)  # 1 TiB
    _still_works(x)


def test_a_callable_that_raises_mid_run(x):
    n = {"calls": 0}

    def flaky(t):
        n["calls"] += 1
        if n["calls"] == 40:
            raise RuntimeError("kernel config rejected")
        return t + 1

    with pytest.raises(RuntimeError, match="kernel config rejected"):
        kbench.bench(flaky, x, mode="cupti", **FAST)
    _still_works(x)


def test_a_callable_that_raises_in_a_keep_busy_bridge(x):
    # bridges are runs of up to 32 untimed calls between sub-batches: planting the raise at
    # successive call counts lands one in a bridge
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    n = {"calls": 0, "raise_at": 0}

    def gemm():
        n["calls"] += 1
        if n["calls"] == n["raise_at"]:
            raise RuntimeError("planted")
        torch.matmul(a, a)

    notes = ""
    for raise_at in range(40, 600, 5):
        n.update(calls=0, raise_at=raise_at)
        with pytest.raises(RuntimeError, match="planted") as ei:
            kbench.bench(gemm, device="cuda", mode="cupti", cold_cache="flush", warmup_s=0.2,
                         max_time_s=1.0, settle_max_s=0.0, regime="sustained")
        notes = " ".join(getattr(ei.value, "__notes__", []))
        if "untimed keep-busy" in notes:
            break
    assert "untimed keep-busy" in notes, notes
    # the bridge's queue was drained and CUPTI released: the next measurement is whole
    assert torch.cuda.current_stream().query()
    r = kbench.bench(torch.matmul, a, a, device="cuda", mode="cupti", cold_cache="flush", **FAST)
    kpc = r.extra["kernels_per_call"]
    assert kpc["min"] == kpc["max"] >= 1
    assert not any("CUPTI dropped" in w for w in r.warnings), r.warnings
    _still_works(x)


def test_measuring_inside_someone_elses_capture_is_refused(x):
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        g.capture_begin()
        try:
            with pytest.raises(_core.CaptureError, match="being captured"):
                kbench.bench(torch.add, x, 1.0, stream=s, **FAST)
        finally:
            g.capture_end()
    torch.cuda.synchronize()
    _still_works(x)


def test_cupy_arrays_and_streams():
    cp = pytest.importorskip("cupy")
    a = cp.random.default_rng(0).standard_normal(1 << 22, dtype=cp.float32)
    out = cp.empty_like(a)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        r = kbench.bench(cp.multiply, a, 2.0, kwargs={"out": out}, bytes=2 * a.nbytes,
                         stream=s, check=lambda x, k: x * k, **FAST)
    assert r.device.startswith("cuda") and r.backend == "cupti"
    assert r.extra["stream"] == s.ptr
    assert r.extra["kernels_per_call"]["max"] == 1.0
    # graph mode without PyTorch's allocator: kbench captures on the CuPy stream itself
    with s:
        g = kbench.bench(cp.multiply, a, 2.0, kwargs={"out": out}, stream=s, mode="graph",
                         **FAST)
    assert g.extra["graph"]["kernel_nodes"] >= 1


def test_cupti_reads_nanoseconds_after_a_torch_profiler_session(x):
    # Kineto registers a TSC timestamp callback with CUPTI; kbench must measure the unit.
    kbench.release_cupti()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        torch.add(x, x)
        torch.cuda.synchronize()
    big = torch.randn(1 << 24, device="cuda")
    r = kbench.bench(torch.add, big, big, mode="cupti", cold_cache=None, **FAST)
    assert r.median <= 1.02 * r.extra["events_median_s"] + 0.5e-6
    assert not any("exceeds the CUDA-event" in w for w in r.warnings)


_DETACH_SCRIPT = r"""
import json, torch, kbench
from torch.profiler import ProfilerActivity, profile
x = torch.ones(1 << 20, device="cuda")
kw = dict(mode="cupti", cold_cache=None, warmup_s=0.1, max_time_s=0.3)
r1 = kbench.bench(torch.add, x, 1.0, **kw)
r2 = kbench.bench(torch.add, x, 1.0, **kw)
import time; time.sleep(1.5)    # r2 followed r1: CUPTI lingers 1 s, then its thread detaches
with profile(activities=[ProfilerActivity.CUDA]) as p:
    torch.add(x, 1.0)
    torch.cuda.synchronize()
n = sum(1 for e in p.profiler.kineto_results.events() if str(e.device_type()).endswith("CUDA"))
print(json.dumps({"d": [r1.extra["cupti_detach"], r2.extra["cupti_detach"]],
                  "k": [r1.extra["kernels_per_call"], r2.extra["kernels_per_call"]],
                  "m": [r1.median, r2.median], "n_prof": n}))
"""


def _detach_run(env_extra):
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, **env_extra)
    p = subprocess.run([sys.executable, "-c", _DETACH_SCRIPT], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cupti_is_detached_after_a_run_when_kbench_was_its_only_client():
    # A clean process: a lone run detaches CUPTI at its end; a run that follows another within
    # 1 s leaves it attached for the next (each attach/finalize cycle leaks device memory in
    # CUPTI), and a background thread detaches it 1 s after the last, so a torch.profiler
    # session afterwards still records the kernel.
    out = _detach_run({"KBENCH_CUPTI_DETACH": "1"})
    assert out["d"][0] == "detached" and out["d"][1].startswith("lingering"), out["d"]
    assert out["k"][0] == out["k"][1] == {"min": 1.0, "max": 1.0}
    assert out["m"][1] == pytest.approx(out["m"][0], rel=0.2)
    assert out["n_prof"] >= 1
    # KBENCH_CUPTI_LINGER_S=0: every run detaches at its end
    out = _detach_run({"KBENCH_CUPTI_DETACH": "1", "KBENCH_CUPTI_LINGER_S": "0"})
    assert out["d"] == ["detached", "detached"]
    assert out["k"][0] == out["k"][1] == {"min": 1.0, "max": 1.0}
    assert out["m"][1] == pytest.approx(out["m"][0], rel=0.2)
    assert out["n_prof"] >= 1
    kept = _detach_run({"KBENCH_CUPTI_DETACH": "0"})
    assert kept["d"] == ["kept attached: KBENCH_CUPTI_DETACH=0"] * 2


def test_cupti_stays_attached_after_torch_profiler_configured_it(x):
    # torch.profiler registered its own CUPTI clock in this process: finalizing would tear
    # down its state, so kbench leaves CUPTI attached and says so
    from torch.profiler import ProfilerActivity, profile
    kbench.release_cupti()
    with profile(activities=[ProfilerActivity.CUDA]):
        torch.add(x, 1.0)
        torch.cuda.synchronize()
    r = kbench.bench(torch.add, x, 1.0, mode="cupti", cold_cache=None, **FAST)
    assert r.extra["cupti_detach"].startswith("kept attached")


_PROFILE_AROUND_SCRIPT = r"""
import json, statistics, torch, kbench
from torch.profiler import ProfilerActivity, profile
x = torch.ones(1 << 20, device="cuda")

def prof():
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(20):
            torch.add(x, 1.0)
        torch.cuda.synchronize()
    d = [e.duration_ns() for e in p.profiler.kineto_results.events()
         if str(e.device_type()).endswith("CUDA") and e.duration_ns() > 0]
    return len(d), statistics.median(d) if d else None

n1, m1 = prof()
r = kbench.bench(torch.add, x, 1.0, mode="cupti", cold_cache=None, warmup_s=0.1, max_time_s=0.3)
n2, m2 = prof()
print(json.dumps({"n1": n1, "m1": m1, "n2": n2, "m2": m2, "kb_ns": r.median * 1e9,
                  "detach": r.extra["cupti_detach"]}))
"""


def test_torch_profiler_still_records_after_kbench_took_cupti_from_it():
    # torch.profiler configured CUPTI first; kbench then registers its own activity callbacks.
    # Kineto registers its callbacks again when a profile starts, so a later profile must
    # record the same kernels with the same durations: kbench must not break the profiler.
    import json
    import os
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", _PROFILE_AROUND_SCRIPT], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["n1"] >= 20 and out["n2"] >= 20
    assert out["m2"] == pytest.approx(out["m1"], rel=0.3)
    assert out["kb_ns"] == pytest.approx(out["m1"], rel=0.3)
    assert out["detach"].startswith("kept attached")


@pytest.mark.parametrize("mode", ["cupti", "graph"])
def test_an_in_place_kernel_is_checked_and_its_data_never_poisoned(mode):
    # rotary-embedding style: the output is the input. The check's first call reads the poison,
    # the second the original values; the timed run neither poisons nor re-checks it.
    v = torch.arange(1.0, 1025.0, device="cuda")
    r = kbench.bench(lambda t: t.neg_(), v, out_arg=0, check=lambda t: -t, mode=mode, **FAST)
    assert r.correctness["ok"] and r.correctness["in_place"]
    assert r.extra["post_check"]["skipped"].startswith("in place")
    assert torch.isfinite(v).all() and set(v.abs().unique().tolist()) <= set(range(1, 1025))


def test_an_unchecked_out_argument_is_left_as_the_callable_wrote_it():
    # out= naming an input, no check: nothing to re-check, so nothing overwrites it with NaN
    a, b = torch.ones(4096, device="cuda"), torch.ones(4096, device="cuda")
    kbench.bench(torch.add, a, b, kwargs={"out": a}, cold_cache=None, **FAST)
    assert torch.isfinite(a).all() and (a >= 2).all()


def test_a_run_over_several_argument_sets_is_rechecked_against_the_right_set():
    # graph mode's static output is the last set's, and a shared out= is whichever set ran
    # last: both were compared with the first set's reference, a false failure after the run
    sets = [(torch.randn(4096, device="cuda"),) for _ in range(4)]
    r = kbench.bench(torch.sin, arg_sets=sets, mode="graph", cold_cache=None, unroll=2,
                     check=torch.sin, **FAST)
    assert r.correctness["ok"] and r.extra["graph"]["graphs"] == 2
    assert r.extra["post_check"]["ok"] is True
    c = torch.empty(4096, device="cuda")
    r = kbench.bench(lambda x, out: torch.sin(x, out=out), arg_sets=sets, kwargs={"out": c},
                     check=lambda x: torch.sin(x), **FAST)
    assert r.correctness["ok"] and "argument sets write one output" in \
        r.extra["post_check"]["skipped"]


def test_graph_mode_replays_every_argument_set_under_a_flush():
    # one graph of the first set once stood for all of them
    small, big = torch.randn(1 << 16, device="cuda"), torch.randn(1 << 26, device="cuda")
    both = kbench.bench(torch.sum, arg_sets=[(small,), (big,)], mode="graph", **FAST)
    small_alone = kbench.bench(torch.sum, small, mode="graph", **FAST)
    big_alone = kbench.bench(torch.sum, big, mode="graph", **FAST)
    assert both.extra["graph"]["graphs"] == 2 and big_alone.median > 2 * small_alone.median
    # the samples alternate between the two sets: each set's figure shows up
    assert np.percentile(both.samples, 75) > 0.8 * big_alone.median
    assert np.percentile(both.samples, 25) < 1.25 * small_alone.median


@pytest.mark.parametrize("mode", ["cupti", "graph"])
def test_a_tuple_of_gpu_outputs_is_checked_output_by_output(mode):
    x = torch.randn(64, 1024, device="cuda")
    r = kbench.bench(lambda t: torch.topk(t, 8), x, check=lambda t: torch.topk(t, 8),
                     mode=mode, **FAST)
    assert r.correctness["ok"] and r.correctness["output"] in ("output 0 of 2", "output 1 of 2")
    r = kbench.bench(lambda t: (t * 2, t.sum(1)), x, check=lambda t: (t * 2, t.sum(1)),
                     mode=mode, **FAST)
    assert r.correctness["ok"]
    if mode == "graph":
        assert r.extra["post_check"]["ok"] is True


def test_a_bad_compute_peak_is_refused_before_the_measurement():
    import time
    x = torch.randn(1 << 20, device="cuda")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="compute_peak must be one of 'fp64', .*'fp4'"):
        kbench.bench(torch.sin, x, compute_peak="fp12", max_time_s=5.0)
    assert time.perf_counter() - t0 < 2.0


def test_the_compute_ceiling_follows_the_tensors_dtype():
    """Issue 46: an f16 matmul read 946% of the fp32 FMA ceiling; it is held against fp16."""
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    r = kbench.bench(torch.matmul, a, a, flops=2 * 2048 ** 3, max_time_s=1.0)
    assert r.extra["compute_peak"]["name"] == "fp16"
    assert not any("compute ceiling" in w for w in r.warnings)


def test_a_kernel_argument_or_launch_size_that_does_not_fit_is_refused():
    # they were wrapped: 2**32 + 5 reached the kernel as 5, grid 2**32 + 1 launched 1 block
    from kbench.roofline.peaks_gpu import _kernel_source
    fma = _core.CudaKernel(_kernel_source("fma.cu"), "kb_fma", device=0)
    sink = _core.DeviceBuffer(4 * 8 * 256, 0)
    with pytest.raises(OverflowError, match="does not fit an int32"):
        fma.launch(1, 256, "Piff", (sink, 2**32 + 5, 0.999, 0.001))
    with pytest.raises(ValueError, match="grid must be 1..4294967295"):
        fma.launch(2**32 + 1, 256, "Piff", (sink, 1, 0.999, 0.001))
    with pytest.raises(ValueError, match="shared must be an int of 0..4294967295"):
        fma.launch(1, 256, "Piff", (sink, 1, 0.999, 0.001), shared=2**32)
    fma.launch(1, 256, "Piff", (sink, 1, 0.999, 0.001))     # and a good launch still runs
    _core.cuda_synchronize(0)
