"""The HIP backend after a failed HIP call: the error names the HIP call that failed, and the
process stays usable (no stream left capturing, no gate left shut). Failures are injected
into the CPU stand-in of libamdhip64 (tests/hip_forward/hip_fake.c: KB_FAIL=<call>[:n[:k]]).
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


def test_failed_gate_wait_names_the_hip_call(fake_dir):
    """hipStreamWaitValue32's first call is the gate's probe; the second, a batch's gate."""
    res = run_fake(fake_dir, """
        f = lambda x: x * 2
        a = np.ones(1024, np.float32)
        out["e"] = err(lambda: kbench.bench(f, a, cold_cache=None, **B))
        out["next"] = kbench.bench(f, a, cold_cache=None, **B).extra["hip"]["gate"]["gated"]
    """, KB_FAIL="hipStreamWaitValue32:1:1")
    e = res["e"]
    assert e["type"] == "HipError" and "hipStreamWaitValue32" in e["call"], e
    assert "kb_hip_gate_close" not in e["call"] and "kb_hip_gate_close" not in e["msg"]
    assert res["next"] is True


@pytest.mark.parametrize("times", ["1", ""])
def test_failed_end_capture_leaves_no_capturing_stream(fake_dir, times):
    """A failed hipStreamEndCapture left the stream capturing (the fake keeps it so), and every
    later capture failed at hipStreamBeginCapture. Failing once: the capture is ended again and
    the next bench runs. Failing always: the error says the stream is still capturing."""
    res = run_fake(fake_dir, """
        f = lambda x: x * 2
        a = np.ones(1024, np.float32)
        out["e"] = err(lambda: kbench.bench(f, a, cold_cache=None, **B))
        out["capturing"] = FAKE.kb_fake_capturing()
        os.environ.pop("KB_FAIL")
        if out["capturing"]:
            FAKE.hipStreamEndCapture(None, ctypes.byref(ctypes.c_void_p()))
        out["next"] = kbench.bench(f, a, cold_cache=None, **B).backend
        def raises(x):
            raise KeyError("inside")
        out["raised"] = err(lambda: c.hip_graph_capture(raises, ((a,),), None, stream=1))
        out["capturing_after_raise"] = FAKE.kb_fake_capturing()
    """, KB_FAIL="hipStreamEndCapture:0" + (":" + times if times else ""))
    e = res["e"]
    assert e["type"] == "HipError" and "hipStreamEndCapture" in e["call"], e
    if times:
        assert res["capturing"] == 0
        assert not any("capture mode" in n for n in e["notes"])
    else:
        assert res["capturing"] == 1
        assert any("could not be taken out of capture mode" in n for n in e["notes"])
    assert res["next"] == "hip"
    assert res["raised"]["type"] == "KeyError" and res["capturing_after_raise"] == 0
