"""The timing loop's settling path (csrc/core/measure.c), driven through the host backend.

On a GPU the CUDA backend keeps the warm-up going until the SM clock settles and, under a power
limit, asks for a minimum sampling time. The loop's side of that (ask after each warm-up batch,
keep batches short while settling, honour the minimum) is the same for every backend, so it is
tested here with a Python hook standing in for the clock judgement."""
import time

import pytest

from kbench import _core

SLEEP = 0.005


def sleeper():
    time.sleep(SLEEP)


def test_warm_up_goes_on_while_the_backend_says_so_in_short_batches():
    calls = {"fn": 0}
    asked = []          # fn calls so far at each question

    def fn():
        calls["fn"] += 1
        sleeper()

    def keep_warming(elapsed_s):
        asked.append((elapsed_s, calls["fn"]))
        return elapsed_s < 0.3, 0.0

    r = _core.measure_host(fn, ((),), None, warmup_s=0.05, min_samples=5, target=0.5,
                           _keep_warming=keep_warming)
    assert r["warmup_s"] >= 0.3
    assert asked[-1][0] >= 0.3 and all(e < 0.3 for e, _ in asked[:-1])
    # while settling the batches stay near 20 ms: at most 0.02 / 5 ms + 1 calls between questions
    between = [b - a for (_, a), (_, b) in zip(asked, asked[1:])]
    assert between and max(between) <= int(0.02 / SLEEP) + 1


def test_a_minimum_sampling_time_holds_back_the_precision_rule():
    loose = dict(warmup_s=0.0, warmup_min=1, min_samples=5, target=0.5, max_time_s=5.0)
    # 0.8 s of 5 ms calls is past the 128 samples the rule needs to judge their order
    r = _core.measure_host(sleeper, ((),), None, _keep_warming=lambda e: (False, 0.8),
                           **dict(loose, warmup_s=0.01))
    assert r["stop"] == "precision" and r["sampling_s"] >= 0.8
    # without the minimum the same loose target stops at the rule's first check from 128 on
    r0 = _core.measure_host(sleeper, ((),), None, _keep_warming=lambda e: (False, 0.0),
                            **dict(loose, warmup_s=0.01))
    assert r0["stop"] == "precision" and len(r0["samples"]) < len(r["samples"])
    # the time cap still wins over the minimum
    rc = _core.measure_host(sleeper, ((),), None, _keep_warming=lambda e: (False, 10.0),
                            **dict(loose, warmup_s=0.01, max_time_s=0.2))
    assert rc["stop"] == "time_cap"


@pytest.mark.parametrize("hook, exc, match", [
    (lambda e: 1 / 0, ZeroDivisionError, "division"),
    (lambda e: "yes", TypeError, "_keep_warming must return"),
    (42, TypeError, "_keep_warming must be callable"),
])
def test_a_broken_hook_raises_and_the_loop_stops(hook, exc, match):
    with pytest.raises(exc, match=match):
        _core.measure_host(sleeper, ((),), None, warmup_s=0.01, _keep_warming=hook)
