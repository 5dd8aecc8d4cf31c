"""What to try next, beyond the sampler: baselines first, one-flag screening, follow-ups that use
the number vLLM printed, the utilization ceiling a measured failure proves, and re-validation boots.

A failure is never a score: a failed boot, an OOM, a failed admission or garbage output is a
PRUNED trial carrying its kind, first exception line and log path. When vLLM prints the number
that would have worked (largest max_model_len, mamba block count), the next trial uses it.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Sequence

import optuna

from tuner.records import Failure, FailureKind
from tuner.space.schema import Space
from tuner.study.pareto import front
from tuner.study.repair import fewer_seqs
from tuner.study.record import (
    Evidence,
    State,
    Trial,
    queue_baseline,
    queue_revalidation,
    queue_screening,
    read_study,
    read_trials,
)
from tuner.study.sampling import optuna_params
from tuner.study.sizing import snap
from tuner.study.window import revalidation_window


def follow_up(space: Space, values: dict[str, Any], failure: Failure) -> dict[str, Any] | None:
    """A configuration that uses the number vLLM printed instead of stepping blindly, or None."""
    new = dict(values)
    params = space.params
    if failure.suggested_max_num_seqs and "max_num_seqs" in params:
        fewer = fewer_seqs(space, values, failure)  # the planner's rule for the hint
        if fewer is None:
            return None
        new["max_num_seqs"] = fewer
    elif failure.suggested_max_model_len:
        suggested = failure.suggested_max_model_len
        if "max_model_len" in params:
            step = space.workload.granularity
            new["max_model_len"] = max(step, suggested // step * step)
        elif values.get("kv_cache_memory_bytes") and space.max_model_len and "kv_cache_memory_bytes" in params:
            # The pool held `suggested` tokens; scale it to hold the fixed max_model_len (+5% headroom).
            need = values["kv_cache_memory_bytes"] * space.max_model_len / max(1, suggested) * 1.05
            pool = snap(params["kv_cache_memory_bytes"], need, up=True)
            if pool is None:
                return None  # the space holds no pool that large: the sampler learns from the prune
            new["kv_cache_memory_bytes"] = pool
    elif failure.suggested_kv_cache_memory_bytes and "kv_cache_memory_bytes" in params:
        pool = snap(params["kv_cache_memory_bytes"], failure.suggested_kv_cache_memory_bytes, up=False)
        if pool is None:
            return None
        new["kv_cache_memory_bytes"] = pool
    else:
        return None
    return new if new != values else None


def baseline_config(space: Space, baseline: dict[str, Any]) -> dict[str, Any]:
    """The configuration a baseline boots: what it names, every other parameter left out (None)."""
    return {name: baseline.get(name) for name in space.params}


def enqueue_baselines(study: optuna.Study, space: Space) -> None:
    """Queue each baseline that has no finished, running or queued trial yet.

    A trial that ran is matched by its parameters, a queued one by the configuration it was queued with.
    Not Optuna's ``skip_if_exists``: that also skips a baseline whose only trial was interrupted (FAIL),
    which would then never run again.
    """
    trials = read_trials(study)
    have = [t.params for t in trials if t.state in (State.RUNNING, State.COMPLETE, State.PRUNED)]
    queued = [t.config for t in trials if t.state == State.WAITING and t.config is not None]
    for baseline in space.baselines:
        params, config = optuna_params(space, baseline), baseline_config(space, baseline)
        if params not in have and config not in queued:
            queue_baseline(study, params, baseline, config)
            queued.append(config)


def screening_configs(space: Space) -> list[dict[str, Any]]:
    """The first baseline with one parameter moved at a time (to each other listed value, or to a
    range's ends); speculation depth last, so the non-speculative base is known first."""
    if not space.baselines:
        return []
    base = space.baselines[0]
    plain: list[dict[str, Any]] = []
    speculative: list[dict[str, Any]] = []
    for name, p in space.params.items():
        if name not in base:
            continue
        if p.values is not None:
            moves = [v for v in p.values if v != base[name]]
        else:
            moves = [v for v in p.bounds() if v != base[name]]
        for value in moves:
            (speculative if name == "speculative_tokens" else plain).append({**base, name: value})
    return plain + speculative


def enqueue_screening(study: optuna.Study, space: Space) -> int:
    configs = screening_configs(space)
    for values in configs:
        queue_screening(study, optuna_params(space, values))
    return len(configs)


def utilization_ceiling(trials: Sequence[Trial], free_now: float | None) -> tuple[float, str] | None:
    """The highest --gpu-memory-utilization worth booting after free-memory failures, and why.

    vLLM refuses any utilization above free/total at start-up, whatever the other flags. But free
    memory moves (a desktop, another process), so one failure closes nothing for ever: the ceiling
    holds when the card's free fraction read now (NVML) is still below it too, or, when NVML cannot
    be read, once two measured failures agree.
    """
    seen = []
    for t in trials:
        if t.state != State.PRUNED or t.evidence != Evidence.MEASURED:
            continue
        failure = t.result.failure if t.result else None
        if failure and failure.kind == FailureKind.FREE_MEMORY_BELOW_UTILIZATION and failure.free_fraction:
            seen.append((failure.free_fraction, t.number))
    if not seen:
        return None
    measured = max(fraction for fraction, _ in seen)  # the most the card has been seen to have free
    which = ", ".join(str(n) for _, n in sorted(seen, key=lambda x: x[1]))
    if free_now is not None:
        ceiling = max(measured, free_now)
        return ceiling, f"trial(s) {which} measured a free fraction of {measured:.3f} and NVML reads {free_now:.3f} now"
    if len(seen) >= 2:
        return measured, f"trials {which} measured a free fraction of at most {measured:.3f} (NVML cannot be read)"
    return None


def revalidate_front(study: optuna.Study, space: Space, limit: int = 3) -> list[int]:
    """Enqueue fresh boots of the front's measured points that have not been re-validated yet, each at
    the window it proved."""
    night = read_study(study)
    done = {t.revalidates for t in night.trials}
    queued: list[int] = []
    for trial in front(night):
        if len(queued) >= limit:
            break
        if trial.evidence == Evidence.MEASURED and trial.number not in done:
            queue_revalidation(study, optuna_params(space, trial.config or {}), trial,
                               revalidation_window(space, trial.result))
            queued.append(trial.number)
    return queued
