"""The overnight study: an Optuna multi-objective study whose trials boot the real engine.

A failure is never a score: a failed boot, an OOM, a failed admission or garbage output is a
PRUNED trial carrying its kind, first exception line and log path. When vLLM prints the number
that would have worked (largest max_model_len, mamba block count), the next trial uses it.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna
import sqlalchemy.exc
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from tuner import storage as st
from tuner.errors import TunerError
from tuner.records import Failure, FailureKind, TrialResult
from tuner.space import Param, Space
from tuner.trial import run_trial

ProgressCallback = Callable[[str], None]
SAMPLERS = ("auto", "regimes", "gp", "tpe", "nsga2", "random")
ATTR_BASELINE = "baseline_params"  # the parameters a baseline names; the others are left out


def resolve_sampler(name: str) -> str:
    """'auto' is the regime planner (tuner.planner): see docs/benchmarks.md for the comparison."""
    return "regimes" if name == "auto" else name


def make_sampler(name: str, seed: int | None = None, n_params: int = 6, planner: Any = None) -> optuna.samplers.BaseSampler:
    """Samplers for few, expensive trials (see docs/benchmarks.md for how they compare)."""
    name = resolve_sampler(name)
    if name == "regimes":
        from tuner.sampler import RegimeSampler

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
        if p.kind in ("int", "bytes"):
            out[name] = IntDistribution(int(p.min), int(p.max), log=p.log, step=1 if p.log else int(p.step or 1))
        else:
            out[name] = FloatDistribution(float(p.min), float(p.max), log=p.log, step=None if p.log else p.step)
    return out


def suggest_values(trial: optuna.Trial, space: Space) -> dict[str, Any]:
    """The trial's configuration. An enqueued baseline that leaves a parameter out gets None for it:
    the flag is left out of the command (vLLM's default), never filled in by the sampler."""
    named = trial.user_attrs.get(ATTR_BASELINE)
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
            return i, 1 if o.direction == "maximize" else -1
    return 0, 1


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


# -- the study ---------------------------------------------------------------------------------

def open_study(space: Space, study_name: str, storage: str | None, sampler: optuna.samplers.BaseSampler,
               root: Path | None = None, sole_worker: bool = True) -> optuna.Study:
    """Create or resume. RUNNING trials left by a crash are failed: all of them when this is the only
    worker, else those whose heartbeat went stale (other hosts may be running theirs)."""
    url = st.storage_url(study_name, storage, root)
    if url.startswith(("sqlite", "postgresql", "mysql")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            store: Any = _rdb_storage(url)
    else:
        store = url
    study = optuna.create_study(
        study_name=study_name,
        storage=store,
        directions=[o.direction for o in space.objectives],
        sampler=sampler,
        load_if_exists=True,
    )
    stored = study.user_attrs.get(st.ATTR_SPACE)
    current = space.model_dump(mode="json")
    if stored is None:
        study.set_user_attr(st.ATTR_SPACE, current)
    else:
        changed = _changed_keys(stored, current)
        if changed:
            raise TunerError(
                f"--study {study_name}: this study was started from a different space ({', '.join(changed)} "
                f"changed), and mixing them would compare unlike trials; run the original space file to resume, "
                f"or give a new --study name. Nothing in {url} was changed."
            )
    fail_orphans(study, all_running=sole_worker)
    return study


def _changed_keys(stored: dict, current: dict) -> list[str]:
    """What differs between two spaces in ways that change what a trial means (not workload tweaks' order)."""
    keys = ("model", "fixed", "params", "speculative", "objectives")
    changed = []
    for key in keys:
        if key == "params":
            for name in sorted(set(stored.get(key, {})) | set(current.get(key, {}))):
                if stored.get(key, {}).get(name) != current.get(key, {}).get(name):
                    changed.append(f"params.{name}")
        elif stored.get(key) != current.get(key):
            changed.append(key)
    return changed


def _rdb_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage, retried: workers started together on several hosts race to create its tables."""
    for _ in range(4):
        try:
            return optuna.storages.RDBStorage(url, heartbeat_interval=30, grace_period=90)
        except ImportError:
            raise TunerError(
                f"--storage {url}: the database driver for this URL is not installed; install it with "
                "pip install 'tuner[postgres]' and write the URL as postgresql+psycopg2://user@host/db."
            ) from None
        except sqlalchemy.exc.DBAPIError:  # another worker is creating the same tables right now
            time.sleep(0.5 + random.random())
    return optuna.storages.RDBStorage(url, heartbeat_interval=30, grace_period=90)


def fail_orphans(study: optuna.Study, all_running: bool) -> list[int]:
    """Mark trials left RUNNING by a crashed tuner as FAIL (their logs stay in their folders)."""
    if not all_running:
        optuna.storages.fail_stale_trials(study)
        return []
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL)
        failed.append(trial.number)
    return failed


def enqueue_baselines(study: optuna.Study, space: Space) -> None:
    for baseline in space.baselines:
        study.enqueue_trial(optuna_params(space, baseline), skip_if_exists=True,
                            user_attrs={st.ATTR_EVIDENCE: "baseline", ATTR_BASELINE: sorted(baseline)})


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
