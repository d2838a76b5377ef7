"""Harness provenance in every result (kbench.provenance.harness): the calling file and its md5, or
the notebook cell's; the callable's name and source md5; the arguments' shapes; kbench's version
and build flags; the project's git commit. `kbench compare` says when two results came from
different harnesses."""
import functools
import hashlib
import inspect
import json
import linecache
import os
import sys

import numpy as np
import pytest

import kbench
from kbench.provenance import metadata, harness as provenance
from kbench.workflow.cli import main as cli_main
from kbench.report.result import Result

QUICK = dict(warmup_s=0.01, max_time_s=0.05, min_samples=5, cold_cache=None, memory=False)


def scale(x):
    return x * 2.0


def md5_of(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


@pytest.fixture(scope="module")
def result():
    return kbench.bench(scale, np.ones(1000, dtype=np.float32), **QUICK)


def test_every_result_names_the_calling_file_the_callable_and_kbench(result):
    h = result.metadata["harness"]
    assert h["script"]["path"] == os.path.abspath(__file__)
    assert h["script"]["md5"] == md5_of(__file__)
    assert h["callable"]["qualname"] == "scale"
    assert h["callable"]["module"] == __name__
    assert h["callable"]["source_md5"] == hashlib.md5(inspect.getsource(scale).encode()).hexdigest()
    assert h["args"]["signature"] == "ndarray[float32](1000,)"
    assert h["kbench"]["version"] == kbench.__version__
    build = h["kbench"]["build"]
    assert "host" in build["backends"] and "-O" in build["cflags"]
    # the project's git commit and dirty flag: this test runs inside kbench's own checkout
    git = h["git"]
    if git is not None:
        assert len(git["commit"]) >= 7 and "dirty" in git


def test_provenance_survives_json_and_is_printed(result, tmp_path):
    path = tmp_path / "r.json"
    result.to_json(str(path))
    back = Result.load(str(path))
    assert back.metadata["harness"] == json.loads(json.dumps(result.metadata["harness"]))
    assert "Harness:" in repr(result) and "test_provenance.py" in repr(result)


class Functor:
    def __call__(self, x):
        return x


def test_callable_info_unwraps_partials_methods_and_reads_a_functors_class():
    part = provenance.callable_info(functools.partial(scale, 1.0))
    assert part["qualname"] == "scale" and part["wrapped"] == ["partial"]
    assert part["source_md5"] == provenance.callable_info(scale)["source_md5"]
    fun = provenance.callable_info(Functor())
    assert fun["qualname"] == "Functor" and fun["source_md5"]
    ufunc = provenance.callable_info(np.add)
    assert ufunc["source_md5"] is None and ufunc["source_why"]


def test_an_ipython_cell_is_recorded_by_notebook_name_and_cell_md5():
    filename = "/tmp/ipykernel_4242/1234567.py"
    source = "import sys\nframe = sys._getframe()\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        ns = {"__session__": "/home/u/kernels.ipynb"}
        exec(compile(source, filename, "exec"), ns)
        s = provenance.script_of(ns["frame"])
    finally:
        linecache.cache.pop(filename, None)
    assert s["notebook"] == "/home/u/kernels.ipynb"
    assert s["cell_md5"] == hashlib.md5(source.encode()).hexdigest()
    assert "path" not in s


def doc(script_md5="a" * 32, qualname="scale", source="b" * 32, args="c" * 32):
    return {"metadata": {"harness": {
        "script": {"path": "/x/bench_add.py", "md5": script_md5},
        "callable": {"qualname": qualname, "module": "bench_add", "source_md5": source},
        "args": {"signature": "ndarray[float32](1000,)", "md5": args}}}}


def test_different_names_what_differs_between_two_harnesses():
    assert provenance.different(doc(), doc()) == []
    assert provenance.different(doc(), {"metadata": {}}) == []     # an older result: unknown
    (line,) = provenance.different(doc(), doc(script_md5="d" * 32))
    assert line.startswith("different harness script (bench_add.py: md5 aaaaaaaa -> dddddddd")
    (line,) = provenance.different(doc(), doc(qualname="scale_v2"))
    assert "different callable (bench_add.scale -> bench_add.scale_v2)" == line
    (line,) = provenance.different(doc(), doc(source="e" * 32))
    assert line.startswith("callable source changed")
    (line,) = provenance.different(doc(), doc(args="f" * 32))
    assert line.startswith("different arguments")


def cell_doc(cell_md5, notebook="/home/u/kernels.ipynb"):
    d = doc()
    d["metadata"]["harness"]["script"] = {"notebook": notebook, "cell_md5": cell_md5}
    return d


def test_two_cells_calling_the_same_callable_on_the_same_arguments_are_different_harnesses():
    # kept on purpose: a cell's source holds what args and callable do not record (the bench
    # options, the arguments' values and layout, the set-up it runs), as a script's md5 does;
    # the same cell run again is the same harness, so re-running a cell after a change is quiet
    assert provenance.different(cell_doc("1" * 32), cell_doc("1" * 32)) == []
    (line,) = provenance.different(cell_doc("1" * 32), cell_doc("2" * 32))
    assert line == ("different harness cell (/home/u/kernels.ipynb 11111111 -> "
                    "/home/u/kernels.ipynb 22222222)")


def _saved(tmp_path, name, harness_doc, median=1e-3):
    r = kbench.bench(scale, np.ones(100), **QUICK)
    d = r.to_dict()
    d["name"] = "case"
    # the CI moves with the median: kbench compare refuses one that does not hold it
    k = median / d["stats"]["median"]
    d["stats"].update(median=median, ci_low=d["stats"]["ci_low"] * k,
                      ci_high=d["stats"]["ci_high"] * k)
    d["metadata"]["harness"].update(harness_doc["metadata"]["harness"])
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def test_kbench_compare_says_when_two_results_came_from_different_harnesses(tmp_path, capsys):
    old = _saved(tmp_path, "old.json", doc())
    same = _saved(tmp_path, "same.json", doc())
    other = _saved(tmp_path, "new.json", doc(script_md5="d" * 32))
    assert cli_main(["compare", old, same]) == 0
    assert "different harness" not in capsys.readouterr().out
    assert cli_main(["compare", old, other, "--fail", "8%"]) == 0   # reported, not failed
    out = capsys.readouterr().out
    assert "[different harness]" in out
    assert "different harness: case: different harness script (bench_add.py" in out


def test_a_sweep_records_the_script_that_called_it_not_kbench():
    res = kbench.sweep(lambda n: (scale, (np.ones(n),)), axes={"n": [10]}, **QUICK)
    r = res.results[0]
    assert r.metadata["harness"]["script"]["path"] == os.path.abspath(__file__)


def test_the_results_git_state_follows_an_edit_made_mid_session(tmp_path, monkeypatch):
    # metadata["git"] was read once a process and directory: after an edit the same result
    # said clean there and dirty in its harness
    import subprocess
    from kbench.provenance import harness as provenance
    monkeypatch.delenv("KBENCH_GIT_COMMIT", raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "k.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "k.py"],
                 ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "k"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    monkeypatch.chdir(repo)
    monkeypatch.setattr(metadata, "GIT_CACHE_S", 0.0)
    opts = dict(cold_cache=None, warmup_s=0.0, max_time_s=0.02, memory=False)
    assert kbench.bench(abs, -1, **opts).metadata["git"]["dirty"] is False
    (repo / "k.py").write_text("x = 2\n")
    assert kbench.bench(abs, -1, **opts).metadata["git"]["dirty"] is True


def _git_repo(repo):
    import subprocess
    repo.mkdir()
    (repo / "b.py").write_text("x = 1\n")
    try:
        for args in (["init", "-q"], ["add", "b.py"],
                     ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "b"]):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git unavailable")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()


def test_an_untracked_kernel_module_makes_the_projects_checkout_dirty(tmp_path, monkeypatch):
    # --untracked-files=no: a kernel in a file not yet added recorded a clean commit that
    # does not hold it
    from kbench.provenance import metadata
    monkeypatch.delenv("KBENCH_GIT_COMMIT", raising=False)
    repo = tmp_path / "repo"
    head = _git_repo(repo)
    assert metadata.git_info(str(repo)) == {"commit": head, "dirty": False}
    (repo / "kern.py").write_text("def k(a): return a * 2\n")
    assert metadata.git_info(str(repo)) == {"commit": head, "dirty": True,
                                            "untracked": ["kern.py"]}
    # kbench's own checkout: untracked files there are its build outputs
    assert metadata.git_info(str(repo), project=False) == {"commit": head, "dirty": False}


def test_kbench_git_commit_names_the_projects_commit_not_kbenchs(tmp_path, monkeypatch):
    # harness.kbench.git read the variable too: both commits said "deadbeef"
    from kbench.provenance import metadata
    repo = tmp_path / "repo"
    head = _git_repo(repo)
    monkeypatch.setenv("KBENCH_GIT_COMMIT", "deadbeef")
    monkeypatch.setattr(metadata, "GIT_CACHE_S", 0.0)
    assert metadata.git_info(str(repo))["commit"] == "deadbeef"
    assert metadata.git_info(str(repo), project=False)["commit"] == head
    r = kbench.bench(scale, np.ones(4), **QUICK)
    assert r.metadata["harness"]["git"]["commit"] == "deadbeef"
    own = r.metadata["harness"]["kbench"]["git"]
    assert own is None or own["commit"] != "deadbeef"


def test_a_slow_git_status_keeps_the_commit(tmp_path, monkeypatch):
    # the status timeout fell into the blanket except: the commit rev-parse found was lost
    import shutil
    from kbench.provenance import metadata
    monkeypatch.delenv("KBENCH_GIT_COMMIT", raising=False)
    repo = tmp_path / "repo"
    head = _git_repo(repo)
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = status ] && sleep 5\n'
                       f'exec {shutil.which("git")} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    info = metadata.git_info(str(repo), timeout=0.5)
    assert info["commit"] == head and info["dirty"] is None
    assert "git status took longer than 0.5 s" in info["dirty_why"]


def test_the_environment_is_recorded_per_result_not_per_process(monkeypatch):
    # host metadata was cached per process: OMP_NUM_THREADS 1 then 4 recorded 1 twice
    for v in ("1", "4"):
        monkeypatch.setenv("OMP_NUM_THREADS", v)
        monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "X" + v)
        env = kbench.bench(scale, np.ones(4), **QUICK).metadata["env"]
        assert env["OMP_NUM_THREADS"] == v
        assert env["VLLM_ATTENTION_BACKEND"] == "X" + v


def test_frameworks_already_imported_are_recorded_with_each_result(monkeypatch):
    # only numpy's and kbench's versions were recorded: a torch or triton upgrade went unseen
    import types
    from kbench.provenance import metadata
    assert metadata.relevant_env({"FLASHINFER_LOGLEVEL": "1", "VLLM_API_KEY": "k"}) == \
        {"FLASHINFER_LOGLEVEL": "1", "VLLM_API_KEY": metadata.SECRET_MASK}
    monkeypatch.setitem(sys.modules, "kbench_fake_framework", types.ModuleType("x"))
    monkeypatch.setattr(metadata, "_FRAMEWORKS", metadata._FRAMEWORKS + ("kbench_fake_framework",))
    sys.modules["kbench_fake_framework"].__version__ = "9.9.9"
    fw = kbench.bench(scale, np.ones(4), **QUICK).metadata["frameworks"]
    assert fw["kbench_fake_framework"] == "9.9.9"


def test_torch_version_and_threads_are_recorded():
    torch = pytest.importorskip("torch")
    r = kbench.bench(torch.mul, torch.ones(8), 2.0, **QUICK)
    fw = r.metadata["frameworks"]
    assert fw["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert fw["torch_num_threads"] == torch.get_num_threads()


def test_an_isolated_sweep_records_the_sweep_script_not_the_process_pool(tmp_path):
    # the spawned worker's first frame outside kbench is concurrent/futures/process.py: it was
    # recorded as the calling script, with the git of the interpreter's checkout
    import subprocess
    script = tmp_path / "iso.py"
    script.write_text(
        "import json, numpy as np, kbench\n"
        "def case(n):\n"
        "    return np.add, (np.ones(n), np.ones(n))\n"
        "if __name__ == '__main__':\n"
        "    s = kbench.sweep(case, axes={'n': [8]}, isolate=True, warmup_s=0.01,\n"
        "                     max_time_s=0.05, cold_cache=None, memory=False)\n"
        "    print(json.dumps(s.results[0].metadata['harness']['script']))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__))),
         os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["path"] == str(script)
    assert got["md5"] == md5_of(script)


BENCH_LIB = (
    "import numpy as np, kbench\n"
    "def case(n):\n"
    "    return np.add, (np.ones(n), np.ones(n))\n"
    "def run(isolate):\n"
    "    return kbench.sweep(case, axes={'n': [8]}, isolate=isolate, warmup_s=0.01,\n"
    "                        max_time_s=0.05, cold_cache=None, memory=False)\n")
RUN_SCRIPT = (
    "import json, bench_lib\n"
    "if __name__ == '__main__':\n"
    "    print(json.dumps([bench_lib.run(iso).results[0].metadata['harness']['script']\n"
    "                      for iso in (False, True)]))\n")


def test_an_isolated_sweep_called_from_a_module_records_that_module_and_line(tmp_path):
    # the worker has no caller frame of its own and guessed the parent's main script (run.py):
    # a non-isolated sweep records bench_lib.py and the line that called sweep
    import subprocess
    (tmp_path / "bench_lib.py").write_text(BENCH_LIB)
    (tmp_path / "run.py").write_text(RUN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__))),
         os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(tmp_path / "run.py")], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    plain, isolated = json.loads(out.stdout.strip().splitlines()[-1])
    lib = str(tmp_path / "bench_lib.py")
    assert plain == {"path": lib, "md5": md5_of(lib), "line": 5}
    assert {k: isolated[k] for k in plain} == plain
    assert "parent" in isolated["via"]


def test_a_worker_without_the_parents_record_still_guesses_the_main_script(monkeypatch):
    # other worker processes (not sweep's) keep the fallback: the parent's main script
    import types
    fake_mp = types.SimpleNamespace(parent_process=lambda: object())
    monkeypatch.setitem(sys.modules, "multiprocessing", fake_mp)
    main = types.ModuleType("__mp_main__")
    main.__file__ = __file__
    monkeypatch.setitem(sys.modules, "__mp_main__", main)
    monkeypatch.setattr(provenance, "caller_frame", lambda: None)
    h = provenance.collect(scale, (1.0,), {})
    assert h["script"]["path"] == os.path.abspath(__file__) and h["script"]["line"] is None
    assert h["script"]["via"] == "a worker process: the parent's main script"


def test_the_interpreters_command_line_is_recorded(tmp_path):
    # only sys.argv was recorded: ['-c'] for `python -O -c "..."`, neither the code nor -O
    import subprocess
    if sys.version_info < (3, 10):
        pytest.skip("sys.orig_argv is Python >= 3.10")
    code = ("import json, kbench; r = kbench.bench(abs, -1, warmup_s=0.01, max_time_s=0.02, "
            "cold_cache=None, memory=False); m = r.metadata; "
            "print(json.dumps([m['argv'], m['orig_argv'], m['executable']]))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(kbench.__file__))),
         os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-O", "-c", code, "--token=s3cr3t"], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    argv, orig, exe = json.loads(out.stdout.strip().splitlines()[-1])
    assert argv[0] == "-c"
    assert orig[1:4] == ["-O", "-c", code] and orig[4].startswith("--token=<masked")
    assert exe == sys.executable
