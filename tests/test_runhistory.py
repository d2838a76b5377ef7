"""The run history (kbench.measure.runhistory): a figure's CI widened to the spread between
runs."""
import json
import math

import numpy as np
import pytest

import kbench
from kbench import _core
from kbench.measure import runhistory
from kbench.report.result import Result


@pytest.fixture
def history(tmp_path, monkeypatch):
    path = tmp_path / "runs.json"
    monkeypatch.setenv("KBENCH_RUN_HISTORY", str(path))
    return path


def fake_result(median, args_md5="a", half=0.001, name="op"):
    """A result whose samples sit within +-half (relative) of median, as bench would return."""
    samples = median * (1 + half * np.linspace(-1, 1, 101))
    stats = _core.summarize(samples, 0.95)
    r = Result(name=name, device="cpu", backend="host", samples=samples, stats=stats,
               stop={"stop": "budget"}, cold_cache={"mode": "flush", "method": "write"})
    r.metadata = {"harness": {"callable": {"qualname": name, "module": "m",
                                           "source_md5": "s"},
                              "args": {"signature": "x", "md5": args_md5}}}
    return r


@pytest.mark.parametrize("level,df,t", [(0.95, 1, 12.7062), (0.95, 2, 4.3027),
                                        (0.95, 9, 2.2622), (0.99, 4, 4.6041),
                                        (0.9, 29, 1.6991), (0.95, 1e7, 1.9600),
                                        (0.4, 1e7, 0.5244)])
def test_t_quantile_matches_the_tables(level, df, t):
    assert _core.t_quantile(level, df) == pytest.approx(t, abs=1e-4)


@pytest.mark.parametrize("args", [(1.0, 2), (0.0, 2), (0.95, 0), (0.95, float("inf"))])
def test_t_quantile_refuses_a_level_or_df_out_of_range(args):
    with pytest.raises(ValueError, match="t_quantile"):
        _core.t_quantile(*args)


def test_between_runs_is_t_times_the_sd_of_the_log_medians():
    meds = [1.00, 1.02, 0.99, 1.01]
    got = _core.between_runs(meds, 0.95)
    sd = np.std(np.log(meds), ddof=1)
    assert got["runs"] == 4 and got["log_sd"] == pytest.approx(sd)
    assert got["rel_halfwidth"] == pytest.approx(math.expm1(_core.t_quantile(0.95, 3) * sd))
    two = _core.between_runs([1.0, 1.1])            # t = 12.7 from their one difference
    sd2 = abs(math.log(1.1)) / math.sqrt(2)
    assert two["rel_halfwidth"] == pytest.approx(math.expm1(12.7062 * sd2), rel=1e-4)
    one = _core.between_runs([1.0])
    assert one["runs"] == 1 and math.isnan(one["rel_halfwidth"])


@pytest.mark.parametrize("bad", [[1.0, 0.0, 1.0], [1.0, -1.0, 1.0], [1.0, float("nan"), 1.0]])
def test_between_runs_refuses_a_median_that_is_not_positive(bad):
    with pytest.raises(ValueError, match="finite and positive, got .* at index 1"):
        _core.between_runs(bad)


def test_later_runs_state_the_spread_of_the_runs(history):
    outs = []
    for med in (1.00e-3, 1.05e-3, 0.96e-3):
        r = fake_result(med)
        outs.append(runhistory.record(r))
    assert [o["runs"] for o in outs] == [1, 2, 3]
    assert outs[0]["source"] is None and "the CI is this run's alone" in outs[0]["why"]
    assert not outs[0]["widened"]
    # two runs: Student's t with one degree of freedom, wide (12.7 x sd at 95%)
    assert outs[1]["source"] == "this benchmark" and outs[1]["widened"]
    assert outs[1]["rel_halfwidth"] > outs[2]["rel_halfwidth"]
    assert outs[2]["source"] == "this benchmark" and outs[2]["widened"]
    st = r.stats
    # the stated CI holds each run's median; the run's own, kept beside it, does not
    assert st["ci_low"] <= 1.00e-3 <= st["ci_high"] and st["ci_low"] <= 1.05e-3
    assert not st["ci_low_within"] <= 1.00e-3 <= st["ci_high_within"]
    assert st["rel_ci_halfwidth"] > 10 * st["rel_ci_halfwidth_within"]
    text = "\n".join(r._rows()[0])
    assert "widened to the spread between runs, from 3 runs of this benchmark" in text
    assert json.loads(history.read_text())["benchmarks"]


def test_a_benchmark_without_runs_of_its_own_takes_the_devices_pooled_spread(history):
    for med in (1.00e-3, 1.05e-3, 0.96e-3):
        runhistory.record(fake_result(med, args_md5="a"))
    other = fake_result(5e-3, args_md5="b")
    out = runhistory.record(other)
    assert out["runs"] == 1 and out["source"] == "1 other benchmark on this device"
    assert out["widened"] and other.stats["rel_ci_halfwidth"] > 0.04
    # its second run still prefers the pool (t with 2 degrees of freedom) to its own (t = 12.7)
    out = runhistory.record(fake_result(5.01e-3, args_md5="b"))
    assert out["runs"] == 2 and out["source"] == "1 other benchmark on this device"


def test_a_run_whose_spread_is_inside_its_own_ci_is_not_widened(history):
    for med in (1.0000e-3, 1.0001e-3, 0.9999e-3):
        r = fake_result(med, half=0.05)
        out = runhistory.record(r)
    assert out["source"] == "this benchmark" and not out["widened"]
    assert r.stats["ci_low"] == r.stats["ci_low_within"]


def test_a_median_twice_away_restarts_its_benchmarks_history(history):
    for med in (1.00e-3, 1.05e-3, 0.96e-3):
        runhistory.record(fake_result(med))
    out = runhistory.record(fake_result(2.5e-3))
    assert out["restarted"] and out["runs"] == 1


def test_one_earlier_run_does_not_judge_a_restart_and_the_range_of_several_does(history):
    """A first run 2.5x slow (page faults, a busy second) is noise to keep, not a new figure:
    dropping it would drop the spread the CI must state."""
    runhistory.record(fake_result(2.5e-3))
    out = runhistory.record(fake_result(1.0e-3))
    assert not out["restarted"] and out["runs"] == 2
    out = runhistory.record(fake_result(4.5e-3))        # within 2x of the slowest earlier run
    assert not out["restarted"] and out["runs"] == 3
    out = runhistory.record(fake_result(0.4e-3))        # under half of the fastest: another figure
    assert out["restarted"] and out["runs"] == 1


def make_add(n):
    x = np.ones(n)
    return lambda: x + x


def test_closures_over_other_data_are_other_benchmarks(history):
    for n in (1 << 10, 1 << 12, 1 << 10):
        kbench.bench(make_add(n), max_time_s=0.01, memory=False)
    benches = json.loads(history.read_text())["benchmarks"]
    assert sorted(len(e["runs"]) for e in benches.values()) == [1, 2]


def test_off_keeps_no_file_and_states_the_runs_own_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_RUN_HISTORY", "off")
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))
    r = fake_result(1e-3)
    out = runhistory.record(r)
    assert out["source"] is None and "off" in out["why"] and not list(tmp_path.iterdir())


def test_an_unwritable_or_corrupt_file_is_said_and_never_fails_the_bench(tmp_path,
                                                                         monkeypatch):
    bad = tmp_path / "runs.json"
    bad.write_text("{not json")
    monkeypatch.setenv("KBENCH_RUN_HISTORY", str(bad))
    assert runhistory.record(fake_result(1e-3))["runs"] == 1       # begun again
    monkeypatch.setenv("KBENCH_RUN_HISTORY", str(tmp_path / "file" / "under" / "a" / "file"))
    (tmp_path / "file").write_text("")
    out = runhistory.record(fake_result(1e-3))
    assert out["saved"].startswith("not saved: cannot write")


def test_the_default_file_lives_in_the_kbench_cache_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("KBENCH_RUN_HISTORY")
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))
    path = runhistory.history_path()
    assert path.startswith(str(tmp_path)) and "runs-" in path


def test_bench_keeps_its_runs_and_its_stop_rule_reads_the_runs_own_ci(history):
    a = np.ones(1 << 15)
    for i in range(3):
        r = kbench.bench(np.add, a, a, max_time_s=0.05, memory=False)
    between = r.extra["between_runs"]
    assert between["runs"] == 3 and between["source"] == "this benchmark"
    assert r.stats["ci_low"] <= r.stats["ci_low_within"] <= r.median
    # the stop rule's precision is the run's own: between-run movement is not sampled away
    assert r.stop["achieved"] == pytest.approx(r.stats["rel_ci_halfwidth_within"], rel=0.05)


def test_kbench_ab_trials_are_not_runs_of_their_own(history):
    a = np.ones(1 << 10)
    kbench.ab({"A": lambda: a + a, "B": lambda: a * a}, trials=6, max_time_s=0.01,
              warmup_s=0.0, memory=False)
    assert not history.exists()
    kbench.bench(np.add, a, a, max_time_s=0.02, memory=False)
    assert len(json.loads(history.read_text())["benchmarks"]) == 1


def test_the_drop_ins_keep_their_times_out_of_the_history_unless_a_result_is_asked_for(history):
    from kbench.testing import bench_gpu_time, do_bench
    a = np.ones(1 << 10)
    do_bench(lambda: a + a, warmup=1, rep=5, device="cpu")
    bench_gpu_time(np.add, dry_run_iters=1, repeat_iters=5, input_args=(a, a), device="cpu")
    assert not history.exists()
    do_bench(lambda: a + a, warmup=1, rep=5, device="cpu", return_result=True)
    assert history.exists()


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_a_path_that_is_not_a_file_is_neither_read_nor_written_and_the_bench_goes_on(
        tmp_path, monkeypatch, kind):
    """A FIFO at the run history's path once blocked every bench in open()."""
    import os
    path = tmp_path / "runs.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    monkeypatch.setenv("KBENCH_RUN_HISTORY", str(path))
    with pytest.warns(runhistory.RunHistoryWarning, match="neither read nor written"):
        r = kbench.bench(np.add, np.ones(8), np.ones(8), max_time_s=0.01, memory=False)
    assert r.extra["between_runs"]["source"] is None
    assert "not a regular file" in r.extra["between_runs"]["why"]
    assert r.stats["ci_low"] == r.stats["ci_low_within"]
    assert (path.is_fifo() if kind == "fifo" else path.is_symlink() if kind == "dev_zero"
            else path.is_dir())       # left as it was


def test_processes_recording_at_once_lose_no_run(history):
    """Each record reads, adds and rewrites the file: without the lock, two processes that
    read it at once each wrote over the other's run."""
    import subprocess
    import sys
    code = ("import sys; sys.path.insert(0, {tests!r}); import test_runhistory as t; "
            "from kbench.measure import runhistory\n"
            "for i in range(15): runhistory.record(t.fake_result(1e-3, args_md5=f'{{sys.argv[1]}}-{{i}}'))")
    code = code.format(tests=str(__import__("pathlib").Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)]) for p in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert len(json.loads(history.read_text())["benchmarks"]) == 60
