"""benchmarks/settle_replay.py on synthetic traces: the carried rule replayed at each refresh
margin through the core, the first fresh snapshot's power, and NVML's refresh intervals."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "settle_replay.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="not a source checkout (no "
                                "benchmarks/): the wheel's suite runs from a copy of tests/")


def snapshot_trace(inst_after=300.0, phase=0.03, seconds=0.7):
    """5 ms readings of NVML values refreshed every 0.1 s from `phase`; the load begins at 0
    and its power shows from the first refresh after it."""
    t = np.round(np.arange(-0.1, seconds, 0.005), 6)
    k = np.floor((t - phase) / 0.1 + 1e-9)
    inst = np.where(t >= phase, inst_after, 120.0)
    return {"t_s": t.tolist(), "sm_mhz": [1980.0] * t.size, "mem_mhz": [3201.0] * t.size,
            "power_w": (300.0 + 0.01 * k).tolist(), "power_inst_w": inst.tolist(),
            "temp_c": [40.0] * t.size, "reasons": [0] * t.size, "load_start_s": 0.0,
            "timed_from": 20, "period_s": 0.005, "power_limit_w": 700.0,
            "max_sm_clock_mhz": 1980.0}


@pytest.fixture
def replay(load_benchmark):
    return load_benchmark("settle_replay")


def test_a_light_carried_load_settles_on_its_first_fresh_snapshot(replay):
    row = {"carried_sm_mhz": 1980.0, "carried_under_limit": False, "carried_from_s_ago": 0.02,
           "carried_loaded_s": 0.3}
    r = replay.replay(snapshot_trace(), row)
    at = {m: r["settle"][m][0] for m in replay.MARGINS}
    assert all(r["settle"][m][1] == 1 for m in replay.MARGINS)      # all by the carry
    assert 0.145 <= at[None] < 0.2                                  # the fixed response time
    assert at[0.0] == pytest.approx(0.035) and at[0.02] == pytest.approx(0.035)
    assert at[0.05] == pytest.approx(0.135)                         # the next refresh
    assert r["fresh_at_s"] == pytest.approx(0.035)
    assert r["fresh_inst_w"] == r["steady_inst_w"] == 300.0 and r["limit_later"] is False


def test_a_heavy_load_is_not_carried_and_the_table_says_what_the_snapshot_read(replay,
                                                                              tmp_path):
    light, heavy = snapshot_trace(), snapshot_trace(inst_after=650.0)
    traces = {"gpu": "Fake", "commit": "abc", "cases": {"sweep / add 1 / kbench": light,
                                                          "sweep / add 2 / kbench": heavy,
                                                          "first / add 1 / kbench": light}}
    carried = {"carried_sm_mhz": 1980.0, "carried_under_limit": False,
               "carried_from_s_ago": 0.01, "carried_loaded_s": 0.2, "settle_at_s": 0.16}
    results = {"cases": [dict(carried, section="sweep", case="add 1", tool="kbench"),
                         dict(carried, section="sweep", case="add 2", tool="kbench"),
                         {"section": "first", "case": "add 1", "tool": "kbench",
                          "carried_from_s_ago": None}]}
    r = replay.replay(heavy, carried)
    assert all(r["settle"][m][1] != 1 for m in replay.MARGINS)     # over the headroom
    (tmp_path / "t.json").write_text(json.dumps(traces))
    (tmp_path / "r.json").write_text(json.dumps(results))
    p = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "t.json"),
                        str(tmp_path / "r.json"), "--md", str(tmp_path / "o.md")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == (tmp_path / "o.md").read_text()
    rows = [line for line in p.stdout.splitlines() if line.startswith("| sweep")]
    assert len(rows) == 2                       # the first bench carried nothing: no row
    assert "| 0.035 (1) |" in rows[0] and "| 300 / 300 | no |" in rows[0]
    assert "| 650 / 650 | no |" in rows[1]
    assert "intervals between them, p10 / median / p90 0.100 / 0.100 / 0.100 s" in p.stdout
