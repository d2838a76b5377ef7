"""The kbench command line: info, compare, demo (short), bad arguments."""
import json
import subprocess
import sys

import numpy as np

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


def test_compare_exits_nonzero_on_a_regression_beyond_the_threshold(tmp_path):
    fast = kbench.bench(np.sum, np.ones(10), warmup_s=0, max_time_s=0.2, cold_cache=None)
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
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["add_cold"]["correctness"]["ok"] is True
    assert saved["add_hot"]["cold_cache"]["mode"] == "none"


def test_bad_command_is_a_usage_error():
    p = run("frobnicate")
    assert p.returncode == 2 and "invalid choice" in p.stderr
