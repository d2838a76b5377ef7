"""Measured GPU ceilings: HBM bandwidth (copy kernel), fp32 FMA rate, bf16 GEMM (PyTorch).

The copy and FMA kernels come from kernels/cuda/ and are compiled with NVRTC, so this needs
neither PyTorch nor CuPy; the bf16 GEMM is measured only when PyTorch is installed. Results are
cached per GPU (by UUID) next to the CPU peaks (kbench.peaks reads the cache back).

It measures by calling kbench.bench, so it is a top-level action like the CLI: nothing below
kbench.bench imports it.
"""
from __future__ import annotations

import os
import time
from importlib import resources
from typing import Any, Dict

from . import _core
from .bench import bench as _bench
from .peaks import gpu_peaks_path, save_peaks


def _kernel_source(name: str) -> str:
    """kernels/cuda/<name>: package data in a wheel, the repository's folder in a checkout."""
    try:
        return resources.files("kbench.kernels").joinpath("cuda", name).read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        with open(os.path.join(here, "kernels", "cuda", name)) as f:
            return f.read()


def measure_gpu_peaks(device: int = 0, copy_bytes: int = 2 << 30, save: bool = True,
                      max_time_s: float = 3.0) -> Dict[str, Any]:
    """Measure and cache this GPU's ceilings. Takes a few seconds."""
    from . import cuda
    info = cuda.device_info(device)
    stream = cuda.stream_handle(None, device)
    # Ceilings are the best the machine does: peak clocks (burst), not the clock a power cap
    # settles a sustained load at, or a burst figure would read over 100% of peak.
    opts = dict(device=f"cuda:{device}", cold_cache=None, stream=stream, max_time_s=max_time_s,
                warmup_s=0.5, floor=False, regime="burst")
    out: Dict[str, Any] = {"schema": "kbench.gpu_peaks/1", "device": info.get("name"),
                           "uuid": info.get("uuid"), "measured_at": time.time()}

    out.update(_copy_ceiling(device, info, stream, copy_bytes, opts))

    sms = int(info.get("sm_count") or 100)
    fma = _core.CudaKernel(_kernel_source("fma.cu"), "kb_fma", device=device)
    sink = _core.DeviceBuffer(4 * sms * 8 * 256, device)
    iters, fgrid = 8192, sms * 8
    flops = fgrid * 256 * iters * 8 * 2
    r = _bench(lambda: fma.launch(fgrid, 256, "Pi" "ff", (sink, iters, 0.999, 0.001),
                                       stream=stream),
                    flops=flops, name="kb_fma", **opts)
    out["fp32_flops_per_s"] = flops / r.median
    out["fp32_fma"] = {"flops": flops, "median_s": r.median, "backend": r.backend}

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        n = 8192
        gen = torch.Generator(device=f"cuda:{device}").manual_seed(0)
        a = torch.randn(n, n, device=f"cuda:{device}", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(n, n, device=f"cuda:{device}", dtype=torch.bfloat16, generator=gen)
        c = torch.empty(n, n, device=f"cuda:{device}", dtype=torch.bfloat16)
        gflops = 2 * n ** 3
        r = _bench(lambda: torch.matmul(a, b, out=c), flops=gflops, name="bf16 gemm 8192^3",
                        device=f"cuda:{device}", cold_cache=None, max_time_s=max_time_s,
                        warmup_s=0.5, floor=False, regime="burst")
        out["bf16_flops_per_s"] = gflops / r.median
        out["bf16_gemm"] = {"flops": gflops, "median_s": r.median, "backend": r.backend,
                            "shape": [n, n, n], "data": "randn, seed 0"}
    out["regime"] = "burst"
    out["source"] = f"kbench peaks on {info.get('name')}, burst regime ({gpu_peaks_path(info)})"
    if save:        # through a new file and a rename: a FIFO at the path would block open()
        save_peaks(out, gpu_peaks_path(info))
    return out


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
    rows = [f"GPU {d.get('device')} ({d.get('uuid')})"]
    how = (d.get("hbm_copy") or {}).get("method", "kb_copy16")
    rows.append(f"  HBM copy   {d['hbm_bytes_per_s'] / 1e12:8.3f} TB/s  (read + write; best: {how})")
    rows.append(f"  fp32 FMA   {d['fp32_flops_per_s'] / 1e12:8.2f} TFLOP/s")
    if d.get("bf16_flops_per_s"):
        rows.append(f"  bf16 GEMM  {d['bf16_flops_per_s'] / 1e12:8.1f} TFLOP/s  (8192^3, random)")
    return "\n".join(rows)
