"""Memory stays flat over many calls: bench and compare, a callable that raises, bad arguments.

Each scenario runs in a fresh interpreter (so other tests' allocations do not move the numbers):
warm-up iterations first, so caches, interned strings and the allocator's arenas settle, then the
resident set size from /proc/self/statm after more iterations. A leak of one small object per call
is invisible in RSS, so each scenario makes every call carry a large fresh payload (a 32 KB array,
a 16 KB exception argument): a reference leaked anywhere along the path keeps it alive and the
growth is megabytes. A control run with a deliberate 2 KB-per-iteration leak shows that this
measurement sees a leak of that size.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 4 << 20

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(),
                                reason="needs /proc/self/statm (Linux)")

HARNESS = r'''
import gc, json, os, sys
import numpy as np
import kbench
from kbench import _core

PAGE = os.sysconf("SC_PAGE_SIZE")
N = 4096                        # 32 KB of float64: a leaked array shows up in RSS


def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def tiny():
    return None


kept = []                       # the control's deliberate leak
leak_bytes = int(sys.argv[2])


def bench_and_compare(i):
    r = kbench.bench(tiny, warmup_s=0, min_samples=1, max_samples=3, max_time_s=1,
                     cold_cache=None)
    assert 1 <= r.n <= 3
    a = np.full(N, float(i))
    b = a.copy()
    b[i % N] += 1.0
    c = kbench.compare(a, b)
    assert not c.ok and c.worst_index == (i % N,)
    if leak_bytes:
        kept.append(bytearray(leak_bytes))


class Boom(Exception):
    pass


def raiser():
    raise Boom(bytearray(16384))      # 16 KB each: a leaked exception is visible


def bench_raises(i):
    try:
        kbench.bench(raiser, warmup_s=0, min_samples=1, max_samples=3, max_time_s=1,
                     cold_cache=None)
    except Boom as e:
        assert "raised by the benchmarked callable" in " ".join(getattr(e, "__notes__", []))
    else:
        raise AssertionError("the callable's exception did not propagate")


def expect(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc:
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def bad_arguments(i):
    a, b = np.full(N, 1.0), np.full(N - 1, 1.0)
    expect(ValueError, _core.compare, a, b, 0.0, 0.0)                     # shapes
    expect(ValueError, _core.compare, np.full(N, 1.0), a, -1.0, 0.0)      # rtol
    expect(ValueError, _core.compare, np.full(N, 1.0), a, 0.0, 0.0, out_kind="bogus")
    expect(ValueError, kbench.compare, a, b)
    expect(TypeError, _core.measure_host, tiny, ((np.full(N, 1.0),),), bogus=1)
    expect(ValueError, _core.measure_host, tiny, ((np.full(N, 1.0),),), min_samples=0)
    expect(ValueError, _core.measure_host, tiny, ((np.full(N, 1.0),),), criterion="nope")
    expect(TypeError, _core.measure_host, tiny, [(np.full(N, 1.0),)])
    expect(ValueError, kbench.bench, tiny, cold_cache=None, min_samples=5, max_samples=2)
    # correctness check fails before anything is timed
    x = np.full(N, 1.0)
    expect(AssertionError, kbench.bench, lambda v: v, x, check=x + 1.0, warmup_s=0,
           cold_cache=None)
    expect(ValueError, _core.summarize, [])
    expect(ValueError, _core.median_ci, list(np.full(3, 1.0)), 0.95)


STEPS = {"bench_compare": bench_and_compare, "raising": bench_raises, "bad_args": bad_arguments}
step = STEPS[sys.argv[1]]
checkpoints = [int(x) for x in sys.argv[3].split(",")]
readings, done = [], 0
for target in checkpoints:
    while done < target:
        step(done)
        done += 1
    readings.append([done, rss()])
print(json.dumps(readings))
'''


def rss_readings(scenario, checkpoints, leak_bytes=0):
    """[(iterations done, RSS bytes)] at each checkpoint of `scenario` in a fresh interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONMALLOC", None)
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, scenario, str(leak_bytes),
         ",".join(str(c) for c in checkpoints)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def growth(readings):
    base = readings[0][1]
    return [(n, r - base) for n, r in readings[1:]]


def describe(readings):
    return ", ".join(f"{n} iterations: {r / 2**20:.2f} MiB" for n, r in readings)


def test_bench_and_compare_10000_calls_stay_flat():
    readings = rss_readings("bench_compare", [1000, 2000, 10000])
    for n, g in growth(readings):
        assert g < LIMIT_BYTES, f"RSS grew {g / 2**20:.2f} MiB by {n} iterations " \
                                f"({describe(readings)})"


def test_control_a_2kb_per_iteration_leak_is_seen():
    """The measurement above can fail: the same loop keeping 2 KB per iteration grows > 4 MB."""
    readings = rss_readings("bench_compare", [1000, 10000], leak_bytes=2048)
    (_, g), = growth(readings)
    assert g > LIMIT_BYTES, f"a deliberate 18 MB leak grew RSS only {g / 2**20:.2f} MiB " \
                            f"({describe(readings)})"


def test_bench_with_a_raising_callable_2000_calls_stay_flat():
    readings = rss_readings("raising", [200, 2200])
    (n, g), = growth(readings)
    assert g < LIMIT_BYTES, f"RSS grew {g / 2**20:.2f} MiB over {n - 200} raising bench calls " \
                            f"({describe(readings)})"


def test_bad_argument_calls_stay_flat():
    readings = rss_readings("bad_args", [200, 2200])
    (n, g), = growth(readings)
    assert g < LIMIT_BYTES, f"RSS grew {g / 2**20:.2f} MiB over {n - 200} rounds of bad " \
                            f"arguments ({describe(readings)})"
