"""Peak memory of the timed operation (kbench.measure.memory), gated beside time: the CPU's peak
RSS of one call with NumPy allocations, the driver and torch arithmetic with fakes, the verdicts,
and the gate in `kbench compare --fail-mem` and the plugin's --kbench-fail-mem."""
import copy
import json
import os
import types

import numpy as np
import pytest

import kbench
from kbench.measure import memory
from kbench.workflow.cli import main as cli_main
from kbench.workflow.cli_compare import compare_sets, memory_verdict
from kbench.report.result import Result, memory_text

pytest_plugins = ["pytester"]

KBENCH_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__)))
QUICK = dict(warmup_s=0.01, max_time_s=0.05, min_samples=5, cold_cache=None)
MB = 1 << 20
RSS_OK, RSS_WHY = memory.rss_available()
needs_rss = pytest.mark.skipif(not RSS_OK, reason=f"peak RSS not measurable here: {RSS_WHY}")


def allocate(n_mb):
    a = np.ones(n_mb * MB // 8)           # np.ones touches every page
    return float(a[-1])


@needs_rss
def test_a_cpu_call_that_allocates_64_mb_reads_about_64_mb():
    r = kbench.bench(allocate, 64, **QUICK)
    m = r.memory
    assert m["method"] == "rss" and m["lower_bound"] is True and m["device"] == "cpu"
    assert 60 * MB <= m["peak_bytes"] <= 80 * MB, m
    assert m["retained_bytes"] < 8 * MB           # freed before the call returned


LEAKED = []


def leaks(n_mb):
    if len(LEAKED) < 3:                   # the first calls: a priming call, the probe's
        LEAKED.append(np.ones(n_mb * MB // 8))
    return 0


@needs_rss
def test_memory_a_call_keeps_is_not_called_its_output():
    # a leak returned 0, and the block said "10.5 MB still held after it (its output)"
    r = kbench.bench(leaks, 32, **QUICK)
    LEAKED.clear()
    assert r.memory["retained_bytes"] >= 30 * MB
    row = next(l for l in repr(r).splitlines() if "Memory" in l)
    assert "(its output, a cache or a leak)" in row, row


@needs_rss
def test_an_in_place_call_reads_near_zero():
    a, b = np.random.rand(2, 1 << 20)
    out = np.empty_like(a)
    r = kbench.bench(np.add, a, b, kwargs={"out": out}, check=a + b, **QUICK)
    assert r.memory["peak_bytes"] < 4 * MB, r.memory


def test_memory_false_skips_the_probe_and_the_result_round_trips(tmp_path):
    assert kbench.bench(allocate, 1, memory=False, **QUICK).memory is None
    r = kbench.bench(allocate, 16, **QUICK)
    path = tmp_path / "r.json"
    r.to_json(str(path))
    back = Result.load(str(path))
    assert back.memory == json.loads(json.dumps(r.memory))
    if RSS_OK:
        assert "Memory:" in repr(r) and "process peak RSS" in repr(r)


def test_the_probe_runs_after_the_check_call_or_after_one_plain_call():
    calls = []

    def fn(x):
        calls.append(len(calls))
        return x

    memory.measure(fn, (np.ones(4),), {}, "cpu", called_before=False)
    assert len(calls) == 2          # one plain call (one-time allocations), then the probe
    calls.clear()
    memory.measure(fn, (np.ones(4),), {}, "cpu", called_before=True)
    assert len(calls) == 1


def test_without_clear_refs_the_figure_is_unavailable_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "_CLEAR_REFS", str(tmp_path / "missing" / "clear_refs"))
    m = memory.measure(allocate, (1,), {}, "cpu")
    assert m["peak_bytes"] is None and "cannot reset the peak RSS" in m["why"]
    assert "not measured" in memory_text(m)


def test_driver_free_memory_is_polled_during_the_call_as_a_lower_bound():
    import threading
    state = {"free": 10_000 * MB, "held": False}
    polled_while_held = threading.Event()

    def mem_info(ordinal):
        if state["held"]:
            polled_while_held.set()
        return state["free"], 20_000 * MB

    def call():
        state["free"] -= 300 * MB      # a workspace, polled while it is held ...
        state["held"] = True
        # held until a poll saw it, not for a fixed 20 ms a loaded host's poller could miss
        polled_while_held.wait(30)
        state["held"] = False
        state["free"] += 200 * MB      # ... then freed; 100 MB stay (the output)
        return "out"

    m = memory.measure_driver(call, 0, mem_info, lambda ordinal: None, poll_s=1e-4)
    assert m["method"] == "driver" and m["lower_bound"] is True
    assert m["peak_bytes"] == 300 * MB and m["retained_bytes"] == 100 * MB


def test_torch_figure_is_the_allocator_peak_above_the_allocation_before():
    stats = {"alloc": 1000, "peak": 1000, "reserved": 4096, "rpeak": 4096}

    def reset(dev):
        stats["peak"], stats["rpeak"] = stats["alloc"], stats["reserved"]

    cuda = types.SimpleNamespace(
        synchronize=lambda dev: None, memory_allocated=lambda dev: stats["alloc"],
        memory_reserved=lambda dev: stats["reserved"], reset_peak_memory_stats=reset,
        max_memory_allocated=lambda dev: stats["peak"],
        max_memory_reserved=lambda dev: stats["rpeak"])
    fake_torch = types.SimpleNamespace(cuda=cuda, device=lambda kind, i: f"{kind}:{i}")

    def call():
        stats["peak"] = stats["alloc"] + 3 * MB        # output + workspace
        stats["alloc"] += MB                           # the output stays
        return "out"

    m = memory.measure_torch(call, 0, fake_torch)
    assert m["peak_bytes"] == 3 * MB and m["retained_bytes"] == MB and not m["lower_bound"]
    assert m["method"] == "torch" and m["device"] == "cuda:0"


def mem_doc(peak, method="torch", median=1e-3, res=512):
    return {"stats": {"median": median, "ci_low": median * 0.99, "ci_high": median * 1.01},
            "device": "cuda:0", "backend": "cupti",
            "memory": {"peak_bytes": peak, "method": method, "resolution_bytes": res}}


@pytest.mark.parametrize("old, new, verdict, fails", [
    (100 * MB, 200 * MB, "more memory", True),
    (100 * MB, 105 * MB, "same memory", False),
    (100 * MB, 50 * MB, "less memory", False),
    (0, 256, "same memory", False),               # below the allocator's 512 B resolution
    (0, 64 * MB, "more memory", True),            # from nothing to a workspace
])
def test_memory_verdicts(old, new, verdict, fails):
    v = memory_verdict(mem_doc(old), mem_doc(new), 0.10)
    assert v["mem_verdict"] == verdict and v["mem_failure"] is fails
    assert memory_verdict(mem_doc(old), mem_doc(new), None)["mem_failure"] is False


def test_different_methods_or_a_missing_figure_are_not_compared():
    v = memory_verdict(mem_doc(MB), mem_doc(10 * MB, "driver"), 0.1)
    assert v["mem_verdict"].startswith("not comparable") and not v["mem_failure"]
    no_fig = mem_doc(MB)
    no_fig.pop("memory")
    assert memory_verdict(no_fig, mem_doc(MB), 0.1)["mem_verdict"] == "no figure"


def test_compare_gates_memory_beside_time():
    old = {"gemm": mem_doc(100 * MB)}
    new = {"gemm": mem_doc(200 * MB)}
    cmp = compare_sets(old, new, 0.08, mem_threshold="10%")
    (d,) = cmp.deltas
    assert d.verdict == "within noise" and d.mem_failure and not cmp.ok
    assert "MORE MEMORY" in cmp.table() and "+100.0%" in cmp.table()
    assert "1 using more peak memory than baseline beyond 10%: gemm" in cmp.summary()
    assert compare_sets(old, new, 0.08).ok        # reported, not gated


def _session(tmp_path, name, results):
    path = tmp_path / name
    path.write_text(json.dumps({"schema": "kbench.session/1", "results": results}))
    return str(path)


def _canned(peak):
    r = kbench.bench(allocate, 1, **QUICK).to_dict()
    r["stats"].update(median=1e-3, ci_low=0.99e-3, ci_high=1.01e-3)
    r["memory"] = {"peak_bytes": peak, "method": "torch", "resolution_bytes": 512}
    return r


def test_kbench_compare_fail_mem_exits_1_on_a_doubled_workspace(tmp_path, capsys):
    base = _canned(64 * MB)
    old = _session(tmp_path, "old.json", {"t::gemm": base})
    doubled = copy.deepcopy(base)
    doubled["memory"]["peak_bytes"] = 128 * MB
    new = _session(tmp_path, "new.json", {"t::gemm": doubled})
    assert cli_main(["compare", old, new, "--fail", "8%", "--fail-mem", "10%"]) == 1
    assert "MORE MEMORY" in capsys.readouterr().out
    assert cli_main(["compare", old, new, "--fail", "8%"]) == 0       # memory not gated
    assert cli_main(["compare", old, old, "--fail-mem", "10%"]) == 0
    with pytest.raises(SystemExit):
        cli_main(["compare", old, new, "--fail-mem", "10"])           # ambiguous, as --fail


PLUGIN_TESTS = """
import os
import numpy as np

def kernel(n):
    a = np.ones(n // 8)
    return float(a[-1])

def test_alloc(kbench):
    n = (64 if os.environ.get("KB_BIG") else 32) << 20
    kbench(kernel, n, cold_cache=None, warmup_s=0.01, max_time_s=0.05, min_samples=5)
"""


@needs_rss
def test_plugin_fail_mem_fails_the_session_on_a_planted_2x_allocation(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (KBENCH_ROOT, os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.delenv("KB_BIG", raising=False)
    pytester.makepyfile(kbm_alloc_test=PLUGIN_TESTS)
    base = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    # each session in a fresh process: in this one, earlier tests' freed blocks raise glibc's
    # dynamic mmap threshold, the 32 MB array then reuses resident heap pages, and RSS (pages
    # first touched by the call, a lower bound by design) reads 0 (one of two full runs here)
    pytester.runpytest_subprocess(*base, "--kbench-save=base.json").assert_outcomes(passed=1)
    saved = json.loads((pytester.path / "base.json").read_text())
    (res,) = saved["results"].values()
    assert 28 * MB <= res["memory"]["peak_bytes"] <= 40 * MB
    same = pytester.runpytest_subprocess(*base, "--kbench-compare=base.json",
                                         "--kbench-fail=off", "--kbench-fail-mem=10%")
    assert same.ret == 0
    monkeypatch.setenv("KB_BIG", "1")
    big = pytester.runpytest_subprocess(*base, "--kbench-compare=base.json",
                                        "--kbench-fail=off", "--kbench-fail-mem=10%")
    assert big.ret == 1
    big.stdout.fnmatch_lines(["*MORE MEMORY*", "*FAILED: *using more peak memory*"])
    bad = pytester.runpytest_inprocess(*base, "--kbench-fail-mem=10")
    assert bad.ret == 4 and "--kbench-fail-mem" in "\n".join(bad.errlines + bad.outlines)


@pytest.mark.parametrize("method, res, below, what", [
    ("rss", MB, "< 1 MiB (the method's resolution)", "resident memory first touched by the call"),
    ("driver", 2 * MB, "< 2 MiB (the method's resolution)", "device memory taken by the call"),
    ("torch", 512, "< 512 B (the method's resolution)", "memory allocated by the call"),
    ("cupy", 512, "< 512 B (the method's resolution)", "memory allocated by the call"),
])
def test_memory_row_says_what_the_method_counts_and_hides_sub_resolution_noise(
        method, res, below, what):
    # the CPU's pass read "peak 32.8 kB above what was allocated before the call": RSS pages
    # first touched (not bytes allocated), 1/32 of what the method resolves
    noise = {"peak_bytes": res // 32, "method": method, "resolution_bytes": res,
             "retained_bytes": res // 64, "lower_bound": method in ("rss", "driver")}
    kept = dict(noise)
    text = memory_text(noise)
    assert noise == kept                          # presentation only: the figures stay
    assert text.startswith(f"{what}: {below}"), text
    assert "above what was allocated before" not in text
    assert "still held" not in text               # the retained noise is not reported either
    assert fmt_b(res // 32) not in text
    big = dict(noise, peak_bytes=64 * MB, retained_bytes=8 * MB)
    text = memory_text(big)
    word = "at least" if method == "driver" else "peak"
    assert text.startswith(f"{what}: {word} 67.1 MB; 8.4 MB still held after it"), text
    assert "resolution" not in text


def fmt_b(n):
    from kbench.report._format import fmt_bytes
    return fmt_bytes(n)


@needs_rss
def test_an_untouched_allocation_reads_below_the_rss_resolution_not_as_bytes():
    # np.empty of 100 MB touches no page: the figure is resident memory first touched, and
    # the row said "peak 4.1 kB above what was allocated before the call"
    r = kbench.bench(lambda: np.empty(12_500_000), **QUICK)
    assert r.memory["method"] == "rss" and r.memory["peak_bytes"] < MB
    row = next(l for l in repr(r).splitlines() if "Memory" in l)
    assert "resident memory first touched by the call: < 1 MiB (the method's resolution)" in row
    r = kbench.bench(allocate, 64, **QUICK)
    row = next(l for l in repr(r).splitlines() if "Memory" in l)
    assert "resident memory first touched by the call: peak 6" in row, row
