"""Argument sets and cold caches on the HIP backend, as on CUDA (kbench/backends/cuda.py): every
set is captured and replayed, the output re-checked after the replays is the last set's (or the
check is skipped where that cannot be known), and a cache of unknown size takes the
caller's flush_bytes= or arg_sets=.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbench import _core

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hip_forward"))
from run_fake import fake_dir, run_fake  # noqa: E402,F401 (fake_dir: a fixture)

pytestmark = pytest.mark.skipif(not getattr(_core, "HAVE_HIP", 0),
                                reason="kbench._core built with KBENCH_NO_CUDA=1: no HIP")


def test_every_arg_set_is_replayed_and_checked(fake_dir):
    """cold_cache None and 'flush' captured the first set only (one graph); the post-run check
    of a rotation raised a false AssertionError for a fixed reference or a shared out=."""
    res = run_fake(fake_dir, """
        seen = []
        def add(x, y):
            seen.append(float(x[0]))
            return x + y
        sets = [(np.full(1024, float(i), np.float32), np.ones(1024, np.float32))
                for i in range(4)]
        for cold in (None, "flush", "rotate"):
            seen.clear()
            r = kbench.bench(add, arg_sets=sets, cold_cache=cold, check=lambda x, y: x + y, **B)
            out[str(cold)] = {"captured": sorted(set(seen)),
                              "graphs": r.extra["graph"]["graphs"],
                              "hip_graphs": r.extra["hip"]["graphs"],
                              "post": r.extra.get("post_check")}
        ref = sets[0][0] + sets[0][1]
        out["fixed"] = err(lambda: kbench.bench(add, arg_sets=sets, cold_cache="rotate",
                                                check=ref, **B))
        r = kbench.bench(add, arg_sets=sets, cold_cache="rotate", check=ref, **B)
        out["fixed_post"] = r.extra.get("post_check")
        shared = np.empty(1024, np.float32)
        def add_out(x, y, out):
            np.add(x, y, out=out)
            return out
        r = kbench.bench(add_out, arg_sets=sets, kwargs={"out": shared}, cold_cache="rotate",
                         check=lambda x, y: x + y, **B)
        out["shared_post"] = r.extra.get("post_check")
        out["shared_cold"] = {k: r.cold_cache.get(k) for k in ("shared_kwargs_bytes", "evicts")}
        r = kbench.bench(add, *sets[1], cold_cache="rotate", check=lambda x, y: x + y, **B)
        out["copies_post"] = r.extra.get("post_check")
    """)
    for cold in ("None", "flush", "rotate"):
        r = res[cold]
        assert r["captured"] == [0.0, 1.0, 2.0, 3.0], (cold, r)
        assert r["graphs"] == r["hip_graphs"] == 4, (cold, r)
        assert r["post"]["ok"] is True, (cold, r)        # checked against set 3's reference
    assert res["fixed"] is None, res["fixed"]
    assert "skipped" in res["fixed_post"] and "first set's" in res["fixed_post"]["skipped"]
    assert "skipped" in res["shared_post"], res["shared_post"]
    # the out= every set shares stays cached: counted, and the figure not called cold
    assert res["shared_cold"] == {"shared_kwargs_bytes": 4096, "evicts": False}, res["shared_cold"]
    assert res["copies_post"]["ok"] is True        # kbench's own rotation copies


def test_unknown_llc_takes_what_the_message_asks_for(fake_dir):
    res = run_fake(fake_dir, """
        a = np.ones(1024, np.float32)
        f = lambda x: x * 2
        out["flush_bare"] = err(lambda: kbench.bench(f, a, cold_cache="flush", **B))
        out["rotate_bare"] = err(lambda: kbench.bench(f, a, cold_cache="rotate", **B))
        r = kbench.bench(f, a, cold_cache="flush", flush_bytes=1 << 20, **B)
        out["flush"] = {"cold": r.cold_cache, "hip": r.extra["hip"]["flush_bytes"],
                        "warnings": r.warnings}
        sets = [(np.ones(1024, np.float32),) for _ in range(3)]
        r = kbench.bench(f, arg_sets=sets, cold_cache="rotate", **B)
        out["rotate"] = {"cold": r.cold_cache, "graphs": r.extra["hip"]["graphs"]}
    """, KB_FAKE_NO_L2="1")
    for k in ("flush_bare", "rotate_bare"):
        assert res[k]["type"] == "ValueError" and "pass flush_bytes=" in res[k]["msg"]
    assert res["flush"]["hip"] == 1 << 20 and res["flush"]["cold"]["flush_bytes"] == 1 << 20
    assert res["flush"]["cold"]["evicts"] is None
    assert any("last-level cache size is unknown" in w for w in res["flush"]["warnings"])
    assert res["rotate"]["graphs"] == 3 and res["rotate"]["cold"]["arg_sets"] == 3
    assert res["rotate"]["cold"]["evicts"] is None
