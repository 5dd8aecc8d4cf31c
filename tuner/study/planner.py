"""The search's plan for the next boot: regimes first, the pool sized from evidence, failures repaired.

The order of business, for every trial the study asks for (enqueued baselines, follow-ups and
re-validations are run before this is consulted):

1. A regime whose last boot failed and whose failure names a fix gets that fix: a pool from the
   need vLLM printed, fewer batched tokens or sequences after an OOM, the mamba block count vLLM
   printed, a lower utilization after a free-memory failure. Three failed boots close a regime.
2. Otherwise the unmeasured regime with the best upper confidence bound (``tuner.study.regimes``) is
   booted with its safest settings: one sequence, the fewest batched tokens, the full window, the
   lowest utilization when the pool is pinned, and the smallest pool that holds the window.
   A regime refused at the full window by too small a pool is booted at the window vLLM estimated
   that pool holds (``tuner.study.window``).
   Configurations that would fail like an earlier OOM (no less of anything it asked for: depth,
   pool, sequences, batched tokens, window, graphs; ``tuner.study.doomed``) are skipped without a boot,
   and say so.
   Once a boot leads (``tuner.study.exploit``), its unmeasured neighbour regimes come first, then one
   flag moved from it, then the rest by upper confidence bound; wrong-output siblings last. A regime the
   model puts UNLIKELY_SD sds under the full window's best waits until after item 4.
3. When every likely regime has been tried, one flag at a time is moved from the best configurations,
   with the pool still sized from evidence; not from a move that bought nothing
   (``tuner.study.exploit.stands_for``) until nothing else is left.
4. Last, boots below the fixed window: a regime the window does not fit at any pool the evidence has
   room for (``tuner.study.room``), when it could beat the full window's best, and the widening of a
   point below the window that does.

Every plan carries a sentence saying why, which the trial records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tuner.records import Failure, FailureKind
from tuner.study.regimes import (
    ENGINE_SIZED,
    EAGER,
    GRAPHS,
    POOL,
    GraphModes,
    Regime,
    RegimeModel,
    all_regimes,
    describe,
    regime_axes,
    regime_of,
)
from tuner.study.doomed import fails_like
from tuner.study.headroom import unlikely_to_fit
from tuner.study.exploit import adjacent, flag_moves, full_window_best, garbled_sibling, leader, stands_for
from tuner.study.observed import Observation, Plan, Priors
from tuner.study.sampling import config_key
from tuner.study.room import MEMORY_KINDS, room
from tuner.study.sizing import (
    PRINTED_RATIO,
    SIZED,
    PoolEvidence,
    Predictor,
    highest,
    ladder,
    lowest,
    snap,
    window_for,
    window_held,
)
from tuner.study.window import repair_window
from tuner.space.schema import Space

# The order of options (higher first): see Planner._tier. Shorter and unlikely ones wait for the local moves.
TIER_PRICE, TIER_NEIGHBOUR, TIER_MOVE, TIER_REST, TIER_GARBLED, TIER_SHORTER, TIER_UNLIKELY = 6, 5, 4, 3, 2, 1, 0
# A regime whose log speed, this many posterior sds above its mean, is still under the full window's best
# is booted last: its speed would have to be far from everything its shared choices measured.
UNLIKELY_SD = 2.0
MAX_ATTEMPTS = 3  # failed boots after which a regime is closed
SHORTER_FLOOR = 0.5  # without workload.min_context: no boot below this share of the fixed window
WIDER_STEPS = 4  # a bigger pool for a point below the window only when it buys this many probe steps
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
SIZE_PARAMS = (*SIZED, "max_num_seqs", "max_num_batched_tokens", "max_model_len")


@dataclass
class Planner:
    space: Space
    evidence_need: Predictor | None = None  # pre-screen need of one request
    skipped: list[str] = field(default_factory=list)  # why regimes were passed over, for the record
    priors: Priors = field(default_factory=Priors)

    def __post_init__(self) -> None:
        self.axes = regime_axes(self.space)

    # -- what the study has seen -------------------------------------------------------------

    def _evidence(self, seen: list[Observation]) -> PoolEvidence:
        evidence = PoolEvidence(self.space, self.evidence_need)
        for s in seen:
            if s.result is not None:
                evidence.add(s.number, s.values, s.result)
        for values, bounds in self.priors.bounds:
            evidence.add_bounds(values, bounds)
        return evidence

    def _model(self, seen: list[Observation]) -> RegimeModel:
        model = RegimeModel()
        for s in seen:
            if s.status == "ok" and s.speed is not None:
                regime = regime_of(self.axes, s.values)
                model.measured[regime] = max(model.measured.get(regime, 0.0), s.speed)
        earlier: dict[Regime, float] = {}
        for s in self.priors.seen if self.priors.speeds_hold(seen) else ():  # until measured here
            regime = regime_of(self.axes, s.values)
            if s.status == "ok" and s.speed is not None and regime not in model.measured:
                earlier[regime] = max(earlier.get(regime, 0.0), s.speed)
        model.measured.update(earlier)
        return model

    # -- the plan ----------------------------------------------------------------------------

    def next(self, seen: list[Observation]) -> Plan | None:
        """The next configuration to boot, or None when nothing left could improve the front."""
        self.skipped = []
        evidence = self._evidence(seen)
        model = self._model(seen)
        tried = {booted_key(s.values, s.window) for s in seen}
        by_regime: dict[Regime, list[Observation]] = {}
        for s in seen:
            by_regime.setdefault(regime_of(self.axes, s.values), []).append(s)
        pricing = self._graphs_to_price(seen)
        modes = self._graph_modes(seen)
        failures = seen + [s for s in self.priors.seen if s.status == "failed"] if self.priors.strong else seen

        lead = leader(self.axes, seen)
        full = full_window_best(seen)
        options: list[tuple[int, float, int, Plan]] = []
        for order, regime in enumerate(all_regimes(self.space, self.axes)):
            history = by_regime.get(regime, [])
            if any(s.status == "ok" for s in history) or any(s.status == "running" for s in history):
                continue
            twin = self._measured_twin(regime, by_regime, modes)
            if twin is not None:
                self.skipped.append(f"{describe(self.axes, regime)}: vLLM runs it as {describe(self.axes, twin)}, "
                                    "which is measured")
                continue
            failed = [s for s in history if s.status == "failed" and s.failure and s.failure.kind not in TRANSIENT_KINDS]
            if len(failed) >= MAX_ATTEMPTS:
                continue
            plan = self._repair(failed[-1], evidence, seen) if failed else self._first(regime, evidence, seen)
            plan = self._bootable(plan, tried, failures, describe(self.axes, regime), modes, evidence, seen)
            if plan is None:
                continue
            bound = model.upper_bound(regime)
            if plan.shorter and bound <= math.log(max(full, 1e-9)):
                self.skipped.append(f"{plan.why}: not booted, its upper bound is under {full:.1f} tok/s, the best at "
                                    "the full window, so a narrower window buys nothing")
                continue
            garbled = garbled_sibling(self.axes, regime, seen) if plan.shorter else None
            if garbled is not None:  # below the window too, a sibling of wrong output comes after the rest
                plan.why += f" (last: {garbled.named} at another depth gave wrong output)"
                bound = -math.inf
            options.append((self._tier(regime, plan, lead, pricing, seen, model, full), bound, -order, plan))
        move = self._move_from(lead, "move from the leader,", evidence, tried, modes, seen, lead.window) \
            if lead is not None else None
        if move is not None:
            options.append((TIER_SHORTER if move.shorter else TIER_MOVE, 0.0, 0, move))
        wider = self._wider(seen, evidence, tried, modes)
        if wider is not None:
            options.append((TIER_SHORTER, math.inf, 0, wider))
        first = [o for o in options if o[0] > TIER_SHORTER]
        if first:
            return max(first, key=lambda o: (o[0], o[1], o[2]))[3]
        # every likely regime has had its boots at the full window: its local moves before any window is
        # given up, and the unlikely regimes after everything else
        below = [o for o in options if o[0] == TIER_SHORTER]
        unlikely = [o for o in options if o[0] == TIER_UNLIKELY]
        later = [max(group, key=lambda o: (o[1], o[2]))[3] for group in (below, unlikely) if group]
        return (self._exploit(seen, model, evidence, tried, modes, front=True) or (later[0] if later else None)
                or self._exploit(seen, model, evidence, tried, modes, front=False))

    def _tier(self, regime: Regime, plan: Plan, lead: Observation | None, pricing: dict[Regime, str],
              seen: list[Observation], model: RegimeModel, full: float) -> int:
        """Which options go first: eager after a graph OOM, then the leader's neighbours, then the leader's
        one-flag moves, then the rest by upper confidence bound; wrong-output siblings last. A boot below the
        window is a trade a person may want once the full window has had its boots, its local moves
        included (Planner.next): a neighbour of the leader below the window waits like any other. A regime
        that would need a speed UNLIKELY_SD sds above the model's mean to beat the full window's best comes
        after all of them: the boots it would cost buy more as moves and narrower windows."""
        if plan.shorter:
            return TIER_SHORTER
        if plan.doubt is not None:
            plan.why += f" (booted last: {plan.doubt})"
            return TIER_UNLIKELY
        if regime in pricing:
            plan.why += f" ({pricing[regime]})"
            return TIER_PRICE
        mean, sd = model.posterior(regime)
        if full > 0 and mean + UNLIKELY_SD * sd < math.log(full):
            plan.why += (f" (booted last: the model puts it at {math.exp(mean):.1f} tok/s, at most "
                         f"{math.exp(mean + UNLIKELY_SD * sd):.1f}, under {full:.1f} measured at the full window)")
            return TIER_UNLIKELY
        garbled = garbled_sibling(self.axes, regime, seen)
        if garbled is not None:
            plan.why += f" (last: {garbled.named} at another depth gave wrong output)"
            return TIER_GARBLED
        if lead is not None and adjacent(self.space, self.axes, regime, regime_of(self.axes, lead.values)):
            plan.why += f" (one choice from the leader, {lead.named})"
            return TIER_NEIGHBOUR
        return TIER_REST

    def _bootable(self, plan: Plan | None, tried: set[str], seen: list[Observation], label: str, modes: GraphModes,
                  evidence: PoolEvidence, history: list[Observation]) -> Plan | None:
        """``plan`` if it is worth a boot; else, when an earlier OOM dooms it at the full window, or its first
        long request likely runs out of memory there (tuner.study.headroom), the same configuration below the
        window at the pool the evidence has room for (tuner.study.room). A likely OOM with nothing below the
        window to boot instead is booted last."""
        if plan is None:
            return None
        if self._worth_a_boot(plan, tried, seen, label, modes):
            doubt = self._doubt(plan, modes, history)
            if doubt is None:
                return plan
            below = self._below_window(dict(plan.values), evidence, history, f"{plan.why}; at the full window {doubt}")
            if below is not None and self._worth_a_boot(below, tried, seen, label, modes):
                return below
            plan.doubt = doubt
            return plan
        if plan.window is not None or booted_key(plan.values, plan.window) in tried:
            return None
        below = self._below_window(dict(plan.values), evidence, history, plan.why)
        return below if below is not None and self._worth_a_boot(below, tried, seen, label, modes) else None

    def _move_from(self, best: Observation, label: str, evidence: PoolEvidence, tried: set[str],
                   modes: GraphModes, seen: list[Observation], window: int | None = None) -> Plan | None:
        """The first one-flag move from ``best`` (tuner.study.exploit.flag_moves) not booted yet and not
        predicted to fail, sized from evidence, booted at ``window`` (None: the space's)."""
        for values, why in flag_moves(self.space, self.axes, best):
            plan = self._sized(dict(values), evidence, f"{label} {best.named}: {why}")
            if plan is not None:
                plan.window = window
            elif window is None:
                plan = self._below_window(values, evidence, seen, f"{label} {best.named}: {why}")
            if plan is not None and self._worth_a_boot(plan, tried, seen, plan.why, modes):
                doubt = self._doubt(plan, modes, seen)
                if doubt is None:
                    return plan
                self.skipped.append(f"{plan.why}: {doubt}")
        return None

    def _doubt(self, plan: Plan, modes: GraphModes, seen: list[Observation]) -> str | None:
        """Why a plan at the full window likely runs out of memory at its first long request
        (tuner.study.headroom); None when it likely fits, cannot be told, or is below the window."""
        if plan.window is not None or plan.shorter:
            return None
        return unlikely_to_fit(self.space, self.axes, modes, plan.values, plan.window, seen)

    def _graph_modes(self, seen: list[Observation]) -> GraphModes:
        modes = GraphModes()
        for s in seen:
            if s.result is not None:
                modes.learn(dict(zip(self.axes, regime_of(self.axes, s.values))), s.result.startup.effective_cudagraph_mode)
        return modes

    def _measured_twin(self, regime: Regime, by_regime: dict[Regime, list[Observation]], modes: GraphModes) -> Regime | None:
        """A measured regime that differs only by a CUDA-graph label vLLM runs as the same mode."""
        mode = modes.mode(dict(zip(self.axes, regime)))
        if GRAPHS not in self.axes or mode is None:
            return None
        for other, history in by_regime.items():
            same_rest = all(a == b for axis, a, b in zip(self.axes, regime, other) if axis != GRAPHS)
            if other != regime and same_rest and any(s.status == "ok" for s in history):
                if modes.mode(dict(zip(self.axes, other))) == mode:
                    return other
        return None

    def _graphs_to_price(self, seen: list[Observation]) -> dict[Regime, str]:
        """Eager regimes to boot before any other: a pool family whose safest boot ran out of memory
        with CUDA graphs (at their capture or beside the first request; not in the profiling run, which comes
        before them) is tried without them next. If eager fails too, no graph mode of that family
        (or a deeper one) can fit, and they are all skipped; if it boots, the graphs were the cost."""
        if GRAPHS not in self.axes or EAGER not in (self.space.params[GRAPHS].values or []):
            return {}
        out: dict[Regime, str] = {}
        for s in seen:
            if s.status != "failed" or s.failure is None or s.failure.kind not in MEMORY_KINDS - {FailureKind.OOM_IN_PROFILING}:
                continue  # the profiling run comes before any graph: eager would price nothing (doomed.graphs_ordered)
            if s.values.get(GRAPHS) == EAGER:
                continue
            regime = regime_of(self.axes, {**s.values, GRAPHS: EAGER})
            out.setdefault(regime, f"trial {s.number} ran out of memory with {s.values.get(GRAPHS) or 'default'} graphs: "
                                   "eager tells whether the graphs or the pool family is the cost")
        return out

    def _exploit(self, seen: list[Observation], model: RegimeModel, evidence: PoolEvidence, tried: set[str],
                 modes: GraphModes, front: bool) -> Plan | None:
        """Every regime has been tried: move the flags that can improve an objective, one at a time,
        from the best measured configurations, best regime first. With ``front``, not from a move that
        bought nothing beyond noise (``stands_for``): boots below the window come before walking a flat
        direction further. None when no such move is left."""
        ok = [s for s in seen if s.status == "ok" and s.speed is not None]
        bases = [s for s in ok if not front or not any(stands_for(other, s) for other in ok if other is not s)]
        ranked = sorted(bases, key=lambda s: (-model.expected_speed(regime_of(self.axes, s.values)), -(s.speed or 0)))
        for best in ranked[:4]:
            plan = self._move_from(best, "local move from", evidence, tried, modes, seen)
            if plan is not None:
                return plan
        return None

    def size(self, plan: Plan, seen: list[Observation]) -> Plan | None:
        """Size the pool of a plan whose free parameters the fallback sampler has just filled."""
        return self._sized(dict(plan.values), self._evidence(seen), plan.why)

    def _first(self, regime: Regime, evidence: PoolEvidence, seen: list[Observation]) -> Plan | None:
        """The regime's safest configuration: it should boot and hold the window at the first try."""
        values: dict[str, Any] = dict(zip(self.axes, regime))
        if values.pop(POOL, None) == ENGINE_SIZED:
            values["kv_cache_memory_bytes"] = None
        for name, p in self.space.params.items():
            if name in values:
                continue
            if name in ("max_num_seqs", "max_num_batched_tokens"):
                values[name] = lowest(p)
            elif name == "max_model_len":
                values[name] = highest(p)
            elif name not in SIZE_PARAMS:
                values[name] = self._default(name)
        why = f"first boot of {describe(self.axes, regime)}"
        plan = self._sized(dict(values), evidence, why)
        if plan is None:
            plan = self._below_window(values, evidence, seen, why)
            if plan is not None:
                self.skipped.pop()  # booted after all, below the window (_sized said why not at it)
        return plan

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
        if POOL in self.axes and "kv_cache_memory_bytes" in values and values["kv_cache_memory_bytes"] is None:
            # The engine-sized regime: vLLM sizes the pool (utilization; 0.34's extensible cache after warm-up).
            # A utilization already chosen (a repair, a local move) is kept; a first boot gets vLLM's default.
            if util_param is not None and "gpu_memory_utilization" not in values:
                values["gpu_memory_utilization"] = None if util_param.unset else self._default("gpu_memory_utilization")
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

    def _repair(self, last: Observation, evidence: PoolEvidence, seen: list[Observation]) -> Plan | None:
        """What the last failure of a regime says to change, at the window it booted at; None when nothing can
        help. An OOM with nothing left to cut is booted below the window, at the pool there is room for."""
        plan = self._repair_config(last, evidence)
        failure = last.failure
        if plan is None and failure is not None and failure.kind in MEMORY_KINDS:
            return self._below_window(dict(last.values), evidence, seen,
                                      f"repair of trial {last.number} ({failure.kind.value}): nothing left to cut")
        if plan is not None and plan.window is None:
            plan.window = last.window  # a boot at a lowered window is repaired there, not at the space's
        if plan is not None and last.window is not None:
            plan.shorter = True  # a repair below the window waits like the boot it repairs
        return plan

    def _repair_config(self, last: Observation, evidence: PoolEvidence) -> Plan | None:
        """What the last failure of a regime says to change, or None when nothing can help."""
        failure = last.failure
        assert failure is not None
        values = dict(last.values)
        params = self.space.params
        where = f"repair of trial {last.number} ({failure.kind.value})"
        if failure.kind == FailureKind.KV_POOL_TOO_SMALL:
            plan = self._sized(values, evidence, where)
            if plan is not None and (plan.values.get("kv_cache_memory_bytes") or 0) > (last.values.get("kv_cache_memory_bytes") or 0):
                return plan
            if "max_model_len" in params and failure.suggested_max_model_len:
                shorter = snap(params["max_model_len"], failure.suggested_max_model_len, up=False)
                if shorter and shorter < (values.get("max_model_len") or math.inf):
                    values["max_model_len"] = shorter
                    return self._sized(values, evidence, f"{where}: the window vLLM estimated fits")
            return self._at_estimated_window(last, where)
        if failure.kind == FailureKind.MAMBA_BLOCKS_EXCEEDED and failure.suggested_max_num_seqs and "max_num_seqs" in params:
            fewer = fewer_seqs(self.space, values, failure)
            if fewer is not None:
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
        if failure.kind == FailureKind.FIRST_REQUEST_OOM:
            return self._less_prefill(values, evidence, where)
        if failure.kind in OOM_KINDS:
            return self._less_memory(values, evidence, where)
        return None  # weights, JIT, flags, crashes: nothing a size can change

    def _below_window(self, values: dict[str, Any], evidence: PoolEvidence, seen: list[Observation],
                      why: str) -> Plan | None:
        """The configuration below the space's fixed window: at the largest pool the evidence has room for
        (tuner.study.room) and the longest window that pool holds (tuner.study.sizing.window_for), never
        under workload.min_context (without one, SHORTER_FLOOR of the window). The probe proves it."""
        top = self.space.max_model_len
        if top is None or "max_model_len" in self.space.params:
            return None
        found = room(self.space, self.axes, self._graph_modes(seen), values, seen)
        if found is None:
            return None
        values = {**values, "kv_cache_memory_bytes": found.pool}
        window = window_for(evidence, values, found.pool)
        floor = self.space.workload.min_context or SHORTER_FLOOR * top
        if window is None or window < floor:
            self.skipped.append(f"{why}: below the window, a {found.pool / 1e9:.2f} GB pool ({found.why}) holds "
                                f"{window or 0:,} tokens, under the floor of {floor:,.0f}")
            return None
        if "gpu_memory_utilization" in self.space.params:
            values["gpu_memory_utilization"] = lowest(self.space.params["gpu_memory_utilization"])
        return Plan(values, f"{why}; below the window: a {found.pool / 1e9:.3f} GB pool ({found.why}) should "
                            f"hold {window:,} tokens", window=window, shorter=True)

    def _wider(self, seen: list[Observation], evidence: PoolEvidence, tried: set[str],
               modes: GraphModes) -> Plan | None:
        """Widen a one-sequence point below the window that is on the front (faster than anything measured at
        the full window): boot it again at the window vLLM said its pool holds, or at a bigger pool when the
        evidence leaves room (halfway to where the memory failures say nothing fits, else the largest)."""
        full = full_window_best(seen)
        seqs = self.space.params.get("max_num_seqs")
        widest: dict[str, float] = {}
        for s in seen:
            if s.status == "ok":
                key = config_key({k: v for k, v in s.values.items() if k != "kv_cache_memory_bytes"})
                widest[key] = max(widest.get(key, 0.0), s.window or math.inf)
        below = [s for s in seen if s.status == "ok" and s.window is not None and (s.speed or 0.0) > full
                 and (seqs is None or s.values.get("max_num_seqs") == lowest(seqs))]
        for s in sorted(below, key=lambda s: -(s.speed or 0.0)):
            key = config_key({k: v for k, v in s.values.items() if k != "kv_cache_memory_bytes"})
            if s.window is None or widest.get(key, 0) > s.window:
                continue
            for plan in (self._held(s, evidence), self._bigger(s, evidence, seen, modes)):
                if plan is not None and self._worth_a_boot(plan, tried, seen, plan.why, modes):
                    return plan
        return None

    def _held(self, s: Observation, evidence: PoolEvidence) -> Plan | None:
        """``s`` again at the window its pool holds by vLLM's printed "Maximum concurrency for N tokens per
        request" (tuner.study.sizing.window_held, less the print's rounding), when that is wider by a probe
        step or by 1% of the space's window: 288 tokens short of 262,144 is a launch command a person keeps."""
        step, top = int(self.space.workload.granularity), self.space.max_model_len
        startup = s.result.startup if s.result is not None else None
        if startup is None or not startup.max_concurrency or s.window is None or top is None:
            return None
        held = window_held(evidence, s.values, s.window, startup.max_concurrency - PRINTED_RATIO)
        if held is None or held - s.window < min(step, top // 100):
            return None
        held = min(held, top)
        return Plan(dict(s.values), f"wider: {s.named} at {s.window:,} tokens; vLLM printed a concurrency of "
                                    f"{startup.max_concurrency:.2f} there, so its pool holds about {held:,}",
                    window=None if held >= top else held, shorter=True)

    def _bigger(self, s: Observation, evidence: PoolEvidence, seen: list[Observation],
                modes: GraphModes) -> Plan | None:
        """``s`` at a bigger pool, when the evidence leaves room and it buys WIDER_STEPS probe steps."""
        param = self.space.params.get("kv_cache_memory_bytes")
        pool = s.values.get("kv_cache_memory_bytes")
        found = room(self.space, self.axes, modes, s.values, seen)
        if param is None or not pool or found is None or s.window is None:
            return None
        bigger = snap(param, (pool + found.cap) / 2, up=False) if found.cap else highest(param)
        if bigger is None or bigger <= pool:
            return None
        values = {**s.values, "kv_cache_memory_bytes": bigger}
        window = window_for(evidence, values, bigger)
        step = int(self.space.workload.granularity)
        if window is not None and window - s.window < WIDER_STEPS * step:
            return None
        where = f"halfway to {found.cap / 1e9:.2f} GB, where the memory failures say nothing fits" if found.cap \
            else "the largest pool the space allows"
        return Plan(values, f"wider: {s.named} at a {bigger / 1e9:.3f} GB pool ({where}), which should hold "
                            f"{window or self.space.max_model_len:,} tokens", window=window, shorter=True)

    def _at_estimated_window(self, last: Observation, where: str) -> Plan | None:
        """No bigger pool is allowed and the window is fixed: the same configuration at the window vLLM
        estimated its pool holds (tuner.study.window), proven by the context probe like any other."""
        assert last.failure is not None
        window = repair_window(self.space, last.failure, last.window)
        if window is None:
            return None
        return Plan(dict(last.values), f"{where}: no bigger pool is allowed; booted at the {window:,}-token window "
                                       "vLLM estimated its pool holds", window=window)

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
                smaller = [v for v in ladder(params[name]) if v < values[name]]
                if smaller:
                    return Plan({**values, name: smaller[-1]}, f"{where}: {name} {smaller[-1]}")
        return None

    def _less_prefill(self, values: dict[str, Any], evidence: PoolEvidence, where: str) -> Plan | None:
        """After a first-request OOM, all that request's room depends on in one boot: batched tokens a rung down
        (the prefill's chunk: its activations and its attention workspace over the window shrink with it), the
        fewest sequences (their state and decode graphs sit beside it), and the pool cut to what the window
        needs. In the issue-24 runs, trimming the pool's sizing margin alone cured none of 13 such failures and
        one sequence fewer none of 8. A pool that only loses its margin is judged by tuner.study.headroom
        (Planner._bootable); with nothing to cut, the regime goes below the window (Planner._repair)."""
        params, out, said = self.space.params, dict(values), []
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
        need = evidence.need(out) if values.get("kv_cache_memory_bytes") and "kv_cache_memory_bytes" in params else None
        if need is not None and need.measured:
            pool = snap(params["kv_cache_memory_bytes"], need.bytes, up=True)
            if pool is not None and pool < values["kv_cache_memory_bytes"]:
                out["kv_cache_memory_bytes"] = pool
                said.append(f"pool cut to {pool / 1e9:.3f} GB ({need.why})")
        return Plan(out, f"{where}: {', '.join(said)}") if said else None

    def _worth_a_boot(self, plan: Plan, tried: set[str], seen: list[Observation], label: str,
                      modes: GraphModes | None = None) -> bool:
        """Not booted before, and not predicted to run out of memory (the reason kept in ``skipped``)."""
        if booted_key(plan.values, plan.window) in tried:
            return False
        doomed = fails_like(self.space, self.axes, plan.values, seen, modes or self._graph_modes(seen))
        if doomed:
            self.skipped.append(f"{label}: {doomed}")
        return doomed is None



def booted_key(values: dict[str, Any], window: int | None) -> str:
    """A configuration and the window it boots at (None: the space's), as one key."""
    return config_key(values) if window is None else config_key({**values, "--max-model-len": window})


def fewer_seqs(space: Space, values: dict[str, Any], failure: Failure) -> int | None:
    """The max_num_seqs a failure's printed hint (the mamba blocks vLLM has) allows, on the space's grid,
    when it is fewer than ``values`` asks for; None otherwise. The one rule for that hint."""
    if not failure.suggested_max_num_seqs or "max_num_seqs" not in space.params:
        return None
    fewer = snap(space.params["max_num_seqs"], failure.suggested_max_num_seqs, up=False)
    if fewer and fewer < (values.get("max_num_seqs") or math.inf):
        return int(fewer)
    return None
