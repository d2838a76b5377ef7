"""This machine's CPU ceilings: STREAM copy/triad bandwidth and FMA throughput (`kbench peaks`),
and the peaks caches that results read, the GPU's included (kbench.roofline.peaks_gpu measures
those).

Bandwidth is measured as STREAM does: arrays well above the last-level cache, bytes counted as
STREAM counts them (copy 16 B per element, triad 24 B: no write-allocate traffic), and the best of
several repeats reported (the median is recorded next to it). The compute ceiling is a
register-resident loop of independent vector FMAs (``_core.fma_loop``), in float64 and in
float32: a vector register holds twice as many float32 lanes, so the float32 ceiling is about
twice the float64 one, and a float32 kernel measured against the float64 one reads up to 2x
too close to peak.

Where the CPU has native bf16 or fp16 arithmetic (the avx512_bf16, amx_bf16, avx512_fp16 or
amx_fp16 flag in /proc/cpuinfo) and PyTorch is installed, a bf16/fp16 GEMM ceiling is measured
with torch's CPU matmul (oneDNN uses those instructions); elsewhere the record says why there is
none, and a bf16 call is held against the float32 FMA ceiling (kbench.roofline.ceilings).

Results are cached as JSON in ``$KBENCH_CACHE_DIR`` (default ``~/.cache/kbench``) under
``peaks-<hostname>.json``; ``load_cached_peaks()`` reads them back, and ignores (with one
warning) a file that is not a valid peaks record.

A ceiling measured low (a busy machine, a noisy neighbour) makes every later result look too
good: on a 2-core host beside one busy process, `kbench peaks` cached a CPU ceiling whose best
and median repeats were 112% apart, and one add then read 57% or 89% of peak depending on which
run's cache it met. So a measurement is cached only when nothing disturbed it:

* no other process was running as it began (``machine_load``, ``busy_machine_problem``);
* while it ran, other processes used under BUSY_OTHER_CPUS (a quarter of a CPU: the rule of a
  bench's Host load row, ``kbench.measure.hostload``);
* each ceiling's best repeat is at most REFUSE_GAP (50%) above its median;
* float32 FMA is not slower than float64, and every ceiling is plausible (``ceiling_problem``).

Otherwise the result says why under "refused", nothing is written, and the cached ceilings, if
any, stay in use (`kbench peaks` prints the reasons and exits 1); ``replace`` does not override
it. The figures behind the bounds, from 2 cores of a VM (AMD EPYC) running `kbench peaks
--seconds 5`: on 12 quiet runs (no other process, others under 0.05 CPU) the STREAM repeats'
best stood 5-46% above their median and FMA's 0-17%, and the best itself moved between 26.5 and
37.5 GB/s (copy) from run to run: the VM's memory bus is shared with neighbours that no reading
here sees. Runs beside busy processes spread 1-94%, and the issue's 112%. So a gap over
BEST_MEDIAN_GAP (10%) is a warning (this ceiling is uncertain), over REFUSE_GAP a refusal; the
load readings catch the busy runs whose repeats agree (one, with others at 0.29 CPU, read FMA
float32 at 124 GFLOP/s against a quiet 200, its repeats 5% apart). Neither the 1-minute load
average nor steal time refuses: five back-to-back quiet runs raised the load average from 0.68
to 1.11 by themselves, and steal read 0.8-1.6% on quiet and busy runs alike.

An undisturbed measurement that reads lower than the cache by more than KEEP_HIGHER_MARGIN
keeps the cached ceiling unless asked to replace it (``replace=True``, ``kbench peaks
--replace``): with run-to-run moves like the VM's, the cache keeps the highest quiet figure.
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings

from .. import _core
from ..measure import hostload
from ..provenance.cachefile import NotACacheFile, read_regular
from ..provenance.metadata import _hostname, collect_host_metadata, cpu_caches

SCHEMA = 2          # 2: the FMA ceiling per precision (1 had one, float64, named "FMA")

#: Total bytes of the three STREAM arrays: at least this much, ...
MIN_TOTAL_BYTES = 256 << 20
#: ... and at least this many times the last-level cache, ...
LLC_MULTIPLE = 4
#: ... but never more than this fraction of MemAvailable.
MAX_MEM_FRACTION = 0.25

TRIAD_SCALAR = 3.0

#: The figures a peaks record must hold, as finite positive numbers, with their labels.
CEILINGS = {"copy_GBps": ("STREAM copy", "GB/s"), "triad_GBps": ("STREAM triad", "GB/s"),
            "fma_GFLOPs": ("FMA float64", "GFLOP/s"), "fma_fp32_GFLOPs": ("FMA float32", "GFLOP/s")}
#: The FMA precisions measured: (dtype, the record's ceiling key, its detail key).
FMA_DTYPES = (("float64", "fma_GFLOPs", "fma"), ("float32", "fma_fp32_GFLOPs", "fma_fp32"))
#: A cached ceiling this much above the new measurement is kept (unless replace=True): a
#: machine does not get 10% slower by itself, a busy one measures low.
KEEP_HIGHER_MARGIN = 0.10
#: A best repeat this far above the median: a warning, the ceiling is uncertain ...
BEST_MEDIAN_GAP = 0.10
#: ... and this far: refused (the module's docstring has the figures).
REFUSE_GAP = 0.50
#: Other processes using this many CPUs while the ceilings are measured: refused.
BUSY_OTHER_CPUS = hostload.BUSY_OTHER_CPUS
#: Plausible ceilings, in bytes/s and FLOP/s. A cached figure outside them is a corrupt file,
#: not a machine: it would put results at 1e10 % of peak, or at 0 %. The floors are 1 MB/s
#: and 1 MFLOP/s, far below any machine's ceiling but under what a disturbed measurement can
#: read (`kbench peaks` with a 50 ms budget on a loaded 2-core VM: 1.6 GB/s, 0.32 GFLOP/s,
#: threads' start-up dominating; the suite's 32 KFLOP FMA calls there: 8 MFLOP/s). The
#: ceilings are 100 TB/s (every HBM stack of a GPU today sums to ~5-8 TB/s) and 100 PFLOP/s
#: (any single device's dense low-precision peak: ~5).
PLAUSIBLE_BYTES_PER_S = (1e6, 1e14)
PLAUSIBLE_FLOPS_PER_S = (1e6, 1e17)
#: A peaks cache is a few kB: more than this is not one, and is not read (a link to /dev/zero
#: was read until MemoryError).
MAX_CACHE_BYTES = 16 << 20


class PeaksCacheWarning(UserWarning):
    """A cached peaks file was ignored (unreadable or not a valid record) or not written."""


# ------------------------------------------------------------------ sizes

def llc_bytes() -> tuple[int, str]:
    """(size of the last-level cache in bytes, where it came from); (0, "unknown") if unknown.

    $KBENCH_LLC_BYTES wins; then ``_core.cpu_cache_info()`` when the core has it; then sysfs.
    """
    if os.environ.get("KBENCH_LLC_BYTES"):
        # parsed (and refused when malformed) in one place: the core's cache info
        return int(_core.cpu_cache_info()["llc_bytes"]), "KBENCH_LLC_BYTES"
    info = getattr(_core, "cpu_cache_info", None)
    if info is not None:
        try:
            size = _llc_from_core_info(info())
            if size:
                return size, "_core.cpu_cache_info"
        except Exception:
            pass
    caches = cpu_caches()
    if caches:
        return max(c["size_bytes"] for c in caches if c["type"] != "Instruction"), "sysfs"
    return 0, "unknown"


def _llc_from_core_info(info) -> int:
    """Accept the shapes a cache-info function plausibly returns: a dict with an LLC entry, a
    dict of per-level sizes, or a list of per-cache dicts."""
    if isinstance(info, dict):
        for key in ("llc_bytes", "llc", "last_level_bytes"):
            if isinstance(info.get(key), int):
                return info[key]
        sizes = [v for k, v in info.items() if isinstance(v, int) and str(k).upper().startswith("L")]
        if sizes:
            return max(sizes)
        levels = info.get("levels") or info.get("caches")
        if levels is not None:
            return _llc_from_core_info(levels)
    if isinstance(info, (list, tuple)):
        sizes = []
        for c in info:
            if isinstance(c, dict) and c.get("type") != "Instruction":
                size = c.get("size_bytes", c.get("size"))
                if isinstance(size, int):
                    sizes.append(size)
        return max(sizes, default=0)
    return 0


def mem_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_array_bytes() -> int:
    """Bytes per STREAM array: three arrays totalling max(4 x LLC, 256 MiB), capped at 25% of
    MemAvailable."""
    llc, _ = llc_bytes()
    total = max(LLC_MULTIPLE * llc, MIN_TOTAL_BYTES)
    avail = mem_available_bytes()
    if avail is not None:
        total = min(total, int(avail * MAX_MEM_FRACTION))
    return max(total // 3, 4096)


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ------------------------------------------------------------------ timing

def _time_repeats(call, budget_s: float, min_repeats: int, max_repeats: int) -> list[int]:
    """Warm with one call, then time `call` (ns each) until the budget is spent, at least
    min_repeats and at most max_repeats times."""
    call()
    times = []
    deadline = time.perf_counter_ns() + int(budget_s * 1e9)
    while len(times) < max_repeats:
        t0 = time.perf_counter_ns()
        call()
        times.append(max(time.perf_counter_ns() - t0, 1))
        if len(times) >= min_repeats and time.perf_counter_ns() >= deadline:
            break
    return times


def _rates(amount: float, times_ns: list[int]) -> dict:
    """Best (fastest call) and median rate of `amount` units per second, in units of 1e9/s."""
    import statistics           # lazily: it pulls in fractions (~4 ms)
    best_ns = min(times_ns)
    median_ns = statistics.median(times_ns)
    return {"best": amount / best_ns, "median": amount / median_ns}


#: The STREAM arrays are filled this many elements (1 MiB) at a time: Python checks for Ctrl-C
#: between two. One np.full of 512 MiB, faulting in pages a VM had not backed yet, ran 0.8 s of C.
FILL_BLOCK = 1 << 17


def _touched(n: int, value: float):
    """np.full(n, value), filled FILL_BLOCK elements at a time: every page is faulted in before
    timing (page faults are not measured), and Ctrl-C is heard within one block."""
    import numpy as np
    x = np.empty(n)
    for i in range(0, n, FILL_BLOCK):
        x[i:i + FILL_BLOCK] = value
    return x


def _stream(threads: int, array_bytes: int, budget_s: float, min_repeats: int,
            max_repeats: int) -> dict:
    n = max(array_bytes // 8, 1)
    a = _touched(n, 1.0)
    b = _touched(n, 2.0)
    c = _touched(n, 0.5)
    out = {"array_elems": n, "array_bytes": n * 8}
    kernels = {
        "copy": (16 * n, lambda: _core.stream_copy(c, a, threads=threads)),
        "triad": (24 * n, lambda: _core.stream_triad(a, b, c, TRIAD_SCALAR, threads=threads)),
    }
    for name, (nbytes, call) in kernels.items():
        times = _time_repeats(call, budget_s / len(kernels), min_repeats, max_repeats)
        rates = _rates(nbytes, times)
        out[name] = {
            "bytes_per_call": nbytes,
            "best_GBps": rates["best"],
            "median_GBps": rates["median"],
            "repeats": len(times),
            "times_s": [t * 1e-9 for t in times],
        }
    return out


def _fma(threads: int, budget_s: float, min_repeats: int, max_repeats: int,
         dtype: str = "float64") -> dict:
    # Calibrate: double n_iter until a call takes a tenth of its share of the budget, which
    # leaves room for about ten timed calls (as STREAM's NTIMES), then scale n_iter to the share.
    # Each step takes the faster of two calls, and the scaled call (the warm-up) is timed too:
    # one pre-empted short call (4 ms for 27 us of work beside another process) once scaled
    # n_iter to a thousandth of its share, calls of 70 us where the threads' start dominates,
    # and a ceiling of half the FMA rate.
    per_call_s = max(budget_s / 10, 1e-4)

    def timed(n: int) -> Tuple[float, int]:
        t0 = time.perf_counter_ns()
        flops = _core.fma_loop(n, threads=threads, dtype=dtype)
        return (time.perf_counter_ns() - t0) * 1e-9, flops

    n_iter = 1024
    while True:
        dt = min(timed(n_iter)[0], timed(n_iter)[0])
        if dt >= per_call_s / 10 or n_iter >= 1 << 40:
            break
        n_iter *= 2
    for _ in range(4):
        n_iter = max(int(n_iter * min(per_call_s / max(dt, 1e-9), 1e3)), 1)
        dt, flops = timed(n_iter)       # doubles as the warm-up
        if dt >= per_call_s / 4:
            break
    times = _time_repeats(lambda: _core.fma_loop(n_iter, threads=threads, dtype=dtype),
                          budget_s, min_repeats, max_repeats)
    rates = _rates(flops, times)
    return {
        "isa": _core.fma_loop_isa(),
        "dtype": dtype,
        "n_iter": n_iter,
        "flops_per_call": flops,
        "best_GFLOPs": rates["best"],
        "median_GFLOPs": rates["median"],
        "repeats": len(times),
        "times_s": [t * 1e-9 for t in times],
    }


#: The /proc/cpuinfo flags of native bf16 and fp16 arithmetic (kbench.roofline.ceilings' CPU rule).
CPU_NATIVE_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}


def cpu_flags(path: str = "/proc/cpuinfo") -> set:
    """The CPU's feature flags (the first processor's), empty where they cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_native(flags: set | None = None) -> dict:
    """{"bf16": [its native-instruction flags this CPU has], "fp16": [...]}: empty lists where it
    has none (bf16 or fp16 math is then converted to float32)."""
    flags = cpu_flags() if flags is None else flags
    return {p: [f for f in names if f in flags] for p, names in CPU_NATIVE_FLAGS.items()}


#: The native bf16/fp16 ceilings are a torch CPU matmul of this size (oneDNN: AMX, AVX512-BF16,
#: AVX512-FP16), 17 GFLOP a call.
NATIVE_N = 2048


def _native(budget_s: float, min_repeats: int, max_repeats: int, fp32_GFLOPs: float,
            flags: set | None = None) -> dict:
    """{"bf16": ..., "fp16": ...}: each the best/median GFLOP/s of torch's CPU matmul in that
    precision where the CPU has native instructions for it (kbench.roofline.ceilings.cpu_native)
    and torch is installed, else {"absent": why}. A figure under the float32 FMA ceiling is no
    native ceiling (torch did not use the instructions): absent, saying so."""
    support = cpu_native(flags)
    out: dict = {}
    for prec, have in support.items():
        if not have:
            out[prec] = {"absent": f"this CPU has no native {prec} instructions "
                                   f"({' or '.join(CPU_NATIVE_FLAGS[prec])}): {prec} math runs "
                                   f"converted to float32, under the float32 FMA ceiling"}
            continue
        try:
            import torch
        except ImportError:
            out[prec] = {"flags": have, "absent": f"the CPU has {', '.join(have)}, but its "
                         f"{prec} ceiling is measured with torch's CPU matmul: pip install torch"}
            continue
        n = NATIVE_N
        dtype = torch.bfloat16 if prec == "bf16" else torch.float16
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        c = torch.empty(n, n, dtype=dtype)
        times = _time_repeats(lambda: torch.matmul(a, b, out=c), budget_s / len(support),
                              min_repeats, max_repeats)
        rates = _rates(2 * n ** 3, times)
        d = {"best_GFLOPs": rates["best"], "median_GFLOPs": rates["median"],
             "repeats": len(times), "flags": have,
             "method": f"torch.matmul {n}^3 {prec}, {torch.get_num_threads()} threads"}
        if rates["best"] < fp32_GFLOPs:
            d = {"flags": have, "measured": d,
                 "absent": f"torch's {prec} matmul ran at {rates['best']:.3g} GFLOP/s, under "
                           f"the float32 FMA ceiling ({fp32_GFLOPs:.3g}): it did not use "
                           f"{', '.join(have)} (an old torch or oneDNN?)"}
        out[prec] = d
    return out


# ------------------------------------------------------------------ a quiet machine?

def _running_processes() -> dict:
    """{pid: name} of other processes whose main thread is on a CPU (state R) right now;
    {} when /proc cannot be read."""
    me = os.getpid()
    running = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
    except OSError:
        return running
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:             # gone, or not ours to read
            continue
        # the name is in parentheses and may hold spaces or ')': the state follows the last ')'
        end = stat.rfind(")")
        if stat[end + 2:end + 3] == "R":
            running[pid] = stat[stat.find("(") + 1:end]
    return running


def machine_load() -> dict:
    """How busy the machine is now: {"load1": 1-minute load average or None, "cpus": logical
    CPUs, "running": ["name (pid)", ...] other processes running in two looks 50 ms apart}."""
    try:
        load1 = os.getloadavg()[0]
    except (AttributeError, OSError):
        load1 = None
    first = _running_processes()
    if first:
        time.sleep(0.05)            # one look catches passers-by; two catch the busy ones
        second = _running_processes()
        first = {p: n for p, n in second.items() if p in first}
    running = [f"{name} ({pid})" for pid, name in sorted(first.items(), key=lambda x: int(x[0]))]
    return {"load1": load1, "cpus": os.cpu_count() or 1, "running": running}


def busy_machine_problem(load: dict) -> str | None:
    """Why a machine with this ``machine_load()`` is too busy to measure ceilings, or None:
    another process is running. The load average is not asked: it counts the last minute,
    `kbench peaks`' own previous run included."""
    running = load.get("running") or []
    if not running:
        return None
    shown = ", ".join(running[:5]) + (f" and {len(running) - 5} more" if len(running) > 5
                                      else "")
    return (f"the machine is busy ({len(running)} other process(es) running: {shown}): "
            f"ceilings measured now read low, and every % of peak against them reads high")


def busy_during_problem(during: dict | None) -> str | None:
    """Why the host's load while the ceilings were measured (``hostload.finish``) disturbed
    them, or None (quiet, or unknown). Steal time is named but does not refuse: it read the
    same on quiet and busy runs (the module's docstring)."""
    if not during or during.get("others_cpus", 0.0) < BUSY_OTHER_CPUS:
        return None
    return (f"other processes used {during['others_cpus']:.2f} of {during['cpus']} CPUs while "
            f"the ceilings were measured (steal {100 * during['steal_share']:.1f}%): they "
            f"shared the cores and the memory bus, so the ceilings read low")


def _gap_problems(stream: dict, fmas: dict) -> tuple[list[str], list[str]]:
    """(refusals, warnings): a best repeat more than REFUSE_GAP above the median refuses the
    measurement, more than BEST_MEDIAN_GAP is a warning."""
    refused, warned = [], []
    figures = [(f"STREAM {k}", stream.get(k) or {}, "best_GBps", "median_GBps", "GB/s")
               for k in ("copy", "triad")]
    figures += [(f"FMA {dtype}", fma, "best_GFLOPs", "median_GFLOPs", "GFLOP/s")
                for dtype, fma in fmas.items()]
    for label, d, best_key, median_key, unit in figures:
        best, median = d.get(best_key), d.get(median_key)
        if not (best and median and best > median * (1 + BEST_MEDIAN_GAP)):
            continue
        said = (f"{label}: best repeat {best:.3g} {unit} but median {median:.3g} {unit} "
                f"({100 * (best / median - 1):.0f}% apart")
        if best > median * (1 + REFUSE_GAP):
            refused.append(f"{said}, more than {100 * REFUSE_GAP:.0f}%): half the repeats ran "
                           f"a third slower than the best or more, so they shared the machine "
                           f"or its memory bus, and the best may have too")
        else:
            warned.append(f"{said}): the repeats disagree, so this ceiling is uncertain (a "
                          f"run more than {100 * REFUSE_GAP:.0f}% apart is refused)")
    return refused, warned


def _dtype_problem(fmas: dict) -> str | None:
    """float32 under float64: impossible on an undisturbed vector unit (a register holds twice
    the float32 lanes; a scalar unit runs both at one rate), so one of them ran beside other
    work. A busy VM's first demo cached float32 at 5.7 GFLOP/s against float64's 36, and every
    later float32 result read 3338% of its compute ceiling."""
    f64 = (fmas.get("float64") or {}).get("best_GFLOPs")
    f32 = (fmas.get("float32") or {}).get("best_GFLOPs")
    if f64 and f32 and f32 < f64 * (1 - KEEP_HIGHER_MARGIN):
        return (f"FMA float32 {f32:.3g} GFLOP/s under float64 {f64:.3g} GFLOP/s: float32 runs "
                f"at least as fast on any vector unit, so the machine was disturbed")
    return None


def _refused_note(path: str) -> str:
    """What a refused measurement leaves in place: the cache at `path`, or no ceiling."""
    cached = load_cached_peaks(path)
    if cached is not None:
        when = (cached.get("metadata") or {}).get("timestamp_utc") or "at an unknown time"
        kept = f"the cached ceilings in {path} (measured {when}) stay in use"
    else:
        kept = (f"no ceiling is cached ({path}), so results carry no % of peak until one "
                f"is measured")
    return (f"not saved: the checks above refuse this measurement as a ceiling (one measured "
            f"low puts every later % of peak too high); {kept}. Re-run `kbench peaks` when the "
            f"machine is quiet")


def _keep_higher_cached(result: dict, cached: dict) -> list[str]:
    """Keep each cached ceiling much higher than the new one in `result` (noted under
    "kept_from_cache"); returns what was kept, in words."""
    out = []
    for key, (label, unit) in CEILINGS.items():
        new, old = result[key], cached[key]
        if old > new * (1 + KEEP_HIGHER_MARGIN):
            result[key] = old
            result.setdefault("kept_from_cache", {})[key] = {
                "cached": old, "measured": new,
                "cached_at": (cached.get("metadata") or {}).get("timestamp_utc")}
            out.append(f"{label} measured {new:.3g} {unit}, {100 * (1 - new / old):.0f}% below "
                       f"the cached {old:.3g} {unit}: kept the cached ceiling (a busy machine "
                       f"measures low); `kbench peaks --replace` stores the new one")
    return out


# ------------------------------------------------------------------ public

def measure_cpu_peaks(seconds: float = 5.0, threads: int | None = None, *,
                      array_bytes: int | None = None, min_repeats: int = 3,
                      max_repeats: int = 50, save: bool = True, replace: bool = False) -> dict:
    """Measure STREAM copy/triad bandwidth and FMA throughput on `threads` threads (default: every
    CPU this process may use). `seconds` is the timing budget (allocating and touching the arrays
    comes on top); `array_bytes` overrides the size of each of the three STREAM arrays (default
    ``default_array_bytes()``). With `save`, the result is also written to ``peaks_cache_path()``
    unless the measurement was disturbed ("refused": see the module's rule; the cache is then
    left as it is, whatever `replace` says); a cached ceiling more than 10% above the new one is
    kept unless `replace`. A cache that cannot be written is a warning, not an error: the
    measured numbers are returned.

    Returns {"copy_GBps", "triad_GBps", "fma_GFLOPs" (float64), "fma_fp32_GFLOPs" (best of
    repeats each), "stream": {...}, "fma": {...}, "fma_fp32": {...}, "threads", "llc_bytes",
    "llc_source", "seconds", "metadata", "schema",
    "load" (machine_load() before measuring), "host_load" (hostload.finish() over the
    measurement, None where unknown), "native" (bf16/fp16 GEMM ceilings where the CPU has
    native instructions for them, else why none), "refused" (why this measurement is no
    ceiling: empty when it is one), "not_saved" (with `save`, what a refusal left in place),
    "warnings" (the refusals, not_saved, ceilings kept, an unwritable cache),
    "kept_from_cache", "saved_to" (path or None)}.
    GB are 1e9 bytes.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"need 1 <= min_repeats <= max_repeats, got {min_repeats}, {max_repeats}")
    threads = default_threads() if threads is None else int(threads)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    llc, llc_source = llc_bytes()
    if array_bytes is None:
        array_bytes = default_array_bytes()
    elif array_bytes < 8:
        raise ValueError(f"array_bytes must be >= 8, got {array_bytes}")

    load = machine_load()
    started = time.perf_counter()
    before = hostload.start()
    stream = _stream(threads, array_bytes, seconds * 0.6, min_repeats, max_repeats)
    fmas = {dtype: _fma(threads, seconds * 0.4 / len(FMA_DTYPES), min_repeats, max_repeats,
                        dtype) for dtype, _, _ in FMA_DTYPES}
    native = _native(seconds * 0.2, min_repeats, max_repeats, fmas["float32"]["best_GFLOPs"])
    during = hostload.finish(before)
    result = {
        "schema": SCHEMA,
        "copy_GBps": stream["copy"]["best_GBps"],
        "triad_GBps": stream["triad"]["best_GBps"],
        **{key: fmas[dtype]["best_GFLOPs"] for dtype, key, _ in FMA_DTYPES},
        "threads": threads,
        "llc_bytes": llc,
        "llc_source": llc_source,
        "array_bytes": stream["array_bytes"],
        "arrays_exceed_llc_x": (3 * stream["array_bytes"] / llc) if llc else None,
        "seconds": seconds,
        "wall_s": time.perf_counter() - started,
        "stream": stream,
        **{detail: fmas[dtype] for dtype, _, detail in FMA_DTYPES},
        "metadata": collect_host_metadata(),
        "load": load,
        "host_load": during,
        "native": native,               # bf16/fp16 where the CPU has instructions for them
    }
    refused = [p for p in [busy_machine_problem(load), busy_during_problem(during)] if p]
    gaps_refused, gaps_warned = _gap_problems(stream, fmas)
    refused += gaps_refused
    refused += [p for p in [_dtype_problem(fmas), peaks_record_problem(result)] if p]
    result["refused"] = refused
    problems = refused + gaps_warned
    result["warnings"] = problems       # saved with the record: gap warnings, ceilings kept
    result["saved_to"] = None
    result["not_saved"] = None          # why a refused measurement was not cached, in words
    if save and refused:
        result["not_saved"] = _refused_note(peaks_cache_path())
        problems.append(result["not_saved"])
    elif save:
        path = peaks_cache_path()
        cached = load_cached_peaks(path)
        if cached is not None and not replace:
            problems += _keep_higher_cached(result, cached)
        result["saved_to"] = path       # before writing, so the file equals what is returned
        try:
            save_peaks(result, path)
        except OSError as e:            # the numbers must outlive an unwritable cache
            result["saved_to"] = None
            problems.append(f"not saved: cannot write {path} ({type(e).__name__}: "
                            f"{e.strerror or e}); set KBENCH_CACHE_DIR to a writable directory")
    return result


def cache_dir() -> str:
    """$KBENCH_CACHE_DIR, default ~/.cache/kbench: kbench's files about this machine."""
    return os.environ.get("KBENCH_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kbench")


def host_cache_path(prefix: str, hostname: str | None = None) -> str:
    """cache_dir()/<prefix>-<hostname>.json, the host name made safe for a file name."""
    host = hostname or _hostname()
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in host) or "unknown"
    return os.path.join(cache_dir(), f"{prefix}-{safe}.json")


def peaks_cache_path(hostname: str | None = None) -> str:
    """$KBENCH_CACHE_DIR/peaks-<hostname>.json (default dir ~/.cache/kbench)."""
    return host_cache_path("peaks", hostname)


def gpu_peaks_path(info: dict) -> str:
    """$KBENCH_CACHE_DIR/gpu-peaks-<uuid>.json: what kbench.roofline.peaks_gpu measured on this
    GPU."""
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    uuid = str(info.get("uuid") or info.get("name") or "gpu").replace("/", "_")
    return os.path.join(d, f"gpu-peaks-{uuid}.json")


#: The GPU peaks record kbench.roofline.peaks_gpu writes: 2 measures every precision (fp64 FMA, the
#: torch GEMMs) and names the absent ones; 1 had fp32 FMA and bf16 GEMM alone.
GPU_SCHEMA = "kbench.gpu_peaks/2"
GPU_SCHEMAS_READ = ("kbench.gpu_peaks/1", GPU_SCHEMA)
#: The GPU peaks record's ceilings (kbench.roofline.peaks_gpu), in base units: key -> (label,
#: kind).
GPU_CEILINGS = {"hbm_bytes_per_s": ("HBM copy", "bytes"),
                **{f"{p}_flops_per_s": (p, "flops")
                   for p in ("fp64", "fp64_tc", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3",
                             "fp8_e5m2", "int8", "fp4")}}


def load_gpu_peaks(info: dict) -> dict | None:
    """The cached GPU ceilings of the device `info` describes (cuda_device_info), or None.
    A file that is not a record, or holds an implausible ceiling, is ignored with a warning. A
    record of the older schema (kbench.gpu_peaks/1: fp32 FMA, bf16 GEMM, HBM copy) is read as
    it is: its figures stand, and a precision it lacks reads as not measured, asking for
    `kbench peaks`, which measures every precision again (kbench.roofline.ceilings)."""
    path = gpu_peaks_path(info)
    d = _read_cache(path)
    if not (isinstance(d, dict) and d.get("schema") in GPU_SCHEMAS_READ):
        return None
    for key, (_, kind) in GPU_CEILINGS.items():
        problem = ceiling_problem(key, d.get(key), kind) if d.get(key) is not None else None
        if problem:
            _warn_cache_once(path, problem)
            return None
    return d


def ceiling_problem(key: str, value: object, kind: str, scale: float = 1.0) -> str | None:
    """Why `value` (times `scale` in bytes/s or FLOP/s, as `kind` "bytes" or "flops" says) is
    not a ceiling of a real machine; None when it can be one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{key} is {value!r}, not a number"
    if not (math.isfinite(value) and value > 0):
        return f"{key} is {value!r}, not a finite positive number"
    low, high = PLAUSIBLE_BYTES_PER_S if kind == "bytes" else PLAUSIBLE_FLOPS_PER_S
    if not low <= value * scale <= high:
        unit = "GB/s" if kind == "bytes" else "GFLOP/s"
        return (f"{key} is {value!r}, not a plausible ceiling ({low / 1e9:g} .. "
                f"{high / 1e9:g} {unit})")
    return None


_NO_CACHE = object()    # _read_cache's "no document" (a file holding JSON's null reads None)


def _read_cache(path: str) -> object:
    """The JSON document in a cache file; _NO_CACHE when there is none. Anything that is not a
    plausible cache -- not a regular file (a FIFO hung every bench, /dev/zero read until
    MemoryError), larger than MAX_CACHE_BYTES, unreadable, not JSON, nested past the parser's
    depth -- is ignored with one warning naming the file."""
    try:
        text = read_regular(path, MAX_CACHE_BYTES, "a peaks cache")
    except (FileNotFoundError, NotADirectoryError):
        return _NO_CACHE
    except NotACacheFile as e:
        _warn_cache_once(path, str(e))
        return _NO_CACHE
    except OSError as e:
        _warn_cache_once(path, f"cannot be read ({type(e).__name__}: {e.strerror or e})")
        return _NO_CACHE
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:     # not JSON, not UTF-8, or nested too deep
        _warn_cache_once(path, f"not JSON ({type(e).__name__}: {str(e)[:200]})")
        return _NO_CACHE


def save_peaks(result: dict, path: str | None = None) -> str:
    """Write `result` as JSON atomically (temp file + rename); returns the path."""
    path = path or peaks_cache_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def peaks_record_problem(d: object) -> str | None:
    """What is wrong with a peaks record (the cache file's content), None when it is valid:
    a dict of this SCHEMA whose ceilings are finite positive numbers."""
    if not isinstance(d, dict):
        return f"it holds a {type(d).__name__}, not an object"
    if d.get("schema") != SCHEMA:
        older = isinstance(d.get("schema"), int) and 0 < d["schema"] < SCHEMA
        return (f"schema {d.get('schema')!r}, expected {SCHEMA}" +
                (" (an older kbench's record: this one has more ceilings)" if older else ""))
    for key, (_, unit) in CEILINGS.items():
        problem = ceiling_problem(key, d.get(key), "bytes" if unit == "GB/s" else "flops",
                                  scale=1e9)
        if problem:
            return problem
    for key in ("stream", "metadata", *(detail for _, _, detail in FMA_DTYPES)):
        if key in d and not isinstance(d[key], dict):
            return f"{key} is a {type(d[key]).__name__}, not an object"
    return None


_warned_caches: set = set()


def _warn_cache_once(path: str, problem: str) -> None:
    """One warning per file and problem in a process: a bad cache is reported, not repeated
    on every bench."""
    if (path, problem) in _warned_caches:
        return
    _warned_caches.add((path, problem))
    warnings.warn(f"kbench: ignoring the peaks cache {path}: {problem}. Results carry no % of "
                  f"peak until `kbench peaks` rewrites it (or delete the file).",
                  PeaksCacheWarning, stacklevel=3)


def load_cached_peaks(path: str | None = None) -> dict | None:
    """The cached result of ``measure_cpu_peaks`` for this host, or None when there is none.
    A file that cannot be read or is not a valid record is ignored with one warning
    (PeaksCacheWarning) naming the file and what is wrong."""
    path = path or peaks_cache_path()
    result = _read_cache(path)
    if result is _NO_CACHE:
        return None
    problem = peaks_record_problem(result)
    if problem:
        _warn_cache_once(path, problem)
        return None
    return result


def peaks_table(d: dict) -> str:
    """A small text table of a ``measure_cpu_peaks`` result."""
    meta = d.get("metadata") or {}
    stream = d.get("stream", {})
    lines = [
        f"CPU peaks  {meta.get('cpu_model', 'unknown CPU')}  "
        f"({d.get('threads')} threads, {meta.get('hostname', '?')}, "
        f"{meta.get('timestamp_utc', '?')})",
        f"{'kernel':<8} {'best':>15} {'median':>15} {'repeats':>8}",
    ]
    for name in ("copy", "triad"):
        k = stream.get(name)
        if k:
            lines.append(f"{name:<8} {k['best_GBps']:>10.2f} GB/s {k['median_GBps']:>10.2f} GB/s "
                         f"{k['repeats']:>8}")
    for dtype, _, detail in FMA_DTYPES:
        fma = d.get(detail)
        if fma:
            name = "fma f64" if dtype == "float64" else "fma f32"
            lines.append(f"{name:<8} {fma['best_GFLOPs']:>7.1f} GFLOP/s "
                         f"{fma['median_GFLOPs']:>7.1f} GFLOP/s {fma['repeats']:>8}  "
                         f"({fma.get('isa')})")
    for prec, nat in sorted((d.get("native") or {}).items()):
        if nat.get("best_GFLOPs"):
            lines.append(f"{prec + ' mm':<8} {nat['best_GFLOPs']:>7.1f} GFLOP/s "
                         f"{nat['median_GFLOPs']:>7.1f} GFLOP/s {nat['repeats']:>8}  "
                         f"({nat.get('method')}; {', '.join(nat.get('flags') or [])})")
        elif nat.get("absent"):
            lines.append(f"{prec:<8} none: {nat['absent']}")
    llc = d.get("llc_bytes") or 0
    array_mb = d.get("array_bytes", 0) / 2**20
    note = f"3 arrays x {array_mb:.0f} MiB"
    if llc:
        note += f", {d.get('arrays_exceed_llc_x', 0):.1f}x the {llc / 2**20:.0f} MiB LLC " \
                f"({d.get('llc_source')})"
    lines.append(note)
    for key, kept in (d.get("kept_from_cache") or {}).items():
        label, unit = CEILINGS[key]
        lines.append(f"ceiling kept: {label} {kept['cached']:.3g} {unit} from the cache "
                     f"(measured now: {kept['measured']:.3g} {unit})")
    if d.get("refused"):
        lines.append(f"NOT A CEILING: refused for {len(d['refused'])} reason(s) (in the "
                     f"warnings), so not cached")
    return "\n".join(lines)
