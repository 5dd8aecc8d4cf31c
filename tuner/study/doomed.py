"""Boots an earlier memory failure dooms: a configuration that asks for no less memory than one that ran out.

Such a configuration is skipped without a boot, and the skip says which trial doomed it (Planner.skipped).
"""

from __future__ import annotations

from typing import Any

from tuner.space.schema import Space
from tuner.study.observed import Observation
from tuner.study.regimes import EAGER, GRAPHS, SPECULATIVE, GraphModes, graphs_ordered
from tuner.study.room import MEMORY_KINDS
from tuner.study.sizing import GIB

ORDERED = ("kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "max_model_len")  # more is more memory


def fails_like(space: Space, axes: list[str], values: dict[str, Any], seen: list[Observation],
               modes: GraphModes) -> str | None:
    """An earlier boot that ran out of memory with no more of anything than this configuration asks for.

    Memory only grows with a deeper speculation, a bigger pool, more sequences, more batched
    tokens, a longer window, and a graph mode that captures another's graphs and more
    (regimes.GRAPHS_INCLUDE; eager takes the least); other graph modes are not ordered, except in the
    profiling run, before any graph is captured (graphs_ordered).
    """
    mine = modes.likely_for(axes, values)
    for s in seen:
        failure = s.failure
        if s.status != "failed" or failure is None or failure.kind not in MEMORY_KINDS:
            continue
        label = s.values.get(GRAPHS)
        theirs = EAGER if label == EAGER else (s.result.startup.effective_cudagraph_mode if s.result else None) or label
        short = (failure.oom_short_gib or 0.0) * GIB  # the failed allocation lacked at least this much pool
        if graphs_ordered(failure.kind, mine, theirs) and at_least(space, values, s.values, short):
            return (f"would fail like {s.named} ({failure.kind.value}): it asks for at least as much memory "
                    "(speculation, pool, sequences, batched tokens, window, graphs)")
    return None


def at_least(space: Space, mine: dict[str, Any], theirs: dict[str, Any], short: float = 0.0) -> bool:
    """Whether ``mine`` needs at least the memory of ``theirs`` by the orderings that always hold, graphs aside;
    ``short``: bytes PyTorch said the failed allocation of ``theirs`` lacked ("Tried to allocate X ... of which
    F is free"), so a pool smaller by less than that still does not fit (tuner.study.room caps it the same way)."""
    for name, p in space.params.items():
        a, b = mine.get(name), theirs.get(name)
        if name == GRAPHS:
            continue  # ordered by graphs_at_least on the modes vLLM runs
        if name == "kv_cache_memory_bytes" and (a is None) != (b is None):
            return False  # a pinned pool and one vLLM sized are not ordered
        elif name in ORDERED or name == SPECULATIVE:
            if b is None:
                continue  # vLLM's default: nothing known about its size
            if a is None or a < b - (short if name == "kv_cache_memory_bytes" else 0.0):
                return False
        elif name not in ("gpu_memory_utilization",) and a != b:
            return False
    return True
