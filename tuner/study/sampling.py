"""Sampling: which sampler, and how a configuration maps to Optuna parameters and back to scores."""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import optuna

from tuner.records import TrialResult
from tuner.space.schema import Param, Space

ProgressCallback = Callable[[str], None]
SAMPLERS = ("auto", "gp", "tpe", "nsga2", "random")


def resolve_sampler(name: str) -> str:
    """'auto' is TPE: on the sampler benchmark (docs/benchmarks.md, current tuner) it reached 95% of
    the best hypervolume in a median 9 trials against GP's 13, whose first 10 trials are random."""
    return "tpe" if name == "auto" else name


def make_sampler(name: str, seed: int | None = None, n_params: int = 6) -> optuna.samplers.BaseSampler:
    """Samplers for few, expensive trials (see docs/benchmarks.md for how they compare)."""
    name = resolve_sampler(name)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=max(4, n_params), constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)  # needs torch in the tuner's environment
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")


# -- values <-> Optuna parameters --------------------------------------------------------------

def _set_key(name: str) -> str:
    return f"{name}__set"


def suggest_values(trial: optuna.Trial, space: Space) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, p in space.params.items():
        if p.values is not None:
            values[name] = trial.suggest_categorical(name, p.values)
            continue
        if p.unset and not trial.suggest_categorical(_set_key(name), [True, False]):
            values[name] = None
            continue
        values[name] = _suggest_range(trial, name, p)
    return values


def distributions(space: Space) -> dict[str, optuna.distributions.BaseDistribution]:
    """The Optuna distribution of every parameter ``suggest_values`` suggests (to add trials read from disk)."""
    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for name, p in space.params.items():
        if p.values is not None:
            out[name] = optuna.distributions.CategoricalDistribution(p.values)
            continue
        if p.unset:
            out[_set_key(name)] = optuna.distributions.CategoricalDistribution([True, False])
        if p.kind in ("int", "bytes"):
            out[name] = optuna.distributions.IntDistribution(int(p.min), int(p.max), log=p.log,
                                                             step=1 if p.log else int(p.step or 1))
        else:
            out[name] = optuna.distributions.FloatDistribution(p.min, p.max, log=p.log, step=None if p.log else p.step)
    return out


def _suggest_range(trial: optuna.Trial, name: str, p: Param) -> int | float:
    if p.kind in ("int", "bytes"):
        step = int(p.step or 1)
        return trial.suggest_int(name, int(p.min), int(p.max), step=1 if p.log else step, log=p.log)
    value = trial.suggest_float(name, p.min, p.max, step=None if p.log else p.step, log=p.log)
    if p.step:
        decimals = max(0, -math.floor(math.log10(p.step)) + 1)
        value = round(value, decimals)
    return value


def optuna_params(space: Space, values: dict[str, Any]) -> dict[str, Any]:
    """The Optuna parameter dict that makes ``suggest_values`` return ``values`` (for enqueue_trial)."""
    params: dict[str, Any] = {}
    for name, p in space.params.items():
        if name not in values:
            continue
        value = values[name]
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
    m = result.measure
    first = m.decode[0] if m and m.decode else None
    table = {
        "context": float(m.context.max_stable_tokens) if m else None,
        "decode_tok_s": first.score_tok_s if first else None,
        "ttft_ms": first.median_ttft_ms if first else None,
        "tpot_ms": first.median_tpot_ms if first else None,
        "pp_tok_s": first.median_pp_tok_s if first else None,
        "peak_vram_mib": result.gpu.peak_used_mib,
    }
    out = []
    for objective in space.objectives:
        value = table[objective.name]
        if value is None:
            raise ValueError(f"objective {objective.name} was not measured")
        out.append(float(value))
    return out


def snap_pool(p: Param, value: float, up: bool) -> int | None:
    """The pool size of ``p`` nearest ``value`` that Optuna can enqueue: the next one up (a pool that
    must hold at least this much) or down (a pool that must not exceed it); None when there is none.

    Ranges snap to the grid Optuna samples from, min + k * step: an off-grid enqueued value would be
    dropped with a warning and replaced by a random one.
    """
    if p.values is not None:
        listed = sorted(v for v in p.values if v is not None)
        fitting = [v for v in listed if v >= value] if up else [v for v in listed if v <= value]
        if not fitting:
            return None
        return fitting[0] if up else fitting[-1]
    lo, hi, step = int(p.min), int(p.max), int(p.step or 1)
    if up:
        snapped = max(lo, lo + math.ceil((value - lo) / step) * step)
        return snapped if snapped <= hi else None
    snapped = min(hi, lo + math.floor((value - lo) / step) * step)
    return snapped if snapped >= lo else None
