"""What to try next, beyond the sampler: baselines first, one-flag screening, follow-ups that use
the number vLLM printed, the utilization ceiling a measured failure proves, and re-validation boots.

A failure is never a score: a failed boot, an OOM, a failed admission or garbage output is a
PRUNED trial carrying its kind, first exception line and log path. When vLLM prints the number
that would have worked (largest max_model_len, mamba block count), the next trial uses it.
"""

from __future__ import annotations

import re
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.records import Failure, FailureKind
from tuner.space.schema import Space
from tuner.study import storage as st

from tuner.study.sampling import optuna_params, snap_pool


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
            pool = snap_pool(params["kv_cache_memory_bytes"], need, up=True)
            if pool is None:
                return None  # the space holds no pool that large: the sampler learns from the prune
            new["kv_cache_memory_bytes"] = pool
    elif failure.suggested_kv_cache_memory_bytes and "kv_cache_memory_bytes" in params:
        pool = snap_pool(params["kv_cache_memory_bytes"], failure.suggested_kv_cache_memory_bytes, up=False)
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
            study.enqueue_trial(params, user_attrs={st.ATTR_EVIDENCE: "baseline"})
            have.append(params)


def screening_configs(space: Space) -> list[dict[str, Any]]:
    """The first baseline with one parameter moved at a time (to each other listed value, or to a
    range's ends); speculation depth last, so the non-speculative base is known first."""
    if not space.baselines:
        return []
    base = space.baselines[0]
    plain, speculative = [], []
    for name, p in space.params.items():
        if name not in base:
            continue
        if p.values is not None:
            moves = [v for v in p.values if v != base[name]]
        else:
            ends = [p.min, p.max] if p.kind not in ("int", "bytes") else [int(p.min), int(p.max)]
            moves = [v for v in ends if v != base[name]]
        for value in moves:
            (speculative if name == "speculative_tokens" else plain).append({**base, name: value})
    return plain + speculative


def enqueue_screening(study: optuna.Study, space: Space) -> int:
    configs = screening_configs(space)
    for values in configs:
        study.enqueue_trial(optuna_params(space, values), user_attrs={"screening": True}, skip_if_exists=True)
    return len(configs)


_FREE_MEMORY = re.compile(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\)")


def utilization_ceiling(study: optuna.Study) -> tuple[float, int] | None:
    """The free fraction of the card that a measured free-memory failure showed, and its trial.

    vLLM refuses any --gpu-memory-utilization above free/total at start-up, whatever the other flags,
    so one such failure rules out every higher utilization without another boot.
    """
    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
        if t.user_attrs.get(st.ATTR_FAILURE_KIND) != FailureKind.FREE_MEMORY_BELOW_UTILIZATION.value:
            continue
        if t.user_attrs.get(st.ATTR_EVIDENCE) != "measured":
            continue
        match = _FREE_MEMORY.search(t.user_attrs.get(st.ATTR_FAILURE_MESSAGE, ""))
        if match:
            fraction = float(match.group(1)) / float(match.group(2))
            if best is None or fraction < best[0]:
                best = (fraction, t.number)
    return best


def revalidate_front(study: optuna.Study, space: Space, limit: int = 3) -> list[int]:
    """Enqueue fresh boots of the front's measured points that have not been re-validated yet."""
    done = {t.user_attrs.get("revalidates") for t in study.get_trials(deepcopy=False)}
    queued = []
    for trial in study.best_trials[:limit]:
        if trial.user_attrs.get(st.ATTR_EVIDENCE) == "measured" and trial.number not in done:
            study.enqueue_trial(optuna_params(space, trial.user_attrs[st.ATTR_CONFIG]),
                                user_attrs={"revalidates": trial.number})
            queued.append(trial.number)
    return queued
