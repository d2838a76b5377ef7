"""device='auto': a GPU from the arguments, or from what the callable carries (closure cells,
the module globals its code names, a partial's arguments, a bound method's attributes), so a
script's `kbench.bench(lambda: torch.mm(a, b, out=c))` is timed on the GPU, not as a
host-timed launch. Stand-ins for GPU tensors: no GPU is needed."""
import functools

import numpy as np
import pytest

import kbench
from kbench.backends import cuda
from kbench.measure.prepare import choose_device, gpu_carried, resolve_device
from kbench.report.result import Result


class _CudaDevice:
    type = "cuda"

    def __init__(self, index):
        self.index = index


class FakeGpuTensor:
    """What kbench reads of a torch CUDA tensor: .device.type and .device.index."""

    def __init__(self, index=1):
        self.device = _CudaDevice(index)


A = FakeGpuTensor(1)
HOST = np.ones(8)


def _helper():
    return A


class Layer:
    def __init__(self):
        self.weight = FakeGpuTensor(0)
        self.unused = FakeGpuTensor(3)

    def forward(self):
        return self.weight

    def host_only(self):
        return 1

    def __call__(self):
        return self.weight


def _closure_over(x):
    return lambda: x


class Op:
    """A method that benches a lambda over self: the tensors are self's attributes."""

    def __init__(self):
        self.a = FakeGpuTensor(2)

    def timed(self):
        return lambda: self.a


HOLDER = Op()


class NumbaLikeDeviceArray:
    """A CUDA Array Interface producer with neither .device nor DLPack (Numba's arrays)."""
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False),
                                "version": 3}


class CpuTensorLike:
    """torch's CPU tensor: the interface's property raises."""
    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")


D_X = NumbaLikeDeviceArray()
C_X = CpuTensorLike()


CASES = [
    ("a module global the lambda names", lambda: A, "global 'A'", "cuda:1"),
    ("a closure cell", _closure_over(FakeGpuTensor(2)), "captured 'x'", "cuda:2"),
    ("a partial's argument", functools.partial(print, A), "partial argument 0", "cuda:1"),
    ("a default argument", lambda t=FakeGpuTensor(0): t, "default argument 0", "cuda:0"),
    ("a global of a function it calls", lambda: _helper(), "global 'A'", "cuda:1"),
    ("a list it names", lambda: [A][0], "global 'A'", "cuda:1"),
    ("the attribute a bound method reads", Layer().forward, "attribute 'weight'", "cuda:0"),
    ("the attribute a callable object reads", Layer(), "attribute 'weight'", "cuda:0"),
    ("self's attribute in a lambda made by a method", Op().timed(), "self.a", "cuda:2"),
    ("a global object's attribute the lambda reads", lambda: HOLDER.a, "HOLDER.a", "cuda:2"),
    ("a CUDA Array Interface producer", lambda: D_X, "global 'D_X'", "cuda"),
]


@pytest.mark.parametrize("fn,label,device", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_auto_finds_the_gpu_object_a_callable_carries(fn, label, device):
    found = gpu_carried(fn)
    assert found is not None and found[0] == label
    assert resolve_device("auto", (), {}, fn) == device


@pytest.mark.parametrize("fn", [lambda: np.add(HOST, HOST), np.add, abs, print,
                                Layer().host_only, _closure_over(HOST), lambda: C_X],
                         ids=["numpy global", "ufunc", "builtin", "print", "method reading "
                              "no GPU attribute", "closure over a host array",
                              "a CPU tensor's raising interface"])
def test_host_callables_stay_on_the_cpu(fn):
    assert gpu_carried(fn) is None
    assert resolve_device("auto", (), {}, fn) == "cpu"


def test_arguments_and_an_explicit_device_come_first():
    assert resolve_device("auto", (FakeGpuTensor(0),), {}, lambda: A) == "cuda:0"
    assert resolve_device("cpu", (), {}, lambda: A) == "cpu"
    assert resolve_device("cuda:3", (), {}, lambda: A) == "cuda:3"
    assert resolve_device("auto", (), {}) == "cpu"          # no fn: arguments alone
    # what chose the GPU travels with the device only where fn's carried tensor did
    assert choose_device("auto", (), {}, lambda: A)[1][0] == "global 'A'"
    assert choose_device("auto", (FakeGpuTensor(0),), {}, lambda: A) == ("cuda:0", None)


def test_bench_times_a_closure_over_gpu_tensors_on_the_gpu_and_says_why(monkeypatch):
    """The CUDA backend is asked (a stand-in records the device it got) and the result names
    what chose it; before, the closure was timed on the host clock with a warning."""
    class Chosen(Exception):
        pass

    def fake_run(fn, sets, kwargs, **options):
        raise Chosen(options["device"])

    monkeypatch.setattr(cuda, "run", fake_run)
    with pytest.raises(Chosen, match="cuda:1"):
        kbench.bench(lambda: A, memory=False)
    r = Result(name="f", device="cuda:1", backend="cupti", samples=np.full(20, 1e-3),
               stats=kbench._core.summarize(np.full(20, 1e-3), 0.95), stop={"stop": "precision"},
               cold_cache={"mode": "flush", "cache_bytes": 1 << 20},
               extra={"device_from": "global 'A' of f (Tensor on cuda:1); device='cpu' times "
                                     "it on the host instead"})
    rows = dict(r._rows())
    assert rows["Device"].startswith("cuda:1, chosen from global 'A' of f")


class _CupyDevice:
    def __init__(self, id):
        self.id = id


class CupyLikeArray:
    """What kbench reads of a CuPy array: its module, and .device.id (CuPy's Device has no
    .index)."""
    __module__ = "cupy._core.core"

    def __init__(self, id):
        self.device = _CupyDevice(id)


class DLPackOnly:
    def __init__(self, kind, id):
        self._dev = (kind, id)

    def __dlpack_device__(self):
        return self._dev


def test_the_gpu_an_argument_lives_on_is_read_from_any_framework():
    # a CuPy array on GPU 1 once read 'cuda' (the current device: 0) and was timed there
    assert resolve_device("auto", (CupyLikeArray(1),), {}) == "cuda:1"
    assert resolve_device("auto", (DLPackOnly(2, 3),), {}) == "cuda:3"
    assert resolve_device("auto", (NumbaLikeDeviceArray(),), {}) == "cuda"  # says no device
    # 'cuda' names the arguments' GPU, not the current device
    assert resolve_device("cuda", (FakeGpuTensor(1),), {}) == "cuda:1"
    assert resolve_device("cuda", (), {}) == "cuda"


def test_an_explicit_device_other_than_the_arguments_is_refused():
    with pytest.raises(ValueError, match=r"device='cuda:0', but the arguments live on cuda:1"):
        resolve_device("cuda:0", (FakeGpuTensor(1),), {})
    with pytest.raises(ValueError, match="live on cuda:1"):
        resolve_device("cuda:0", (), {"x": CupyLikeArray(1)})
    assert resolve_device("cuda:1", (FakeGpuTensor(1),), {}) == "cuda:1"
