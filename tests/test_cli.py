"""The kbench command line: info, compare, demo (short), bad arguments."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kbench

REPO = Path(kbench.__file__).resolve().parent.parent


def run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kbench", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_info_reports_caches_timer_and_gpu_libraries():
    p = run("info")
    assert p.returncode == 0, p.stderr
    assert "host timer" in p.stdout and "last level" in p.stdout
    assert "CUDA backend" in p.stdout
    j = json.loads(run("info", "--json").stdout)
    assert j["host_timer"]["resolution_ns"] > 0
    assert j["cpu_caches"]["llc_bytes"] > 0


@pytest.mark.parametrize("vm", [True, False, None])
def test_info_says_when_the_cpu_runs_under_a_hypervisor(capsys, monkeypatch, vm):
    from kbench.provenance import metadata
    monkeypatch.setattr(metadata, "cpu_hypervisor", lambda *a, **k: vm)
    assert cli("info") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("CPU: "))
    assert line.endswith("under a hypervisor (a VM)") is bool(vm)


def test_compare_exits_nonzero_on_a_regression_beyond_the_threshold(tmp_path):
    # a real run's file, with seeded samples: the verdict under test is the CLI's, not this
    # machine's noise (a runner that changed speed mid-run once made its own CI span 2x)
    fast = kbench.bench(np.sum, np.ones(10), warmup_s=0, max_time_s=0.05, cold_cache=None)
    fast.samples = 1e-6 * (1.0 + 0.01 * np.random.default_rng(3).standard_normal(400))
    fast.stats = kbench._core.summarize(fast.samples)
    slow = kbench.Result.from_dict(fast.to_dict())
    slow.samples = fast.samples * 2
    slow.stats = kbench._core.summarize(slow.samples)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    fast.to_json(str(a))
    slow.to_json(str(b))
    same = run("compare", str(a), str(a), "--fail", "8%")
    assert same.returncode == 0, same.stdout + same.stderr
    worse = run("compare", str(a), str(b), "--fail", "8%")
    assert worse.returncode == 1 and "slower" in worse.stdout
    report_only = run("compare", str(a), str(b))
    assert report_only.returncode == 0 and "slower" in report_only.stdout


def test_demo_prints_the_table(tmp_path):
    env_cache = {"KBENCH_CACHE_DIR": str(tmp_path)}
    import os
    from kbench.roofline import peaks
    # ceilings cached beforehand: measured by the demo on a busy host they can come out
    # disturbed (float32 under float64) and, by design, not cached, and the legend then names
    # none (1 of 2 full-suite runs beside six hogs); `kbench peaks` is tested in test_cli_peaks
    seeded = {"schema": peaks.SCHEMA, "copy_GBps": 15.0, "triad_GBps": 12.0,
              "fma_GFLOPs": 50.0, "fma_fp32_GFLOPs": 100.0}
    peaks.save_peaks(seeded, str(tmp_path / os.path.basename(peaks.peaks_cache_path())))
    p = subprocess.run([sys.executable, "-m", "kbench", "demo", "--seconds", "0.3",
                        "--peak-seconds", "0.5", "--json", str(tmp_path / "d.json"), "--no-gpu"],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env_cache})
    assert p.returncode == 0, p.stderr
    for word in ("add f32", "matmul f32", "hot", "cold", "GB/s", "FLOP/s", "CV", "stop"):
        assert word in p.stdout, word
    # CI and CV are told apart, and % peak names the ceiling it is of
    assert "CI95 of median: where the true median lies" in p.stdout
    assert "sample CV: the spread of single calls" in p.stdout
    assert "% peak (memory-bound rows): of the measured CPU STREAM " in p.stdout, p.stdout
    assert "% peak (compute-bound rows): of the measured CPU FMA" in p.stdout, p.stdout
    # notes carry the case names of the table, not internal keys
    cases = {line.split("  ")[0] for line in p.stdout.splitlines()
             if line.startswith(("add f32", "matmul f32"))}
    assert len(cases) == 4
    for line in p.stdout.splitlines():
        if line.startswith("  note ["):
            assert line[len("  note ["):].split("]:")[0] in cases, line
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["schema"] == "kbench.session/1"
    assert saved["results"]["add_cold"]["correctness"]["ok"] is True
    assert saved["results"]["add_hot"]["cold_cache"]["mode"] == "none"
    # the file is one kbench compare reads: four benchmarks compared with themselves
    same = run("compare", str(tmp_path / "d.json"), str(tmp_path / "d.json"), "--fail", "8%")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "(4 compared)" in same.stdout


def test_bad_command_is_a_usage_error():
    p = run("frobnicate")
    assert p.returncode == 2 and "invalid choice" in p.stderr


# -- compare, files, --version, info (issue 12, item 10); in this process unless noted

def synthetic(tmp_path, fname, median, n=200, seed=0):
    """A saved Result with set samples: no timing."""
    rng = np.random.default_rng(seed)
    samples = median * (1.0 + 0.01 * rng.standard_normal(n))
    r = kbench.Result(name="k", device="cpu", backend="host", samples=samples,
                      stats=kbench._core.summarize(samples, 0.95), stop={"stop": "precision"},
                      cold_cache={"mode": "none"})
    path = tmp_path / fname
    r.to_json(str(path))
    return str(path)


def cli(*argv):
    from kbench.workflow.cli import main
    return main(list(argv))


def test_compare_fail_reads_the_threshold_as_the_plugin_does(tmp_path, capsys):
    a, b = synthetic(tmp_path, "a.json", 1e-3), synthetic(tmp_path, "b.json", 1.928e-3, seed=1)
    for bare in ("8", "1"):                        # '1' is 1% as much as 100%: refused too
        with pytest.raises(SystemExit) as ei:      # argparse refuses: exit 2, one line
            cli("compare", a, b, "--fail", bare)
        assert ei.value.code == 2
        err = capsys.readouterr().err
        assert "ambiguous" in err and f"'{bare}%'" in err and len(err.splitlines()) == 1
    for fail in ("8%", "0.08"):
        assert cli("compare", a, b, "--fail", fail) == 1
        out = capsys.readouterr().out
        assert "+92.7%" in out and "SLOWER" in out and "unchanged" not in out


def test_compare_fails_on_a_nan_or_negative_median(tmp_path, capsys):
    a = synthetic(tmp_path, "a.json", 1e-3)
    for median in ("NaN", "-0.001"):
        doc = json.loads(open(a).read())
        doc["stats"]["median"] = float(median)
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(doc))
        assert cli("compare", a, str(bad), "--fail", "8%") == 1
        out = capsys.readouterr().out
        assert "INVALID" in out and f"new median is {float(median)!r}" in out
        assert "invalid median (not a time)" in out
        assert cli("compare", a, str(bad)) == 0      # report only: shown, not failed
        assert "INVALID" in capsys.readouterr().out


def test_compare_on_a_missing_or_garbage_file_prints_one_line_and_exits_2(tmp_path):
    """The real entry point, in a subprocess: no traceback."""
    a = synthetic(tmp_path, "a.json", 1e-3)
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\x01not json")
    for args in ((a, str(tmp_path / "missing.json")), (str(garbage), a)):
        p = run("compare", *args)
        assert p.returncode == 2, p.stdout + p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert p.stderr.startswith("kbench compare: error: ")
        assert ("missing.json" in p.stderr and "no such results file" in p.stderr) or \
            ("garbage.json" in p.stderr and "not JSON" in p.stderr)


@pytest.mark.parametrize("content,error,match", [
    ('{"schema": "kbench.result/1", "name": "x", "samp', ValueError,
     "invalid or truncated JSON"),
    ("[1, 2]", TypeError, "not a kbench result: a list, not a JSON object"),
    ('{"schema": "kbench.result/1", "name": "x"}', ValueError,
     "kbench result without device, backend, samples_s, stats, stop, cold_cache"),
    ('{"schema": "kbench.result/1", "name": "x", "device": "cpu", "backend": "host", '
     '"samples_s": ["a"], "stats": {}, "stop": {}, "cold_cache": {}}', ValueError,
     "'samples_s' is not a list of numbers"),
    ('{"schema": "kbench.result/1", "name": 3, "device": "cpu", "backend": "host", '
     '"samples_s": [], "stats": {}, "stop": {}, "cold_cache": {}}', ValueError,
     "field 'name' is a int, not a string"),
    (b"\xff\xfe\x00", ValueError, "not UTF-8 text"),
])
def test_result_load_errors_name_the_file(content, error, match, tmp_path):
    path = tmp_path / "r.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(error, match=match) as ei:
        kbench.Result.load(str(path))
    assert str(ei.value).startswith(f"{path}: ")
    ok = synthetic(tmp_path, "ok.json", 1e-3)
    assert kbench.Result.load(ok).median == pytest.approx(1e-3, rel=0.01)


def test_version(capsys):
    with pytest.raises(SystemExit) as ei:
        cli("--version")
    assert ei.value.code == 0
    assert capsys.readouterr().out.strip() == f"kbench {kbench.__version__}"


def test_info_lists_what_was_tried_instead_of_a_dangling_tried(capsys):
    from kbench.report._format import library_status as _library_status
    st = {"loaded": False, "error": "libfoo.so.1 (a library) could not be opened. Tried:\n"
                                    "  libfoo.so.1: libfoo.so.1: cannot open shared object file\n"
                                    "  /usr/lib/libfoo.so.1: /usr/lib/libfoo.so.1: no such file\n"
                                    "Install foo."}
    text = _library_status(st)
    assert text.splitlines()[0] == ("libfoo.so.1 (a library) could not be opened (tried "
                                    "libfoo.so.1, /usr/lib/libfoo.so.1)")
    assert text.splitlines()[1].strip() == "Install foo."
    assert _library_status({"loaded": True, "path": "/x/libfoo.so"}) == "/x/libfoo.so"
    assert cli("info") == 0
    assert not any(line.rstrip().endswith("Tried:")
                   for line in capsys.readouterr().out.splitlines())


# -- tester's defects: corrupt fields, missing medians, nothing compared, demo's file, options

def _edited(tmp_path, src, fname, edit):
    doc = json.loads(open(src).read())
    edit(doc)
    path = tmp_path / fname
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.__setitem__("extra", [1]), "'extra' is a list"),
    (lambda d: d.__setitem__("extra", {"regime": "burst"}), "'extra.regime' is a str"),
    (lambda d: d.__setitem__("extra", {"distributed": [1]}), "'extra.distributed' is a list"),
    (lambda d: d.__setitem__("metadata", [1]), "'metadata' is a list"),
    (lambda d: d.__setitem__("metadata", {"harness": {"script": "x"}}),
     "'metadata.harness.script' is a str"),
])
def test_compare_refuses_a_corrupt_extra_or_metadata_in_one_line(tmp_path, capsys, edit, field):
    good = synthetic(tmp_path, "good.json", 1e-3)
    bad = _edited(tmp_path, good, "bad.json", edit)
    for pair in ((good, bad), (bad, good)):
        assert cli("compare", *pair, "--fail", "8%") == 2
        err = capsys.readouterr().err
        assert err.startswith("kbench compare: error: ") and len(err.splitlines()) == 1
        assert "bad.json" in err and field in err


def _drop_stat(key):
    return lambda d: d["stats"].pop(key)


@pytest.mark.parametrize("edit,field", [
    (lambda d: (d.pop("stats"), d.pop("samples_s")), "no 'stats'"),
    (lambda d: d.pop("stats"), "no 'stats'"),
    (_drop_stat("median"), "stats.median is missing"),
    (_drop_stat("ci_low"), "stats.ci_low is missing"),
    (lambda d: d["stats"].__setitem__("ci_high", None), "stats.ci_high is missing"),
    (lambda d: d["stats"].__setitem__("ci_low", float("nan")),
     "stats.ci_low .. ci_high is nan .. "),
    (lambda d: d["stats"].update(ci_low=2e-3, ci_high=3e-3),
     "not a confidence interval around the median"),
], ids=["no stats or samples", "no stats", "no median", "no ci_low", "ci_high null",
        "ci_low nan", "ci beside the median"])
def test_compare_refuses_a_result_without_its_median_and_ci(tmp_path, capsys, edit, field):
    """Either side. A baseline whose stats were removed counted its missing CI as overlapping:
    a run 3.5x slower passed --fail 8% as "within noise" (one without samples either was
    "no baseline", which passes too)."""
    good = synthetic(tmp_path, "good.json", 1e-3)
    slower = synthetic(tmp_path, "slower.json", 3.5e-3, seed=1)
    bad = _edited(tmp_path, good, "bad.json", edit)
    for pair in ((bad, slower), (good, bad)):
        assert cli("compare", *pair, "--fail", "8%") == 2
        err = capsys.readouterr().err
        assert err.startswith("kbench compare: error: ") and len(err.splitlines()) == 1
        assert "bad.json" in err and field in err
    assert cli("compare", good, slower, "--fail", "8%") == 1


def test_compare_with_a_baseline_of_other_benchmarks_says_nothing_was_compared(tmp_path,
                                                                                capsys):
    single = synthetic(tmp_path, "single.json", 1e-3)
    doc = json.loads(open(single).read())
    sess = tmp_path / "session.json"
    sess.write_text(json.dumps({"schema": "kbench.session/1",
                                "results": {"t::a": doc, "t::b": doc}}))
    assert cli("compare", single, str(sess), "--fail", "8%") == 1   # a gate that checked nothing
    out = capsys.readouterr().out
    assert "nothing compared: no benchmark has a median in both old and new " \
           "(2 no baseline, 1 not run)" in out
    assert cli("compare", single, str(sess)) == 0                    # report only
    capsys.readouterr()
    # a partial match is compared as before
    part = tmp_path / "part.json"
    part.write_text(json.dumps({"schema": "kbench.session/1", "results": {"t::a": doc}}))
    assert cli("compare", str(part), str(sess), "--fail", "8%") == 0
    assert "(1 compared)" in capsys.readouterr().out


@pytest.fixture
def fast_demo(monkeypatch):
    """demo with kbench.bench faked (set samples, no timing) and ceilings already cached."""
    from kbench.roofline import peaks

    def fake_bench(fn, *args, name="k", **kw):
        samples = 1e-4 * (1.0 + 0.01 * np.random.default_rng(0).standard_normal(100))
        return kbench.Result(name=name, device="cpu", backend="host", samples=samples,
                             stats=kbench._core.summarize(samples, 0.95),
                             stop={"stop": "precision"}, cold_cache={"mode": "none"})
    monkeypatch.setattr(kbench, "bench", fake_bench)
    monkeypatch.setattr(peaks, "load_cached_peaks", lambda: {})


def test_demo_json_is_a_session_file_compare_reads(fast_demo, tmp_path, capsys):
    path = str(tmp_path / "demo.json")
    assert cli("demo", "--seconds", "0.1", "--json", path, "--no-gpu") == 0
    capsys.readouterr()
    assert cli("compare", path, path, "--fail", "8%") == 0
    out = capsys.readouterr().out
    assert "(4 compared)" in out and "add_hot" in out


def test_demo_that_cannot_write_its_json_prints_the_table_then_one_line(fast_demo, tmp_path,
                                                                       capsys, monkeypatch):
    from kbench.workflow import cli as cli_mod
    # the pre-check passed, then the directory went away while the demo ran
    monkeypatch.setattr(cli_mod, "_check_writable", lambda path: None)
    path = str(tmp_path / "gone" / "demo.json")
    assert cli("demo", "--seconds", "0.1", "--json", path, "--no-gpu") == 2
    out, err = capsys.readouterr()
    assert "add f32" in out and "matmul f32" in out         # the figures were shown
    assert err.startswith(f"kbench demo: error: --json {path}: cannot write")
    assert len(err.splitlines()) == 1


QUIET = {"others_cpus": 0.02, "own_cpus": 1.0, "steal_share": 0.0, "cpus": 2,
         "loadavg_1m": 0.1, "wall_s": 0.2, "busy": False, "oversubscribed": False}
BUSY = dict(QUIET, others_cpus=1.37, busy=True)
OVERSUBSCRIBED = dict(QUIET, own_cpus=2.0, oversubscribed=True)


@pytest.mark.parametrize("reading", [QUIET, BUSY, OVERSUBSCRIBED, dict(BUSY, **{
    "own_cpus": 2.0, "oversubscribed": True})], ids=["quiet", "busy", "oversubscribed", "both"])
def test_demo_names_the_cases_a_busy_or_oversubscribed_host_disturbed(reading, monkeypatch,
                                                                      capsys):
    """A cold matmul read 20.6 ms against 0.6 ms hot on a loaded 2-core host, and the table did
    not say why: its 2-thread BLAS pool waited for preempted threads. The demo's real benches
    run; only the host's reading around each is set."""
    from kbench.measure import hostload
    from kbench.roofline import peaks
    monkeypatch.setattr(peaks, "load_cached_peaks", lambda: {})
    monkeypatch.setattr(hostload, "finish", lambda before, *a, **k: dict(reading))
    assert cli("demo", "--seconds", "0.05", "--no-gpu") == 0
    out = capsys.readouterr().out
    cases = [line.split("  ")[0] for line in out.splitlines()
             if line.startswith(("add f32", "matmul f32"))]
    assert len(cases) == 4
    lines = [line.strip() for line in out.splitlines() if "host load:" in line]
    if not (reading["busy"] or reading["oversubscribed"]):
        assert lines == []
        return
    (line,) = lines
    assert line.startswith("host load: ")
    busy = re.search(r"BUSY during (.*?) \(other processes used up to 1.37 of 2 CPUs", line)
    over = re.search(r"OVERSUBSCRIBED during (.*?) \(the call's thread pool", line)
    assert bool(busy) is reading["busy"] and bool(over) is reading["oversubscribed"], line
    for found in (busy, over):
        if found:
            assert found.group(1) == ", ".join(cases)
    assert "Host load row" in line
    assert "OPENBLAS_NUM_THREADS" not in line         # the advice stays in hostload.text


def test_demo_refuses_an_unwritable_json_before_running(tmp_path):
    from kbench.workflow.cli import CliError, _check_writable
    with pytest.raises(CliError, match="/proc/x.json"):     # os.access says yes to root here
        _check_writable("/proc/x.json")
    path = tmp_path / "new.json"
    _check_writable(str(path))
    assert not path.exists()            # the check leaves no empty file behind


@pytest.mark.parametrize("option,value", [("--seconds", "0"), ("--seconds", "-1"),
                                          ("--seconds", "nan"), ("--seconds", "inf"),
                                          ("--peak-seconds", "0"), ("--seconds", "abc")])
def test_demo_refuses_a_bad_time_in_one_line(capsys, option, value):
    with pytest.raises(SystemExit) as ei:
        cli("demo", option, value, "--no-gpu")
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kbench demo: error: argument {option}: ")
    assert repr(value) in err and len(err.splitlines()) == 1


def test_info_hip_lines_have_no_dangling_tried():
    from kbench.backends.hip import describe_status
    err = ("libamdhip64.so (the HIP runtime of AMD ROCm) could not be opened. Tried:\n"
           "  libamdhip64.so: libamdhip64.so: cannot open shared object file\n"
           "  /opt/rocm/lib/libamdhip64.so: /opt/rocm/lib/libamdhip64.so: no such file\n"
           "Install ROCm.")
    lines = describe_status({"built": True, "devices": 0, "why_no_devices": err,
                             "libraries": {"hip": {"state": "failed", "error": err},
                                           "rocm_smi": {"state": "not tried"}}})
    assert lines[1] == ("  hip      failed: libamdhip64.so (the HIP runtime of AMD ROCm) could not "
                        "be opened (tried libamdhip64.so, /opt/rocm/lib/libamdhip64.so)")
    assert lines[2].strip() == "Install ROCm."
    assert lines[3] == "  rocm_smi not tried"
    assert lines[4] == ("  HIP devices: none (libamdhip64.so (the HIP runtime of AMD ROCm) could "
                        "not be opened)")
    assert not any("Tried" in line for line in lines)


def test_info_prints_the_cuda_headers_version_as_major_minor(capsys, monkeypatch):
    from kbench import _core
    if not _core.HAVE_CUDA:
        pytest.skip("built without the CUDA backend")
    monkeypatch.setattr(_core, "CUDA_HEADERS_VERSION", 12040)
    assert cli("info") == 0
    assert "CUDA backend: built against CUDA headers 12.4\n" in capsys.readouterr().out


def test_info_into_a_closed_pipe_exits_quietly():
    import os
    r, w = os.pipe()
    os.close(r)                         # the reader is gone before kbench writes
    try:
        p = subprocess.run([sys.executable, "-m", "kbench", "info", "--json"], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == "", p.stderr


WRITES_PAST_A_SIZE_LIMIT = r"""
import json, resource, sys
import numpy as np
import kbench
from kbench.workflow.cli import CliError, _write_session
from kbench.workflow.sweep import SweepResult
samples = 1e-4 * (1.0 + 0.01 * np.random.default_rng(0).standard_normal(20000))
r = kbench.Result(name="big", device="cpu", backend="host", samples=samples,
                  stats=kbench._core.summarize(samples, 0.95), stop={"stop": "precision"},
                  cold_cache={"mode": "none"})
small = kbench.Result.from_dict(dict(r.to_dict(), samples_s=list(samples[:50])))
sw = SweepResult(axes={"n": list(range(500))}, cases=[{"n": i} for i in range(500)],
                 results=[small] * 500)
resource.setrlimit(resource.RLIMIT_FSIZE, (20480, 20480))    # a disk that fills mid-write
for what, write in [("result", lambda p: r.to_json(p)), ("sweep", lambda p: sw.to_json(p)),
                    ("csv", lambda p: sw.to_csv(p)), ("demo", lambda p: _write_session(p, {"k": r}))]:
    try:
        write(sys.argv[1])
        print(what, "written")
    except (OSError, CliError) as e:
        print(what, "refused:", e)
"""


def test_a_failed_write_leaves_the_old_file_whole(tmp_path):
    """to_json, to_csv and demo --json write a temporary file, then rename it: a write that
    fails (file too large, disk full) keeps the old file, and leaves no temporary file."""
    keep = tmp_path / "keep.json"
    keep.write_text('{"old": true}')
    res = subprocess.run([sys.executable, "-c", WRITES_PAST_A_SIZE_LIMIT, str(keep)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [ln.split()[:2] for ln in lines] == [[w, "refused:"] for w in
                                                ("result", "sweep", "csv", "demo")], lines
    assert "File too large" in lines[0]
    assert json.loads(keep.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    from kbench.workflow import cli as cli_mod

    def interrupted(args):
        print("partial table")
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_mod, "cmd_info", interrupted)
    monkeypatch.setattr(cli_mod, "_stdout_to_devnull", lambda: None,   # pytest owns stdout
                        raising=False)
    assert cli("info") == 130
    err = capsys.readouterr().err
    assert err == "kbench info: interrupted\n"


def test_compare_into_a_full_disk_is_one_line_and_exit_2(tmp_path):
    a = synthetic(tmp_path, "a.json", 1e-3)
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "kbench", "compare", a, a, "--fail", "8%"],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr == "kbench compare: error: No space left on device\n"


def test_usage_errors_name_the_commands_and_the_bad_threshold(tmp_path):
    p = run()
    assert p.returncode == 2
    assert p.stderr == ("kbench: error: a command is required: one of demo, peaks, info, "
                        "compare (see kbench -h)\n")
    a = synthetic(tmp_path, "a.json", 1e-3)
    for opt in ("--fail", "--fail-mem"):
        p = run("compare", a, a, opt, "-1%")
        assert p.returncode == 2
        assert f"argument {opt}: threshold must be a non-negative fraction, got '-1%'" \
            in p.stderr
    helptext = run("demo", "-h").stdout + run("peaks", "-h").stdout + run("info", "-h").stdout
    text = " ".join(helptext.split())       # argparse wraps help onto the next line
    for opt, words in [("--peak-seconds PEAK_SECONDS", "time per ceiling when no measured"),
                       ("--no-gpu", "CPU cases only"), ("--seconds SECONDS", "time per CPU"),
                       ("--device DEVICE", "the CUDA device to measure"),
                       ("--cpu-only", "measure the CPU's ceilings only"),
                       ("--gpu-only", "measure the GPU's ceilings only"),
                       ("--json", "print everything as one JSON object")]:
        assert f"{opt} {words}" in text, opt


# -- kbench info on a CPU-only host (issue 47): a line per backend, no C source lines, each
# piece of advice once, NVRTC found in the pip wheel

SOURCE_LINE = re.compile(r"\b\w+\.c:\d+\b")          # "[loader_hip.c:175]" in user text


def _info_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "KB_FAKE_INIT_ERROR")}
    env.update(extra)
    return env


def _info(env):
    p = subprocess.run([sys.executable, "-m", "kbench", "info"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_info_says_each_backend_once_and_each_advice_once():
    out = _info(_info_env())
    lines = out.splitlines()
    block = lines[lines.index("backends:") + 1:][:3]
    assert [ln.split()[0] for ln in block] == ["host", "cuda", "hip"]
    assert block[0].startswith("  host  present: the CPU")
    j = json.loads(run("info", "--json").stdout)["backends"]
    for line, name in zip(block, ("host", "cuda", "hip")):
        state = "present" if j[name]["present"] else "absent"
        assert line == f"  {name:5s} {state}: {j[name]['why']}"
        assert "Tried" not in line and not line.endswith(".")
    assert not SOURCE_LINE.search(out), out
    # libcuda, NVML and the device query once said it three times
    assert out.count("Install the NVIDIA driver") <= 1, out
    advice = [ln for ln in lines if ln.startswith("  to fix: ")]
    assert len(advice) == len(set(advice))


def test_info_names_a_hip_runtime_without_a_gpu_without_c_source_lines(tmp_path):
    """ROCm installed, no AMD GPU: hipInit fails with hipErrorInvalidDevice, once reported as
    'hipInit(0) failed: hipErrorInvalidDevice [loader_hip.c:175]'."""
    if not getattr(kbench._core, "HAVE_HIP", 0) or shutil.which("gcc") is None:
        pytest.skip("needs the HIP backend and gcc (to build the HIP stand-in)")
    sys.path.insert(0, str(REPO / "tests" / "hip_forward"))
    from build_forwarder import FAKE, build
    lib = build(tmp_path, FAKE)
    out = _info(_info_env(KBENCH_HIP_LIBRARY=str(lib), KB_FAKE_INIT_ERROR="101"))
    (hip,) = [ln for ln in out.splitlines() if ln.startswith(("  hip   absent", "  hip   present"))]
    assert hip.startswith("  hip   absent: no AMD GPU is visible to the HIP runtime")
    assert "hipInit(0) failed: hipErrorInvalidDevice" in hip
    assert not SOURCE_LINE.search(out), out
    # the developer's detail stays on the exception
    code = ("import kbench._core as c\ntry:\n    c.hip_device_count()\n"
            "except c.HipError as e:\n    print(e.where, '|', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=REPO,
                       env=_info_env(KBENCH_HIP_LIBRARY=str(lib), KB_FAKE_INIT_ERROR="101"))
    assert p.returncode == 0 and " | " in p.stdout, p.stderr
    where, message = p.stdout.strip().split(" | ")
    assert re.fullmatch(r"loader_hip\.c:\d+", where) and not SOURCE_LINE.search(message)


@pytest.mark.parametrize("layout,soname", [("nvidia/cu13/lib", "libnvrtc.so.13"),
                                           ("nvidia/cuda_nvrtc/lib", "libnvrtc.so.12")])
def test_info_finds_nvrtc_in_the_pip_wheel(tmp_path, layout, soname):
    """nvidia-cuda-nvrtc (CUDA 13: nvidia/cu13/lib) and nvidia-cuda-nvrtc-cu12
    (nvidia/cuda_nvrtc/lib), installed in this Python, were reported missing, with advice to
    install them. A stand-in NVRTC (tests/fake_cuda/fake_libnvrtc.c) in the wheel's layout on
    sys.path is found there."""
    if not kbench._core.HAVE_CUDA or shutil.which("gcc") is None:
        pytest.skip("needs the CUDA backend and gcc (to build the NVRTC stand-in)")
    if json.loads(run("info", "--json").stdout)["gpu_libraries"]["nvrtc"].get("loaded"):
        pytest.skip("an NVRTC is found here before any wheel is looked at")
    lib = tmp_path / layout / soname
    lib.parent.mkdir(parents=True)
    subprocess.run([shutil.which("gcc"), "-shared", "-fPIC", "-o", str(lib),
                    str(Path(__file__).resolve().parent / "fake_cuda" / "fake_libnvrtc.c")],
                   check=True)     # beside this file: the wheel's suite runs from a copy
    out = _info(_info_env(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)])))
    (line,) = [ln for ln in out.splitlines() if ln.startswith("  nvrtc ")]
    assert line == f"  nvrtc  found: {lib}", out
    assert "nvidia-cuda-nvrtc pip package" not in out
