"""cli_compare: deltas and verdicts between saved results (synthetic samples, no timing)."""
import json

import numpy as np
import pytest

from kbench import _core
from kbench.workflow.cli_compare import compare_files, compare_sets, load_results, parse_threshold
from kbench.report.result import Result


def make_result(name, median, spread=0.01, n=200, seed=0):
    rng = np.random.default_rng(seed)
    samples = median * (1.0 + spread * rng.standard_normal(n))
    return Result(name=name, device="cpu", backend="host", samples=samples,
                  stats=_core.summarize(samples, 0.95), stop={"stop": "precision"},
                  cold_cache={"mode": "none"})


def session(tmp_path, fname, results):
    doc = {"schema": "kbench.session/1", "results": {k: r.to_dict() for k, r in results.items()},
           "metadata": {}}
    p = tmp_path / fname
    p.write_text(json.dumps(doc))
    return str(p)


def test_verdicts_follow_delta_threshold_and_ci_overlap():
    old = {k: make_result(k, 1e-3, seed=i).to_dict() for i, k in enumerate("abcde")}
    new = {"a": make_result("a", 2e-3, seed=10).to_dict(),      # 2x slower, resolved
           "b": make_result("b", 0.5e-3, seed=11).to_dict(),    # 2x faster
           "c": make_result("c", 1.02e-3, spread=0.001, seed=12).to_dict(),  # +2%, resolved
           "d": make_result("d", 1e-3, seed=13).to_dict(),      # same distribution
           "f": make_result("f", 1e-3, seed=14).to_dict()}      # new
    cmp = compare_sets(old, new, threshold="8%")
    by = {d.key: d for d in cmp.deltas}
    assert by["a"].verdict == "slower" and by["a"].regression
    assert by["a"].delta == pytest.approx(new["a"]["stats"]["median"]
                                          / old["a"]["stats"]["median"] - 1)
    assert by["b"].verdict == "faster" and not by["b"].regression
    assert by["c"].verdict == "unchanged"            # resolved, but within 8%
    assert by["d"].verdict == "within noise"
    assert by["f"].verdict == "no baseline" and by["f"].delta is None
    assert by["e"].verdict == "not run"
    assert [d.key for d in cmp.regressions] == ["a"] and not cmp.ok
    # with no threshold the resolved +2% counts as slower
    assert {d.key for d in compare_sets(old, new, 0.0).regressions} == {"a", "c"}


def test_a_slower_median_inside_wide_cis_is_said_to_be_unresolved():
    """Not a regression (the CIs overlap), but not passed over in silence either: the summary
    names it and the note gives both CIs, so a noisy pair of runs reads as such."""
    old = {"w": make_result("w", 1e-3, spread=1.5, n=30, seed=1).to_dict(),
           "q": make_result("q", 1e-3, seed=2).to_dict()}
    new = {"w": make_result("w", 1.5e-3, spread=1.5, n=30, seed=2).to_dict(),
           "q": make_result("q", 1e-3, seed=3).to_dict()}
    cmp = compare_sets(old, new, threshold="8%")
    by = {d.key: d for d in cmp.deltas}
    w = by["w"]
    assert w.verdict == "within noise" and w.delta > 0.08 and cmp.ok
    # the CIs in the format of every other table (fmt_ci), not a second one
    from kbench.report._format import fmt_ci
    cis = [fmt_ci(*(side["w"]["stats"][k] for k in ("median", "ci_low", "ci_high")))
           for side in (old, new)]
    assert w.note == f"CIs overlap: {cis[0]} and {cis[1]}"
    assert [d.key for d in cmp.unresolved_slower] == ["w"]      # q: same, within noise
    text = cmp.summary()
    assert text.startswith("no benchmark slower than baseline beyond 8% (2 compared); 1 slower "
                           "beyond 8% by the medians but not resolved")
    assert text.endswith("kbench.ab): w")
    # a faster median inside wide CIs is nothing to flag
    assert not compare_sets(new, old, threshold="8%").unresolved_slower


def test_compare_files_on_session_and_single_result_files(tmp_path):
    base = session(tmp_path, "base.json", {"t::x": make_result("x", 1e-3),
                                           "t::y": make_result("y", 1e-3, seed=1)})
    cur = session(tmp_path, "cur.json", {"t::x": make_result("x", 3e-3, seed=2),
                                         "t::y": make_result("y", 1e-3, seed=3)})
    text = compare_files(base, cur, threshold=0.08)
    lines = text.splitlines()
    assert lines[0].split() == ["benchmark", "old", "new", "delta", "verdict"]
    row_x = next(l for l in lines if l.startswith("t::x"))
    assert "SLOWER" in row_x and "+" in row_x
    assert "within noise" in next(l for l in lines if l.startswith("t::y"))
    assert "1 of 2 benchmarks slower than old beyond 8%: t::x" in text

    # single Result files of the same benchmark pair up by name
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    make_result("same", 2e-3).to_json(str(a))
    make_result("same", 1e-3, seed=5).to_json(str(b))
    text = compare_files(str(a), str(b))
    assert "faster" in text and "-50" in text and "names differ" not in text


def test_two_result_files_are_compared_across_names_and_say_so(tmp_path):
    """kbench.bench names a result after its callable: my_kernel_v1.json against _v2.json is
    the pair the user chose by naming the two files."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    make_result("kernel_v1", 1e-3).to_json(str(a))
    make_result("kernel_v2", 3e-3, seed=4).to_json(str(b))
    cmp = compare_sets(load_results(str(a)), load_results(str(b)), threshold="8%")
    assert [d.verdict for d in cmp.deltas] == ["slower"] and cmp.compared == 1
    assert "compared across names" in cmp.notes[0] and "kernel_v1" in cmp.notes[0]


@pytest.mark.parametrize("kind", ["session", "sweep"])
def test_two_single_entry_files_of_different_names_are_not_paired(tmp_path, kind):
    """Two session or sweep files of one benchmark each, under different names, may hold
    unrelated benchmarks (a session of test_x and one of test_y): no verdict, and the names
    are said. (Two Result files are a pair the user chose: compared across names.)"""
    from kbench.workflow.cli import main as cli_main
    from kbench.workflow.sweep import SweepResult
    paths = []
    for fname, name, median in (("a.json", "fast", 1e-3), ("b.json", "slow", 3e-3)):
        r = make_result(name, median, seed=len(paths))
        p = tmp_path / fname
        if kind == "session":
            p = session(tmp_path, fname, {f"t::{name}": r})
        else:
            SweepResult(axes={"n": [1]}, cases=[{"n": 1}], results=[r]).to_json(str(p))
        paths.append(str(p))
    old, new = load_results(paths[0]), load_results(paths[1])
    cmp = compare_sets(old, new, threshold="8%")
    assert sorted(d.verdict for d in cmp.deltas) == ["no baseline", "not run"]
    assert cmp.compared == 0 and not cmp.regressions
    assert len(cmp.notes) == 1 and "the names differ" in cmp.notes[0]
    assert "fast" in cmp.notes[0] and "slow" in cmp.notes[0]
    text = compare_files(paths[0], paths[1], threshold=0.08)
    assert "SLOWER" not in text and "nothing compared" in text and "names differ" in text
    for pair in (paths, paths[::-1]):       # either order: no verdict, and --fail fails
        assert cli_main(["compare", *pair, "--fail", "8%"]) == 1


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such results file"):
        load_results(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        load_results(str(bad))
    other = tmp_path / "other.json"
    other.write_text('{"schema": "something/1"}')
    with pytest.raises(ValueError, match="not a kbench result, session, sweep or A/B file"):
        load_results(str(other))
    lst = tmp_path / "list.json"
    lst.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a list"):
        load_results(str(lst))


@pytest.mark.parametrize("text,value", [("8%", 0.08), ("0.08", 0.08), ("100%", 1.0),
                                        (0.05, 0.05), ("0", 0.0), (None, 0.0)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["8", "1", "1.0", "-1%", "abc", "nan", "5 percent"])
def test_parse_threshold_rejects(text):
    with pytest.raises(ValueError, match="threshold"):
        parse_threshold(text)


def with_median(name, median):
    """A result whose stats say `median` (NaN, negative, ...), as a hand-edited file may."""
    d = make_result(name, 1e-3).to_dict()
    d["stats"]["median"] = median
    return d


@pytest.mark.parametrize("side,median", [("new", float("nan")), ("new", -1e-3), ("new", 0.0),
                                         ("new", float("inf")), ("old", float("nan")),
                                         ("old", -2e-3),
                                         # not plausible times per call: 1 ps, 11 days
                                         ("old", 1e-12), ("old", 1e6), ("new", 1e-12)])
def test_a_nan_or_negative_median_is_invalid_and_fails(side, median):
    good = make_result("k", 1e-3).to_dict()
    old, new = ({"k": with_median("k", median)}, {"k": good}) if side == "old" \
        else ({"k": good}, {"k": with_median("k", median)})
    cmp = compare_sets(old, new, threshold="8%")
    d, = cmp.deltas
    assert d.verdict == "invalid" and d.failure and not d.regression
    assert f"{'baseline' if side == 'old' else 'current'} median is {median!r}" in d.note
    assert not cmp.ok and cmp.failures == [d]
    assert "1 with an invalid median (not a time): k" in cmp.summary()
    assert "INVALID" in cmp.table()


def test_a_new_benchmark_with_a_nan_median_is_invalid_too():
    cmp = compare_sets({}, {"k": with_median("k", float("nan"))}, threshold="8%")
    assert [d.verdict for d in cmp.deltas] == ["invalid"] and not cmp.ok


def test_a_nan_ci_is_unknown_not_a_resolved_difference():
    old = make_result("k", 1e-3).to_dict()
    new = make_result("k", 1.5e-3, seed=1).to_dict()
    new["stats"]["ci_low"] = float("nan")
    d, = compare_sets({"k": old}, {"k": new}, threshold="8%").deltas
    assert d.verdict == "within noise"


@pytest.mark.parametrize("doc,match", [
    ({"schema": "kbench.result/1", "stats": "fast"}, "'stats' is a str, not an object"),
    ({"schema": "kbench.result/1", "stats": {"median": "1ms"}}, "stats.median is '1ms'"),
    ({"schema": "kbench.result/1", "samples_s": "abc"}, "'samples_s' is not a list of numbers"),
    ({"schema": "kbench.result/1", "samples_s": [1e-3, None]}, "'samples_s' is not a list"),
    ({"schema": "kbench.session/1", "results": {"t": [1, 2]}}, "result 't' is a list"),
    ({"schema": "kbench.result/1", "extra": [1]}, "'extra' is a list, not an object"),
    ({"schema": "kbench.result/1", "extra": {"regime": "burst"}}, "'extra.regime' is a str"),
    ({"schema": "kbench.result/1", "metadata": [1]}, "'metadata' is a list, not an object"),
    ({"schema": "kbench.result/1", "memory": {"peak_bytes": float("nan")}},
     "memory.peak_bytes is nan, not a finite number of bytes"),
    ({"schema": "kbench.result/1", "memory": {"peak_bytes": float("inf")}},
     "memory.peak_bytes is inf"),
    ({"schema": "kbench.result/1", "memory": {"peak_bytes": 1, "resolution_bytes": 1e999}},
     "memory.resolution_bytes is inf"),
    ({"schema": "kbench.result/1", "memory": {"peak_bytes": "1 MB"}}, "memory.peak_bytes is '1"),
    ({"schema": "kbench.result/1", "memory": 5}, "'memory' is a int, not an object"),
    ({"schema": "kbench.ab/1", "arms": ["a"], "trials": [{"a": {}}], "comparisons": {"x": 1}},
     "'comparisons' is a dict, not a list"),
])
def test_load_results_names_the_file_and_the_bad_field(doc, match, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=match) as ei:
        load_results(str(p))
    assert str(p) in str(ei.value)


def _gpu_result(median, regime, held=True):
    import numpy as np

    import kbench
    from kbench import _core
    samples = np.full(50, median) * (1 + 1e-4 * np.arange(50))
    r = kbench.Result(name="gemm", device="cuda:0", backend="cupti", samples=samples,
                      stats=_core.summarize(samples, 0.95), stop={"stop": "precision"},
                      cold_cache={"mode": "flush"},
                      extra={"regime": {"name": regime, "held": held}})
    return r.to_dict()


def test_figures_of_different_clock_regimes_are_not_compared_and_never_fail():
    from kbench.workflow.cli_compare import compare_sets
    old = {"gemm": _gpu_result(450e-6, "burst")}
    new = {"gemm": _gpu_result(540e-6, "sustained")}
    cmp = compare_sets(old, new, threshold="8%")
    (d,) = cmp.deltas
    assert d.verdict == "not comparable" and "burst -> sustained" in d.note
    assert not d.failure
    # the same regime on both sides is compared, and a regime that did not hold is noted
    same = compare_sets({"gemm": _gpu_result(450e-6, "sustained")},
                        {"gemm": _gpu_result(540e-6, "sustained", held=False)}, threshold="8%")
    (d,) = same.deltas
    assert d.verdict == "slower" and "current: clock regime did not hold" in d.note


def test_a_new_result_without_a_median_is_invalid_not_a_missing_baseline():
    good = make_result("k", 1e-3).to_dict()
    bare = {k: v for k, v in good.items() if k not in ("stats", "samples_s")}
    for old in ({"k": good}, {}):
        d, = compare_sets(old, {"k": bare}, threshold="8%").deltas
        assert d.verdict == "invalid" and d.failure and d.note == "current has no median"
    d, = compare_sets({"k": bare}, {"k": good}, threshold="8%").deltas
    assert d.verdict == "no baseline" and d.note == "baseline has no median" and not d.failure


def test_nothing_compared_is_said_not_passed_over():
    r = make_result("k", 1e-3).to_dict()
    cmp = compare_sets({"x": r}, {"a": r, "b": r}, threshold="8%")
    assert cmp.compared == 0
    assert cmp.summary() == ("nothing compared: no benchmark has a median in both baseline and "
                             "current (2 no baseline, 1 not run)")
    part = compare_sets({"a": r}, {"a": r, "b": r}, threshold="8%")
    assert part.compared == 1 and part.summary().endswith("(1 compared)")


def test_pairs_that_are_all_not_comparable_compare_nothing():
    """A harness that changed its cold-cache default must not pass every gate: a "not
    comparable" pair has a delta but checks nothing."""
    old = {k: _cold_result(1e-3, "none", seed=i) for i, k in enumerate("abcd")}
    new = {k: _cold_result(5e-3, "rotate", seed=9 + i) for i, k in enumerate("abcd")}
    cmp = compare_sets(old, new, threshold="8%")
    assert [d.verdict for d in cmp.deltas] == ["not comparable"] * 4
    assert cmp.compared == 0
    assert cmp.summary() == ("nothing compared: no benchmark has comparable figures in both "
                             "baseline and current (4 not comparable)")
    new["a"] = _cold_result(1e-3, "none", seed=20)        # one comparable pair: counted alone
    some = compare_sets(old, new, threshold="8%")
    assert some.compared == 1 and some.summary().endswith("(1 compared, 3 not comparable)")


def _ab_file(tmp_path, fname, medians, seed=0):
    """An A/B run of arms {name: per-trial median}: each trial's Result sampled around it."""
    from kbench.workflow.ab import ABResult, ArmComparison
    arms = list(medians)
    trials = [{a: make_result(a, m * (1 + 0.002 * t), seed=seed + 10 * t + i)
               for i, (a, m) in enumerate(medians.items())} for t in range(8)]
    comps = [ArmComparison(arm=a, baseline=arms[0], deltas=[0.0] * 8, median_delta=0.0,
                           ci_low=0.0, ci_high=0.0, ci_level=0.95, same_sign=False,
                           verdict="no difference resolved") for a in arms[1:]]
    r = ABResult(arms=arms, trials=trials, orders=[arms] * 8, comparisons=comps)
    p = tmp_path / fname
    r.to_json(str(p))
    return str(p), r


def test_ab_files_compare_each_arm_by_its_median_of_trial_medians(tmp_path):
    old, r_old = _ab_file(tmp_path, "old.json", {"base": 1e-3, "cand": 1e-3})
    new, _ = _ab_file(tmp_path, "new.json", {"base": 1e-3, "cand": 2e-3}, seed=100)
    sets = load_results(old)
    assert list(sets) == ["base", "cand"]
    st = sets["cand"]["stats"]
    meds = r_old.medians("cand")
    assert st["median"] == pytest.approx(float(np.median(meds)))
    assert st["ci_low"] <= st["median"] <= st["ci_high"]
    assert st["ci_low"] >= meds.min() and st["ci_high"] <= meds.max()
    assert sets["cand"]["samples_s"] == pytest.approx(list(meds))
    cmp = compare_sets(sets, load_results(new), threshold=0.08)
    verdicts = {d.key: d.verdict for d in cmp.deltas}
    assert verdicts["cand"] == "slower" and verdicts["base"] != "slower"


def test_sweep_files_compare_case_by_case(tmp_path):
    from kbench.workflow.sweep import SweepResult

    def sweep_file(fname, slow_n):
        cases = [{"n": 1024}, {"n": 4096}]
        results = [make_result(f"add[n={c['n']}]", (2e-3 if c["n"] == slow_n else 1e-3),
                               seed=c["n"] + (slow_n or 0)) for c in cases]
        p = tmp_path / fname
        SweepResult(axes={"n": [1024, 4096]}, cases=cases, results=results).to_json(str(p))
        return str(p)

    old, new = sweep_file("old.json", None), sweep_file("new.json", 4096)
    assert list(load_results(old)) == ["add[n=1024]", "add[n=4096]"]
    text = compare_files(old, new, threshold=0.08)
    assert "1 of 2 benchmarks slower than old beyond 8%: add[n=4096]" in text


def test_sweep_cases_sharing_a_name_pair_by_their_axis_values_not_their_order(tmp_path):
    # a factory that passes name= gives every case that name: keyed by position, a sweep
    # whose values were reordered paired n=1024 with n=16384 (+168% SLOWER, --fail exit 1)
    from kbench.workflow.sweep import SweepResult

    def sweep_file(fname, order):
        cases = [{"n": n} for n in order]
        results = [make_result("sin", 1e-3 * n / 1024, seed=n) for n in order]
        p = tmp_path / fname
        SweepResult(axes={"n": list(order)}, cases=cases, results=results).to_json(str(p))
        return str(p)

    old, new = sweep_file("old.json", (1024, 16384)), sweep_file("new.json", (16384, 1024))
    assert sorted(load_results(old)) == sorted(load_results(new)) == ["sin[n=1024]",
                                                                       "sin[n=16384]"]
    cmp = compare_sets(load_results(old), load_results(new), threshold="8%")
    assert cmp.compared == 2 and not cmp.regressions


def test_a_short_ab_file_is_refused_by_name(tmp_path):
    path, _ = _ab_file(tmp_path, "ab.json", {"base": 1e-3, "cand": 1e-3})
    doc = json.loads(open(path).read())
    doc["trials"], doc["orders"] = doc["trials"][:2], doc["orders"][:2]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"short.json, arm 'base': .*too few"):
        load_results(str(short))


def _cold_result(median, mode, flush_bytes=None, seed=0):
    """A CPU result of numpy.sum taken with cold_cache=mode (None: an older file without
    cold_cache); spread 0.1%: two medians 30% apart are resolved."""
    d = make_result("numpy.sum", median, spread=0.001, seed=seed).to_dict()
    if mode is None:
        d.pop("cold_cache", None)
    else:
        d["cold_cache"] = {"mode": mode, "cache_bytes": 32 << 20,
                           "flush_bytes": (64 << 20 if mode == "flush" else 0)
                           if flush_bytes is None else flush_bytes}
    return d


def test_a_hot_and_a_cold_figure_are_not_comparable_and_never_fail(tmp_path, capsys):
    # the quickstart notebook's hot vs flushed numpy.sum read "+32.9% SLOWER" and failed a gate
    from kbench.workflow.cli import main as cli_main
    hot, cold = _cold_result(541e-6, "none"), _cold_result(719e-6, "flush", seed=1)
    cmp = compare_sets({"s": hot}, {"s": cold}, threshold="5%")
    (d,) = cmp.deltas
    assert d.verdict == "not comparable" and not d.failure and cmp.ok
    assert "cold cache none (hot) -> flush" in d.note
    assert d.delta == pytest.approx(719 / 541 - 1, rel=0.01)   # reported, not judged
    rot = compare_sets({"s": _cold_result(719e-6, "flush")},
                       {"s": _cold_result(900e-6, "rotate", seed=1)}, threshold="5%")
    assert rot.deltas[0].verdict == "not comparable" and "flush -> rotate" in rot.deltas[0].note
    # the CLI: reported, never SLOWER; but a gate of this pair alone compared nothing
    old, new = tmp_path / "hot.json", tmp_path / "cold.json"
    old.write_text(json.dumps(hot))
    new.write_text(json.dumps(cold))
    assert cli_main(["compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "not comparable (cold cache none (hot) -> flush)" in out and "SLOWER" not in out
    assert cli_main(["compare", str(old), str(new), "--fail", "5%"]) == 1
    assert "nothing compared" in capsys.readouterr().out


def test_the_same_or_an_unknown_cold_cache_mode_compares_as_before():
    d, = compare_sets({"s": _cold_result(541e-6, "flush")},
                      {"s": _cold_result(719e-6, "flush", seed=1)}, threshold="5%").deltas
    assert d.verdict == "slower" and d.failure and d.note == ""
    d, = compare_sets({"s": _cold_result(541e-6, "none")},
                      {"s": _cold_result(719e-6, "none", seed=1)}, threshold="5%").deltas
    assert d.verdict == "slower" and d.failure
    # a different flush buffer, the same mode: compared, and said
    d, = compare_sets({"s": _cold_result(541e-6, "flush", flush_bytes=64 << 20)},
                      {"s": _cold_result(719e-6, "flush", flush_bytes=256 << 20, seed=1)},
                      threshold="5%").deltas
    assert d.verdict == "slower" and d.failure
    assert "flush size 67.1 MB -> 268.4 MB" in d.note

    # older files carry no cold_cache: unknown, so the verdict is the medians' as before
    for old_mode, new_mode in ((None, "flush"), ("none", None), (None, None)):
        d, = compare_sets({"s": _cold_result(541e-6, old_mode)},
                          {"s": _cold_result(719e-6, new_mode, seed=1)}, threshold="5%").deltas
        assert d.verdict == "slower" and d.failure and "cold cache" not in d.note


def _with_metadata(r, **md):
    d = r.to_dict()
    d["metadata"] = md
    return d


def _gpu(**kw):
    return dict({"name": "NVIDIA H200", "uuid": "GPU-46db77c8-3901", "driver_version": 13000,
                 "nvml_driver_version": "580.65.06", "nvml_power_limit_w": 700.0,
                 "ecc_enabled": True}, **kw)


def test_what_changed_around_the_code_is_reported_once_for_a_whole_session():
    libs = {"cublas": {"path": "/x/libcublas.so.13", "version": "13.0.2"},
            "cudnn": {"path": "/x/libcudnn.so.9", "version": "9.10.2"}}
    old_md = dict(gpu=_gpu(), frameworks={"torch": "2.10.0", "torch_num_threads": 8},
                  gpu_libraries=libs, env={"KBENCH_GIT_COMMIT": "aaa"}, python_version="3.12.3")
    new_md = dict(gpu=_gpu(nvml_driver_version="580.82.07", uuid="GPU-902372c2-0000"),
                  frameworks={"torch": "2.11.0", "torch_num_threads": 16},
                  gpu_libraries=dict(libs, cublas={"path": "/y/libcublas.so.13",
                                                   "version": "13.1.0"}),
                  env={"KBENCH_GIT_COMMIT": "bbb", "NCCL_ALGO": "Ring"},
                  python_version="3.12.3")
    old = {k: _with_metadata(make_result(k, 1e-3, seed=i), **old_md) for i, k in enumerate("ab")}
    new = {k: _with_metadata(make_result(k, 1e-3, seed=i + 5), **new_md)
           for i, k in enumerate("ab")}
    cmp = compare_sets(old, new)
    want = ["another NVIDIA H200 board (GPU-46db77c8 -> GPU-902372c2)",
            "driver 580.65.06 -> 580.82.07", "torch 2.10.0 -> 2.11.0",
            "cublas 13.0.2 -> 13.1.0", "NCCL_ALGO unset -> Ring"]
    assert [d.environment for d in cmp.deltas] == [want, want]
    assert cmp.environment_lines() == ["environment changed: " + "; ".join(want)]
    assert cmp.environment_lines()[0] in str(cmp)
    assert cmp.deltas[0].to_dict()["environment"] == want
    assert cmp.ok           # reported, not failed


def test_environment_lines_are_per_benchmark_where_they_differ_and_absent_where_none():
    old = {"a": _with_metadata(make_result("a", 1e-3), gpu=_gpu()),
           "b": _with_metadata(make_result("b", 1e-3, seed=1), gpu=_gpu())}
    new = {"a": _with_metadata(make_result("a", 1e-3, seed=2), gpu=_gpu(name="NVIDIA H100")),
           "b": _with_metadata(make_result("b", 1e-3, seed=3), gpu=_gpu())}
    assert compare_sets(old, new).environment_lines() == \
        ["environment changed: a: GPU NVIDIA H200 -> NVIDIA H100"]
    assert compare_sets(old, old).environment_lines() == []
    # results saved without metadata (or with odd metadata) compare as before
    bare = {"a": make_result("a", 1e-3).to_dict()}
    odd = {"a": _with_metadata(make_result("a", 1e-3), gpu="H200", frameworks=[1])}
    assert compare_sets(bare, odd).environment_lines() == []
    assert compare_sets(odd, odd).environment_lines() == []


def _doc_on_host(median, busy):
    """A result dict with a tight CI, taken on a busy or quiet host."""
    return {"name": "k", "device": "cpu", "backend": "host",
            "stats": {"median": median, "ci_low": median * 0.99, "ci_high": median * 1.01,
                      "n": 100, "rel_ci_halfwidth": 0.01},
            "stop": {"stop": "budget"}, "cold_cache": {"mode": "flush"},
            "extra": {"host_load": {"busy": busy, "others_cpus": 1.0 if busy else 0.0,
                                    "steal_share": 0.0, "cpus": 2}}}


def test_a_busy_host_is_named_and_judges_only_what_it_cannot_explain():
    """On a busy host the figures move tens of % between runs: a +20% pair is 'busy host'
    (named, not a failure), a planted 2x is still 'slower'; quiet, +20% is 'slower'."""
    from kbench.workflow.cli_compare import BUSY_HOST_THRESHOLD, compare_sets
    base = {"k": _doc_on_host(1e-3, busy=False)}
    for busy in (True, False):
        d = compare_sets(base, {"k": _doc_on_host(1.2e-3, busy=busy)}, 0.08).deltas[0]
        assert d.verdict == ("busy host" if busy else "slower"), d
        assert ("busy or oversubscribed host: slowdowns up to +50%" in d.note) is busy
        assert d.failure is (not busy)
    planted = compare_sets(base, {"k": _doc_on_host(2e-3, busy=True)}, 0.08).deltas[0]
    assert 1.0 > BUSY_HOST_THRESHOLD and planted.verdict == "slower" and planted.failure


def test_without_a_threshold_the_summary_names_no_cut_off():
    """`kbench compare` without --fail compares at threshold 0: a delta counts once the CIs
    are apart, and the summary says so rather than "beyond 0%"."""
    from kbench.workflow.cli_compare import compare_sets
    base = {"k": _doc_on_host(1e-3, busy=False)}
    same = compare_sets(base, {"k": _doc_on_host(1e-3, busy=False)}, 0.0).summary()
    slow = compare_sets(base, {"k": _doc_on_host(1.5e-3, busy=False)}, 0.0).summary()
    assert "beyond 0%" not in same + slow
    assert same.startswith("no benchmark slower than baseline (1 compared")
    assert slow.startswith("1 of 1 benchmarks slower than baseline: k")
    assert "beyond 8%" in compare_sets(base, {"k": _doc_on_host(1.5e-3, busy=False)},
                                       0.08).summary()


def test_the_gate_reads_each_runs_own_ci_not_the_one_widened_by_its_run_history():
    """A stated CI widened to the spread of earlier runs (kbench.measure.runhistory) would let a 2x
    regression overlap its baseline; the gate reads the run's own CI, and learns the spread
    between sessions from a baseline of several (kbench.workflow.baseline)."""
    from kbench.workflow import baseline
    old = {"mm": make_result("mm", 1e-3).to_dict()}
    new = {"mm": make_result("mm", 2e-3, seed=1).to_dict()}
    st = new["mm"]["stats"]
    st["ci_low_within"], st["ci_high_within"] = st["ci_low"], st["ci_high"]
    st["ci_low"], st["ci_high"] = 2e-3 / 2.5, 2e-3 * 2.5            # as a +-150% history
    by = {d.key: d for d in compare_sets(old, new, threshold="8%").deltas}
    assert by["mm"].verdict == "slower" and by["mm"].regression
    assert baseline.session_figure(new["mm"])["ci_low"] == st["ci_low_within"]


def test_a_figure_timed_with_its_pools_sized_keeps_its_verdict_and_names_the_thread_count():
    from kbench.workflow.cli_compare import compare_sets
    base = {"k": _doc_on_host(1e-3, busy=False)}
    new = _doc_on_host(1.7e-3, busy=True)
    new["extra"]["host_load"]["pools_sized"] = {
        "threads": 1, "pools": [{"kind": "openblas", "library": "libopenblas.so", "threads": 2}],
        "first_run": {"median_s": 4e-3, "own_cpus": 1.9, "others_cpus": 0.4}}
    d = compare_sets(base, {"k": new}, 0.08).deltas[0]
    assert d.verdict == "slower" and d.failure
    assert "current's thread pools were sized from 2 to 1 on a busy host" in d.note


def _sized_doc(median, threads=1):
    d = _doc_on_host(median, busy=True)
    d["extra"]["host_load"]["pools_sized"] = {
        "threads": threads, "pools": [{"kind": "openblas", "library": "libopenblas.so",
                                       "threads": 2}],
        "first_run": {"median_s": 4 * median, "own_cpus": 1.9, "others_cpus": 0.4}}
    return d


def _with_ladder(doc, sessions):
    """A baseline of sessions, each with its figure at 1 thread (a --kbench-save's ladder)."""
    from kbench.workflow import baseline
    doc["sessions"] = []
    for med, med1 in sessions:
        s = baseline.session_figure(_doc_on_host(med, busy=False))
        s["sized"] = {"1": {"median": med1, "ci_low": med1 * 0.97, "ci_high": med1 * 1.03}}
        doc["sessions"].append(s)
    return doc


def test_a_sized_figure_meets_the_baselines_figure_at_as_many_threads():
    """A busy session's pools sized to 1 thread read +70% of the 2-thread baseline; against the
    baseline's own 1-thread figure the unchanged code passes and a planted 2x fails."""
    from kbench.workflow.cli_compare import compare_sets
    base = {"k": _with_ladder(_doc_on_host(1e-3, busy=False),
                              [(1.0e-3, 1.70e-3), (1.02e-3, 1.72e-3), (0.99e-3, 1.68e-3)])}
    same = compare_sets(base, {"k": _sized_doc(1.71e-3)}, 0.08).deltas[0]
    assert not same.failure and same.verdict != "slower"
    assert "compared with baseline's figure at 1 thread (3 sessions)" in same.note
    assert "part of the difference is the thread count" not in same.note
    planted = compare_sets(base, {"k": _sized_doc(3.4e-3)}, 0.08).deltas[0]
    assert planted.verdict == "slower" and planted.failure
    other = compare_sets(base, {"k": _sized_doc(1.71e-3, threads=2)}, 0.08).deltas[0]
    assert "part of the difference is the thread count" in other.note      # no such figure


@pytest.mark.parametrize("sized,why", [
    ({"1": {"median": 1e-3, "ci_low": 2e-3, "ci_high": 3e-3}}, "not a confidence interval"),
    ({"1": {"median": 1e-3}}, "needs a finite median"),
    ({"one": {"median": 1e-3, "ci_low": 1e-3, "ci_high": 1e-3}}, "not a thread count"),
    ([], "not an object of figures")])
def test_a_malformed_figure_at_fewer_threads_is_refused_naming_it(tmp_path, sized, why):
    from kbench.workflow.cli_compare import load_results
    doc = _with_ladder(_doc_on_host(1e-3, busy=False), [(1e-3, 2e-3), (1e-3, 2e-3)])
    doc["sessions"][1]["sized"] = sized
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schema": "kbench.session/1", "results": {"k": doc}}))
    with pytest.raises(ValueError, match=r"sessions\[1\]\.sized.*" + why):
        load_results(str(path))
