"""CPU reference kernels (STREAM copy/triad, FMA loop), host metadata and `kbench peaks`."""
import array
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kbench import _core
from kbench.provenance import metadata
from kbench.roofline import peaks

# Lengths around the vector widths (2, 4, 8 doubles) and the 8-element thread grain, plus
# one big enough that every thread gets a vector body and a scalar tail.
LENGTHS = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 1000, 100_003,
           # the STREAM kernels run in blocks of 2^17 elements: one past a block, and
           # several blocks a thread with a short last one
           (1 << 17) + 1, 7 * (1 << 17) + 5]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ------------------------------------------------------------------ stream_copy

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_copy_equals_source(rng, n, threads):
    src = rng.standard_normal(n)
    dst = np.full(n, np.nan)
    assert _core.stream_copy(dst, src, threads=threads) is None
    np.testing.assert_array_equal(dst, src)


def test_copy_keeps_nan_inf_and_signed_zero_bits():
    src = np.array([np.nan, np.inf, -np.inf, -0.0, 5e-324, 1.7976931348623157e308] * 5)
    dst = np.zeros_like(src)
    _core.stream_copy(dst, src)
    assert dst.tobytes() == src.tobytes()


def test_copy_does_not_write_past_the_destination():
    backing = np.full(40, 7.0)
    dst = backing[8:29]           # C-contiguous slice with neighbours on both sides
    _core.stream_copy(dst, np.arange(21, dtype=np.float64), threads=2)
    np.testing.assert_array_equal(backing[:8], 7.0)
    np.testing.assert_array_equal(backing[29:], 7.0)
    np.testing.assert_array_equal(dst, np.arange(21))


def test_copy_accepts_any_float64_buffer_and_2d_contiguous():
    src = array.array("d", [1.5, -2.0, 3.25])
    dst = bytearray(24)
    _core.stream_copy(memoryview(dst).cast("d"), src)
    assert array.array("d", bytes(dst)).tolist() == [1.5, -2.0, 3.25]
    a2 = np.arange(12, dtype=np.float64).reshape(3, 4)
    out = np.empty((3, 4))
    _core.stream_copy(out, a2)
    np.testing.assert_array_equal(out, a2)


def test_copy_onto_itself_is_allowed():
    a = np.arange(100, dtype=np.float64)
    _core.stream_copy(a, a, threads=2)
    np.testing.assert_array_equal(a, np.arange(100))


# ------------------------------------------------------------------ stream_triad

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_triad_equals_numpy_bit_for_bit(rng, n, threads):
    b = rng.standard_normal(n)
    c = rng.standard_normal(n) * 1e3
    a = np.full(n, np.nan)
    s = 0.1 + 1e-9              # not a power of two: rounding of s*c matters
    _core.stream_triad(a, b, c, s, threads=threads)
    expected = b + s * c        # two roundings; a fused multiply-add would differ in the last bit
    assert a.tobytes() == expected.tobytes()


def test_triad_is_not_a_fused_multiply_add(rng):
    # Guard that the bit-for-bit test can fail: on these inputs a single-rounding FMA (emulated
    # in extended precision) differs from numpy's two roundings, and the kernel matches numpy.
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("no extended precision to emulate a fused multiply-add")
    b = rng.standard_normal(10_000)
    c = rng.standard_normal(10_000)
    s = 0.1
    ld = np.longdouble
    fused = (b.astype(ld) + ld(s) * c.astype(ld)).astype(np.float64)
    two_roundings = b + s * c
    assert not np.array_equal(fused, two_roundings)
    a = np.empty_like(b)
    _core.stream_triad(a, b, c, s, threads=2)
    np.testing.assert_array_equal(a, two_roundings)


def test_triad_in_place_on_b_and_on_c(rng):
    b = rng.standard_normal(1001)
    c = rng.standard_normal(1001)
    expected = b + 2.5 * c
    bb = b.copy()
    _core.stream_triad(bb, bb, c, 2.5, threads=2)
    np.testing.assert_array_equal(bb, expected)
    cc = c.copy()
    _core.stream_triad(cc, b, cc, 2.5, threads=2)
    np.testing.assert_array_equal(cc, expected)


def test_triad_scalar_accepts_int_and_rejects_str():
    a, b, c = np.empty(4), np.ones(4), np.arange(4.0)
    _core.stream_triad(a, b, c, 2)
    np.testing.assert_array_equal(a, 1 + 2 * np.arange(4.0))
    with pytest.raises(TypeError):
        _core.stream_triad(a, b, c, "2")


# ------------------------------------------------------------------ bad input

def _readonly(n=8):
    x = np.zeros(n)
    x.setflags(write=False)
    return x


@pytest.mark.parametrize("fn,args,exc,words", [
    (_core.stream_copy, (np.zeros(8, np.float32), np.zeros(8)), TypeError, ["dst", "float64"]),
    (_core.stream_copy, (np.zeros(8), np.zeros(8, np.int64)), TypeError, ["src", "float64"]),
    (_core.stream_copy, (np.zeros(8), [1.0] * 8), TypeError, ["src", "list"]),
    (_core.stream_copy, (None, np.zeros(8)), TypeError, ["dst"]),
    (_core.stream_copy, (bytearray(64), np.zeros(8)), TypeError, ["dst", "float64"]),
    (_core.stream_copy, (_readonly(), np.zeros(8)), ValueError, ["dst", "read-only"]),
    (_core.stream_copy, (memoryview(bytes(64)).cast("d"), np.zeros(8)), ValueError,
     ["dst", "read-only"]),
    (_core.stream_copy, (bytes(64), np.zeros(8)), TypeError, ["dst", "float64"]),
    (_core.stream_copy, (np.zeros(8), np.zeros(9)), ValueError, ["same length", "8", "9"]),
    (_core.stream_copy, (np.zeros(8), np.zeros(16)[::2]), ValueError, ["src", "contiguous"]),
    (_core.stream_copy, (np.zeros((4, 4)).T, np.zeros(16)), ValueError, ["dst", "contiguous"]),
    (_core.stream_triad, (np.zeros(8), np.zeros(8, np.complex64), np.zeros(8), 1.0),
     TypeError, ["b", "float64"]),
    (_core.stream_triad, (np.zeros(8), np.zeros(8), np.zeros(16)[::2], 1.0),
     ValueError, ["c", "contiguous"]),
    (_core.stream_triad, (_readonly(), np.zeros(8), np.zeros(8), 1.0), ValueError,
     ["a", "read-only"]),
    (_core.stream_triad, (np.zeros(8), np.zeros(8), np.zeros(7), 1.0), ValueError,
     ["a", "c", "same length"]),
    (_core.stream_triad, (np.zeros(8), np.zeros(7), np.zeros(8), 1.0), ValueError,
     ["a", "b", "same length"]),
])
def test_bad_input_raises_naming_the_problem(fn, args, exc, words):
    with pytest.raises(exc) as info:
        fn(*args)
    msg = str(info.value)
    for w in words:
        assert w in msg, (w, msg)


def test_readonly_source_is_fine():
    dst = np.zeros(8)
    _core.stream_copy(dst, _readonly())
    _core.stream_triad(dst, _readonly(), _readonly(), 2.0)
    np.testing.assert_array_equal(dst, 0.0)


def test_big_endian_float64_is_rejected():
    other = ">f8" if sys.byteorder == "little" else "<f8"
    with pytest.raises(TypeError, match="src"):
        _core.stream_copy(np.zeros(4), np.zeros(4, dtype=other))


def test_partial_overlap_is_rejected_and_leaves_data_alone():
    x = np.arange(20, dtype=np.float64)
    with pytest.raises(ValueError, match="overlap"):
        _core.stream_copy(x[1:11], x[0:10])
    with pytest.raises(ValueError, match="overlap"):
        _core.stream_triad(x[0:10], x[5:15], np.zeros(10), 1.0)
    np.testing.assert_array_equal(x, np.arange(20))


@pytest.mark.parametrize("threads", [-1, 0, 1025])
def test_thread_count_out_of_range(threads):
    with pytest.raises(ValueError, match="threads"):
        _core.stream_copy(np.zeros(4), np.zeros(4), threads=threads)
    with pytest.raises(ValueError, match="threads"):
        _core.fma_loop(10, threads=threads)


def test_buffer_exports_are_released_on_success_and_on_error():
    # memoryview.release() raises BufferError while anyone still holds an export of it.
    for src_len in (8, 9):           # 9: length mismatch, raised after both views were taken
        dst = memoryview(bytearray(64)).cast("d")
        src = memoryview(np.ones(src_len))
        if src_len == 8:
            _core.stream_copy(dst, src, threads=2)
            assert dst.tolist() == [1.0] * 8
        else:
            with pytest.raises(ValueError, match="same length"):
                _core.stream_copy(dst, src)
        dst.release()
        src.release()


def test_many_errors_leave_the_process_usable():
    x = np.zeros(8)
    for _ in range(1000):
        with pytest.raises(ValueError):
            _core.stream_triad(x, np.zeros(8), np.zeros(16)[::2], 1.0)
    _core.stream_triad(x, np.ones(8), np.ones(8), 1.0)
    np.testing.assert_array_equal(x, 2.0)


# ------------------------------------------------------------------ fma_loop

def test_fma_isa_names():
    isas = _core.fma_loop_isas()
    assert isas[-1] == "generic"
    assert _core.fma_loop_isa() == isas[0]
    assert len(set(isas)) == len(isas)
    assert set(isas) <= {"avx512f", "avx2+fma", "generic"}


def test_fma_isa_matches_cpuinfo():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags")
    if "avx512f" in flags:
        expected = "avx512f"
    elif "avx2" in flags and "fma" in flags:
        expected = "avx2+fma"
    else:
        expected = "generic"
    assert _core.fma_loop_isa() == expected


# lanes x accumulators x 2, written out independently of the C table
EXPECTED_FLOPS_PER_ITER = {"avx512f": 8 * 16 * 2, "avx2+fma": 4 * 12 * 2, "generic": 2 * 8 * 2}


@pytest.mark.parametrize("isa", _core.fma_loop_isas())
@pytest.mark.parametrize("n_iter,threads", [(0, 1), (1, 1), (1000, 1), (1001, 2), (3, 8)])
def test_fma_flop_count_is_exact(isa, n_iter, threads):
    flops = _core.fma_loop(n_iter, threads=threads, isa=isa)
    assert isinstance(flops, float)
    assert np.isfinite(flops)
    assert flops == n_iter * EXPECTED_FLOPS_PER_ITER[isa]
    assert _core.fma_loop_flops_per_iter(isa) == EXPECTED_FLOPS_PER_ITER[isa]


@pytest.mark.parametrize("isa", _core.fma_loop_isas())
def test_fma_float32_runs_twice_the_lanes_of_float64(isa):
    """A vector register holds twice as many float32 lanes: the float32 loop counts (and, being
    the same instructions, does) twice the FLOPs per iteration, and its checksum stays finite."""
    per64 = EXPECTED_FLOPS_PER_ITER[isa]
    assert _core.fma_loop_flops_per_iter(isa, "float32") == 2 * per64
    assert _core.fma_loop_flops_per_iter(isa, dtype="float64") == per64
    assert _core.fma_loop(1001, threads=2, isa=isa, dtype="float32") == 1001 * 2 * per64
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32', got 'float16'"):
        _core.fma_loop(1, isa=isa, dtype="float16")
    with pytest.raises(ValueError, match="dtype must be"):
        _core.fma_loop_flops_per_iter(isa, "int8")


def test_fma_default_isa_and_positional_threads():
    per_iter = EXPECTED_FLOPS_PER_ITER[_core.fma_loop_isa()]
    assert _core.fma_loop(100) == 100 * per_iter
    assert _core.fma_loop(100, 2) == 100 * per_iter
    assert _core.fma_loop_flops_per_iter() == per_iter


def test_fma_more_iterations_take_longer():
    import time
    def t(n):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            _core.fma_loop(n)
            best = min(best, time.perf_counter() - t0)
        return best
    # the work is not optimized away: 64x the iterations cannot be as fast
    assert t(1 << 20) > t(1 << 14)


def test_fma_bad_arguments():
    with pytest.raises(ValueError, match="n_iter"):
        _core.fma_loop(-1)
    with pytest.raises(TypeError):
        _core.fma_loop(1.5)
    with pytest.raises(ValueError, match="unknown isa 'sse9'"):
        _core.fma_loop(1, isa="sse9")
    with pytest.raises(ValueError, match="unknown isa"):
        _core.fma_loop_flops_per_iter("sse9")
    unsupported = {"avx512f", "avx2+fma"} - set(_core.fma_loop_isas())
    for isa in unsupported:
        with pytest.raises(ValueError, match="not supported"):
            _core.fma_loop(1, isa=isa)


def test_kernels_release_the_gil():
    import threading
    import time
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    n = 1 << 22
    per_iter = EXPECTED_FLOPS_PER_ITER[_core.fma_loop_isa()]
    t0 = time.perf_counter()
    _core.fma_loop(n)
    single = time.perf_counter() - t0
    n = max(int(n * 0.2 / max(single, 1e-6)), n)     # aim at ~0.2 s
    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.01)
    before = len(ticks)
    assert _core.fma_loop(n) == n * per_iter
    during = len(ticks) - before
    stop.set()
    th.join()
    assert during >= 5        # the ticker ran while fma_loop was in C


# ------------------------------------------------------------------ metadata

META_KEYS = {"timestamp_utc", "hostname", "cpu_model", "cpu_hypervisor", "cpu_count", "cpu_affinity", "caches",
             "cache_sizes", "system", "release", "machine", "platform", "python_version",
             "numpy_version", "kbench_version", "git", "argv", "cwd", "env"}


def test_metadata_keys_and_values():
    m = metadata.collect_host_metadata()
    assert META_KEYS <= set(m)
    assert m["cpu_count"] == os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        assert m["cpu_affinity"] == len(os.sched_getaffinity(0))
    assert m["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert m["numpy_version"] == np.__version__
    assert m["argv"] == sys.argv
    assert m["timestamp_utc"].endswith("+00:00")
    json.dumps(m)                             # serializable as is


def test_metadata_env_filter(monkeypatch):
    monkeypatch.setenv("KBENCH_FOO", "1")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("MY_SECRET_TOKEN", "x")
    env = metadata.collect_host_metadata()["env"]
    assert env["KBENCH_FOO"] == "1"
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert env["OMP_NUM_THREADS"] == "3"
    assert "MY_SECRET_TOKEN" not in env
    assert metadata.relevant_env({"PATH": "/bin", "TRITON_CACHE_DIR": "/t", "LD_PRELOAD": "x.so",
                                  "XCUDA_Y": "no"}) == {"LD_PRELOAD": "x.so",
                                                        "TRITON_CACHE_DIR": "/t"}


def test_a_credential_in_the_environment_is_never_recorded():
    # NVIDIA_API_KEY (NGC/NIM keys) matched the NVIDIA_ prefix and went into every result's JSON
    env = metadata.relevant_env({"NVIDIA_API_KEY": "nvapi-s3cr3t", "KBENCH_UPLOAD_TOKEN": "t0k",
                                 "CUDA_SECRET_PASSWORD": "pw", "CUDA_VISIBLE_DEVICES": "0"})
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert set(env) == {"NVIDIA_API_KEY", "KBENCH_UPLOAD_TOKEN", "CUDA_SECRET_PASSWORD",
                        "CUDA_VISIBLE_DEVICES"}
    assert not {"nvapi-s3cr3t", "t0k", "pw"} & set(env.values())
    assert env["NVIDIA_API_KEY"] == metadata.SECRET_MASK


def test_metadata_outside_git_never_raises(tmp_path, monkeypatch):
    monkeypatch.delenv("KBENCH_GIT_COMMIT", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    m = metadata.collect_host_metadata()
    assert m["git"] is None
    assert metadata.git_info(str(tmp_path)) is None


def test_metadata_without_git_binary(monkeypatch):
    monkeypatch.delenv("KBENCH_GIT_COMMIT", raising=False)
    monkeypatch.setenv("PATH", "")
    assert metadata.git_info() is None
    assert META_KEYS <= set(metadata.collect_host_metadata())


def test_metadata_in_a_git_repo(tmp_path, monkeypatch):
    monkeypatch.delenv("KBENCH_GIT_COMMIT", raising=False)

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    try:
        git("init", "-q")
        (tmp_path / "f.txt").write_text("one\n")
        git("add", "f.txt")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git unavailable")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()
    info = metadata.git_info(str(tmp_path))
    assert info == {"commit": head, "dirty": False}
    (tmp_path / "f.txt").write_text("two\n")
    assert metadata.git_info(str(tmp_path)) == {"commit": head, "dirty": True}


def test_metadata_commit_given_by_the_environment(tmp_path, monkeypatch):
    # a copied tree whose .git lags (or has none) records the commit its sender names
    monkeypatch.setenv("KBENCH_GIT_COMMIT", "abc123")
    assert metadata.git_info(str(tmp_path)) == {"commit": "abc123", "dirty": None,
                                                 "source": "KBENCH_GIT_COMMIT"}
    assert metadata.collect_host_metadata()["git"]["commit"] == "abc123"


def test_cpu_caches_from_a_fake_sysfs(tmp_path):
    for i, (level, ctype, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                              (2, "Unified", "2048K"), (3, "Unified", "300M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{ctype}\n")
        (d / "size").write_text(f"{size}\n")
    (tmp_path / "index9").mkdir()        # incomplete entry: skipped
    caches = metadata.cpu_caches(str(tmp_path))
    assert metadata.cache_sizes_by_level(caches) == {
        "L1d": 48 * 1024, "L1i": 32 * 1024, "L2": 2048 * 1024, "L3": 300 * 1024 * 1024}
    assert metadata.cpu_caches(str(tmp_path / "missing")) == []


def test_cpu_model_parsing(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 207\n"
                   "model name\t: Intel(R) Xeon(R) Fake 9999\n\nprocessor\t: 1\n")
    assert metadata.cpu_model(str(x86)) == "Intel(R) Xeon(R) Fake 9999"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n\nHardware\t: Fake SoC\n")
    assert metadata.cpu_model(str(arm)) == "Fake SoC"
    assert isinstance(metadata.cpu_model(str(tmp_path / "missing")), str)


def test_cpu_hypervisor_flag(tmp_path):
    vm, metal, arm = tmp_path / "vm", tmp_path / "metal", tmp_path / "arm"
    vm.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor avx2\n")
    metal.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 avx2 hypervisorless\n")
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert metadata.cpu_hypervisor(str(vm)) is True
    assert metadata.cpu_hypervisor(str(metal)) is False    # a whole word, not a prefix
    assert metadata.cpu_hypervisor(str(arm)) is None
    assert metadata.cpu_hypervisor(str(tmp_path / "missing")) is None


def test_import_is_lazy():
    # subprocess, socket, statistics and importlib.metadata are imported only when used.
    code = ("import sys, kbench; before = set(sys.modules); "
            "import kbench.provenance.metadata, kbench.roofline.peaks; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    new = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True).stdout.split())
    assert {"kbench.provenance.metadata", "kbench.roofline.peaks"} <= new
    assert not new & {"subprocess", "socket", "statistics", "importlib.metadata"}


# ------------------------------------------------------------------ peaks

@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_measure_cpu_peaks_small(cache_dir):
    d = peaks.measure_cpu_peaks(seconds=0.05, threads=2, array_bytes=1 << 20, max_repeats=5)
    assert d["copy_GBps"] > 0 and d["triad_GBps"] > 0 and d["fma_GFLOPs"] > 0
    for name, per_elem in (("copy", 16), ("triad", 24)):
        k = d["stream"][name]
        assert k["bytes_per_call"] == per_elem * (1 << 20) // 8
        assert 3 <= k["repeats"] <= 5
        assert k["best_GBps"] >= k["median_GBps"] > 0
        # best is the fastest call, counted as STREAM counts bytes
        assert k["best_GBps"] == pytest.approx(k["bytes_per_call"] / min(k["times_s"]) / 1e9)
    f = d["fma"]
    assert f["flops_per_call"] == f["n_iter"] * EXPECTED_FLOPS_PER_ITER[f["isa"]]
    assert f["best_GFLOPs"] >= f["median_GFLOPs"] > 0 and f["dtype"] == "float64"
    f32 = d["fma_fp32"]
    assert f32["flops_per_call"] == f32["n_iter"] * 2 * EXPECTED_FLOPS_PER_ITER[f32["isa"]]
    assert d["fma_fp32_GFLOPs"] == f32["best_GFLOPs"] > 0 and f32["dtype"] == "float32"
    assert d["threads"] == 2
    assert META_KEYS <= set(d["metadata"])
    # saved, and loads back equal. A busy host, or a 50 ms budget's disagreeing repeats, makes
    # the measurement refused: such a record is not cached, by design (test_cli_peaks tests
    # the rule with set numbers; this host's load is whatever it is)
    path = peaks.peaks_cache_path()
    assert os.path.dirname(path) == str(cache_dir)
    assert os.path.basename(path).startswith("peaks-") and path.endswith(".json")
    disturbed = bool(d["refused"])
    assert d["saved_to"] == (None if disturbed else path)
    if disturbed:
        assert d["not_saved"].startswith("not saved: ")
        assert peaks.load_cached_peaks() is None
        peaks.save_peaks(d)                 # the measured record still round-trips
    assert peaks.load_cached_peaks() == json.loads(json.dumps(d))
    table = peaks.peaks_table(d)
    assert "copy" in table and "triad" in table and "fma f64" in table and "fma f32" in table


def test_measure_cpu_peaks_no_save(cache_dir):
    peaks.measure_cpu_peaks(seconds=0.01, threads=1, array_bytes=64 << 10, save=False)
    assert peaks.load_cached_peaks() is None
    assert list(cache_dir.iterdir()) == []


def test_measure_cpu_peaks_rejects_bad_arguments(cache_dir):
    with pytest.raises(ValueError, match="seconds"):
        peaks.measure_cpu_peaks(seconds=0)
    with pytest.raises(ValueError, match="threads"):
        peaks.measure_cpu_peaks(seconds=0.01, threads=0)
    with pytest.raises(ValueError, match="array_bytes"):
        peaks.measure_cpu_peaks(seconds=0.01, array_bytes=4)


def test_load_cached_peaks_ignores_garbage(cache_dir):
    path = peaks.peaks_cache_path()
    with open(path, "w") as f:
        f.write("{not json")
    # ignored, and said so once, naming the file and why
    with pytest.warns(peaks.PeaksCacheWarning, match="not JSON") as w:
        assert peaks.load_cached_peaks() is None
    assert path in str(w[0].message)
    with open(path, "w") as f:
        json.dump({"schema": 999}, f)
    with pytest.warns(peaks.PeaksCacheWarning, match="schema 999, expected"):
        assert peaks.load_cached_peaks() is None


def test_cache_path_sanitizes_hostname(cache_dir):
    p = peaks.peaks_cache_path("we/ird host")
    assert os.path.basename(p) == "peaks-we_ird_host.json"
    assert os.path.dirname(p) == str(cache_dir)


def test_default_array_bytes_follow_llc_and_memory(monkeypatch):
    monkeypatch.setenv("KBENCH_LLC_BYTES", str(300 << 20))
    monkeypatch.setattr(peaks, "mem_available_bytes", lambda: 64 << 30)
    assert peaks.default_array_bytes() == (4 * (300 << 20)) // 3
    monkeypatch.setattr(peaks, "mem_available_bytes", lambda: 2 << 30)
    assert peaks.default_array_bytes() == (2 << 30) // 4 // 3          # capped at 25%
    monkeypatch.setenv("KBENCH_LLC_BYTES", str(1 << 20))
    monkeypatch.setattr(peaks, "mem_available_bytes", lambda: 64 << 30)
    assert peaks.default_array_bytes() == (256 << 20) // 3             # floor of 256 MiB total


def test_llc_from_core_info_shapes():
    assert peaks._llc_from_core_info({"llc_bytes": 123}) == 123
    assert peaks._llc_from_core_info({"L1d": 1, "L2": 5, "L3": 9}) == 9
    assert peaks._llc_from_core_info([{"type": "Data", "size_bytes": 4},
                                      {"type": "Unified", "size_bytes": 40},
                                      {"type": "Instruction", "size_bytes": 400}]) == 40
    assert peaks._llc_from_core_info("nonsense") == 0


def test_a_credential_on_the_command_line_is_never_recorded():
    argv = ["run.py", "--api-key=nvapi-s3cr3t", "--token", "t0k", "--n", "4", "-v"]
    assert metadata.command_line(argv) == ["run.py", f"--api-key={metadata.SECRET_MASK}",
                                           "--token", metadata.SECRET_MASK, "--n", "4", "-v"]
