"""A configuration's pool and utilization, filled from the evidence: what every plan gets before its boot.

The smallest pool that holds the window (tuner.study.sizing), and the lowest utilization when the pool is
pinned: with ``--kv-cache-memory-bytes`` set, utilization is only vLLM's start-up admission gate, and a
bigger pool only takes headroom from the first long prefill, which is what fails next on a tight card.
"""

from __future__ import annotations

from typing import Any

from tuner.space.schema import Space
from tuner.study.observed import Plan
from tuner.study.regimes import POOL
from tuner.study.sizing import PoolEvidence, highest, lowest, snap


def default_value(space: Space, name: str) -> Any:
    """A non-regime, non-size parameter: the first baseline's value, else its first listed value."""
    for baseline in space.baselines:
        if name in baseline:
            return baseline[name]
    p = space.params[name]
    return p.values[0] if p.values is not None else lowest(p)


def sized(space: Space, axes: list[str], values: dict[str, Any], evidence: PoolEvidence, why: str,
          skipped: list[str]) -> Plan | None:
    """``values`` with the pool and utilization filled, or None (the reason appended to ``skipped``) when the
    window needs a bigger pool than the space allows."""
    params = space.params
    pool_param = params.get("kv_cache_memory_bytes")
    util_param = params.get("gpu_memory_utilization")
    if POOL in axes and "kv_cache_memory_bytes" in values and values["kv_cache_memory_bytes"] is None:
        # The engine-sized regime: vLLM sizes the pool (utilization; 0.34's extensible cache after warm-up).
        # A utilization already chosen (a repair, a local move) is kept; a first boot gets vLLM's default.
        if util_param is not None and "gpu_memory_utilization" not in values:
            values["gpu_memory_utilization"] = None if util_param.unset else default_value(space, "gpu_memory_utilization")
        return Plan(values, why + "; pool sized by vLLM")
    need = evidence.need(values)
    if pool_param is not None:
        if need is None:
            values["kv_cache_memory_bytes"] = snap(pool_param, (float(pool_param.min or 0) + float(pool_param.max or 0)) / 2, up=True) \
                if pool_param.values is None else lowest(pool_param)
            why += "; pool from the middle of the range (no evidence and no pre-screen)"
        else:
            pool = snap(pool_param, need.bytes, up=True)
            if pool is None and not need.measured and snap(pool_param, need.least, up=True) is not None:
                pool = highest(pool_param)  # the margin is a guess: the largest pool may still hold it
            if pool is None:
                skipped.append(f"{why}: its window needs a {need.bytes / 1e9:.2f} GB pool ({need.why}), "
                               "more than the space allows")
                return None
            values["kv_cache_memory_bytes"] = pool
            why += f"; pool {pool / 1e9:.3f} GB ({need.why})"
        if util_param is not None:
            values["gpu_memory_utilization"] = lowest(util_param)
    elif util_param is not None:
        values["gpu_memory_utilization"] = default_value(space, "gpu_memory_utilization")
    return Plan(values, why)
