"""The pytest plugin, run in subprocesses through pytester: save, compare (a planted 2x
regression fails the session, an unchanged run passes), disable, GPU markers, max-time, and
coexistence with pytest-benchmark."""
import json
import os

import pytest

import kbench
from kbench.report.result import Result
from kbench.testing import cuda_device_status

pytest_plugins = ["pytester"]

KBENCH_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__)))

# A kernel whose duration is set by a busy-wait on the wall clock: stable from run to run on
# a busy 2-core machine, and exactly twice as long when KB_SLOW is set.
BENCH_TESTS = """
import os, time

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def kernel():
    spin(0.0004 * (2 if os.environ.get("KB_SLOW") else 1))

def test_kernel(kbench):
    r = kbench(kernel, cold_cache=None, warmup_s=0.02, max_time_s=0.15)
    assert r.median >= 0.0004
"""


@pytest.fixture
def run(pytester, monkeypatch):
    """Run pytest on the test files written in pytester's directory: in this process by
    default (fast), in a fresh subprocess importing the same kbench with subprocess=True."""
    paths = [KBENCH_ROOT, os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.delenv("KB_SLOW", raising=False)

    def _run(*args, slow=False, subprocess=False):
        if slow:
            monkeypatch.setenv("KB_SLOW", "1")
        else:
            monkeypatch.delenv("KB_SLOW", raising=False)
        # hypothesis' plugin costs a second of start-up and plays no part here
        args = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest") + args
        if subprocess:
            return pytester.runpytest_subprocess(*args)
        return pytester.runpytest_inprocess(*args)
    return _run


def test_save_writes_a_session_file_with_every_result(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    res = run("--kbench-save=out/base.json", "--kbench-max-time=0.2")
    res.assert_outcomes(passed=1)
    assert res.ret == 0
    doc = json.loads((pytester.path / "out" / "base.json").read_text())
    assert doc["schema"] == "kbench.session/1"
    assert list(doc["results"]) == ["kbp_bench_test.py::test_kernel"]
    r = Result.from_dict(doc["results"]["kbp_bench_test.py::test_kernel"])
    assert r.median >= 0.0004
    assert r.stop["max_time_s"] == pytest.approx(0.2)     # --kbench-max-time overrides 0.15
    md = doc["metadata"]
    assert md["kbench_version"] == kbench.__version__ and md["created"]
    res.stdout.fnmatch_lines(["*kbench: 1 benchmark(s)*", "*kbp_bench_test.py::test_kernel*",
                              "*saved 1 result(s) to out/base.json*"])


def test_compare_fails_on_planted_regression_and_passes_unchanged(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", subprocess=True).ret == 0

    same = run("--kbench-compare=base.json", "--kbench-fail=8%", subprocess=True)
    same.assert_outcomes(passed=1)
    assert same.ret == 0, same.stdout.str()
    assert "SLOWER" not in same.stdout.str()
    same.stdout.fnmatch_lines(["*compared with base.json*",
                               "*benchmark*baseline*current*delta*verdict*",
                               "*no benchmark slower than baseline beyond 8%*"])

    slow = run("--kbench-compare=base.json", "--kbench-fail=8%", slow=True, subprocess=True)
    slow.assert_outcomes(passed=1)          # every test passed; the session still fails
    assert slow.ret == 1, slow.stdout.str()
    slow.stdout.fnmatch_lines(["*kbp_bench_test.py::test_kernel*+*%*SLOWER*",
                               "FAILED: 1 of 1 benchmarks slower than baseline beyond 8%*"])
    # pytest's own closing line says so too, not only the exit status
    slow.stdout.re_match_lines([r".*1 passed, 1 kbench gate failed in .*"])
    assert "kbench gate failed" not in same.stdout.str()

    report_only = run("--kbench-compare=base.json", "--kbench-fail=off", slow=True)
    assert report_only.ret == 0
    assert "SLOWER" in report_only.stdout.str()


def test_save_and_compare_to_one_path_compares_with_the_previous_baseline(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", subprocess=True).ret == 0
    fast = json.loads(pytester.path.joinpath("base.json").read_text())["results"]
    # the usual CI step: compare with the last baseline, then make this run the new one
    slow = run("--kbench-save=base.json", "--kbench-compare=base.json", slow=True,
               subprocess=True)
    assert slow.ret == 1, slow.stdout.str()
    slow.stdout.fnmatch_lines(["*kbp_bench_test.py::test_kernel*+*%*SLOWER*",
                               "FAILED: 1 of 1 benchmarks slower than baseline beyond 8%*",
                               "*saved 1 result(s) to base.json*"])
    saved = json.loads(pytester.path.joinpath("base.json").read_text())["results"]
    key = "kbp_bench_test.py::test_kernel"
    assert saved[key]["stats"]["median"] > 1.5 * fast[key]["stats"]["median"]


def test_compare_lists_new_benchmarks_as_no_baseline(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json").ret == 0
    pytester.makepyfile(kbp_more_test=BENCH_TESTS.replace("def test_kernel", "def test_new"))
    res = run("--kbench-compare=base.json")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*kbp_more_test.py::test_new*no baseline*"])


def test_a_baseline_of_other_benchmarks_fails_the_gate(pytester, run):
    # the wrong baseline file (other benchmarks): a gate that compared nothing has not passed
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json").ret == 0
    pytester.makepyfile(kbp_more_test=BENCH_TESTS.replace("def test_kernel", "def test_new"))
    res = run("kbp_more_test.py", "--kbench-compare=base.json", "--kbench-fail=8%")
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*nothing compared*1 no baseline*"])
    assert run("kbp_more_test.py", "--kbench-compare=base.json", "--kbench-fail=off").ret == 0


def test_bad_options_are_usage_errors(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    res = run("--kbench-compare=missing.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-compare: no such baseline file: missing.json*"])
    res = run("--kbench-fail=8", "--co")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-fail*ambiguous*8%*"])
    pytester.path.joinpath("notkbench.json").write_text('{"schema": "other"}')
    res = run("--kbench-compare=notkbench.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-compare: notkbench.json is not a kbench result, "
                              "session, sweep or A/B file*"])


MARKS_ITS_RUN = """
def test_runs():
    open("ran", "w").close()
"""


def test_a_corrupt_baseline_is_a_usage_error_before_any_test_runs(pytester, run):
    pytester.makepyfile(kbp_mark_test=MARKS_ITS_RUN)
    pytester.path.joinpath("bad.json").write_text("{\n")
    res = run("--kbench-compare=bad.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert not pytester.path.joinpath("ran").exists()
    res.stderr.fnmatch_lines(["ERROR: --kbench-compare: bad.json is not JSON (*"])
    assert "kbench compare:" not in res.stderr.str()      # one prefix, not two


def test_an_unwritable_save_path_is_a_usage_error_before_any_test_runs(pytester, run):
    pytester.makepyfile(kbp_mark_test=MARKS_ITS_RUN)
    pytester.mkdir("savedir")
    pytester.path.joinpath("afile").write_text("")
    for path, message in [("savedir", "savedir is a directory; give a file path such as *"),
                          ("afile/s.json", "cannot write afile/s.json: */afile is not a "
                                           "directory"),
                          ("/proc/nonexistent/s.json", "cannot write /proc/nonexistent/s.json: "
                                                       "cannot create a file in /proc (*)")]:
        res = run(f"--kbench-save={path}")
        assert res.ret == pytest.ExitCode.USAGE_ERROR, path
        res.stderr.fnmatch_lines([f"ERROR: --kbench-save: {message}"])
        assert not pytester.path.joinpath("ran").exists()
    assert sorted(p.name for p in pytester.path.iterdir()) == ["afile", "kbp_mark_test.py",
                                                               "savedir"]


def test_a_save_that_fails_at_the_end_is_one_line_and_leaves_no_temp_file(pytester, run):
    pytester.makepyfile(kbp_late_test="""
        import os

        def test_k(kbench):
            kbench(sum, [1, 2], cold_cache=None, warmup_s=0.01, max_time_s=0.05)
            os.mkdir("s.json")          # the save path turns into a directory mid-session
    """)
    res = run("--kbench-save=s.json")
    res.assert_outcomes(passed=1)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(["kbench: --kbench-save: cannot write s.json: Is a directory"])
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    assert not list(pytester.path.glob("s.json*.tmp"))


def test_disable_runs_each_body_once_and_still_checks(pytester, run):
    pytester.makepyfile(kbp_check_test="""
        import numpy as np
        calls = []

        def add_one(x):
            calls.append(1)
            return x + 1

        def test_right(kbench):
            x = np.arange(8.0)
            r = kbench(add_one, x, check=lambda x: x + 1, cold_cache=None)
            assert r.disabled and r.correctness["ok"]
            assert len(calls) == 1

        def test_wrong(kbench):
            x = np.arange(8.0)
            kbench(add_one, x, check=x * 2, cold_cache=None)

        def test_no_check_returns_output(kbench):
            calls.clear()
            r = kbench(add_one, np.zeros(3))
            assert len(calls) == 1 and r.disabled
            assert r.output.tolist() == [1.0, 1.0, 1.0]

        def test_checked_returns_output(kbench):
            calls.clear()
            r = kbench(add_one, np.zeros(3), check=np.ones(3))
            assert len(calls) == 1 and r.correctness["ok"]
            assert r.output.tolist() == [1.0, 1.0, 1.0]

        def test_reads_the_result_fields(kbench):
            # an ordinary benchmark test, unchanged: the fields exist, the figures are NaN
            import math
            x = np.arange(8.0)
            r = kbench(add_one, x, bytes=2 * x.nbytes, check=x + 1, cold_cache=None)
            assert math.isnan(r.median) and math.isnan(r.mean) and math.isnan(r.min)
            assert math.isnan(r.stats["ci_high"]) and r.n == 0 and len(r.samples) == 0
            assert r.correctness["ok"] and r.stop["stop"] == "disabled"
            assert r.throughput == {} and r.warnings and "not timed" in repr(r)
            assert r.to_json() and "<table" in r._repr_html_()
            assert kbench.disabled or r.median < 1e-3

        def test_in_place_output_is_checked(kbench):
            def fill(out, x):
                out[:] = x + 1
            x = np.arange(4.0)
            r = kbench(fill, np.empty(4), x, out_arg=0, check=x + 1)
            assert r.correctness["ok"]
    """)
    res = run("--kbench-disable", "--kbench-save=never.json")
    res.assert_outcomes(passed=5, failed=1)
    res.stdout.fnmatch_lines(["*does not match the reference; nothing was timed*",
                              "FAILED kbp_check_test.py::test_wrong*"])
    assert not pytester.path.joinpath("never.json").exists()
    assert "benchmark(s)" not in res.stdout.str()


def test_disable_refuses_the_options_that_timing_refuses(pytester, run):
    pytester.makepyfile(kbp_badopt_test="""
        import numpy as np

        calls = []

        def f(x):
            calls.append(1)
            return x

        async def later(x):
            return x

        def test_misspelt(kbench):
            kbench(f, np.ones(3), max_tme_s=0.5)

        def test_bad_cold_cache(kbench):
            kbench(f, np.ones(3), cold_cache="bogus")

        def test_bad_mode(kbench):
            kbench(f, np.ones(3), mode="graph")

        def test_bad_device(kbench):
            kbench(f, np.ones(3), device="tpu")

        def test_bad_bytes(kbench):
            kbench(f, np.ones(3), bytes="many")

        def test_async(kbench):
            kbench(later, np.ones(3))

        def test_rtol_without_check(kbench):
            kbench(f, np.ones(3), rtol=0.1)

        def test_nothing_was_called():
            assert calls == []

        def test_good_options_pass(kbench):
            r = kbench(f, np.ones(3), cold_cache=None, mode="host", device="cpu", bytes=48,
                       max_time_s=0.5, name="ok", kwargs={})
            assert r.disabled and r.output.tolist() == [1.0, 1.0, 1.0]
    """)
    res = run("--kbench-disable")
    res.assert_outcomes(passed=2, failed=7)
    res.stdout.fnmatch_lines([
        "*TypeError: kbench.bench: unexpected options for the CPU backend: [[]'max_tme_s'[]]*"
        "did you mean 'max_time_s'?*",
        "*ValueError: cold_cache must be None, 'flush' or 'rotate', got 'bogus'*",
        "*ValueError: mode 'graph' needs a CUDA device*",
        "*ValueError: kbench.bench: device must be 'auto', 'cpu' or 'cuda[[]:N[]]', got 'tpu'*",
        "*TypeError: kbench.bench: bytes must be a number of bytes per call, got str*",
        "*TypeError: kbench.bench: * is an async function*",
        "*ValueError: kbench.bench: * rtol=0.1 came without check=*"])


def test_wrong_answer_fails_before_timing_when_enabled(pytester, run):
    pytester.makepyfile(kbp_wrong_test="""
        import numpy as np

        def test_wrong(kbench):
            x = np.arange(4.0)
            kbench(lambda x: x, x, check=x + 1, cold_cache=None, warmup_s=0.01, max_time_s=0.1)
    """)
    res = run("--kbench-save=s.json")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*nothing was timed*"])
    assert not pytester.path.joinpath("s.json").exists()      # no result, nothing saved


def test_gpu_markers_skip_with_a_reason_without_cuda(pytester, run):
    pytester.makepyfile(kbp_gpu_test="""
        import sys
        import pytest

        @pytest.mark.kbench_gpu
        def test_a():
            pass

        @pytest.mark.gpu
        def test_b():
            pass

        def test_c():
            assert "torch" not in sys.modules      # the plugin never imports torch
    """)
    res = run("-rs", subprocess=True)       # a fresh process: no torch imported by other tests
    present, why = cuda_device_status()
    if present:
        res.assert_outcomes(passed=3)
    else:
        res.assert_outcomes(passed=1, skipped=2)
        res.stdout.fnmatch_lines(["*SKIPPED*needs a CUDA GPU (@pytest.mark.kbench_gpu)*",
                                  "*SKIPPED*needs a CUDA GPU (@pytest.mark.gpu)*"])


def test_several_benchmarks_in_one_test_are_keyed_apart(pytester, run):
    pytester.makepyfile(kbp_two_test="""
        def f():
            return sum(range(100))

        def test_two(kbench):
            opts = dict(cold_cache=None, warmup_s=0.01, max_time_s=0.05)
            kbench(f, **opts)
            kbench(f, name="again", **opts)
            kbench(f, **opts)
            assert len(kbench.results) == 3
    """)
    assert run("--kbench-save=s.json").ret == 0
    keys = list(json.loads(pytester.path.joinpath("s.json").read_text())["results"])
    assert keys == ["kbp_two_test.py::test_two", "kbp_two_test.py::test_two::again",
                    "kbp_two_test.py::test_two#3"]


def test_coexists_with_pytest_benchmark(pytester, run):
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(kbp_both_test="""
        def f():
            return sum(range(50))

        def test_both(kbench, benchmark):
            assert benchmark(f) == sum(range(50))
            r = kbench(f, cold_cache=None, warmup_s=0.01, max_time_s=0.05)
            assert r.disabled if kbench.disabled else r.median > 0
    """)
    res = run("--benchmark-min-rounds=3", "--benchmark-max-time=0.01", subprocess=True)
    res.assert_outcomes(passed=1)
    assert "kbench: 1 benchmark(s)" in res.stdout.str()
    res = run("--benchmark-disable", "--kbench-disable")
    res.assert_outcomes(passed=1)
    helptext = run("--help", subprocess=True).stdout.str()
    for opt in ("--kbench-save", "--kbench-compare", "--kbench-fail", "--kbench-disable",
                "--kbench-max-time", "--benchmark-save", "--benchmark-compare"):
        assert opt in helptext


def test_a_baseline_with_a_nan_median_fails_the_session(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", "--kbench-max-time=0.1").ret == 0
    doc = json.loads(pytester.path.joinpath("base.json").read_text())
    doc["results"]["kbp_bench_test.py::test_kernel"]["stats"]["median"] = float("nan")
    pytester.path.joinpath("base.json").write_text(json.dumps(doc))
    res = run("--kbench-compare=base.json", "--kbench-fail=8%", "--kbench-max-time=0.1")
    res.assert_outcomes(passed=1)
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*kbp_bench_test.py::test_kernel*INVALID (baseline median is nan)*",
                              "FAILED: *1 with an invalid median*"])


def test_a_baseline_without_stats_is_a_usage_error_naming_the_field(pytester, run):
    # its missing CI counted as overlapping: a run 3.5x slower passed --kbench-fail=8%
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", "--kbench-max-time=0.1").ret == 0
    doc = json.loads(pytester.path.joinpath("base.json").read_text())
    del doc["results"]["kbp_bench_test.py::test_kernel"]["stats"]
    pytester.path.joinpath("base.json").write_text(json.dumps(doc))
    res = run("--kbench-compare=base.json", "--kbench-fail=8%", "--kbench-max-time=0.1",
              slow=True)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: --kbench-compare: base.json, result "
                              "'kbp_bench_test.py::test_kernel': no 'stats' *"])


def test_a_baseline_median_of_a_picosecond_fails_the_session(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", "--kbench-max-time=0.1").ret == 0
    doc = json.loads(pytester.path.joinpath("base.json").read_text())
    doc["results"]["kbp_bench_test.py::test_kernel"]["stats"].update(
        median=1e-12, ci_low=0.9e-12, ci_high=1.1e-12)
    pytester.path.joinpath("base.json").write_text(json.dumps(doc))
    res = run("--kbench-compare=base.json", "--kbench-fail=8%", "--kbench-max-time=0.1")
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*INVALID (baseline median is 1e-12 s, not a plausible time*"])


# -- review fixes: empty sessions, interrupted saves, shared temp files, xdist, option checks

def test_a_session_where_no_benchmark_ran_fails_the_compare_gate(pytester, run):
    # every benchmark skipped or deselected: the gate compared nothing, so it has not passed
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", "--kbench-max-time=0.1").ret == 0
    before = pytester.path.joinpath("base.json").read_text()
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS.replace(
        "def test_kernel(kbench):", "def test_kernel(kbench):\n    import pytest; pytest.skip('no GPU')"))
    res = run("--kbench-compare=base.json", "--kbench-fail=8%", "--kbench-save=base.json")
    res.assert_outcomes(skipped=1)
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*kbench: no benchmark ran in this session*",
                              "FAILED: nothing compared*",
                              "*--kbench-save: no benchmark ran: nothing saved, base.json left "
                              "as it was*"])
    assert pytester.path.joinpath("base.json").read_text() == before
    assert run("--kbench-compare=base.json", "--kbench-fail=off").ret == 0


INTERRUPTS = """
import os, signal, time

def kernel():
    end = time.perf_counter() + 0.0002
    while time.perf_counter() < end:
        pass

def test_1(kbench):
    kbench(kernel, cold_cache=None, warmup_s=0.01, max_time_s=0.05)

def test_2(kbench):
    kbench(kernel, cold_cache=None, warmup_s=0.01, max_time_s=0.05)
    if os.environ.get("KB_STOP") == "int":
        os.kill(os.getpid(), signal.SIGINT)
    assert os.environ.get("KB_STOP") != "fail"

def test_3(kbench):
    kbench(kernel, cold_cache=None, warmup_s=0.01, max_time_s=0.05)
"""


@pytest.mark.parametrize("stop,args", [("int", ()), ("fail", ("-x",))])
def test_a_session_that_stopped_early_keeps_the_full_baseline(pytester, run, monkeypatch,
                                                               stop, args):
    pytester.makepyfile(kbp_int_test=INTERRUPTS)
    assert run("--kbench-save=full.json").ret == 0
    keys = sorted(json.loads(pytester.path.joinpath("full.json").read_text())["results"])
    assert len(keys) == 3
    monkeypatch.setenv("KB_STOP", stop)
    res = run("--kbench-save=full.json", "--kbench-compare=full.json", *args, subprocess=True)
    assert res.ret != 0
    res.stdout.fnmatch_lines(["*--kbench-save: the session * 2 result(s) not saved, full.json "
                              "left as it was (--kbench-save-partial saves them)*"])
    assert sorted(json.loads(pytester.path.joinpath("full.json").read_text())["results"]) == keys
    # asked for: the partial session is saved
    res = run("--kbench-save=full.json", "--kbench-save-partial", *args, subprocess=True)
    assert sorted(json.loads(pytester.path.joinpath("full.json").read_text())["results"]) \
        == keys[:2]


def test_sessions_saving_to_one_path_do_not_share_a_temp_file(tmp_path, monkeypatch):
    """Each save writes a temporary file of its own: one that another writer truncated or
    already renamed is never what gets renamed into place."""
    import tempfile
    from kbench.workflow import pytest_plugin as pp
    monkeypatch.setattr(pp, "_session_metadata", lambda config: {})
    names = []
    orig = tempfile.mkstemp

    def spy(*a, **k):
        fd, name = orig(*a, **k)
        names.append(name)
        return fd, name
    monkeypatch.setattr(tempfile, "mkstemp", spy)
    path = str(tmp_path / "s.json")
    r = Result.from_dict(json.loads(kbench.bench(sum, [1, 2], cold_cache=None, warmup_s=0,
                                                 max_time_s=0.02).to_json()))
    pp._write_session(path, None, {"k": r})
    pp._write_session(path, None, {"k": r})
    assert len(names) == 2 and names[0] != names[1] and path + ".tmp" not in names
    assert all(os.path.dirname(n) == str(tmp_path) for n in names)
    assert json.loads(open(path).read())["results"]["k"]["name"] == r.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]
    assert os.stat(path).st_mode & 0o644 == 0o644       # not mkstemp's 0600


def test_save_and_compare_are_refused_under_xdist(pytester, run):
    pytester.makeconftest("""
        def pytest_configure(config):
            config.workerinput = {"workerid": "gw0"}     # what an xdist worker carries
    """)
    pytester.makepyfile(kbp_mark_test=MARKS_ITS_RUN)
    res = run("--kbench-save=s.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-save and --kbench-compare do not work under "
                              "pytest-xdist (-n)*"])
    assert not pytester.path.joinpath("ran").exists()


@pytest.mark.parametrize("value", ["inf", "1e9", "nan"])
def test_a_max_time_beyond_a_day_is_a_usage_error_before_any_test_runs(pytester, run, value):
    pytester.makepyfile(kbp_mark_test=MARKS_ITS_RUN)
    res = run(f"--kbench-max-time={value}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-max-time must be a number of seconds > 0 and <= 86400*"])
    assert not pytester.path.joinpath("ran").exists()


def test_disable_refuses_a_repeated_name_as_timing_does(pytester, run):
    pytester.makepyfile(kbp_twice_test="""
        def test_twice(kbench):
            for _ in range(3):
                kbench(sum, [1, 2], cold_cache=None, warmup_s=0.01, max_time_s=0.02, name="x")
    """)
    for args in ((), ("--kbench-disable",)):
        res = run(*args)
        res.assert_outcomes(failed=1)
        res.stdout.fnmatch_lines(["*already recorded as 'kbp_twice_test.py::test_twice::x'*"])


def test_a_baseline_with_a_nan_peak_memory_is_a_usage_error_not_an_internal_error(pytester,
                                                                                   run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json", "--kbench-max-time=0.1").ret == 0
    doc = json.loads(pytester.path.joinpath("base.json").read_text())
    doc["results"]["kbp_bench_test.py::test_kernel"]["memory"] = {"peak_bytes": float("nan"),
                                                                   "method": "rss"}
    pytester.path.joinpath("base.json").write_text(json.dumps(doc))
    res = run("--kbench-compare=base.json", "--kbench-max-time=0.1")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-compare: base.json, result "
                              "'kbp_bench_test.py::test_kernel': memory.peak_bytes is nan*"])
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()


PROFILED_TESTS = """
import time

def test_kernel(kbench):
    r = kbench(time.sleep, 0.0001, cold_cache=None, warmup_s=0.0, max_time_s=0.05)
    assert kbench.disabled or r.median > 0      # the documented guard
"""


def test_profile_mode_keeps_the_documented_guard_and_fails_no_gate(pytester, run,
                                                                     monkeypatch):
    # under KBENCH_PROFILE=1 the guard failed on the NaN median, the summary said no
    # benchmark ran, and --kbench-fail failed on "nothing compared"
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json").ret == 0
    pytester.makepyfile(kbp_bench_test=PROFILED_TESTS)
    monkeypatch.setenv("KBENCH_PROFILE", "1")
    res = run("--kbench-compare=base.json", "--kbench-fail=8%")
    res.assert_outcomes(passed=1)
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["*1 benchmark(s) ran once for a profiler*",
                              "*nothing timed, so nothing was saved or compared*"])
    assert "no benchmark ran" not in res.stdout.str()


# ------------------------------------------------------------ a baseline over several sessions

def _session_doc(medians, ci=0.05, busy=False):
    """A session baseline whose one benchmark carries `medians` as its sessions."""
    res = {"name": "kernel", "stats": {"median": medians[-1], "ci_low": medians[-1] * (1 - ci),
                                       "ci_high": medians[-1] * (1 + ci)},
           "extra": {"host_load": {"busy": busy}}}
    if len(medians) > 1:
        res["sessions"] = [{"median": m, "ci_low": m * (1 - ci), "ci_high": m * (1 + ci)}
                           for m in medians]
    return {"schema": "kbench.session/1", "results": {"t.py::test_k": res}}


def _current(median, ci=0.05):
    return {"t.py::test_k": {"name": "kernel", "stats": {"median": median,
                                                         "ci_low": median * (1 - ci),
                                                         "ci_high": median * (1 + ci)}}}


def test_a_baseline_of_several_sessions_judges_against_the_range_they_covered():
    """One session at 1.00 ms (CI +-5%) fails a 1.14 ms run at 8%; sessions that ranged
    0.85 .. 1.10 ms take it as within noise, and still fail a 2x."""
    from kbench.workflow.cli_compare import compare_sets, load_results
    one = load_results(_session_doc([1e-3]))
    several = load_results(_session_doc([0.85e-3, 1e-3, 1.1e-3]))
    assert compare_sets(one, _current(1.14e-3), 0.08).deltas[0].verdict == "slower"
    d = compare_sets(several, _current(1.14e-3), 0.08).deltas[0]
    assert d.verdict == "within noise"
    assert d.old_median == pytest.approx(1e-3)             # the median of the session medians
    assert "3 sessions, their CIs span 807.500 us .. 1.1550 ms" in d.note
    assert compare_sets(several, _current(2e-3), 0.08).deltas[0].verdict == "slower"


@pytest.mark.parametrize("sessions, named", [
    ([], "not a non-empty list"),
    ([{"median": 1e-3, "ci_low": 0.9e-3}], "needs a finite median, ci_low and ci_high"),
    ([{"median": 1e-3, "ci_low": 1.1e-3, "ci_high": 1.2e-3}], "not a confidence interval"),
    (["1e-3"], "sessions[0] is a str"),
])
def test_a_malformed_sessions_list_is_refused_naming_it(sessions, named):
    from kbench.workflow.cli_compare import load_results
    doc = _session_doc([1e-3])
    doc["results"]["t.py::test_k"]["sessions"] = sessions
    with pytest.raises(ValueError, match=r"result 't.py::test_k'.*" + named.replace("[", r"\[")):
        load_results(doc)


def test_append_adds_quiet_sessions_restarts_on_a_new_harness_and_skips_a_busy_one():
    from kbench.workflow.baseline import SESSIONS_KEPT, append_session
    old = _session_doc([1e-3, 1.1e-3])["results"]["t.py::test_k"]
    new = _current(0.9e-3)["t.py::test_k"]
    out, why = append_session(old, new, [])
    assert why is None and [s["median"] for s in out["sessions"]] == [1e-3, 1.1e-3, 0.9e-3]
    out, why = append_session(old, new, ["different callable (a -> b)"])
    assert [s["median"] for s in out["sessions"]] == [0.9e-3] and "sessions restarted" in why
    busy = dict(new, extra={"host_load": {"busy": True}})
    out, why = append_session(old, busy, [])
    assert why == "host busy: this session not added"
    assert [s["median"] for s in out["sessions"]] == [1e-3, 1.1e-3]
    for _ in range(2 * SESSIONS_KEPT):
        old, _ = append_session(old, new, [])
    assert len(old["sessions"]) == SESSIONS_KEPT


def test_save_append_accumulates_sessions_that_the_gate_then_reads(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    skipped = 0
    for i in range(4):
        res = run("--kbench-save=base.json", "--kbench-save-append", subprocess=True)
        assert res.ret == 0, res.stdout.str()
        res.stdout.fnmatch_lines(["*added this session's 1 result(s) to base.json*"])
        # a session on a busy host is said and left out (the first starts the file whatever)
        skipped += "host busy: this session not added" in res.stdout.str()
    doc = json.loads((pytester.path / "base.json").read_text())
    entry = doc["results"]["kbp_bench_test.py::test_kernel"]
    assert len(entry["sessions"]) == 4 - skipped
    if len(entry["sessions"]) < 2:
        pytest.skip("the host was busy in 3 of 4 sessions: no range to gate against")
    assert all(s["ci_low"] <= s["median"] <= s["ci_high"] for s in entry["sessions"])
    slow = run("--kbench-compare=base.json", "--kbench-fail=8%", slow=True, subprocess=True)
    assert slow.ret == 1, slow.stdout.str()
    slow.stdout.fnmatch_lines([f"*{len(entry['sessions'])} sessions, their CIs span*"])


def test_save_append_needs_save_and_a_session_file(pytester, run):
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    res = run("--kbench-save-append")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--kbench-save-append needs --kbench-save=PATH*"])
    (pytester.path / "one.json").write_text(json.dumps(
        {"schema": "kbench.result/1", "name": "k",
         "stats": {"median": 1e-3, "ci_low": 9e-4, "ci_high": 1.1e-3}}))
    res = run("--kbench-save=one.json", "--kbench-save-append")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*one.json is not a pytest session baseline*"])



@pytest.mark.parametrize("slower, verdict", [(1.3, "busy host"), (2.0, "slower")])
def test_an_oversubscribed_figure_gets_the_busy_hosts_allowance_and_says_why(slower, verdict):
    """A 2-thread BLAS pool on 2 cores moved -30..+36% between quiet sessions: such a figure is
    judged as a busy host's (up to +50% not judged), and the row names the pool."""
    from kbench.workflow.cli_compare import compare_sets, load_results
    base = load_results(_session_doc([1e-3]))
    cur = _current(1e-3 * slower)
    cur["t.py::test_k"]["extra"] = {"host_load": {"busy": False, "oversubscribed": True}}
    d = compare_sets(base, cur, 0.08).deltas[0]
    assert d.verdict == verdict
    assert "current oversubscribed: the call's thread pool filled the cores" in d.note


def test_a_baseline_keeps_each_benchmark_at_the_pool_sizes_a_busy_session_may_use(
        pytester, run, monkeypatch):
    """--kbench-save times the call again with its thread pools at each ladder size below
    theirs (a 2-thread pool: at 1), and an appended session keeps those figures; a compare-only
    session times the call once."""
    from kbench.measure import hostload, threadpools
    threads, sets = {"n": 2}, []
    pool = threadpools.Pool("openblas", "/x/libopenblas.so", lambda: threads["n"],
                            lambda n: sets.append(n) or threads.update(n=n))
    monkeypatch.setattr(threadpools, "pools", lambda: [pool])
    monkeypatch.setattr(hostload, "finish", lambda before, stat_path="/proc/stat": dict(
        others_cpus=0.0, own_cpus=1.9, steal_share=0.0, cpus=2, loadavg_1m=0.1, wall_s=0.3,
        busy=False, oversubscribed=True))
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=one.json").ret == 0
    entry = json.loads((pytester.path / "one.json").read_text())["results"][
        "kbp_bench_test.py::test_kernel"]
    assert list(entry["extra"]["pool_ladder"]["figures"]) == ["1"]
    assert run("--kbench-save=base.json", "--kbench-save-append").ret == 0
    doc = json.loads((pytester.path / "base.json").read_text())
    session = doc["results"]["kbp_bench_test.py::test_kernel"]["sessions"][0]
    assert session["sized"]["1"]["median"] >= 0.0004
    assert sets == [1, 2, 1, 2] and threads["n"] == 2     # sized, then restored, per save
    assert run("--kbench-compare=base.json").ret == 0
    assert sets == [1, 2, 1, 2]


def test_a_figure_the_gate_judged_at_fewer_threads_is_not_what_the_baseline_saves(
        pytester, run, monkeypatch):
    """Where the gate judges a figure with the pools sized (kbench.workflow.retime), the table
    shows that figure, but --kbench-save writes the call as configured: a sized baseline would
    meet the next session's full pool and read a regression as faster."""
    from kbench.workflow import retime
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json").ret == 0

    def sized_look(old, first, threshold, again, sized_again):
        sized = sized_again(1)
        sized.extra["host_load"] = dict(sized.extra.get("host_load") or {}, pools_sized={
            "threads": 1, "reason": "unresolved", "pools": [],
            "first_run": {"median_s": first.median}})
        return retime.Judged(sized, first)
    monkeypatch.setattr(retime, "judged", sized_look)
    res = run("--kbench-compare=base.json", "--kbench-save=now.json")
    assert res.ret == 0, res.stdout.str()
    saved = json.loads((pytester.path / "now.json").read_text())["results"][
        "kbp_bench_test.py::test_kernel"]
    assert "pools_sized" not in (saved["extra"].get("host_load") or {})


# A kernel slow (2x) until the plugin pauses to time a slower benchmark again: a host's passing
# slowdown, gone by the second run. KB_SLOW keeps it slow throughout: a regression.
PASSING_SLOWDOWN_TESTS = """
import os, time
import pytest
import kbench.workflow.retime as retime

state = {"slow": True}

class _Clock:
    def __getattr__(self, name):
        return getattr(time, name)

    def sleep(self, seconds):
        state["slow"] = False

@pytest.fixture(autouse=True)
def _clock(monkeypatch):
    monkeypatch.setattr(retime, "time", _Clock())      # restored after the test

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def kernel():
    slow = state["slow"] or os.environ.get("KB_SLOW")
    spin(0.0004 * (2 if slow else 1))

def test_kernel(kbench):
    kbench(kernel, cold_cache=None, warmup_s=0.02, max_time_s=0.15)
"""


def test_a_benchmark_found_slower_is_timed_again_and_the_faster_run_is_judged(pytester, run):
    """A slowdown gone by the second run passes the gate, and says it was timed twice; a
    planted 2x is slow both times and fails. The gate is 30% here, not 8%: the first run is
    made slow on purpose, so the unchanged figure is the second run alone, with no retime
    behind it, and on the 2-core CI host a lone 0.15 s run of a 400 us spin read +8.8% once
    (the session's baseline 411.8 us, the second run 448.1 us). The retime is what is under
    test; the 8% gate on unchanged code is test_compare_fails_on_planted_regression_...'s."""
    pytester.makepyfile(kbp_bench_test=BENCH_TESTS)
    assert run("--kbench-save=base.json").ret == 0
    pytester.makepyfile(kbp_bench_test=PASSING_SLOWDOWN_TESTS)
    res = run("--kbench-compare=base.json", "--kbench-fail=30%", "--kbench-save=now.json")
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["*timed twice, the first run having read slower*"])
    kept = json.loads((pytester.path / "now.json").read_text())["results"][
        "kbp_bench_test.py::test_kernel"]["extra"]["gate_retimed"]
    assert kept["kept"] == "second" and kept["first_median_s"] > 1.5 * kept["second_median_s"]
    res = run("--kbench-compare=base.json", "--kbench-fail=30%", slow=True)
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*timed twice*", "*1 kbench gate failed*"])
