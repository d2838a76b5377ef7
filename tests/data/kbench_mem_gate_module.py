"""A pytest module for the peak-memory gate on a GPU, run in subprocesses by
tests/test_gpu_memory_profile.py (it is not collected by the suite: its name is not test_*):

    pytest tests/data/kbench_mem_gate_module.py --kbench-save=base.json
    KB_PLANT_WORKSPACE=1 pytest tests/data/kbench_mem_gate_module.py \
        --kbench-compare=base.json --kbench-fail=off --kbench-fail-mem=10%     # exits 1

A torch matmul that allocates its output (4 MiB); KB_PLANT_WORKSPACE=1 plants a workspace twice
the output's size inside the call, allocated and freed by the caching allocator, so the call's
peak triples while its time barely moves. The callable's source is the same in both runs, so
the comparison names no different harness.
"""
import os

import pytest

torch = pytest.importorskip("torch")

N = 1024
PLANT = bool(os.environ.get("KB_PLANT_WORKSPACE"))


def matmul(a, b):
    out = torch.matmul(a, b)
    if PLANT:
        workspace = torch.empty(2 * out.numel(), dtype=out.dtype, device=out.device)
        del workspace
    return out


@pytest.mark.gpu
def test_matmul_peak_memory(kbench):
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(N, N, device="cuda", generator=gen)
    b = torch.randn(N, N, device="cuda", generator=gen)
    r = kbench(matmul, a, b, name="matmul", warmup_s=0.05, settle_max_s=0.0, max_time_s=0.3,
               floor=False)
    assert r.memory["method"] == "torch"
    print(f"\nkbench matmul {N}^2 fp32: peak {r.memory['peak_bytes']} B "
          f"(output {a.numel() * 4} B, planted workspace: {PLANT})")
