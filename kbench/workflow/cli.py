"""The kbench command line: demo (the main job), peaks, info, compare."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..report._format import (fmt_bytes, fmt_ci, fmt_pct, fmt_rate, fmt_time, library_status,
                              text_table)


class CliError(Exception):
    """A refusal to print as one line on stderr (exit 2): a bad file or argument, not a bug."""


def _row(case: str, r: Any, peaks_used: Dict[str, str]) -> List[str]:
    """One table row; notes in peaks_used which measured peak its "% peak" refers to."""
    tp = r.throughput
    if tp.get("bound_by") == "compute" and "flops_per_s" in tp:
        kind = "flops"
    elif "bytes_per_s" in tp:
        kind = "bytes"
    elif "flops_per_s" in tp:
        kind = "flops"
    else:
        kind = None
    if kind is None:
        rate, pct = "-", "-"
    else:
        unit, pct_key = ("FLOP", "compute_pct_peak") if kind == "flops" \
            else ("B", "bandwidth_pct_peak")
        rate, pct = fmt_rate(tp[f"{kind}_per_s"], unit), fmt_pct(tp.get(pct_key))
        if tp.get(f"peak_{kind}_per_s"):
            peak = (f"{tp.get(f'peak_{kind}_name') or 'memory or compute'} peak, "
                    f"{fmt_rate(tp[f'peak_{kind}_per_s'], unit)}")
            peaks_used.setdefault(peak, "compute" if kind == "flops" else "memory")
    s = r.stats
    ok = "-" if r.correctness is None else ("ok" if r.correctness.get("ok") else "FAIL")
    return [case, r.cold_cache.get("mode", "none"), r.backend, fmt_time(r.median),
            fmt_ci(s.get("median"), s.get("ci_low"), s.get("ci_high")), rate, pct,
            fmt_pct(s.get("cv")), f"{r.stop.get('stop')} (n={r.n})", ok]


HEADERS = ["case", "cache", "timer", "median", "CI95 of median", "throughput", "% peak",
           "sample CV", "stop", "correct"]


def _legend(peaks_used: Dict[str, str]) -> List[str]:
    """What the columns mean: CI vs CV, and which measured ceiling each % peak is of."""
    lines = ["CI95 of median: where the true median lies (95% confidence), relative to the "
             "median: the precision of the figure, which the stop rule drives down.",
             "sample CV: the spread of single calls (std / mean); a high CV with a tight CI "
             "is a noisy operation measured precisely."]
    for peak, bound in peaks_used.items():
        lines.append(f"% peak ({bound}-bound rows): of the measured {peak} (kbench peaks).")
    if not peaks_used:
        lines.append("% peak: no measured ceiling is cached on this machine (run kbench peaks).")
    return lines


def cmd_demo(args: argparse.Namespace) -> int:
    import kbench
    from ..roofline.peaks import load_cached_peaks, measure_cpu_peaks, peaks_table

    print("kbench demo: correctness first, then timing, hot and cold, on the CPU"
          + (" and the GPU" if args.gpu else ""))
    if args.json:
        _check_writable(args.json)      # refuse now, not after the whole demo has run
    if load_cached_peaks() is None:
        print("measuring this machine's ceilings first (kbench peaks, cached) ...")
        measured = measure_cpu_peaks(seconds=args.peak_seconds)
        print(peaks_table(measured))
        for w in measured.get("warnings", []):
            print(f"  warning: {w}")
    rng = np.random.default_rng(0)
    rows = []
    labels: Dict[str, str] = {}          # result key -> the case name shown in the table
    peaks_used: Dict[str, str] = {}
    # Memory-bound: c = a + b in float32; 3 x 16 MB: far above L2, inside the last-level cache,
    # so hot and cold differ.
    n = 4 << 20
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    c = np.empty_like(a)
    ref_add = (a.astype(np.float64) + b.astype(np.float64))
    # Compute-bound: a float32 matrix product; reference in float64.
    m = 384
    x = rng.standard_normal((m, m), dtype=np.float32)
    y = rng.standard_normal((m, m), dtype=np.float32)
    ref_mm = x.astype(np.float64) @ y.astype(np.float64)
    common = dict(max_time_s=args.seconds, warmup_s=min(1.0, args.seconds / 2))
    results = {}
    for cache in (None, "flush"):
        label = "hot" if cache is None else "cold"
        r = kbench.bench(np.add, a, b, kwargs={"out": c}, bytes=3 * n * 4, check=ref_add,
                         cold_cache=cache, name=f"np.add f32 {n}", **common)
        labels[f"add_{label}"] = f"add f32 n={n} ({label})"
        rows.append(_row(labels[f"add_{label}"], r, peaks_used))
        results[f"add_{label}"] = r
        # fp32 dot products of length m: error grows ~ m * eps * |x||y| (bound ~5e-4 here)
        r = kbench.bench(np.matmul, x, y, flops=2 * m ** 3, bytes=3 * m * m * 4, check=ref_mm,
                         rtol=1e-4, atol=5e-4, cold_cache=cache, name=f"np.matmul f32 {m}^3",
                         **common)
        labels[f"matmul_{label}"] = f"matmul f32 {m}^3 ({label})"
        rows.append(_row(labels[f"matmul_{label}"], r, peaks_used))
        results[f"matmul_{label}"] = r
    if args.gpu:
        rows += _gpu_demo(args, results, labels, peaks_used)
    print()
    print(text_table(HEADERS, rows))
    for line in _legend(peaks_used):
        print(f"  {line}")
    host = _host_load_line(results, labels)
    if host:
        print(f"  {host}")
    for key, r in results.items():
        for w in r.warnings:
            print(f"  note [{labels.get(key, key)}]: {w}")
    if args.json:
        _write_session(args.json, results)
        print(f"results written to {args.json}")
    return 0


def _host_load_line(results: Dict[str, Any], labels: Dict[str, str]) -> Optional[str]:
    """One line naming the cases that ran on a busy host or oversubscribed it, and why their
    figures may read elsewhere (a 384^3 matmul read 20.6 ms cold against 0.6 ms hot, and the
    pool, not the cache, made it); None when none did. The advice is the Host load row's
    (kbench.measure.hostload.text), which a printed result shows."""
    busy, over = [], []
    for key, r in results.items():
        load = (getattr(r, "extra", None) or {}).get("host_load") or {}
        if load.get("busy"):
            busy.append((labels.get(key, key), load))
        if load.get("oversubscribed"):
            over.append((labels.get(key, key), load))
    if not busy and not over:
        return None
    parts = []
    if busy:
        worst = max(busy, key=lambda c: c[1]["others_cpus"])[1]
        parts.append(f"BUSY during {', '.join(c for c, _ in busy)} (other processes used up to "
                     f"{worst['others_cpus']:.2f} of {worst['cpus']} CPUs: the next run can read "
                     f"elsewhere)")
    if over:
        parts.append(f"OVERSUBSCRIBED during {', '.join(c for c, _ in over)} (the call's thread "
                     f"pool wanted more CPUs than the others left it, and its time includes "
                     f"waiting for preempted threads)")
    return ("host load: " + "; ".join(parts)
            + "; a printed result's Host load row says what to do")


def _write_session(path: str, results: Dict[str, Any]) -> None:
    """The session document `kbench compare` and the pytest plugin's --kbench-compare read."""
    import datetime
    import platform
    from .._version import __version__
    from .cli_compare import SESSION_SCHEMA
    from ..provenance.metadata import command_line
    doc = {"schema": SESSION_SCHEMA, "results": {k: r.to_dict() for k, r in results.items()},
           "metadata": {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(
                            timespec="seconds"),
                        "kbench_version": __version__, "python": sys.version.split()[0],
                        "platform": platform.platform(), "hostname": platform.node(),
                        "argv": command_line()}}
    from ..report._format import write_atomic
    try:        # a failed write (disk full) leaves an older file whole
        write_atomic(path, json.dumps(doc, indent=1))
    except OSError as e:        # the table above already holds the figures
        raise CliError(f"--json {path}: cannot write: {e.strerror or e}") from None


def _check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CliError(f"--json {path}: is a directory")
    if not os.path.isdir(directory):
        raise CliError(f"--json {path}: no such directory: {directory}")
    if not os.access(directory, os.W_OK):
        raise CliError(f"--json {path}: cannot write to {directory}")
    # os.access says yes to root on /proc and read-only mounts: try it (append: no truncation)
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise CliError(f"--json {path}: cannot write: {e.strerror or e}") from None
    if not existed:
        os.remove(path)


def _gpu_demo(args: argparse.Namespace, results: Dict[str, Any], labels: Dict[str, str],
              peaks_used: Dict[str, str]) -> List[List[str]]:
    import kbench
    try:
        import torch
    except ImportError:
        print("(GPU present but PyTorch is not installed: GPU demo skipped)")
        return []
    rows = []
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    n = 64 << 20
    src = torch.randn(n, device=dev, generator=gen)
    dst = torch.empty_like(src)
    for cache in (None, "flush"):
        label = "hot" if cache is None else "cold"
        r = kbench.bench(dst.copy_, src, bytes=2 * n * 4, check=src, cold_cache=cache,
                         name="torch copy 256MB", max_time_s=args.seconds)
        labels[f"gpu_copy_{label}"] = f"gpu copy 256 MB ({label})"
        rows.append(_row(labels[f"gpu_copy_{label}"], r, peaks_used))
        results[f"gpu_copy_{label}"] = r
    k = 4096
    a = torch.randn(k, k, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, k, device=dev, dtype=torch.bfloat16, generator=gen)
    ref = (a.double() @ b.double())
    # bf16 output of a length-4096 fp32-accumulated dot (|c| ~ 64): half an ulp of bf16 ~ 0.25
    r = kbench.bench(torch.matmul, a, b, flops=2 * k ** 3, bytes=3 * k * k * 2, check=ref,
                     rtol=1.6e-2, atol=0.5, compute_peak="bf16", name=f"bf16 matmul {k}^3",
                     max_time_s=args.seconds)
    labels["gpu_matmul"] = f"gpu bf16 matmul {k}^3"
    rows.append(_row(labels["gpu_matmul"], r, peaks_used))
    results["gpu_matmul"] = r
    return rows


def cmd_peaks(args: argparse.Namespace) -> int:
    """Exit 1 when the CPU measurement was disturbed and so not cached (kbench.roofline.peaks'
    rule)."""
    from ..roofline.peaks import measure_cpu_peaks, peaks_table
    rc = 0
    if not args.gpu_only:
        d = measure_cpu_peaks(seconds=args.seconds, replace=args.replace)
        print(peaks_table(d))
        sys.stdout.flush()              # the table, then why it is refused
        for w in d.get("warnings", []):
            kind = "error" if w == d.get("not_saved") else "warning"
            print(f"kbench peaks: {kind}: {w}", file=sys.stderr)
        if d.get("saved_to"):
            print(f"saved to {d['saved_to']}")
        if d.get("refused"):
            rc = 1
    if not args.cpu_only:
        from ..backends import cuda
        if cuda.available():
            from ..roofline.peaks_gpu import gpu_peaks_table, measure_gpu_peaks
            print(gpu_peaks_table(_measure_gpu_peaks_kept(measure_gpu_peaks, args.device)))
        elif args.gpu_only:
            print("no CUDA device: nothing to measure", file=sys.stderr)
            return 1
    return rc


def _measure_gpu_peaks_kept(measure_gpu_peaks: Any, device: int) -> Dict[str, Any]:
    """measure_gpu_peaks writes its cache as it finishes: with an unwritable cache directory,
    measure into a temporary one so the numbers are printed, and say they were not kept."""
    import tempfile
    from ..roofline.peaks import peaks_cache_path
    cache_dir = os.path.dirname(peaks_cache_path())
    try:
        os.makedirs(cache_dir, exist_ok=True)
        writable = os.access(cache_dir, os.W_OK)
    except OSError:
        writable = False
    if writable:
        return measure_gpu_peaks(device=device)
    print(f"kbench peaks: warning: cannot write the cache directory {cache_dir}: the GPU "
          f"ceilings are printed but not saved; set KBENCH_CACHE_DIR to a writable directory",
          file=sys.stderr)
    old = os.environ.get("KBENCH_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KBENCH_CACHE_DIR"] = tmp
        try:
            return measure_gpu_peaks(device=device)
        finally:
            if old is None:
                os.environ.pop("KBENCH_CACHE_DIR", None)
            else:
                os.environ["KBENCH_CACHE_DIR"] = old


def cmd_info(args: argparse.Namespace) -> int:
    from .. import _core
    from ..provenance.metadata import collect_host_metadata
    md = collect_host_metadata()
    timer = _core.host_timer_info(lambda: None, calls=20000)
    caches = _core.cpu_cache_info()
    from .._build import build_info, describe_build
    info: Dict[str, Any] = {"host": md, "host_timer": timer, "cpu_caches": caches,
                            "cuda_backend_built": bool(_core.HAVE_CUDA),
                            "cuda_headers_version": _core.CUDA_HEADERS_VERSION,
                            "build": build_info()}
    if _core.HAVE_CUDA:
        info["gpu_libraries"] = _core.gpu_library_status()
        try:
            count = _core.cuda_device_count()
            info["cuda_devices"] = [_core.cuda_device_info(i) for i in range(count)]
        except _core.KbenchError as e:
            info["cuda_devices"] = f"unavailable: {e}"
    from ..backends.hip import describe_status, status as hip_status
    info["hip"] = hip_status()
    info["backends"] = _backends(info, timer)
    if args.json:
        print(json.dumps(info, indent=1, default=str))
        return 0
    print(f"kbench {md.get('kbench_version')}  python {md.get('python_version')}  "
          f"numpy {md.get('numpy_version')}")
    vm = ", under a hypervisor (a VM)" if md.get("cpu_hypervisor") else ""
    print(f"CPU: {md.get('cpu_model')}, {md.get('cpu_count')} logical cores{vm}")
    # the levels are one CPU's; the last level is the largest among the CPUs this process may
    # run on, from the source named (sysconf: glibc's figure, as sysfs had no size)
    of_cpu = "" if caches.get("levels_cpu") is None else f" (cpu{caches['levels_cpu']})"
    llc_from = caches["source"] + ("" if caches.get("llc_cpu") is None else
                                   f", cpu{caches['llc_cpu']}: the largest of the "
                                   f"{len(caches.get('cpus', ()))} CPUs this process may use")
    llc = fmt_bytes(caches["llc_bytes"]) if caches["llc_bytes"] else "unknown"
    print(f"caches{of_cpu}: " + ", ".join(f"L{c['level']} {c['type']} {fmt_bytes(c['bytes'])}"
                                          for c in caches["levels"])
          + f"; last level {llc} ({llc_from})")
    print(f"host timer: {timer['clock']}, reads in {timer['resolution_ns']} ns steps (smallest "
          f"move between reads {timer['min_move_ns']} ns), read {timer['read_cost_ns']:.1f} ns, "
          f"per-sample overhead around an empty call {timer['call_overhead_min_ns']} ns (min) / "
          f"{timer['call_overhead_mean_ns']:.0f} ns (mean)")
    print(describe_build())
    print("backends:")
    for name, b in info["backends"].items():
        print(f"  {name:5s} {'present' if b['present'] else 'absent'}: {b['why']}")
    print("\n".join(describe_status(info["hip"])))
    if _core.HAVE_CUDA:
        print("\n".join(_describe_cuda(info)))
    return 0


def _first_line(error: Any) -> str:
    """An error's first line, without the loader's trailing "Tried:" (the paths follow it)."""
    head = (str(error).strip().splitlines() or [""])[0].strip()
    return head[:-len("Tried:")].rstrip().rstrip(".") if head.endswith("Tried:") else head


def _backends(info: Dict[str, Any], timer: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """One entry per backend: whether it can time here, and why (kbench info's summary)."""
    out = {"host": {"present": True, "why": f"the CPU, timed with {timer['clock']}"}}
    devs = info.get("cuda_devices")
    if not info["cuda_backend_built"]:
        out["cuda"] = {"present": False, "why": "not built (KBENCH_NO_CUDA=1)"}
    elif isinstance(devs, list) and devs:
        names = sorted({str(d.get("name")) for d in devs})
        out["cuda"] = {"present": True, "why": f"{len(devs)} device(s): {', '.join(names)}"}
    else:
        why = "the CUDA driver reports no devices" if isinstance(devs, list) else \
            _first_line(str(devs).removeprefix("unavailable: "))
        out["cuda"] = {"present": False, "why": why}
    hip = info["hip"]
    if not hip.get("built"):
        out["hip"] = {"present": False, "why": f"not built ({hip.get('why')})"}
    elif hip.get("devices"):
        out["hip"] = {"present": True, "why": f"{hip['devices']} AMD GPU(s)"}
    else:
        out["hip"] = {"present": False, "why": _first_line(hip.get("why_no_devices") or
                                                           "the HIP runtime reports no devices")}
    return out


def _describe_cuda(info: Dict[str, Any]) -> List[str]:
    """The CUDA section: one line per library and the devices; each piece of advice once, at
    the end (libcuda, NVML and the device query all said "Install the NVIDIA driver")."""
    from .. import _core
    from .._build import _version
    lines = [f"CUDA backend: built against CUDA headers {_version(_core.CUDA_HEADERS_VERSION)}"]
    advice: List[str] = []
    for lib, st in info["gpu_libraries"].items():
        head, *more = library_status(st).splitlines()
        lines.append(f"  {lib:6s} {'found' if st.get('loaded') else 'missing'}: {head}")
        advice += [a.strip() for a in more if a.strip() not in advice]
    devs = info.get("cuda_devices")
    if isinstance(devs, list):
        for i, d in enumerate(devs):
            lines.append(f"  cuda:{i} {d.get('name')}  SMs {d.get('sm_count')}  L2 "
                         f"{fmt_bytes(d.get('l2_bytes'))}  memory "
                         f"{fmt_bytes(d.get('total_memory_bytes'))}  "
                         f"driver {d.get('driver_version')}")
    else:
        # the paths tried are on the library's line above; the advice comes once, below
        lines.append(f"  devices: {_first_line(devs)}")
        _, *more = library_status({"error": str(devs)}).splitlines()
        advice += [a.strip() for a in more if a.strip() not in advice]
    return lines + [f"  to fix: {a}" for a in advice]


def cmd_compare(args: argparse.Namespace) -> int:
    from .cli_compare import compare_sets, load_results
    try:
        old, new = load_results(args.old), load_results(args.new)
    except (OSError, ValueError) as e:      # the messages name the file and the problem
        raise CliError(str(e).removeprefix("kbench compare: ")) from None
    cmp = compare_sets(old, new, args.fail or 0.0, old_label="old", new_label="new",
                       mem_threshold=args.fail_mem)
    print(cmp)
    # a gate that compared nothing (a baseline of other benchmarks) has not passed
    time_failed = args.fail is not None and (not cmp.compared or any(
        d.verdict in ("slower", "invalid") for d in cmp.deltas))
    return 1 if (time_failed or cmp.memory_regressions) else 0


def _threshold(text: str) -> float:
    """--fail as the pytest plugin's --kbench-fail reads it: '8%' or '0.08'; '8' and '1' are
    refused."""
    from .cli_compare import parse_threshold
    try:
        return parse_threshold(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seconds(text: str) -> float:
    """A time budget: positive and finite, at most a day (kbench.bench's cap on max_time_s)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    from ..options import max_time_cap
    cap = max_time_cap()
    if not (0 < value <= cap):          # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 and <= {cap:g}, "
                                         f"got {text!r}")
    return value


def _device(text: str) -> int:
    """A CUDA device as a number (0) or as kbench.bench spells it (cuda:0)."""
    digits = text[len("cuda:"):] if text.startswith("cuda:") else text
    try:
        value = int(digits)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a CUDA device, 0 or cuda:0, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the problem, exit 2 (as CliError's), not the usage."""

    def error(self, message: str):
        if message.endswith("required: COMMAND"):      # kbench alone: name the commands
            message = "a command is required: one of demo, peaks, info, compare"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .._version import __version__
    p = _Parser(prog="kbench", description="trustworthy kernel microbenchmarks")
    p.add_argument("--version", action="version", version=f"kbench {__version__}")
    # metavar: a missing command reads "required: COMMAND" and the usage lists the commands
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                           title="commands (kbench COMMAND -h for its options)")
    d = sub.add_parser("demo", help="benchmark memory- and compute-bound ops hot and cold")
    d.add_argument("--seconds", type=_seconds, default=2.0, help="time cap per case (s)")
    d.add_argument("--peak-seconds", type=_seconds, default=3.0,
                   help="time per ceiling when no measured ceilings are cached yet (s)")
    d.add_argument("--json", help="also write the results to this JSON file")
    d.add_argument("--no-gpu", dest="gpu", action="store_false", default=None,
                   help="CPU cases only, even where a CUDA GPU and PyTorch are present")
    d.set_defaults(func=cmd_demo)
    pk = sub.add_parser("peaks", help="measure this machine's memory and compute ceilings")
    pk.add_argument("--seconds", type=_seconds, default=5.0,
                    help="time per CPU ceiling (s)")
    pk.add_argument("--device", type=_device, default=0, help="the CUDA device to measure: 0 or cuda:0")
    only = pk.add_mutually_exclusive_group()
    only.add_argument("--cpu-only", action="store_true", help="measure the CPU's ceilings only")
    only.add_argument("--gpu-only", action="store_true", help="measure the GPU's ceilings only")
    pk.add_argument("--replace", action="store_true",
                    help="store the new CPU ceilings even when the cached ones are much higher "
                         "(by default a much higher cached ceiling is kept: a busy machine "
                         "measures low). A measurement taken on a busy machine, or whose "
                         "repeats disagree, is never stored: kbench peaks exits 1")
    pk.set_defaults(func=cmd_peaks)
    i = sub.add_parser("info", help="machine, caches, timer, GPU libraries found")
    i.add_argument("--json", action="store_true", help="print everything as one JSON object")
    i.set_defaults(func=cmd_info)
    c = sub.add_parser("compare", help="deltas between two saved result files, with verdicts")
    c.add_argument("old", help="a saved result, session (--kbench-save), sweep or A/B file")
    c.add_argument("new", help="the same kinds; benchmarks pair up by name (a case, an arm)")
    c.add_argument("--fail", type=_threshold, default=None, metavar="THRESHOLD",
                   help="exit 1 when a benchmark is slower by more than this (8%% or 0.08; a "
                        "bare 8 or 1 is refused as ambiguous), has an invalid median, or when "
                        "no benchmark could be compared; without it, only report")
    c.add_argument("--fail-mem", type=_threshold, default=None, metavar="THRESHOLD",
                   help="exit 1 when a benchmark's peak memory of one call (Result.memory) grew "
                        "by more than this (10%% or 0.1); without it, only report")
    c.set_defaults(func=cmd_compare)
    args = p.parse_args(_joined_thresholds(sys.argv[1:] if argv is None else list(argv)))
    if getattr(args, "cmd", None) == "demo" and args.gpu is None:
        from ..backends import cuda
        args.gpu = cuda.available()
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
        return rc
    except CliError as e:
        print(f"kbench {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (kbench info --json | head): stop quietly, as SIGPIPE would
        _stdout_to_devnull()
        return 128 + 13
    except KeyboardInterrupt:
        _stdout_to_devnull()
        print(f"kbench {args.cmd}: interrupted", file=sys.stderr)
        return 128 + 2          # as a shell reports SIGINT; not 1, the regression code
    except OSError as e:
        # the output could not be written (kbench compare a b > /dev/full): one line, exit 2,
        # not a traceback and 1, which reads as a regression
        _stdout_to_devnull()
        print(f"kbench {args.cmd}: error: {e.strerror or e}", file=sys.stderr)
        return 2


def _stdout_to_devnull() -> None:
    """Point stdout at devnull so the flush at exit does not raise again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _joined_thresholds(argv: List[str]) -> List[str]:
    """'--fail -1%' as '--fail=-1%': argparse reads a value starting with '-' as an option and
    says "expected one argument"; joined, the threshold check names the bad value."""
    out: List[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--fail", "--fail-mem"):
            nxt = next(it, None)
            if nxt is not None and nxt.startswith("-") and nxt[1:2].isdigit() or \
                    nxt is not None and nxt.startswith("-."):
                out.append(f"{a}={nxt}")
                continue
            out.append(a)
            if nxt is not None:
                out.append(nxt)
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())
