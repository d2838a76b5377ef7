"""kbench.bench on the CPU: results, cold vs hot, bad inputs, serialisation."""
import json
import re
import random
import time

import numpy as np
import pytest

import kbench
from kbench import _core

FAST = dict(warmup_s=0.02, max_time_s=0.3, cold_cache=None)


def test_result_statistics_are_those_of_its_samples():
    a = np.random.default_rng(1).standard_normal(10_000)
    r = kbench.bench(np.sum, a, **FAST)
    assert r.device == "cpu" and r.backend == "host"
    assert r.samples.dtype == np.float64 and r.samples.size == r.n >= 10
    assert r.median == pytest.approx(float(np.median(r.samples)), rel=1e-12)
    assert r.min == r.samples.min() and r.stats["max"] == r.samples.max()
    assert r.stats["ci_low"] <= r.median <= r.stats["ci_high"]
    assert r.stop["stop"] in ("precision", "budget", "iter_cap")
    assert np.all(r.samples > 0)


def test_throughput_comes_from_the_callers_counts_and_the_median():
    a = np.ones(1 << 16)
    r = kbench.bench(np.sum, a, bytes=a.nbytes, flops=a.size, **FAST)
    assert r.throughput["bytes_per_s"] == pytest.approx(a.nbytes / r.median)
    assert r.throughput["flops_per_s"] == pytest.approx(a.size / r.median)


def test_iteration_cap_and_min_samples_are_obeyed():
    # Samples that alternate between ~0 and >= 1 ms: the 95% CI of the median of 25 of them
    # runs from one cluster to the other, far wider than any target or timer step, so only
    # the cap can stop it. (An empty callable's samples sit on the host clock's steps and
    # often agree exactly: the precision rule may stop them, at a CI one step wide.)
    calls = []

    def two_level():
        calls.append(1)
        if len(calls) % 2:
            end = time.perf_counter() + 1e-3
            while time.perf_counter() < end:
                pass

    r = kbench.bench(two_level, max_samples=25, min_samples=25, warmup_s=0.0, max_time_s=5,
                     cold_cache=None, target=1e-9)
    assert r.n == 25 and r.stop["stop"] == "iter_cap"
    assert any("iter_cap" in w for w in r.warnings)


def test_time_cap_stops_a_noisy_callable():
    rng = np.random.default_rng(0)
    sizes = iter(rng.integers(1, 200_000, size=1_000_000))
    buf = np.ones(200_000)

    def noisy():
        buf[: next(sizes)].sum()

    r = kbench.bench(noisy, warmup_s=0.0, max_time_s=0.2, cold_cache=None, target=1e-6)
    assert r.stop["stop"] == "time_cap"
    assert r.stop["achieved"] > 1e-6


@pytest.fixture(scope="module")
def mid_working_set():
    """float32 c = a + b, 3 x 8 MB: above L2, below the last-level cache. Below the cache the
    CPU has (its largest level in sysfs), not KBENCH_LLC_BYTES, which sizes kbench's flush and
    rotation only: under KBENCH_LLC_BYTES=320M on a 32 MiB L3, 24 MB sat at 75% of the real
    cache, the hot add ran at memory speed (27.02 GB/s against 27.06 cold) and the direction
    below was a coin toss."""
    info = _core.cpu_cache_info()
    l2 = max(c["bytes"] for c in info["levels"] if c["level"] == 2) if any(
        c["level"] == 2 for c in info["levels"]) else 1 << 20
    llc = max((c["bytes"] for c in info["levels"]), default=0) or info["llc_bytes"]
    n = 2 << 20
    if not (3 * n * 4 > 2 * l2 and 3 * n * 4 < llc // 2):
        pytest.skip(f"cache sizes {info} leave no working set between L2 and the LLC")
    rng = np.random.default_rng(0)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


@pytest.mark.parametrize("cold", ["flush", "rotate"])
def test_cold_cache_is_slower_than_hot_for_a_working_set_inside_the_llc(mid_working_set, cold):
    a, b = mid_working_set
    hot = kbench.bench(np.add, a, b, bytes=3 * a.nbytes, warmup_s=0.1, max_time_s=1.0,
                       cold_cache=None)
    cold_r = kbench.bench(np.add, a, b, bytes=3 * a.nbytes, warmup_s=0.1, max_time_s=2.0,
                          cold_cache=cold)
    assert cold_r.cold_cache["mode"] == cold
    if cold == "flush":
        assert cold_r.cold_cache["flush_bytes"] >= 2 * _core.cpu_cache_info()["llc_bytes"]
    else:
        assert cold_r.cold_cache["footprint_bytes"] > 2 * _core.cpu_cache_info()["llc_bytes"]
    # the direction, not a time: cold bandwidth is lower than hot
    assert cold_r.throughput["bytes_per_s"] < hot.throughput["bytes_per_s"]


def test_check_passes_for_a_right_answer_and_blocks_timing_for_a_wrong_one():
    a = np.arange(1000, dtype=np.float64)
    r = kbench.bench(np.cumsum, a, check=np.cumsum(a), **FAST)
    assert r.correctness["ok"] is True
    calls = []

    def wrong(x):
        calls.append(1)
        return np.cumsum(x) + 1e-3

    with pytest.raises(AssertionError, match="nothing was timed"):
        kbench.bench(wrong, a, check=np.cumsum(a), **FAST)
    assert len(calls) == 1


def test_check_poisons_an_out_array_so_an_unwritten_output_fails():
    a = np.ones(100)
    out = np.zeros(100)           # already the right answer ...

    def writes_nothing(x, out=None):
        return None                # ... but never writes it

    with pytest.raises(AssertionError):
        kbench.bench(writes_nothing, a, kwargs={"out": out}, check=np.zeros(100), **FAST)


def test_non_callable_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        kbench.bench(42)


@pytest.mark.parametrize("kw,match", [
    (dict(max_samples=0), "max_samples must be >= 1"),
    (dict(min_samples=-1), "min_samples must be >= 1"),
    (dict(min_samples=10, max_samples=5), "must not exceed max_samples"),
    (dict(max_time_s=0), "max_time_s must be >"),
    (dict(warmup_s=-1), "warmup_s must be >="),
    (dict(target=0), "target must be >"),
    (dict(ci_level=1.5), "ci_level"),
    (dict(criterion="magic"), "unknown stopping rule .magic."),
    (dict(cold_cache="lukewarm"), "cold_cache must be"),
    (dict(flops=-1), "flops must be"),
    (dict(device="tpu"), "device must be"),
    (dict(mode="cupti"), "needs a CUDA device"),
])
def test_bad_options_raise_value_errors_naming_the_option(kw, match):
    with pytest.raises(ValueError, match=match):
        kbench.bench(lambda: None, **{**FAST, **kw})
    assert kbench.bench(lambda: None, **FAST).n > 0      # still usable


def test_a_callable_that_raises_propagates_its_own_exception_and_leaves_kbench_usable():
    state = {"n": 0}

    def flaky():
        state["n"] += 1
        if state["n"] == 50:
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom") as ei:
        kbench.bench(flaky, **FAST)
    notes = getattr(ei.value, "__notes__", [])
    assert any("benchmarked callable" in n for n in notes)
    r = kbench.bench(np.sum, np.ones(10), **FAST)
    assert r.n >= 10


def test_rotate_without_arrays_says_what_is_missing():
    with pytest.raises(ValueError, match="footprint"):
        kbench.bench(lambda x: x, 3, cold_cache="rotate", warmup_s=0.0, max_time_s=0.1)


def test_arg_sets_rotate_through_the_given_sets():
    seen = []
    sets = [(np.full(4, i),) for i in range(3)]
    kbench.bench(lambda x: seen.append(int(x[0])), arg_sets=sets, cold_cache="rotate",
                 warmup_s=0.0, min_samples=9, max_samples=9, max_time_s=5)
    assert seen[-9:] == [seen[-9], (seen[-9] + 1) % 3, (seen[-9] + 2) % 3] * 3


def test_result_round_trips_through_json(tmp_path):
    r = kbench.bench(np.sum, np.ones(1000), bytes=8000, **FAST)
    path = tmp_path / "r.json"
    r.to_json(str(path))
    back = kbench.Result.load(str(path))
    assert np.array_equal(back.samples, r.samples)
    assert back.stats == json.loads(r.to_json())["stats"]
    assert back.throughput["bytes_per_s"] == pytest.approx(r.throughput["bytes_per_s"])
    with pytest.raises(ValueError, match="not a kbench result"):
        kbench.Result.from_dict({"schema": "something else"})


def test_report_and_html_show_the_numbers():
    r = kbench.bench(np.sum, np.ones(1000), bytes=8000, **FAST)
    text = repr(r)
    for key in ("Wall:", "Throughput:", "Cold cache:", "Stop rule:"):
        assert key in text
    html = r._repr_html_()
    assert html.startswith("<table") and "Stop rule" in html


def test_metadata_says_how_to_reproduce():
    r = kbench.bench(np.sum, np.ones(10), **FAST)
    md = r.metadata
    for key in ("python_version", "numpy_version", "cpu_model", "argv", "timestamp_utc",
                "host_timer"):
        assert key in md, key
    assert md["host_timer"]["resolution_ns"] > 0


def _reads(moves):
    """Clock readings whose consecutive moves are `moves` (ns)."""
    import itertools
    return [1_000_000 + x for x in itertools.accumulate([0] + list(moves))]


def test_the_clock_step_rule_on_known_clocks():
    rng = np.random.default_rng(3)
    step = _core._clock_step_from_reads
    # a fine clock (1 ns) read in 18-35 ns, with a cluster of slow reads at 85-95 ns: the old
    # rule took the two populated clusters for levels 67 ns apart
    fine = list(rng.integers(18, 36, 2000)) + list(rng.integers(85, 96, 48))
    rng.shuffle(fine)
    assert step(_reads(fine)) == 1e-9
    # a fine clock with a tighter read cost (18-22, wider than a 2 ns level) beside slow reads
    # at 36-40: still 1 ns
    tight = list(rng.integers(18, 23, 1900)) + list(rng.integers(36, 41, 148))
    assert step(_reads(tight)) == 1e-9
    # a 10 ns clock read in ~25 ns moves by 20 or 30 (+-1 rounding): its step
    stepped = [int(rng.choice([20, 30])) + int(rng.integers(-1, 2)) for _ in range(2048)]
    assert step(_reads(stepped)) == pytest.approx(10e-9, abs=2e-9)
    # a 9.6 ns step: two steps read 19 or 20 (mostly 19), three read 28 or 29 (mostly 29);
    # each level's smallest value would say 9 ns when a 28 shows up, 10 when none does; the
    # levels' means say 9.6, so 10 either way
    two = [19] * 1600 + [20] * 400
    for three in ([28] * 40 + [29] * 160, [29] * 200):
        assert step(_reads(two + three)) == pytest.approx(10e-9, abs=1e-12)
    # a clock coarser than a read repeats: its smallest move is the step
    assert step(_reads([0, 0, 30, 0, 60, 30] * 300)) == pytest.approx(30e-9)
    assert step(_reads([0] * 100)) == 0.0            # never moved
    with pytest.raises(TypeError):
        step([1, "x"])


def test_host_timer_info_reports_resolution_and_overhead():
    t = _core.host_timer_info(lambda: None, calls=2000)
    assert 0 < t["resolution_ns"] < 1_000_000
    # the step kbench info and the metadata report is the one the loop's samples sit on
    # (one probe, core/clock.c); the smallest move between reads is at least that step
    loop_step = _core.measure_host(lambda: None, ((),), None, warmup_s=0.0, min_samples=5,
                                   max_samples=5)["resolution_s"]
    assert t["resolution_ns"] == round(loop_step * 1e9)
    assert t["min_move_ns"] >= t["resolution_ns"]
    assert 0 < t["call_overhead_min_ns"] <= t["call_overhead_mean_ns"]
    with pytest.raises(TypeError):
        _core.host_timer_info(5)
    with pytest.raises(ValueError):
        _core.host_timer_info(calls=0)


def test_cpu_cache_info_and_llc_override(monkeypatch):
    monkeypatch.delenv("KBENCH_LLC_BYTES", raising=False)
    info = _core.cpu_cache_info()
    assert info["llc_bytes"] >= max(c["bytes"] for c in info["levels"] if c["type"] != "Instruction")
    monkeypatch.setenv("KBENCH_LLC_BYTES", "3M")
    assert _core.cpu_cache_info()["llc_bytes"] == 3 << 20
    assert _core.cpu_cache_info()["source"] == "KBENCH_LLC_BYTES"


def test_figures_above_the_measured_ceilings_are_flagged(monkeypatch):
    import sys
    kb = sys.modules["kbench.measure.local"]       # the module that times one process
    # pretend this machine's measured ceilings are absurdly low
    monkeypatch.setattr(kb, "_cpu_peaks", lambda dtype: {"bytes_per_s": 1.0,
                                                         "flops_per_s": 1.0, "source": "test"})
    a = np.ones(1000)
    cold = kbench.bench(np.sum, a, bytes=a.nbytes, warmup_s=0.0, max_time_s=0.2,
                        cold_cache="flush")
    assert cold.throughput["bandwidth_pct_peak"] > 1
    assert any(w.startswith("DEFECT: cold-cache bandwidth") for w in cold.warnings)
    # a flush too small to evict the cache is not a cold figure: above the ceiling it is
    # served from cache, not a defect
    small = kbench.bench(np.sum, a, bytes=a.nbytes, warmup_s=0.0, max_time_s=0.2,
                         cold_cache="flush", flush_bytes=1 << 16)
    assert not any(w.startswith("DEFECT") for w in small.warnings)
    assert any(w.startswith("not cold:") and "served from cache" in w for w in small.warnings)
    hot = kbench.bench(np.sum, a, bytes=a.nbytes, flops=a.size, **FAST)
    assert any("served from cache" in w for w in hot.warnings)
    assert any("measured compute ceiling" in w for w in hot.warnings)
    assert hot.throughput["bound_by"] in ("memory", "compute")


# -- in-place kernels: out_arg names the output (issue 12, item 5)

def silu_and_mul(out, x):
    """vLLM's op in NumPy: writes out in place, returns None."""
    d = x.shape[-1] // 2
    gate = x[..., :d]
    out[...] = gate / (1.0 + np.exp(-gate)) * x[..., d:]


def silu_and_mul_ref(x):
    x = x.astype(np.float64)
    d = x.shape[-1] // 2
    return x[..., :d] / (1.0 + np.exp(-x[..., :d])) * x[..., d:]


def test_out_arg_position_checks_an_in_place_kernel_as_in_the_docs():
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    out = np.empty((8, 32), dtype=np.float32)
    # the docs/workflow.md example
    r = kbench.bench(silu_and_mul, out, x, out_arg=0, bytes=x.nbytes + out.nbytes,
                     check=lambda out, x: silu_and_mul_ref(x), **FAST)
    assert r.correctness["ok"] is True and r.correctness["n"] == out.size


def test_out_arg_keyword_names_an_output_other_than_out():
    x = np.arange(16.0)
    dst = np.zeros(16)

    def scale(x, dst=None):
        np.multiply(x, 3.0, out=dst)

    r = kbench.bench(scale, x, kwargs={"dst": dst}, out_arg="dst", check=x * 3.0, **FAST)
    assert r.correctness["ok"] is True


@pytest.mark.parametrize("out_arg", [0, -2, "out"])
def test_out_arg_is_poisoned_so_an_unwritten_output_fails(out_arg):
    x = np.ones(100)
    out = x * 2.0                                    # already the right answer ...

    def writes_nothing(out, x):
        return None                                  # ... but never written

    if out_arg == "out":
        call = dict(kwargs={"out": out, "x": x})
        args = ()
    else:
        call, args = {}, (out, x)
    with pytest.raises(AssertionError, match="filled with NaN") as e:
        kbench.bench(writes_nothing, *args, out_arg=out_arg, check=x * 2.0, **FAST, **call)
    assert "left them unchanged" in str(e.value)
    # poisoned for the first call, then its contents restored for the second
    np.testing.assert_array_equal(out, x * 2.0)


def test_an_in_place_kernel_is_checked_against_its_inputs_before_the_call():
    # fused_add_rms_norm / rotary embedding style: the output is an input. The reference comes
    # from the arguments before fn changed them, and the poison fed to the first call (NaN in,
    # NaN out) is resolved by a call on the original contents; the user's data is not left NaN.
    x = np.arange(1.0, 5.0)
    calls = []

    def negate_in_place(v):
        calls.append(v.copy())
        np.negative(v, out=v)

    r = kbench.bench(negate_in_place, x, out_arg=0, check=lambda v: -v, **FAST)
    assert r.correctness["ok"] is True and r.correctness["in_place"] is True
    assert np.isnan(calls[0]).all()                           # the first call read the poison
    np.testing.assert_array_equal(calls[1], np.arange(1.0, 5.0))  # the second, the original
    assert np.isfinite(x).all()
    # the same through kwargs={"out": x} with x also an input
    y = np.arange(1.0, 5.0)
    b = np.ones(4)
    r = kbench.bench(lambda p, q, out: np.add(p, q, out=out), y, b, kwargs={"out": y},
                     check=lambda p, q: p + q, **FAST)
    assert r.correctness["ok"] is True and np.isfinite(y).all()


def test_an_in_place_kernel_that_computes_the_wrong_thing_still_fails():
    x = np.arange(1.0, 5.0)
    with pytest.raises(AssertionError, match="original contents") as e:
        kbench.bench(lambda v: np.multiply(v, 3.0, out=v), x, out_arg=0, check=lambda v: -v,
                     **FAST)
    assert "out=12 ref=-4" in str(e.value)           # the finite mismatch, not the poison's NaN


def test_a_check_callable_sees_the_arguments_before_fn_changed_them():
    x = np.arange(1.0, 5.0)
    seen = []

    def ref(v):
        seen.append(v.copy())
        return -v

    kbench.bench(lambda v: np.negative(v, out=v), x, out_arg=0, check=ref, **FAST)
    np.testing.assert_array_equal(seen[0], np.arange(1.0, 5.0))


def test_a_reference_that_is_a_view_of_an_argument_is_kept_as_it_was():
    # check=lambda v: v[::-1] returns a view of v, which fn then overwrites
    x = np.arange(1.0, 5.0)
    r = kbench.bench(lambda v: np.copyto(v, v[::-1].copy()), x, out_arg=0,
                     check=lambda v: v[::-1], **FAST)
    assert r.correctness["ok"] is True


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.uint64])
def test_integer_outputs_are_poisoned_too(dtype):
    ref = (np.arange(10) * 2).astype(dtype)
    out = ref.copy()                                 # already the right answer, never written
    with pytest.raises(AssertionError, match="filled with NaN"):
        kbench.bench(lambda x, o: None, np.arange(10), out, out_arg=1, check=ref, **FAST)


def test_outputs_of_different_shapes_are_compared_one_by_one():
    a, b = np.random.rand(10), np.random.rand(5)
    r = kbench.bench(lambda: (a, b), check=(a.copy(), b.copy()), **FAST)
    assert r.correctness["ok"] is True
    with pytest.raises(AssertionError, match=r"output \(output 1 of 2\) does not match"):
        kbench.bench(lambda: (a, b), check=(a.copy(), b + 1.0), **FAST)


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "bfloat16", "float8_e4m3fn",
                                   "float8_e5m2", "float4_e2m1fn", "int4", "uint4"])
def test_complex_and_ml_dtypes_outputs_are_poisoned_too(dtype):
    # complex (kind 'c') and ml_dtypes (kind 'V') outputs were never poisoned: one holding
    # the right answer from an earlier run passed check= though fn never wrote it
    if dtype.startswith("complex"):
        dt = np.dtype(dtype)
    else:
        dt = np.dtype(getattr(pytest.importorskip("ml_dtypes"), dtype))
    ref = np.arange(4).astype(dt)
    out = ref.copy()
    tol = dict(rtol=0, atol=0) if dtype in ("float4_e2m1fn", "int4", "uint4") else {}
    with pytest.raises(AssertionError, match="filled with NaN"):
        kbench.bench(lambda x, o: None, ref, out, out_arg=1, check=ref, **tol, **FAST)
    np.testing.assert_array_equal(out.astype(np.complex128), ref.astype(np.complex128))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "complex64"])
def test_cpu_torch_outputs_are_poisoned_too(dtype):
    # only GPU tensors were poisoned: a CPU tensor's stale right answer passed the check
    torch = pytest.importorskip("torch")
    ref = torch.arange(8).to(getattr(torch, dtype))
    out = ref.clone()
    with pytest.raises(AssertionError, match="filled with NaN"):
        kbench.bench(lambda x, out: None, ref, kwargs={"out": out}, check=ref, **FAST)
    assert torch.equal(out, ref)                     # the caller's contents, put back


def test_a_tuple_reference_holding_a_view_of_an_argument_is_copied_item_by_item():
    # the reference shared memory with x, so it was copied -- and a tuple's copy was None:
    # "compare: ref is None" refused a correct kernel
    x = np.arange(8.0)
    r = kbench.bench(lambda x: (x * 2, x), x, check=lambda x: (x * 2, x), **FAST)
    assert r.correctness["ok"] is True
    # the view is copied before fn overwrites it: an in-place reversal checks against v[::-1]
    v = np.arange(1.0, 5.0)
    r = kbench.bench(lambda v: (np.copyto(v, v[::-1].copy()), v)[1:], v,
                     check=lambda v: (v[::-1],), **FAST)
    assert r.correctness["ok"] is True


def test_the_callers_output_is_restored_when_the_check_raises():
    # the output was poisoned, then fn (or the compare) raised: it was left full of NaN
    x, residual = np.ones(4), np.arange(4.0)

    def fused_add(x, out):
        if x.dtype != np.float32:
            raise TypeError("kernel wants float32")
        out += x

    with pytest.raises(TypeError, match="kernel wants float32"):
        kbench.bench(fused_add, x, kwargs={"out": residual}, check=np.arange(4.0) + 1, **FAST)
    np.testing.assert_array_equal(residual, np.arange(4.0))
    with pytest.raises(ValueError):                  # a reference of the wrong shape
        kbench.bench(lambda x, out: None, x, kwargs={"out": residual}, check=np.zeros(5),
                     **FAST)
    np.testing.assert_array_equal(residual, np.arange(4.0))


def test_tuple_outputs_that_do_not_pair_with_the_reference_say_so():
    # numpy's "inhomogeneous shape" error came out, naming neither kbench nor the check
    a, b = np.ones(4), np.arange(3.0)
    with pytest.raises(ValueError, match=r"fn returned 2 outputs, the reference \(check=\) "
                                         r"has 3"):
        kbench.bench(lambda: (a, b), check=(a, b, b), **FAST)
    with pytest.raises(ValueError, match=r"fn returned one ndarray, the reference .* has 2"):
        kbench.bench(lambda: a, check=(a, b), **FAST)
    with pytest.raises(ValueError, match=r"returned 2 outputs \(at output 0\), .* has 1"):
        kbench.bench(lambda: ((a, b), b), check=((a,), b), **FAST)
    assert kbench.bench(lambda: (a, 3), check=(a, 3), **FAST).correctness["ok"] is True
    r = kbench.bench(lambda: ((a, b), b), check=((a, b), b), **FAST)
    assert r.correctness["ok"] is True
    # a list of arrays against their stack is compared row by row, as np.asarray did
    assert kbench.bench(lambda: [a, a], check=np.stack([a, a]), **FAST).correctness["ok"]
    with pytest.raises(AssertionError, match=r"output \(output 1 of 2\) does not"):
        kbench.bench(lambda: np.stack([a, a]), check=[a, a + 1], **FAST)
    with pytest.raises(AssertionError, match=r"output \(output 0\[1\] of 2\) does not"):
        kbench.bench(lambda: ((a, b), b), check=((a, b + 1), b), **FAST)


def test_out_arg_wins_over_a_returned_value():
    x = np.ones(8)
    out = np.empty(8)

    def kernel(out, x):
        np.add(x, 1.0, out=out)
        return x                                     # a status or an input, not the output

    r = kbench.bench(kernel, out, x, out_arg=0, check=np.full(8, 2.0), **FAST)
    assert r.correctness["ok"] is True


def test_a_callable_returning_none_under_check_says_so_and_how_to_name_the_output():
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    out = np.empty((4, 8), dtype=np.float32)
    with pytest.raises(TypeError) as ei:
        kbench.bench(silu_and_mul, out, x, check=lambda out, x: silu_and_mul_ref(x), **FAST)
    msg = str(ei.value)
    assert "returned None" in msg and "out_arg=<position> (one of 0..1)" in msg
    assert "unsupported dtype" not in msg
    assert kbench.bench(silu_and_mul, out, x, out_arg=0,
                        check=lambda out, x: silu_and_mul_ref(x), **FAST).n > 0


def test_a_closure_writing_a_captured_array_gets_the_same_clear_message():
    x = np.ones(32)
    y = np.empty(32)

    def f():
        np.multiply(x, 2.0, out=y)

    with pytest.raises(TypeError, match="callable returned None.*closure .*must return it"):
        kbench.bench(f, check=lambda: x * 2.0, **FAST)


@pytest.mark.parametrize("out_arg,error,match", [
    (2, ValueError, r"out_arg=2 is not a position in the 2 positional argument"),
    (-3, ValueError, r"out_arg=-3 is not a position"),
    ("dst", ValueError, r"out_arg='dst' is not a keyword in kwargs \(keywords: \[\]\)"),
    (True, TypeError, r"out_arg must be a position in args \(int\) or a keyword name"),
    (1.0, TypeError, r"out_arg must be .* got float"),
])
def test_a_bad_out_arg_is_refused_before_anything_runs(out_arg, error, match):
    calls = []
    with pytest.raises(error, match=match):
        kbench.bench(lambda o, x: calls.append(1), np.empty(2), np.ones(2), out_arg=out_arg,
                     check=np.ones(2), **FAST)
    assert calls == []


# -- option edges (issue 12, item 8)

@pytest.mark.parametrize("count", [np.int64(8000), np.int32(8000), np.uint64(8000),
                                   np.float32(8000.0), np.float64(8000.0), 8000, 8000.0])
def test_numpy_scalars_are_accepted_as_flops_and_bytes(count):
    r = kbench.bench(np.sum, np.ones(1000), bytes=count, flops=count, **FAST)
    assert r.bytes == 8000 and type(r.bytes) in (int, float)
    assert r.throughput["bytes_per_s"] == pytest.approx(8000 / r.median)
    back = kbench.Result.from_json(r.to_json())             # serialises: plain numbers
    assert back.flops == 8000


@pytest.mark.parametrize("kw,error,match", [
    (dict(bytes=True), TypeError, "bytes must be a number of bytes per call, got bool"),
    (dict(flops=np.bool_(True)), TypeError, "flops must be a number .* got bool"),
    (dict(bytes="8000"), TypeError, "bytes must be a number .* got str"),
    (dict(flops=np.float32("nan")), ValueError, "flops must be a non-negative number"),
    (dict(bytes=np.int64(-1)), ValueError, "bytes must be a non-negative number"),
    (dict(name=b"x"), TypeError, r"name must be a str, got bytes \(b'x'\)"),
    (dict(name=42), TypeError, "name must be a str, got int"),
])
def test_bad_counts_and_names_are_refused_naming_the_option(kw, error, match):
    with pytest.raises(error, match=match):
        kbench.bench(np.sum, np.ones(10), **{**FAST, **kw})
    assert kbench.bench(np.sum, np.ones(10), name="ok", **FAST).to_json()


# -- reading the printed result (issue 12, item 11)

@pytest.mark.parametrize("low,high,text", [
    (0.995, 1.005, "+-0.50%"),
    (0.99, 1.012, "+-1.1%"),              # sides within 1.5x: one figure
    (0.997, 1.021, "-0.30%/+2.1%"),       # lopsided: both sides
    (0.9, 7.397, "-10%/+640%"),           # the "+-639.7%" of a skewed run under load
    (1.0, 1.0, "+-0.00%"),
    (float("nan"), 1.0, "-"),
])
def test_the_ci_of_the_median_is_shown_as_a_range_when_lopsided(low, high, text):
    from kbench.report._format import fmt_ci
    assert fmt_ci(1.0, low, high) == text


def test_the_report_tells_ci_from_cv_and_names_the_peak(monkeypatch, tmp_path):
    from kbench.roofline import peaks
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))
    peaks.save_peaks({"schema": peaks.SCHEMA, "copy_GBps": 50.0, "triad_GBps": 60.0,
                      "fma_GFLOPs": 100.0, "fma_fp32_GFLOPs": 200.0, "fma": {"isa": "avx2"},
                      "fma_fp32": {"isa": "avx2"}})
    a = np.ones(1000)
    r = kbench.bench(np.sum, a, bytes=a.nbytes, flops=a.size, **FAST)
    text = repr(r)
    # (a loaded host can make the samples' dependence outrun the run: the Wall row says so)
    assert "95% CI of the median" in text and ("the precision of this figure" in text or
                                               "this run's precision; their dependence" in text)
    assert "(the spread of single calls, not the precision of the median)" in text
    assert "of the measured CPU STREAM triad peak, 60 GB/s" in text
    assert "of the measured CPU FMA float64 (avx2) peak, 100 GFLOP/s" in text
    assert r.throughput["peak_bytes_name"] == "CPU STREAM triad"
    # a float32 call is held against the float32 ceiling (twice the lanes), and named so
    r32 = kbench.bench(np.sum, a.astype(np.float32), flops=a.size, **FAST)
    assert r32.throughput["peak_flops_per_s"] == 200e9
    assert r32.throughput["peak_flops_name"] == "CPU FMA float32 (avx2)"


@pytest.mark.parametrize("args,kwargs,expect", [
    ((np.ones(3, np.float32), np.ones(3, np.float32)), {}, "float32"),
    ((np.ones(3, np.float32),), {"out": np.ones(3)}, "float64"),      # numpy promotes the mix
    ((np.ones(3, np.complex128),), {}, "float64"),
    ((np.ones(3, np.complex64), np.float16(1)), {}, "float32"),
    ((np.arange(3), 2.0), {}, "float32"),            # no floating array: the higher ceiling
    ((), {}, "float32"),
])
def test_the_fma_ceiling_follows_the_arguments_precision(args, kwargs, expect):
    from kbench.measure.local import compute_dtype
    assert compute_dtype(args, kwargs) == expect


def test_a_framework_dtype_is_read_by_its_name():
    from kbench.measure.local import compute_dtype

    class FakeTensor:                   # np.dtype() refuses torch.float64; its name tells
        dtype = type("FakeDtype", (), {"__str__": lambda self: "torch.float64"})()
    assert compute_dtype((FakeTensor(),), {}) == "float64"
    FakeTensor.dtype = type("FakeDtype", (), {"__str__": lambda self: "torch.bfloat16"})()
    assert compute_dtype((FakeTensor(),), {}) == "float32"


@pytest.mark.parametrize("bad", ["fast", float("nan"), -1.0, 0, True])
def test_a_bad_ceiling_costs_the_percent_of_peak_not_the_result(bad):
    """The GPU peaks cache reaches throughput() unvalidated: a bad figure is warned about and
    dropped."""
    from kbench.measure.local import throughput
    from kbench.roofline.peaks import PeaksCacheWarning
    source = f"test source {bad!r}"
    with pytest.warns(PeaksCacheWarning, match="bytes_per_s is .* not a finite positive"):
        tp = throughput(1e-3, flops=1e6, nbytes=1e6,
                        peaks={"bytes_per_s": bad, "flops_per_s": 1e12, "source": source})
    assert tp["bytes_per_s"] == pytest.approx(1e9) and "bandwidth_pct_peak" not in tp
    assert tp["compute_pct_peak"] == pytest.approx(1e-3)
# ------------------------------------------------------------------ issue 12: C-core edges


@pytest.mark.parametrize("kw,match", [
    (dict(warmup_s=float("inf")), "warmup_s must be >= 0 and <= 3600, got inf"),
    (dict(warmup_s=1e300), "warmup_s must be >= 0 and <= 3600"),
    (dict(warmup_s=float("nan")), "warmup_s must be"),
    (dict(max_time_s=float("inf")), "max_time_s must be > 0 and <= 86400, got inf"),
    (dict(max_time_s=float("nan")), "max_time_s must be"),
    (dict(target=float("inf")), "target must be > 0 and finite"),
    (dict(ci_level=float("nan")), "ci_level must be"),
    (dict(warmup_s=10 ** 400), "warmup_s must be finite"),
])
def test_time_options_must_be_finite_and_bounded(kw, match):
    with pytest.raises(ValueError, match=match):
        kbench.bench(lambda: None, **{**FAST, **kw})
    assert kbench.bench(lambda: None, **FAST).n > 0      # still usable


def test_count_options_take_numpy_integers_but_not_bools_or_floats():
    raw = _core.measure_host(lambda: None, ((),), None, warmup_s=0.0,
                             min_samples=np.int64(7), max_samples=np.uint16(7))
    assert len(raw["samples"]) == 7
    for bad in (True, 7.0):
        with pytest.raises(TypeError, match="min_samples must be an int"):
            _core.measure_host(lambda: None, ((),), None, min_samples=bad)


def test_host_timer_step_is_learned_and_a_zero_width_ci_is_not_reported_as_precision():
    # An empty callable's samples sit on the host clock's steps (10 ns on the CI VM) and often
    # agree exactly: their CI of the median has zero width. That is not a precision of 0%.
    for _ in range(20):
        raw = _core.measure_host(lambda: None, ((),), None, warmup_s=0.0, min_samples=25,
                                 max_samples=25, target=1e-9)
        step = raw["resolution_s"]
        assert 1e-9 <= step < 1e-3
        med = float(np.median(raw["samples"]))
        assert raw["achieved"] >= 0.5 * step / med * (1 - 1e-9)
        if raw["stop"] == "precision":      # the CI was one step wide, short of 1e-9
            assert raw["at_resolution"] is True
    r = kbench.bench(lambda: None, min_samples=25, max_samples=25, warmup_s=0, target=1e-9,
                     cold_cache=None)
    assert r.stop["resolution_s"] == pytest.approx(step, rel=1) and r.stop["achieved"] > 0


@pytest.mark.parametrize("value", ["-1", "99999999999999999999", "10000000000000000000", "1.5M",
                                   "1T", "garbage", "0", "32 M", "0x100", "2048G",
                                   # implausible: KBENCH_LLC_BYTES=1 flushed 64 B, called cold
                                   "1", "4096", "63k", "65G", "1024G"])
def test_bad_llc_override_is_refused_naming_the_variable_and_value(monkeypatch, value):
    monkeypatch.setenv("KBENCH_LLC_BYTES", value)
    pattern = f"KBENCH_LLC_BYTES='{value}' is not a cache size"
    with pytest.raises(ValueError, match=pattern.replace(".", r"\.")):
        _core.cpu_cache_info()
    with pytest.raises(ValueError, match="KBENCH_LLC_BYTES"):
        kbench.bench(np.sum, np.ones(10), warmup_s=0.0, max_time_s=0.05)
    with pytest.raises(ValueError, match="KBENCH_LLC_BYTES"):
        _core.measure_host(np.sum, ((np.ones(10),),), None, cold="flush", warmup_s=0.0)
    monkeypatch.delenv("KBENCH_LLC_BYTES")
    assert kbench.bench(np.sum, np.ones(10), **FAST).n > 0


@pytest.mark.parametrize("value,expect", [("65536", 65536), ("64k", 64 << 10), ("3M", 3 << 20),
                                          ("1G", 1 << 30), ("64G", 64 << 30)])
def test_good_llc_override_parses_exactly(monkeypatch, value, expect):
    monkeypatch.setenv("KBENCH_LLC_BYTES", value)
    assert _core.cpu_cache_info()["llc_bytes"] == expect


def test_a_flush_smaller_than_the_cache_is_flagged_not_cold():
    llc = _core.cpu_cache_info()["llc_bytes"]
    small = max(llc // 4, 4096)
    r = kbench.bench(np.sum, np.ones(10), cold_cache="flush", flush_bytes=small,
                     warmup_s=0.0, max_time_s=0.05)
    assert r.cold_cache["flush_bytes"] == small and r.cold_cache["evicts"] is False
    # said once, in the result (it was a Python warning the filters showed once a process)
    assert [w for w in r.warnings if "smaller than the" in w and "cannot evict it" in w]
    r = kbench.bench(np.sum, np.ones(10), cold_cache="flush", warmup_s=0.0, max_time_s=0.05)
    assert r.cold_cache["flush_bytes"] >= 2 * llc and r.cold_cache["evicts"] is True


def test_rotation_whose_sets_cannot_evict_the_cache_is_refused():
    from kbench.measure.coldcache import (_fmt_bytes, check_rotation_footprint, make_rotation_sets,
                                  max_rotation_sets)
    llc = _core.cpu_cache_info()["llc_bytes"]
    most = max_rotation_sets(llc)       # 4096 (32.8 kB of 8 B sets) up to a 32 MiB cache
    with pytest.raises(ValueError, match=rf"cold_cache='rotate' cannot evict the .* cache: "
                                         rf"{most} copies .* of 8 B hold "
                                         rf"{re.escape(_fmt_bytes(most * 8))} in all"):
        kbench.bench(np.sum, np.ones(1), cold_cache="rotate", warmup_s=0.0, max_time_s=0.05)
    # sets big enough to evict it still rotate
    sets = make_rotation_sets((np.ones(llc // 8),), llc)
    assert sum(s[0].nbytes for s in sets[1:]) >= 2 * llc
    check_rotation_footprint([llc] * 3, llc)                      # two others: 2x the cache
    with pytest.raises(ValueError, match="cannot evict"):
        check_rotation_footprint([llc] * 2, llc)


def test_benches_from_two_threads_are_serialised_and_both_sane():
    import threading
    log = []            # (thread name, perf_counter) of every call, in call order

    def work(tag):
        def f():
            log.append((tag, time.perf_counter()))
            sum(range(200))
        return f

    results, errors = {}, []

    def run(tag):
        try:
            results[tag] = kbench.bench(work(tag), warmup_s=0.05, max_time_s=0.3,
                                        cold_cache=None, target=1e-9)
        except BaseException as e:      # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and set(results) == {"A", "B"}
    # one run's calls all come before the other's: the loops did not interleave
    tags = [t for t, _ in log]
    switches = sum(1 for x, y in zip(tags, tags[1:]) if x != y)
    assert switches == 1, f"the two benches interleaved ({switches} switches)"
    for r in results.values():
        assert r.n >= 10 and r.median > 0
    # both timed the same work alone: their medians agree within a factor of 3
    ma, mb = results["A"].median, results["B"].median
    assert max(ma, mb) / min(ma, mb) < 3


def test_a_bench_inside_a_benchmarked_callable_is_refused_not_deadlocked():
    def nested():
        kbench.bench(lambda: None, **FAST)

    with pytest.raises(_core.KbenchError, match="inside a measurement"):
        kbench.bench(nested, **FAST)
    assert kbench.bench(lambda: None, **FAST).n > 0


def test_rotation_shortfall_names_what_given_sets_lack():
    from kbench.measure.coldcache import rotation_shortfall
    llc = _core.cpu_cache_info()["llc_bytes"]
    why = rotation_shortfall([32, 32, 32], llc, what="3 arg_sets")
    assert why.startswith("cold_cache='rotate' cannot evict the ") and "3 arg_sets of 32 B" in why
    assert rotation_shortfall([llc] * 3, llc) is None
    assert rotation_shortfall([32, 32], 0) is None          # unknown cache: not judged


def test_user_arg_sets_that_cannot_evict_are_run_but_not_called_cold():
    a = np.ones(1000)
    sets = [(a.copy(),), (a.copy(),)]
    r = kbench.bench(np.sum, arg_sets=sets, cold_cache="rotate", max_time_s=0.05, warmup_s=0)
    assert r.cold_cache["evicts"] is False
    assert any("cannot evict" in w and "not cold" in w for w in r.warnings), r.warnings


@pytest.mark.parametrize("given", ["same array", "views", "factory"])
def test_arg_sets_that_share_one_buffer_count_it_once_and_are_not_called_cold(given):
    # 300 uses of one 256 kB array were "78.6 MB in all" and labelled cold while running hot
    a = np.random.rand(1 << 15)
    n = max(300, 4 * _core.cpu_cache_info()["llc_bytes"] // a.nbytes)
    sets = {"same array": dict(arg_sets=[(a,)] * n),
            "views": dict(arg_sets=[(a[:],) for _ in range(n)]),
            "factory": dict(arg_sets=lambda i: (a,), rotate_sets=n)}[given]
    r = kbench.bench(np.sum, **sets, cold_cache="rotate", max_time_s=0.05, warmup_s=0)
    assert r.cold_cache["footprint_bytes"] == a.nbytes and r.cold_cache["arg_sets"] == n
    assert r.cold_cache["evicts"] is False
    assert any("share memory" in w and "not cold" in w for w in r.warnings), r.warnings


def test_rotation_counts_memory_each_set_holds_alone():
    from kbench.measure.coldcache import flag_rotation_sets, footprint, rotation_footprints
    a, b = np.random.rand(1000), np.random.rand(1000)
    assert rotation_footprints([(a,), (b,)]) == ([8000, 8000], 16000)       # distinct: as before
    assert rotation_footprints([(a,), (a[:],), (a[500:],)]) == ([0, 0, 0], 8000)
    assert rotation_footprints([(a[:600],), (a[400:],)]) == ([3200, 3200], 8000)   # overlap
    assert rotation_footprints([(a, b), (a,)]) == ([8000, 0], 16000)        # a shared weight
    assert rotation_footprints([([a, {"k": a}],), ((b,),)]) == ([8000, 8000], 16000)
    assert footprint((a, a)) == footprint((a, a[::-1])) == 8000 and footprint((a[::2],)) == 4000
    cold, warn = {}, []
    flag_rotation_sets(cold, [(a,)] * 8, 1000, warn)          # 8 x 8 kB would "evict" 1 kB
    assert cold == dict(footprint_bytes=8000, set_bytes=8000, arg_sets=8, evicts=False)
    assert "8 arg_sets that share memory" in warn[0] and warn[0].endswith("not cold")
    cold, warn = {}, []
    flag_rotation_sets(cold, [(a,), (b,), (a.copy(),)], 1000, warn)
    assert cold["evicts"] is True and cold["footprint_bytes"] == 24000 and warn == []


def test_rotation_clones_the_arrays_inside_list_tuple_and_dict_arguments():
    from kbench.measure.coldcache import make_rotation_sets, rotation_footprints
    x, y = np.random.rand(1000), np.random.rand(1000)
    args = ([x, y], {"x": x, "n": 3}, (y,))
    sets = make_rotation_sets(args, cache_bytes=1 << 16)
    own, total = rotation_footprints(sets)
    assert own == [16000] * len(sets) and total == 16000 * len(sets)
    for L, d, t in sets[1:]:
        assert type(L) is list and type(d) is dict and type(t) is tuple
        assert not np.shares_memory(L[0], x) and not np.shares_memory(t[0], y)
        assert d["x"] is L[0] and t[0] is L[1] and d["n"] == 3     # aliasing kept within a set
    np.testing.assert_array_equal(sets[-1][0][0], x)


def test_a_rotated_list_argument_is_a_different_list_each_set():
    # the caller's list was passed to every set, so the rotation ran hot but was labelled cold
    xs = [np.random.rand(1 << 15) for _ in range(2)]
    seen = set()

    def f(L):
        seen.add(L[0].__array_interface__["data"][0])
        return L[0].sum() + L[1].sum()

    r = kbench.bench(f, xs, cold_cache="rotate", min_samples=300, max_time_s=5, warmup_s=0)
    assert r.cold_cache["evicts"] is True and len(seen) == r.cold_cache["arg_sets"] > 2


def test_a_bench_at_the_timer_resolution_says_so_in_its_stop_record():
    r = kbench.bench(lambda: None, min_samples=25, max_samples=25, warmup_s=0, target=1e-9,
                     cold_cache=None)
    assert "at_resolution" in r.stop


def test_a_figure_a_few_percent_over_one_reference_kernel_is_not_flagged():
    from kbench.measure.local import COMPUTE_CEILING_SLACK, throughput, _warnings
    from kbench.report.result import Result
    samples = np.full(20, 1e-3)
    r = Result(name="gemm", device="cuda:0", backend="cupti", samples=samples,
               stats=kbench._core.summarize(samples, 0.95), stop={"stop": "precision"},
               cold_cache={"mode": "none"})
    # a GEMM shape 1% faster than the reference GEMM the ceiling was measured on
    r.throughput = throughput(1e-3, 1.01e12, None, {"flops_per_s": 1e15, "bytes_per_s": None})
    assert not any("compute ceiling" in w for w in _warnings(r))
    r.throughput = throughput(1e-3, (COMPUTE_CEILING_SLACK + 0.05) * 1e12, None,
                              {"flops_per_s": 1e15, "bytes_per_s": None})
    assert any("compute ceiling" in w for w in _warnings(r))


def test_bench_defaults_are_one_table_for_every_entry():
    """kbench.bench, kbench.measure.local.bench_local (what kbench.distributed calls with only the
    options its caller gave) and kbench.distributed agree: every default other than None is
    read from kbench.measure.prepare.BENCH_DEFAULTS, and the two signatures name the same
    defaults."""
    import inspect
    from kbench.measure.local import bench_local
    from kbench.measure.prepare import BENCH_DEFAULTS
    public = inspect.signature(kbench.bench).parameters
    local = inspect.signature(bench_local).parameters
    for k, p in public.items():
        if p.default is inspect.Parameter.empty or k in ("group", "dist_timeout_s"):
            continue
        assert k in local and local[k].default == p.default, k
        assert p.default is None or p.default == BENCH_DEFAULTS.get(k, object()), \
            f"{k}={p.default!r} is written in the signature, not taken from BENCH_DEFAULTS"
    assert set(BENCH_DEFAULTS) <= set(public)
    # and in the source: each default is None or BENCH_DEFAULTS[...], never a second literal
    import ast
    from pathlib import Path
    pkg = Path(kbench.__file__).resolve().parent
    for path, fname in ((pkg / "bench.py", "bench"),
                        (pkg / "measure" / "local.py", "bench_local")):
        fdef = next(n for n in ast.walk(ast.parse(path.read_text()))
                    if isinstance(n, ast.FunctionDef) and n.name == fname)
        for d in fdef.args.kw_defaults + fdef.args.defaults:
            ok = (isinstance(d, ast.Constant) and d.value is None) or (
                isinstance(d, ast.Subscript) and isinstance(d.value, ast.Name)
                and d.value.id == "BENCH_DEFAULTS")
            assert ok, f"{path.name}:{d.lineno}: {ast.unparse(d)} is a default written again"
    # a default that reaches the run: an unflushed result only when asked
    r = kbench.bench(np.sum, np.ones(100), warmup_s=0.0, max_time_s=0.05, memory=False)
    assert r.cold_cache["mode"] == BENCH_DEFAULTS["cold_cache"]


def test_the_loop_defaults_are_the_c_cores_own():
    """Written once, in csrc/core/measure.c: bench passes on only what it was given."""
    import inspect
    d = kbench._core.LOOP_DEFAULTS
    assert d["warmup_s"] == 0.25 and d["min_samples"] == 10 and d["target"] == 0.005
    # the budget, and what an explicit target waits for instead
    assert d["max_time_s"] == 0.3 and d["max_time_s_with_target"] == 10.0
    assert d["warmup_s_with_target"] == 1.0
    sig = inspect.signature(kbench.bench).parameters
    for k in ("warmup_s", "min_samples", "max_samples", "max_time_s", "target", "ci_level",
              "criterion"):
        assert sig[k].default is None, k
    r = kbench.bench(np.sum, np.ones(100), warmup_s=0.0, cold_cache=None)
    assert r.stop["max_time_s"] == d["max_time_s"] and r.stop["min_samples"] == d["min_samples"]
    assert r.stop["target"] == d["target"] and r.stats["ci_level"] == d["ci_level"]


_jitter = random.Random(0)


def _jittery_sleep():
    """A call whose time varies by up to a factor of two: no 0.5% CI in a fraction of a second.
    The jitter is continuous: a few discrete sleep lengths let a host whose sleep is exact
    (16 quiet cores) tie the median's CI to one value, a zero-width CI."""
    time.sleep(0.0005 * (1.0 + _jitter.random()))


def test_without_a_target_the_budget_stops_the_run_and_states_its_ci():
    """The default contract: sampling ends when the budget is spent, the result states the CI
    it reached and why it stopped, and nothing warns about the budget itself."""
    from kbench.measure.local import _warnings
    r = kbench.bench(_jittery_sleep, cold_cache=None, memory=False)
    assert r.stop["stop"] == "budget" and r.stop["budget"] is True
    assert r.stop["max_time_s"] == kbench._core.LOOP_DEFAULTS["max_time_s"]
    assert r.stop["sampling_s"] < 3 * r.stop["max_time_s"]
    assert r.stop["achieved"] > r.stop["target"]          # the precision was not reached
    assert r.stats["ci_low"] < r.median < r.stats["ci_high"]
    assert not [w for w in _warnings(r) if "stopped by" in w]
    assert "budget: ci" in repr(r) and "pass target= to wait for a precision" in repr(r)


def test_an_explicit_target_is_waited_for_and_warned_about_when_missed():
    """target= asks for a precision: the run samples past the budget toward it (up to
    max_time_s), and a cap that ends it first is a warning, as before the budget."""
    from kbench.measure.local import _warnings
    r = kbench.bench(_jittery_sleep, cold_cache=None, memory=False, target=0.001,
                     max_time_s=0.5)
    assert r.stop["stop"] == "time_cap" and r.stop["budget"] is False
    assert r.stop["sampling_s"] >= 0.5
    assert [w for w in _warnings(r) if w.startswith("stopped by time_cap")]
    r = kbench.bench(_jittery_sleep, cold_cache=None, memory=False, target=0.001,
                     max_samples=20)
    assert r.stop["max_time_s"] == kbench._core.LOOP_DEFAULTS["max_time_s_with_target"]


def test_a_capped_stop_on_dependent_samples_says_what_they_are_worth():
    """A time-capped run whose samples drift: its warning names how many independent samples
    they are worth and the likely cause; the same run on independent samples does not."""
    from kbench.measure.local import _warnings
    from kbench.report.result import Result
    rng = np.random.default_rng(8)
    for samples, dependent in ((1e-3 * (1 + 0.01 * rng.standard_normal(2000)
                                        + np.linspace(0, 0.05, 2000)), True),
                               (1e-3 * (1 + 0.01 * rng.standard_normal(2000)), False)):
        stats = kbench._core.summarize(samples, 0.95)
        r = Result(name="drift", device="cpu", backend="host", samples=samples, stats=stats,
                   stop={"stop": "time_cap", "criterion": "ci", "target": 1e-4,
                         "achieved": stats["rel_ci_halfwidth"]},
                   cold_cache={"mode": "none"})
        stop = [w for w in _warnings(r) if w.startswith("stopped by time_cap")]
        assert len(stop) == 1 and "less certain than asked" in stop[0]
        worth = f"2000 samples worth {2000 / stats['ci_inflation']:.0f} independent ones"
        assert (worth in stop[0] and "the figure moved" in stop[0]) is dependent, stop[0]
        assert (stats["ci_inflation"] > 1.0) is dependent
        assert "regime='burst'" not in stop[0]       # no GPU clock record: no regime hint


def test_a_capped_stop_whose_final_ci_meets_the_target_is_not_called_uncertain():
    """The cap can fall between two checks of the rule: the final CI then meets the target and
    the run is as certain as asked (an H200 GEMM's warning once read 'before the ci target
    0.50% was met (achieved 0.49%)')."""
    from kbench.measure.local import _warnings
    from kbench.report.result import Result
    samples = 1e-3 * (1 + 0.01 * np.random.default_rng(3).standard_normal(2000))
    stats = kbench._core.summarize(samples, 0.95)
    for target, warned in ((stats["rel_ci_halfwidth"] * 1.01, False),
                           (stats["rel_ci_halfwidth"] * 0.99, True)):
        r = Result(name="cap", device="cpu", backend="host", samples=samples, stats=stats,
                   stop={"stop": "time_cap", "criterion": "ci", "target": target,
                         "achieved": stats["rel_ci_halfwidth"]}, cold_cache={"mode": "none"})
        assert any(w.startswith("stopped by time_cap") for w in _warnings(r)) is warned


@pytest.mark.parametrize("regime, min_sampling_s, hinted", [("sustained", 1.0, True),
                                                            ("sustained", 0.0, False),
                                                            ("burst", 1.0, False)])
def test_a_capped_stop_under_a_clock_limit_names_burst_and_ab(regime, min_sampling_s, hinted):
    """A sustained figure that settled under a limit (the settle held sampling to a floor) and
    ran to the cap on dependent samples: the warning names regime='burst' and kbench.ab. Not
    an unlimited settle, not the burst regime, not independent samples."""
    from kbench.measure.local import _warnings
    from kbench.report.result import Result
    rng = np.random.default_rng(9)
    drift = 1e-3 * (1 + 0.01 * rng.standard_normal(2000) + np.linspace(0, 0.05, 2000))
    for samples, dependent in ((drift, True), (1e-3 * (1 + 0.01 * rng.standard_normal(2000)),
                                               False)):
        stats = kbench._core.summarize(samples, 0.95)
        r = Result(name="capped", device="cuda:0", backend="cuda", samples=samples, stats=stats,
                   stop={"stop": "time_cap", "criterion": "ci", "target": 1e-4,
                         "achieved": stats["rel_ci_halfwidth"]},
                   cold_cache={"mode": "none"},
                   extra={"regime": {"name": regime, "held": True},
                          "clock_settle": {"settled": True, "min_sampling_s": min_sampling_s}})
        stop = next(w for w in _warnings(r) if w.startswith("stopped by time_cap"))
        assert ("regime='burst'" in stop and "kbench.ab" in stop) is (hinted and dependent), stop


def test_a_host_figure_at_the_clocks_step_says_one_step_is_its_precision():
    """A 30 ns call on a clock that reads in 10 ns steps: its samples agree exactly, the CI of
    the median has zero width and the 'ci' rule stops 'precision' with 16.7% achieved. The
    printed block must not read +-0.00% as the precision; it names the step and what one step
    is of this figure."""
    from kbench.report.result import Result
    samples = np.random.default_rng(3).permutation([30e-9] * 100 + [20e-9] * 20 + [40e-9] * 9)
    stop = {"stop": "precision", "criterion": "ci", "target": 0.005, "achieved": 1 / 6,
            "resolution_s": 10e-9, "at_resolution": True, "sampling_s": 0.001}
    r = Result(name="abs", device="cpu", backend="host", samples=samples,
               stats=_core.summarize(samples, 0.95), stop=stop,
               cold_cache={"mode": "none", "cache_bytes": 1 << 25})
    rows = dict(r._rows())
    assert "one step is the precision (Timer steps)" in rows["Wall"]
    assert "the precision of this figure" not in rows["Wall"]
    assert rows["Timer steps"].startswith("the clock reads in 10.0 ns steps")
    assert "(+-16.7%)" in rows["Timer steps"]
    r.stop = dict(stop, at_resolution=False, stop="time_cap")
    rows = dict(r._rows())
    assert "Timer steps" not in rows and "the precision of this figure" in rows["Wall"]


def test_the_printed_block_states_the_ci_level_and_the_rules_units():
    r = kbench.bench(abs, -1, ci_level=0.999, **FAST)
    assert "99.9% CI of the median" in repr(r)            # was rounded to "100% CI"
    e = kbench.bench(abs, -1, criterion="entropy", **FAST)
    stop = next(l for l in repr(e).splitlines() if "Stop rule" in l)
    assert "bits/sample vs target 0.00084 bits/sample" in stop, stop   # a slope, not a %


def test_results_compare_by_identity_without_raising():
    r = kbench.bench(abs, -1, **FAST)
    same = kbench.Result.from_dict(r.to_dict())
    assert r == r and r != same and len({r, same}) == 2    # numpy's "ambiguous" ValueError before


def test_an_absurd_percentage_of_peak_is_short():
    from kbench.report._format import fmt_pct
    assert fmt_pct(1.735) == "173.5%" and fmt_pct(6.5859820893992226e26) == "6.59e+28%"


@pytest.mark.parametrize("reasons, regime, min_sampling_s, noted", [
    (["sw_power_cap"], "sustained", 1.0, True),
    (["hw_power_brake_slowdown"], "sustained", 1.0, True),
    (["sw_thermal_slowdown"], "sustained", 1.0, False),
    (["sw_power_cap"], "sustained", 0.0, False),       # settled unlimited: nothing held it
    (["sw_power_cap"], "burst", 1.0, False),
    ([], "sustained", 1.0, False)])
def test_a_power_capped_figure_that_met_its_ci_says_the_ci_is_the_runs_own(
        reasons, regime, min_sampling_s, noted):
    # on one H200, eight default benches of one GEMM read 415.3 us +-0.15% (1485 MHz) and
    # 421.0-422.9 us (1440-1455 MHz): a capped CI does not cover the next run's clock
    from kbench.measure.local import _warnings
    from kbench.report.result import Result
    samples = 4.2e-4 * (1 + 0.001 * np.random.default_rng(1).standard_normal(500))
    stats = kbench._core.summarize(samples, 0.95)
    r = Result(name="gemm", device="cuda:0", backend="cupti", samples=samples, stats=stats,
               stop={"stop": "precision", "criterion": "ci", "target": 0.005,
                     "achieved": stats["rel_ci_halfwidth"]},
               cold_cache={"mode": "flush"},
               extra={"regime": {"name": regime, "held": True},
                      "clock_settle": {"settled": True, "min_sampling_s": min_sampling_s},
                      "clocks": {"throttle_reasons": reasons, "sm_mhz_median": 1455.0}})
    notes = [w for w in _warnings(r) if w.startswith("power-capped")]
    assert bool(notes) is noted, _warnings(r)
    if noted:
        assert "SM median 1455 MHz" in notes[0] and "kbench.ab" in notes[0]


def test_shares_memory_answers_from_the_same_address_ranges_as_the_rotation():
    from kbench.measure.coldcache import shares_memory
    a = np.arange(100.0)
    assert shares_memory(a, a[::-1]) and shares_memory((a[10:20],), [a[15:30]])
    assert not shares_memory(a[:50], a[50:]) and not shares_memory(a, a.copy())
    assert shares_memory(7, 7) and not shares_memory(a, None)


def test_the_clock_step_rule_survives_reads_that_change_under_it():
    # an item's __index__ emptied the list while the C loop walked it: a segfault
    reads = []

    class Shrinks:
        def __index__(self):
            reads.clear()
            return 5

    reads.extend([Shrinks()] + list(range(0, 640, 10)))
    assert _core._clock_step_from_reads(reads) > 0


def test_a_call_within_ten_clock_reads_says_the_clock_is_in_the_figure():
    # abs(-1) read 30 ns against 10-15 ns for a C loop: one clock read is in every sample
    r = kbench.bench(abs, -1, cold_cache=None, memory=False, max_time_s=0.2)
    assert any("host clock's read cost" in w for w in r.warnings), r.warnings
    a = np.ones(1 << 16)
    r = kbench.bench(np.sum, a, cold_cache=None, memory=False, max_time_s=0.2)
    assert not any("host clock's read cost" in w for w in r.warnings), r.warnings


def _every_tenth_call_slow():
    calls = [0]

    def f():
        calls[0] += 1
        end = time.perf_counter_ns() + (100_000 if calls[0] % 10 == 0 else 10_000)
        while time.perf_counter_ns() < end:
            pass
    return f


def test_a_regular_share_of_slow_calls_is_said_with_the_mean():
    # the median reads the fast calls: 10.3 us against 19.5 us a call on average, only
    # "outliers" said
    r = kbench.bench(_every_tenth_call_slow(), cold_cache=None, memory=False, max_time_s=0.5)
    assert r.stats["mean"] > 1.25 * r.median
    assert any("high outliers and the mean per call" in w for w in r.warnings), r.warnings
