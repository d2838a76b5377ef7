"""The HIP side of kbench.bench: AMD GPUs through ROCm's HIP runtime.

A ROCm build of PyTorch (``torch.version.hip`` set) calls its GPUs "cuda" and its streams
torch.cuda streams; they are HIP devices and hipStream_t handles, and kbench.bench picks this
backend for them. ``kbench.bench(..., backend="hip")`` forces it (with ``KBENCH_HIP_LIBRARY``
naming the HIP-on-CUDA forwarder of tests/hip_forward/, that is how kbench's HIP path runs on an
NVIDIA GPU; such figures are not AMD figures).

Timing: the callable is captured into HIP graphs (kbench._core.hip_graph_capture: one graph per
rotation chunk, so every replay is pointer-distinct), and the C core times each replay with HIP
events in the shared loop (kbench._core.measure_hip), behind a device gate on
hipStreamWaitValue32 where the runtime has it. Cold caches: "rotate" cycles argument sets whose
footprint exceeds the last-level cache (on MI300 the 256 MB Infinity Cache, see
:data:`LLC_TABLE`), "flush" memsets a buffer twice that size before each replay, outside the
timed interval. There is no CUPTI on HIP: no per-kernel attribution, and the result says so.

Multi-GPU on ROCm: torch.distributed's backend name stays "nccl" (RCCL underneath). Capturing
RCCL collectives in HIP graphs trips the NCCL watchdog unless ``TORCH_NCCL_BLOCKING_WAIT=1`` is
set before torch is imported (:func:`rccl_capture_warning`).
"""
from __future__ import annotations

import math
import numbers
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import _core
from ..report._format import library_status     # kbench info's wording: no dangling "Tried:"
from ..roofline.ceilings import hip_ceilings
from ..measure.coldcache import flag_rotation_sets, make_rotation_sets, shares_memory
from ..measure.prepare import device_ordinal, poison_gpu

BACKENDS = ("auto", "cuda", "hip")
NO_ATTRIBUTION = ("no per-kernel attribution on HIP (there is no CUPTI): each sample is the "
                  "HIP-event time of one graph replay divided by the calls captured in it")
FORWARDER_NOTE = ("KBENCH_HIP_LIBRARY is set: the HIP runtime is the library it names (a test "
                  "setting); with the HIP-on-CUDA forwarder these are NVIDIA figures taken "
                  "through kbench's HIP code path, not AMD figures")

#: Last-level cache by device name, for what HIP's attributes do not report: the MI300 Infinity
#: Cache (MALL) has no hipDeviceAttribute, and the L2 attribute alone would size a rotation
#: that never leaves the Infinity Cache. First match wins; the larger of this and the L2
#: attribute is used. (substring of hipDeviceGetName, bytes, what it is)
LLC_TABLE: Tuple[Tuple[str, int, str], ...] = (
    ("MI355", 256 << 20, "256 MB Infinity Cache (MI355X)"),
    ("MI350", 256 << 20, "256 MB Infinity Cache (MI350X)"),
    ("MI325", 256 << 20, "256 MB Infinity Cache (MI325X)"),
    ("MI300", 256 << 20, "256 MB Infinity Cache (MI300X / MI300A)"),
    ("MI250", 8 << 20, "8 MB L2 per GCD (MI250 / MI250X: no Infinity Cache)"),
    ("MI210", 8 << 20, "8 MB L2 (MI210)"),
    ("MI100", 8 << 20, "8 MB L2 (MI100)"),
    ("RX 7900", 96 << 20, "96 MB Infinity Cache (Radeon RX 7900 XTX / XT)"),
    ("W7900", 96 << 20, "96 MB Infinity Cache (Radeon PRO W7900)"),
)

# what kbench.bench passes through to this backend (kbench.measure.local checks a call's options
# against it before anything calls fn). keep_busy and regime are CUDA's clock-regime options,
# taken so that kbench.distributed (which sets keep_busy=False, regime='burst' on a GPU) runs
# here too: HIP has no keep-busy bridges and no regimes, and the result says so when asked.
OPTIONS = ("stream", "gate", "gate_batch", "gate_timeout_s", "unroll", "rotate_margin",
           "capture_mode", "keep_busy", "regime")


def is_rocm_torch() -> bool:
    """True when the imported torch is a ROCm build (device "cuda" is then a HIP device)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and getattr(getattr(torch, "version", None), "hip", None))


def selected(backend_options: Dict[str, Any]) -> bool:
    """Whether kbench.bench's GPU case runs on this backend; pops ``backend`` from the options.
    "hip" forces it, "cuda" refuses it, "auto" (or absent) picks it under a ROCm torch."""
    backend = backend_options.pop("backend", None) or "auto"
    if backend not in BACKENDS:
        raise ValueError(f"kbench.bench: backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return is_rocm_torch()
    return backend == "hip"


def last_level_cache(info: Dict[str, Any]) -> Tuple[int, str]:
    """(bytes, what it is): the larger of the L2 attribute and the table entry for the name."""
    l2 = int(info.get("l2_bytes") or 0)
    name = str(info.get("name") or "")
    for key, size, what in LLC_TABLE:
        if key.lower() in name.lower() and size > l2:
            return size, what + " (kbench.backends.hip.LLC_TABLE)"
    if l2 > 0:
        return l2, "GPU L2 (hipDeviceAttributeL2CacheSize)"
    return 0, "unknown: hipDeviceAttributeL2CacheSize gave nothing and the name is not in the table"


def rccl_capture_warning() -> Optional[str]:
    """Why capturing RCCL collectives in HIP graphs would trip the NCCL watchdog here, or None."""
    if not is_rocm_torch() or os.environ.get("TORCH_NCCL_BLOCKING_WAIT") == "1":
        return None
    return ("a ROCm torch is imported without TORCH_NCCL_BLOCKING_WAIT=1: capturing RCCL "
            "collectives (backend name 'nccl') in HIP graphs trips the NCCL watchdog; set it "
            "in the environment before torch is imported")


def status() -> Dict[str, Any]:
    """For `kbench info`: the HIP and ROCm SMI libraries, as far as they were tried."""
    if not getattr(_core, "HAVE_HIP", 0):
        return {"built": False, "why": "this kbench was built with KBENCH_NO_CUDA=1 (CPU only)"}
    st: Dict[str, Any] = {"built": True, "libraries": dict(_core.hip_library_status()),
                          "attribution": NO_ATTRIBUTION}
    try:
        st["devices"] = _core.hip_device_count()
    except _core.KbenchError as e:   # LibraryNotFound, HipError: a status, not a failure
        st["devices"] = 0
        st["why_no_devices"] = _no_gpu_message(e)
    st["libraries"] = dict(_core.hip_library_status())
    if os.environ.get("KBENCH_HIP_LIBRARY"):
        st["note"] = FORWARDER_NOTE
    return st


def _no_gpu_message(e: BaseException) -> str:
    code = getattr(e, "name", "")
    if code in ("hipErrorNoDevice", "hipErrorInvalidDevice"):
        return f"no AMD GPU is visible to the HIP runtime ({e})"
    return str(e)


def device_info(ordinal: int) -> Dict[str, Any]:
    """_core.hip_device_info, with a clear error when there is no AMD GPU."""
    if not getattr(_core, "HAVE_HIP", 0):
        raise _core.LibraryNotFound("this kbench was built without GPU backends "
                                    "(KBENCH_NO_CUDA=1): rebuild without it for HIP")
    try:
        return dict(_core.hip_device_info(ordinal))
    except _core.KbenchError as e:
        if getattr(e, "name", "") in ("hipErrorNoDevice", "hipErrorInvalidDevice"):
            raise _core.HipError(f"kbench's HIP backend needs an AMD GPU, and the HIP runtime "
                                 f"sees none: {e}") from e
        raise


def _torch_for(sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any]) -> Any:
    """torch, when the callable runs through it (tensor arguments, or torch has a GPU context)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    values = list(sets[0]) + list(kwargs.values())
    if any(isinstance(a, torch.Tensor) for a in values) or torch.cuda.is_initialized():
        return torch
    return None


def _eager_estimate(fn: Callable[..., Any], sets, kwargs, torch: Any, side: Any,
                    loop: Dict[str, Any]) -> float:
    """Seconds per call, roughly (host clock around synchronized calls): sizes the unroll.
    Under kbench.distributed (loop's ranks and pre_sample) every call follows its barrier, and
    the figure is the slowest rank's: every rank must capture the same calls per graph."""
    n = 5
    pre_sample, ranks = loop.get("pre_sample"), loop.get("ranks")
    side.synchronize()
    t0 = time.perf_counter()
    with torch.cuda.stream(side):
        for i in range(n):
            if pre_sample is not None:
                pre_sample()
            fn(*sets[i % len(sets)], **kwargs)
    side.synchronize()
    t = (time.perf_counter() - t0) / n
    if ranks is not None:
        t = float(ranks.reduce("hip unroll estimate", 0, np.array([t]), np.zeros(0))[0][0])
    return t


def _capture(fn, sets, kwargs, unroll: int, n_graphs: int, stream: int, ordinal: int,
             torch: Any, side: Any, given: Dict[str, Any]) -> List[Any]:
    """given: capture_mode when the caller named one (its default is hip_graph_capture's)."""
    graphs = []
    for gi in range(n_graphs):
        chunk = tuple(sets[(gi * unroll + u) % len(sets)] for u in range(unroll))
        if side is not None:
            with torch.cuda.stream(side):
                g = _core.hip_graph_capture(fn, chunk, kwargs or None, stream=stream,
                                            device=ordinal, **given)
        else:
            g = _core.hip_graph_capture(fn, chunk, kwargs or None, stream=stream, device=ordinal,
                                        **given)
        graphs.append(g)
    return graphs


def _clocks(index: int) -> Dict[str, Any]:
    """ROCm SMI's readings of its device `index` (see :func:`smi_device`)."""
    try:
        return {"available": True, **dict(_core.rocm_smi_snapshot(index))}
    except (_core.KbenchError, ValueError) as e:
        return {"available": False, "why": str(e).splitlines()[0].removesuffix(" Tried:")}


def _pci(bus_id: Any) -> Optional[Tuple[int, int, int, int]]:
    """'domain:bus:device.function' (hex, any case or width) as numbers; None if not one."""
    try:
        domain, bus, rest = str(bus_id).split(":")
        dev, fn = rest.split(".")
        return int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16)
    except ValueError:
        return None


_smi_devices: Dict[Tuple[int, str], Dict[str, Any]] = {}


def smi_device(info: Dict[str, Any], ordinal: int) -> Dict[str, Any]:
    """Which ROCm SMI device HIP device `ordinal` is: {"index", "matched_by"}, or, where that
    cannot be found, {"index": ordinal, "assumed": why}. ROCm SMI indexes every GPU of the
    machine, HIP only those HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES leave it, so the two
    indices differ under those settings: the device is found by its PCI bus id (HIP's
    hipDeviceGetPCIBusId, ROCm SMI's rsmi_dev_pci_id_get). Found once per process."""
    key = (ordinal, str(info.get("pci_bus_id")))
    if key not in _smi_devices:
        want = _pci(info.get("pci_bus_id"))
        try:
            found = _smi_search(want, ordinal) if want is not None else \
                "the HIP runtime gave no PCI bus id"
        except (_core.KbenchError, ValueError) as e:    # no ROCm SMI: _clocks says why too
            return _assumed(ordinal, str(e).splitlines()[0].removesuffix(" Tried:"))
        _smi_devices[key] = found if isinstance(found, dict) else _assumed(ordinal, found)
    return dict(_smi_devices[key])


def _assumed(ordinal: int, why: str) -> Dict[str, Any]:
    return {"index": ordinal,
            "assumed": f"ROCm SMI device {ordinal} is taken to be HIP device {ordinal} ({why}); "
                       f"under HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES they can differ"}


def _smi_search(want: Tuple[int, int, int, int], ordinal: int):
    """The ROCm SMI device with PCI bus id `want` ({"index", "matched_by"}), or why not (str)."""
    first = dict(_core.rocm_smi_snapshot(0))
    bus = "%04x:%02x:%02x.%x" % want
    matches = []
    for i in range(int(first.get("devices") or 1)):
        got = _pci((first if i == 0 else _core.rocm_smi_snapshot(i)).get("pci_bus_id"))
        if got is None:
            return "ROCm SMI gave no PCI id (rsmi_dev_pci_id_get)"
        if got == want:
            matches.append(i)
    if not matches:
        return f"no ROCm SMI device has PCI bus id {bus}"
    index = ordinal if ordinal in matches else matches[0]
    shared = (f", shared by ROCm SMI devices {matches} (partitions of one GPU: its readings)"
              if len(matches) > 1 else "")
    return {"index": index, "matched_by": f"PCI bus id {bus}{shared}"}


def _clock_summary(clocks: Dict[str, Any]) -> str:
    b, a = clocks["before"], clocks["after"]
    if not b.get("available"):
        return f"no clock readings: {b.get('why')}"
    smi = clocks.get("rocm_smi_device") or {}
    where = f" ({smi['assumed']})" if smi.get("assumed") else ""

    def fmt(d: Dict[str, Any]) -> str:
        parts = [f"{d[k]:.0f} {unit}" for k, unit in (("sclk_mhz", "MHz"), ("power_w", "W"),
                                                      ("temp_c", "C")) if d.get(k) is not None]
        return ", ".join(parts) or "no readings"
    return (f"ROCm SMI before: {fmt(b)}; after: {fmt(a) if a.get('available') else a.get('why')}"
            f"{where}")


def _given(opts: Dict[str, Any], **names: str) -> Dict[str, Any]:
    """{parameter: opts[option]} for the options the caller gave: a default is written once,
    where the option is taken (measure_hip, hip_graph_capture, make_rotation_sets), which also
    checks the value. None is "not given" (the default applies), as on CUDA."""
    return {param: opts[option] for param, option in names.items()
            if opts.get(option) is not None}


def _options(backend_options: Dict[str, Any], warn: List[str]) -> Dict[str, Any]:
    """The backend's options, checked where Python uses them (unroll, keep_busy, regime);
    the rest are checked where they are taken (C)."""
    unknown = sorted(set(backend_options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"kbench.bench: unexpected options for the HIP backend: {unknown} "
                        f"(it takes {list(OPTIONS)})")
    opts = dict(backend_options)
    unroll = opts.get("unroll")
    if unroll is not None:
        if isinstance(unroll, (bool, np.bool_)) or not isinstance(unroll, numbers.Integral):
            raise TypeError(f"kbench.bench: unroll must be an int (the calls captured per HIP "
                            f"graph replay), got {type(unroll).__name__} ({unroll!r:.60})")
        if unroll < 1:
            raise ValueError(f"kbench.bench: unroll must be >= 1, got {unroll}")
        opts["unroll"] = int(unroll)
    regime = opts.get("regime")
    if regime not in (None, "sustained", "burst"):
        raise ValueError(f"regime must be 'sustained' or 'burst', got {regime!r}")
    if regime is not None:
        warn.append(f"regime={regime!r} is not applied: the HIP backend has no clock regimes "
                    f"(no keep-busy bridges, no settling, no recovery waits between batches)")
    if opts.get("keep_busy"):
        warn.append("keep_busy=True is not applied: the HIP backend has no keep-busy bridges "
                    "(the GPU idles while the host reads each batch)")
    return opts


def run(fn: Callable[..., Any], sets: List[Tuple[Any, ...]], kwargs: Dict[str, Any], *,
        plan: Any, flush_bytes: Optional[int], device: str, loop: Dict[str, Any],
        check: Any = None, rtol=None, atol=None,
        output: Any = None, **backend_options: Any):
    """kbench.bench's GPU case on HIP, as plan (kbench.bench's, _core.plan) says: graph
    replays read by HIP events, whatever mode was given. (raw, cold, extra, device name,
    peaks)"""
    warn: List[str] = [f"note: {NO_ATTRIBUTION}"]     # said in the result, as the issue asks
    opts = _options(backend_options, warn)
    ordinal = device_ordinal(device)    # a ROCm torch answers through torch.cuda too
    info = device_info(ordinal)
    llc, llc_what = last_level_cache(info)
    torch = _torch_for(sets, kwargs)
    # side: the torch stream the callable's work goes to (made current around its calls)
    stream, side = opts.get("stream"), None
    if torch is not None and stream is None:
        side = torch.cuda.Stream(device=ordinal)
        stream = int(side.cuda_stream)
    elif stream is not None and not isinstance(stream, int):
        side = stream if torch is not None else None
        stream = int(getattr(stream, "cuda_stream", getattr(stream, "ptr", 0)))
    elif torch is not None and stream:
        side = torch.cuda.ExternalStream(stream, device=ordinal)
    if not stream:
        raise ValueError("the HIP backend captures graphs, which needs a non-default stream: "
                         "pass stream= (a hipStream_t handle or a torch stream), or torch "
                         "tensors as arguments")
    if os.environ.get("KBENCH_HIP_LIBRARY"):
        warn.append(FORWARDER_NOTE)
    if (why := rccl_capture_warning()) and sys.modules.get("torch.distributed") is not None:
        warn.append(why)

    # with the cache size unknown, kbench cannot size a flush or a rotation itself; the caller's
    # flush_bytes= or arg_sets= are used as given (and not judged against the cache)
    sized = flush_bytes if plan.flush else len(sets) > 1
    if plan.cold is not None and llc <= 0 and not sized:
        raise ValueError(f"cold_cache={plan.cold!r} needs the last-level cache size, and it is "
                         f"unknown for {info.get('name')!r} (no L2 attribute, not in "
                         f"kbench.backends.hip.LLC_TABLE): pass flush_bytes= with "
                         f"cold_cache='flush', or arg_sets= with cold_cache='rotate'")
    cold = {"mode": plan.cold or "none", "cache": llc_what, "cache_bytes": llc}
    if plan.rotate and len(sets) == 1:
        sets = make_rotation_sets(sets[0], llc, **_given(opts, margin="rotate_margin"),
                                  max_bytes=int(info.get("free_memory_bytes", 0) * 0.5) or 0)
    if plan.rotate:
        flag_rotation_sets(cold, sets, llc, warn, kwargs)
    if plan.cold is not None and llc <= 0:
        cold["evicts"] = None
        given = f"flush_bytes={flush_bytes}" if plan.flush else \
            f"the {len(sets)} arg_sets"
        warn.append(f"the last-level cache size is unknown: {given} used as given, not "
                    f"checked against it (cold_cache={plan.cold!r} may not be cold)")

    # the capture stream must see what the caller's stream queued (the rotation's clones)
    if torch is not None and side is not None:
        side.wait_stream(torch.cuda.current_stream(ordinal))
    # warm-up on the capture stream, so the allocator holds the blocks the capture will use
    eager_t = _eager_estimate(fn, sets, kwargs, torch, side, loop) if side is not None else 0.0
    unroll = opts.get("unroll")
    if plan.flush:
        if unroll not in (None, 1):
            raise ValueError(f"cold_cache='flush' times one call per replay (the flush runs "
                             f"between replays); got unroll={unroll}")
        unroll = 1
    if unroll is None:
        unroll = int(min(100, max(1, math.ceil(20e-6 / max(eager_t, 1e-9))))) if eager_t else 1
    # Every argument set is replayed, under any cold_cache, as kbench/backends/cuda.py does: a
    # graph per
    # unroll sets, cycled (one graph once replayed only the first sets of an arg_sets run)
    n_graphs = max(1, math.ceil(len(sets) / unroll))
    graphs = _capture(fn, sets, kwargs, unroll, n_graphs, stream, ordinal, torch, side,
                      _given(opts, capture_mode="capture_mode"))
    outs = [o for g in graphs for o in g.outputs]
    last_out = outs[-1]
    out_kw = output if output is not None else kwargs.get("out")
    poisoned = last_out if last_out is not None else out_kw
    if check is None:
        poisoned = None                 # nothing to re-check: the caller's data left alone
    if poisoned is not None and torch is not None and side is not None:
        with torch.cuda.stream(side):   # queued before the replays, on their stream
            poison_gpu(poisoned)
    elif poisoned is not None:
        poison_gpu(poisoned)

    fbytes = int(flush_bytes or 2 * llc) if plan.flush else 0
    smi = smi_device(info, ordinal)
    clocks_before = _clocks(smi["index"])
    raw = _core.measure_hip(tuple(graphs), stream=stream, device=ordinal, plan=plan,
                            flush_bytes=fbytes,
                            unroll=float(unroll), **loop,
                            **_given(opts, gate="gate", gate_batch="gate_batch",
                                     gate_timeout_s="gate_timeout_s"))
    hip = raw["hip"]
    if plan.flush:
        cold["flush_bytes"] = hip["flush_bytes"]
    if not hip["gate"]["gated"]:
        warn.append(f"ungated: {hip['gate']['why_not']}")
    if hip["gate"]["watchdog_fired"]:
        warn.append(f"the gate's watchdog fired {hip['gate']['watchdog_fired']} time(s): "
                    f"batches shrank to {hip['gate']['batch_final']}")

    extra: Dict[str, Any] = {"mode": plan.measurement, "timer": f"hip-{plan.timer}",
                             "stream": stream,
                             "unroll": unroll, "eager_estimate_s": eager_t or None,
                             "attribution": NO_ATTRIBUTION, "hip": hip,
                             "graph": {"captured_with": "kbench (hipStreamBeginCapture)",
                                       "graphs": n_graphs}}
    if check is not None:
        _check_after(outs, out_kw, sets, (n_graphs - 1) * unroll + unroll - 1, check, rtol,
                     atol, side, extra)
    extra["clocks"] = {"before": clocks_before, "after": _clocks(smi["index"]),
                       "source": "ROCm SMI (librocm_smi64), one reading before and after",
                       "rocm_smi_device": smi}
    extra["clocks"]["summary"] = _clock_summary(extra["clocks"])
    extra["device"] = dict(info, llc_bytes=llc, llc=llc_what, backend="hip")
    extra["warnings"] = warn
    # no measured HIP ceilings (`kbench peaks` is CUDA's): the datasheet's, for the inferred
    # precision (kbench.roofline.ceilings)
    peaks = hip_ceilings(info, fn, sets[0], kwargs, out_kw, extra)
    return raw, cold, extra, str(info.get("name") or f"HIP device {ordinal}"), peaks


def _check_after(outs: List[Any], out_kw: Any, sets: List[Tuple[Any, ...]], last_call: int,
                 check: Any, rtol: Any, atol: Any, side: Any, extra: Dict[str, Any]) -> None:
    """Compare the output the replays left with check's reference for the argument set that
    wrote it (the last captured call's: sets[last_call % len(sets)]). Skipped, as
    kbench/backends/cuda.py skips it, where that cannot be known or the reference is not that
    set's: one output every set writes (an out= or a returned buffer shared by the calls) with
    several sets, or a fixed reference (check= an array, sets[0]'s) while the last call used
    another set."""
    last_out = outs[-1]
    post = last_out if last_out is not None else out_kw
    if post is None:
        return
    post_set = last_call % len(sets) if last_out is not None else 0
    shared = last_out is None or any(o is not None and shares_memory(o, last_out)
                                     for o in outs[:-1])
    if shared and len(sets) > 1 or not callable(check) and post_set != 0:
        extra["post_check"] = {"skipped": f"{len(sets)} argument sets write one output, or the "
                                          f"reference is the first set's: the check before "
                                          f"timing stands"}
        return
    if side is not None:
        side.synchronize()
    from ..correctness.compare import compare
    ref = check(*sets[post_set]) if callable(check) else check
    cmp = compare(post, ref, rtol=rtol, atol=atol)
    extra["post_check"] = {"ok": cmp.ok, "max_abs_err": cmp.max_abs_err}
    if not cmp.ok:
        raise AssertionError("kbench: the output after the HIP graph replays does not match "
                             f"the reference:\n{cmp.report()}")


def describe_status(st: Dict[str, Any]) -> List[str]:
    """`kbench info`'s lines for :func:`status`."""
    if not st.get("built"):
        return [f"HIP backend: not built ({st.get('why')})"]
    lines = ["HIP backend: built (no HIP header needed); " + NO_ATTRIBUTION]
    for lib, s in st.get("libraries", {}).items():
        where = s.get("path") or ""
        if s.get("from_process"):
            where += " (the copy already in the process)"
        if s.get("requested_by"):
            where += f" (chosen by {s['requested_by']})"
        if s.get("state") == "loaded":
            text = where
        else:
            text = library_status({"error": s["error"]}) if s.get("error") else ""
        head, *advice = text.splitlines() or [""]
        lines.append(f"  {lib:8s} {s.get('state')}: {head}".rstrip(": "))
        lines += advice
    if st.get("devices"):
        lines.append(f"  HIP devices: {st['devices']}")
    elif st.get("why_no_devices"):
        # the library line above lists what was tried; here the first line, without "Tried:"
        why = st["why_no_devices"].splitlines()[0].strip()
        why = why[:-len("Tried:")].rstrip() if why.endswith("Tried:") else why
        lines.append(f"  HIP devices: none ({why.rstrip('.')})")
    if st.get("note"):
        lines.append(f"  note: {st['note']}")
    return lines
