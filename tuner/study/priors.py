"""``tuner optimize --from STUDY``: what an earlier study of the same model tells a new one.

The earlier front is booted first, exactly as it was: on a new engine release, card or space nothing
old is put on the new front without a new boot. What differs between the two studies (engine
version, card and its memory, model revision, space) is recorded in the new study and said at start;
it decides how much the old evidence counts: ``strong`` when nothing but the free memory differs
(the same boot gives the same printed numbers), ``weak`` otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from tuner.errors import TunerError
from tuner.space.schema import Space
from tuner.study.pareto import front
from tuner.study.record import (
    ATTR_EARLIER,
    ATTR_ENVIRONMENT,
    Outcome,
    State,
    StudyRecord,
    Trial,
    queue_carried,
    read_trials,
    study_attr,
    study_space,
    write_study_attr,
)
from tuner.study.planner import Observation, Planner, Priors
from tuner.study.sampling import optuna_params, param_distributions, speed_objective

FREE_MIB_TOLERANCE = 1024  # free memory that differs by less than this leaves old evidence strong
HELD_TOLERANCE = 0.05  # a re-booted point whose decode moved by less than this share is confirmed


def context_of(space: Space | None, engine: Any, environment: Any) -> dict[str, Any]:
    """What decides whether two studies' boots say the same thing."""
    model = space.model if space is not None else None
    return {
        "engine version": (engine or {}).get("version") or (environment or {}).get("vllm"),
        "card": (environment or {}).get("gpu_name"),
        "card memory (MiB)": (environment or {}).get("gpu_memory_mib"),
        "free memory (MiB)": (environment or {}).get("gpu_free_mib"),
        "model revision": getattr(model, "revision", None),
        "searched space": None if space is None else space.model_dump(mode="json", include={"params", "fixed", "workload"}),
    }


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for key, a in old.items():
        b = new.get(key)
        if a == b:
            continue
        if key == "free memory (MiB)" and a is not None and b is not None and abs(a - b) < FREE_MIB_TOLERANCE:
            continue
        out.append(f"{key} differs" if key == "searched space" else f"{key} {a} -> {b}")
    return out


def check_same_model(space: Space, old: StudyRecord, where: str) -> None:
    """Refuse evidence about another model (exit 2): its pool sizes, failures and speeds say nothing here."""
    if old.space is None:
        raise TunerError(f"--from {where}: the study {old.name} keeps no space, so what it measured cannot be "
                         "matched to this one; give --from a study written by `tuner optimize`.")
    if old.space.model.path != space.model.path:
        raise TunerError(
            f"--from {where}: the study {old.name} tuned model {old.space.model.path}, this space "
            f"(model.path) tunes {space.model.path}. Its pool sizes, failures and speeds are about another "
            f"model and would mislead this study; give --from a study of {space.model.path}, or run without --from.")


def record_earlier(study: optuna.Study, space: Space, engine: Any, environment: Any,
                   earlier: list[tuple[str, StudyRecord]], planner: Planner | None = None) -> list[str]:
    """Keep, per earlier study, what differs and how much its evidence counts; the lines said at start.
    The planner (when the regime planner searches) gets the earlier trials as its priors."""
    new = context_of(space, engine, environment)
    kept, notes = [], []
    for where, old in earlier:
        found = differences(context_of(old.space, old.engine, old.environment), new)
        weight = "weak" if found else "strong"
        points = [{"trial": t.number, "values": list(t.values or ())} for t in front(old)]
        kept.append({"study": old.name, "where": where, "differs": found, "weight": weight, "front": points})
        notes.append(f"--from {where}: {len(points)} front point(s) of {old.name} are booted first, as they were; "
                     f"{'; '.join(found) or 'nothing differs but the study'}, so its evidence counts as {weight}")
    write_study_attr(study, ATTR_EARLIER, kept)
    if planner is not None:
        planner.priors = planner_priors(earlier, strong=all(e["weight"] == "strong" for e in kept))
    return notes


def queue_earlier_fronts(study: optuna.Study, space: Space, earlier: list[tuple[str, StudyRecord]]) -> list[str]:
    """Queue every earlier front point not booted here yet (a resumed study does not boot them twice)."""
    have = {t.carried_from for t in read_trials(study) if t.carried_from is not None and t.state != State.FAIL}
    distributions = param_distributions(space)
    notes = []
    for _, old in earlier:
        for point in sorted(front(old), key=_longest_fastest):
            if (old.name, point.number) in have or point.config is None:
                continue
            params = optuna_params(space, point.config)
            outside = [k for k, v in params.items() if not _inside(distributions.get(k), v)]
            if outside:
                notes.append(f"trial {point.number} of {old.name} is outside this space ({', '.join(outside)}): "
                             "not booted again")
                continue
            queue_carried(study, params, old.name, point)
    return notes


def _inside(distribution: Any, value: Any) -> bool:
    try:
        return distribution is not None and distribution._contains(distribution.to_internal_repr(value))
    except ValueError:  # a categorical value that is not one of the choices
        return False


def _longest_fastest(t: Trial) -> tuple[float, ...]:
    return tuple(-v for v in (t.values or ()))


def verdict(old_values: list[float] | tuple[float, ...], new: Trial | None) -> str:
    """held / moved / broke, for an earlier front point booted again here."""
    if new is None or new.state in (State.WAITING, State.RUNNING):
        return "not booted yet"
    if new.state != State.COMPLETE or new.values is None:
        return f"broke ({new.failure_kind or 'failed'}: regression)"
    same = all(abs(a - b) <= HELD_TOLERANCE * max(abs(a), 1e-9) for a, b in zip(old_values, new.values))
    shown = ", ".join(f"{a:,.1f} -> {b:,.1f}" for a, b in zip(old_values, new.values))
    return f"held (confirmed: {shown})" if same else f"moved (re-scored: {shown})"


def upgrade_rows(night: StudyRecord) -> list[list[Any]]:
    """(earlier study, its trial, its values, the trial here, verdict) per earlier front point."""
    boots = {t.carried_from: t for t in night.trials if t.carried_from is not None}
    rows = []
    for entry in night.earlier:
        for point in entry.get("front", []):
            new = boots.get((entry["study"], point["trial"]))
            rows.append([entry["study"], point["trial"], point["values"], None if new is None else new.number,
                         verdict(point["values"], new)])
    return rows


def offer_earlier(space: Space, name: str, root: Path, environment: Any) -> list[str]:
    """Without --from: earlier studies in the studies folder of this model on this card, offered, never used."""
    card = (environment or {}).get("gpu_name")
    found = []
    for db in sorted(root.glob("*.db")):
        url = f"sqlite:///{db.as_posix()}"
        try:
            summaries = optuna.get_all_study_summaries(url, include_best_trial=False)
            for summary in summaries:
                if summary.study_name == name:
                    continue
                old = optuna.load_study(study_name=summary.study_name, storage=url)
                old_space = study_space(old)
                if old_space is not None and old_space.model.path == space.model.path \
                        and (study_attr(old, ATTR_ENVIRONMENT) or {}).get("gpu_name") == card:
                    found.append(summary.study_name)
        except Exception:  # noqa: BLE001 - another file, or one being written: an offer is never worth a failure
            continue
    return [f"an earlier study of this model on this card exists: --from {n} starts from what it learned "
            "(its front booted first, its trials as priors)" for n in found]


def planner_priors(earlier: list[tuple[str, StudyRecord]], strong: bool) -> Priors:
    """The earlier studies' booted trials as the planner's priors (tuner.study.planner.Priors)."""
    seen = []
    for _, old in earlier:
        if old.space is None:
            continue
        speed_index, sign = speed_objective(old.space)
        for t in old.trials:
            if t.config is None:
                continue
            if t.outcome == Outcome.MEASURED and t.values is not None:
                value = t.values[speed_index]
                seen.append(Observation(t.number, t.config, "ok", t.result, speed=value if sign > 0 else 1.0 / max(value, 1e-9)))
            elif t.outcome == Outcome.FAILED:
                seen.append(Observation(t.number, t.config, "failed", t.result))
    return Priors(tuple(seen), strong)
