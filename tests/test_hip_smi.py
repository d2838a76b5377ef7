"""The HIP backend's ROCm SMI readings on the stand-in librocm_smi64 (tests/hip_forward/
rsmi_fake.c): a failed read is unknown, never a number.
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
