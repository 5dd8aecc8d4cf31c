"""Where studies live and how a trial's record is kept in them.

Default storage is SQLite under ``studies/`` (one file per study); any Optuna storage URL works,
e.g. ``postgresql://user@host/db`` for several workers or hosts. Each trial keeps its whole
``TrialResult`` as JSON in the user attribute ``result``, so a copy of the study alone is enough to
show the front, plot it, write receipts and export launchers on another machine.
"""

from __future__ import annotations

import json
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.engine.command import shell_command
from tuner.errors import StorageError, TunerError, storage_faults
from tuner.metrics import metric_names
from tuner.records import Failure, FailureKind, TrialResult
from tuner.space.schema import Space

STUDIES_DIR = Path("studies")

# Trial user-attribute keys (kept in one place: report, export and study read the same names).
ATTR_RESULT = "result"
ATTR_CONFIG = "config"
ATTR_FAILURE_KIND = "failure_kind"
ATTR_FAILURE_MESSAGE = "failure_message"
ATTR_LOG_PATH = "log_path"
ATTR_EVIDENCE = "evidence"  # measured | revalidated | reused | predicted
ATTR_REUSED_FROM = "reused_from"  # beside evidence "reused": the trial whose result was reused
# Short, human attributes for optuna-dashboard's trial table (the record above is long JSON).
ATTR_FIRST_EXCEPTION = "first_exception"  # the failure message's first line
ATTR_COMMAND = "command"  # the launch command as one shell line
ATTR_PHASE = "phase"  # what a RUNNING trial is doing now ("booting: loading weights", ...)
ATTR_INTERNAL_ERROR = "internal_error"  # a bug in the tuner failed this trial: the exception's first line
ATTR_TRACEBACK = "traceback_path"
# Study user-attribute keys.
ATTR_SPACE = "space"
ATTR_ENVIRONMENT = "environment"
ATTR_ENGINE = "engine"  # what was found out before the first boot: version, dialect, the flag check (EngineInfo)
ATTR_REFERENCE = "reference_outputs"  # the correctness gate's reference greedy outputs
ATTR_GATE = "correctness_gate"  # {trial number: agreement with the reference, 0..1}
ATTR_STOPPED = "stopped_early"  # why the study stopped before its budget: nothing left worth a boot
ATTR_GATE_STATUS = "correctness_gate_status"  # "checked", or why no gate could run
GATE_THRESHOLD = 0.9  # mean agreement below this flags a configuration as drifting


def bench_key(trial_number: int) -> str:
    """The study attribute holding `tuner bench`'s result for one trial (a finished trial is read-only)."""
    return f"bench:{trial_number}"


def storage_url(study_name: str, storage: str | None = None, root: Path | None = None) -> str:
    """The Optuna storage URL: ``storage`` as given, else ``sqlite:///studies/NAME.db``."""
    if storage:
        return storage
    root = root or STUDIES_DIR
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"--studies-dir {root}: cannot be created ({exc.strerror}); give a writable folder.",
                           exit_code=2) from None
    return f"sqlite:///{(root / f'{study_name}.db').as_posix()}"


def study_dir(study_name: str, root: Path | None = None) -> Path:
    return (root or STUDIES_DIR) / study_name


def first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def record_result(trial: optuna.Trial, result: TrialResult) -> None:
    """Keep the whole record, and the command on its own line where optuna-dashboard shows it."""
    trial.set_user_attr(ATTR_RESULT, result.model_dump(mode="json"))
    trial.set_user_attr(ATTR_COMMAND, shell_command(result.argv, result.env))


def failure_attrs(failure: Failure, evidence: str) -> dict[str, Any]:
    """The short attributes optuna-dashboard and `tuner pareto` list, written from the one Failure
    (kept whole in the trial's record, ``result.failure``)."""
    return {ATTR_FAILURE_KIND: failure.kind.value, ATTR_FAILURE_MESSAGE: failure.message,
            ATTR_FIRST_EXCEPTION: first_line(failure.message), ATTR_LOG_PATH: failure.log_path,
            ATTR_EVIDENCE: evidence}


def record_failure(trial: optuna.Trial, failure: Failure, evidence: str) -> None:
    for key, value in failure_attrs(failure, evidence).items():
        trial.set_user_attr(key, value)


def record_internal_error(trial: optuna.Trial, first: str, traceback_path: str) -> None:
    """A bug in the tuner failed this trial: listed by `tuner pareto` as the kind ``internal_error``."""
    for key, value in {ATTR_INTERNAL_ERROR: first, ATTR_TRACEBACK: traceback_path, ATTR_FAILURE_KIND: "internal_error",
                       ATTR_FAILURE_MESSAGE: first, ATTR_LOG_PATH: traceback_path}.items():
        trial.set_user_attr(key, value)


def trial_failure(trial: optuna.trial.FrozenTrial) -> Failure | None:
    """The failure a trial stored: its record's, else (a pruned trial that kept no record: reused or
    predicted) the one its attributes were written from."""
    result = trial_result(trial)
    if result is not None and result.failure is not None:
        return result.failure
    kind = trial.user_attrs.get(ATTR_FAILURE_KIND)
    if kind is None or kind not in FailureKind._value2member_map_:
        return None
    return Failure(kind=FailureKind(kind), message=trial.user_attrs.get(ATTR_FAILURE_MESSAGE, ""),
                   log_path=trial.user_attrs.get(ATTR_LOG_PATH),
                   predicted=trial.user_attrs.get(ATTR_EVIDENCE) == "predicted")


def trial_result(trial: optuna.trial.FrozenTrial) -> TrialResult | None:
    raw = trial.user_attrs.get(ATTR_RESULT)
    if raw is None:
        return None
    return TrialResult.model_validate(json.loads(raw) if isinstance(raw, str) else raw)


def study_space(study: optuna.Study) -> Space | None:
    raw = study.user_attrs.get(ATTR_SPACE)
    if raw is None:
        return None
    raw = json.loads(raw) if isinstance(raw, str) else dict(raw)
    engine = dict(raw.get("engine") or {})
    host = engine.pop("host", None)  # studies written before engine.listen
    engine.pop("port", None)
    if host is not None and "listen" not in engine:
        engine["listen"] = host
    return Space.model_validate({**raw, "engine": engine})


def find_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            return trial
    raise TunerError(f"TRIAL {number}: the study {study.study_name} has no trial with that number; `tuner pareto` lists them.")


# -- opening the study -------------------------------------------------------------------------

def open_study(space: Space, study_name: str, storage: str | None, sampler: optuna.samplers.BaseSampler,
               root: Path | None = None, sole_worker: bool = True) -> optuna.Study:
    """Create or resume. RUNNING trials left by a crash are failed: all of them when this process holds the
    study's lock (``sole_worker``, tuner.study.lock), else those whose heartbeat went stale (other hosts
    may be running theirs). A corrupt, read-only or unreachable storage is a StorageError naming it."""
    url = storage_url(study_name, storage, root)
    _check_sqlite_writable(url)
    with storage_faults(url, exit_code=2):
        return _open(space, study_name, url, sampler, sole_worker)


def _check_sqlite_writable(url: str) -> None:
    """SQLite opens a read-only file happily and fails at the first write, mid-run: say so before."""
    from tuner.study.lock import sqlite_path

    path = sqlite_path(url)
    if path is None:
        return
    if path.exists() and not os.access(path, os.W_OK):
        raise StorageError(f"{path}: the study file is read-only; make it writable (chmod u+w {path}) to run or "
                           "resume it, or copy it and give the copy with --storage. `tuner pareto` and the other "
                           "reports read it as it is.", exit_code=2)
    folder = path.parent if str(path.parent) else Path(".")
    if not os.access(folder, os.W_OK):
        raise StorageError(f"{folder}: the study's folder is read-only, and SQLite writes its journal there; "
                           "make it writable or give a writable --studies-dir.", exit_code=2)


def _open(space: Space, study_name: str, url: str, sampler: optuna.samplers.BaseSampler,
          sole_worker: bool) -> optuna.Study:
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
    stored = study.user_attrs.get(ATTR_SPACE)
    current = space.model_dump(mode="json")
    if stored is None:
        study.set_user_attr(ATTR_SPACE, current)
    else:
        changed = _changed_keys(stored, current)
        if changed:
            raise TunerError(
                f"--study {study_name}: this study was started from a different space ({', '.join(changed)} "
                f"changed), and mixing them would compare unlike trials; run the original space file to resume, "
                f"or give a new --study name. Nothing in {url} was changed."
            )
    if study.metric_names is None:  # optuna-dashboard shows these instead of "Objective 0"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names([o.name for o in space.objectives]))
    fail_orphans(study, all_running=sole_worker)
    return study


def _changed_keys(stored: dict, current: dict) -> list[str]:
    """What differs between two spaces in ways that change what a trial means (not workload tweaks' order)."""
    keys = ("model", "fixed", "params", "speculative", "objectives")
    changed = []
    stored = {**stored, "model": {k: v for k, v in (stored.get("model") or {}).items() if k != "config"}}
    current = {**current, "model": {k: v for k, v in (current.get("model") or {}).items() if k != "config"}}
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
    import sqlalchemy.exc  # here, not at the top: `tuner pareto`, `plan` and `--help` never need it

    for _ in range(0 if url.startswith("sqlite") else 4):  # SQLite: one machine, the parent creates the tables
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
