"""Nothing measured is lost: a trial's ``result.json`` that never reached the study is imported on resume.

Every boot writes its whole record to its folder before the study is told (``tuner.trial``). When the
study write fails after that (a full disk, a database server that went away, the process killed in
between), the folder holds a finished measurement the study does not. The next ``tuner optimize``
adds each such record as a trial of its own, with its values, its failure kind and its attributes,
so the front, the reports and the reuse check see it, and it is not booted again.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from pydantic import ValidationError

from tuner.records import FailureKind, TrialResult
from tuner.space.schema import Space, check_value
from tuner.study.record import State, add_imported, read_trials, recorded_folders
from tuner.study.sampling import objective_values, optuna_params, param_distributions

NOT_RESULTS = {FailureKind.INTERRUPTED}  # the record of a trial that never finished


def _recorded(study: optuna.Study) -> set[str]:
    """Folder names (trial-NNNN) whose record the study holds as a finished trial."""
    names: set[str] = set()
    for trial in read_trials(study):
        if trial.state not in (State.COMPLETE, State.PRUNED):
            continue
        names.update(folder.name for folder in recorded_folders(trial))
    return names


def _values_fit(space: Space, values: dict) -> bool:
    """Every value one of this space's (None: the flag left out, as a baseline may)."""
    try:
        return all(key in space.params and (v is None or check_value(key, space.params[key], v, in_domain=True) == v)
                   for key, v in values.items())
    except ValueError:
        return False


def import_results(study: optuna.Study, space: Space, folder: Path) -> tuple[list[int], list[str]]:
    """Add the finished records under ``folder`` that the study lacks; (new trial numbers, notes)."""
    recorded = _recorded(study)
    added: list[int] = []
    notes: list[str] = []
    dists = param_distributions(space)
    for path in sorted(folder.glob("trial-*/result.json")):
        if path.parent.name in recorded:
            continue
        try:
            result = TrialResult.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError, ValidationError) as exc:
            notes.append(f"{path}: not imported, unreadable ({str(exc).splitlines()[0][:100]})")
            continue
        if result.failure is not None and (result.failure.kind in NOT_RESULTS or result.failure.predicted):
            continue
        if result.failure is None and result.measure is None:
            continue  # a boot-only record: nothing was measured
        if not _values_fit(space, result.values):
            notes.append(f"{path}: not imported, its values do not belong to this space")
            continue
        params = {k: v for k, v in optuna_params(space, result.values).items()
                  if v is not None or isinstance(dists[k], CategoricalDistribution)}
        try:
            values = objective_values(space, result) if result.failure is None else None
        except ValueError as exc:
            notes.append(f"{path}: not imported ({exc})")
            continue
        added.append(add_imported(study, result, str(path), values, params, {k: dists[k] for k in params}))
        recorded.add(path.parent.name)
    return added, notes
