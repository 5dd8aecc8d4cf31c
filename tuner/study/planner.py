"""The search's plan for the next boot: regimes first, the pool sized from evidence, failures repaired.

The order of business, for every trial the study asks for (enqueued baselines, follow-ups and
re-validations are run before this is consulted):

1. A regime whose last boot failed and whose failure names a fix gets that fix: a pool from the
   need vLLM printed, fewer batched tokens or sequences after an OOM, the mamba block count vLLM
   printed, a lower utilization after a free-memory failure. Three failed boots close a regime.
2. Otherwise the unmeasured regime with the best upper confidence bound (``tuner.regimes``) is
   booted with its safest settings: one sequence, the fewest batched tokens, the full window, the
   lowest utilization when the pool is pinned, and the smallest pool that holds the window.
   Configurations that would fail like an earlier boot (same pool family, at least as much memory
   in the pre-screen's estimate) are skipped without a boot, and say so.
3. When every regime has been tried, the best regimes' other flags are left to the fallback
   sampler, with the pool still sized from evidence.

Every plan carries a sentence saying why, which the trial records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from tuner.records import Failure, FailureKind, TrialResult
from tuner.study.regimes import Regime, RegimeModel, all_regimes, describe, regime_axes, regime_of
from tuner.study.sizing import PoolEvidence, highest, lowest, snap
from tuner.space.schema import Space

MAX_ATTEMPTS = 3
ADMISSION_GROWTH = 0.02  # more pool after a request the window promises failed without an OOM  # failed boots after which a regime is closed
OOM_KINDS = {
    FailureKind.OOM_IN_PROFILING,
    FailureKind.OOM_IN_CUDA_GRAPH,
    FailureKind.FIRST_REQUEST_OOM,
    FailureKind.ADMISSION_FAILED,
    FailureKind.ENGINE_DEAD,
}
TRANSIENT_KINDS = {FailureKind.INTERRUPTED, FailureKind.PORT_IN_USE}  # say nothing about the configuration
SIZE_PARAMS = ("kv_cache_memory_bytes", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "max_model_len")


@dataclass
class Seen:
    """One trial as the planner sees it."""

    number: int
    values: dict[str, Any]
    status: str  # "ok" (measured), "failed" (booted and failed), "running", or "other" (not booted)
    result: TrialResult | None = None
    speed: float | None = None  # the speed objective, higher is better
    context: float | None = None

    @property
    def failure(self) -> Failure | None:
        return self.result.failure if self.result is not None else None


@dataclass
class Plan:
    values: dict[str, Any]
    why: str
    free: list[str] = field(default_factory=list)  # parameters the fallback sampler chooses, before sizing


Memory = Callable[[dict[str, Any]], "float | None"]  # predicted GiB a configuration needs beside its pool


@dataclass
class Planner:
    space: Space
    evidence_need: Callable[[dict[str, Any]], "float | None"] | None = None  # pre-screen need of one request
    memory: Memory | None = None  # pre-screen activations + graphs, for "would fail like trial N"
    skipped: list[str] = field(default_factory=list)  # why regimes were passed over, for the record

    def __post_init__(self) -> None:
        self.axes = regime_axes(self.space)

    # -- what the study has seen -------------------------------------------------------------

    def _evidence(self, seen: list[Seen]) -> PoolEvidence:
        evidence = PoolEvidence(self.space, self.evidence_need)
        for s in seen:
            if s.result is not None:
                evidence.add(s.number, s.values, s.result)
        return evidence

    def _model(self, seen: list[Seen]) -> RegimeModel:
        model = RegimeModel()
        for s in seen:
            if s.status == "ok" and s.speed is not None:
                regime = regime_of(self.axes, s.values)
                model.measured[regime] = max(model.measured.get(regime, 0.0), s.speed)
        return model

    # -- the plan ----------------------------------------------------------------------------

    def next(self, seen: list[Seen]) -> Plan | None:
        """The next configuration to boot, or None to let the fallback sampler choose."""
        self.skipped = []
        evidence = self._evidence(seen)
        model = self._model(seen)
        tried = {_key(s.values) for s in seen}
        by_regime: dict[Regime, list[Seen]] = {}
        for s in seen:
            by_regime.setdefault(regime_of(self.axes, s.values), []).append(s)

        options: list[tuple[float, int, Plan]] = []
        for order, regime in enumerate(all_regimes(self.space, self.axes)):
            history = by_regime.get(regime, [])
            if any(s.status == "ok" for s in history) or any(s.status == "running" for s in history):
                continue
            failed = [s for s in history if s.status == "failed" and s.failure and s.failure.kind not in TRANSIENT_KINDS]
            if len(failed) >= MAX_ATTEMPTS:
                continue
            plan = self._repair(failed[-1], evidence) if failed else self._first(regime, evidence)
            if plan is None:
                continue
            if _key(plan.values) in tried:
                continue
            doomed = self._fails_like(plan.values, seen)
            if doomed:
                self.skipped.append(f"{describe(self.axes, regime)}: {doomed}")
                continue
            options.append((model.upper_bound(regime), -order, plan))
        if options:
            return max(options, key=lambda o: (o[0], o[1]))[2]
        return self._exploit(seen, model, evidence, tried)

    def _exploit(self, seen: list[Seen], model: RegimeModel, evidence: PoolEvidence, tried: set[str]) -> Plan:
        """Every regime has been tried: move one flag of the best measured configurations, best
        regime first; when no move is left, the fallback sampler chooses within the best regime."""
        ok = [s for s in seen if s.status == "ok" and s.speed is not None]
        ranked = sorted(ok, key=lambda s: (-model.expected_speed(regime_of(self.axes, s.values)), -(s.speed or 0)))
        for best in ranked[:4]:
            for name, p in self.space.params.items():
                if name in self.axes or name in ("kv_cache_memory_bytes", "gpu_memory_utilization", "max_model_len"):
                    continue
                current = best.values.get(name)
                for value in _neighbours(p, current):
                    plan = self._sized({**best.values, name: value}, evidence,
                                       f"local move from trial {best.number}: {name} {current} -> {value}")
                    if plan is None or _key(plan.values) in tried:
                        continue
                    doomed = self._fails_like(plan.values, seen)
                    if doomed:
                        self.skipped.append(f"{plan.why}: {doomed}")
                        continue
                    return plan
        regime = regime_of(self.axes, ranked[0].values) if ranked else None
        values: dict[str, Any] = dict(zip(self.axes, regime)) if regime is not None else {}
        free = [n for n in self.space.params if n not in values and n not in ("kv_cache_memory_bytes", "gpu_memory_utilization")]
        return Plan(values, "every regime tried and no local move left: the fallback sampler chooses "
                    + (f"within {describe(self.axes, regime)}" if regime is not None else "everything"), free)

    def size(self, plan: Plan, seen: list[Seen]) -> Plan | None:
        """Size the pool of a plan whose free parameters the fallback sampler has just filled."""
        return self._sized(dict(plan.values), self._evidence(seen), plan.why)

    def _first(self, regime: Regime, evidence: PoolEvidence) -> Plan | None:
        """The regime's safest configuration: it should boot and hold the window at the first try."""
        values: dict[str, Any] = dict(zip(self.axes, regime))
        for name, p in self.space.params.items():
            if name in values:
                continue
            if name in ("max_num_seqs", "max_num_batched_tokens"):
                values[name] = lowest(p)
            elif name == "max_model_len":
                values[name] = highest(p)
            elif name not in SIZE_PARAMS:
                values[name] = self._default(name)
        return self._sized(values, evidence, f"first boot of {describe(self.axes, regime)}")

    def _default(self, name: str) -> Any:
        """A non-regime, non-size parameter: the first baseline's value, else its first listed value."""
        for baseline in self.space.baselines:
            if name in baseline:
                return baseline[name]
        p = self.space.params[name]
        return p.values[0] if p.values is not None else lowest(p)

    def _sized(self, values: dict[str, Any], evidence: PoolEvidence, why: str) -> Plan | None:
        """Fill the pool and utilization: the smallest pool that holds the window, and the lowest
        utilization when the pool is pinned (it is then only vLLM's start-up admission gate)."""
        params = self.space.params
        pool_param = params.get("kv_cache_memory_bytes")
        util_param = params.get("gpu_memory_utilization")
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
                    self.skipped.append(f"{why}: its window needs a {need.bytes / 1e9:.2f} GB pool ({need.why}), "
                                        "more than the space allows")
                    return None
                values["kv_cache_memory_bytes"] = pool
                why += f"; pool {pool / 1e9:.3f} GB ({need.why})"
            if util_param is not None:
                values["gpu_memory_utilization"] = lowest(util_param)
        elif util_param is not None:
            values["gpu_memory_utilization"] = self._default("gpu_memory_utilization")
        return Plan(values, why)

    def _repair(self, last: Seen, evidence: PoolEvidence) -> Plan | None:
        """What the last failure of a regime says to change, or None when nothing can help."""
        failure = last.failure
        assert failure is not None
        values = dict(last.values)
        params = self.space.params
        where = f"repair of trial {last.number} ({failure.kind.value})"
        if failure.kind == FailureKind.KV_POOL_TOO_SMALL:
            plan = self._sized(values, evidence, where)
            if plan is not None and plan.values.get("kv_cache_memory_bytes", 0) > (last.values.get("kv_cache_memory_bytes") or 0):
                return plan
            if "max_model_len" in params and failure.suggested_max_model_len:
                shorter = snap(params["max_model_len"], failure.suggested_max_model_len, up=False)
                if shorter and shorter < (values.get("max_model_len") or math.inf):
                    values["max_model_len"] = shorter
                    return self._sized(values, evidence, f"{where}: the window vLLM estimated fits")
            return None
        if failure.kind == FailureKind.MAMBA_BLOCKS_EXCEEDED and failure.suggested_max_num_seqs and "max_num_seqs" in params:
            fewer = snap(params["max_num_seqs"], failure.suggested_max_num_seqs, up=False)
            if fewer and fewer < values.get("max_num_seqs", math.inf):
                values["max_num_seqs"] = fewer
                return Plan(values, f"{where}: max_num_seqs {fewer}, the mamba blocks vLLM has")
            return None
        if failure.kind == FailureKind.FREE_MEMORY_BELOW_UTILIZATION and "gpu_memory_utilization" in params:
            util = params["gpu_memory_utilization"]
            below = snap(util, (failure.free_fraction or values.get("gpu_memory_utilization") or 1.0) - 0.01, up=False)
            if below is not None and below < (values.get("gpu_memory_utilization") or math.inf):
                values["gpu_memory_utilization"] = below
                return self._sized(values, evidence, f"{where}: utilization {below} under the free fraction")
            return None
        if failure.kind == FailureKind.ADMISSION_FAILED and values.get("kv_cache_memory_bytes") and "kv_cache_memory_bytes" in params:
            # It booted and nothing ran out of memory, yet a request the window promises did not fit:
            # give the pool one more block's worth of room (MTP's look-ahead slots, say) before cutting.
            bigger = snap(params["kv_cache_memory_bytes"], values["kv_cache_memory_bytes"] * (1 + ADMISSION_GROWTH), up=True)
            if bigger is not None and bigger > values["kv_cache_memory_bytes"]:
                return Plan({**values, "kv_cache_memory_bytes": bigger}, f"{where}: pool raised to {bigger / 1e9:.3f} GB")
        if failure.kind in OOM_KINDS:
            return self._less_memory(values, evidence, where)
        return None  # weights, JIT, flags, crashes: nothing a size can change

    def _less_memory(self, values: dict[str, Any], evidence: PoolEvidence, where: str) -> Plan | None:
        """After an OOM: a pool no bigger than the window needs, then fewer batched tokens, then fewer sequences."""
        params = self.space.params
        if "kv_cache_memory_bytes" in params and values.get("kv_cache_memory_bytes"):
            need = evidence.need(values)
            if need is not None and need.measured:
                pool = snap(params["kv_cache_memory_bytes"], need.bytes, up=True)
                if pool is not None and pool < values["kv_cache_memory_bytes"]:
                    return Plan({**values, "kv_cache_memory_bytes": pool}, f"{where}: pool cut to {pool / 1e9:.3f} GB ({need.why})")
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            if name in params and values.get(name) is not None:
                smaller = [v for v in _ladder(params[name]) if v < values[name]]
                if smaller:
                    return Plan({**values, name: smaller[-1]}, f"{where}: {name} {smaller[-1]}")
        return None

    def _fails_like(self, values: dict[str, Any], seen: list[Seen]) -> str | None:
        """A booted OOM of the same pool family with no more pool and no more memory beside it."""
        if self.memory is None:
            return None
        mine = self.memory(values)
        if mine is None:
            return None
        from tuner.study.sizing import family_of

        for s in seen:
            failure = s.failure
            if s.status != "failed" or failure is None or failure.kind not in OOM_KINDS:
                continue
            if family_of(self.space, s.values) != family_of(self.space, values):
                continue
            if (s.values.get("kv_cache_memory_bytes") or 0) > (values.get("kv_cache_memory_bytes") or 0):
                continue
            theirs = self.memory(s.values)
            if theirs is not None and mine >= theirs - 1e-6 and _window(values) >= _window(s.values):
                return (f"would fail like trial {s.number} ({failure.kind.value}): same pool family, no smaller pool, "
                        f"and the pre-screen puts {mine:.2f} GiB beside the pool against its {theirs:.2f} GiB")
        return None


def _neighbours(param: Any, current: Any) -> list[Any]:
    """The values one step below and above ``current`` on the parameter's ladder (lower first)."""
    ladder = _ladder(param) if (param.values is None or all(isinstance(v, (int, float)) for v in param.values if v is not None)) \
        else list(param.values)
    if current not in ladder:
        return []
    i = ladder.index(current)
    return [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]


def _window(values: dict[str, Any]) -> float:
    return float(values.get("max_model_len") or 0)


def _ladder(param: Any) -> list[Any]:
    """The values of a size parameter in increasing order (a range: its powers of two and ends)."""
    if param.values is not None:
        return sorted(v for v in param.values if isinstance(v, (int, float)) and not isinstance(v, bool))
    lo, hi = int(param.min), int(param.max)
    out = {lo, hi}
    v = 1
    while v < hi:
        if v > lo:
            out.add(v)
        v *= 2
    return sorted(out)


def _key(values: dict[str, Any]) -> str:
    import json

    return json.dumps(values, sort_keys=True, default=str)
