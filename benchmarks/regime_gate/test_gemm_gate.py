"""A user's regression gate, run unchanged against its own saved baseline (gpu_check.sh regime).

    pytest benchmarks/regime_gate --kbench-save=base.json
    pytest benchmarks/regime_gate --kbench-compare=base.json --kbench-fail=8%   # three times

The code does not change between runs, so the gate must pass every time: a figure may not
depend on what the GPU ran before (the fidelity regime). The GEMMs are power-capped on an H200.
KBENCH_GATE_PLANT=1 plants a 2x (each GEMM runs twice): the gate must fail it."""
import os

import pytest

torch = pytest.importorskip("torch")

SHAPES = [(2048, 2048, 2048, torch.bfloat16), (2048, 2048, 2048, torch.float32),
          (8192, 8192, 4096, torch.bfloat16)]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, dtype", SHAPES, ids=lambda v: str(v).replace("torch.", ""))
def test_gemm(kbench, m, n, k, dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
    once = lambda: a @ b     # noqa: E731
    twice = lambda: (a @ b, a @ b)[1]    # noqa: E731
    fn = twice if os.environ.get("KBENCH_GATE_PLANT") == "1" else once
    r = kbench(fn, device="cuda", flops=2 * m * n * k,
               compute_peak="bf16" if dtype == torch.bfloat16 else "fp32")
    assert r.median > 0
