"""scripts/gpu_summary.py: the short table gpu_check.sh prints last, from whatever result files
a mode left; a file it cannot read is named in a row, not a crash."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_summary.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="not a source checkout (no "
                                "scripts/): the wheel's suite runs from a copy of tests/")


def run(out_dir):
    p = subprocess.run([sys.executable, SCRIPT, str(out_dir)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def test_rows_come_from_the_files_present(tmp_path):
    (tmp_path / "env.txt").write_text(
        "commit abc1234 (checkout's own HEAD: abc1234)\nname, uuid, ...\n"
        "NVIDIA H200, GPU-46db77c8-3901-190b-cbf3-b082c32a2c05, 580.159.04, 345 MHz\n")
    (tmp_path / "h200_pytest_gpu.log").write_text(
        "....\n=== 59 passed, 1 failed, 1 skipped in 150.00s (0:02:30) ===\n")
    (tmp_path / "h200_agreement.json").write_text(json.dumps({"cases": [
        {"case": "add", "cupti_agrees": True}, {"case": "gemm", "cupti_agrees": False}]}))
    (tmp_path / "h200_breadth.json").write_text(json.dumps({"cases": [
        {"case": "a", "diff": 0.01, "diff_memset": -0.004},
        {"case": "b", "diff": 0.02, "diff_memset": 0.003},
        {"case": "c", "diff": 0.08, "diff_memset": 0.1, "diff_burst": -0.05,
         "kbench_burst": {"median_s": 1e-3}}]}))
    (tmp_path / "h200_time_to_figure.json").write_text(json.dumps({"summary": {
        "sweep_kbench_s": 1.03, "sweep_do_bench_s": 1.43, "first_bench_s": 0.52,
        "first_bench_cupti_setup_s": 0.15}}))
    rc, out, err = run(tmp_path)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "== summary"
    table = {line.split("  ")[0].strip(): line.split("  ", 1)[1].strip() for line in lines[1:]}
    assert table["GPU, commit"] == "NVIDIA H200 GPU-46db77c8, abc1234"
    assert table["h200_pytest_gpu.log"].startswith("59 passed, 1 failed, 1 skipped")
    assert table["agreement (cupti vs profile)"] == "1 of 2 agree; not: gemm"
    assert table["breadth, never limited, vs memset-flushed profile"] == "2 cases, -0.4%..+0.3%"
    assert table["breadth, limited: sustained / burst vs profile"] == \
        "1 cases, +8.0%..+8.0% / -5.0%..-5.0%"
    assert table["sweep kbench / do_bench"] == "1.03 s / 1.43 s"
    assert table["first bench (CUPTI set-up)"] == "0.52 s (0.15 s)"
    assert not any(k.startswith(("soak", "CI coverage", "near limit", "TP GEMM")) for k in table)


def test_an_unreadable_file_is_a_row_and_a_cut_log_is_said(tmp_path):
    (tmp_path / "h200_agreement.json").write_text("{not json")
    (tmp_path / "h200_soak.json").write_text(json.dumps({"modes": {"cupti": {}}}))
    (tmp_path / "pytest_gpu.log").write_text("tests/test_a.py ....\n")
    rc, out, err = run(tmp_path)
    assert rc == 0, err
    table = {line.split("  ")[0].strip(): line.split("  ", 1)[1].strip()
             for line in out.splitlines()[1:]}
    assert table["h200_agreement.json"].startswith("unreadable: JSONDecodeError")
    assert table["h200_soak.json"].startswith("unreadable: KeyError")
    assert table["pytest_gpu.log"] == "no summary line (cut off?)"


def test_a_missing_directory_is_a_usage_error(tmp_path):
    rc, out, err = run(tmp_path / "absent")
    assert rc == 2 and "usage: python scripts/gpu_summary.py OUT_DIR" in err
