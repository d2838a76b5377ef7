"""Issue 46, the right ceiling for every precision: compute_peak= takes every precision and
refuses others naming them; the ceiling follows the dtypes a callable reads (arguments, closure
cells, a module's parameters), NumPy, ml_dtypes and torch CPU tensors alike; the datasheet is
found by the name the driver reports; a GPU result (faked: no GPU here) says which ceiling and
why, its share of the datasheet's, and a figure above its ceiling names it and compute_peak=.
"""
import functools
import json

import numpy as np
import pytest

import kbench
from kbench.roofline import ceilings, datasheet, peaks
from kbench.backends import cuda, cuda_report
from kbench.roofline.ceilings import (PRECISIONS, check_compute_peak, infer_compute_peak,
                                      precision_of)

ml_dtypes = pytest.importorskip("ml_dtypes")


# ------------------------------------------------------------------ compute_peak=

@pytest.mark.parametrize("name", list(PRECISIONS) + ["fp8"])
def test_compute_peak_accepts_every_precision(name):
    want = "fp8_e4m3" if name == "fp8" else name
    assert check_compute_peak(name) == want
    assert cuda_report.check_compute_peak(name) == want
    assert check_compute_peak(None) is None            # None: follow the dtypes


@pytest.mark.parametrize("bad", ["fp12", "FP16", "float16", "fp8_e8m0", "", 16, ("bf16",)])
def test_compute_peak_refuses_others_listing_the_accepted_names(bad):
    with pytest.raises(ValueError, match="compute_peak must be one of") as e:
        check_compute_peak(bad)
    for name in PRECISIONS:
        assert repr(name) in str(e.value)
    assert "'fp8' means 'fp8_e4m3'" in str(e.value) and repr(bad) in str(e.value)


def test_the_cuda_backend_takes_compute_peak_and_defaults_to_the_dtypes():
    import inspect
    assert "compute_peak" in cuda.OPTIONS
    assert inspect.signature(cuda._run).parameters["compute_peak"].default is None


# ------------------------------------------------------------------ the dtype rule

BF16, FP8, FP8_E5 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def mat(dtype, shape=(4, 4)):
    return np.ones(shape, dtype=dtype)


@pytest.mark.parametrize("dtype,want", [
    (np.float64, "fp64"), (np.complex128, "fp64"), (np.float32, "fp32"),
    (np.complex64, "fp32"), (np.float16, "fp16"), (BF16, "bf16"), (FP8, "fp8_e4m3"),
    (FP8_E5, "fp8_e5m2"), (ml_dtypes.float8_e4m3fnuz, "fp8_e4m3"),
    (ml_dtypes.float8_e5m2fnuz, "fp8_e5m2"), (np.int8, "int8"),
    (np.int32, None), (np.bool_, None), (np.uint8, None)])
def test_precision_of_numpy_and_ml_dtypes(dtype, want):
    assert precision_of(np.dtype(dtype)) == want


@pytest.mark.parametrize("name,want", [
    ("torch.bfloat16", "bf16"), ("torch.float16", "fp16"), ("torch.half", "fp16"),
    ("torch.float32", "fp32"), ("torch.float64", "fp64"), ("torch.float8_e4m3fn", "fp8_e4m3"),
    ("torch.float8_e4m3fnuz", "fp8_e4m3"), ("torch.float8_e5m2", "fp8_e5m2"),
    ("torch.float4_e2m1fn_x2", "fp4"), ("torch.int8", "int8"), ("torch.int64", None),
    ("torch.float8_e8m0fnu", None)])
def test_precision_of_a_framework_dtype_by_its_name(name, want):
    assert precision_of(name) == want


@pytest.mark.parametrize("args,want", [
    ((mat(BF16), mat(BF16)), "bf16"),
    ((mat(np.float16), mat(np.float16)), "fp16"),
    # fp8 operands with their fp32 scales (0-D): the scales feed no GEMM
    ((mat(FP8), mat(FP8), np.float32(1.0), np.ones(1, np.float32)), "fp8_e4m3"),
    ((mat(FP8_E5), mat(FP8)), "fp8_e5m2"),              # both 8 bits: the first of them
    ((mat(FP8_E5), mat(FP8_E5)), "fp8_e5m2"),
    ((mat(np.int8), mat(np.int8)), "int8"),
    ((mat(np.float32), mat(np.float32)), "fp32"),
    ((mat(np.float64), mat(np.float64)), "fp64_tc"),
    ((mat(np.float32), mat(BF16)), "bf16"),             # mixed: the narrowest GEMM input
    ((mat(np.float64), mat(np.float16), np.ones(4)), "fp16"),
    ((np.ones(8, BF16), np.ones(8, BF16)), "fp32"),     # 1-D: elementwise, FMA of fp32
    ((np.ones(8), np.ones(8, np.float32)), "fp64"),     # elementwise: the widest precision
    ((np.arange(8), 2), "fp32"),                        # nothing with a precision
    ((), "fp32"),
])
def test_the_ceiling_follows_the_arguments(args, want):
    assert infer_compute_peak(None, args, {})["name"] == want


def test_closure_cells_partials_and_globals_are_read():
    a, b = mat(BF16), mat(BF16)
    got = infer_compute_peak(lambda: a @ b, (), {})
    assert got["name"] == "bf16" and "captured 'a'" in got["why"] and "2-D" in got["why"]
    h = mat(np.float16)
    assert infer_compute_peak(functools.partial(np.matmul, h), (h,), {})["name"] == "fp16"
    assert infer_compute_peak(lambda: np.matmul(GLOBAL_I8, GLOBAL_I8), (), {})["name"] == "int8"


GLOBAL_I8 = mat(np.int8)


def test_the_output_is_no_input():
    """A cast to fp8 (bf16 in, fp8 out=) is held against bf16, not fp8; elementwise work is
    held against its output's precision."""
    x, y = mat(BF16), mat(FP8)
    got = infer_compute_peak(np.copyto, (y, x), {}, output=y)
    assert got["name"] == "bf16"
    assert infer_compute_peak(np.add, (x, x), {"out": y})["name"] == "bf16"
    v64 = np.ones(8)
    got = infer_compute_peak(np.add, (np.ones(8, np.float32),), {"out": v64})
    assert got["name"] == "fp64" and "output's" in got["why"]


def test_compute_peak_given_overrides_the_dtypes():
    a = mat(BF16)
    c = ceilings.choose_compute_peak("fp8", None, (a, a), {})
    assert c == {"name": "fp8_e4m3", "why": "compute_peak= given", "given": True}
    c = ceilings.choose_compute_peak(None, None, (a, a), {})
    assert c["name"] == "bf16" and c["given"] is False


def test_torch_cpu_tensors_in_arguments_closures_and_modules():
    torch = pytest.importorskip("torch")
    a = torch.ones(4, 4, dtype=torch.bfloat16)
    assert infer_compute_peak(torch.matmul, (a, a), {})["name"] == "bf16"
    h = torch.ones(4, 4, dtype=torch.float16)
    assert infer_compute_peak(lambda: h @ h, (), {})["name"] == "fp16"
    q = torch.ones(4, 4, dtype=torch.int8)
    assert infer_compute_peak(torch._int_mm, (q, q), {})["name"] == "int8"
    if hasattr(torch, "float8_e4m3fn"):
        f8 = torch.ones(4, 4).to(torch.float8_e4m3fn)
        assert infer_compute_peak(None, (f8, f8, torch.ones(())), {})["name"] == "fp8_e4m3"
    lin = torch.nn.Linear(4, 4).to(torch.bfloat16)
    x = torch.ones(2, 4, dtype=torch.bfloat16)
    assert infer_compute_peak(lin, (x,), {})["name"] == "bf16"
    assert infer_compute_peak(lambda: lin(x), (), {})["name"] == "bf16"
    f = torch.ones(4, 4)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert infer_compute_peak(torch.mm, (f, f), {})["name"] == "fp32"
        torch.set_float32_matmul_precision("high")          # TF32 allowed: its ceiling
        got = infer_compute_peak(torch.mm, (f, f), {})
        assert got["name"] == "tf32" and "TF32" in got["why"]
    finally:
        torch.set_float32_matmul_precision(before)


class FakeTorchDtype:
    def __init__(self, name):
        self.name_ = name

    def __str__(self):
        return self.name_


class FakeTensor:
    """What kbench reads of a tensor it cannot import: dtype and shape."""
    def __init__(self, dtype, shape=(4, 4)):
        self.dtype, self.shape = FakeTorchDtype(dtype), shape


def test_a_framework_tensor_is_read_by_its_dtypes_name():
    a = FakeTensor("torch.bfloat16")
    assert infer_compute_peak(lambda: (a, a), (), {})["name"] == "bf16"
    assert infer_compute_peak(None, (FakeTensor("torch.float8_e5m2"),), {})["name"] == "fp8_e5m2"


# ------------------------------------------------------------------ the datasheet

@pytest.mark.parametrize("device,want", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA B200", "B200"), ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("AMD Instinct MI250X/MI250", "MI250X"), ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI325X", "MI325X"),
    # names that hold another's: not it
    ("NVIDIA GH200 480GB", None), ("NVIDIA GB200", None), ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None), ("AMD Instinct MI300A", None),
    ("NVIDIA L40", None), ("Tesla V100-SXM2-16GB", None), ("", None), (None, None)])
def test_the_datasheet_is_found_by_the_drivers_device_name(device, want):
    got = datasheet.lookup(device)
    assert (got and got["name"]) == want


def test_every_datasheet_figure_is_dense_sourced_and_named_by_a_precision():
    assert "dense" in datasheet.__doc__.lower()
    for name, entry in datasheet.TABLE.items():
        assert entry["source"] and entry["bytes_per_s"] > 1e11, name
        assert set(entry["flops"]) <= set(PRECISIONS), name
        # dense: a 16-bit tensor GEMM at most 30x the FMA rate (B200's; sparse: 2x that)
        f = entry["flops"]
        for prec in ("fp16", "bf16"):
            if prec in f:
                assert f[prec] <= 30 * f["fp32"], name
    # the dense figures, not the datasheets' starred sparse ones
    for device, fp16 in (("NVIDIA H100 80GB HBM3", 989.5e12), ("NVIDIA B200", 2250e12),
                         ("AMD Instinct MI300X", 1307.4e12), ("NVIDIA A100-SXM4-80GB", 312e12)):
        sheet = datasheet.lookup(device)
        assert sheet["flops"]["fp16"] == pytest.approx(fp16)
        if "fp8_e4m3" in sheet["flops"]:
            assert sheet["flops"]["fp8_e4m3"] == pytest.approx(2 * fp16, rel=1e-4)


# ------------------------------------------------------------------ the GPU's ceilings

H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-test-46", "memory_clock_rate_khz": 2619000,
        "memory_bus_width_bits": 5120}
RECORD = {"schema": peaks.GPU_SCHEMA, "device": H100["name"], "uuid": H100["uuid"],
          "hbm_bytes_per_s": 3.0e12, "fp32_flops_per_s": 60e12, "fp64_flops_per_s": 30e12,
          "fp64_tc_flops_per_s": 55e12, "tf32_flops_per_s": 400e12, "fp16_flops_per_s": 750e12,
          "bf16_flops_per_s": 780e12, "fp8_e4m3_flops_per_s": 1300e12, "int8_flops_per_s": 1400e12,
          "absent": {"fp4": "not measured", "fp8_e5m2": "torch cannot run it on this GPU: x"},
          "source": "kbench peaks on test"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))

    def write(record, info=H100):
        with open(peaks.gpu_peaks_path(info), "w") as f:
            json.dump(record, f)
    return write


def test_each_precision_reads_its_measured_ceiling_and_the_datasheets(cache):
    cache(RECORD)
    for name in ("fp32", "fp16", "bf16", "fp8_e4m3", "int8", "fp64", "fp64_tc", "tf32"):
        p = cuda_report.gpu_peaks(H100, name)
        assert p["flops_per_s"] == RECORD[f"{name}_flops_per_s"]
        assert p["flops_name"] == f"GPU {ceilings.LABELS[name]}"
        assert p["datasheet"]["flops_per_s"] == datasheet.TABLE["H100 SXM"]["flops"][name]
        assert p["bytes_per_s"] == 3.0e12 and p["bytes_ceiling"] == "measured"
    p = cuda_report.gpu_peaks(H100, "fp8_e5m2")      # absent: torch's reason travels
    assert p["flops_per_s"] is None and "torch cannot run it" in p["compute_peak"]["missing"]
    assert p["datasheet"]["flops_per_s"] == pytest.approx(1979e12)


def test_an_older_cache_stands_and_asks_for_kbench_peaks_for_what_it_lacks(cache):
    old = {"schema": "kbench.gpu_peaks/1", "hbm_bytes_per_s": 3e12, "fp32_flops_per_s": 60e12,
           "bf16_flops_per_s": 700e12, "source": "old"}
    cache(old)
    assert cuda_report.gpu_peaks(H100, "bf16")["flops_per_s"] == 700e12
    p = cuda_report.gpu_peaks(H100, "fp16")
    assert p["flops_per_s"] is None and "re-run `kbench peaks`" in p["compute_peak"]["missing"]


def test_without_a_cache_the_theoretical_bandwidth_and_the_datasheet_stand(cache):
    p = cuda_report.gpu_peaks(H100, "bf16")
    assert p["bytes_ceiling"] == "theoretical" and p["flops_per_s"] is None
    assert p["datasheet"]["name"] == "H100 SXM"


def test_an_inferred_ceiling_the_gpu_lacks_falls_back_to_the_fma_one(cache):
    info = {"name": "Some Future GPU", "uuid": "GPU-x"}
    record = dict(RECORD, uuid="GPU-x", absent={"fp64_tc": "no DGEMM", "tf32": "no TF32"})
    for k in ("fp64_tc_flops_per_s", "tf32_flops_per_s"):
        record.pop(k)
    cache(record, info)
    a = mat(np.float64)
    p = cuda_report.gpu_peaks(info, ceilings.choose_compute_peak(None, None, (a, a), {}))
    assert p["compute_peak"]["name"] == "fp64" and p["flops_per_s"] == 30e12
    assert "no fp64_tc ceiling" in p["compute_peak"]["why"]
    assert "not in kbench's datasheet table" in p["datasheet"]["missing"]
    # given, it is not replaced: the caller asked for that ceiling
    p = cuda_report.gpu_peaks(info, "tf32")
    assert p["compute_peak"]["name"] == "tf32" and p["flops_per_s"] is None


def _fake_gpu_bench(monkeypatch, seconds):
    """kbench.bench through kbench.measure.local with the CUDA backend's timing faked: the ceiling
    is chosen and looked up as cuda._run does (kbench.roofline.ceilings, cuda_report.gpu_peaks)."""
    def fake_run(fn, sets, kwargs, *, compute_peak=None, output=None, **options):
        choice = ceilings.choose_compute_peak(compute_peak, fn, sets[0], kwargs, output)
        p = cuda_report.gpu_peaks(H100, choice)
        raw = {"samples": np.full(64, seconds), "backend": "cupti", "ci_level": 0.95,
               "stop": "precision", "criterion": "ci", "target": 0.005, "achieved": 0.001}
        extra = {"compute_peak": p["compute_peak"], "warnings": []}
        return raw, {"mode": "none"}, extra, "cuda:0", p

    monkeypatch.setattr(cuda, "run", fake_run)


def test_a_gpu_result_says_which_ceiling_why_and_its_share_of_the_datasheet(cache, monkeypatch):
    cache(RECORD)
    n = 4096
    a = np.ones((n, n), np.float16)             # stands in for GPU tensors: device='cuda:0'
    _fake_gpu_bench(monkeypatch, 2 * n ** 3 / 700e12)           # 700 TFLOP/s
    r = kbench.bench(lambda: a @ a, flops=2 * n ** 3, device="cuda:0", memory=False)
    cp = r.extra["compute_peak"]
    assert cp["name"] == "fp16" and "fp16 inputs" in cp["why"]
    tp = r.throughput
    assert tp["peak_flops_per_s"] == 750e12 and tp["compute_pct_peak"] == pytest.approx(700 / 750)
    assert tp["compute_pct_datasheet"] == pytest.approx(700 / 989.5)
    assert tp["datasheet"]["name"] == "H100 SXM"
    rows = dict(r._rows())
    assert rows["Ceiling"].startswith("fp16 GEMM (inferred from fp16 inputs")
    assert "700 TFLOP/s (93.3% of the measured GPU fp16 GEMM peak, 750 TFLOP/s)" in \
        rows["Throughput"]
    assert "70.7% of the H100 SXM datasheet's 990 TFLOP/s (dense)" in rows["Ceiling"]
    assert not any("compute ceiling" in w for w in r.warnings)
    # the same figure held against fp32 FMA (the old default) is the false warning,
    # which now names the ceiling and how to pick another
    r32 = kbench.bench(lambda: a @ a, flops=2 * n ** 3, device="cuda:0", memory=False,
                       compute_peak="fp32")
    (w,) = [w for w in r32.warnings if "compute ceiling" in w]
    assert w.startswith("1167% of the measured compute ceiling, fp32 FMA (60 TFLOP/s, "
                        "compute_peak= given)")
    assert "compute_peak= picks another: fp64, fp64_tc, fp32, tf32, fp16, bf16," in w
    assert r32.to_dict()["extra"]["compute_peak"]["name"] == "fp32"


def test_a_gpu_not_in_the_datasheet_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))
    info = {"name": "NVIDIA Imaginary 9000", "uuid": "GPU-y"}
    p = cuda_report.gpu_peaks(info, "bf16")
    tp = {"flops_per_s": 1e12}
    ceilings.add_datasheet(tp, p)
    assert tp["datasheet_missing"].startswith("NVIDIA Imaginary 9000 is not in kbench's datasheet")


def test_the_datasheet_only_warning_when_nothing_was_measured():
    """A HIP GPU (no `kbench peaks`): the datasheet's ceiling alone, and above it a warning."""
    info = {"name": "AMD Instinct MI300X"}
    extra = {}
    a = mat(BF16)
    p = ceilings.hip_ceilings(info, None, (a, a), {}, None, extra)
    assert extra["compute_peak"]["name"] == "bf16" and "HIP" in extra["compute_peak"]["missing"]
    tp = {"flops_per_s": 2000e12}
    ceilings.add_datasheet(tp, p)
    assert tp["compute_pct_datasheet"] == pytest.approx(2000 / 1307.4)

    class R:
        throughput, backend = tp, "hip-graph"
    R.extra = extra
    (w,) = ceilings.ceiling_warnings(R, 1.10)
    assert "of the MI300X datasheet's bf16 GEMM ceiling" in w and "compute_peak=" in w


# ------------------------------------------------------------------ the CPU's

def test_the_cpu_holds_bf16_against_float32_fma_without_native_instructions(monkeypatch):
    monkeypatch.setattr(peaks, "cpu_flags", lambda path="/proc/cpuinfo": {"avx2", "fma"})
    # this host's own `kbench peaks` cache may hold a native bf16 ceiling (an AMX host does)
    monkeypatch.setattr(peaks, "load_cached_peaks", lambda path=None: None)
    fma = {"bytes_per_s": 1e10, "flops_per_s": 1e11, "flops_name": "CPU FMA float32"}
    extra = {}
    a = mat(BF16)
    got = ceilings.cpu_ceilings(None, (a, a), {}, None, lambda dtype: dict(fma, dtype=dtype),
                                extra)
    assert got["dtype"] == "float32" and got["flops_per_s"] == 1e11
    assert extra["compute_peak"]["name"] == "fp32"
    assert "no native bf16 instructions (avx512_bf16 or amx_bf16)" in extra["compute_peak"]["why"]


def test_the_cpu_uses_its_measured_native_ceiling(monkeypatch):
    monkeypatch.setattr(peaks, "cpu_flags", lambda path="/proc/cpuinfo": {"amx_bf16"})
    record = {"native": {"bf16": {"best_GFLOPs": 5000.0, "method": "torch.matmul",
                                  "flags": ["amx_bf16"]}}}
    monkeypatch.setattr(peaks, "load_cached_peaks", lambda path=None: record)
    extra = {}
    a = mat(BF16)
    got = ceilings.cpu_ceilings(None, (a, a), {}, None, lambda dtype: {"flops_per_s": 1e11},
                                extra)
    assert got["flops_per_s"] == 5e12 and got["flops_name"] == "CPU bf16 GEMM (amx_bf16)"
    assert extra["compute_peak"]["name"] == "bf16"
    # float64 arrays anywhere: numpy computes in float64
    got = ceilings.cpu_compute_peak(lambda: a @ a, (np.ones(3),), {})
    assert got["fma_dtype"] == "float64"


def test_kbench_peaks_records_why_the_cpu_has_no_native_ceiling():
    d = peaks._native(0.01, 1, 2, 100.0, flags={"avx2"})
    assert set(d) == {"bf16", "fp16"}
    assert "no native bf16 instructions" in d["bf16"]["absent"]
    table = peaks.peaks_table({"stream": {}, "native": d})
    assert "bf16     none: this CPU has no native bf16" in table


def test_a_cpu_bench_of_a_closure_names_its_ceiling():
    a = np.ones((32, 32))
    r = kbench.bench(lambda: a @ a, flops=2 * 32 ** 3, max_time_s=0.1, warmup_s=0.0,
                     memory=False)
    assert r.extra["compute_peak"]["name"] == "fp64"
    assert "captured 'a'" in r.extra["compute_peak"]["why"]
    assert dict(r._rows())["Ceiling"].startswith("fp64 FMA (float64 arrays")


# ------------------------------------------------------------------ kbench peaks, the roofline

def test_the_gpu_peaks_record_names_every_absent_precision(monkeypatch, tmp_path):
    """measure_gpu_peaks without torch (this machine): the FMA ceilings measured (faked here),
    every torch GEMM absent with the reason, the datasheet beside them, schema 2."""
    import sys
    from kbench.roofline import peaks_gpu
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)          # import torch raises
    monkeypatch.setattr(cuda, "device_info", lambda o: dict(H100, sm_count=132))
    monkeypatch.setattr(cuda, "stream_handle", lambda s, o, t=True: 0)
    monkeypatch.setattr(peaks_gpu, "_copy_ceiling", lambda *a: {"hbm_bytes_per_s": 3.0e12,
                                                                "hbm_copy": {"method": "x"}})
    rates = {"kb_fma": 60e12, "kb_fma_f64": 30e12}
    monkeypatch.setattr(peaks_gpu, "_fma_ceiling", lambda dev, info, s, kname, *a: {
        "flops": rates[kname], "median_s": 1.0, "kernel": kname})
    d = peaks_gpu.measure_gpu_peaks(0)
    assert d["schema"] == "kbench.gpu_peaks/2" == peaks.GPU_SCHEMA
    assert d["fp32_flops_per_s"] == 60e12 and d["fp64_flops_per_s"] == 30e12
    assert set(d["absent"]) == set(peaks_gpu.TORCH_GEMMS) | {"fp4"}
    assert "PyTorch is not installed" in d["absent"]["bf16"]
    assert d["datasheet"]["name"] == "H100 SXM"
    assert peaks.load_gpu_peaks(H100)["fp64_flops_per_s"] == 30e12
    table = peaks_gpu.gpu_peaks_table(d)
    assert "  fp64           30.0 TFLOP/s      34.0 TFLOP/s  88% of datasheet; kb_fma_f64" in table
    assert "  bf16         absent             989.5 TFLOP/s  PyTorch is not installed" in table
    assert "datasheet: H100 SXM -- NVIDIA H100 Tensor Core GPU datasheet" in table


def test_the_roofline_draws_each_precisions_ceiling():
    import matplotlib
    matplotlib.use("Agg")
    from kbench.report.result import Result
    from kbench.workflow.sweep import SweepResult
    results, rows = [], []
    for i, (prec, peak) in enumerate((("bf16", 780e12), ("fp32", 60e12), ("fp8_e4m3", None))):
        tp = {"flops_per_s": 50e12 * (i + 1)}
        if peak:
            tp.update(peak_flops_per_s=peak, peak_flops_name=f"GPU {ceilings.LABELS[prec]}")
        else:
            tp.update(datasheet_flops_per_s=1979e12, datasheet={"name": "H100 SXM"})
        results.append(Result(name=prec, device="cuda:0", backend="cupti",
                              samples=np.full(4, 1e-3), stats=kbench._core.summarize(
                                  np.full(4, 1e-3), 0.95), stop={}, cold_cache={},
                              throughput=tp))
        rows.append({"dtype": prec})
    sw = SweepResult(axes={"dtype": [r["dtype"] for r in rows]}, cases=rows, results=results)
    ax = sw.plot(x="dtype", y="flops_per_s")
    labels = ax.get_legend_handles_labels()[1]
    assert "measured GPU bf16 GEMM peak 780 TFLOP/s" in labels
    assert "measured GPU fp32 FMA peak 60 TFLOP/s" in labels
    assert "H100 SXM datasheet peak 1.98e+03 TFLOP/s" in labels
