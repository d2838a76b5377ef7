"""The HIP backend's ROCm SMI readings on the stand-in librocm_smi64 (tests/hip_forward/
rsmi_fake.c): a failed read is unknown, never a number, and the SMI device read is the one
with the HIP device's PCI bus id (the indices differ under HIP_VISIBLE_DEVICES).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbench import _core

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hip_forward"))
from run_fake import fake_dir, run_fake  # noqa: E402,F401 (fake_dir: a fixture)

pytestmark = pytest.mark.skipif(not getattr(_core, "HAVE_HIP", 0),
                                reason="kbench._core built with KBENCH_NO_CUDA=1: no HIP")


def test_unreadable_temperature_is_unknown_not_minus_one(fake_dir):
    res = run_fake(fake_dir, """
        out["snap"] = c.rocm_smi_snapshot(0)
        r = kbench.bench(lambda x: x * 2, np.ones(1024, np.float32), cold_cache=None, **B)
        out["summary"] = r.extra["clocks"]["summary"]
    """, KB_FAKE_RSMI_NO_TEMP="1")
    assert res["snap"]["temp_c"] is None, res["snap"]
    assert res["snap"]["sclk_mhz"] == 2100 and res["snap"]["power_w"] == 350
    assert " C" not in res["summary"] and res["summary"].startswith("ROCm SMI before: 2100 MHz")


@pytest.mark.parametrize("smi_pci", [True, False])
def test_rocm_smi_device_found_by_pci_bus_id(fake_dir, smi_pci):
    """HIP sees one device (bus c3, as under HIP_VISIBLE_DEVICES=2), ROCm SMI three (c1, c2,
    c3; the fake's temperature is 65 C + its index): SMI device 2 is read, not 0. Without
    ROCm SMI's PCI ids, index 0 is read and the result says it is assumed."""
    env = dict(KB_FAKE_BUSES="c3", KB_FAKE_RSMI_BUSES="c1,c2,c3")
    if not smi_pci:
        env["KB_FAKE_RSMI_NO_PCI"] = "1"
    res = run_fake(fake_dir, """
        out["info_bus"] = c.hip_device_info(0)["pci_bus_id"]
        r = kbench.bench(lambda x: x * 2, np.ones(1024, np.float32), cold_cache=None, **B)
        out["clocks"] = r.extra["clocks"]
    """, **env)
    assert res["info_bus"] == "0000:c3:00.0"
    clocks = res["clocks"]
    if smi_pci:
        assert clocks["rocm_smi_device"] == {"index": 2, "matched_by": "PCI bus id 0000:c3:00.0"}
        assert clocks["before"]["temp_c"] == 67 and clocks["before"]["index"] == 2
        assert "assumed" not in clocks["summary"]
    else:
        smi = clocks["rocm_smi_device"]
        assert smi["index"] == 0 and "rsmi_dev_pci_id_get" in smi["assumed"]
        assert clocks["before"]["temp_c"] == 65
        assert "ROCm SMI device 0 is taken to be HIP device 0" in clocks["summary"]


def test_rocm_smi_partitions_of_one_gpu_and_a_second_hip_device(fake_dir):
    """Two HIP devices (c1, c2) over ROCm SMI devices c2, c2, c1 (the first GPU split in two
    partitions, listed first): HIP device 0 reads SMI device 2, and HIP device 1 one of the
    partitions, whose readings are that GPU's (1: its own index, being one of them); the
    current device is left as it was."""
    res = run_fake(fake_dir, """
        a = np.ones(1024, np.float32)
        for d in (0, 1):
            r = kbench.bench(lambda x: x * 2, a, cold_cache=None, **dict(B, device=f"cuda:{d}"))
            out[str(d)] = r.extra["clocks"]["rocm_smi_device"]
        out["current"] = FAKE.kb_fake_current_device()
    """, KB_FAKE_BUSES="c1,c2", KB_FAKE_RSMI_BUSES="c2,c2,c1")
    assert res["0"] == {"index": 2, "matched_by": "PCI bus id 0000:c1:00.0"}
    assert res["1"]["index"] == 1 and "shared by ROCm SMI devices [0, 1]" in \
        res["1"]["matched_by"]
    assert res["current"] == 0


def test_rocm_smi_initialized_once_when_two_threads_race_to_it(fake_dir):
    """rsmi_init runs without the GIL, so two threads' first reads both called it; ROCm SMI
    counts its inits and kbench shuts down once at module free, so one init stayed open. With
    a 200 ms init both threads are inside it at once; one init is left open, not two."""
    res = run_fake(fake_dir, """
        import threading
        RSMI = ctypes.CDLL("librocm_smi64.so")
        go = threading.Barrier(2)
        snaps = []
        def read():
            go.wait()
            snaps.append(c.rocm_smi_snapshot(0)["sclk_mhz"])
        ts = [threading.Thread(target=read) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out["snaps"] = snaps
        out["open"] = RSMI.kb_fake_rsmi_inits_open()
    """, KB_FAKE_RSMI_INIT_MS="200")
    assert res["snaps"] == [2100, 2100] and res["open"] == 1, res
