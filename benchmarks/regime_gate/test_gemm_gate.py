"""A user's regression gate, run unchanged against its own saved baseline (gpu_regime.sh).

    pytest benchmarks/regime_gate --kbench-save=base.json
    pytest benchmarks/regime_gate --kbench-compare=base.json --kbench-fail=8%   # three times

The code does not change between runs, so the gate must pass every time: the figure may not
depend on what the GPU ran before (the fidelity regime)."""
import pytest

torch = pytest.importorskip("torch")


@pytest.mark.gpu
def test_bf16_gemm_2048(kbench):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    r = kbench(lambda: a @ b, device="cuda", flops=2 * 2048 ** 3, compute_peak="bf16")
    assert r.median > 0
