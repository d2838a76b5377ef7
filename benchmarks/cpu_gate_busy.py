"""Does the pytest gate pass unchanged code and fail a planted 2x, on a quiet and a busy host?

A user's benchmark module (an f32 matmul 384^3 and a 16 MB np.add, each checked) is saved as a
baseline from --baseline-sessions quiet sessions (--kbench-save-append), then compared with ``--kbench-fail=8%`` in --sessions fresh
pytest sessions of the unchanged code and --sessions of a planted 2x (each benchmarked call does
its work twice), first on the quiet host, then with a second process spinning on a core for
the whole set. Each session's exit status, pytest's closing line and the gate's summary are
recorded. The goal: unchanged code passes 10 of 10 and the planted 2x fails 10 of 10, quiet and
busy; a verdict taken on a busy host says so. Each row runs under numpy's default thread pool
and under a pool of one thread (the core a busy 2-core host leaves free), baseline included.

    python benchmarks/cpu_gate_busy.py --sessions 10 --out benchmarks/results/cpu_gate_busy.json \
        --md benchmarks/results/cpu_gate_busy.md
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

MODULE = '''
import os
import numpy as np

PLANT = os.environ.get("KBENCH_GATE_PLANT") == "1"
rng = np.random.default_rng(0)


def twice_if_planted(fn):
    if not PLANT:
        return fn

    def both(*a, **kw):
        fn(*a, **kw)
        return fn(*a, **kw)
    return both


def test_matmul(kbench):
    a, b = rng.random((2, 384, 384), dtype=np.float32)
    c = np.empty_like(a)
    kbench(twice_if_planted(np.matmul), a, b, kwargs={"out": c}, flops=2 * 384 ** 3,
           check=a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_add(kbench):
    a, b = rng.random((2, 1 << 22), dtype=np.float32)
    c = np.empty_like(a)
    kbench(twice_if_planted(np.add), a, b, kwargs={"out": c}, bytes=3 * a.nbytes,
           check=a.astype(np.float64) + b)
'''


#: the thread pools a row can run under: numpy's default, and the pool sized to the one core
#: a busy 2-core host leaves free (what the OVERSUBSCRIBED warning advises)
POOLS = {"default": {}, "1 thread": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                                     "MKL_NUM_THREADS": "1"}}


HISTORY_DIR = tempfile.mkdtemp(prefix="kbench-gate-history-")


def _commit() -> Any:
    """The checkout's short commit (None outside git)."""
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    return (p.stdout.strip() or None) if p.returncode == 0 else None


def session(where: str, *args: str, plant: bool = False, pool: str = "default") -> Dict[str, Any]:
    # the sessions of a pool share one run history (kbench.measure.runhistory), as a user's machine
    # would, apart from this machine's own
    env = dict(os.environ, KBENCH_GATE_PLANT="1" if plant else "0", **POOLS[pool],
               KBENCH_RUN_HISTORY=os.path.join(HISTORY_DIR, f"{pool}.json"))
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "test_gate_module.py", *args], cwd=where, env=env, capture_output=True,
                       text=True, timeout=300)
    lines = p.stdout.strip().splitlines()
    gate = [ln for ln in lines if "slower than baseline" in ln or "nothing compared" in ln]
    rows = [ln for ln in lines if "test_gate_module.py::" in ln]
    return {"rc": p.returncode, "wall_s": time.perf_counter() - t,
            "closing_line": lines[-1] if lines else "", "gate": gate[-1] if gate else "",
            "rows": rows, "busy_named": "busy host" in p.stdout or "busy or" in p.stdout,
            "oversubscribed_named": "oversubscribed:" in p.stdout,
            "added": "added this session's" in p.stdout and "not added" not in p.stdout}


def spin() -> None:
    while True:
        pass


def markdown(res: Dict[str, Any]) -> str:
    out = ["# The pytest gate on a quiet and a busy host (8% threshold)", "",
           f"{res['machine']}; commit {res.get('commit')}; {res['sessions']} sessions per row; "
           f"for each thread pool, a baseline of {res['baseline_sessions']} quiet sessions "
           f"(pytest --kbench-save-append), taken before the rows.", "",
           "| thread pool | host | code | sessions passed (rc 0) | sessions failed (rc 1) "
           "| a busy host named | oversubscribed named | wall per session (median) |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in res["rows"]:
        s = row["sessions"]
        walls = sorted(x["wall_s"] for x in s)
        out.append(f"| {row['pool']} | {row['host']} | {row['code']} | "
                   f"{sum(x['rc'] == 0 for x in s)} | "
                   f"{sum(x['rc'] == 1 for x in s)} | {sum(x['busy_named'] for x in s)} | "
                   f"{sum(x.get('oversubscribed_named', False) for x in s)} | "
                   f"{walls[len(walls) // 2]:.2f} s |")
    out += ["", "Last session of each row, pytest's closing line and the gate's summary:", ""]
    for row in res["rows"]:
        last = row["sessions"][-1]
        out.append(f"- {row['pool']}, {row['host']}, {row['code']}: `{last['closing_line']}`; "
                   f"{last['gate']}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--baseline-sessions", type=int, default=5,
                    help="quiet sessions the baseline is saved from (--kbench-save-append)")
    ap.add_argument("--pools", default=",".join(POOLS),
                    help="comma-separated thread pools to run: " + ", ".join(POOLS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    args = ap.parse_args()
    import platform
    res: Dict[str, Any] = {"machine": f"{platform.processor() or 'CPU'}, {os.cpu_count()} CPUs",
                           "commit": os.environ.get("KBENCH_GIT_COMMIT") or _commit(),
                           "sessions": args.sessions, "baseline_sessions": args.baseline_sessions,
                           "rows": [], "baselines": {}}
    for pool in args.pools.split(","):
        run_pool(pool, args, res)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(res))
    return 0


def run_pool(pool: str, args: argparse.Namespace, res: Dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as where:
        with open(os.path.join(where, "test_gate_module.py"), "w") as f:
            f.write(MODULE)
        res["baselines"][pool] = [session(where, "--kbench-save=base.json",
                                          "--kbench-save-append", pool=pool)
                                  for _ in range(args.baseline_sessions)]
        for host in ("quiet", "busy"):
            hog = mp.Process(target=spin, daemon=True) if host == "busy" else None
            if hog:
                hog.start()
            try:
                for code, plant in (("unchanged", False), ("planted 2x", True)):
                    runs: List[Dict[str, Any]] = []
                    for _ in range(args.sessions):
                        runs.append(session(where, "--kbench-compare=base.json",
                                            "--kbench-fail=8%", plant=plant, pool=pool))
                    res["rows"].append({"pool": pool, "host": host, "code": code,
                                        "sessions": runs})
                    print(f"{pool:8} {host:5} {code:10} passed "
                          f"{sum(r['rc'] == 0 for r in runs)}/{len(runs)}; last: "
                          f"{runs[-1]['closing_line']}", flush=True)
            finally:
                if hog:
                    hog.terminate()
                    hog.join()


if __name__ == "__main__":
    sys.exit(main())
