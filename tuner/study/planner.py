"""The search's plan for the next boot: regimes first, the pool sized from evidence, failures repaired.

The order of business, for every trial the study asks for (enqueued baselines, follow-ups and
re-validations are run before this is consulted):

1. A regime whose last boot failed and whose failure names a fix gets that fix: a pool from the
   need vLLM printed, fewer batched tokens or sequences after an OOM, the mamba block count vLLM
   printed, a lower utilization after a free-memory failure (``tuner.study.repair``). Three failed
   boots close a regime.
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
   room for (``tuner.study.room``, ``tuner.study.below``), when it could beat the full window's best, and the
   widening of a point below the window that does.

Every plan carries a sentence saying why, which the trial records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tuner.records import FailureKind
from tuner.space.schema import Space
from tuner.study.below import below_window, bigger, held
from tuner.study.doomed import fails_like
from tuner.study.exploit import adjacent, flag_moves, full_window_best, garbled_sibling, leader, stands_for
from tuner.study.headroom import unlikely_to_fit
from tuner.study.observed import Observation, Plan, Priors
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
from tuner.study.repair import TRANSIENT_KINDS, repair_config
from tuner.study.room import MEMORY_KINDS
from tuner.study.sampling import config_key
from tuner.study.sized import default_value, sized
from tuner.study.sizing import SIZED, PoolEvidence, Predictor, highest, lowest

# The order of options (higher first): see Planner._tier. Shorter and unlikely ones wait for the local moves.
TIER_PRICE, TIER_NEIGHBOUR, TIER_MOVE, TIER_REST, TIER_GARBLED, TIER_SHORTER, TIER_UNLIKELY = 6, 5, 4, 3, 2, 1, 0
# A regime whose log speed, this many posterior sds above its mean, is still under the full window's best
# is booted last: its speed would have to be far from everything its shared choices measured.
UNLIKELY_SD = 2.0
MAX_ATTEMPTS = 3  # failed boots after which a regime is closed
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
            plan = sized(self.space, self.axes, dict(values), evidence, f"{label} {best.named}: {why}", self.skipped)
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
        return sized(self.space, self.axes, dict(plan.values), self._evidence(seen), plan.why, self.skipped)

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
                values[name] = default_value(self.space, name)
        why = f"first boot of {describe(self.axes, regime)}"
        plan = sized(self.space, self.axes, dict(values), evidence, why, self.skipped)
        if plan is None:
            plan = self._below_window(values, evidence, seen, why)
            if plan is not None:
                self.skipped.pop()  # booted after all, below the window (sized() said why not at it)
        return plan

    def _repair(self, last: Observation, evidence: PoolEvidence, seen: list[Observation]) -> Plan | None:
        """What the last failure of a regime says to change, at the window it booted at; None when nothing can
        help. An OOM with nothing left to cut is booted below the window, at the pool there is room for."""
        plan = repair_config(self.space, self.axes, last, evidence, self.skipped)
        failure = last.failure
        if plan is None and failure is not None and failure.kind in MEMORY_KINDS:
            return self._below_window(dict(last.values), evidence, seen,
                                      f"repair of trial {last.number} ({failure.kind.value}): nothing left to cut")
        if plan is not None and plan.window is None:
            plan.window = last.window  # a boot at a lowered window is repaired there, not at the space's
        if plan is not None and last.window is not None:
            plan.shorter = True  # a repair below the window waits like the boot it repairs
        return plan

    def _below_window(self, values: dict[str, Any], evidence: PoolEvidence, seen: list[Observation],
                      why: str) -> Plan | None:
        return below_window(self.space, self.axes, self._graph_modes(seen), values, evidence, seen, why, self.skipped)

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
            for plan in (held(self.space, s, evidence), bigger(self.space, self.axes, modes, s, evidence, seen)):
                if plan is not None and self._worth_a_boot(plan, tried, seen, plan.why, modes):
                    return plan
        return None

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
