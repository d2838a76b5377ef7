"""Cold by eviction on a large last-level cache (csrc/host/evict.c, kbench.measure.coldcache
visible_operands): where a write flush would pass 256 MiB a sample, the host backend flushes
the lines of the arrays the call reads instead, when it sees them all, and says which it did.
KBENCH_LLC_BYTES stands in for the large cache (a 16-vCPU host reported 300 MB)."""
import functools

import numpy as np
import pytest

import kbench
from kbench import _core
from kbench.workflow.cli_compare import compare_sets
from kbench.measure.coldcache import visible_operands

needs_line_flush = pytest.mark.skipif(_core.CPU_EVICT_INSTRUCTION is None,
                                      reason="no line-flush instruction on this architecture")
A, B = np.random.default_rng(0).random((2, 1 << 18), dtype=np.float32)
C = np.empty_like(A)
QUICK = dict(warmup_s=0.0, max_time_s=0.02, memory=False)


class Holder:
    def __init__(self):
        self.x = A

    def __call__(self, y):
        return self.x + y


def _uses_global(y):
    return A + y


@pytest.mark.parametrize("fn, args, kwargs, why", [
    (np.add, (A, B), {"out": C}, ""),
    (A.sum, (), {}, ""),                                  # the array the method belongs to
    (np.dot, (A, B), {}, ""),
    (lambda x: x + A, (B,), {}, "global array 'A'"),     # a lambda reads globals too
    (functools.partial(np.add, A), (B,), {}, "functools.partial"),
    (Holder(), (B,), {}, "Holder object"),
    (_uses_global, (B,), {}, "global array 'A'"),
    (np.add, (A[::2], B[::2]), {}, "strided array"),
    (np.add, ([1.0, 2.0], B), {}, "cannot look into (list)"),
    (np.sum, (3,), {}, "no array"),
])
def test_visible_operands_sees_every_array_or_says_why_not(fn, args, kwargs, why):
    per_set, reason = visible_operands(fn, [args], kwargs)
    if not why:
        assert reason == "" and per_set is not None
        want = [x for x in (getattr(fn, "__self__", None), *args, *kwargs.values())
                if isinstance(x, np.ndarray)]
        assert [id(x) for x in per_set[0]] == [id(x) for x in want]
    else:
        assert per_set is None and why in reason


def test_a_closure_is_hidden_state():
    def make():
        captured = A

        def f(y):
            return captured + y
        return f
    assert visible_operands(make(), [(B,)], None) == (None, "fn is a closure (its captured "
                                                              "variables)")


@needs_line_flush
def test_a_large_cache_is_made_cold_by_evicting_the_operands(monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", "1G")
    r = kbench.bench(np.add, A, B, kwargs={"out": C}, **QUICK)
    cc = r.cold_cache
    assert cc["mode"] == "flush" and cc["method"] == "evict"
    assert cc["evict_bytes"] == A.nbytes + B.nbytes + C.nbytes
    assert cc["instruction"] == _core.CPU_EVICT_INSTRUCTION
    assert cc["flush_bytes"] == 2 << 30        # what the write flush would have written
    assert "evict the operands' 3.1 MB" in repr(r) and "where a flush would write 2.1 GB" in \
        repr(r)


@needs_line_flush
def test_every_argument_set_evicts_its_own_operands(monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", "1G")
    sets = [(np.ones(1 << 16), np.ones(1 << 16)), (np.ones(1 << 17), np.ones(1 << 17))]
    raw = _core.measure_host(np.add, tuple(sets), None, cold="flush", max_time_s=0.02,
                             warmup_s=0.0, evict=tuple(tuple(s) for s in sets))
    assert raw["cold"]["method"] == "evict"
    assert raw["cold"]["evict_bytes"] == 2 * (1 << 17) * 8      # the largest set's


def test_a_write_flush_stays_where_the_cache_is_small_or_the_size_was_given(monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", "1M")
    r = kbench.bench(np.add, A, B, kwargs={"out": C}, **QUICK)
    assert r.cold_cache["method"] == "write" and "evict_refused" not in r.cold_cache
    monkeypatch.setenv("KBENCH_LLC_BYTES", "1G")
    r = kbench.bench(np.add, A, B, kwargs={"out": C}, flush_bytes=300 << 20, **QUICK)
    assert r.cold_cache["method"] == "write" and r.cold_cache["flush_bytes"] == 300 << 20


def test_hidden_state_keeps_the_write_flush_and_says_why(monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", "256M")     # a 512 MiB flush
    r = kbench.bench(_uses_global, B, **QUICK)
    assert r.cold_cache["method"] == "write"
    assert r.cold_cache["evict_refused"] == "fn reads the global array 'A'"
    assert "not an eviction of the operands' lines: fn reads the global array 'A'" in repr(r)


def test_bad_evict_values_are_refused_by_name():
    with pytest.raises(TypeError, match="evict must be a tuple of one tuple of arrays per "
                                        "argument set"):
        _core.measure_host(np.add, ((A, B),), None, cold="flush", flush_bytes=0,
                           evict=[(A, B)], max_time_s=0.01)


@needs_line_flush
def test_a_strided_operand_is_refused_by_the_core(monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", "1G")
    with pytest.raises((BufferError, ValueError, TypeError)) as e:
        _core.measure_host(np.add, ((A, B),), None, cold="flush", evict=((A[::2], B),),
                           max_time_s=0.01)
    assert any("contiguous buffer" in n for n in getattr(e.value, "__notes__", []))


@needs_line_flush
def test_cpu_evict_covers_a_buffer_and_refuses_a_non_buffer():
    x = np.ones(1000, dtype=np.uint8)[3:]           # an unaligned start
    assert _core.cpu_evict(x) == 997
    assert np.all(x == 1)                            # a flush keeps the data
    with pytest.raises(TypeError):
        _core.cpu_evict(3)


def test_a_write_flushed_and_an_evicted_figure_are_not_compared():
    def doc(method):
        return {"stats": {"median": 1e-3, "ci_low": 0.99e-3, "ci_high": 1.01e-3},
                "cold_cache": {"mode": "flush", "method": method}}
    d = compare_sets({"k": doc("write")}, {"k": doc("evict")}, 0.08).deltas[0]
    assert d.verdict == "not comparable" and "cold cache by write -> by evict" in d.note
    assert compare_sets({"k": doc("evict")}, {"k": doc("evict")}, 0.08).deltas[0].verdict \
        != "not comparable"
