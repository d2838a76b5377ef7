"""What a cold CPU figure costs on a large last-level cache, by write flush and by eviction.

A cold 16 MB np.add (and a 1 MB one, which a cache holds whole) benched with kbench's
defaults under KBENCH_LLC_BYTES set to this host's own cache, 320 MiB and 1 GiB (the sizes a
large server reports: a 16-vCPU host read 300 MB). For each: the method kbench chose ("write":
a buffer twice the cache written before each sample; "evict": the operands' lines flushed),
the wall time of the bench, the samples it took, its median and CI; and, with the same cache
size, the write flush forced (the callable as a closure, whose arrays kbench cannot see).
Hot figures for reference. Each row in a fresh process, --rounds times, interleaved.

    python benchmarks/cpu_cold_methods.py --rounds 3 --out benchmarks/results/cpu_cold_methods.json \\
        --md benchmarks/results/cpu_cold_methods.md
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List

CASE = r'''
import json, sys, time
import numpy as np, kbench
n, how = int(sys.argv[1]), sys.argv[2]
a, b = np.random.default_rng(0).random((2, n), dtype=np.float32)
c = np.empty_like(a)
if how == "closure":
    def make(a, b, c):
        def add():
            return np.add(a, b, out=c)
        return add
    fn, args, kw = make(a, b, c), (), {}
else:
    fn, args, kw = np.add, (a, b), {"out": c}
t = time.perf_counter()
r = kbench.bench(fn, *args, kwargs=kw, bytes=3 * a.nbytes,
                 cold_cache=None if how == "hot" else "flush", memory=False)
wall = time.perf_counter() - t
cc = r.cold_cache
print(json.dumps({"wall_s": wall, "median_s": r.stats["median"], "n": len(r.samples),
                  "ci_low": r.stats["ci_low"], "ci_high": r.stats["ci_high"],
                  "method": cc.get("method", "hot"), "flush_bytes": cc.get("flush_bytes"),
                  "evict_bytes": cc.get("evict_bytes"), "flush_s": cc.get("flush_s"),
                  "cache_bytes": cc.get("cache_bytes")}))
'''

ROWS = [("own", "hot"), ("own", "default"), ("320M", "default"), ("320M", "closure"),
        ("1G", "default"), ("1G", "closure")]


def run(n: int, llc: str, how: str) -> Dict[str, Any]:
    env = dict(os.environ)
    if llc != "own":
        env["KBENCH_LLC_BYTES"] = llc
    else:
        env.pop("KBENCH_LLC_BYTES", None)
    p = subprocess.run([sys.executable, "-c", CASE, str(n), how], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def markdown(res: Dict[str, Any]) -> str:
    out = ["# Cold CPU figures on a large last-level cache: write flush against eviction", "",
           f"{res['machine']}; {res['rounds']} rounds, each row in a fresh process, "
           f"interleaved; kbench defaults (0.3 s budget). 'closure': the same add as a "
           f"closure, whose arrays kbench cannot see, so the write flush runs.", "",
           "| size | cache (KBENCH_LLC_BYTES) | callable | method | wall per bench | samples "
           "| median | CI of the median | flush or eviction per sample |",
           "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in res["rows"]:
        runs = row["runs"]
        med = statistics.median
        per = [r["flush_s"] / max(r["n"], 1) for r in runs if r.get("flush_s")]
        ci = med((r["ci_high"] - r["ci_low"]) / 2 / r["median_s"] for r in runs)
        out.append(f"| {row['n'] * 4 >> 20} MB | {row['llc']} | "
                   f"{'closure' if row['how'] == 'closure' else 'np.add'} | "
                   f"{runs[0]['method']} | {med(r['wall_s'] for r in runs):.2f} s | "
                   f"{med(r['n'] for r in runs):.0f} | {med(r['median_s'] for r in runs) * 1e3:.3f} ms"
                   f" | +-{100 * ci:.1f}% | "
                   + (f"{med(per) * 1e3:.2f} ms" if per else "-") + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    args = ap.parse_args()
    import platform
    res: Dict[str, Any] = {"machine": f"{platform.processor() or 'CPU'}, {os.cpu_count()} CPUs",
                           "rounds": args.rounds, "rows": []}
    table: List[Dict[str, Any]] = [{"n": n, "llc": llc, "how": how, "runs": []}
                                   for n in (1 << 22, 1 << 18) for llc, how in ROWS]
    for _ in range(args.rounds):
        for row in table:
            row["runs"].append(run(row["n"], row["llc"], row["how"]))
            r = row["runs"][-1]
            print(f"{row['n'] * 4 >> 20:3d} MB {row['llc']:5} {row['how']:8} {r['method']:6} "
                  f"wall {r['wall_s']:.2f} s n={r['n']} median {r['median_s'] * 1e3:.3f} ms",
                  flush=True)
    res["rows"] = table
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
