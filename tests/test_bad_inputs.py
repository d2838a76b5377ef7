"""Bad inputs across bench, compare, ab, sweep, Result, the drop-in helpers and the command line.

Each case gets a clear exception whose message names the problem (or a refusal with a message
and exit status 2 on the command line), and the next ordinary call works: a fresh small bench
and compare succeed after every case. Cases whose fix is on the C-core branch (robust-c) are
strict xfails, so they flip to failures, to be unmarked, when the branches merge.
"""
import functools
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import kbench
from kbench.workflow.cli import main as cli_main

FAST = dict(warmup_s=0.0, max_time_s=0.05, cold_cache=None)
A = np.ones(64)
ROBUST_C = "fixed on branch robust-c"


@pytest.fixture(autouse=True)
def the_next_ordinary_call_works():
    """After each case: a fresh small bench and compare succeed."""
    yield
    r = kbench.bench(np.sum, A, bytes=A.nbytes, **FAST)
    assert r.n > 0 and np.isfinite(r.median) and r.median > 0
    assert kbench.compare(A * 2, A + A).ok


def raises(call, error, match):
    with pytest.raises(error, match=match) as ei:
        call()
    return ei.value


def bench(*args, **kw):
    return lambda: kbench.bench(*args, **{**FAST, **kw})


def returns_none(*_):
    return None


def fill_nothing(out, x):
    return None


# ------------------------------------------------------------------ kbench.bench

BENCH_CASES = [
    ("fn int", bench(42), TypeError, "fn must be callable, got int"),
    ("fn None", bench(None), TypeError, "fn must be callable, got NoneType"),
    ("cold_cache word", bench(np.sum, A, cold_cache="lukewarm"), ValueError,
     "cold_cache must be None, 'flush' or 'rotate', got 'lukewarm'"),
    ("cold_cache int", bench(np.sum, A, cold_cache=1), ValueError, "cold_cache must be"),
    ("device tpu", bench(np.sum, A, device="tpu"), ValueError, "device must be 'auto'"),
    ("device int", bench(np.sum, A, device=0), ValueError, "device must be .* got 0"),
    ("mode on cpu", bench(np.sum, A, mode="events"), ValueError,
     "mode 'events' needs a CUDA device"),
    ("min_samples str", bench(np.sum, A, min_samples="x"), TypeError,
     "min_samples must be an int, got str"),
    ("min_samples float", bench(np.sum, A, min_samples=2.5), TypeError,
     "min_samples must be an int, got float"),
    ("max_samples 0", bench(np.sum, A, max_samples=0), ValueError, "max_samples must be >= 1"),
    ("min > max", bench(np.sum, A, min_samples=10, max_samples=5), ValueError,
     "must not exceed max_samples"),
    ("max_time_s 0", bench(np.sum, A, max_time_s=0), ValueError, "max_time_s must be >"),
    ("max_time_s nan", bench(np.sum, A, max_time_s=float("nan")), ValueError,
     "max_time_s must be > 0.*got nan"),
    ("warmup_s negative", bench(np.sum, A, warmup_s=-1), ValueError, "warmup_s must be >= 0"),
    ("warmup_s nan", bench(np.sum, A, warmup_s=float("nan")), ValueError,
     "warmup_s must be >= 0.*got nan"),
    ("warmup_s str", bench(np.sum, A, warmup_s="1"), TypeError,
     "warmup_s must be a number, got str"),
    ("target 0", bench(np.sum, A, target=0), ValueError, "target must be > 0"),
    ("target nan", bench(np.sum, A, target=float("nan")), ValueError, "target must be > 0"),
    ("target str", bench(np.sum, A, target="1%"), TypeError, "target must be a number"),
    ("ci_level 0", bench(np.sum, A, ci_level=0), ValueError, "ci_level must be > 0"),
    ("ci_level 1.5", bench(np.sum, A, ci_level=1.5), ValueError, "ci_level"),
    ("criterion word", bench(np.sum, A, criterion="magic"), ValueError,
     "unknown stopping rule .magic."),
    ("criterion int", bench(np.sum, A, criterion=3), TypeError, "criterion must be a str"),
    ("flops negative", bench(np.sum, A, flops=-1), ValueError,
     "flops must be a non-negative number"),
    ("flops inf", bench(np.sum, A, flops=float("inf")), ValueError,
     "flops must be a non-negative number of flops per call, got inf"),
    ("flops str", bench(np.sum, A, flops="64"), TypeError,
     "flops must be a number of flops per call, got str"),
    ("bytes bool", bench(np.sum, A, bytes=True), TypeError, "bytes must be a number .* got bool"),
    ("bytes numpy negative", bench(np.sum, A, bytes=np.int64(-8)), ValueError,
     "bytes must be a non-negative number"),
    ("bytes numpy nan", bench(np.sum, A, bytes=np.float32("nan")), ValueError,
     "bytes must be a non-negative number"),
    ("name bytes", bench(np.sum, A, name=b"x"), TypeError, r"name must be a str, got bytes"),
    ("name int", bench(np.sum, A, name=7), TypeError, "name must be a str, got int"),
    ("memory text", bench(np.sum, A, memory="yes"), TypeError,
     "memory must be True or False, got str"),
    ("memory None", bench(np.sum, A, memory=None), TypeError,
     "memory must be True or False, got NoneType"),
    ("kwargs list", bench(np.sum, A, kwargs=[1]), TypeError,
     "kwargs must be a dict of keyword arguments for fn, got list"),
    ("unknown option", bench(np.sum, A, bogus=1), TypeError,
     r"unexpected options for the CPU backend: \['bogus'\]"),
    ("flush_bytes negative", bench(np.sum, A, cold_cache="flush", flush_bytes=-5), ValueError,
     r"flush_bytes must be 1 \.\. 1099511627776 bytes \(1 TiB\), got -5"),
    ("flush_bytes huge", bench(np.sum, A, cold_cache="flush", flush_bytes=2**63), ValueError,
     r"flush_bytes must be 1 \.\. .*got 9223372036854775808"),
    ("flush_bytes without a flush", bench(np.sum, A, cold_cache=None, flush_bytes=1 << 20),
     ValueError, "flush_bytes applies to cold_cache='flush', not cold_cache=None"),
    ("rotate_sets with a list", bench(np.sum, arg_sets=[(A,), (A,)], rotate_sets=50), ValueError,
     r"rotate_sets .* applies to arg_sets=f\(i\) -> tuple"),
    ("flush_bytes str", bench(np.sum, A, cold_cache="flush", flush_bytes="1M"), TypeError,
     "flush_bytes must be an int number of bytes, got str"),
    ("arg_sets empty", bench(np.sum, arg_sets=[]), ValueError, "arg_sets is empty"),
    ("arg_sets int", bench(np.sum, arg_sets=5), TypeError,
     "arg_sets must be a list of argument tuples or a factory"),
    ("arg_sets and args", bench(np.sum, A, arg_sets=[(A,)]), TypeError,
     "either positional args or arg_sets=, not both"),
    ("arg_sets factory, no count", bench(lambda i: (A,), arg_sets=lambda i: (A,)), ValueError,
     r"factory needs a count \(rotate_sets=\)"),
    ("rotate_sets float", bench(np.sum, arg_sets=lambda i: (A,), rotate_sets=2.5), TypeError,
     r"rotate_sets must be an int number of argument sets, got float \(2\.5\)"),
    ("rotate_sets str", bench(np.sum, arg_sets=lambda i: (A,), rotate_sets="3"), TypeError,
     r"rotate_sets must be an int number of argument sets, got str \('3'\)"),
    ("rotate_sets None", bench(np.sum, arg_sets=lambda i: (A,), rotate_sets=None), TypeError,
     "rotate_sets must be an int number of argument sets, got NoneType"),
    ("rotate_sets bool", bench(np.sum, arg_sets=lambda i: (A,), rotate_sets=True), TypeError,
     "rotate_sets must be an int number of argument sets, got bool"),
    ("rotate_sets negative", bench(np.sum, arg_sets=lambda i: (A,), rotate_sets=-3), ValueError,
     r"factory needs a count \(rotate_sets=\) of at least 1, got -3"),
    ("rotate a scalar", bench(abs, 3, cold_cache="rotate"), ValueError,
     "rotate' needs array arguments"),
    ("out_arg out of range", bench(fill_nothing, A.copy(), A, out_arg=2, check=A), ValueError,
     "out_arg=2 is not a position in the 2 positional argument"),
    ("out_arg unknown keyword", bench(fill_nothing, A.copy(), A, out_arg="dst", check=A),
     ValueError, "out_arg='dst' is not a keyword in kwargs"),
    ("out_arg bool", bench(fill_nothing, A.copy(), A, out_arg=True, check=A), TypeError,
     r"out_arg must be a position in args \(int\) or a keyword name \(str\), got bool"),
    ("check: wrong answer", bench(np.cumsum, A, check=np.cumsum(A) + 1), AssertionError,
     "output does not match the reference; nothing was timed"),
    ("check: unwritten out_arg", bench(fill_nothing, A * 2, A, out_arg=0, check=A * 2),
     AssertionError, "nothing was timed"),
    ("check: callable returned None", bench(returns_none, A, check=A), TypeError,
     "check= was given but the callable returned None"),
    ("check: closure returned None", bench(lambda: None, check=lambda: A * 2.0), TypeError,
     "callable returned None.*closure that writes a captured array must return it"),
    ("check: reference is text", bench(np.cumsum, A, check="abc"), TypeError,
     "ref is not numeric"),
    ("check: output is text", bench(lambda: "abc", check=A), TypeError,
     "out is not numeric"),
    ("check: shapes that do not broadcast", bench(np.cumsum, A, check=np.ones(5)), ValueError,
     r"shape \(64,\) and ref shape \(5,\)"),
    ("check: negative rtol", bench(np.cumsum, A, check=np.cumsum(A), rtol=-1), ValueError,
     "rtol must be finite and >= 0"),
    # a tolerance without a check was ignored without a word: nothing was checked
    ("rtol without check", bench(np.cumsum, A, rtol=0.1), ValueError,
     r"rtol=0\.1 came without check="),
    ("atol without check", bench(np.cumsum, A, atol=0), ValueError,
     r"atol=0 came without check="),
    ("rtol and atol without check", bench(np.cumsum, A, rtol=0.1, atol=1e-3), ValueError,
     r"rtol=0\.1 and atol=0\.001 came without check="),
    # OverflowError "int too large to convert to float", naming neither
    ("bytes 10**400", bench(np.sum, A, bytes=10**400), ValueError,
     r"bytes must be a non-negative number of bytes per call that fits a float, got an int "
     r"of 401 digits"),
    ("flops 10**400", bench(np.sum, A, flops=10**400), ValueError,
     "flops must be a non-negative number of flops per call that fits a float"),
    # target=True ran at 1.0 (a 100% CI), warmup_s=True for 1 s
    ("target bool", bench(np.sum, A, target=True), TypeError, "target must be a number, got bool"),
    ("warmup_s bool", bench(np.sum, A, warmup_s=True), TypeError,
     "warmup_s must be a number, got bool"),
    # the C string ended at the NUL: "ci\0garbage" ran as 'ci'
    ("criterion with a NUL", bench(np.sum, A, criterion="ci\x00garbage"), ValueError,
     "unknown criterion"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in BENCH_CASES],
                         ids=[c[0] for c in BENCH_CASES])
def test_bench_refuses(call, error, match):
    raises(call, error, match)


@pytest.mark.parametrize("past", [1, 300_000, 10**12])
def test_a_factory_count_past_the_rotation_limit_is_refused_before_building_sets(past):
    # each set is built up front: 10**12 of them ran until the OOM killer stopped the process
    from kbench.measure.coldcache import max_rotation_sets
    limit = max_rotation_sets()         # 4096, more on a last-level cache past 32 MiB
    count = limit + past
    calls = []

    def factory(i):
        calls.append(i)
        if len(calls) > limit:
            raise RuntimeError("built past the limit")
        return (A,)

    with pytest.raises(ValueError, match=rf"rotate_sets={count} is more than the {limit} "
                                         r"argument sets a rotation may have "
                                         r"\(MAX_ROTATION_SETS, scaled to the last-level cache\)"):
        kbench.bench(np.sum, arg_sets=factory, rotate_sets=count, **FAST)
    assert calls == []


@pytest.mark.parametrize("llc,limit", [(None, 4096), ("32M", 4096), ("33M", 8192),
                                       ("320M", 40960), ("1G", 131072)])
def test_the_rotation_limit_scales_with_the_cache(llc, limit, monkeypatch):
    # at KBENCH_LLC_BYTES=320M and 1G, 4096 sets refused rotations of sets up to 160 kB and
    # 512 kB, which a 32 MiB cache rotates out with sets of 17 kB
    from kbench.measure.coldcache import max_rotation_sets, rotation_count
    if llc is None:
        assert max_rotation_sets(0) == max_rotation_sets(16 << 20) == limit
        return
    monkeypatch.setenv("KBENCH_LLC_BYTES", llc)
    assert max_rotation_sets() == limit
    cache = _core_llc()
    assert rotation_count(17 << 10, cache) <= limit
    with pytest.raises(ValueError, match="cannot evict"):
        rotation_count(7 << 10, cache)
    assert kbench.bench(np.sum, arg_sets=lambda i: (A,), rotate_sets=limit, cold_cache=None,
                        warmup_s=0.0, max_time_s=0.05).n > 0


def _core_llc():
    from kbench import _core
    return int(_core.cpu_cache_info()["llc_bytes"])


def test_a_check_callable_that_raises_keeps_its_exception_and_says_where():
    e = raises(bench(np.cumsum, A, check=lambda x: 1 / 0), ZeroDivisionError, "division")
    if sys.version_info >= (3, 11):
        assert any("check= callable (the reference); nothing was timed" in n
                   for n in e.__notes__)


def test_a_check_callable_that_returns_none_is_named():
    raises(bench(np.cumsum, A, check=lambda x: None), TypeError,
           r"the check= callable returned None; it must return the reference output")


def test_a_callable_that_raises_in_the_check_keeps_its_exception_and_says_where():
    def broken(x):
        raise KeyError("boom")
    e = raises(bench(broken, A, check=A), KeyError, "boom")
    if sys.version_info >= (3, 11):
        assert any("first call, the correctness check" in n for n in e.__notes__)


@pytest.mark.parametrize("device,options,names,hint", [
    ("cpu", {"args": (A,)}, "CPU backend: ['args']", "fn's arguments are passed positionally"),
    ("cpu", {"warmup": 0.1}, "CPU backend: ['warmup']", "did you mean 'warmup_s'?"),
    ("cpu", {"regime": "burst"}, "CPU backend: ['regime']", "'regime' is a GPU option: pass "
                                                            "device='cuda'"),
    ("cuda", {"gatee": False}, "CUDA backend: ['gatee']", "did you mean 'gate'?"),
    ("cpu", {"out": A}, "CPU backend: ['out']", "if it is fn's keyword argument, pass "
                                                "kwargs={'out': ...}"),
], ids=["args keyword", "misspelt warmup_s", "a GPU option on the CPU", "misspelt CUDA option",
        "fn's keyword given to bench"])
def test_an_unknown_option_is_named_before_fn_is_called(device, options, names, hint):
    """Not fn's own error: before, the check and the memory probe called fn (with the wrong
    arguments, for args=) before the options were read. The CUDA case needs no GPU: nothing
    is opened before the check."""
    calls = []

    def fn(*a):
        calls.append(a)
        return A

    with pytest.raises(TypeError, match="unexpected options for the " + re.escape(names)) as e:
        kbench.bench(fn, device=device, check=A, **options)
    assert hint in str(e.value) and calls == []


async def _coroutine_fn():
    return A


async def _async_gen_fn():
    yield A


def _generator_fn():
    yield A


@pytest.mark.parametrize("fn,what", [
    (_coroutine_fn, "is an async function"),
    (_async_gen_fn, "is an async function"),
    (functools.partial(_coroutine_fn), "is an async function"),
    (_generator_fn, "is a generator function"),
], ids=["coroutine function", "async generator", "partial of a coroutine function",
        "generator function"])
def test_a_callable_that_defers_its_body_is_refused(fn, what):
    """Timing it would time the coroutine's or generator's creation (about 1 us) and leave a
    'never awaited' coroutine behind."""
    with pytest.raises(TypeError, match=what + ".* only its creation would be timed"):
        kbench.bench(fn)


def test_the_cuda_backends_options_are_its_runs_keywords_less_bench_own():
    from kbench.backends import cuda
    assert {"stream", "gate", "keep_busy", "regime", "pre_sample", "unroll"} <= set(cuda.OPTIONS)
    assert not {"loop", "check", "device", "cold_cache", "mode"} & set(cuda.OPTIONS)


# ------------------------------------------------------------------ kbench.compare

COMPARE_CASES = [
    ("text", lambda: kbench.compare(np.array(["abc"] * A.size), A), TypeError,
     "unsupported dtype <U3 of out"),
    ("None", lambda: kbench.compare(np.array([None] * A.size), A), TypeError,
     "unsupported dtype object of out"),
    ("objects", lambda: kbench.compare(np.array([object()]), A[:1]), TypeError,
     "unsupported dtype object"),
    ("negative rtol", lambda: kbench.compare(A, A, rtol=-1), ValueError,
     "rtol must be finite and >= 0"),
    ("nan atol", lambda: kbench.compare(A, A, atol=float("nan")), ValueError,
     "atol must be finite and >= 0"),
    ("shapes that do not broadcast", lambda: kbench.compare(np.ones(4), np.ones(5)), ValueError,
     r"shape \(4,\) and ref shape \(5,\)"),
    ("assert_close on a mismatch", lambda: kbench.assert_close(A, A + 1), AssertionError,
     "Comparison FAILED"),
    # bool("no") is True: these passed NaN against NaN
    ("equal_nan a word", lambda: kbench.compare(A, A, equal_nan="no"), TypeError,
     r"equal_nan must be True or False, got str \('no'\)"),
    ("equal_nan a digit", lambda: kbench.compare(A, A, equal_nan="0"), TypeError,
     "equal_nan must be True or False, got str"),
    ("equal_nan an int", lambda: kbench.assert_close(A, A, equal_nan=1), TypeError,
     "equal_nan must be True or False, got int"),
    # numpy's "inhomogeneous shape" message said neither compare nor which side
    ("ragged out", lambda: kbench.compare([[1, 2], [3]], [[1, 2], [3, 4]]), ValueError,
     r"compare: out \(list\) is not a rectangular array"),
    ("ragged ref", lambda: kbench.compare([[1, 2], [3, 4]], [[1, 2], [3]]), ValueError,
     r"compare: ref \(list\) is not a rectangular array"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in COMPARE_CASES],
                         ids=[c[0] for c in COMPARE_CASES])
def test_compare_refuses(call, error, match):
    raises(call, error, match)


def test_compare_takes_numpy_bools_for_equal_nan():
    nan = np.array([np.nan, 1.0])
    assert kbench.compare(nan, nan.copy(), equal_nan=np.bool_(True)).ok
    assert not kbench.compare(nan, nan.copy(), equal_nan=np.bool_(False)).ok


# ------------------------------------------------------------------ kbench.ab

def ab(arms, **kw):
    return lambda: kbench.ab(arms, A, **{**FAST, **kw})


AB_CASES = [
    ("one arm", ab({"a": np.sum}), ValueError, "needs at least two arms"),
    ("arm not callable", ab({"a": np.sum, "b": 3}), TypeError, "arm 'b' is not callable"),
    ("bare functions", ab([np.sum, np.sum]), TypeError,
     r"arms must be a dict \{name: fn\} or a list of \(name, fn\) pairs"),
    ("duplicate names", ab([("a", np.sum), ("a", np.sum)]), ValueError,
     "arm names must be distinct"),
    ("too few trials", ab({"a": np.sum, "b": np.sum}, trials=3), ValueError,
     "trials must be an integer >= 6"),
    ("trials text", ab({"a": np.sum, "b": np.sum}, trials="x"), ValueError,
     "trials must be an integer"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in AB_CASES],
                         ids=[c[0] for c in AB_CASES])
def test_ab_refuses(call, error, match):
    raises(call, error, match)


# ------------------------------------------------------------------ kbench.sweep

def sum_case(n):
    return np.sum, (np.ones(n),)


SWEEP_CASES = [
    ("axes a list", lambda: kbench.sweep(sum_case, axes=[1, 2]), ValueError,
     r"axes must be a non-empty dict \{name: \[values\]\}"),
    ("factory not callable", lambda: kbench.sweep(3, axes={"n": [1]}), TypeError,
     "factory must be callable, got int"),
    ("axis without values", lambda: kbench.sweep(sum_case, axes={"n": []}), ValueError,
     "axis 'n' has no values"),
    ("axis named like a row field", lambda: kbench.sweep(sum_case, axes={"median_s": [1]}),
     ValueError, "collides with a row field"),
    ("factory returns a number", lambda: kbench.sweep(lambda n: 42, axes={"n": [1]}, **FAST),
     TypeError, r"must return \(fn, args\) or a dict"),
    ("factory dict without fn", lambda: kbench.sweep(lambda n: {"args": ()}, axes={"n": [1]},
                                                     **FAST), ValueError, "has no 'fn'"),
    ("unknown bench option", lambda: kbench.sweep(sum_case, axes={"n": [4]}, bogus=1, **FAST),
     TypeError, "unexpected options for the CPU backend"),
    ("isolate with a lambda", lambda: kbench.sweep(lambda n: (abs, (n,)), axes={"n": [1]},
                                                   isolate=True, **FAST), TypeError,
     "picklable"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in SWEEP_CASES],
                         ids=[c[0] for c in SWEEP_CASES])
def test_sweep_refuses(call, error, match):
    raises(call, error, match)


# ------------------------------------------------------------------ Result

def saved_result_doc():
    return kbench.bench(np.sum, A, **FAST).to_dict()


RESULT_CASES = [
    ("from_dict None", lambda: kbench.Result.from_dict(None), TypeError,
     "not a kbench result: a NoneType"),
    ("from_dict list", lambda: kbench.Result.from_dict([1, 2]), TypeError,
     "not a kbench result: a list"),
    ("from_dict other schema", lambda: kbench.Result.from_dict({"schema": "x/1"}), ValueError,
     "not a kbench result .schema 'x/1'"),
    ("from_dict missing fields", lambda: kbench.Result.from_dict(
        {"schema": "kbench.result/1", "name": "x"}), ValueError,
     "kbench result without device, backend"),
    ("from_dict stats a list", lambda: kbench.Result.from_dict(
        {**saved_result_doc(), "stats": []}), ValueError,
     "field 'stats' is a list, not a JSON object"),
    ("from_json truncated", lambda: kbench.Result.from_json('{"schema": "kbench.res'),
     ValueError, "not a kbench result: invalid or truncated JSON"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in RESULT_CASES],
                         ids=[c[0] for c in RESULT_CASES])
def test_result_refuses(call, error, match):
    raises(call, error, match)


@pytest.mark.parametrize("content,error,match", [
    (None, FileNotFoundError, "No such file"),
    ("", ValueError, "invalid or truncated JSON"),
    ("[1, 2]", TypeError, "not a kbench result: a list"),
    ('"a string"', TypeError, "not a kbench result: a str"),
], ids=["missing", "empty", "list", "string"])
def test_result_load_refuses_naming_the_file(content, error, match, tmp_path):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    e = raises(lambda: kbench.Result.load(str(path)), error, match)
    assert str(path) in str(e)


def test_result_to_json_into_a_missing_directory_names_the_path_given(tmp_path):
    # the error named mkstemp's temporary file, r.json.u6hy0rto.tmp, a name the caller never saw
    r = kbench.bench(np.sum, A, **FAST)
    path = tmp_path / "missing" / "r.json"
    with pytest.raises(FileNotFoundError) as ei:
        r.to_json(str(path))
    assert ei.value.filename == str(path) and ".tmp" not in str(ei.value)
    assert f"No such directory {path.parent}" in str(ei.value)
    with pytest.raises(IsADirectoryError) as ei:
        r.to_json(str(tmp_path))
    assert ei.value.filename == str(tmp_path) and ".tmp" not in str(ei.value)
    assert not list(tmp_path.parent.glob("*.tmp"))


def test_result_with_a_bytes_name_still_serialises():
    """A Result built by hand with a bytes name (bench refuses one) must not break to_json."""
    r = kbench.bench(np.sum, A, **FAST)
    r.name = b"x"
    assert json.loads(r.to_json())["name"] == "b'x'"


# ------------------------------------------------------------------ drop-in helpers

def do_bench(*args, **kw):
    from kbench.testing import do_bench as _do_bench
    return lambda: _do_bench(*args, **kw)


TESTING_CASES = [
    ("do_bench not callable", do_bench(3), TypeError, "fn must be callable, got int"),
    ("do_bench return_mode", do_bench(returns_none, return_mode="bogus"), ValueError,
     "return_mode must be one of"),
    ("do_bench quantiles text", do_bench(returns_none, quantiles="x"), ValueError,
     "quantiles must be a list of numbers in"),
    ("do_bench quantiles > 1", do_bench(returns_none, quantiles=[0.5, 2]), ValueError,
     "quantiles must be a list of numbers in"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in TESTING_CASES],
                         ids=[c[0] for c in TESTING_CASES])
def test_dropin_refuses(call, error, match):
    raises(call, error, match)


# ------------------------------------------------------------------ the command line

GOOD = {"schema": "kbench.result/1", "name": "k", "device": "cpu", "backend": "host",
        "samples_s": [1e-3] * 20, "stats": {"median": 1e-3, "ci_low": 0.99e-3,
                                            "ci_high": 1.01e-3},
        "stop": {}, "cold_cache": {}}

BAD_FILES = [
    ("missing", None, "no such results file"),
    ("directory", "<dir>", "cannot read"),
    ("empty", b"", "is not JSON"),
    ("truncated", b'{"schema": "kbench.result/1", "na', "is not JSON"),
    ("binary", b"\xff\xfe\x00\x01", "is not JSON"),
    ("list", b"[1, 2]", "holds a list, not a kbench result"),
    ("string", b'"text"', "holds a str"),
    ("other schema", b'{"schema": "pytest-benchmark"}', "not a kbench result, session, sweep or A/B"),
    ("session results a list", b'{"schema": "kbench.session/1", "results": [1]}',
     "has no 'results' object"),
    ("session result a number", b'{"schema": "kbench.session/1", "results": {"t": 3}}',
     "result 't' is a int, not a result object"),
    ("stats a string", json.dumps({**GOOD, "stats": "fast"}).encode(),
     "'stats' is a str, not an object"),
    ("median a string", json.dumps({**GOOD, "stats": {"median": "1ms"}}).encode(),
     "stats.median is '1ms', not a number"),
    ("samples a string", json.dumps({**GOOD, "samples_s": "1,2"}).encode(),
     "'samples_s' is not a list of numbers"),
    # counted as an overlapping CI: any regression passed as "within noise"
    ("stats removed", json.dumps({k: v for k, v in GOOD.items() if k != "stats"}).encode(),
     "no 'stats'"),
    ("CI removed", json.dumps({**GOOD, "stats": {"median": 1e-3}}).encode(),
     "stats.ci_low is missing"),
]


@pytest.mark.parametrize("which", ["old", "new"])
@pytest.mark.parametrize("content,match", [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_cli_compare_on_a_bad_file_prints_one_line_and_exits_2(content, match, which,
                                                               tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    bad = tmp_path / "bad.json"
    if content == "<dir>":
        bad.mkdir()
    elif content is not None:
        bad.write_bytes(content)
    files = [str(bad), str(good)] if which == "old" else [str(good), str(bad)]
    assert cli_main(["compare", *files, "--fail", "8%"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("kbench compare: error: ") and str(bad) in err and match in err
    assert cli_main(["compare", str(good), str(good), "--fail", "8%"]) == 0


@pytest.mark.parametrize("argv,match", [
    (["compare", "a.json", "b.json", "--fail", "8"], "ambiguous: write '8%'"),
    (["compare", "a.json", "b.json", "--fail", "eight"], "threshold must look like '8%'"),
    (["compare", "a.json", "b.json", "--fail=-1%"], "non-negative fraction"),
    (["compare", "a.json"], "the following arguments are required: new"),
    (["frobnicate"], "invalid choice"),
    (["peaks", "--seconds", "abc"], "expected seconds, got 'abc'"),
    (["peaks", "--cpu-only", "--seconds", "0"], "must be a number of seconds > 0"),
    (["peaks", "--cpu-only", "--seconds", "nan"], "must be a number of seconds > 0"),
], ids=["fail 8", "fail eight", "fail negative", "one file", "no such command",
        "seconds text", "peaks seconds 0", "peaks seconds nan"])
def test_cli_usage_errors_exit_2_with_the_reason(argv, match, capsys):
    with pytest.raises(SystemExit) as ei:
        cli_main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


@pytest.mark.parametrize("argv,match", [
    (["demo", "--no-gpu", "--json", "/nonexistent-dir/d.json"], "no such directory"),
], ids=["demo json unwritable"])
def test_cli_refuses_before_measuring(argv, match, capsys):
    assert cli_main(argv) == 2
    out, err = capsys.readouterr()
    assert match in err and err.startswith(f"kbench {argv[0]}: error: ")
    assert "GB/s" not in out                    # nothing was measured


# ------------------------------------------------------------------ fixed on branch robust-c

def test_a_warmup_that_never_ends_is_refused():
    """warmup_s=inf and 1e300, in two subprocesses at once with a timeout: before the fix the
    warm-up runs forever."""
    procs = {}
    for value in ("inf", "1e300"):
        code = ("import kbench, numpy as np\n"
                "try:\n"
                f"    kbench.bench(lambda: None, warmup_s=float('{value}'), cold_cache=None,"
                " max_time_s=0.05)\n"
                "except ValueError as e:\n"
                "    print('refused:', e)\n"
                "print('next:', kbench.bench(np.sum, np.ones(8), warmup_s=0, cold_cache=None,"
                " max_time_s=0.05).n > 0)\n")
        procs[value] = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
    try:
        for value, p in procs.items():
            try:
                out, _ = p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                pytest.fail(f"warmup_s={value} was accepted and warmed up for 15 s")
            assert "refused:" in out and "warmup_s" in out, out
            assert "next: True" in out, out
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("value", ["1.5M", "1T", "-1", "99999999999999999999", "abc"])
def test_an_unparseable_llc_size_is_refused(value, monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", value)
    try:
        raises(bench(np.sum, A, cold_cache="flush"), ValueError, "KBENCH_LLC_BYTES")
    finally:
        monkeypatch.delenv("KBENCH_LLC_BYTES")


@pytest.mark.parametrize("out,ref", [
    (np.full((1000, 1), 2.0), np.full(1000, 2.0)),
    (np.float64(3.0), np.full(1000, 3.0)),
], ids=["column vs row", "scalar vs array"])
def test_compare_refuses_different_shapes(out, ref):
    raises(lambda: kbench.compare(out, ref), ValueError, "shape")


def test_check_refuses_a_wrongly_shaped_output():
    raises(bench(lambda: np.ones((4, 1)), check=np.ones(4)), ValueError, "shape")


def test_compare_reads_big_endian_floats():
    assert kbench.compare(np.ones(3, ">f8"), np.ones(3)).ok


def test_rotation_that_cannot_evict_the_cache_is_refused_or_flagged():
    try:
        r = kbench.bench(np.sum, np.ones(1), cold_cache="rotate", warmup_s=0.0, max_time_s=0.05)
    except ValueError as e:
        assert "cache" in str(e)
    else:
        assert any("cache" in w for w in r.warnings), r.warnings


class _InterruptedFloat:
    def __float__(self):
        raise KeyboardInterrupt


def test_ctrl_c_inside_an_options_float_conversion_is_not_turned_into_a_type_error():
    with pytest.raises(KeyboardInterrupt):
        kbench.bench(np.sum, A, target=_InterruptedFloat(), **FAST)


def test_a_child_forked_while_another_thread_measures_can_bench():
    # the child inherited both bench locks held by a thread that does not exist there, and its
    # first bench waited forever
    code = """
import os, sys, threading, time
import kbench
inside = threading.Event()
def slow():
    inside.set()
    time.sleep(0.001)
t = threading.Thread(target=lambda: kbench.bench(slow, warmup_s=0.0, max_time_s=2.0,
                                                 cold_cache=None), daemon=True)
t.start()
inside.wait(10)
pid = os.fork()
if pid == 0:
    import signal
    signal.alarm(20)
    r = kbench.bench(lambda: None, warmup_s=0.0, max_time_s=0.05, cold_cache=None)
    os._exit(0 if r.stats["n"] > 0 else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
t.join()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "child 0" in p.stdout, p.stdout + p.stderr
