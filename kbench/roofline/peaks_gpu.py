"""Measured GPU ceilings: HBM bandwidth (copy kernel), FMA rates (fp32, fp64) and a GEMM per
precision the GPU runs (PyTorch).

The copy and FMA kernels come from kernels/cuda/ and are compiled with NVRTC, so they need
neither PyTorch nor CuPy. The GEMM ceilings are the kernels developers trust, measured only when
PyTorch is installed: torch.matmul for fp64 (DGEMM: the fp64 tensor cores where the GPU has
them), fp32 with TF32 off, tf32, fp16 and bf16; torch._scaled_mm for fp8 (e4m3, and e5m2 against
e4m3: cuBLASLt has no e5m2 x e5m2 GEMM); torch._int_mm for int8. Shapes are 8192^3 (4096^3 for
fp64 where the GPU has no fp64 tensor cores: 1/64-rate DGEMMs of 8192^3 take a second), on random
non-zero data, timed by kbench.bench in the burst regime. A precision torch cannot run here is
recorded as absent with torch's reason; fp4 is not measured (block-scaled GEMMs need per-block
scales kbench does not build yet): absent, and the datasheet's figure stands beside it. The
fp32 ceiling is the higher of the FMA kernel and the fp32 GEMM (the best the GPU does).

Results are cached per GPU (by UUID) next to the CPU peaks (kbench.roofline.peaks reads the cache
back; kbench.roofline.ceilings picks a precision's ceiling from it). It measures by calling
kbench.bench, so it is a top-level action like the CLI: nothing below kbench.bench imports it.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from importlib import resources
from typing import Any, Callable, Dict, Optional, Tuple

from .. import _core
from ..bench import bench as _bench
from .ceilings import LABELS, PRECISIONS
from .peaks import GPU_SCHEMA, gpu_peaks_path, save_peaks

#: The GEMMs measured with torch, in order; fp32 here is the fp32 GEMM with TF32 off (the fp32
#: ceiling is the higher of it and the FMA kernel).
TORCH_GEMMS = ("fp64_tc", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8")
#: The GEMM's side: 8192^3 reaches the plateau of every precision's GEMM on an H100/H200.
GEMM_N = 8192
#: Not measured, and why.
NOT_MEASURED = {"fp4": "kbench does not measure fp4 GEMMs yet (torch's fp4 GEMMs are "
                       "block-scaled, and need Blackwell): the datasheet's figure stands"}


def _kernel_source(name: str) -> str:
    """kernels/cuda/<name>: package data in a wheel, the repository's folder in a checkout."""
    try:
        return resources.files("kbench.kernels").joinpath("cuda", name).read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(here, "kernels", "cuda", name)) as f:
            return f.read()


def measure_gpu_peaks(device: int = 0, copy_bytes: int = 2 << 30, save: bool = True,
                      max_time_s: float = 3.0, gemm_time_s: float = 2.0) -> Dict[str, Any]:
    """Measure and cache this GPU's ceilings: HBM copy, fp32 and fp64 FMA, and with PyTorch a
    GEMM per precision (gemm_time_s each). Takes about a minute with PyTorch.

    Returns {"schema": GPU_SCHEMA, "device", "uuid", "measured_at", "hbm_bytes_per_s",
    "<precision>_flops_per_s" for each precision measured (kbench.roofline.ceilings.PRECISIONS;
    int8 in
    OP/s), "fp32_fma", "fp64_fma", "gemm": {precision: how it was measured}, "absent":
    {precision: why not measured}, "datasheet" (kbench.roofline.datasheet.lookup's entry or None),
    "regime", "source"}."""
    from ..backends import cuda
    from .datasheet import lookup
    info = cuda.device_info(device)
    stream = cuda.stream_handle(None, device)
    # Ceilings are the best the machine does: peak clocks (burst), not the clock a power cap
    # settles a sustained load at, or a burst figure would read over 100% of peak.
    opts = dict(device=f"cuda:{device}", cold_cache=None, stream=stream, max_time_s=max_time_s,
                warmup_s=0.5, floor=False, regime="burst")
    out: Dict[str, Any] = {"schema": GPU_SCHEMA, "device": info.get("name"),
                           "uuid": info.get("uuid"), "measured_at": time.time(),
                           "gemm": {}, "absent": dict(NOT_MEASURED)}

    out.update(_copy_ceiling(device, info, stream, copy_bytes, opts))
    for prec, kname, sig in (("fp32", "kb_fma", "Pi" "ff"), ("fp64", "kb_fma_f64", "Pi" "dd")):
        try:
            d = _fma_ceiling(device, info, stream, kname, sig, (0.999, 0.001), opts)
        except _core.KbenchError as e:
            if prec == "fp32":          # kbench's own ceiling since schema 1: no record without
                raise
            out["absent"][prec] = f"the {kname} kernel failed: {e}"
            continue
        out[f"{prec}_flops_per_s"] = d["flops"] / d["median_s"]
        out[f"{prec}_fma"] = d

    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        why = "PyTorch is not installed" if torch is None else "torch sees no CUDA device"
        for prec in TORCH_GEMMS:
            out["absent"].setdefault(prec, f"{why}: the GEMM ceilings are measured with torch")
    else:
        gemm_opts = dict(opts, stream=None, max_time_s=gemm_time_s)
        for prec in TORCH_GEMMS:
            rate, how = _torch_gemm(torch, device, prec, gemm_opts)
            if rate is None:
                out["absent"][prec] = how
                continue
            out["gemm"][prec] = how
            key = f"{prec}_flops_per_s"
            out[key] = max(out.get(key) or 0.0, rate)       # fp32: the FMA kernel's or this
    out["datasheet"] = lookup(info.get("name"))
    out["regime"] = "burst"
    out["source"] = f"kbench peaks on {info.get('name')}, burst regime ({gpu_peaks_path(info)})"
    if save:        # through a new file and a rename: a FIFO at the path would block open()
        save_peaks(out, gpu_peaks_path(info))
    return out


def _fma_ceiling(device: int, info: Dict[str, Any], stream: int, kname: str, sig: str,
                 args: Tuple[float, float], opts: Dict[str, Any]) -> Dict[str, Any]:
    """A register-resident FMA loop's rate (kernels/cuda/fma.cu), 8 blocks of 256 threads an
    SM, 8 independent chains a thread."""
    sms = int(info.get("sm_count") or 100)
    fma = _core.CudaKernel(_kernel_source("fma.cu"), kname, device=device)
    sink = _core.DeviceBuffer(8 * sms * 8 * 256, device)
    iters, fgrid = 8192, sms * 8
    flops = fgrid * 256 * iters * 8 * 2
    r = _bench(lambda: fma.launch(fgrid, 256, sig, (sink, iters, *args), stream=stream),
               flops=flops, name=kname, **opts)
    return {"flops": flops, "median_s": r.median, "backend": r.backend, "kernel": kname}


@contextlib.contextmanager
def _tf32(torch: Any, on: bool):
    """torch's fp32 matmuls as TF32 (on: precision 'high') or not ('highest'), the caller's
    setting restored after."""
    with warnings.catch_warnings():             # newer torch: the old API's deprecation notice
        warnings.simplefilter("ignore")
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if on else "highest")
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.set_float32_matmul_precision(before)


def _gemm_n(torch: Any, device: int, prec: str, bytes_per_elem: int) -> int:
    """GEMM_N, or 4096 for a DGEMM without fp64 tensor cores (sm_80, sm_90, sm_100 have them),
    halved while three n x n operands would take over half the free memory."""
    n = GEMM_N
    if prec == "fp64_tc" and torch.cuda.get_device_capability(device) not in \
            ((8, 0), (9, 0), (10, 0)):
        n = 4096
    free = torch.cuda.mem_get_info(device)[0]
    while n > 1024 and 3 * n * n * bytes_per_elem * 2 > free:
        n //= 2
    return n


def _gemm_case(torch: Any, device: int, prec: str) -> Tuple[Callable[[], Any], int, str, Any]:
    """(the GEMM to time, n, how, its tensors) for one precision; raises what torch raises
    where it cannot run it here."""
    dev = f"cuda:{device}"
    gen = torch.Generator(device=dev).manual_seed(0)
    if prec in ("fp64_tc", "fp32", "tf32", "fp16", "bf16"):
        dtype = {"fp64_tc": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
                 "fp16": torch.float16, "bf16": torch.bfloat16}[prec]
        n = _gemm_n(torch, device, prec, torch.empty((), dtype=dtype).element_size())
        a = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
        b = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
        c = torch.empty(n, n, device=dev, dtype=dtype)
        return (lambda: torch.matmul(a, b, out=c)), n, f"torch.matmul {dtype}", (a, b, c)
    if prec in ("fp8_e4m3", "fp8_e5m2"):
        e4m3 = getattr(torch, "float8_e4m3fn", None)
        e5m2 = getattr(torch, "float8_e5m2", None)
        if e4m3 is None or not hasattr(torch, "_scaled_mm"):
            raise RuntimeError(f"torch {torch.__version__} has no float8 types or _scaled_mm")
        n = _gemm_n(torch, device, prec, 1)
        a_type = e5m2 if prec == "fp8_e5m2" else e4m3
        a = torch.randn(n, n, device=dev, generator=gen).to(a_type)
        # cuBLASLt's fp8 GEMM takes B column-major (TN); it has no e5m2 x e5m2 GEMM
        b = torch.randn(n, n, device=dev, generator=gen).to(e4m3).t()
        one = torch.ones((), device=dev, dtype=torch.float32)
        kw = dict(scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)
        torch._scaled_mm(a, b, **kw)          # raises here where this GPU cannot
        how = (f"torch._scaled_mm {a_type} x {e4m3}, out bf16, use_fast_accum=True, scales 1"
               + (" (e5m2 x e4m3: cuBLASLt has no e5m2 x e5m2 GEMM)" if prec == "fp8_e5m2"
                  else ""))
        return (lambda: torch._scaled_mm(a, b, **kw)), n, how, (a, b)
    if prec == "int8":
        if not hasattr(torch, "_int_mm"):
            raise RuntimeError(f"torch {torch.__version__} has no _int_mm")
        n = _gemm_n(torch, device, prec, 1)
        a = torch.randint(-128, 128, (n, n), device=dev, dtype=torch.int8, generator=gen)
        b = torch.randint(-128, 128, (n, n), device=dev, dtype=torch.int8, generator=gen).t()
        torch._int_mm(a, b)
        return (lambda: torch._int_mm(a, b)), n, "torch._int_mm int8 x int8 -> int32", (a, b)
    raise ValueError(f"no torch GEMM for {prec!r}")


def _torch_gemm(torch: Any, device: int, prec: str,
                opts: Dict[str, Any]) -> Tuple[Optional[float], Any]:
    """(FLOP/s, how) of one precision's GEMM, or (None, why not) where torch cannot run it."""
    fn = tensors = None
    try:
        with _tf32(torch, prec == "tf32"):
            fn, n, how, tensors = _gemm_case(torch, device, prec)
            flops = 2 * n ** 3
            r = _bench(fn, flops=flops, name=f"{prec} gemm {n}^3", **opts)
    except Exception as e:                  # noqa: BLE001 -- torch's reason is the record
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return None, f"torch cannot run it on this GPU: {type(e).__name__}: {first[:300]}"
    finally:
        fn = tensors = None                 # the operands' memory back before the next GEMM
        torch.cuda.empty_cache()
    return flops / r.median, {"flops": flops, "median_s": r.median, "backend": r.backend,
                              "shape": [n, n, n], "how": how,
                              "data": "random (randn / randint), seed 0"}


def _copy_ceiling(device: int, info: Dict[str, Any], stream: int, copy_bytes: int,
                  opts: Dict[str, Any]) -> Dict[str, Any]:
    """The HBM ceiling: the best device-to-device copy of buffers far past L2, over kbench's
    own kernels (one and four 16-byte loads in flight per thread, at three grid sizes), the
    driver's memcpy (the copy engines) and torch's copy_ where PyTorch is here. A ceiling that
    one method misses reads real results as over 100% of peak."""
    src = _core.DeviceBuffer(copy_bytes, device)
    dst = _core.DeviceBuffer(copy_bytes, device)
    src.memset(1, stream)
    n16 = copy_bytes // 16
    sms = int(info.get("sm_count") or 100)
    candidates: Dict[str, Any] = {}

    def timed(label: str, fn) -> None:
        r = _bench(fn, bytes=2 * copy_bytes, name=label, **opts)
        candidates[label] = {"median_s": r.median, "bytes_per_s": 2 * copy_bytes / r.median}

    for kname in ("kb_copy16", "kb_copy16x4"):
        k = _core.CudaKernel(_kernel_source("copy.cu"), kname, device=device)
        for blocks_per_sm in (4, 8, 32):
            grid = sms * blocks_per_sm
            timed(f"{kname} grid {grid}x256",
                  lambda k=k, grid=grid: k.launch(grid, 256, "PPn", (dst, src, n16),
                                                  stream=stream))
    timed("driver cuMemcpyDtoDAsync", lambda: dst.copy_from(src, stream))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        ts = torch.ones(copy_bytes // 4, device=f"cuda:{device}", dtype=torch.float32)
        td = torch.empty_like(ts)
        timed("torch copy_", lambda: td.copy_(ts))
        del ts, td
    best = max(candidates, key=lambda c: candidates[c]["bytes_per_s"])
    return {"hbm_bytes_per_s": candidates[best]["bytes_per_s"],
            "hbm_copy": {"bytes": 2 * copy_bytes, "method": best,
                         "median_s": candidates[best]["median_s"], "candidates": candidates}}


def gpu_peaks_table(d: Dict[str, Any]) -> str:
    """The ceilings of a measure_gpu_peaks record, measured beside the datasheet's."""
    sheet = d.get("datasheet") or {}
    rows = [f"GPU {d.get('device')} ({d.get('uuid')})"]
    how = (d.get("hbm_copy") or {}).get("method", "kb_copy16")
    bw = f"  HBM copy   {d['hbm_bytes_per_s'] / 1e12:8.3f} TB/s  (read + write; best: {how})"
    if sheet.get("bytes_per_s"):
        bw += (f"; datasheet {sheet['bytes_per_s'] / 1e12:.3g} TB/s "
               f"({d['hbm_bytes_per_s'] / sheet['bytes_per_s']:.0%})")
    rows.append(bw)
    rows.append(f"  {'ceiling':<9} {'measured':>17} {'datasheet':>17}  how")
    for prec in PRECISIONS:
        got = d.get(f"{prec}_flops_per_s")
        ds = (sheet.get("flops") or {}).get(prec)
        unit = "TOP/s" if prec == "int8" else "TFLOP/s"
        m = f"{got / 1e12:9.1f} {unit:<7}" if got else f"{'absent':>9} {'':<7}"
        s = f"{ds / 1e12:9.1f} {unit:<7}" if ds else f"{'-':>9} {'':<7}"
        note = _how_text(d, prec) if got else (d.get("absent") or {}).get(prec, "not measured")
        if got and ds:
            note = f"{got / ds:.0%} of datasheet; {note}"
        rows.append(f"  {prec:<9} {m} {s}  {note}")
    rows.append(f"  datasheet: {sheet.get('name')} -- {sheet.get('source')}" if sheet else
                f"  datasheet: {d.get('device')} is not in kbench's datasheet table")
    return "\n".join(rows)


def _how_text(d: Dict[str, Any], prec: str) -> str:
    gemm = (d.get("gemm") or {}).get(prec)
    fma = d.get(f"{prec}_fma")
    parts = []
    if fma:
        parts.append(f"{fma.get('kernel', 'kb_fma')} FMA loop")
    if gemm:
        parts.append(f"{gemm['how']} {'x'.join(str(x) for x in gemm['shape'])}")
    if prec == "fp32" and fma and gemm:
        parts = [" / ".join(parts) + " (the higher)"]
    return "; ".join(parts) or LABELS.get(prec, prec)
