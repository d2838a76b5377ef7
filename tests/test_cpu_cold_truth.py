"""What a CPU result says about its cold cache must hold: a flush smaller than the cache, a
rotation whose keyword arguments stay the same in every set, a cache size nobody knows or one
from glibc's sysconf (findings of a new-user review; no timing thresholds)."""
import numpy as np
import pytest

import kbench
from kbench import _core

QUICK = dict(max_time_s=0.1, min_samples=5, warmup_s=0.0, memory=False)


def _caches(monkeypatch, llc, source):
    real = _core.cpu_cache_info()
    monkeypatch.setattr(_core, "cpu_cache_info",
                        lambda: dict(real, llc_bytes=llc, source=source))


def test_a_flush_smaller_than_the_cache_is_said_in_the_result():
    a = np.ones(1 << 12)
    r = kbench.bench(np.sum, a, cold_cache="flush", flush_bytes=1 << 16, **QUICK)
    assert r.cold_cache["evicts"] is False
    assert any("smaller than the" in w and "not cold" in w for w in r.warnings), r.warnings


def test_rotation_leaves_keyword_arrays_in_every_set_and_says_so(monkeypatch):
    _caches(monkeypatch, 1 << 20, "sysfs")          # small: few copies, a quick test
    a, b, c = (np.ones(1 << 14) for _ in range(3))  # 128 KB each
    kw = kbench.bench(np.add, a, b, kwargs={"out": c}, cold_cache="rotate", **QUICK)
    assert kw.cold_cache["arg_sets"] > 1 and kw.cold_cache["evicts"] is False
    assert kw.cold_cache["shared_kwargs_bytes"] == c.nbytes
    assert any("keyword arguments out" in w and "not cold" in w for w in kw.warnings)
    pos = kbench.bench(np.add, a, b, c, cold_cache="rotate", **QUICK)
    assert pos.cold_cache["evicts"] is True and "shared_kwargs_bytes" not in pos.cold_cache


def test_an_unknown_cache_size_refuses_kbenchs_rotation_and_does_not_call_given_sets_cold(
        monkeypatch):
    _caches(monkeypatch, 0, "none")
    a = np.ones(1 << 10)
    with pytest.raises(ValueError, match="cannot size its argument sets: the last-level cache "
                                         "size is unknown"):
        kbench.bench(np.sum, a, cold_cache="rotate", **QUICK)
    r = kbench.bench(np.sum, arg_sets=[(np.ones(1 << 10),) for _ in range(4)],
                     cold_cache="rotate", **QUICK)
    assert r.cold_cache["evicts"] is False
    assert any("cache size is unknown" in w for w in r.warnings)


def test_a_cache_size_from_sysconf_is_named_and_warned(monkeypatch):
    _caches(monkeypatch, 320 << 20, "sysconf")
    r = kbench.bench(np.sum, np.ones(1 << 10), cold_cache="flush", **QUICK)
    assert r.cold_cache["cache_source"] == "sysconf"
    assert any("came from glibc's sysconf" in w for w in r.warnings)
    hot = kbench.bench(np.sum, np.ones(1 << 10), cold_cache=None, **QUICK)
    assert not any("sysconf" in w for w in hot.warnings)


def test_the_rotation_copies_are_capped_by_free_memory(monkeypatch):
    from kbench.measure import local
    _caches(monkeypatch, 64 << 20, "sysfs")
    monkeypatch.setattr(local, "_available_bytes", lambda: 8 << 20)   # 4 MB for the copies
    with pytest.raises(MemoryError, match="cold_cache='rotate' would need"):
        kbench.bench(np.sum, np.ones(1 << 17), cold_cache="rotate", **QUICK)


def test_a_small_keyword_argument_does_not_undo_a_rotation(monkeypatch):
    _caches(monkeypatch, 1 << 20, "sysfs")
    a = np.ones(1 << 14)
    r = kbench.bench(lambda x, scale=None: x.sum(), a, kwargs={"scale": np.ones(1)},
                     cold_cache="rotate", **QUICK)
    assert r.cold_cache["evicts"] is True and "shared_kwargs_bytes" not in r.cold_cache
