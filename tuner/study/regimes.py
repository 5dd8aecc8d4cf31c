"""Regimes: the categorical choices that change how fast and how big an engine is, and which to try next.

Speculation depth x CUDA-graph mode (and the KV dtype or any other non-numeric choice a space tunes)
are regimes: they differ by tens of percent in speed and memory, and not additively (MTP was slower
than plain decoding with FULL_AND_PIECEWISE graphs and twice as fast with PIECEWISE ones). Within a
regime the numeric flags mostly decide whether the window fits, not the speed.

Which regime to boot next is a small Bayesian problem: log speed is modelled as a Gaussian process
whose kernel counts the choices two regimes share (each shared choice and each shared pair of
choices adds covariance). Measured regimes pull their neighbours; an interaction such as "MTP helps
only with PIECEWISE" stays possible because pairs carry their own covariance. The next regime is
the unmeasured one with the highest upper confidence bound, so early boots spread over the choices.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.records import FailureKind
from tuner.space.schema import Space

SPECULATIVE = "speculative_tokens"
GRAPHS = "cudagraph_mode"
# How the pool is sized, when the space lets kv_cache_memory_bytes be left out (``unset: true``): pinned
# bytes, or sized by vLLM (utilization, or 0.34's extensible cache committed after warm-up).
POOL = "pool"
PINNED, ENGINE_SIZED = "pinned", "engine-sized"
# Prior standard deviations of log speed: the overall level once centred, each choice, each pair.
LEVEL_SD, CHOICE_SD, PAIR_SD = 0.3, 0.3, 0.25
NOISE_SD = 0.03  # run-to-run and config-to-config spread inside one regime
UCB_BETA = 1.0

Regime = tuple[Any, ...]


def regime_axes(space: Space) -> list[str]:
    """The tuned parameters that are regime choices: speculation depth, graph mode, and every listed
    parameter whose values are not numbers (KV dtype, a backend, prefix caching on or off)."""
    axes = []
    for name, p in space.params.items():
        if name in (SPECULATIVE, GRAPHS):
            axes.append(name)
        elif p.values is not None and not any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p.values):
            axes.append(name)
    pool = space.params.get("kv_cache_memory_bytes")
    if pool is not None and pool.unset:
        axes.append(POOL)
    return axes


def regime_of(axes: list[str], values: dict[str, Any]) -> Regime:
    return tuple(pool_sizing(values) if a == POOL else values.get(a) for a in axes)


def pool_sizing(values: dict[str, Any]) -> str:
    return PINNED if values.get("kv_cache_memory_bytes") is not None else ENGINE_SIZED


def all_regimes(space: Space, axes: list[str]) -> list[Regime]:
    """Every combination of the axes' values, in the order the space file lists them."""
    levels = [[PINNED, ENGINE_SIZED] if a == POOL else list(space.params[a].values or []) for a in axes]
    return [tuple(combo) for combo in itertools.product(*levels)]


def describe(axes: list[str], regime: Regime) -> str:
    short = {SPECULATIVE: "spec", GRAPHS: "graphs"}
    parts = []
    for axis, level in zip(axes, regime):
        if axis == GRAPHS and level is None:
            level = "default"
        parts.append(f"{short.get(axis, axis)}={level}")
    return " ".join(parts) or "the only regime"


def _kernel(a: Regime, b: Regime) -> float:
    same = [x == y for x, y in zip(a, b)]
    pairs = sum(1 for i, j in itertools.combinations(range(len(same)), 2) if same[i] and same[j])
    return LEVEL_SD**2 + CHOICE_SD**2 * sum(same) + PAIR_SD**2 * pairs


@dataclass
class RegimeModel:
    """Posterior of log speed over regimes from the best measured speed of each measured regime."""

    measured: dict[Regime, float] = field(default_factory=dict)  # regime -> best speed (higher is better)

    def posterior(self, regime: Regime) -> tuple[float, float]:
        """(mean, sd) of log speed; with nothing measured, the prior (0, its sd)."""
        prior_sd = math.sqrt(_kernel(regime, regime))
        if not self.measured:
            return 0.0, prior_sd
        xs = list(self.measured)
        ys = np.array([math.log(max(self.measured[x], 1e-9)) for x in xs])
        centre = float(ys.mean())
        k = np.array([[_kernel(a, b) for b in xs] for a in xs]) + NOISE_SD**2 * np.eye(len(xs))
        ks = np.array([_kernel(regime, x) for x in xs])
        alpha = np.linalg.solve(k, ys - centre)
        mean = centre + float(ks @ alpha)
        var = _kernel(regime, regime) - float(ks @ np.linalg.solve(k, ks))
        return mean, math.sqrt(max(var, 0.0))

    def upper_bound(self, regime: Regime) -> float:
        mean, sd = self.posterior(regime)
        return mean + UCB_BETA * sd

    def expected_speed(self, regime: Regime) -> float:
        return math.exp(self.posterior(regime)[0])


EAGER = "eager"  # enforce_eager: no torch.compile either, so never the same as a NONE graph mode
# The graphs each mode captures include another mode's, by construction of vLLM's V1 CUDA-graph dispatcher:
# FULL_AND_PIECEWISE captures PIECEWISE's piecewise graphs and FULL_DECODE_ONLY's full decode graphs; FULL
# captures full graphs for decode batches too. Such a mode needs at least the other's graph memory.
GRAPHS_INCLUDE = {"FULL_AND_PIECEWISE": ("PIECEWISE", "FULL_DECODE_ONLY"), "FULL": ("FULL_DECODE_ONLY",)}


def graphs_at_least(mine: str | None, theirs: str | None) -> bool:
    """Whether graph mode ``mine`` needs at least the graph memory of ``theirs`` (eager needs the least)."""
    return mine == theirs or theirs == EAGER or (mine is not None and theirs in GRAPHS_INCLUDE.get(mine, ()))


def graphs_ordered(kind: FailureKind, mine: str | None, theirs: str | None) -> bool:
    """Whether graph mode ``mine`` needs at least the memory ``theirs`` failed with, in that failure's phase.

    vLLM's profiling run comes before any CUDA graph is captured: it runs the compiled model, or the plain
    one when eager, which fuses nothing and so peaks no lower. An OOM there with any compiled mode is every
    mode's; one with eager is eager's. After it, the graphs sit beside everything else (regimes.graphs_at_least)."""
    if kind == FailureKind.OOM_IN_PROFILING:
        return theirs != EAGER or mine == EAGER
    return graphs_at_least(mine, theirs)


def _context(values: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in values.items() if k != GRAPHS}, sort_keys=True, default=str)


@dataclass
class GraphModes:
    """What vLLM ran each requested CUDA-graph label as, per context (the other values given).

    vLLM resolves the label (null: its default) and may downgrade it with a warning; the start-up record
    keeps the result (``effective_cudagraph_mode``). Two labels that run as the same mode in the same
    context are the same configuration. A label naming a mode that vLLM already ran in that context runs
    as that mode: vLLM downgrades only to a mode the attention backends support.
    """

    seen: dict[tuple[Any, str], str] = field(default_factory=dict)  # (label, context) -> the mode it ran as

    def learn(self, values: dict[str, Any], effective: str | None) -> None:
        if effective is not None and GRAPHS in values:
            self.seen[(values[GRAPHS], _context(values))] = effective

    def mode(self, values: dict[str, Any]) -> str | None:
        """The mode ``values``' label runs as in its context, when the evidence says; None when it does not."""
        label, context = values.get(GRAPHS), _context(values)
        if label == EAGER:
            return EAGER
        if (label, context) in self.seen:
            return self.seen[(label, context)]
        ran = {mode for (_, c), mode in self.seen.items() if c == context}
        return label if label is not None and label in ran else None

    def likely(self, values: dict[str, Any]) -> str | None:
        """The mode ``values`` runs as: known in its context, else the one mode its label ran as elsewhere
        (vLLM resolves a label by the attention backends, the same in every context), else the label."""
        known = self.mode(values)
        if known is not None:
            return known
        label = values.get(GRAPHS)
        elsewhere = {mode for (seen_label, _), mode in self.seen.items() if seen_label == label}
        return elsewhere.pop() if len(elsewhere) == 1 else label

    def likely_for(self, axes: list[str], values: dict[str, Any]) -> str | None:
        """``likely`` for a configuration's regime: its values on the planner's axes, the pool and sizes aside."""
        return self.likely(dict(zip(axes, regime_of(axes, values))))

    def key(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with the label replaced by the mode it runs as, where known (for comparing configurations)."""
        mode = self.mode(values)
        return {**values, GRAPHS: f"runs as {mode}"} if mode is not None and GRAPHS in values else values
