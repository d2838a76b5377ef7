"""kbench.bench's named choices (cold_cache, mode) are checked once, in C (csrc/core/choices.c,
_core.check_choices), before anything calls the function: the error names the parameter and
the values it accepts, on every backend. No GPU needed: the check runs before one is touched."""
import sys

import numpy as np
import pytest

import kbench
from kbench import _core

FAST = dict(warmup_s=0.0, max_time_s=0.05)


@pytest.mark.parametrize("backend, cold, mode", [
    ("host", "flush", None), ("host", "rotate", "host"), ("host", None, None),
    ("cuda", "flush", "cupti"), ("cuda", None, "events"), ("cuda", "rotate", "graph"),
    ("hip", "flush", None), ("hip", None, "graph"),
])
def test_what_each_backend_accepts_comes_back_as_given(backend, cold, mode):
    assert _core.check_choices(backend, cold, mode) == (cold, mode)


@pytest.mark.parametrize("backend, cold, mode, message", [
    ("host", "lukewarm", None, "cold_cache must be None, 'flush' or 'rotate', got 'lukewarm'"),
    ("cuda", "none", None, "cold_cache must be None, 'flush' or 'rotate', got 'none'"),
    ("hip", 1, "graph", "cold_cache must be None, 'flush' or 'rotate', got 1"),
    ("host", None, "events", "mode 'events' needs a CUDA device: on the CPU, mode must be None "
                             "or 'host'"),
    ("hip", None, "cupti", "mode 'cupti' needs a CUDA device: on HIP, mode must be None or "
                           "'graph'"),
    ("cuda", None, "host", "mode 'host' needs the CPU: on CUDA, mode must be None, 'cupti', "
                           "'events' or 'graph'"),
    ("cuda", None, "bogus", "mode must be None, 'cupti', 'events' or 'graph' on CUDA, got "
                            "'bogus'"),
    ("host", None, 3, "mode must be None or 'host' on the CPU, got 3"),
    ("tpu", None, None, "check_choices: backend must be 'host', 'cuda' or 'hip', got 'tpu'"),
])
def test_a_bad_choice_names_the_parameter_and_what_it_accepts(backend, cold, mode, message):
    with pytest.raises(ValueError) as ei:
        _core.check_choices(backend, cold, mode)
    assert str(ei.value) == message


@pytest.mark.parametrize("options", [dict(cold_cache="lukewarm"), dict(mode="events"),
                                     dict(cold_cache="bogus", profile=True)])
def test_bench_refuses_a_bad_choice_before_it_calls_fn(options):
    """Before the check and the memory probe call fn, and in profile mode too (which never
    reaches a C measure function)."""
    calls = []

    def fn(x):
        calls.append(1)
        return x

    with pytest.raises(ValueError, match="cold_cache must be|mode 'events' needs"):
        kbench.bench(fn, np.ones(4), check=np.ones(4), **FAST, **options)
    assert calls == []


def test_a_bad_cuda_mode_is_refused_before_any_gpu_library_is_asked(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)     # no ROCm torch: CUDA
    with pytest.raises(ValueError, match="mode must be None, 'cupti', 'events' or 'graph' on "
                                         "CUDA, got 'cupt'"):
        kbench.bench(lambda: None, device="cuda", mode="cupt", memory=False)
