"""The multi-rank part of a result: per-rank medians, skew, world, topology, versions."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np


def skew_stats(per_rank: np.ndarray) -> Dict[str, Any]:
    """per_rank: (world, n) samples of the same sample index on every rank.

    skew: the median over samples of (max - min) / max, how much of a sample the fastest rank
    spends waiting for the slowest; slowest_rank: the rank with the highest median, and how
    often each rank was the sample's maximum."""
    world, n = per_rank.shape
    if n == 0:
        return {"per_rank_median_s": [None] * world, "skew": None, "slowest_rank": None,
                "max_share": [None] * world}
    medians = np.median(per_rank, axis=1)
    mx, mn = per_rank.max(axis=0), per_rank.min(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mx > 0, (mx - mn) / mx, 0.0)
    share = np.bincount(per_rank.argmax(axis=0), minlength=world) / n
    return {"per_rank_median_s": [float(x) for x in medians],
            "skew": float(np.median(rel)), "skew_p90": float(np.quantile(rel, 0.9)),
            "slowest_rank": int(np.argmax(medians)),
            "max_share": [float(x) for x in share]}


def rank_report(per_rank: np.ndarray, maxima: np.ndarray, comm: Any, every: List[Dict[str, Any]],
                global_shapes: Optional[List[Any]] = None, barrier: bool = True,
                device_barrier: bool = False, timeout_s: Optional[float] = None
                ) -> Dict[str, Any]:
    """The dict stored as result.extra['distributed'] (every rank builds the same one, apart
    from 'rank'). every: each rank's {"shapes", "device", "host"}, in rank order."""
    rep: Dict[str, Any] = {
        "rank": comm.rank, "world": comm.world, "local_world": comm.local_world,
        "nodes": comm.nodes, "multi_node": comm.nodes > 1,
        "engine": comm.engine, "backend": comm.backend, "versions": comm.versions(),
        "reduction": "MAX across ranks per sample; median, CI and stop rule of the maxima",
        "barrier": ("device: a one-element all_reduce on the measured stream, then the gate"
                    if device_barrier else "host barrier (allgather)") if barrier else
                   ("none (world 1: no other rank to line up with)" if comm.world == 1
                    else "none"),
        "dist_timeout_s": timeout_s,
        "per_rank_shapes": [e.get("shapes") for e in every],
        "global_shapes": global_shapes,
        "devices": [e.get("device") for e in every], "hosts": [e.get("host") for e in every],
    }
    rep.update(skew_stats(per_rank))
    if per_rank.shape[1] == maxima.size and maxima.size:
        # the figures are the maxima of these rows: say so, so a reader can check it
        rep["maxima_consistent"] = bool(np.array_equal(per_rank.max(axis=0), maxima))
    if any(str(d).startswith("cuda") for d in rep["devices"]):
        from ._topology import p2p_topology
        rep["topology"] = p2p_topology()
    return rep
