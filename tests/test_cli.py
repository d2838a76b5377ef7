"""The kbench command line: info, compare, demo (short), bad arguments."""
import json
import subprocess
import sys

import numpy as np
import pytest

import kbench


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
    from kbench import metadata
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
    assert "% peak (memory-bound rows): of the measured CPU STREAM " in p.stdout
    assert "% peak (compute-bound rows): of the measured CPU FMA" in p.stdout
    # notes carry the case names of the table, not internal keys
    cases = {line.split("  ")[0] for line in p.stdout.splitlines()
             if line.startswith(("add f32", "matmul f32"))}
    assert len(cases) == 4
    for line in p.stdout.splitlines():
        if line.startswith("  note ["):
            assert line[len("  note ["):].split("]:")[0] in cases, line
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["add_cold"]["correctness"]["ok"] is True
    assert saved["add_hot"]["cold_cache"]["mode"] == "none"


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
    from kbench.cli import main
    return main(list(argv))


def test_compare_fail_reads_the_threshold_as_the_plugin_does(tmp_path, capsys):
    a, b = synthetic(tmp_path, "a.json", 1e-3), synthetic(tmp_path, "b.json", 1.928e-3, seed=1)
    with pytest.raises(SystemExit) as ei:          # argparse refuses: exit 2, one message
        cli("compare", a, b, "--fail", "8")
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and "'8%'" in err and "Traceback" not in err
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
    from kbench.cli import _library_status
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
