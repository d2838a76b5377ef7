"""What the GPU benchmarks record of the machine they ran on."""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Dict, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
# KB_CLOCK_LIMIT_REASONS (kbench.h): sw_power_cap, hw_slowdown, sw_thermal, hw_thermal,
# hw_power_brake
LIMIT_REASONS = 0xEC


def finite_or_none(v: Any) -> Optional[float]:
    """A finite number as a float, anything else (None, NaN, a string) as None, for JSON."""
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def gpu_facts() -> Dict[str, Any]:
    """The GPU, its UUID and power limit, torch, the commit and Python of this run."""
    import torch
    from kbench import _core
    from kbench.provenance import metadata
    try:
        limit = _core.nvml_snapshot(0).get("power_limit_w")
    except Exception:   # NVML may be absent: the run still stands
        limit = None
    git = metadata.git_info(os.path.dirname(HERE)) or {}
    return {"gpu": torch.cuda.get_device_name(0), "uuid": _core.cuda_device_info(0)["uuid"],
            "power_limit_w": limit, "torch": torch.__version__,
            "commit": (git.get("commit") or "unknown")[:7], "python": sys.version.split()[0]}
