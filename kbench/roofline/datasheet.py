"""Vendor datasheet ceilings: peak TFLOP/s per precision and memory bandwidth of common GPUs.

Every figure is DENSE: the vendors print tensor-core figures "with sparsity" (2:4 structured
sparsity, twice the dense rate) beside or instead of the dense ones; those are halved here, as a
dense kernel can never reach them. Rates are per GPU as the driver shows it: one MI250X module
is two devices (GCDs) to ROCm, so its figures are the module's halved.

The precisions are kbench.roofline.ceilings' names: fp64 and fp32 are the vector (FMA) rates,
fp64_tc the FP64 tensor-core (DGEMM) rate, tf32 .. fp4 the tensor-core rates with FP32 accumulation
(what torch's GEMMs use: GeForce cards run FP16-accumulate at twice these). A precision the GPU has
no unit for is left out. Bandwidth is bytes per second, 1e12 = 1 TB/s.

A measured ceiling (`kbench peaks`) is what a kernel can reach; the datasheet is what the vendor
promises at the boost clock. Results show both: a kernel at 70% of the datasheet and 95% of the
measured ceiling is near the best this GPU does.

``lookup(name)`` matches the device name the driver reports ("NVIDIA H100 80GB HBM3" is the SXM
part, "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "AMD Instinct MI300X", ...); None for a GPU not in
the table.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

T = 1e12

_A100 = {"fp64": 9.7 * T, "fp64_tc": 19.5 * T, "fp32": 19.5 * T, "tf32": 156 * T,
         "fp16": 312 * T, "bf16": 312 * T, "int8": 624 * T}
_A100_SRC = ("NVIDIA A100 Tensor Core GPU datasheet (dense: the sparse TF32 312, FP16/BF16 624, "
             "INT8 1248 halved)")
_H100_SXM = {"fp64": 34 * T, "fp64_tc": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T,
             "fp16": 989.5 * T, "bf16": 989.5 * T, "fp8_e4m3": 1979 * T, "fp8_e5m2": 1979 * T,
             "int8": 1979 * T}
_H100_NVL = {"fp64": 30 * T, "fp64_tc": 60 * T, "fp32": 60 * T, "tf32": 417.5 * T,
             "fp16": 835.5 * T, "bf16": 835.5 * T, "fp8_e4m3": 1670.5 * T,
             "fp8_e5m2": 1670.5 * T, "int8": 1670.5 * T}
_MI300 = {"fp64": 81.7 * T, "fp64_tc": 163.4 * T, "fp32": 163.4 * T, "tf32": 653.7 * T,
          "fp16": 1307.4 * T, "bf16": 1307.4 * T, "fp8_e4m3": 2614.9 * T,
          "fp8_e5m2": 2614.9 * T, "int8": 2614.9 * T}
_MI300_SRC = ("AMD Instinct MI300X / MI325X datasheets (dense: the sparse figures are twice "
              "these; FP8 is the fnuz e4m3/e5m2 of CDNA 3)")

#: name -> {"flops": {precision: FLOP/s (int8: OP/s)}, "bytes_per_s": memory bandwidth,
#: "source": where the figures come from, "match": (vendor, the name's required words)}
TABLE: Dict[str, Dict[str, Any]] = {
    "A100 SXM4 80GB": {"flops": _A100, "bytes_per_s": 2.039 * T,
                       "source": _A100_SRC + "; 2,039 GB/s (80GB SXM)"},
    "A100 SXM4 40GB": {"flops": _A100, "bytes_per_s": 1.555 * T,
                       "source": _A100_SRC + "; 1,555 GB/s (40GB SXM)"},
    "A100 PCIe 80GB": {"flops": _A100, "bytes_per_s": 1.935 * T,
                       "source": _A100_SRC + "; 1,935 GB/s (80GB PCIe)"},
    "A100 PCIe 40GB": {"flops": _A100, "bytes_per_s": 1.555 * T,
                       "source": _A100_SRC + "; 1,555 GB/s (40GB PCIe)"},
    "H100 SXM": {"flops": _H100_SXM, "bytes_per_s": 3.35 * T,
                 "source": "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (dense: the "
                           "starred sparse TF32 989, FP16/BF16 1979, FP8/INT8 3958 halved); "
                           "3.35 TB/s HBM3"},
    "H100 PCIe": {"flops": {"fp64": 26 * T, "fp64_tc": 51 * T, "fp32": 51 * T,
                            "tf32": 378 * T, "fp16": 756.5 * T, "bf16": 756.5 * T,
                            "fp8_e4m3": 1513 * T, "fp8_e5m2": 1513 * T, "int8": 1513 * T},
                  "bytes_per_s": 2.0 * T,
                  "source": "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (dense: the "
                            "sparse TF32 756, FP16/BF16 1513, FP8/INT8 3026 halved); 2 TB/s "
                            "HBM2e"},
    "H100 NVL": {"flops": _H100_NVL, "bytes_per_s": 3.9 * T,
                 "source": "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column, 94 GB (dense: "
                           "the sparse TF32 835, FP16/BF16 1671, FP8/INT8 3341 halved); 3.9 TB/s. "
                           "The first NVL datasheet gave the figures of a pair of cards: these "
                           "are per card"},
    "H200 NVL": {"flops": _H100_NVL, "bytes_per_s": 4.8 * T,
                 "source": "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column (dense: "
                           "sparse figures halved); 4.8 TB/s HBM3e"},
    "H200": {"flops": _H100_SXM, "bytes_per_s": 4.8 * T,
             "source": "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (dense: the sparse "
                       "TF32 989, FP16/BF16 1979, FP8/INT8 3958 halved); 4.8 TB/s HBM3e"},
    "B200": {"flops": {"fp64": 37 * T, "fp64_tc": 37 * T, "fp32": 75 * T, "tf32": 1100 * T,
                       "fp16": 2250 * T, "bf16": 2250 * T, "fp8_e4m3": 4500 * T,
                       "fp8_e5m2": 4500 * T, "int8": 4500 * T, "fp4": 9000 * T},
             "bytes_per_s": 7.7 * T,
             "source": "NVIDIA HGX B200 datasheet, per-GPU figures at 1000 W (dense: the sparse "
                       "TF32 2.2, FP16/BF16 4.5, FP8/INT8 9, FP4 18 PFLOPS halved); 7.7 TB/s "
                       "for the 180 GB part (8 TB/s in the launch figures for 192 GB). Unsure: "
                       "NVIDIA has revised the FP64 figure (37 to 40 TFLOPS) between editions"},
    "L40S": {"flops": {"fp32": 91.6 * T, "tf32": 183 * T, "fp16": 362.05 * T,
                       "bf16": 362.05 * T, "fp8_e4m3": 733 * T, "fp8_e5m2": 733 * T,
                       "int8": 733 * T},
             "bytes_per_s": 0.864 * T,
             "source": "NVIDIA L40S datasheet (dense: the sparse TF32 366, FP16/BF16 733, "
                       "FP8/INT8 1466 halved); 864 GB/s GDDR6. FP64 is not on the datasheet "
                       "(1/64 of FP32 on this chip): left out"},
    "RTX 4090": {"flops": {"fp64": 1.29 * T, "fp32": 82.6 * T, "tf32": 82.6 * T,
                           "fp16": 165.2 * T, "bf16": 165.2 * T, "fp8_e4m3": 330.3 * T,
                           "fp8_e5m2": 330.3 * T, "int8": 660.6 * T},
                 "bytes_per_s": 1.008 * T,
                 "source": "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090 column, "
                           "FP32-accumulate dense figures (FP16-accumulate runs twice these); "
                           "1,008 GB/s GDDR6X; FP64 = FP32 / 64"},
    "RTX 5090": {"flops": {"fp64": 1.64 * T, "fp32": 104.8 * T, "tf32": 104.8 * T,
                           "fp16": 209.5 * T, "bf16": 209.5 * T, "fp8_e4m3": 419 * T,
                           "fp8_e5m2": 419 * T, "int8": 838 * T, "fp4": 1676 * T},
                 "bytes_per_s": 1.792 * T,
                 "source": "NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090 "
                           "(dense, FP32 accumulate; the marketed 3352 AI TOPS is sparse FP4); "
                           "1,792 GB/s GDDR7. Unsure: the FP32-accumulate tensor figures are "
                           "taken as half the FP16-accumulate ones, as on the RTX 4090, not read "
                           "from the whitepaper's table; FP64 = FP32 / 64"},
    "MI250X": {"flops": {"fp64": 23.95 * T, "fp64_tc": 47.85 * T, "fp32": 23.95 * T,
                         "fp16": 191.5 * T, "bf16": 191.5 * T, "int8": 191.5 * T},
               "bytes_per_s": 1.6384 * T,
               "source": "AMD Instinct MI250X datasheet, halved: the datasheet's FP64 vector 47.9, "
                         "matrix 95.7, FP16/BF16/INT8 383, 3.2768 TB/s are for the module's two "
                         "GCDs, and ROCm shows each GCD as one device (packed FP32 runs at twice "
                         "the fp32 vector figure). ROCm may name an MI250 (208 CUs, about 5% "
                         "lower) alike"},
    "MI300X": {"flops": _MI300, "bytes_per_s": 5.3 * T, "source": _MI300_SRC + "; 5.3 TB/s"},
    "MI325X": {"flops": _MI300, "bytes_per_s": 6.0 * T,
               "source": _MI300_SRC + "; 6 TB/s HBM3e (the compute is the MI300X's)"},
}


def _words(name: str) -> str:
    """A device name lowered, with separators as spaces: 'NVIDIA A100-SXM4-80GB' ->
    ' nvidia a100 sxm4 80gb '."""
    return " " + re.sub(r"[^a-z0-9]+", " ", name.lower()).strip() + " "


def _has(words: str, *tokens: str) -> bool:
    return all(f" {t} " in words for t in tokens)


# (table key, test on the name's words), first match wins: the specific parts before the
# general ones ('h100 nvl' before 'h100'), and names that contain another's (GH200, GB200,
# RTX 4090 D) refused before they could match it.
_RULES: List[Tuple[Optional[str], Callable[[str], bool]]] = [
    (None, lambda w: _has(w, "gh200") or _has(w, "gb200") or _has(w, "mi300a")),
    (None, lambda w: "laptop" in w or "mobile" in w or _has(w, "4090", "d")
     or _has(w, "5090", "d")),
    ("H100 NVL", lambda w: _has(w, "h100", "nvl")),
    ("H100 PCIe", lambda w: _has(w, "h100", "pcie")),
    ("H100 SXM", lambda w: _has(w, "h100")),
    ("H200 NVL", lambda w: _has(w, "h200", "nvl")),
    ("H200", lambda w: _has(w, "h200")),
    ("B200", lambda w: _has(w, "b200")),
    ("A100 PCIe 40GB", lambda w: _has(w, "a100", "pcie", "40gb")),
    ("A100 PCIe 80GB", lambda w: _has(w, "a100", "pcie")),
    ("A100 SXM4 40GB", lambda w: _has(w, "a100", "40gb")),
    ("A100 SXM4 80GB", lambda w: _has(w, "a100")),
    ("L40S", lambda w: _has(w, "l40s")),
    ("RTX 4090", lambda w: _has(w, "4090")),
    ("RTX 5090", lambda w: _has(w, "5090")),
    ("MI250X", lambda w: _has(w, "mi250x")),
    ("MI300X", lambda w: _has(w, "mi300x")),
    ("MI325X", lambda w: _has(w, "mi325x")),
]


def lookup(device_name: Any) -> Optional[Dict[str, Any]]:
    """The datasheet entry of the GPU the driver names `device_name`: {"name" (the table's),
    "flops": {precision: FLOP/s}, "bytes_per_s", "source", "device": device_name}, or None when
    the GPU is not in TABLE (or the name is not a string)."""
    if not isinstance(device_name, str) or not device_name.strip():
        return None
    words = _words(device_name)
    for key, test in _RULES:
        if test(words):
            if key is None:
                return None
            entry = TABLE[key]
            return {"name": key, "flops": dict(entry["flops"]),
                    "bytes_per_s": entry["bytes_per_s"], "source": entry["source"],
                    "device": device_name}
    return None


def missing_text(device_name: Any) -> str:
    """What a result says for a GPU the table lacks."""
    return (f"{device_name or 'this GPU'} is not in kbench's datasheet table "
            f"(kbench.roofline.datasheet.TABLE): no % of datasheet peak")
