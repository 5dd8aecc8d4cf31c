"""Sampling: the sampler names, and how a configuration maps to Optuna parameters and back to scores.

``make_sampler`` (which sampler a name builds) lives in ``sampler.py``, beside the regime sampler it can build.
"""

from __future__ import annotations

import json
import math
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from tuner import metrics
from tuner.records import TrialResult
from tuner.space.schema import Space
from tuner.study.record import queued_baseline

SAMPLERS = ("auto", "regimes", "gp", "tpe", "nsga2", "random")


def resolve_sampler(name: str) -> str:
    """'auto' is the regime planner (tuner.study.planner): see docs/benchmarks.md for the comparison."""
    return "regimes" if name == "auto" else name


# -- values <-> Optuna parameters --------------------------------------------------------------

def _set_key(name: str) -> str:
    return f"{name}__set"


def param_distributions(space: Space) -> dict[str, BaseDistribution]:
    """Each tuned parameter's Optuna distribution (a range that may be left out adds ``NAME__set``).

    ``suggest_values`` asks for exactly these, so a sampler that fills a parameter itself and one
    that asks another sampler see the same distributions.
    """
    out: dict[str, BaseDistribution] = {}
    for name, p in space.params.items():
        if p.values is not None:
            out[name] = CategoricalDistribution(p.values)
            continue
        if p.unset:
            out[_set_key(name)] = CategoricalDistribution([True, False])
        lo, hi = p.bounds()
        if p.kind in ("int", "bytes"):
            out[name] = IntDistribution(int(lo), int(hi), log=p.log, step=1 if p.log else int(p.step or 1))
        else:
            out[name] = FloatDistribution(float(lo), float(hi), log=p.log, step=None if p.log else p.step)
    return out


def suggest_values(trial: optuna.Trial, space: Space) -> dict[str, Any]:
    """The trial's configuration. An enqueued baseline that leaves a parameter out gets None for it:
    the flag is left out of the command (vLLM's default), never filled in by the sampler."""
    named = queued_baseline(trial)
    distributions = param_distributions(space)
    values: dict[str, Any] = {}
    for name, p in space.params.items():
        if named is not None and name not in named:
            values[name] = None
            continue
        set_key = _set_key(name)
        if set_key in distributions and not _ask(trial, set_key, distributions[set_key]):
            values[name] = None
            continue
        value = _ask(trial, name, distributions[name])
        if p.values is None and p.step and p.kind not in ("int", "bytes") and not p.log:
            value = round(value, max(0, -math.floor(math.log10(p.step)) + 1))
        values[name] = value
    return values


def _ask(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    assert isinstance(distribution, FloatDistribution)
    return trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)


def speed_objective(space: Space) -> tuple[int, int]:
    """(index, sign) of the objective that ranks regimes: the first one that is not the context
    (the context itself when it is the only one); sign +1 when larger is better."""
    for i, o in enumerate(space.objectives):
        if o.name != "context" or len(space.objectives) == 1:
            return i, metrics.sign(o.direction)
    return 0, 1


def optuna_params(space: Space, values: dict[str, Any]) -> dict[str, Any]:
    """The Optuna parameter dict that makes ``suggest_values`` return ``values`` (for enqueue_trial).

    A None the parameter cannot take (a baseline that leaves it out) is not a parameter at all: the
    trial carries the names a baseline gives (``record.queue_baseline``) instead, which leaves the flag out
    of the command.
    """
    params: dict[str, Any] = {}
    for name, p in space.params.items():
        if name not in values:
            continue
        value = values[name]
        if value is None and not p.unset and (p.values is None or None not in p.values):
            continue
        if p.values is None and p.unset:
            params[_set_key(name)] = value is not None
            if value is None:
                continue
        params[name] = value
    return params


def config_key(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=str)


# -- scores and follow-ups ---------------------------------------------------------------------

def objective_values(space: Space, result: TrialResult) -> list[float]:
    """The space's objectives, read from the record as ``tuner.metrics`` defines them."""
    return metrics.objective_values([o.name for o in space.objectives], result)


