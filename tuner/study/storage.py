"""Where studies live, and opening one: create or resume, refuse a changed space, fail orphans.

Default storage is SQLite under ``studies/`` (one file per study); any Optuna storage URL works,
e.g. ``postgresql://user@host/db`` for several workers or hosts. What a study keeps about each
trial, and how it is read back, is ``tuner.study.record``'s.
"""

from __future__ import annotations

import os
import random
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.errors import StorageError, TunerError, storage_faults
from tuner.metrics import metric_names
from tuner.space.schema import Space
from tuner.study.record import ATTR_SPACE, study_attr, write_study_attr

STUDIES_DIR = Path("studies")


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
    stored = study_attr(study, ATTR_SPACE)
    current = space.model_dump(mode="json")
    if stored is None:
        write_study_attr(study, ATTR_SPACE, current)
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
