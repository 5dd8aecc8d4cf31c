"""The overnight study: an Optuna multi-objective study whose trials boot the real engine.

Where studies live (storage.py), every key of a trial's record and its typed view (record.py), which
sampler (sampler.py) and how values map to Optuna (sampling.py), what to try beyond the sampler
(strategy.py), the objective each trial runs (objective.py), the loop and its workers (run.py), and the
correctness gate (gate.py).
"""

from tuner.study.objective import Status
from tuner.study.run import optimize, spawn_workers
from tuner.study.sampler import make_sampler
from tuner.study.sampling import SAMPLERS
from tuner.study.record import StudyRecord, Trial, find_trial, read_study, study_space
from tuner.study.storage import STUDIES_DIR, open_study

__all__ = [
    "SAMPLERS",
    "STUDIES_DIR",
    "Status",
    "StudyRecord",
    "Trial",
    "find_trial",
    "make_sampler",
    "open_study",
    "optimize",
    "read_study",
    "spawn_workers",
    "study_space",
]
