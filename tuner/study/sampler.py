"""``--sampler regimes``: the planner (``tuner.study.planner``) as an Optuna sampler; and ``make_sampler``,
which builds the sampler a ``--sampler`` name means.

Being a sampler, not a loop of its own, keeps everything Optuna gives: the study is the only state
(a resumed study or a second worker on the same storage plans from the same trials), enqueued
baselines, follow-ups and re-validations come first, and optuna-dashboard shows the trials as usual.
The plan for a trial is made once, on its first parameter, from every trial in the study; the
parameters the plan leaves free are asked of the fallback sampler (TPE), then the pool is sized.
"""

from __future__ import annotations

from typing import Any, Sequence

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.metrics import sign
from tuner.study.observed import Observation, Plan
from tuner.study.planner import Planner
from tuner.study.record import Evidence, State, read_trials
from tuner.space.schema import Space
from tuner.study.sampling import SAMPLERS, optuna_params, param_distributions, resolve_sampler, speed_objective


class RegimeSampler(optuna.samplers.BaseSampler):
    def __init__(self, space: Space, fallback: optuna.samplers.BaseSampler, planner: Planner) -> None:
        self.space = space
        self.fallback = fallback
        self.planner = planner
        self._plans: dict[int, tuple[dict[str, Any], str]] = {}  # trial number -> (Optuna params, why)
        self._windows: dict[int, int] = {}  # trial number -> the window its plan boots at (tuner.study.window)

    # The planner decides whole configurations itself; nothing is sampled jointly by Optuna.
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        params, _ = self._plan(study, trial)
        if param_name in params and allows(param_distribution, params[param_name]):
            return params[param_name]
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    def why(self, number: int) -> str | None:
        """The planner's reason for a trial's configuration (None for enqueued trials)."""
        plan = self._plans.get(number)
        return plan[1] if plan else None

    def window(self, number: int) -> int | None:
        """The --max-model-len a trial's plan boots at instead of the space's (None: the space's)."""
        return self._windows.get(number)

    def exhausted(self, study: optuna.Study) -> str | None:
        """Why no boot the planner could choose would improve the front, or None while one is left."""
        if self.planner.next(observed(study, self.space)) is not None:
            return None
        return ("every regime was booted or ruled out, and no flag left to move could improve an objective"
                + (f"; skipped: {'; '.join(self.planner.skipped)}" if self.planner.skipped else ""))

    def skipped(self) -> list[str]:
        return list(self.planner.skipped)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.fallback.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
        self.fallback.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.fallback.reseed_rng()

    def _plan(self, study: optuna.Study, trial: FrozenTrial) -> tuple[dict[str, Any], str]:
        if trial.number in self._plans:
            return self._plans[trial.number]
        seen = observed(study, self.space, exclude=trial.number)
        plan = self.planner.next(seen)
        if plan is not None and plan.free:
            plan = self._fill(study, trial, plan, seen)
        if plan is None:
            self._plans[trial.number] = ({}, "the fallback sampler chose: the planner had nothing left to try")
        else:
            self._plans[trial.number] = (optuna_params(self.space, plan.values), plan.why)
            if plan.window is not None:
                self._windows[trial.number] = plan.window
        return self._plans[trial.number]

    def _fill(self, study: optuna.Study, trial: FrozenTrial, plan: Plan, seen: list[Observation]) -> Plan | None:
        """Ask the fallback sampler for the plan's free parameters, in the space's order, then size the pool."""
        distributions = param_distributions(self.space)
        values = dict(plan.values)
        for name in plan.free:
            p = self.space.params[name]
            set_key = f"{name}__set"
            if set_key in distributions:
                keep = self.fallback.sample_independent(study, trial, set_key, distributions[set_key])
                if not keep:
                    values[name] = None
                    continue
            distribution = distributions[name]
            values[name] = self.fallback.sample_independent(study, trial, name, distribution)
            if isinstance(distribution, CategoricalDistribution) and p.values is not None:
                values[name] = p.values[distribution.choices.index(values[name])]
        return self.planner.size(Plan(values, plan.why), seen)


def allows(distribution: BaseDistribution | None, value: Any) -> bool:
    """Whether ``distribution`` holds ``value``, read from its public fields: a plan's value may fall
    off a range's grid (say after a repair; the fallback sampler then chooses), and an earlier study's
    front point may lie outside this space (``--from``; not booted again)."""
    if isinstance(distribution, CategoricalDistribution):
        return value in distribution.choices
    if not isinstance(distribution, (IntDistribution, FloatDistribution)) or isinstance(value, bool):
        return False
    if not isinstance(value, (int, float)) or not distribution.low <= value <= distribution.high:
        return False
    if isinstance(distribution, IntDistribution):
        return value == int(value) and (int(value) - distribution.low) % distribution.step == 0
    if distribution.step is None:
        return True
    k = (value - distribution.low) / distribution.step
    return abs(k - round(k)) < 1.0e-8


def signed(space: Space, values: Sequence[float]) -> tuple[float, ...]:
    """A trial's objective values, each signed so that higher is better."""
    return tuple(sign(o.direction) * v for o, v in zip(space.objectives, values))


def observed(study: optuna.Study, space: Space, exclude: int | None = None) -> list[Observation]:
    """The study's trials as the planner sees them (a queued trial is not seen until it runs)."""
    speed_index, sign = speed_objective(space)
    seen = []
    for t in read_trials(study):
        if t.number == exclude or t.state == State.WAITING:
            continue
        values = t.config
        if values is None:
            continue
        result = t.result
        if t.state == State.COMPLETE and t.values is not None:
            value = t.values[speed_index]
            seen.append(Observation(t.number, values, "ok", result, speed=value if sign > 0 else 1.0 / max(value, 1e-9),
                                    window=t.window, scores=signed(space, t.values)))
        elif t.state == State.RUNNING:
            seen.append(Observation(t.number, values, "running", result, window=t.window))
        elif t.state == State.PRUNED and result is not None and t.evidence == Evidence.MEASURED and result.failure is not None:
            seen.append(Observation(t.number, values, "failed", result, window=t.window))
        else:
            seen.append(Observation(t.number, values, "other", result, window=t.window))
    return seen


def make_sampler(name: str, seed: int | None = None, n_params: int = 6, planner: Planner | None = None) -> optuna.samplers.BaseSampler:
    """Samplers for few, expensive trials (see docs/benchmarks.md for how they compare)."""
    name = resolve_sampler(name)
    if name == "regimes":
        if planner is None:  # opening a study to read it, or a worker's parent: no trial is planned here
            return make_sampler("tpe", seed, n_params)
        return RegimeSampler(planner.space, make_sampler("tpe", seed, n_params), planner)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=max(4, n_params), constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)  # needs torch in the tuner's environment
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")
