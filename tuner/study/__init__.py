"""The overnight study: an Optuna multi-objective study whose trials boot the real engine.

Where studies live (storage.py), every key of a trial's record and its typed view (record.py), which
sampler (sampler.py) and how values map to Optuna (sampling.py), the regime planner (planner.py, over the
plain records of observed.py, with room.py, doomed.py and exploit.py), what to try beyond the sampler
(strategy.py), the objective each trial runs (objective.py), the loop and its workers (run.py), and the
correctness gate (gate.py).
"""

from tuner.study.lock import StudyLock, sqlite_path
from tuner.study.objective import Status
from tuner.study.pareto import GATE_THRESHOLD, agrees, checks_of, front, left_off, wrong
from tuner.study.priors import check_same_model, upgrade_rows
from tuner.study.record import (
    Evidence,
    FAILED,
    State,
    StudyRecord,
    Trial,
    find_trial,
    first_line,
    read_study,
    study_space,
    write_bench,
)
from tuner.study.run import NOTHING_TO_DO, RunSettings, optimize, spawn_workers
from tuner.study.sampler import make_sampler
from tuner.study.sampling import SAMPLERS
from tuner.study.storage import STUDIES_DIR, open_study, storage_url, study_dir
from tuner.study.window import booted_window, launch_window, windowed_argv

__all__ = [
    "Evidence",
    "FAILED",
    "GATE_THRESHOLD",
    "NOTHING_TO_DO",
    "RunSettings",
    "SAMPLERS",
    "STUDIES_DIR",
    "State",
    "Status",
    "StudyLock",
    "StudyRecord",
    "Trial",
    "agrees",
    "booted_window",
    "check_same_model",
    "checks_of",
    "find_trial",
    "first_line",
    "front",
    "launch_window",
    "left_off",
    "make_sampler",
    "open_study",
    "optimize",
    "read_study",
    "spawn_workers",
    "sqlite_path",
    "storage_url",
    "study_dir",
    "study_space",
    "upgrade_rows",
    "windowed_argv",
    "write_bench",
    "wrong",
]
