"""benchmarks/gpu_time_to_figure.py's FlashInfer side, on the CPU: its timer's file loaded alone
(the package cannot be carried to the device), and a FlashInfer that cannot run reported with
its cause rather than as a row of numbers."""
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_time_to_figure.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="not a source checkout (no "
                                "benchmarks/): the wheel's suite runs from a copy of tests/")

# FlashInfer's file in miniature: its one package import, and the timer it defines
UTILS = '''
from flashinfer.utils import round_up


def bench_gpu_time_with_cupti(fn, repeat_time_ms=100, cold_l2_cache=True):
    return [round_up(5, 4) / 1000.0]
'''


@pytest.fixture
def script(load_benchmark):
    before = set(sys.modules)
    yield load_benchmark("gpu_time_to_figure")
    for name in set(sys.modules) - before:      # the stand-in flashinfer package and the file
        del sys.modules[name]


def test_the_timer_file_loads_alone_with_its_package_import_stood_in_for(script, tmp_path):
    utils = tmp_path / "flashinfer_testing_utils.py"
    utils.write_text(UTILS)
    (tmp_path / "SOURCE.txt").write_text("flashinfer-python 9.9: flashinfer/testing/utils.py\n")
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here: the installed package is taken first")
    timer, label = script.load_flashinfer_timer(str(utils))
    assert timer.__module__ == "flashinfer.testing.utils"
    assert timer(lambda: None) == [0.008]           # round_up(5, 4) = 8
    assert label == "its timer's file alone: flashinfer-python 9.9: flashinfer/testing/utils.py"


def test_without_the_package_or_its_file_the_loader_says_so(script):
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here")
    with pytest.raises(ImportError, match="flashinfer not installed .* no --flashinfer-utils"):
        script.load_flashinfer_timer(None)


def test_a_flashinfer_child_that_cannot_run_is_reported_with_its_cause(script, tmp_path,
                                                                        monkeypatch):
    utils = tmp_path / "flashinfer_testing_utils.py"
    utils.write_text(UTILS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "missing"))
    run = script.Run(None, None, 60.0)
    # the child: a Python that exits at once with an error, as a child without torch does
    monkeypatch.setattr(script.sys, "executable", sys.executable)
    monkeypatch.setattr(script.os.path, "abspath",
                        lambda p: str(tmp_path / "fails.py") if p == script.__file__ else p)
    (tmp_path / "fails.py").write_text("raise SystemExit('no CUDA device here')\n")
    script.run_flashinfer(run, str(utils), None, 30.0)
    assert run.res["flashinfer"] == "not timed: RuntimeError: exit 1: no CUDA device here"
    assert not any(c["tool"] == "flashinfer" for c in run.res["cases"])
    # the tables still print, with FlashInfer's absence in them
    assert "FlashInfer: not timed: RuntimeError: exit 1: no CUDA device here" in run.markdown()


def test_flashinfer_rows_from_the_child_join_the_run(script, tmp_path, monkeypatch):
    """What the child prints (one JSON line) becomes rows; a failed case is an error row."""
    child = tmp_path / "child.py"
    child.write_text(
        "import json\n"
        "print('noise from a library')\n"
        "print(json.dumps({'source': 'its timer\\'s file alone: x', 'rows': ["
        "{'section': 'sweep', 'case': 'add 16384', 'figure_us': 1.5, 'wall_s': 0.2, 'n': 9,"
        " 'timer': 'CUPTI', 'warnings': []},"
        "{'section': 'sweep', 'case': 'add 65536', 'error': 'ValueError: no kernel'}]}))\n")
    monkeypatch.setattr(script.os.path, "abspath",
                        lambda p: str(child) if p == script.__file__ else p)
    run = script.Run(None, None, 60.0)
    script.run_flashinfer(run, None, None, 30.0)
    assert run.res["flashinfer"] == "its timer's file alone: x; timer: CUPTI"
    rows = [c for c in run.res["cases"] if c["tool"] == "flashinfer"]
    assert rows[0]["figure_us"] == 1.5 and rows[0]["timer"] == "CUPTI"
    assert rows[1]["error"] == "RuntimeError: ValueError: no kernel"
    assert run.res["errors"] == 1
    assert run.summary()["sweep_flashinfer_s"] is None      # one case has no time


def test_a_kbench_cases_clock_trace_goes_to_the_traces_file_not_the_results(script, tmp_path):
    """The NVML readings of a case (r.extra["clock_trace"]) are most of its bytes: they go to
    --traces, keyed by the case, rounded to what NVML resolves, with NaN as null; the results
    JSON keeps only the row."""
    import json
    import math
    import numpy as np
    trace = {"t_s": np.array([-0.0123456789, 0.0, 0.005]),
             "sm_mhz": np.array([1410., 1980., 1980.]), "mem_mhz": np.array([3201.] * 3), "power_w": np.array([123.45, 300.0, math.nan]),
             "power_inst_w": np.array([500.04, 510.0, 520.0]), "temp_c": np.array([40., 41., 41.]),
             "reasons": np.array([0, 4, 0], dtype=np.uint64), "load_start_s": -0.02,
             "timed_from": 1, "period_s": 0.005, "power_limit_w": 700.0}
    out, traces = tmp_path / "res.json", tmp_path / "traces.json"
    run = script.Run(str(out), None, 60.0, str(traces))
    run.case("sweep", "add 16", "kbench",
             lambda: {"figure_us": 1.0, "wall_s": 0.2, "clock_trace": script.trace_lists(trace)})
    run.case("sweep", "add 16", "do_bench", lambda: {"figure_us": 4.0, "wall_s": 0.1})
    run.save()
    rows = json.loads(out.read_text())["cases"]
    assert [sorted(r) for r in rows] == [["case", "figure_us", "section", "tool", "wall_s"]] * 2
    saved = json.loads(traces.read_text())["cases"]
    assert list(saved) == ["sweep / add 16 / kbench"]
    t = saved["sweep / add 16 / kbench"]
    assert t["t_s"] == [-0.012346, 0.0, 0.005] and t["power_w"] == [123.5, 300.0, None]
    assert t["reasons"] == [0, 4, 0] and t["timed_from"] == 1 and t["load_start_s"] == -0.02
    assert script.trace_lists(None) is None
