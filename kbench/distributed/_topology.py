"""Topology of the local GPUs: NVML P2P status and common ancestor between every pair.

NVML is opened here, on first use only (never at import), with ctypes: the C core's NVML table
(csrc/loaders) has no P2P entry points. Every NVML return code is checked; a failure is
recorded in the report (it must not lose a measurement), naming the call.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional

_P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
_P2P_STATUS = {0: "OK", 1: "chipset not supported", 2: "GPU not supported",
               3: "IOH topology not supported", 4: "disabled by regkey", 5: "not supported",
               6: "unknown"}
_ANCESTOR = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches",
             30: "PCIe host bridge", 40: "same NUMA node", 50: "across NUMA nodes (SMP link)"}


class _Nvml:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.call("nvmlInit_v2")

    def call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            text = self.lib.nvmlErrorString(rc)
            raise RuntimeError(f"{name} failed: {text.decode() if text else rc} ({rc})")

    def handle(self, pci_bus_id: str) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        self.call("nvmlDeviceGetHandleByPciBusId_v2", pci_bus_id.encode(), ctypes.byref(h))
        return h

    def close(self) -> None:
        self.lib.nvmlShutdown()


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


def p2p_topology(pci_bus_ids: Optional[List[str]] = None) -> Dict[str, Any]:
    """{"gpus": [bus ids], "pairs": [{"a", "b", "read", "write", "nvlink", "atomics",
    "common_ancestor"}]} or {"error": why}."""
    ids = local_pci_bus_ids() if pci_bus_ids is None else list(pci_bus_ids)
    if len(ids) < 2:
        return {"gpus": ids, "pairs": [], "note": "fewer than 2 local GPUs: no pairs"}
    try:
        nv = _Nvml()
    except (OSError, RuntimeError, AttributeError) as e:
        return {"gpus": ids, "error": f"NVML unavailable: {e}"}
    try:
        handles = [nv.handle(b) for b in ids]
        pairs = []
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                pair: Dict[str, Any] = {"a": i, "b": j}
                for cap, idx in _P2P_CAPS.items():
                    st = ctypes.c_int()
                    nv.call("nvmlDeviceGetP2PStatus", handles[i], handles[j], idx,
                            ctypes.byref(st))
                    pair[cap] = _P2P_STATUS.get(st.value, str(st.value))
                lvl = ctypes.c_int()
                nv.call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j],
                        ctypes.byref(lvl))
                pair["common_ancestor"] = _ANCESTOR.get(lvl.value, str(lvl.value))
                pairs.append(pair)
        return {"gpus": ids, "pairs": pairs, "source": "NVML nvmlDeviceGetP2PStatus"}
    except RuntimeError as e:
        return {"gpus": ids, "error": str(e)}
    finally:
        nv.close()
