"""Topology of the local GPUs: NVML P2P status and common ancestor between every pair.

The C core asks NVML (`_core.nvml_p2p`: opened on first use, never at import, every return code
checked); this names its codes. A failure is recorded in the report, naming the call: it must
not lose a measurement. A query NVML cannot answer for a pair (NVML_ERROR_NOT_SUPPORTED) comes
back as None and is named so; the pair's other answers stay.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

_P2P_STATUS = {0: "OK", 1: "chipset not supported", 2: "GPU not supported",
               3: "IOH topology not supported", 4: "disabled by regkey", 5: "not supported",
               6: "unknown"}
_NOT_REPORTED = "not reported by NVML (NVML_ERROR_NOT_SUPPORTED)"
_ANCESTOR = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches",
             30: "PCIe host bridge", 40: "same NUMA node", 50: "across NUMA nodes (SMP link)"}


def local_pci_bus_ids() -> List[str]:
    """The PCI bus ids of this process's visible CUDA devices, through torch (no torch: [])."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0")
    return out


def _named(names: Dict[int, str], code: Optional[int]) -> str:
    return _NOT_REPORTED if code is None else names.get(code, str(code))


def p2p_topology(pci_bus_ids: Optional[List[str]] = None) -> Dict[str, Any]:
    """{"gpus": [bus ids], "pairs": [{"a", "b", "read", "write", "nvlink", "atomics",
    "common_ancestor"}]} or {"error": why}."""
    ids = local_pci_bus_ids() if pci_bus_ids is None else list(pci_bus_ids)
    if len(ids) < 2:
        return {"gpus": ids, "pairs": [], "note": "fewer than 2 local GPUs: no pairs"}
    from .. import _core
    if not getattr(_core, "HAVE_CUDA", 0):
        return {"gpus": ids, "error": "kbench was built without the CUDA backend: no NVML"}
    try:
        raw = _core.nvml_p2p(ids)
    except (_core.KbenchError, ValueError) as e:   # NvmlError, LibraryNotFound, one GPU twice
        return {"gpus": ids, "error": str(e)}
    pairs = []
    for p in raw:
        pair: Dict[str, Any] = {"a": p["a"], "b": p["b"]}
        pair.update({cap: _named(_P2P_STATUS, code) for cap, code in p["status"].items()})
        pair["common_ancestor"] = _named(_ANCESTOR, p["common_ancestor"])
        pairs.append(pair)
    return {"gpus": ids, "pairs": pairs, "source": "NVML nvmlDeviceGetP2PStatus"}
