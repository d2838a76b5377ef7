"""kbench.sweep: the cartesian product, rows, tables, CSV/JSON/pandas, the plot, isolate=True."""
import csv
import io
import json
import os
import sys

import matplotlib
matplotlib.use("Agg")

import numpy as np
import pytest

from kbench.report.result import Result
from kbench.workflow.sweep import sweep

FAST = dict(cold_cache=None, warmup_s=0.005, max_time_s=0.03)


def copy_case(n, dtype):
    x = np.ones(n, dtype=dtype)
    out = np.empty_like(x)
    return {"fn": np.copyto, "args": (out, x), "bytes": 2 * x.nbytes}


def pid_case(k):
    """For isolate=True: names the case after the process that built it."""
    return {"fn": abs, "args": (k,), "name": f"pid{os.getpid()}-k{k}"}


def die_case(k, marker, how):
    """For isolate=True: case k=2 kills its own worker (a crash; an unguarded main script
    re-imported by the worker dies the same way), after writing its pid to marker."""
    if k == 2:
        import signal
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    return (abs, (k,))


@pytest.fixture(scope="module")
def copies():
    return sweep(copy_case, axes={"n": [256, 4096, 65536], "dtype": ["float32", "float64"]},
                 **FAST)


def test_rows_cover_the_product_in_order(copies):
    rows = copies.rows
    assert [(r["n"], r["dtype"]) for r in rows] == [
        (256, "float32"), (256, "float64"), (4096, "float32"), (4096, "float64"),
        (65536, "float32"), (65536, "float64")]
    for row, res in zip(rows, copies.results):
        itemsize = np.dtype(row["dtype"]).itemsize
        assert res.bytes == 2 * row["n"] * itemsize
        assert row["median_s"] == res.stats["median"]
        assert row["ci_low_s"] <= row["median_s"] <= row["ci_high_s"]
        assert row["bytes_per_s"] == pytest.approx(res.bytes / row["median_s"])
        assert row["flops_per_s"] is None
        assert row["stop"] in ("precision", "budget", "iter_cap")
        assert row["samples"] == res.n >= 10
        assert row["name"] == f"numpy.copyto[n={row['n']}, dtype={row['dtype']}]"


def test_markdown_csv_json_pandas_html(copies, tmp_path):
    md = copies.to_markdown().splitlines()
    assert md[0].startswith("| n | dtype | median | CI95 | GB/s")
    # hot copies that fit the cache: marked, and the footnote after a blank line
    assert set(md[1]) <= set("|-") and len(md) == 2 + 6 + 2
    assert md[-1].startswith("\\* served from cache")
    assert md[2].startswith("| 256 | float32 | ")

    text = copies.to_csv()
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert len(parsed) == 6
    assert float(parsed[3]["median_s"]) == copies.rows[3]["median_s"]
    assert parsed[3]["dtype"] == "float64" and parsed[3]["flops_per_s"] == ""
    path = tmp_path / "s.csv"
    assert copies.to_csv(str(path)) == text and path.read_text() == text

    doc = json.loads(copies.to_json())
    assert doc["schema"] == "kbench.sweep/1" and doc["axes"]["n"] == [256, 4096, 65536]
    back = Result.from_dict(doc["results"][5])
    assert back.median == copies.results[5].median

    pytest.importorskip("pandas")
    df = copies.to_pandas()
    assert df.shape[0] == 6 and list(df.columns[:2]) == ["n", "dtype"]
    assert df["median_s"].tolist() == [r["median_s"] for r in copies.rows]

    html = copies._repr_html_()
    assert "<table" in html and html.count("<tr>") == 7
    assert "6 cases over n, dtype" in repr(copies)


def test_plot_draws_one_line_per_group_with_log_x_and_the_peak(copies):
    for r in copies.results:                      # a known ceiling, as `kbench peaks` gives
        r.throughput["peak_bytes_per_s"] = 80e9
    try:
        ax = copies.plot(x="n", y="bytes_per_s")
    finally:
        for r in copies.results:
            r.throughput.pop("peak_bytes_per_s")
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "GB/s"
    labels = ax.get_legend_handles_labels()[1]
    assert "dtype=float32" in labels and "dtype=float64" in labels
    assert any(l.startswith("measured peak 80 GB/s") for l in labels)
    peak_lines = [l for l in ax.get_lines() if list(l.get_ydata()) == [80.0, 80.0]]
    assert len(peak_lines) == 1
    # the float64 line holds the measured GB/s at each n
    f64 = [c for c in ax.containers if c.get_label() == "dtype=float64"][0]
    xs, ys = f64.lines[0].get_data()
    want = [r["bytes_per_s"] / 1e9 for r in copies.rows if r["dtype"] == "float64"]
    assert list(xs) == [256, 4096, 65536]
    np.testing.assert_allclose(ys, want)
    ax2 = copies.plot(x="dtype", y="median_s")
    assert ax2.get_xscale() == "linear" and ax2 is not ax


def test_plot_and_sweep_errors_name_the_problem(copies):
    with pytest.raises(ValueError, match="x='m' is not an axis"):
        copies.plot(x="m")
    with pytest.raises(ValueError, match="no case has 'flops_per_s'.*flops="):
        copies.plot(y="flops_per_s")
    with pytest.raises(ValueError, match="y='nope' is not a row field"):
        copies.plot(y="nope")
    with pytest.raises(ValueError, match="collides with a row field"):
        sweep(copy_case, axes={"stop": [1]})
    with pytest.raises(ValueError, match="y='stop' is not a numeric row field"):
        copies.plot(x="n", y="stop")
    with pytest.raises(ValueError, match="axis 'n' has no values"):
        sweep(copy_case, axes={"n": []})
    with pytest.raises(TypeError, match=r"return \(fn, args\) or a dict.*'n': 3"):
        sweep(lambda n: 42, axes={"n": [3]})
    with pytest.raises(ValueError, match="has no 'fn'"):
        sweep(lambda n: {"args": ()}, axes={"n": [3]})


def test_tuple_factory_and_per_case_options():
    calls = []

    def factory(k, scale):
        calls.append((k, scale))
        if k == 1:
            return (lambda a: a * scale, (np.ones(4),))
        return {"fn": lambda a: a * scale, "args": np.ones(4), "flops": 4.0,
                "check": np.full(4, float(scale)), "name": f"custom{k}"}

    s = sweep(factory, {"k": [1, 2], "scale": [2]}, **FAST)
    assert calls == [(1, 2), (2, 2)]
    r1, r2 = s.results
    assert r1.flops is None and r1.correctness is None
    assert r2.flops == 4.0 and r2.correctness["ok"] and r2.name == "custom2"
    assert s.rows[1]["flops_per_s"] == pytest.approx(4.0 / r2.median)


def test_isolate_runs_each_case_in_a_fresh_process():
    s = sweep(pid_case, {"k": [1, 2]}, isolate=True, **FAST)
    pids = [r.name.split("-")[0] for r in s.results]
    assert f"pid{os.getpid()}" not in pids and pids[0] != pids[1]
    assert [r.median > 0 for r in s.results] == [True, True]
    with pytest.raises(TypeError, match="picklable"):
        sweep(lambda k: (abs, (k,)), {"k": [1]}, isolate=True, **FAST)


def synthetic_sweep(cache_bytes=1_000_000, mode="none"):
    """A SweepResult over n with set medians and bytes: no timing."""
    from kbench import _core
    from kbench.workflow.sweep import SweepResult
    ns = [1 << 12, 1 << 14, 1 << 16, 1 << 18]
    results = []
    for n in ns:
        samples = np.full(50, 1e-6 * n / 1024) * (1 + 0.01 * np.linspace(-1, 1, 50))
        r = Result(name=f"case_fn_{n}[n={n}]", device="cpu", backend="host", samples=samples,
                   stats=_core.summarize(samples, 0.95), stop={"stop": "precision"},
                   cold_cache={"mode": mode, "cache_bytes": cache_bytes,
                               "cache": "CPU last-level cache"},
                   bytes=16 * n)
        r.throughput = {"bytes_per_s": r.bytes / r.median}
        results.append(r)
    return SweepResult(axes={"n": ns}, cases=[{"n": n} for n in ns], results=results,
                       factory_name="copy_factory")


def test_plot_title_names_the_sweep_not_its_first_case():
    ax = synthetic_sweep().plot(x="n", y="bytes_per_s")
    assert ax.get_title() == "kbench sweep of copy_factory: GB/s vs n"
    s = sweep(copy_case, axes={"n": [256], "dtype": ["float32"]}, **FAST)
    assert s.plot().get_title().startswith("kbench sweep of copy_case")


def test_plot_marks_the_cache_size_and_rings_cache_served_points():
    ax = synthetic_sweep().plot(x="n", y="bytes_per_s")
    labels = ax.get_legend_handles_labels()[1]
    # bytes per call 16 n cross the 1 MB cache between n=2^14 (262 kB) and 2^16 (1.05 MB)
    mark = [l for l in ax.get_lines() if l.get_label() == "bytes per call = CPU last-level "
                                                          "cache 1.0 MB"]
    assert len(mark) == 1
    x_cache = mark[0].get_xdata()[0]
    assert 1 << 14 < x_cache < 1 << 16 and x_cache == pytest.approx(1e6 / 16, rel=1e-3)
    assert "served from cache (hot; bytes per call fit the cache)" in labels
    rings = [c for c in ax.collections if c.get_label().startswith("served from cache")]
    assert len(rings) == 1
    assert sorted(rings[0].get_offsets()[:, 0].tolist()) == [1 << 12, 1 << 14]


def test_cold_points_are_not_ringed_as_cache_served():
    ax = synthetic_sweep(mode="flush").plot(x="n", y="bytes_per_s")
    assert not any("served from cache" in l for l in ax.get_legend_handles_labels()[1])


def test_plot_says_whether_the_bandwidth_ceiling_was_measured():
    """Without a cached `kbench peaks`, a GPU's ceiling is memory clock x bus width: the legend
    must not call that a measured peak."""
    s = synthetic_sweep()
    for r, kind in zip(s.results, ("theoretical", "theoretical", "measured", "measured")):
        r.throughput.update(peak_bytes_per_s=4.8e12 if kind == "theoretical" else 4.3e12,
                            bytes_ceiling=kind)
    labels = s.plot(x="n", y="bytes_per_s").get_legend_handles_labels()[1]
    assert "theoretical peak 4.8 TB/s" in labels and "measured peak 4.3 TB/s" in labels
    assert not any(l.startswith("measured peak 4.8") for l in labels)


def test_each_lines_cache_crossing_is_named_once():
    """Two dtypes cross the cache at different n: one mark each, each naming its line."""
    from kbench.workflow.sweep import SweepResult
    s = synthetic_sweep()
    half = synthetic_sweep()
    for r in half.results:          # a dtype of half the width: it crosses at twice the n
        r.bytes //= 2
    both = SweepResult(axes={"n": s.axes["n"], "dtype": ["f4", "f2"]},
                       cases=[{"n": n, "dtype": d} for n in s.axes["n"] for d in ("f4", "f2")],
                       results=[r for pair in zip(s.results, half.results) for r in pair],
                       factory_name="copy_factory")
    ax = both.plot(x="n", y="bytes_per_s")
    marks = {l.get_label(): l.get_xdata()[0] for l in ax.get_lines()
             if l.get_label().startswith("bytes per call")}
    assert set(marks) == {"bytes per call = CPU last-level cache 1.0 MB (dtype=f4)",
                          "bytes per call = CPU last-level cache 1.0 MB (dtype=f2)"}
    assert marks["bytes per call = CPU last-level cache 1.0 MB (dtype=f2)"] == pytest.approx(
        2 * marks["bytes per call = CPU last-level cache 1.0 MB (dtype=f4)"], rel=1e-3)


@pytest.mark.parametrize("name", ["median", "CI95", "GB/s", "% peak BW", "served_from_cache"])
def test_axis_named_like_a_table_column_is_refused(name):
    with pytest.raises(ValueError, match=f"axis name '{name}' collides with a row field or a "
                                         f"table column"):
        sweep(lambda **case: (abs, (1,)), axes={name: [1]}, **FAST)


def test_a_single_axis_value_is_an_axis_of_one_value():
    s = sweep(copy_case, axes={"n": 256, "dtype": "float32"}, **FAST)
    assert s.axes == {"n": [256], "dtype": ["float32"]} and len(s.results) == 1
    assert s.rows[0]["n"] == 256


def test_tables_mark_figures_served_from_cache():
    """The rows the plot rings (hot, bytes per call fit the cache) are marked in every table."""
    s = synthetic_sweep()               # 16 n bytes against a 1 MB cache: n=2^12, 2^14 fit
    for r in s.results:
        r.throughput["bandwidth_pct_peak"] = r.throughput["bytes_per_s"] / 1e9
    assert [r["served_from_cache"] for r in s.rows] == [True, True, False, False]
    lines = repr(s).splitlines()
    cells = [l.split() for l in lines[3:7]]
    assert [c[-3].endswith("*") and c[-2].endswith("%*") for c in cells] == \
        [True, True, False, False]
    assert lines[-1].startswith("* served from cache (hot; bytes per call fit the cache)")
    md = s.to_markdown()
    assert md.count("\\*") == 2 * 2 + 1 and "\\* served from cache" in md
    assert "served from cache" in s._repr_html_()
    parsed = list(csv.DictReader(io.StringIO(s.to_csv())))
    assert [p["served_from_cache"] for p in parsed] == ["True", "True", "False", "False"]
    doc = json.loads(s.to_json())
    assert [r["served_from_cache"] for r in doc["rows"]] == [True, True, False, False]
    pytest.importorskip("pandas")
    assert s.to_pandas()["served_from_cache"].tolist() == [True, True, False, False]

    cold = synthetic_sweep(mode="flush")
    assert not any(r["served_from_cache"] for r in cold.rows)
    assert "*" not in repr(cold) and "served from cache" not in cold.to_markdown()


def test_a_saved_sweep_loads_back_whole(copies, tmp_path):
    # to_json wrote kbench.sweep/1, and nothing read it back
    from kbench.workflow.sweep import SweepResult
    path = tmp_path / "sweep.json"
    copies.to_json(str(path))
    back = SweepResult.load(str(path))
    assert back.rows == copies.rows and repr(back) == repr(copies)
    assert back.cases == copies.cases and back.factory_name == copies.factory_name
    assert [r.median for r in back.results] == [r.median for r in copies.results]
    copies.results[0].to_json(str(tmp_path / "one.json"))
    with pytest.raises(ValueError, match="not a kbench sweep.*Result.load"):
        SweepResult.load(str(tmp_path / "one.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json: not a kbench sweep: not JSON"):
        SweepResult.load(str(tmp_path / "bad.json"))


SLOW_CASE_MODULE = '''
import os, time
def slow_case(k, marker):
    # runs in the isolated worker: says who it is, then takes far longer than the test allows
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(k)
    return (abs, (k,))
def quick_case(k, marker):
    return (abs, (k,))
'''

SWEEP_INTERRUPT_CHILD = '''
import os, sys, time, multiprocessing
import kbench, slowcases
marker = sys.argv[1]
try:
    kbench.sweep(slowcases.slow_case, {"k": [15], "marker": [marker]}, isolate=True,
                 cold_cache=None, warmup_s=0.0, max_time_s=0.02)
    print("FINISHED", flush=True)
except KeyboardInterrupt:
    print("KI", time.monotonic(), flush=True)
wpid = int(open(marker).read())
alive = os.path.exists(f"/proc/{wpid}") or any(p.pid == wpid
                                                for p in multiprocessing.active_children())
print("WORKER", "alive" if alive else "gone", flush=True)
s = kbench.sweep(slowcases.quick_case, {"k": [1], "marker": [marker]}, isolate=True,
                 cold_cache=None, warmup_s=0.0, max_time_s=0.02)
print("NEXT OK", len(s.results), flush=True)
'''


@pytest.mark.skipif(not os.path.isdir("/proc") or os.name != "posix", reason="POSIX, /proc")
def test_isolated_sweep_honours_sigint_sent_to_the_parent_alone(tmp_path, interrupt_child):
    """kill -INT <pid> (a supervisor; not the terminal's process group, so the worker gets no
    signal): KeyboardInterrupt comes at once, not when the worker's case ends; no worker is
    left behind and the process can sweep again."""
    import subprocess
    import sys
    import time
    (tmp_path / "slowcases.py").write_text(SLOW_CASE_MODULE)
    marker = tmp_path / "worker.pid"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), repo,
                                           os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", SWEEP_INTERRUPT_CHILD, str(marker)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def ready():
        deadline = time.monotonic() + 60     # the worker's spawn and imports, on a busy host
        while not (marker.exists() and marker.read_text()) and proc.poll() is None:
            assert time.monotonic() < deadline, "the isolated worker never started its case"
            time.sleep(0.05)
        time.sleep(0.2)

    out, err, latency = interrupt_child(proc, ready, timeout_s=90)   # the parent alone
    lines = out.splitlines()
    # the case sleeps 15 s: the old code raised only when it ended; 3 s leaves room for a
    # loaded machine (the fix takes a few ms)
    assert 0 <= latency < 3.0, f"KeyboardInterrupt came {latency:.2f} s after SIGINT"
    assert "WORKER gone" in lines, f"the worker outlived the interrupt:\n{out}"
    assert "NEXT OK 1" in lines, f"the next isolated sweep failed:\n{out}\n{err}"


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_case_that_raises_keeps_the_finished_cases_in_the_exception(exc):
    """A failing last case (or Ctrl-C) must not lose the cases already measured."""
    def factory(n):
        if n == 3:
            raise exc
        return (np.sum, (np.ones(256 * n),))

    with pytest.raises(type(exc)) as ei:
        sweep(factory, axes={"n": [1, 2, 3, 4]}, cold_cache=None, warmup_s=0,
              max_time_s=0.02)
    part = ei.value.partial
    assert [c["n"] for c in part.cases] == [1, 2] and len(part.results) == 2
    assert [r["n"] for r in part.rows] == [1, 2] and all(r["median_s"] > 0 for r in part.rows)
    assert part.axes == {"n": [1, 2, 3, 4]}
    assert any("the 2 case(s) finished before it are in the exception's .partial" in n
               for n in ei.value.__notes__)


def test_a_first_case_that_raises_leaves_an_empty_partial():
    def factory(n):
        raise ValueError("bad case")

    with pytest.raises(ValueError) as ei:
        sweep(factory, axes={"n": [1, 2]})
    assert ei.value.partial.results == [] and ei.value.partial.rows == []


@pytest.mark.parametrize("edit,match", [
    (lambda d: d["rows"].__setitem__(0, "n=1"), r"rows\[0\] is a str, not an object"),
    (lambda d: d.__setitem__("axes", {"n": 5}), r"axes\['n'\] is a int, not a list"),
])
def test_a_malformed_sweep_file_names_the_field(copies, tmp_path, edit, match):
    from kbench.workflow.sweep import SweepResult
    d = json.loads(copies.to_json())
    edit(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=f"bad.json: kbench sweep: {match}"):
        SweepResult.load(str(path))


# -- isolate=True from a script without an `if __name__ == "__main__":` guard

def _run_script(tmp_path, name, text, timeout=120):
    """Run tmp_path/name with this checkout's kbench first on the path: (CompletedProcess,
    script path)."""
    import subprocess
    import sys
    script = tmp_path / name
    script.write_text(text)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=timeout)
    return out, script


UNGUARDED_SCRIPT = '''\
import os, sys, numpy as np, kbench
with open(sys.argv[0] + ".imports", "a") as f:     # once per process that runs this file
    f.write(f"{os.getpid()}\\n")
def make(n):
    return np.sum, (np.ones(n),)
r = kbench.sweep(make, {"n": [1000]}, isolate=True, cold_cache=None, warmup_s=0.0,
                 max_time_s=0.2)
print(r)
'''


def test_isolate_from_an_unguarded_script_says_why_before_spawning(tmp_path):
    """The worker re-imports the main script, which calls sweep again; the parent ended with a
    bare BrokenProcessPool. Now: a clear error naming the script and line, no worker spawned."""
    out, script = _run_script(tmp_path, "unguarded.py", UNGUARDED_SCRIPT)
    assert out.returncode != 0, out.stdout
    last = out.stderr.strip().splitlines()[-2:]
    text = "\n".join(last)
    assert "BrokenProcessPool" not in out.stderr, out.stderr
    assert "RuntimeError" in out.stderr or "KbenchError" in text, out.stderr
    assert f"{script}:6" in text, out.stderr
    assert "fresh process" in text and "imports the main script" in text, out.stderr
    assert 'if __name__ == "__main__":' in text, out.stderr
    # the check ran before any worker: only the parent ran the script
    assert len((tmp_path / "unguarded.py.imports").read_text().split()) == 1


GUARDED_SCRIPT = '''\
import multiprocessing, numpy as np, kbench
def make(n):
    return np.sum, (np.ones(n),)
def main():
    s = kbench.sweep(make, {"n": [8, 16]}, isolate=True, cold_cache=None, warmup_s=0.0,
                     max_time_s=0.02)
    print("OK", len(s.results), len(multiprocessing.active_children()))
if '__main__' == __name__:
    main()
'''


def test_isolate_under_a_guard_runs_and_leaves_nothing_running(tmp_path):
    # the guard written the other way round, the sweep called from a function the guard calls
    out, _ = _run_script(tmp_path, "guarded.py", GUARDED_SCRIPT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["OK", "2", "0"]


@pytest.mark.parametrize("source,line,guarded", [
    ("import kbench\nkbench.sweep()\n", 2, False),
    ("if __name__ == '__main__':\n    x = 1\n    kbench.sweep()\n", 3, True),
    ("if '__main__' == __name__:\n    kbench.sweep()\n", 2, True),
    ('if __name__ == "__main__" and True:\n    kbench.sweep()\n', 2, True),
    ("if __name__ != '__main__':\n    pass\nelse:\n    kbench.sweep()\n", 4, True),
    ("if __name__ != '__main__':\n    kbench.sweep()\n", 2, False),
    ("if __name__ == '__main__':\n    pass\nelse:\n    kbench.sweep()\n", 4, False),
    ("if __name__ == '__main__':\n    with open('x') as f:\n        try:\n"
     "            kbench.sweep(\n                1)\n        finally:\n            pass\n", 5,
     True),
    ("if __name__ == '__main__':\n    pass\nkbench.sweep()\n", 3, False),
    ("if debug:\n    kbench.sweep()\n", 2, False),
])
def test_the_main_guard_is_read_from_the_source(source, line, guarded):
    from kbench.workflow.sweep import _line_is_main_guarded
    assert _line_is_main_guarded(source, line) is guarded


def test_an_unreadable_main_script_is_not_guessed_at(tmp_path, monkeypatch):
    """No source (deleted, unparsable): no verdict, the sweep goes on."""
    import sys
    import types
    from kbench.workflow.sweep import _unguarded_main_call
    fake = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", fake)
    for text in (None, "def (:\n"):
        path = tmp_path / "gone.py"
        if text is not None:
            path.write_text(text)
        fake.__file__ = str(path)
        # run "as the main script's top-level code": a frame whose globals are __main__'s
        code = compile("result = check()", str(path), "exec")
        g = fake.__dict__
        g["check"] = _unguarded_main_call
        exec(code, g)
        assert g["result"] is None
    path.write_text("result = check()\n")
    exec(compile("result = check()", str(path), "exec"), g)
    assert g["result"] == (str(path), 1, "result = check()")


@pytest.mark.parametrize("how,status", [("exit", "exit code 3"),
                                        ("kill", "killed by signal SIGKILL")])
def test_a_worker_that_dies_is_a_clear_error_that_keeps_the_finished_cases(tmp_path, how,
                                                                          status):
    """It was a bare BrokenProcessPool ("terminated abruptly"): no case, no exit code, no
    hint. Now: which case, how the worker ended, where its own error went, the guard hint;
    e.partial and the sweep's note as for any failing case; no worker left behind."""
    import concurrent.futures.process
    import multiprocessing
    marker = tmp_path / "worker.pid"
    with pytest.raises(RuntimeError) as ei:
        sweep(die_case, {"k": [1, 2, 3], "marker": [str(marker)], "how": [how]}, isolate=True,
              **FAST)
    e = ei.value
    assert not isinstance(e, concurrent.futures.process.BrokenProcessPool)
    msg = str(e)
    assert "case {'k': 2, " in msg and status in msg, msg
    assert "above on stderr" in msg and 'if __name__ == "__main__":' in msg, msg
    assert [c["k"] for c in e.partial.cases] == [1] and len(e.partial.results) == 1
    assert any(n.startswith("in kbench.sweep case {'k': 2, ") and ".partial" in n
               for n in e.__notes__)
    pid = int(marker.read_text())
    assert multiprocessing.active_children() == []
    assert not os.path.exists(f"/proc/{pid}"), "the dead worker was not reaped"


MOVED_SCRIPT = '''\
import os, numpy as np, kbench
def make(n):
    return np.sum, (np.ones(n),)
os.replace(__file__, __file__ + ".moved")      # the guard check has no source to read
r = kbench.sweep(make, {"n": [1000]}, isolate=True, cold_cache=None, warmup_s=0.0,
                 max_time_s=0.2)
'''


def test_an_unreadable_unguarded_script_goes_on_and_its_dead_worker_is_reported(tmp_path):
    """No guess without the source: the worker is spawned, fails to import the main script,
    and the parent's last line says so rather than a bare BrokenProcessPool."""
    out, script = _run_script(tmp_path, "moved.py", MOVED_SCRIPT)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    if sys.version_info >= (3, 11):     # the traceback prints the note after the error
        assert lines.pop() == "in kbench.sweep case {'n': 1000}"
    last = lines[-1]
    assert last.startswith("kbench._core.KbenchError: kbench.sweep(isolate=True): the worker "
                           "process running case {'n': 1000} died"), out.stderr
    assert "(exit code 1)" in last and 'if __name__ == "__main__":' in last, out.stderr
    # the worker's own error is on stderr above it
    assert "FileNotFoundError" in out.stderr or "No such file" in out.stderr, out.stderr
