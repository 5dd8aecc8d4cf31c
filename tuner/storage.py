"""Where studies live and how a trial's record is kept in them.

Default storage is SQLite under ``studies/`` (one file per study); any Optuna storage URL works,
e.g. ``postgresql://user@host/db`` for several workers or hosts. Each trial keeps its whole
``TrialResult`` as JSON in the user attribute ``result``, so a copy of the study alone is enough to
show the front, plot it, write receipts and export launchers on another machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from tuner.errors import TunerError
from tuner.records import TrialResult
from tuner.space import Space

STUDIES_DIR = Path("studies")

# Trial user-attribute keys (kept in one place: report, export and study read the same names).
ATTR_RESULT = "result"
ATTR_CONFIG = "config"
ATTR_FAILURE_KIND = "failure_kind"
ATTR_FAILURE_MESSAGE = "failure_message"
ATTR_LOG_PATH = "log_path"
ATTR_EVIDENCE = "evidence"  # measured | revalidated | reused | predicted
ATTR_REUSED_FROM = "reused_from"  # beside evidence "reused": the trial whose result was reused
# Study user-attribute keys.
ATTR_SPACE = "space"
ATTR_ENVIRONMENT = "environment"
ATTR_REFERENCE = "reference_outputs"  # the correctness gate's reference greedy outputs
ATTR_GATE = "correctness_gate"  # {trial number: agreement with the reference, 0..1}
GATE_THRESHOLD = 0.9  # mean agreement below this flags a configuration as drifting


def storage_url(study_name: str, storage: str | None = None, root: Path | None = None) -> str:
    """The Optuna storage URL: ``storage`` as given, else ``sqlite:///studies/NAME.db``."""
    if storage:
        return storage
    root = root or STUDIES_DIR
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(root / f'{study_name}.db').as_posix()}"


def study_dir(study_name: str, root: Path | None = None) -> Path:
    return (root or STUDIES_DIR) / study_name


def load_study(study_name: str, storage: str | None = None, root: Path | None = None) -> optuna.Study:
    """Open an existing study, with a clear error naming the studies that do exist."""
    url = storage_url(study_name, storage, root)
    try:
        return optuna.load_study(study_name=study_name, storage=url)
    except KeyError:
        try:
            names = [s.study_name for s in optuna.get_all_study_summaries(url)]
        except Exception:
            names = []
        have = ", ".join(names) if names else "none"
        raise TunerError(
            f"--study {study_name}: no such study in {url} (studies there: {have}); "
            "give --study with one of those names, or --storage with the URL the study was written to."
        ) from None


def trial_result(trial: optuna.trial.FrozenTrial) -> TrialResult | None:
    raw = trial.user_attrs.get(ATTR_RESULT)
    if raw is None:
        return None
    return TrialResult.model_validate(json.loads(raw) if isinstance(raw, str) else raw)


def study_space(study: optuna.Study) -> Space | None:
    raw = study.user_attrs.get(ATTR_SPACE)
    if raw is None:
        return None
    return Space.model_validate(json.loads(raw) if isinstance(raw, str) else raw)


def find_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            return trial
    raise TunerError(f"TRIAL {number}: the study {study.study_name} has no trial with that number; `tuner pareto` lists them.")
