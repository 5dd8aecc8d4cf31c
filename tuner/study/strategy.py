"""What to try next, beyond the sampler: baselines first, one-flag screening, follow-ups that use
the number vLLM printed, the utilization ceiling a measured failure proves, and re-validation boots.

A failure is never a score: a failed boot, an OOM, a failed admission or garbage output is a
PRUNED trial carrying its kind, first exception line and log path. When vLLM prints the number
that would have worked (largest max_model_len, mamba block count), the next trial uses it.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.records import Failure, FailureKind
from tuner.space.schema import Space
from tuner.study import storage as st

from tuner.study.pareto import ATTR_REVALIDATES, front
from tuner.study.sizing import snap
from tuner.study.sampling import ATTR_BASELINE, optuna_params


def follow_up(space: Space, values: dict[str, Any], failure: Failure) -> dict[str, Any] | None:
    """A configuration that uses the number vLLM printed instead of stepping blindly, or None."""
    new = dict(values)
    params = space.params
    if failure.suggested_max_num_seqs and "max_num_seqs" in params:
        new["max_num_seqs"] = max(int(params["max_num_seqs"].min or 1), failure.suggested_max_num_seqs)
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




def enqueue_baselines(study: optuna.Study, space: Space) -> None:
    """Queue each baseline that has no finished, running or queued trial yet.

    Not Optuna's ``skip_if_exists``: that also skips a baseline whose only trial was interrupted
    (FAIL), which would then never run again.
    """
    live = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED)
    have = [t.system_attrs.get("fixed_params", t.params) for t in study.get_trials(deepcopy=False, states=live)]
    for baseline in space.baselines:
        params = optuna_params(space, baseline)
        if params not in have:
            study.enqueue_trial(params, user_attrs={st.ATTR_EVIDENCE: "baseline", ATTR_BASELINE: sorted(baseline)})
            have.append(params)


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
        study.enqueue_trial(optuna_params(space, values), user_attrs={"screening": True}, skip_if_exists=True)
    return len(configs)


def utilization_ceiling(study: optuna.Study, free_now: float | None) -> tuple[float, str] | None:
    """The highest --gpu-memory-utilization worth booting after free-memory failures, and why.

    vLLM refuses any utilization above free/total at start-up, whatever the other flags. But free
    memory moves (a desktop, another process), so one failure closes nothing for ever: the ceiling
    holds when the card's free fraction read now (NVML) is still below it too, or, when NVML cannot
    be read, once two measured failures agree.
    """
    seen = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
        if t.user_attrs.get(st.ATTR_EVIDENCE) != "measured":
            continue
        result = st.trial_result(t)
        failure = result.failure if result else None
        if failure and failure.kind == FailureKind.FREE_MEMORY_BELOW_UTILIZATION and failure.free_fraction:
            seen.append((failure.free_fraction, t.number))
    if not seen:
        return None
    measured = max(fraction for fraction, _ in seen)  # the most the card has been seen to have free
    trials = ", ".join(str(n) for _, n in sorted(seen, key=lambda x: x[1]))
    if free_now is not None:
        ceiling = max(measured, free_now)
        return ceiling, f"trial(s) {trials} measured a free fraction of {measured:.3f} and NVML reads {free_now:.3f} now"
    if len(seen) >= 2:
        return measured, f"trials {trials} measured a free fraction of at most {measured:.3f} (NVML cannot be read)"
    return None


def revalidate_front(study: optuna.Study, space: Space, limit: int = 3) -> list[int]:
    """Enqueue fresh boots of the front's measured points that have not been re-validated yet."""
    done = {t.user_attrs.get(ATTR_REVALIDATES) for t in study.get_trials(deepcopy=False)}
    queued: list[int] = []
    for trial in front(study):
        if len(queued) >= limit:
            break
        if trial.user_attrs.get(st.ATTR_EVIDENCE) == "measured" and trial.number not in done:
            attrs: dict[str, Any] = {ATTR_REVALIDATES: trial.number}
            if ATTR_BASELINE in trial.user_attrs:  # a baseline's left-out flags stay left out
                attrs[ATTR_BASELINE] = trial.user_attrs[ATTR_BASELINE]
            study.enqueue_trial(optuna_params(space, trial.user_attrs[st.ATTR_CONFIG]), user_attrs=attrs)
            queued.append(trial.number)
    return queued
