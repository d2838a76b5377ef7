"""kbench.measure.runhistory: what moves a figure between runs, learned from this machine's runs.

A run's CI of the median says how well that run pinned its own median. It cannot see what
moves between runs -- where the allocator placed the arrays, the host's load that second, the
GPU's temperature -- since all of its samples share them. On a 2-core VM the medians of ten
0.3 s runs of a cold 16 MB np.add spread 18-28% against CIs of +-1-6%; on an H100 those of a
bf16 GEMM spread 0.22% between fresh processes against CIs of +-0.08%.

So each bench adds its median to the runs of its benchmark on this machine, kept in
``$KBENCH_CACHE_DIR/runs-<hostname>.json`` (or the file ``KBENCH_RUN_HISTORY`` names; ``off``
keeps none). A benchmark is the callable (its name and source), the shapes and dtypes of its
arguments and of what it carries (a closure's arrays), the device and backend, the timer, the cold-cache method and the clock regime.
The stated CI then holds at least what the runs' spread says one run's figure may be off by
(``kbench._core.between_runs``: Student's t times the standard deviation of the log medians);
a benchmark with fewer than 3 runs takes the pooled spread of this device's other benchmarks
in the same regime where there is one, else its two runs' (t = 12.7 at 95%: wide, as two runs
know little), and its first run alone states its own CI, and says so. The stop
rule still reads the run's own CI: more samples do not shrink what moves between runs.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .. import _core
from ..provenance.cachefile import NotACacheFile, read_regular

#: runs kept per benchmark (the latest) and benchmarks kept per file (the latest used)
RUNS_KEPT = 20
BENCHMARKS_KEPT = 500
#: runs older than this are dropped: a driver, a kernel or the machine's load may have moved
MAX_AGE_S = 7 * 24 * 3600.0
#: a median this far outside all of its benchmark's earlier ones (either way), where there are
#: MIN_RUNS - 1 or more, is not the same figure (a kernel changed under one source): its
#: history restarts. Against one earlier run it is not judged: a first run that met page
#: faults, or a busy second, moves a small op's median 2x on a CI host, and a restart then
#: would drop the very spread the CI must state.
SAME_FIGURE = 2.0
#: runs from which a benchmark's own spread is preferred to the device's pooled one (2 runs
#: give t = 12.7 at 95% from one difference: used only where no pool is known)
MIN_RUNS = 3


def history_path() -> Optional[str]:
    """The file this process keeps its runs in, or None when KBENCH_RUN_HISTORY=off."""
    env = os.environ.get("KBENCH_RUN_HISTORY")
    if env:
        return None if env.strip().lower() in ("off", "0", "none", "no") else env
    from ..roofline.peaks import host_cache_path
    return host_cache_path("runs")


def identity(r: Any) -> Tuple[str, str]:
    """(benchmark key, pool key): the md5s of what makes two runs the same figure, and of the
    device and regime whose benchmarks pool their spreads."""
    h = (r.metadata or {}).get("harness") or {}
    fn, args, carried = h.get("callable") or {}, h.get("args") or {}, h.get("carried") or {}
    gpu = (r.metadata or {}).get("gpu") or {}
    cold = r.cold_cache or {}
    regime = (r.extra.get("regime") or {}).get("name")
    pool = [r.device, r.backend, gpu.get("uuid"), regime]
    bench = pool + [r.name, fn.get("qualname"), fn.get("module"), fn.get("source_md5"),
                    args.get("md5"), carried.get("md5"), r.extra.get("mode"), cold.get("mode"), cold.get("method"),
                    cold.get("flush_bytes")]
    md5 = lambda v: hashlib.md5(json.dumps(v, default=str).encode(),  # noqa: E731
                                usedforsecurity=False).hexdigest()
    return md5(bench), md5(pool)


#: the largest run history read: 500 benchmarks of 20 runs are about 0.5 MB
MAX_FILE_BYTES = 16 << 20
#: how long a bench waits for another process's record before it writes without the lock
LOCK_WAIT_S = 2.0


class RunHistoryWarning(UserWarning):
    """The run history's file cannot be used: the CI is the run's own until it can."""


_warned: set = set()


def _load(path: str) -> Tuple[Dict[str, Any], Optional[str]]:
    """(the history, None), or (an empty one, why the path cannot be kept) for a path that is
    not a small regular file (a FIFO there once hung every bench). A file that is not JSON,
    or not a history, begins again: it is kbench's own, half-written or of another version."""
    try:
        text = read_regular(path, MAX_FILE_BYTES, "a run history")
    except (FileNotFoundError, NotADirectoryError):
        return {"benchmarks": {}}, None
    except NotACacheFile as e:
        return {"benchmarks": {}}, str(e)
    except OSError as e:
        return {"benchmarks": {}}, f"cannot be read ({type(e).__name__}: {e.strerror or e})"
    try:
        d = json.loads(text)
    except (ValueError, RecursionError):
        return {"benchmarks": {}}, None
    if not isinstance(d, dict) or not isinstance(d.get("benchmarks"), dict):
        return {"benchmarks": {}}, None
    return d, None


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold <path>.lock while a record reads and rewrites the file, so that two processes
    (isolated sweep workers, pytest-xdist) do not each write over the other's run. Where no
    lock can be had (no fcntl, a read-only directory, a holder past LOCK_WAIT_S) the record
    goes on without one: losing a run is better than a bench that waits."""
    try:
        import fcntl
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)            # closing drops the lock


def _save(path: str, d: Dict[str, Any]) -> Optional[str]:
    """Write through a new file and a rename (a reader never sees half a file); why not, or
    None."""
    tmp = None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".runs-", dir=os.path.dirname(path) or ".")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(d, separators=(",", ":")))      # dumps: the C encoder
        os.replace(tmp, path)
    except OSError as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        return f"not saved: cannot write {path} ({type(e).__name__}: {e.strerror or e})"
    return None


def _recent(runs: Any, now: float) -> List[List[float]]:
    """The well-formed runs of an entry, younger than MAX_AGE_S."""
    out = []
    for x in runs if isinstance(runs, list) else []:
        if (isinstance(x, list) and len(x) == 2 and all(isinstance(v, (int, float)) for v in x)
                and x[0] > 0 and math.isfinite(x[0]) and now - x[1] < MAX_AGE_S):
            out.append([float(x[0]), float(x[1])])
    return out


def _pooled(d: Dict[str, Any], pool: str, skip: str, level: float,
            now: float) -> Optional[Dict[str, Any]]:
    """The pooled spread of the other benchmarks of a pool with MIN_RUNS runs or more: the
    pooled variance of their log medians, t with their summed degrees of freedom. Each entry
    carries its own sum of squares (written with it), so this reads no run."""
    ss, df, n_bench = 0.0, 0, 0
    for key, e in d["benchmarks"].items():
        if key == skip or not isinstance(e, dict) or e.get("pool") != pool:
            continue
        spread = e.get("log_ss")
        if not (isinstance(spread, list) and len(spread) == 2 and spread[1] >= MIN_RUNS
                and isinstance(e.get("last"), (int, float)) and now - e["last"] < MAX_AGE_S):
            continue
        ss += float(spread[0])
        df += int(spread[1]) - 1
        n_bench += 1
    if not df:
        return None
    sd = math.sqrt(ss / df)
    return {"benchmarks": n_bench, "log_sd": sd,
            "rel_halfwidth": math.expm1(_core.t_quantile(level, df) * sd)}


def record(r: Any) -> Dict[str, Any]:
    """Add r's median to its benchmark's runs and widen r's stated CI (r.stats ci_low,
    ci_high, rel_ci_halfwidth; the run's own are kept as *_within) to what the runs' spread
    says. Returns what r.extra["between_runs"] holds; never raises for the file."""
    path = history_path()
    if path is None:
        r.extra["between_runs"] = {"source": None, "why": "KBENCH_RUN_HISTORY=off: no runs kept"}
        return r.extra["between_runs"]
    st = r.stats
    med, level = st.get("median"), st.get("ci_level")
    if not (isinstance(med, float) and med > 0 and math.isfinite(med) and level):
        r.extra["between_runs"] = {"source": None, "why": "no positive median to keep"}
        return r.extra["between_runs"]
    with _locked(path):
        return _record(r, path, level, med)


def _record(r: Any, path: str, level: float, med: float) -> Dict[str, Any]:
    st = r.stats
    key, pool = identity(r)
    now = time.time()
    d, unusable = _load(path)
    if unusable:
        problem = f"{path} is {unusable}" if unusable.startswith("not ") else \
            f"{path}: {unusable}"
        if problem not in _warned:
            _warned.add(problem)
            warnings.warn(f"kbench: the run history {problem}: it is neither read nor "
                          f"written, and each figure's CI is its run's own. Remove it, or "
                          f"name another file in KBENCH_RUN_HISTORY (or off).",
                          RunHistoryWarning, stacklevel=4)
        r.extra["between_runs"] = {"source": None, "why": f"the run history {problem}: "
                                                          "the CI is this run's alone"}
        _widen(st, r.extra["between_runs"])
        return r.extra["between_runs"]
    e = d["benchmarks"].get(key)
    runs = _recent(e.get("runs"), now) if isinstance(e, dict) else []
    earlier = [m for m, _ in runs]
    restarted = len(earlier) >= MIN_RUNS - 1 and not (
        min(earlier) / SAME_FIGURE <= med <= max(earlier) * SAME_FIGURE)
    if restarted:
        runs = []
    runs = (runs + [[med, now]])[-RUNS_KEPT:]
    own = _core.between_runs([m for m, _ in runs], level)
    # the sum of squares of the log medians and their count, which the pool adds up
    ss = own["log_sd"] ** 2 * (len(runs) - 1) if len(runs) > 1 else 0.0
    d["benchmarks"].pop(key, None)      # re-inserted last: the dict's order is recency
    d["benchmarks"][key] = {"pool": pool, "name": r.name, "runs": runs, "last": now,
                            "log_ss": [ss, len(runs)]}
    while len(d["benchmarks"]) > BENCHMARKS_KEPT:
        d["benchmarks"].pop(next(iter(d["benchmarks"])))
    out: Dict[str, Any] = {"runs": len(runs), "file": path, "restarted": restarted}
    pooled = _pooled(d, pool, key, level, now) if len(runs) < MIN_RUNS else None
    if len(runs) >= MIN_RUNS or (len(runs) == 2 and not pooled):
        # two runs: t = 12.7 at 95% from their one difference, what two runs can say
        out.update(source="this benchmark", log_sd=own["log_sd"],
                   rel_halfwidth=own["rel_halfwidth"])
    else:
        if pooled:
            out.update(source=f"{pooled['benchmarks']} other benchmark"
                              f"{'s' if pooled['benchmarks'] != 1 else ''} on this device",
                       log_sd=pooled["log_sd"], rel_halfwidth=pooled["rel_halfwidth"])
        else:
            out.update(source=None, why="the first run of this benchmark, and none of others "
                                        "on this device yet: the CI is this run's alone")
    why_not_saved = _save(path, d)
    if why_not_saved:
        out["saved"] = why_not_saved
    _widen(st, out)
    r.extra["between_runs"] = out
    return out


def _widen(st: Dict[str, Any], between: Dict[str, Any]) -> None:
    """st's CI widened to median / (1 + h) .. median * (1 + h), h the between-run half-width,
    where that is wider than the run's own; the run's own kept as *_within."""
    st["ci_low_within"], st["ci_high_within"] = st["ci_low"], st["ci_high"]
    st["rel_ci_halfwidth_within"] = st["rel_ci_halfwidth"]
    h = between.get("rel_halfwidth")
    between["widened"] = False
    if not (isinstance(h, float) and math.isfinite(h) and h > 0):
        return
    med = st["median"]
    lo, hi = min(st["ci_low"], med / (1.0 + h)), max(st["ci_high"], med * (1.0 + h))
    if (lo, hi) != (st["ci_low"], st["ci_high"]):
        st["ci_low"], st["ci_high"] = lo, hi
        st["rel_ci_halfwidth"] = (hi - lo) / 2.0 / abs(med)
        between["widened"] = True
