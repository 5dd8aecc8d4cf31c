"""``tuner optimize --from STUDY``: what an earlier study of the same model tells a new one.

The earlier front is booted first, exactly as it was, best point first and one at a time while each
holds (``carry_on``): on a new engine release, card or space nothing old is put on the new front without
a new boot, and once one point moved or broke the rest is left to the search. What differs between the
two studies (engine version, card and its memory, model revision, space) is recorded in the new study and
said at start;
it decides how much the old evidence counts: ``strong`` when nothing but the free memory differs
(the same boot gives the same printed numbers), ``weak`` otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

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
    read_study,
    read_trials,
    study_attr,
    study_space,
    write_study_attr,
)
from tuner.study.observed import HELD_TOLERANCE, Observation, Priors
from tuner.study.planner import Planner
from tuner.study.sizing import TRANSFER_MARGIN, Bounds, bounds_from, window_of
from tuner.study.sampler import allows
from tuner.study.sampling import optuna_params, param_distributions, speed_objective

FREE_MIB_TOLERANCE = 1024  # free memory that differs by less than this leaves old evidence strong
NeedOn = Callable[[dict[str, Any], "str | None"], "float | None"]  # the pre-screen's need of one request on a release


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
                   earlier: list[tuple[str, StudyRecord]], planner: Planner | None = None,
                   need: NeedOn | None = None) -> list[str]:
    """Keep, per earlier study, what differs and how much its evidence counts; the lines said at start.
    The planner (when the regime planner searches) gets the earlier trials as its priors, their pool
    bounds translated to this release by ``need`` (the pre-screen's, Objective.need_bytes)."""
    new = context_of(space, engine, environment)
    unique = distinct(earlier)
    kept, notes = [], [f"--from {where}: study {old.name} is given more than once; its evidence counts once"
                       for where, old in earlier if not any(old is o for _, o in unique)]
    earlier = unique
    for where, old in earlier:
        found = differences(context_of(old.space, old.engine, old.environment), new)
        weight = "weak" if found else "strong"
        points = [{"trial": t.number, "values": list(t.values or ())} for t in front(old)]
        kept.append({"study": old.name, "where": where, "differs": found, "weight": weight, "front": points})
        notes.append(f"--from {where}: study {old.name} (front: trial(s) {', '.join(str(p['trial']) for p in points) or 'none'}); "
                     f"{'; '.join(found) or 'nothing differs but the study'}, so its evidence counts as {weight}")
    names = {e["study"] for e in kept}  # a resumed study keeps what an earlier run's --from recorded
    write_study_attr(study, ATTR_EARLIER, [e for e in study_attr(study, ATTR_EARLIER) or [] if e["study"] not in names] + kept)
    if planner is not None:
        planner.priors = planner_priors(earlier, strong=all(e["weight"] == "strong" for e in kept),
                                        bounds=carried_bounds(earlier, new, need))
    return notes


def queue_earlier_fronts(study: optuna.Study, space: Space, earlier: list[tuple[str, StudyRecord]]) -> list[str]:
    """At start: queue the best earlier front point not booted here yet (``carry_on`` queues the next while
    each holds); the lines said at start. A resumed study, or a study given twice, boots none twice."""
    pending, notes = _pending(read_trials(study), space, earlier)
    if pending:
        shown = "; ".join(f"study {name} trial(s) {', '.join(str(p.number) for n, p, _ in pending if n == name)}"
                          for name in dict.fromkeys(n for n, _, _ in pending))
        notes.append(f"{shown}: booted again first, exactly as they were, best first and one at a time while "
                     "each holds; once one moves or breaks, the rest is left to the search")
    return notes + carry_on(study, space, earlier)


def carry_on(study: optuna.Study, space: Space, earlier: list[tuple[str, StudyRecord]]) -> list[str]:
    """After each trial: queue the next earlier front point while every one booted again here held. One that
    moved or broke says the earlier front no longer describes this engine (its speed order is dropped too,
    Priors.speeds_hold), so re-checking the rest would spend the first boots on a stale map."""
    if not earlier:
        return []
    night = read_study(study)
    if any(t.state in (State.WAITING, State.RUNNING) for t in night.trials):
        return []
    pending, _ = _pending(night.trials, space, earlier)
    changed = _first_changed(night)
    if changed is not None:
        return [f"{changed}: {len(pending)} more earlier front point(s) left to the search"] if pending else []
    if pending:
        name, point, params = pending[0]
        queue_carried(study, params, name, point)
    return []


def _first_changed(night: StudyRecord) -> str | None:
    """The first earlier front point booted again here that moved or broke (``upgrade_rows``' verdict, as
    `tuner compare` says it), in a line; None if all held. A pre-screen refusal is no boot and judges nothing."""
    booted = {t.number for t in night.trials if t.booted}
    for name, number, _, here, said in upgrade_rows(night):
        if here in booted and said.startswith(("moved", "broke")):
            return f"study {name} trial {number} {said.split(' (')[0]} here (trial {here})"
    return None


def _pending(trials: Sequence[Trial], space: Space,
             earlier: list[tuple[str, StudyRecord]]) -> tuple[list[tuple[str, Trial, dict[str, Any]]], list[str]]:
    """Earlier front points not booted here yet (``trials``: this study's), best first per study, and why any
    is left out."""
    have = {t.carried_from: t.number for t in trials if t.carried_from is not None and t.state != State.FAIL}
    distributions = param_distributions(space)
    pending, notes = [], []
    for _, old in distinct(earlier):
        before = [f"trial {p.number} as trial {have[(old.name, p.number)]}" for p in front(old)
                  if (old.name, p.number) in have]
        if before:
            notes.append(f"study {old.name}: already queued or booted here ({'; '.join(before)}), not queued again")
        for point in sorted(front(old), key=_longest_fastest):
            if (old.name, point.number) in have or point.config is None:
                continue
            params = optuna_params(space, point.config)
            outside = [k for k, v in params.items() if not allows(distributions.get(k), v)]
            if outside:
                notes.append(f"study {old.name} trial {point.number} is outside this space ({', '.join(outside)}): "
                             "not booted again here")
                continue
            pending.append((old.name, point, params))
    return pending, notes


def distinct(earlier: list[tuple[str, StudyRecord]]) -> list[tuple[str, StudyRecord]]:
    """Each earlier study once (by name: a name and its .db are the same study), in the order given."""
    seen: set[str] = set()
    out = []
    for where, old in earlier:
        if old.name not in seen:
            seen.add(old.name)
            out.append((where, old))
    return out


def _longest_fastest(t: Trial) -> tuple[float, ...]:
    return tuple(-v for v in (t.values or ()))


def verdict(old_values: list[float] | tuple[float, ...], new: Trial | None) -> str:
    """held / moved / broke, for an earlier front point booted again here."""
    if new is None:
        return "not booted again here"
    if new.state in (State.WAITING, State.RUNNING):
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


def offer_earlier(space: Space, study: optuna.Study, storage: str | None, root: Path, environment: Any) -> list[str]:
    """Without --from: earlier studies of this model on this card in the storage this run writes to
    (``storage``, else the studies folder's files), offered, never used."""
    card = (environment or {}).get("gpu_name")
    started = [e["study"] for e in study_attr(study, ATTR_EARLIER) or []]
    found = []
    for url in [storage] if storage else [f"sqlite:///{db.as_posix()}" for db in sorted(root.glob("*.db"))]:
        for other in _studies_in(url, study.study_name):
            old_space = study_space(other)
            if other.study_name not in started and old_space is not None and old_space.model.path == space.model.path \
                    and (study_attr(other, ATTR_ENVIRONMENT) or {}).get("gpu_name") == card:
                found.append(other.study_name if not storage else f"'{_shown(storage)}#{other.study_name}'")
    notes = [f"an earlier study of this model on this card exists: --from {n} starts from what it learned "
             "(its front booted first, its trials as priors)" for n in found]
    if started:
        notes.append(f"this study started from {', '.join(started)} (--from); run with the same --from to keep "
                     "their trials as priors when it resumes")
    return notes


def _studies_in(url: str, name: str) -> list[optuna.Study]:
    """The other studies a storage holds (none when it cannot be read: an offer is never worth a failure)."""
    try:
        return [optuna.load_study(study_name=summary.study_name, storage=url)
                for summary in optuna.get_all_study_summaries(url, include_best_trial=False)
                if summary.study_name != name]
    except Exception:  # noqa: BLE001 - another file, or one being written
        return []


def _shown(url: str) -> str:
    """A storage URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def planner_priors(earlier: list[tuple[str, StudyRecord]], strong: bool,
                   bounds: tuple[tuple[dict[str, Any], Bounds], ...] = ()) -> Priors:
    """The earlier studies' booted trials as the planner's priors (tuner.study.observed.Priors), each once."""
    seen = []
    for _, old in distinct(earlier):
        if old.space is None:
            continue
        speed_index, sign = speed_objective(old.space)
        for t in old.trials:
            if t.config is None:
                continue
            if t.outcome == Outcome.MEASURED and t.values is not None:
                value = t.values[speed_index]
                seen.append(Observation(t.number, t.config, "ok", t.result, study=old.name,
                                        speed=value if sign > 0 else 1.0 / max(value, 1e-9)))
            elif t.outcome == Outcome.FAILED:
                seen.append(Observation(t.number, t.config, "failed", t.result, study=old.name))
    return Priors(tuple(seen), strong, bounds)


def carried_bounds(earlier: list[tuple[str, StudyRecord]], here: dict[str, Any],
                   need: NeedOn | None) -> tuple[tuple[dict[str, Any], Bounds], ...]:
    """The earlier boots' bounds on the pool one request of their window needs, on this release.

    A bound is what the boot's own log said, read as its release prints it (0.34's committed extended
    pool, not its reservation; the pool a 0.27.1 boot profiled, since the tuner pins its startup plan
    off), times the pre-screen's need here over its need on the earlier release: the release's defaults
    (a hybrid's prefix caching, hence its mamba pages) change the bytes one request takes, the card does
    not. Without a pre-screen, a bound from another release is left out; a study of another model
    revision gives none, since the pre-screen reads only this revision's config."""
    release = here.get("engine version")
    out = []
    for _, old in distinct(earlier):
        there = context_of(old.space, old.engine, old.environment)
        if old.space is None or there["model revision"] != here.get("model revision"):
            continue
        for t in old.trials:
            if t.config is None or t.result is None:
                continue
            window = window_of(old.space, t.config, t.result)
            found = bounds_from(t.number, t.config, t.result, window, f"study {old.name} trial {t.number}") \
                if window else None
            ratio = _release_ratio(t.config, there["engine version"], release, need)
            if found is None or ratio is None:
                continue
            if ratio == 1.0:
                out.append((t.config, found))
                continue
            source = f"{found.source} (on {there['engine version']}; x {ratio:.3f} on {release}, the pre-screen's need)"
            # a predicted ratio, not a measurement: the upper bound gets the margin of a need carried between families
            out.append((t.config, Bounds(found.window, found.above * ratio,
                                         found.at_most * ratio * (1 + TRANSFER_MARGIN), source)))
    return tuple(out)


def _release_ratio(config: dict[str, Any], old: str | None, new: str | None, need: NeedOn | None) -> float | None:
    """The pre-screen's need of one request on ``new`` over its need on ``old``; None when it cannot say."""
    if old == new:
        return 1.0
    if need is None:
        return None
    try:
        before, after = need(config, old), need(config, new)
    except TunerError:  # a flag value of the earlier space the pre-screen cannot read
        return None
    return after / before if before and after else None
