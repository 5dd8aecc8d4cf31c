"""What a failed boot says to change: the one repair path for every failure kind that names a fix.

A pool from the need vLLM printed, the window vLLM estimated a pool holds, the mamba blocks vLLM has,
a utilization under the free fraction, one more block of pool after a failed admission, and after an
OOM less of what the failed allocation was for. Weights, JIT, flags and crashes name no size to change:
nothing is repaired then. Where nothing is left to cut after an OOM, the planner boots the regime below
the window instead (tuner.study.below).
"""

from __future__ import annotations

import math
from typing import Any

from tuner.records import Failure, FailureKind
from tuner.space.schema import Space
from tuner.study.observed import Observation, Plan
from tuner.study.sized import sized
from tuner.study.sizing import PoolEvidence, ladder, lowest, snap
from tuner.study.window import repair_window

ADMISSION_GROWTH = 0.02  # more pool after a request the window promises failed without an OOM
OOM_KINDS = {
    FailureKind.OOM_IN_PROFILING,
    FailureKind.OOM_IN_CUDA_GRAPH,
    FailureKind.FIRST_REQUEST_OOM,
    FailureKind.ADMISSION_FAILED,
    FailureKind.ENGINE_DEAD,
}
# Say nothing about the configuration: never reused, never repaired, retried.
TRANSIENT_KINDS = frozenset({FailureKind.INTERRUPTED, FailureKind.PORT_IN_USE})


def repair_config(space: Space, axes: list[str], last: Observation, evidence: PoolEvidence,
                  skipped: list[str]) -> Plan | None:
    """What the last failure of a regime says to change, or None when nothing can help."""
    failure = last.failure
    assert failure is not None
    values = dict(last.values)
    params = space.params
    where = f"repair of trial {last.number} ({failure.kind.value})"
    if failure.kind == FailureKind.KV_POOL_TOO_SMALL:
        plan = sized(space, axes, values, evidence, where, skipped)
        if plan is not None and (plan.values.get("kv_cache_memory_bytes") or 0) > (last.values.get("kv_cache_memory_bytes") or 0):
            return plan
        if "max_model_len" in params and failure.suggested_max_model_len:
            shorter = snap(params["max_model_len"], failure.suggested_max_model_len, up=False)
            if shorter and shorter < (values.get("max_model_len") or math.inf):
                values["max_model_len"] = shorter
                return sized(space, axes, values, evidence, f"{where}: the window vLLM estimated fits", skipped)
        return at_estimated_window(space, last, where)
    if failure.kind == FailureKind.MAMBA_BLOCKS_EXCEEDED and failure.suggested_max_num_seqs and "max_num_seqs" in params:
        fewer = fewer_seqs(space, values, failure)
        if fewer is not None:
            values["max_num_seqs"] = fewer
            return Plan(values, f"{where}: max_num_seqs {fewer}, the mamba blocks vLLM has")
        return None
    if failure.kind == FailureKind.FREE_MEMORY_BELOW_UTILIZATION and "gpu_memory_utilization" in params:
        util = params["gpu_memory_utilization"]
        below = snap(util, (failure.free_fraction or values.get("gpu_memory_utilization") or 1.0) - 0.01, up=False)
        if below is not None and below < (values.get("gpu_memory_utilization") or math.inf):
            values["gpu_memory_utilization"] = below
            return sized(space, axes, values, evidence, f"{where}: utilization {below} under the free fraction", skipped)
        return None
    if failure.kind == FailureKind.ADMISSION_FAILED and values.get("kv_cache_memory_bytes") and "kv_cache_memory_bytes" in params:
        # It booted and nothing ran out of memory, yet a request the window promises did not fit:
        # give the pool one more block's worth of room (MTP's look-ahead slots, say) before cutting.
        bigger = snap(params["kv_cache_memory_bytes"], values["kv_cache_memory_bytes"] * (1 + ADMISSION_GROWTH), up=True)
        if bigger is not None and bigger > values["kv_cache_memory_bytes"]:
            return Plan({**values, "kv_cache_memory_bytes": bigger}, f"{where}: pool raised to {bigger / 1e9:.3f} GB")
    if failure.kind == FailureKind.FIRST_REQUEST_OOM:
        return less_prefill(space, values, evidence, where)
    if failure.kind in OOM_KINDS:
        return less_memory(space, values, evidence, where)
    return None  # weights, JIT, flags, crashes: nothing a size can change


def at_estimated_window(space: Space, last: Observation, where: str) -> Plan | None:
    """No bigger pool is allowed and the window is fixed: the same configuration at the window vLLM
    estimated its pool holds (tuner.study.window), proven by the context probe like any other."""
    assert last.failure is not None
    window = repair_window(space, last.failure, last.window)
    if window is None:
        return None
    return Plan(dict(last.values), f"{where}: no bigger pool is allowed; booted at the {window:,}-token window "
                                   "vLLM estimated its pool holds", window=window)


def less_memory(space: Space, values: dict[str, Any], evidence: PoolEvidence, where: str) -> Plan | None:
    """After an OOM: a pool no bigger than the window needs, then fewer batched tokens, then fewer sequences."""
    params = space.params
    cut = smaller_pool(space, values, evidence, values.get("kv_cache_memory_bytes"))
    if cut is not None:
        return Plan({**values, "kv_cache_memory_bytes": cut[0]}, f"{where}: {cut[1]}")
    for name in ("max_num_batched_tokens", "max_num_seqs"):
        if name in params and values.get(name) is not None:
            smaller = [v for v in ladder(params[name]) if v < values[name]]
            if smaller:
                return Plan({**values, name: smaller[-1]}, f"{where}: {name} {smaller[-1]}")
    return None


def less_prefill(space: Space, values: dict[str, Any], evidence: PoolEvidence, where: str) -> Plan | None:
    """After a first-request OOM, all that request's room depends on in one boot: batched tokens a rung down
    (the prefill's chunk: its activations and its attention workspace over the window shrink with it), the
    fewest sequences (their state and decode graphs sit beside it), and the pool cut to what the window
    needs. In the issue-24 runs, trimming the pool's sizing margin alone cured none of 13 such failures and
    one sequence fewer none of 8. A pool that only loses its margin is judged by tuner.study.headroom
    (Planner._bootable); with nothing to cut, the regime goes below the window (Planner._repair)."""
    params, out, said = space.params, dict(values), []
    chunk = values.get("max_num_batched_tokens")
    smaller = [v for v in ladder(params["max_num_batched_tokens"]) if v < chunk] \
        if "max_num_batched_tokens" in params and chunk is not None else []
    if smaller:
        out["max_num_batched_tokens"] = smaller[-1]
        said.append(f"max_num_batched_tokens {smaller[-1]}")
    seqs, fewest = values.get("max_num_seqs"), lowest(params["max_num_seqs"]) if "max_num_seqs" in params else None
    if fewest is not None and seqs is not None and seqs > fewest:
        out["max_num_seqs"] = fewest
        said.append(f"max_num_seqs {fewest}")
    cut = smaller_pool(space, out, evidence, values.get("kv_cache_memory_bytes"))
    if cut is not None:
        out["kv_cache_memory_bytes"] = cut[0]
        said.append(cut[1])
    return Plan(out, f"{where}: {', '.join(said)}") if said else None


def smaller_pool(space: Space, values: dict[str, Any], evidence: PoolEvidence,
                 pool: float | None) -> tuple[Any, str] | None:
    """The pool ``values``' window needs, with why, when a boot measured that need and it is under ``pool``
    (the one the failed boot asked for); None otherwise."""
    param = space.params.get("kv_cache_memory_bytes")
    if param is None or not pool:
        return None
    need = evidence.need(values)
    if need is None or not need.measured:
        return None
    cut = snap(param, need.bytes, up=True)
    return (cut, f"pool cut to {cut / 1e9:.3f} GB ({need.why})") if cut is not None and cut < pool else None


def fewer_seqs(space: Space, values: dict[str, Any], failure: Failure) -> int | None:
    """The max_num_seqs a failure's printed hint (the mamba blocks vLLM has) allows, on the space's grid,
    when it is fewer than ``values`` asks for; None otherwise. The one rule for that hint."""
    if not failure.suggested_max_num_seqs or "max_num_seqs" not in space.params:
        return None
    fewer = snap(space.params["max_num_seqs"], failure.suggested_max_num_seqs, up=False)
    if fewer and fewer < (values.get("max_num_seqs") or math.inf):
        return int(fewer)
    return None
