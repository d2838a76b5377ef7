"""The GPUs' P2P topology through the C core's NVML table (`_core.nvml_p2p`), named by
kbench.distributed's report, against a fake libnvidia-ml (tests/fake_cuda/fake_libnvidia_ml.c)
loaded in a subprocess, so this process never sees it."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kbench import _core

HERE = Path(__file__).resolve().parent
IDS = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]

SCRIPT = textwrap.dedent(f'''
    import json
    from kbench import _core
    from kbench.distributed._topology import p2p_topology
    out = {{}}
    try:
        out["raw"] = _core.nvml_p2p({IDS!r})
    except _core.KbenchError as e:
        out["raw_error"] = [type(e).__name__, str(e)]
    out["report"] = p2p_topology({IDS[:2]!r})
    try:
        _core.nvml_p2p(["0000:01:00.0", "bad:00"])
    except _core.KbenchError as e:
        out["bad_id"] = [type(e).__name__, str(e)]
    try:
        _core.nvml_p2p(["0000:01:00.0", "0000:02:00.0", "0000:01:00.0"])
    except (_core.KbenchError, ValueError) as e:
        out["repeated"] = [type(e).__name__, str(e)]
    out["repeated_report"] = p2p_topology(["0000:02:00.0", "0000:02:00.0"])
    print("RESULT" + json.dumps(out))
''')


def fake_nvml(tmp_path, *defines):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("building the fake libnvidia-ml needs gcc")
    out = tmp_path / ("nvml" + "".join(d.lower() for d in defines))
    out.mkdir()
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", *[f"-D{d}" for d in defines], "-o",
                    str(out / "libnvidia-ml.so.1"), str(HERE / "fake_cuda" / "fake_libnvidia_ml.c")],
                   check=True)
    return out


def run(lib_dir, **env):
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **env, "LD_LIBRARY_PATH":
                            f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}"})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.split("RESULT", 1)[1])


pytestmark = pytest.mark.skipif(not _core.HAVE_CUDA, reason="kbench built without the CUDA "
                                                            "backend (no NVML table)")


def test_every_pair_gets_each_capability_and_the_common_ancestor(tmp_path):
    out = run(fake_nvml(tmp_path))
    assert [(p["a"], p["b"]) for p in out["raw"]] == [(0, 1), (0, 2), (1, 2)]
    for p in out["raw"]:      # the fake's codes: read/write OK, NVLink 5, atomics 2, NUMA node 40
        assert p["status"] == {"read": 0, "write": 0, "nvlink": 5, "atomics": 2}
        assert p["common_ancestor"] == 40
    assert out["report"] == {
        "gpus": IDS[:2], "source": "NVML nvmlDeviceGetP2PStatus",
        "pairs": [{"a": 0, "b": 1, "read": "OK", "write": "OK", "nvlink": "not supported",
                   "atomics": "GPU not supported", "common_ancestor": "same NUMA node"}]}
    kind, text = out["bad_id"]
    assert kind == "NvmlError" and "nvmlDeviceGetHandleByPciBusId_v2" in text
    assert "NVML_ERROR_NOT_FOUND" in text


def test_a_failing_p2p_query_is_raised_naming_the_call_and_reported(tmp_path):
    out = run(fake_nvml(tmp_path), FAKE_NVML_P2P_RC="15")       # NVML_ERROR_GPU_IS_LOST
    kind, text = out["raw_error"]
    assert kind == "NvmlError" and "nvmlDeviceGetP2PStatus" in text
    assert "NVML_ERROR_GPU_IS_LOST" in text
    assert out["report"]["gpus"] == IDS[:2] and "pairs" not in out["report"]
    assert "nvmlDeviceGetP2PStatus" in out["report"]["error"]


@pytest.mark.parametrize("env, unanswered", [({"FAKE_NVML_ANCESTOR_RC": "3"}, {"common_ancestor"}),
                                              ({"FAKE_NVML_P2P_RC": "3"},
                                               {"read", "write", "nvlink", "atomics"})])
def test_a_query_nvml_cannot_answer_is_none_and_the_others_stay(tmp_path, env, unanswered):
    # NVML_ERROR_NOT_SUPPORTED is an answer, not a failure (an H200's driver 580 gives it for
    # a device's common ancestor with itself): one such query must not lose the report
    out = run(fake_nvml(tmp_path), **env)
    assert "raw_error" not in out and len(out["raw"]) == 3
    known = {"read": 0, "write": 0, "nvlink": 5, "atomics": 2, "common_ancestor": 40}
    for p in out["raw"]:
        got = {**p["status"], "common_ancestor": p["common_ancestor"]}
        assert got == {k: None if k in unanswered else v for k, v in known.items()}
    pair = out["report"]["pairs"][0]
    for k in known:
        assert (pair[k] == "not reported by NVML (NVML_ERROR_NOT_SUPPORTED)") == (k in unanswered)


def test_two_ids_of_one_gpu_are_refused_naming_both(tmp_path):
    out = run(fake_nvml(tmp_path))
    kind, text = out["repeated"]
    assert kind == "ValueError"
    assert text == ("nvml_p2p: pci_bus_ids[2] (0000:01:00.0) names the same GPU as "
                    "pci_bus_ids[0] (0000:01:00.0): a GPU has no P2P link to itself")
    assert out["repeated_report"]["error"].startswith("nvml_p2p: pci_bus_ids[1] (0000:02:00.0)")


def test_a_library_without_the_topology_functions_says_which(tmp_path):
    out = run(fake_nvml(tmp_path, "FAKE_NVML_NO_TOPOLOGY"))
    kind, text = out["raw_error"]
    assert kind == "LibraryNotFound"
    assert text.endswith("does not provide nvmlDeviceGetP2PStatus: no GPU topology")
    assert out["report"]["error"] == text


@pytest.mark.parametrize("bad, match", [("0000:01:00.0", "sequence of str"),
                                        (5, "sequence of str"),
                                        (["0000:01:00.0", 7], r"pci_bus_ids\[1\] must be a str")])
def test_bad_bus_ids_are_refused_before_nvml_is_opened(bad, match):
    with pytest.raises(TypeError, match=match):
        _core.nvml_p2p(bad)


def test_fewer_than_two_gpus_ask_nothing():
    from kbench.distributed._topology import p2p_topology
    assert p2p_topology(["0000:01:00.0"]) == {"gpus": ["0000:01:00.0"], "pairs": [],
                                              "note": "fewer than 2 local GPUs: no pairs"}
