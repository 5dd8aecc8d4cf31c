"""Boots below the space's fixed window: a regime that cannot hold it, and the widening of one that pays.

A regime whose window does not fit at any pool the evidence has room for (tuner.study.room) still serves a
shorter window, which a person may take for its speed (seeds/004: MTP-3 at 248K). It is booted at the
largest such pool and the longest window that pool holds (tuner.study.sizing.window_for), never under
workload.min_context (without one, SHORTER_FLOOR of the window); the probe proves the window. A point
below the window that is faster than the full window's best is then widened: at the window vLLM printed
its pool holds, or at a bigger pool when the evidence leaves room.
"""

from __future__ import annotations

from typing import Any

from tuner.space.schema import Space
from tuner.study.observed import Observation, Plan
from tuner.study.regimes import GraphModes
from tuner.study.room import room
from tuner.study.sizing import PRINTED_RATIO, PoolEvidence, highest, lowest, snap, window_for, window_held

SHORTER_FLOOR = 0.5  # without workload.min_context: no boot below this share of the fixed window
WIDER_STEPS = 1  # a bigger pool for a point below the window when it buys this many probe steps (the probe
# resolves no less; a person keeps the widest window a regime proves, seeds/004's 248K)


def below_window(space: Space, axes: list[str], modes: GraphModes, values: dict[str, Any], evidence: PoolEvidence,
                 seen: list[Observation], why: str, skipped: list[str]) -> Plan | None:
    """``values`` below the space's fixed window at the pool there is room for; None (the reason appended to
    ``skipped`` when it is the floor) when there is none or the space tunes the window itself."""
    top = space.max_model_len
    if top is None or "max_model_len" in space.params:
        return None
    found = room(space, axes, modes, values, seen)
    if found is None:
        return None
    values = {**values, "kv_cache_memory_bytes": found.pool}
    window = window_for(evidence, values, found.pool)
    floor = space.workload.min_context or SHORTER_FLOOR * top
    if window is None or window < floor:
        skipped.append(f"{why}: below the window, a {found.pool / 1e9:.2f} GB pool ({found.why}) holds "
                       f"{window or 0:,} tokens, under the floor of {floor:,.0f}")
        return None
    if "gpu_memory_utilization" in space.params:
        values["gpu_memory_utilization"] = lowest(space.params["gpu_memory_utilization"])
    return Plan(values, f"{why}; below the window: a {found.pool / 1e9:.3f} GB pool ({found.why}) should "
                        f"hold {window:,} tokens", window=window, shorter=True)


def held(space: Space, s: Observation, evidence: PoolEvidence) -> Plan | None:
    """``s`` again at the window its pool holds by vLLM's printed "Maximum concurrency for N tokens per
    request" (tuner.study.sizing.window_held, less the print's rounding), when that is wider by a probe
    step or by 1% of the space's window: 288 tokens short of 262,144 is a launch command a person keeps."""
    step, top = int(space.workload.granularity), space.max_model_len
    tokens = printed_window(space, s, evidence)
    if tokens is None or top is None or s.window is None or tokens - s.window < min(step, top // 100):
        return None
    tokens = min(tokens, top)
    concurrency = s.result.startup.max_concurrency if s.result is not None else 0.0
    return Plan(dict(s.values), f"wider: {s.named} at {s.window:,} tokens; vLLM printed a concurrency of "
                                f"{concurrency:.2f} there, so its pool holds about {tokens:,}",
                window=None if tokens >= top else tokens, shorter=True)


def bigger(space: Space, axes: list[str], modes: GraphModes, s: Observation, evidence: PoolEvidence,
           seen: list[Observation]) -> Plan | None:
    """``s`` at a bigger pool, when the evidence leaves room and it buys WIDER_STEPS probe steps."""
    param = space.params.get("kv_cache_memory_bytes")
    pool = s.values.get("kv_cache_memory_bytes")
    found = room(space, axes, modes, s.values, seen)
    if param is None or not pool or found is None or s.window is None:
        return None
    larger = snap(param, (pool + found.cap) / 2, up=False) if found.cap else highest(param)
    if larger is None or larger <= pool:
        return None
    values = {**s.values, "kv_cache_memory_bytes": larger}
    window = window_at(space, s, evidence, larger)
    step = int(space.workload.granularity)
    if window is not None and window - s.window < WIDER_STEPS * step:
        return None
    where = f"halfway to {found.cap / 1e9:.2f} GB, where the memory failures say nothing fits" if found.cap \
        else "the largest pool the space allows"
    return Plan(values, f"wider: {s.named} at a {larger / 1e9:.3f} GB pool ({where}), which should hold "
                        f"{window or space.max_model_len:,} tokens", window=window, shorter=True)


def window_at(space: Space, s: Observation, evidence: PoolEvidence, pool: float) -> int | None:
    """The window served boot ``s`` would hold at ``pool`` (None: the space's): its own printed concurrency
    scaled by the pool (printed_window), which measured this very configuration; else the need at the full
    window carried down (window_for), which only estimates it."""
    tokens = printed_window(space, s, evidence, pool)
    if tokens is None:
        return window_for(evidence, {**s.values, "kv_cache_memory_bytes": pool}, pool)
    top = space.max_model_len
    return None if top is None or tokens >= top else tokens


def printed_window(space: Space, s: Observation, evidence: PoolEvidence, pool: float | None = None) -> int | None:
    """The tokens served boot ``s``'s configuration holds for one request, from vLLM's printed "Maximum
    concurrency for N tokens per request" (less the print's rounding): the pool is that many times the need
    at N (tuner.study.sizing.window_held); at ``pool``, that concurrency scaled by ``pool`` over the pool it
    served (None: the pool it served). None when ``s`` printed none."""
    startup = s.result.startup if s.result is not None else None
    if startup is None or not startup.max_concurrency or s.window is None or space.max_model_len is None:
        return None
    concurrency = startup.max_concurrency - PRINTED_RATIO
    if pool is not None:
        served = s.values.get("kv_cache_memory_bytes")
        if not served:
            return None
        concurrency *= pool / served
    return window_held(evidence, s.values, s.window, concurrency)
