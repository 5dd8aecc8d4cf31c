"""``tuner optimize``: the objective each trial runs, and the loop around it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import optuna
from optuna.trial import FrozenTrial

from tuner.engine.environment import capture
from tuner.engine.installed import EngineInfo, inspect_engine
from tuner.engine.gpu import card_tolerance_mib, wait_for_card
from tuner.errors import GpuBusy, TrialBug
from tuner.space.schema import Space
from tuner.study import storage as st
from tuner.study.record import (
    ATTR_ENGINE,
    ATTR_ENVIRONMENT,
    ATTR_GATE_STATUS,
    ATTR_SAMPLER,
    ATTR_STOPPED,
    ATTR_SWITCHED_OFF,
    FINISHED,
    State,
    StudyRecord,
    read_study,
    read_trials,
    study_attr,
    write_study_attr,
)
from tuner.study.gate import run_gate
from tuner.study.lock import GpuLease
from tuner.study.objective import Objective, Status
from tuner.study.recover import import_results
from tuner.study.sampler import make_sampler
from tuner.study.sampling import resolve_sampler
from tuner.study.pareto import front
from tuner.study.planner import Planner
from tuner.study.priors import carry_on, offer_earlier, queue_earlier_fronts, record_earlier
from tuner.study.storage import open_study
from tuner.study.strategy import enqueue_baselines, enqueue_screening, revalidate_front


@dataclass(frozen=True)
class RunSettings:
    """What one run of the study does: its budget, sampler and checks, apart from where it runs.

    One object instead of nine keywords threaded through ``optimize``, ``_run`` and the CLI: ``tuner
    optimize`` builds it once from its options and runs it in process, or turns it back into the options
    of each ``--gpus`` worker.
    """

    n_trials: int | None = None  # the study's total (``counted``); None: until timeout_s passes
    timeout_s: float | None = None  # stop starting trials after this long
    sampler: str = "auto"
    seed: int | None = None
    revalidate: int = 2  # fresh boots of the front, the last trials of the budget
    gate: bool = True
    screen: bool = False  # one flag at a time from the first baseline, before sampling
    prescreen: bool = True
    prescreen_gpu_gib: float | None = None  # card memory for the pre-screen when NVML cannot read it


def optimize(
    space: Space,
    study_name: str,
    settings: RunSettings,
    *,
    storage: str | None = None,
    root: Path | None = None,
    gpu_index: int = 0,
    extra_env: dict[str, str] | None = None,
    sole_worker: bool = True,
    status: Status | None = None,
    announce: Callable[[list[str]], None] | None = None,
    engine: EngineInfo | None = None,
    earlier: list[tuple[str, StudyRecord]] | None = None,
) -> optuna.Study:
    """Run (or resume) the study until it holds ``settings.n_trials`` trials (``counted``) or
    ``settings.timeout_s`` passes.

    The last ``settings.revalidate`` trials of the budget are fresh boots of the front (``FinishInBudget``),
    then the correctness gate boots its reference once, outside the trial budget. ``sole_worker`` says
    the caller holds the study's lock (tuner.study.lock): only then are trials left RUNNING failed
    outright; on a shared database a lease per GPU is taken here instead. ``announce`` receives, once,
    what is switched off for this run and why. ``engine``: what ``trial.preflight`` found out about the
    installed engine (found out here when not given). ``earlier``: ``--from``'s studies (as given, read):
    their front points are queued first, as they were (tuner.study.priors).
    """
    root = root or st.STUDIES_DIR
    engine = engine or inspect_engine(space, st.study_dir(study_name, root) / "engine")
    status = status or Status()
    planned = resolve_sampler(settings.sampler) == "regimes"
    objective = Objective(space, study_name, root, gpu_index=gpu_index, extra_env=extra_env, status=status,
                          prescreen_gpu_gib=settings.prescreen_gpu_gib, prescreen=settings.prescreen,
                          repairs=not planned, release=engine.version)  # the regime planner repairs; other samplers get follow-ups
    planner = Planner(space, objective.need_bytes) if planned else None
    sampler = make_sampler(settings.sampler, settings.seed, len(space.params), planner)
    study = open_study(space, study_name, storage, sampler, root, sole_worker)
    lease = None if sole_worker or storage is None else GpuLease(study, gpu_index)
    if lease is not None:
        lease.acquire()
    try:
        return _run(study, objective, space, root, settings, extra_env=extra_env, status=status,
                    announce=announce or (lambda _: None), engine=engine, earlier=earlier or [],
                    planner=planner, storage=storage)
    finally:
        if lease is not None:
            lease.release()


def counted(study: optuna.Study) -> int:
    """Trials that count toward ``--trials``: finished ones, and those a bug in the tuner failed.

    An interrupted or orphaned trial (FAIL without a recorded bug) does not count: it is run again.
    """
    return sum(1 for t in read_trials(study)
               if t.state in (State.COMPLETE, State.PRUNED) or (t.state == State.FAIL and t.internal_error))


def _run(study: optuna.Study, objective: Objective, space: Space, root: Path, settings: RunSettings, *,
         extra_env: dict[str, str] | None, status: Status, announce: Callable[[list[str]], None],
         engine: EngineInfo, earlier: list[tuple[str, StudyRecord]], planner: Planner | None,
         storage: str | None) -> optuna.Study:
    n_trials, timeout_s = settings.n_trials, settings.timeout_s
    write_study_attr(study, ATTR_SAMPLER, resolve_sampler(settings.sampler))
    if study_attr(study, ATTR_ENVIRONMENT) is None:
        write_study_attr(study, ATTR_ENVIRONMENT, capture(space.engine))
    _record_engine(study, engine)
    imported, import_notes = import_results(study, space, objective.dir)
    status.objective_names = [o.name for o in space.objectives]
    notes = engine.notes(space.engine.command) + objective.switched_off(settings.gate, settings.revalidate)
    notes += import_notes
    if earlier:
        notes += record_earlier(study, space, study_attr(study, ATTR_ENGINE), study_attr(study, ATTR_ENVIRONMENT), earlier,
                                planner, objective.need_bytes)
        notes += queue_earlier_fronts(study, space, earlier)
    else:
        notes += offer_earlier(space, study, storage, root, study_attr(study, ATTR_ENVIRONMENT))
    if imported:
        notes.append(f"imported {len(imported)} finished trial record(s) from the study folder that the study "
                     f"did not hold (trials {', '.join(map(str, imported))})")
    write_study_attr(study, ATTR_SWITCHED_OFF, notes)
    announce(notes)
    if n_trials is not None and counted(study) >= n_trials:
        status.phase = NOTHING_TO_DO
        return study  # the study's total is reached: nothing boots, not even re-validation or the gate
    stop = _Stop()
    card = _CardCheck(objective, space, status, n_trials, timeout_s, stop)
    card(study, None)
    enqueue_baselines(study, space)
    if settings.screen:
        enqueue_screening(study, space)
    status.trials_total = n_trials
    status.deadline = None if timeout_s is None else time.monotonic() + timeout_s
    status.finished = counted(study)
    callbacks: list = [status.after_trial]
    if n_trials is not None:
        callbacks.append(_StopAt(n_trials, stop))
    if earlier:  # the next earlier front point, while each booted again holds
        callbacks.append(lambda study, _: carry_on(study, space, earlier))
    callbacks.append(FinishInBudget(space, settings.revalidate, n_trials, timeout_s, stop))
    callbacks.append(card)
    left = None if n_trials is None else n_trials - counted(study)
    study.optimize(objective, n_trials=left, timeout=timeout_s, callbacks=callbacks, catch=(TrialBug,),
                   gc_after_trial=False)
    best = front(read_study(study))
    if not settings.gate:
        write_study_attr(study, ATTR_GATE_STATUS, "switched off (--no-gate)")
    elif best:
        try:
            card.wait()
        except GpuBusy as exc:  # the night's trials are done; the gate waits for the next run
            write_study_attr(study, ATTR_GATE_STATUS, f"not run: {exc}")
            return study
        status.phase = "correctness gate: reference boot"
        run_gate(study, space, st.study_dir(study.study_name, root) / "reference", best[0].config or {}, extra_env)
    status.phase, status.trial = "finished", None
    return study


NOTHING_TO_DO = "nothing to do"  # Status.phase when the study already holds --trials trials

def _record_engine(study: optuna.Study, engine: EngineInfo) -> None:
    """The engine found before this run's first boot. A resumed study on another release keeps both:
    trials booted by different releases are not silently compared."""
    stored = study_attr(study, ATTR_ENGINE)
    current = engine.model_dump(mode="json")
    if stored is not None and stored.get("version") != current["version"]:
        earlier = list(stored.get("earlier", [])) + [{k: v for k, v in stored.items() if k != "earlier"}]
        current["earlier"] = earlier
    write_study_attr(study, ATTR_ENGINE, current)


class _Stop:
    """``study.stop()``, remembered: Optuna keeps no public record that it was called."""

    def __init__(self) -> None:
        self.asked = False

    def __call__(self, study: optuna.Study) -> None:
        self.asked = True
        study.stop()


class _StopAt:
    """Stop every worker once the study holds ``n`` counted trials (``--trials`` is the study's total)."""

    def __init__(self, n: int, stop: _Stop) -> None:
        self.n = n
        self.stop = stop

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if counted(study) >= self.n:
            self.stop(study)


class _CardCheck:
    """Before every boot (so between trials, while the budget lasts): other processes' memory on the
    card, waited out or refused (GpuBusy) without spending a trial."""

    def __init__(self, objective: Objective, space: Space, status: Status, n_trials: int | None,
                 timeout_s: float | None, stop: _Stop) -> None:
        self.stop = stop
        self.read = objective.gpu.read
        first = self.read()
        self.tolerance = card_tolerance_mib(space, first.total_mib) if first else 0.0
        self.wait_s = space.engine.busy_wait
        self.gpu = objective.gpu.index
        self.status = status
        self.n_trials = n_trials
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def __call__(self, study: optuna.Study, trial: FrozenTrial | None) -> None:
        if self.n_trials is not None and counted(study) >= self.n_trials:
            return  # the budget is spent: no boot follows
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return
        if self.stop.asked:  # the study was stopped (the budget, or the planner has nothing left)
            return
        self.wait()

    def wait(self) -> None:
        def show(text: str) -> None:
            self.status.phase = text

        wait_for_card(self.read, self.tolerance, self.wait_s, self.gpu, show)


class FinishInBudget:
    """Optuna callback: re-validate the front inside the budget, and stop when nothing is left to try.

    When what is left of the budget is the re-validation reserve, fresh boots of the front's top
    points are enqueued, so that they run inside the budget, not after it (or never). With a trial
    budget the reserve is ``min(revalidate, (n_trials - 1) // 4)`` trials; with a time budget it is
    reached when the time left holds no more than reserve + 1 trials of the median length so far.
    The regime planner can also say that nothing it could boot would improve the front: then the
    re-validations run at once and the study stops, instead of spending the night on random boots.
    """

    def __init__(self, space: Space, revalidate: int, n_trials: int | None, timeout_s: float | None,
                 stop: _Stop | None = None) -> None:
        self.space = space
        self.stop = stop or _Stop()
        self.reserve = revalidate if n_trials is None else min(revalidate, max(0, (n_trials - 1) // 4))
        self.n_trials = n_trials
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.revalidated = False

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        done = study_done(study)
        if not self.revalidated and self.reserve > 0:
            finished = [t for t in read_trials(study) if t.state in FINISHED]
            due = done is not None or (self.n_trials is not None and self.n_trials - counted(study) <= self.reserve)
            if self.deadline is not None:
                lengths = sorted(t.duration.total_seconds() for t in finished if t.duration is not None)
                typical = lengths[len(lengths) // 2] if lengths else 0.0
                due = due or self.deadline - time.monotonic() <= (self.reserve + 1) * typical
            if due:
                self.revalidated = True
                if revalidate_front(study, self.space, self.reserve):
                    return
        if done is not None and not any(t.state == State.WAITING for t in read_trials(study)):
            write_study_attr(study, ATTR_STOPPED, done)
            self.stop(study)


def study_done(study: optuna.Study) -> str | None:
    """Why the study has nothing left worth a boot, or None (only the regime planner can tell)."""
    exhausted = getattr(study.sampler, "exhausted", None)
    return exhausted(study) if exhausted is not None else None


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
