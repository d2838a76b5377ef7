"""A CUPTI sample's figure is the busy time of the call's activities: the union of their
intervals (csrc/cuda/busy_time.c). Overlapping work (a second stream, programmatic dependent
launch) counts once, and the idle gaps between kernels not at all."""
import random

import pytest

from kbench import _core

pytestmark = pytest.mark.skipif(not _core.HAVE_CUDA, reason="busy_time is part of the CUDA "
                                "backend, not built into this _core")


def union_by_cells(keys, starts, ends):
    """The reference: count each covered unit cell once."""
    cells = {}
    for k, s, e in zip(keys, starts, ends):
        cells.setdefault(k, set()).update(range(s, e))
    return {k: len(c) for k, c in cells.items()}


def test_serial_activities_sum_and_overlapping_ones_count_once():
    # one call, three kernels back to back with gaps: the sum of durations
    assert _core.busy_time([7, 7, 7], [0, 12, 30], [10, 20, 31]) == {7: 19}
    # a second stream's kernel inside the first's interval: the outer one only
    assert _core.busy_time([1, 1], [0, 20], [100, 60]) == {1: 100}
    # partial overlap (a dependent launch starting while its predecessor drains)
    assert _core.busy_time([1, 1], [0, 90], [100, 150]) == {1: 150}
    # touching intervals neither overlap nor leave a gap
    assert _core.busy_time([1, 1], [0, 5], [5, 9]) == {1: 9}
    # identical intervals (the same kernel recorded twice would be one interval's time)
    assert _core.busy_time([3, 3], [4, 4], [9, 9]) == {3: 5}
    # calls are kept apart whatever the order given; keys need not be consecutive
    assert _core.busy_time([9, 2, 9, 2], [50, 0, 0, 5], [60, 10, 10, 20]) == {2: 20, 9: 20}
    assert _core.busy_time([], [], []) == {}
    # zero-length records add nothing
    assert _core.busy_time([1, 1], [5, 5], [5, 8]) == {1: 3}


def test_busy_time_matches_a_cell_count_on_random_intervals():
    rng = random.Random(20261201)
    for _ in range(300):
        n = rng.randint(1, 40)
        keys = [rng.randint(1, 4) for _ in range(n)]
        starts = [rng.randint(0, 200) for _ in range(n)]
        ends = [s + rng.randint(0, 60) for s in starts]
        assert _core.busy_time(keys, starts, ends) == union_by_cells(keys, starts, ends)


def test_large_timestamps_do_not_overflow():
    # CUPTI timestamps are ns since an epoch: ~1.7e18
    t0 = 1_764_633_600_000_000_000
    assert _core.busy_time([1, 1], [t0, t0 + 500], [t0 + 1000, t0 + 3000]) == {1: 3000}


@pytest.mark.parametrize("args, message", [
    (([1], [5], [4]), "interval 0 ends before it starts"),
    (([1, 2], [0], [1]), "differ in length"),
    (([1], [-1], [4]), r"starts\[0\] is not a non-negative integer"),
    (([1], [0], ["x"]), r"ends\[0\] is not a non-negative integer"),
    ((1, [0], [1]), "sequences of non-negative integers"),
])
def test_bad_intervals_raise_naming_the_problem(args, message):
    with pytest.raises((ValueError, TypeError), match=message):
        _core.busy_time(*args)
