"""Which stream a GPU bench times on, and which framework's current stream it sets, when torch
and CuPy are both in the process: fake torch/cupy modules, no GPU."""
import sys
import types

import pytest

from kbench.backends import cuda


class _Stack:
    """A framework's current stream: a stack of handles, the legacy default (0) at its base."""

    def __init__(self):
        self.handles = [0]

    def use(self, h):
        stack = self

        class Use:          # a class, as torch's StreamContext: nothing restores it but __exit__
            def __enter__(self):
                stack.handles.append(h)

            def __exit__(self, *exc):
                stack.handles.pop()

        return Use()


def fake_torch():
    st = _Stack()
    torch = types.ModuleType("torch")
    cudam = types.SimpleNamespace()

    class Stream:
        def __init__(self, h):
            self.cuda_stream = h

    class ExternalStream(Stream):
        def __init__(self, h, device=None):
            super().__init__(h)

    class Tensor:
        pass

    cudam.Stream = Stream
    cudam.ExternalStream = ExternalStream
    cudam.is_initialized = lambda: True
    cudam.current_stream = lambda ordinal=None: Stream(st.handles[-1])
    cudam.default_stream = lambda ordinal=None: Stream(0)
    cudam.stream = lambda s: st.use(s.cuda_stream)
    torch.cuda = cudam
    torch.Tensor = Tensor
    return torch, st


def fake_cupy():
    st = _Stack()
    cupy = types.ModuleType("cupy")

    class Stream:
        def __init__(self, h):
            self.ptr = h

        def __enter__(self):
            st.handles.append(self.ptr)
            return self

        def __exit__(self, *exc):
            st.handles.pop()

    Stream.__module__ = "cupy.cuda.stream"
    Stream.null = Stream(0)

    class ExternalStream(Stream):
        def __init__(self, h, device_id=-1):
            super().__init__(h)

    ExternalStream.__module__ = "cupy.cuda.stream"

    class ndarray:
        pass

    ndarray.__module__ = "cupy"

    class Device:
        def __init__(self, ordinal):
            self.ordinal = ordinal

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    cupy.cuda = types.SimpleNamespace(Stream=Stream, ExternalStream=ExternalStream, Device=Device,
                                      get_current_stream=lambda device_id=-1:
                                      Stream(st.handles[-1]))
    cupy.ndarray = ndarray
    return cupy, st


@pytest.fixture
def both(monkeypatch):
    torch, tst = fake_torch()
    cupy, cst = fake_cupy()
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return torch, tst, cupy, cst


def test_a_cupy_stream_is_made_current_for_a_torch_callable_too(both):
    torch, tst, cupy, cst = both
    side = cupy.cuda.Stream(0x55)
    x = torch.Tensor()
    with cuda.on_stream(side, 0, [(x,)], {}):
        assert tst.handles[-1] == 0x55 and cst.handles[-1] == 0x55
    assert tst.handles == [0] and cst.handles == [0]


def test_a_torch_stream_is_made_current_for_a_cupy_callable_too(both):
    torch, tst, cupy, cst = both
    side = torch.cuda.Stream(0x66)
    a = cupy.ndarray()
    with cuda.on_stream(side, 0, [(a,)], {}):
        assert cst.handles[-1] == 0x66 and tst.handles[-1] == 0x66
    assert tst.handles == [0] and cst.handles == [0]


def test_without_stream_the_stream_the_caller_set_is_timed_in_either_framework(both):
    torch, tst, cupy, cst = both
    a = cupy.ndarray()
    # a CuPy callable under `with cupy.cuda.Stream()`, torch initialised at its default stream:
    # kbench times CuPy's stream (it timed torch's default one) and makes it torch's as well
    with cupy.cuda.Stream(0x77):
        assert cuda.stream_handle(None, 0, torch_first=False) == 0x77
        assert cuda.stream_handle(None, 0, torch_first=True) == 0x77   # the one set wins
        with cuda.on_stream(None, 0, [(a,)], {}):
            assert tst.handles[-1] == 0x77 and cst.handles[-1] == 0x77
    # nothing set: the legacy default stream, nothing entered
    assert cuda.stream_handle(None, 0) == 0
    with cuda.on_stream(None, 0, [(a,)], {}):
        assert tst.handles == [0] and cst.handles == [0]


def test_two_streams_set_the_callables_framework_wins(both):
    torch, tst, cupy, cst = both
    with tst.use(0x10), cupy.cuda.Stream(0x20):
        assert cuda.stream_handle(None, 0, torch_first=True) == 0x10
        assert cuda.stream_handle(None, 0, torch_first=False) == 0x20
        with cuda.on_stream(None, 0, [(cupy.ndarray(),)], {}):
            assert tst.handles[-1] == 0x20 and cst.handles[-1] == 0x20


def test_a_raw_handle_and_no_framework_enter_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert cuda.stream_handle(None, 0) == 0
    with cuda.on_stream(0x99, 0, [()], {}):
        pass
    assert cuda.stream_handle(0x99, 0) == 0x99


def test_cupy_merely_imported_is_left_alone_for_a_torch_callable(both):
    """A torch callable with a torch stream: CuPy, imported but not in use (its current stream
    the default), is not touched -- entering a stream there fails on another device."""
    torch, tst, cupy, cst = both
    with cuda.on_stream(torch.cuda.Stream(0x31), 1, [(torch.Tensor(),)], {}):
        assert tst.handles[-1] == 0x31 and cst.handles == [0]


def test_a_failure_half_way_unwinds_the_stream_already_entered(both):
    """CuPy refusing its stream (a stream of another device) after torch's was entered: torch's
    current stream is put back, not left switched for the rest of the process."""
    torch, tst, cupy, cst = both

    class Refusing(cupy.cuda.Stream):
        def __enter__(self):
            raise RuntimeError("stream of another device")

    Refusing.__module__ = "cupy.cuda.stream"
    with pytest.raises(RuntimeError, match="another device"):
        with cuda.on_stream(Refusing(0x42), 0, [(torch.Tensor(),)], {}):
            pass
    assert tst.handles == [0] and cst.handles == [0]


def test_cupys_per_thread_default_stream_is_not_a_stream_the_caller_set(both):
    torch, tst, cupy, cst = both
    with cupy.cuda.Stream(2):                   # cudaStreamPerThread, CuPy's default under PTDS
        assert cuda.stream_handle(None, 0, torch_first=True) == 0
        with cuda.on_stream(None, 0, [(torch.Tensor(),)], {}):
            assert tst.handles == [0]


def test_the_untimed_calls_run_on_the_stream_given_too(both, monkeypatch):
    """The correctness check and the memory probe call fn before it is timed: on stream= as
    the timed calls (a GPU run saw a torch callable's first calls on the default stream)."""
    from kbench.measure import local
    torch, tst, cupy, cst = both
    seen = []
    monkeypatch.setattr(local, "check_before_timing",
                        lambda *a, **k: seen.append(("check", tst.handles[-1])) or {"ok": True})

    class Stop(Exception):
        pass

    def fake_memory(*a, **k):
        seen.append(("memory", tst.handles[-1]))
        raise Stop

    import kbench.measure.memory
    monkeypatch.setattr(kbench.measure.memory, "measure", fake_memory)
    monkeypatch.setattr(local, "_refuse_capture", lambda: None)
    with pytest.raises(Stop):
        local.bench_local(lambda t: None, torch.Tensor(), device="cuda:0", check=1.0,
                          stream=torch.cuda.Stream(0x77))
    assert seen == [("check", 0x77), ("memory", 0x77)] and tst.handles == [0]
