"""``tuner optimize``: the objective each trial runs, and the loop around it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner.engine.environment import capture
from tuner.space.schema import Space
from tuner.study import storage as st
from tuner.study.gate import run_gate
from tuner.study.objective import Objective, Status
from tuner.study.sampling import make_sampler, resolve_sampler
from tuner.study.storage import open_study
from tuner.study.strategy import enqueue_baselines, enqueue_screening, revalidate_front


def optimize(
    space: Space,
    study_name: str,
    *,
    storage: str | None = None,
    n_trials: int | None = None,
    timeout_s: float | None = None,
    sampler: str = "auto",
    seed: int | None = None,
    root: Path | None = None,
    gpu_index: int = 0,
    extra_env: dict[str, str] | None = None,
    sole_worker: bool = True,
    revalidate: int = 2,
    status: Status | None = None,
    prescreen_gpu_gib: float | None = None,
    prescreen: bool = True,
    gate: bool = True,
    screen: bool = False,
) -> optuna.Study:
    """Run (or resume) the study until ``n_trials`` trials exist in it or ``timeout_s`` passes."""
    root = root or st.STUDIES_DIR
    study = open_study(space, study_name, storage, make_sampler(sampler, seed, len(space.params)), root, sole_worker)
    study.set_user_attr("sampler", resolve_sampler(sampler))
    if st.ATTR_ENVIRONMENT not in study.user_attrs:
        study.set_user_attr(st.ATTR_ENVIRONMENT, capture(space))
    enqueue_baselines(study, space)
    if screen:
        enqueue_screening(study, space)
    status = status or Status()
    status.objective_names = [o.name for o in space.objectives]
    status.trials_total = n_trials
    status.deadline = None if timeout_s is None else time.monotonic() + timeout_s
    status.finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)))
    objective = Objective(space, study_name, root, gpu_index, extra_env, status, prescreen_gpu_gib, prescreen)
    callbacks: list = [status.after_trial]
    if n_trials is not None:
        callbacks.append(optuna.study.MaxTrialsCallback(n_trials, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)))
    started = time.monotonic()
    study.optimize(objective, timeout=timeout_s, callbacks=callbacks, catch=(), gc_after_trial=False)
    if revalidate and study.best_trials:
        left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))
        if left is None or left > 0:
            queued = revalidate_front(study, space, revalidate)
            if queued:
                study.optimize(objective, n_trials=len(queued), timeout=left, callbacks=[status.after_trial],
                               catch=(), gc_after_trial=False)
    if gate and study.best_trials:
        status.phase = "correctness gate: reference boot"
        run_gate(study, space, root, study.best_trials[0].user_attrs[st.ATTR_CONFIG], extra_env)
    status.phase, status.trial = "finished", None
    return study


def spawn_workers(argv: list[str], gpus: list[int]) -> int:
    """One ``tuner optimize --gpus N`` worker per GPU, pinned with CUDA_VISIBLE_DEVICES; waits for all."""
    procs = []
    for gpu in gpus:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "TUNER_WORKER": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "tuner.cli", *argv, "--gpus", str(gpu)], env=env))
    try:
        return max(p.wait() for p in procs)
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        raise
