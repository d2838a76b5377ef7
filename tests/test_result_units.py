"""Result's names say their units (issue 47): r.median is seconds while the printout shows ms,
and throughput's *_pct_peak is a fraction (0.638 for 63.8%)."""
import warnings

import numpy as np
import pytest

import kbench
from kbench.report.result import Throughput


@pytest.fixture(scope="module")
def result():
    return kbench.bench(np.add, np.ones(4096), np.ones(4096), warmup_s=0.0, max_time_s=0.05,
                        cold_cache=None)


def test_seconds_are_named_so(result):
    r = result
    assert r.median_s == r.median == r.stats["median"] and 0 < r.median_s < 1
    assert r.mean_s == r.mean and r.min_s == r.min <= r.median_s


def test_throughput_reads_the_share_of_peak_in_percent_too(result):
    r = result
    r.throughput = {"bytes_per_s": 1e9, "bandwidth_pct_peak": 0.638, "compute_pct_peak": 0.5}
    tp = r.throughput
    assert isinstance(tp, Throughput)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # the old names read as before
        assert tp["bandwidth_pct_peak"] == 0.638 and tp.get("compute_pct_peak") == 0.5
    assert tp["bandwidth_pct"] == pytest.approx(63.8) and tp.get("compute_pct") == 50.0
    tp["bandwidth_pct_peak"] = 0.25                     # derived on reading: never stale
    assert tp["bandwidth_pct"] == 25.0
    assert "bandwidth_pct" not in r.to_dict()["throughput"]          # not stored
    back = kbench.Result.from_json(r.to_json())
    assert back.throughput["bandwidth_pct"] == 25.0
    r.throughput = {"bytes_per_s": 1e9}                  # no peak known: no share either
    assert r.throughput.get("bandwidth_pct") is None and r.throughput.get("x", 3) == 3
    with pytest.raises(KeyError):
        r.throughput["compute_pct"]
    assert r.throughput == {"bytes_per_s": 1e9}
