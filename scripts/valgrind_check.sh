#!/usr/bin/env bash
# Memory checks of kbench's C core on the paths the tests use.
#
#   scripts/valgrind_check.sh [valgrind|asan|all]      (default: all)
#
# valgrind: runs an exercise script (measure_host with flush/rotate/none, a raising callable,
#   every stats function (with and without an order that shows dependence), criterion_check,
#   clock_settled_at/_carried_at/_since, nvml_refreshes, busy_time, compare on several dtypes and bit-pattern kinds, the
#   stream/FMA kernels, cpu_flush, cold by eviction, the GPU loaders' failing paths) under memcheck with
#   PYTHONMALLOC=malloc, using the in-place build of this tree (it builds nothing). The baseline
#   is the same valgrind on `python -c "import numpy"`: its reports become a suppression file,
#   so what is left comes from kbench or the rest of the exercise. Fails when any memory error
#   or definite leak has a frame in kbench's `_core` extension.
# asan: copies the tree to a temporary directory, builds it with KBENCH_SANITIZE=address
#   (SANITIZE=... overrides) and runs the CPU test files with libasan preloaded; fails on any
#   AddressSanitizer report or test failure.
#
# Env: OUT (logs, default /tmp/kbench_memcheck), PY (python, default python3),
#      KBENCH_LLC_BYTES (valgrind run only, default 4M: the flush buffer is 2x this, small
#      enough for valgrind; the ASan pytest run unsets it, the tests check the default).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
mode=${1:-all}
OUT=${OUT:-/tmp/kbench_memcheck}
mkdir -p "$OUT"
# valgrind must see the interpreter itself, not a shim script (pyenv) in front of it
PY=$(${PY:-python3} -c 'import sys; print(sys.executable)')
LLC=${KBENCH_LLC_BYTES:-4M}     # valgrind runs only: the tests check the unset default
export PYTHONDONTWRITEBYTECODE=1
status=0

# ---------------------------------------------------------------- the exercise
cat > "$OUT/exercise.py" <<'EOF'
"""Every C path the CPU tests use, small enough for valgrind; asserts it ran what it says."""
import sys
import warnings

import numpy as np

import kbench
from kbench import _core

calls = {"ok": 0, "expected_errors": 0}


def ok(fn, *args, **kw):
    r = fn(*args, **kw)
    calls["ok"] += 1
    return r


def expect(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc:
        calls["expected_errors"] += 1
        return
    raise AssertionError(f"{getattr(fn, '__name__', fn)}{args!r:.80} did not raise {exc}")


def gpu_path(fn, *args, **kw):
    """A GPU entry point: on a machine without a GPU library it must fail with a kbench error
    (or reject its arguments first); with one it may succeed."""
    try:
        fn(*args, **kw)
        calls["ok"] += 1
    except (_core.KbenchError, ValueError, TypeError, OverflowError):
        calls["expected_errors"] += 1


QUICK = dict(warmup_s=0.01, min_samples=3, max_samples=20, max_time_s=0.2)
rng = np.random.default_rng(0)
a = rng.random(256)
b = rng.random(256)

# -- measure_host: none / flush / rotate, kwargs, both rules, every error before the loop
f = lambda x, y=None: np.add(x, 1.0)
for cold in (None, "flush"):
    for crit in ("ci", "entropy"):
        r = ok(_core.measure_host, f, ((a,),), None, cold=cold, criterion=crit, **QUICK)
        assert r["cold"]["mode"] == (cold or "none") and len(r["samples"]) >= 3
ok(_core.measure_host, f, ((a,), (b,)), {"y": 1}, cold="rotate", **QUICK)
ok(_core.measure_host, f, ((a,),), None, cold="flush", flush_bytes=1 << 20, target=0.5,
   batch_max=2, **QUICK)
for bad in (dict(cold="bogus"), dict(cold="rotate"), dict(flush_bytes=-1), dict(bogus=1),
            dict(min_samples=0), dict(min_samples=5, max_samples=2), dict(criterion="nope"),
            dict(criterion=3), dict(ci_level=1.5), dict(max_time_s=0), dict(warmup_s="x")):
    expect((TypeError, ValueError), _core.measure_host, f, ((a,),), **bad)
expect(TypeError, _core.measure_host, 3, ((a,),))
expect(TypeError, _core.measure_host, f, [(a,)])
expect(TypeError, _core.measure_host, f, ((),), "notadict")
expect(TypeError, _core.measure_host, f, ([a],))
# -- cold by eviction (a large cache stood in for by KBENCH_LLC_BYTES): the operands' buffers
# held for the run and released, a strided one refused part-way, a malformed evict=
import os
llc_before = os.environ.get("KBENCH_LLC_BYTES")
os.environ["KBENCH_LLC_BYTES"] = "1G"
if _core.CPU_EVICT_INSTRUCTION is not None:
    r = ok(_core.measure_host, np.add, ((a, b), (b, a)), None, cold="flush",
           evict=((a, b), (b, a)), **QUICK)
    assert r["cold"]["method"] == "evict" and r["cold"]["evict_bytes"] == a.nbytes + b.nbytes
    expect((BufferError, ValueError, TypeError), _core.measure_host, np.add, ((a, b),), None,
           cold="flush", evict=((a, b[::2]),), **QUICK)
    assert ok(_core.cpu_evict, a) == a.nbytes
expect(TypeError, _core.measure_host, np.add, ((a, b),), None, cold="flush", evict=[(a, b)],
       **QUICK)
if llc_before is None:
    del os.environ["KBENCH_LLC_BYTES"]
else:
    os.environ["KBENCH_LLC_BYTES"] = llc_before
# -- the option schema's rows as Python objects
assert len(_core.OPTION_SCHEMA) >= 20 and _core.LOOP_DEFAULTS["max_time_s"] > 0
# the loop's settle hooks: a second settle after the samples are dropped, and a raising hook
asked = []
r = ok(_core.measure_host, f, ((a,),), None, _keep_warming=lambda e: (e < 0.01, 0.0),
       _resettle=lambda: asked.append(1) or len(asked) == 2, **QUICK)
assert r["resettle_dropped"] > 0 and len(r["samples"]) >= 3
expect(ZeroDivisionError, _core.measure_host, f, ((a,),), None,
       _keep_warming=lambda e: (False, 0.0), _resettle=lambda: 1 / 0, **QUICK)

# -- a raising callable: in the warm-up, in the timed loop after some calls, and its note
class Boom(Exception):
    pass


def raise_after(k):
    state = {"n": 0}

    def g():
        state["n"] += 1
        if state["n"] > k:
            raise Boom(state["n"])
    return g


for k, warm in ((0, 0.01), (5, 0.0), (40, 0.0)):
    expect(Boom, _core.measure_host, raise_after(k), ((),), warmup_s=warm, warmup_min=0,
           min_samples=100, max_samples=200, max_time_s=5)
expect(Boom, kbench.bench, raise_after(3), cold_cache=None, **QUICK)
expect(Boom, _core.host_timer_info, raise_after(10), calls=100)

# -- kbench.bench end to end (Python wrappers over the same C), flush, rotate, hot, check=
ok(kbench.bench, np.sum, a, cold_cache=None, **QUICK)
ok(kbench.bench, np.sum, a, cold_cache="flush", **QUICK)
ok(kbench.bench, np.add, a, b, cold_cache="rotate", **QUICK)
ok(kbench.bench, np.sin, a, check=np.sin, **QUICK)
expect(AssertionError, kbench.bench, np.sin, a, check=np.cos, **QUICK)

# -- clock
ok(_core.now_ns)
ok(_core.host_timer_info)
ok(_core.host_timer_info, lambda: None, calls=1000)
ok(_core._clock_step_from_reads, list(range(0, 40000, 20)))
ok(_core._clock_step_from_reads, [])
expect(TypeError, _core._clock_step_from_reads, [1, "x"])
expect(OverflowError, _core._clock_step_from_reads, [-1])
expect(ValueError, _core.host_timer_info, None, 0)
expect(TypeError, _core.host_timer_info, 3, 10)

# -- statistics
for n in (1, 2, 5, 6, 50, 1000, 5000):
    x = rng.lognormal(-9, 0.7, n)
    s = ok(_core.summarize, x, 0.95)
    assert s["n"] == n
    ok(_core.summarize, list(x))
    ok(_core.quantile, x, 0.5)
    ok(_core.quantile, x, [0.0, 0.25, 1.0])
    if n >= 6:
        ok(_core.median_ci, x, 0.95)
    if n >= 5:                  # a 90% interval needs 5 samples
        ok(_core.bootstrap_median_ci, x, 0.9, 200, 1)
    else:                       # too few for its level: refused (the error path)
        expect(ValueError, _core.bootstrap_median_ci, x, 0.9, 200, 1)
    for name in ("ci", "entropy"):
        ok(_core.criterion_check, name, x, 0.01)
        ok(_core.criterion_check, name, x, 0.01, 0.9, 7)
        ok(_core.criterion_check, name, x, 0.01, 0.9, 7, 1e-3)
# a drift: the order shows dependence and the CI widens (summarize and the rule); no order
walk = np.cumsum(rng.normal(size=3000)) + 100.0
assert ok(_core.summarize, walk)["ci_inflation"] > 2.0
ok(_core.summarize, walk, 0.95, False)
ok(_core.criterion_check, "ci", walk, 0.005, 0.95, 97)
ok(_core.stop_rules)
# -- the spread between runs (between_runs.c): t quantiles, the log spread, refusals
for meds in ([1.0, 1.02, 0.99], list(1 + 0.01 * rng.normal(size=20)), [2.0, 2.0]):
    ok(_core.between_runs, meds, 0.95)
for level, df in ((0.95, 1), (0.99, 3.5), (0.5, 1e9)):
    ok(_core.t_quantile, level, df)
for fn, args in ((_core.between_runs, ([1.0, 0.0, 1.0],)), (_core.between_runs, ([],)),
                 (_core.between_runs, ([1.0, 2.0, 3.0], 1.0)), (_core.t_quantile, (1.0, 2.0)),
                 (_core.t_quantile, (0.9, 0.0))):
    expect(ValueError, fn, *args)
# -- the CUDA warm-up's settle rule (steady.c): every branch, and its argument errors
t = np.arange(0.0, 1.5, 0.005)
cap = np.full(t.size, 4, dtype=np.uint64)
ok(_core.clock_settled_at, t, np.full(t.size, 1980.0), np.zeros(t.size, np.uint64))
ok(_core.clock_settled_at, t, 1500 + 480 * np.exp(-t / 0.3), cap)
ok(_core.clock_settled_at, t, np.full(t.size, 1980.0), np.zeros(t.size, np.uint64),
   np.minimum(300 + 900 * t, 700.0))
ok(_core.clock_settled_at, t, np.where(t % 0.1 < 0.05, np.nan, 1600.0), cap, np.full(t.size, np.nan))
# a carried state, the board's maximum clock, a continued capped load, and their errors
flat, p3 = np.full(t.size, 1980.0), np.full(t.size, 300.0)
ok(_core.clock_settled_carried_at, t, flat, np.zeros(t.size, np.uint64), p3, p3, carried_mhz=1980.0,
   carried_ago_s=0.05, power_limit_w=700.0)
ok(_core.clock_settled_carried_at, t, flat, np.zeros(t.size, np.uint64), p3, p3, carried_mhz=None,
   max_sm_mhz=1980.0, power_limit_w=700.0)
ok(_core.clock_settled_carried_at, t, np.full(t.size, 1470.0), cap, p3, p3, carried_mhz=1470.0,
   carried_under_limit=True, carried_ago_s=0.05, carried_loaded_s=3.0, power_limit_w=700.0)
ok(_core.clock_settled_at, t, np.full(t.size, 1470.0), cap, p3, p3, power_limit_w=700.0,
   capped_min_load_s=0.5)
expect(ValueError, _core.clock_settled_carried_at, t, flat, cap, carried_mhz=1.0, carried_loaded_s=-1.0)
expect(ValueError, _core.clock_settled_at, t, flat, cap, capped_min_load_s=-1.0)
ok(_core.clock_settled_carried_at, t, flat, np.zeros(t.size, np.uint64), p3, p3 + 320.0,
   carried_mhz=1980.0, power_limit_w=700.0, late_headroom=0.95)
# NVML's refreshes, as recorded traces are read with the carried rule's own test
ok(_core.nvml_refreshes, t, np.floor(t / 0.1) * 3.0 + 300.0, p3, after_s=0.02)
ok(_core.nvml_refreshes, t)
expect(ValueError, _core.nvml_refreshes, t, p3[:-1])
# a CUPTI sample's busy time: the union of a call's intervals (busy_time.c)
ok(_core.busy_time, [3, 1, 1, 2, 1], [0, 0, 90, 5, 20], [10, 100, 150, 6, 60])
ok(_core.busy_time, [], [], [])
expect(ValueError, _core.busy_time, [1], [5], [4])
expect(ValueError, _core.busy_time, [1, 2], [0], [1])
expect(ValueError, _core.busy_time, [1], [-1], [4])
expect(TypeError, _core.busy_time, 1, [0], [1])
# from where the samples timed while settling are kept
ok(_core.clock_settled_since, t, np.where(t < 0.3, 1410.0, 1980.0), np.zeros(t.size, np.uint64),
   settled_mhz=1980.0)
ok(_core.clock_settled_since, t, np.full(t.size, 1470.0), cap, settled_mhz=1470.0, under_limit=True)
ok(_core.clock_settled_since, t, np.full(t.size, 1980.0), cap, settled_mhz=None, load_start_s=0.2)
expect((TypeError, ValueError), _core.clock_settled_since, t, None, cap, settled_mhz=1980.0)
expect((TypeError, ValueError), _core.clock_settled_since, t, t[:3], cap, settled_mhz=1980.0)
# the verdicts on a CUDA record (regime.c), the plan (plan.c), the CUPTI preference
n20 = 20
rec = {"n": n20, "period_s": 0.005, "sm_mhz": np.r_[np.full(10, 1980.0), np.full(10, 1500.0)],
       "mem_mhz": np.full(n20, 3201.0), "power_w": np.full(n20, 650.0),
       "temp_c": np.full(n20, 60.0), "reasons": np.full(n20, 4, np.uint64),
       "max_sm_clock_mhz": 1980}
for clk in (rec, None, {}, dict(rec, n=0), dict(rec, sm_mhz=np.full(n20, np.nan)),
            dict(rec, power_w=None, mem_mhz=None)):
    ok(_core.clock_summary, clk)
ok(_core.clock_summary, rec, 1980.0)
expect((TypeError, ValueError), _core.clock_summary, [1, 2])
ok(_core.timed_fraction, [1e-3] * 10, 0.02)
ok(_core.timed_fraction, [], None)
ok(_core.busy_fraction, 0.5, 0.002, 0.02)
ok(_core.busy_fraction, None, None, None)
ok(_core.regime_verdict, regime="sustained", settled=False, settle_at_s=1.0, settle_max_s=3.0)
ok(_core.regime_verdict, regime="burst", batches=4, unrecovered=1, start_sm_mhz_min=1500.0,
   start_sm_mhz_max=1980.0)
ok(_core.regime_verdict, settled=True, settled_unlimited=True, timed_limits=0x24,
   settle_sm_mhz=1980.0, timed_sm_mhz=1965.0)
def _cupti_yes():
    return True, False, ""
def _cupti_no():
    return False, True, "busy"
for args in (("cuda", "flush", "cupti"), ("host", None, None), ("hip", "rotate", "graph")):
    p = ok(_core.plan, *args, cupti=_cupti_yes)
    ok(lambda: (repr(p), p.as_dict()))
ok(_core.plan, "cuda", None, None, cupti=_cupti_no)
ok(_core.plan, "cuda", "flush", None, profile="profile=True")
ok(_core.measure_host, np.sum, ((np.ones(64),),), None, plan=_core.plan("host", "flush", None),
   flush_bytes=1 << 20, warmup_s=0.0, max_time_s=0.02)
for args in (("cuda", "none", None), ("hip", None, "cupti"), ("gpu", None, None)):
    expect((TypeError, ValueError), _core.plan, *args)
expect(Exception, _core.plan, "cuda", None, "cupti", cupti=_cupti_no)
expect(TypeError, _core.plan, "cuda", None, None, cupti=lambda: (1, 2))
expect((TypeError, ValueError), _core.measure_host, np.sum, ((np.ones(64),),), None,
       plan=_core.plan("host", None, None), cold="flush")
ok(_core.prefer_cupti, "/nonexistent/libcupti.so")
expect((TypeError, ValueError), _core.prefer_cupti, 3)
for args, kw in ((([0.0, 0.1], [1.0], [0, 0]), {}), (([0.0, 0.2, 0.1], [1.0] * 3, [0] * 3), {}),
                 (([0.0], [1.0], [0]), {"window_s": 0.0}), (([], [], []), {}),
                 (([0.0], ["x"], [0]), {}), (([0.0], [1.0], [0], [1.0, 2.0]), {})):
    expect((TypeError, ValueError), _core.clock_settled_at, *args, **kw)
for fn, args in ((_core.summarize, ([],)), (_core.summarize, ([1.0, float("nan")],)),
                 (_core.summarize, (["a"],)), (_core.summarize, ([1.0], 1.5)),
                 (_core.quantile, ([], 0.5)), (_core.quantile, ([1.0], 2.0)),
                 (_core.quantile, ([1.0], [0.5, "x"])), (_core.median_ci, ([1.0, 2.0], 0.95)),
                 (_core.median_ci, ([1.0] * 10, 0.0)), (_core.bootstrap_median_ci, ([], 0.9)),
                 (_core.bootstrap_median_ci, ([1.0, 2.0], 0.9, 0)),
                 (_core.summarize, (["1", "2"],)), (_core.quantile, ([1.0], "0.5")),
                 (_core.criterion_check, ("nope", [1.0], 0.1)),
                 (_core.criterion_check, ("ci", [1.0, float("nan")], 0.1)),
                 (_core.criterion_check, ("ci", [1.0], 0.1, 0.95, -1)),
                 (_core.criterion_check, ("ci", "abc", 0.1))):
    expect((TypeError, ValueError), fn, *args)

# -- compare: dtypes, broadcasting, strides, byte order, specials, bit-pattern kinds, errors
for dt in (np.float64, np.float32, np.float16, np.int32, np.int64, np.uint8, np.bool_):
    x = (rng.random((33, 17)) * 100).astype(dt)
    ok(_core.compare, x, x, 0.0, 0.0)
    ok(kbench.compare, x, x.astype(np.float64))
ok(_core.compare, a.reshape(16, 16)[::2, ::3], b.reshape(16, 16)[::2, ::3], 1e-3, 1e-3)
ok(_core.compare, a.reshape(16, 16), b[:16], 1e-3, 1e-3)           # broadcast
ok(_core.compare, a.astype(">f8"), a, 0.0, 0.0)                     # byte-swapped
ok(_core.compare, np.float64(2.0), 2.0, 0.0, 0.0)
ok(_core.compare, [1.0, 2.0], 1.0, 0.0, 0.0)
ok(_core.compare, np.zeros((0, 3)), np.zeros((0, 3)), 0.0, 0.0)
sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310])
ok(_core.compare, sp, sp[::-1].copy(), 1e-3, 1e-3, equal_nan=True)
bits16 = rng.integers(0, 1 << 16, 1000, dtype=np.uint16)
bits8 = rng.integers(0, 1 << 8, 1000, dtype=np.uint8)
ok(_core.compare, bits16, bits16, 0.0, 0.0, True, "bf16", "bf16")
ok(_core.compare, bits16, rng.random(1000), 1e-2, 1e-2, out_kind="bf16")
for kind in ("fp8_e4m3", "fp8_e5m2"):
    ok(_core.compare, bits8, bits8, 0.0, 0.0, True, kind, kind)
try:
    import ml_dtypes
    xb = rng.random(500).astype(ml_dtypes.bfloat16)
    c = ok(kbench.compare, xb, xb.astype(np.float32))
    assert c.ok
    ok(kbench.compare, rng.random(64).astype(ml_dtypes.float8_e4m3fn), rng.random(64))
except ImportError:
    print("ml_dtypes not installed: bfloat16 via numpy arrays skipped", file=sys.stderr)
c = ok(kbench.compare, a, a + 1.0)
assert not c.ok
c.report()
for args, kw in (((a, b[:7], 0.0, 0.0), {}), ((a, a, -1.0, 0.0), {}),
                 ((a, a, 0.0, float("nan")), {}), ((a, a, 0.0, float("inf")), {}),
                 ((a, a, 0.0, 0.0), {"out_kind": "bf16"}), ((a, a, 0.0, 0.0), {"out_kind": 3}),
                 ((bits8, a[:1000 % 256], 0.0, 0.0), {"out_kind": "bf16"}),
                 ((np.array(["x"]), np.ones(1), 0.0, 0.0), {}),
                 ((np.ones(1, np.complex128), np.ones(1), 0.0, 0.0), {})):
    expect((TypeError, ValueError), _core.compare, *args, **kw)

# -- CPU kernels and the cache flush
ok(_core.cpu_cache_info)
ok(_core.cpu_flush, 1 << 20)
expect((ValueError, OverflowError, TypeError), _core.cpu_flush, -1)
expect(TypeError, _core.cpu_flush, "x")
src, dst = rng.random(4099), np.empty(4099)
for threads in (1, 2):
    ok(_core.stream_copy, dst, src, threads=threads)
    assert np.array_equal(dst, src)
    c3 = np.empty(4099)
    ok(_core.stream_triad, c3, src, dst, 2.5, threads=threads)
for isa in _core.fma_loop_isas():
    for dtype in ("float64", "float32"):
        ok(_core.fma_loop, 1000, threads=1, isa=isa, dtype=dtype)
        ok(_core.fma_loop_flops_per_iter, isa, dtype)
ok(_core.fma_loop, 1000, 2)
ok(_core.fma_loop, 1000, 2, dtype="float32")
ok(_core.fma_loop_isa)
for fn, args in ((_core.stream_copy, (np.zeros(8, np.float32), np.zeros(8))),
                 (_core.stream_copy, (np.zeros(8), [1.0] * 8)),
                 (_core.stream_copy, (np.zeros(8), np.zeros(9))),
                 (_core.stream_copy, (np.zeros(8), np.zeros(16)[::2])),
                 (_core.stream_copy, (memoryview(bytes(64)).cast("d"), np.zeros(8))),
                 (_core.stream_triad, (np.zeros(8), np.zeros(7), np.zeros(8), 1.0)),
                 (_core.stream_triad, (np.zeros(8), np.zeros(8), np.zeros(8), "2")),
                 (_core.fma_loop, (-1,)), (_core.fma_loop, (1, 1, "sse9")),
                 (_core.fma_loop, (1, 1, None, "float16")),
                 (_core.fma_loop_flops_per_iter, ("sse9",)),
                 (_core.fma_loop_flops_per_iter, (None, "int8"))):
    expect((TypeError, ValueError), fn, *args)

# -- GPU loaders' failing paths (no GPU library here: each must raise a kbench error)
if _core.HAVE_CUDA:
    ok(_core.gpu_library_status)
    ok(_core.gpu_library_status)          # remembered
    for fn, args, kw in ((_core.cuda_device_count, (), {}), (_core.cuda_device_info, (), {}),
                         (_core.cuda_device_info, (), {"ordinal": 0}),
                         (_core.nvml_snapshot, (0,), {}),
                         (_core.nvml_sampler_start, (0, 0.005), {}),
                         (_core.nvml_sampler_start, (0, -1.0), {}),
                         (_core.nvml_sampler_stop, (None,), {}),
                         (_core.launch_empty, (), {}),
                         (_core.DeviceBuffer, (1024,), {}),
                         (_core.CudaKernel, ("extern \"C\" __global__ void k() {}", "k"), {}),
                         (_core.graph_capture, (lambda: None, ((),)), {}),
                         (_core.measure_cuda, (lambda: None, ((),)), {"stream": 0}),
                         (_core.nvml_clock_event_reason_names, (-1,), {}),
                         (_core.nvml_p2p, (["0000:01:00.0", "0000:02:00.0"],), {}),
                         (_core.nvml_p2p, (["0000:01:00.0", 7],), {}),
                         (_core.nvml_p2p, ("0000:01:00.0",), {})):
        gpu_path(fn, *args, **kw)
    for lib, code in (("cuda", 2), ("cupti", 39), ("nvml", 999), ("nvrtc", 6), ("cuda", 777),
                      ("hip", 1)):
        gpu_path(_core._raise_check_error, lib, code, "api->someCall(&h, 42)")
    ok(_core._raise_check_error, "nvml", 0, "f()")
    # measure_hip's option errors name the option (the message is rebuilt around the value's)
    for kw in ({"gate_batch": 2.5}, {"gate_batch": 10**30}, {"gate_timeout_s": "x"}):
        expect((TypeError, OverflowError), _core.measure_hip, (object(),), stream=1, **kw)
    ok(_core.nvml_clock_event_reason_names, 0x4 | 0x20 | (1 << 40))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu_path(kbench.bench, lambda: None, device="cuda", **QUICK)

print(f"exercise done: {calls['ok']} calls returned, {calls['expected_errors']} raised as "
      f"expected")
EOF

# ---------------------------------------------------------------- valgrind
parse_xml() {   # parse_xml FILE LABEL -> prints counts; exit 1 when kbench frames have errors
  "$PY" - "$1" "$2" <<'EOF'
import sys
import xml.etree.ElementTree as ET

path, label = sys.argv[1], sys.argv[2]
root = ET.parse(path).getroot()
counts = {"errors": 0, "definite_leaks": 0, "definite_bytes": 0, "possible_leaks": 0,
          "kb_errors": 0, "kb_definite": 0, "kb_definite_bytes": 0, "kb_possible": 0}
shown = []
for err in root.iter("error"):
    kind = err.findtext("kind")
    frames = [(f.findtext("obj") or "", f.findtext("fn") or "?", f.findtext("file") or "",
               f.findtext("line") or "") for f in err.iter("frame")]
    in_kb = any("/kbench/_core" in obj for obj, *_ in frames)
    lb = err.find("xwhat/leakedbytes")
    nbytes = int(lb.text) if lb is not None else 0
    if kind == "Leak_DefinitelyLost":
        counts["definite_leaks"] += 1
        counts["definite_bytes"] += nbytes
        counts["kb_definite"] += in_kb
        counts["kb_definite_bytes"] += nbytes if in_kb else 0
    elif kind.startswith("Leak_"):
        counts["possible_leaks"] += kind == "Leak_PossiblyLost"
        counts["kb_possible"] += in_kb and kind == "Leak_PossiblyLost"
        continue
    else:
        counts["errors"] += 1
        counts["kb_errors"] += in_kb
    # kbench's reports in full; definite leaks elsewhere briefly (CPython's free lists reuse
    # memory, so a leaked object can carry the stack of whoever first allocated it)
    if in_kb or kind == "Leak_DefinitelyLost":
        what = err.findtext("what") or err.findtext("xwhat/text") or kind
        depth = 14 if in_kb else 6
        stack = "\n".join(f"      {fn} ({file}:{line})" if file else f"      {fn} [{obj}]"
                          for obj, fn, file, line in frames[:depth])
        shown.append(f"  {kind}{'' if in_kb else ' (not in _core)'}: {what}\n{stack}")
print(f"{label}: memory errors {counts['errors']} (in _core {counts['kb_errors']}), "
      f"definite leaks {counts['definite_leaks']} / {counts['definite_bytes']} B "
      f"(in _core {counts['kb_definite']} / {counts['kb_definite_bytes']} B), "
      f"possibly lost {counts['possible_leaks']} (in _core {counts['kb_possible']})")
for s in shown[:30]:
    print(s)
sys.exit(1 if counts["kb_errors"] or counts["kb_definite"] else 0)
EOF
}

supp_from_xml() {   # the <suppression> blocks valgrind generated, as a suppression file
  "$PY" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET
seen = set()
for s in ET.parse(sys.argv[1]).getroot().iter("suppression"):
    text = s.findtext("rawtext")
    if text not in seen:
        seen.add(text)
        print(text)
EOF
}

VG=(valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite
    --error-exitcode=42 --num-callers=30 --xml=yes)

run_valgrind() {
  command -v valgrind >/dev/null || { echo "valgrind not found"; return 1; }
  "$PY" -c "import kbench._core" 2>/dev/null || {
    echo "kbench._core does not import: build in place first (python3 setup.py build_ext --inplace)"
    return 1; }
  echo "== valgrind baseline: python -c 'import numpy'"
  ( cd "$OUT" && PYTHONMALLOC=malloc "${VG[@]}" --gen-suppressions=all \
      --xml-file="$OUT/baseline.xml" "$PY" -c "import numpy" )
  echo "   valgrind exit $?"
  supp_from_xml "$OUT/baseline.xml" > "$OUT/baseline.supp"
  parse_xml "$OUT/baseline.xml" "baseline (import numpy)" > "$OUT/baseline.summary"
  cat "$OUT/baseline.summary"
  echo "   $(grep -c '^{' "$OUT/baseline.supp") suppressions written to $OUT/baseline.supp"

  echo "== valgrind: exercise of kbench's C paths (KBENCH_LLC_BYTES=$LLC)"
  local t0=$SECONDS
  KBENCH_LLC_BYTES=$LLC PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONMALLOC=malloc "${VG[@]}" \
      --suppressions="$OUT/baseline.supp" --xml-file="$OUT/exercise.xml" \
      "$PY" "$OUT/exercise.py" > "$OUT/exercise.out" 2>&1
  local rc=$?
  cat "$OUT/exercise.out"
  echo "   valgrind exit $rc (42: some unsuppressed error or definite leak anywhere), $((SECONDS - t0)) s"
  grep -q "^exercise done" "$OUT/exercise.out" || { echo "FAIL: the exercise did not finish"; return 1; }
  parse_xml "$OUT/exercise.xml" "exercise (baseline suppressed)" | tee "$OUT/exercise.summary"
  local prc=${PIPESTATUS[0]}
  if [ "$prc" -ne 0 ]; then
    echo "FAIL: memory errors or definite leaks with a frame in kbench's _core (above)"
    return 1
  fi
  echo "PASS: no memory error and no definite leak in kbench's _core"
}

# ---------------------------------------------------------------- AddressSanitizer
run_asan() {
  local san=${SANITIZE:-address}
  local libasan
  libasan=$(gcc -print-file-name=libasan.so)
  [ -e "$libasan" ] || { echo "libasan.so not found (gcc -print-file-name)"; return 1; }
  local tmp rc
  tmp=$(mktemp -d /tmp/kbench_asan.XXXXXX)
  asan_in "$tmp" "$san" "$libasan"
  rc=$?
  rm -rf "$tmp"
  return $rc
}

asan_in() {   # asan_in TMPDIR SANITIZE LIBASAN: copy, build and test there
  local tmp=$1 san=$2 libasan=$3
  echo "== ASan: KBENCH_SANITIZE=$san build in $tmp"
  # the tree as git sees it, plus files not yet committed (not the build outputs)
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tmp") || return 1
  else
    tar --exclude=./build --exclude='*.so' --exclude=.git -cf - . | tar -xf - -C "$tmp" || return 1
  fi
  ( cd "$tmp" && KBENCH_SANITIZE=$san "$PY" setup.py -q build_ext --inplace \
      > "$OUT/asan_build.log" 2>&1 ) || { echo "ASan build failed:"; tail -20 "$OUT/asan_build.log"; return 1; }
  if ! nm -D "$tmp"/kbench/_core*.so | grep __asan_report >/dev/null; then  # no -q: pipefail+SIGPIPE
    echo "the build in $tmp is not instrumented (no __asan_report symbols)"; return 1
  fi
  echo "== ASan: pytest (LD_PRELOAD=$libasan, PYTHONMALLOC=malloc so PyMem buffers are checked too)"
  local t0=$SECONDS
  rm -f "$OUT"/asan_report.*     # pytest captures fd 2, so reports go to files (one per pid)
  ( cd "$tmp" && unset KBENCH_LLC_BYTES && PYTHONMALLOC=malloc LD_PRELOAD=$libasan \
      ASAN_OPTIONS="detect_leaks=0:log_path=$OUT/asan_report" PYTHONPATH="$tmp" \
      "$PY" -m pytest -q -p no:cacheprovider tests/test_bench.py tests/test_stats.py \
      tests/test_compare.py tests/test_cpu_kernels.py tests/test_clock_settle.py \
      tests/test_loop_settling.py tests/test_cuda_pipeline_fake_driver.py \
      tests/test_nvml_topology.py tests/test_busy_time.py tests/test_cuda_diagnostics.py ) \
      > "$OUT/asan_pytest.log" 2>&1
  local rc=$?
  tail -5 "$OUT/asan_pytest.log"
  local reports
  reports=$(cat "$OUT/asan_pytest.log" "$OUT"/asan_report.* 2>/dev/null |
            grep -c "ERROR: AddressSanitizer\|runtime error:")
  echo "   pytest exit $rc, AddressSanitizer/UBSan reports: $reports, $((SECONDS - t0)) s (log $OUT/asan_pytest.log)"
  cat "$OUT"/asan_report.* 2>/dev/null | grep -A25 "ERROR: AddressSanitizer" | head -60
  if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ]; then
    echo "FAIL: ASan run"
    return 1
  fi
  echo "PASS: ASan run clean"
}

case "$mode" in
  valgrind) run_valgrind || status=1 ;;
  asan) run_asan || status=1 ;;
  all) run_valgrind || status=1; run_asan || status=1 ;;
  *) echo "usage: $0 [valgrind|asan|all]"; exit 2 ;;
esac
exit $status
