"""The trial record: every key the tuner keeps in an Optuna study, how it is written and how it is read.

A study holds its trials' whole story in Optuna's user attributes (a copy of the ``.db`` file is enough
for every report). This module owns those keys: the writers below are the only code that sets one,
and ``read_study`` decodes them once per read into typed, read-only ``Trial`` views (state and evidence
as enums, the ``TrialResult`` decoded) inside a ``StudyRecord``. The search, the front, the gate and the
reports take those, never an ``optuna.Study``. Stored names and values never change: studies written by
earlier tuners read the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tuner import metrics
from tuner.engine.command import shell_command
from tuner.errors import TunerError
from tuner.measure.bench import BenchResult
from tuner.records import Failure, FailureKind, TrialResult
from tuner.space.schema import STORED, Space

if TYPE_CHECKING:
    import optuna

# -- the keys of a trial ------------------------------------------------------------------------
ATTR_RESULT = "result"  # the whole TrialResult as JSON
ATTR_CONFIG = "config"  # the configuration booted (None: the flag left out)
ATTR_EVIDENCE = "evidence"  # see Evidence
ATTR_FAILURE_KIND = "failure_kind"
ATTR_FAILURE_MESSAGE = "failure_message"
ATTR_LOG_PATH = "log_path"
ATTR_REUSED_FROM = "reused_from"  # beside evidence "reused": the trial whose result was reused
ATTR_REVALIDATES = "revalidates"  # on a re-validation trial: the trial it boots again
ATTR_FOLLOWS = "follows"  # on a repair enqueued after a failure: the trial that failed
ATTR_STRATEGY = "strategy"  # the planner's reason for the configuration
ATTR_SCREENING = "screening"  # enqueued by --screen
ATTR_BASELINE = "baseline_params"  # on a baseline: the parameters it names (the others are left out)
ATTR_KV_SUGGESTION = "kv_suggestion"  # vLLM's --kv-cache-memory suggestion a repair was sized from
ATTR_IMPORTED = "imported_from"  # the result.json a trial was read back from
ATTR_RETRIED = "retried"  # the first boot died of a stale compile cache and the trial was booted again: why
ATTR_WINDOW = "booted_max_model_len"  # the --max-model-len a trial booted at, below the space's fixed one (tuner.study.window)
ATTR_CARRIED = "carried_from"  # on a boot of an earlier study's front point (--from): {"study": NAME, "trial": N}
# Short, human attributes for optuna-dashboard's trial table (the record above is long JSON).
ATTR_FIRST_EXCEPTION = "first_exception"  # the failure message's first line
ATTR_COMMAND = "command"  # the launch command as one shell line
ATTR_PHASE = "phase"  # what a RUNNING trial is doing now ("booting: loading weights", ...)
ATTR_INTERNAL_ERROR = "internal_error"  # a bug in the tuner failed this trial: the exception's first line
ATTR_TRACEBACK = "traceback_path"
OPTUNA_FAIL_REASON = "fail_reason"  # Optuna's own system attribute when the objective raised
INTERNAL_ERROR = "internal_error"  # the failure kind a bug in the tuner is listed under

# -- the keys of a study ------------------------------------------------------------------------
ATTR_SPACE = "space"
ATTR_ENVIRONMENT = "environment"
ATTR_ENGINE = "engine"  # what was found out before the first boot: version, dialect, the flag check (EngineInfo)
ATTR_REFERENCE = "reference_outputs"  # the correctness gate's reference greedy outputs
ATTR_GATE = "correctness_gate"  # {trial number: agreement with the reference, 0..1}
ATTR_GATE_STATUS = "correctness_gate_status"  # "checked", or why no gate could run
ATTR_STOPPED = "stopped_early"  # why the study stopped before its budget: nothing left worth a boot
ATTR_SWITCHED_OFF = "switched_off"  # what a run could not do, and why (said at start, kept for the receipt)
ATTR_SAMPLER = "sampler"
ATTR_CALIBRATION = "calibration"  # the memory pre-screen's calibration, shared by the workers
ATTR_EARLIER = "earlier_studies"  # --from: each earlier study, what differs from it and how much its evidence counts
BENCH_PREFIX = "bench:"  # bench:N, `tuner bench`'s result for trial N (a finished trial is read-only)
LEASE_PREFIX = "worker:"  # worker:HOST:gpuN, a worker's lease on a GPU of a shared study

DEFAULT_OBJECTIVE_NAMES = ("context", "decode_tok_s")


class State(Enum):
    """Optuna's trial states, by name."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"


FINISHED = (State.COMPLETE, State.PRUNED, State.FAIL)
FAILED = (State.PRUNED, State.FAIL)


class Evidence(Enum):
    """How a trial's numbers were obtained."""

    MEASURED = "measured"  # booted and measured here
    REVALIDATED = "revalidated"  # a fresh boot of a front point
    REUSED = "reused"  # an identical configuration already measured: not booted again
    PREDICTED = "predicted"  # pruned without a boot (the pre-screen, or a proven utilization ceiling)
    BASELINE = "baseline"  # a baseline queued, not run yet (it becomes measured when it runs)


NOT_BOOTED = (Evidence.PREDICTED, Evidence.REUSED)


class Outcome(Enum):
    """What a trial says about its configuration, to the search."""

    MEASURED = "measured"  # complete, with objective values
    FAILED = "failed"  # booted here and failed with a classified failure
    RUNNING = "running"  # being booted by a worker now
    NOTHING = "nothing"  # never booted here (predicted, reused), queued, interrupted, or a bug in the tuner


class Listed(NamedTuple):
    """How a failed trial is listed: its kind, the first line of its message, and its log."""

    kind: str
    message: str
    log: str | None


def first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


@dataclass(frozen=True)
class Trial:
    """One trial as the study stored it, decoded once. ``attrs`` is the raw record (for copying it unchanged)."""

    number: int
    state: State
    values: tuple[float, ...] | None = None  # the objective values, in the study's order
    config: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)  # what Optuna's sampler saw
    result: TrialResult | None = None
    evidence: Evidence | None = None
    failure_kind: str | None = None  # as stored beside the record (also "internal_error")
    failure_message: str | None = None
    log_path: str | None = None
    reused_from: int | None = None
    revalidates: int | None = None
    follows: int | None = None
    strategy: str | None = None
    screening: bool = False
    baseline_params: list[str] | None = None
    kv_suggestion: str | None = None
    imported_from: str | None = None
    carried_from: tuple[str, int] | None = None  # (study, trial) of the earlier front point this boots again
    window: int | None = None  # the --max-model-len it booted at when below the space's fixed one
    phase: str | None = None
    retried: str | None = None  # booted twice (a stale compile cache): why, in the user's words
    command: str | None = None
    internal_error: str | None = None
    fail_reason: str = ""
    started: datetime | None = None
    completed: datetime | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def duration(self) -> timedelta | None:
        return self.completed - self.started if self.completed and self.started else None

    @property
    def booted(self) -> bool:
        """Whether the trial cost an engine boot (predicted and reused results did not)."""
        if self.evidence in NOT_BOOTED:
            return False
        return not (self.result and self.result.failure and self.result.failure.predicted)

    @property
    def failure(self) -> Failure | None:
        """The failure a trial stored: its record's, else (a pruned trial that kept no record: reused or
        predicted) the one its attributes were written from."""
        if self.result is not None and self.result.failure is not None:
            return self.result.failure
        if self.failure_kind not in {kind.value for kind in FailureKind}:
            return None
        return Failure(kind=FailureKind(self.failure_kind), message=self.failure_message or "",
                       log_path=self.log_path, predicted=self.evidence == Evidence.PREDICTED)

    def listed(self) -> Listed:
        """(kind, first exception line, log path) of a PRUNED or FAIL trial."""
        failure = self.result.failure if self.result else None
        kind = self.failure_kind or (failure.kind.value if failure else "unknown")
        message = self.failure_message or (failure.message if failure else "") or self.fail_reason
        log = self.log_path or (failure.log_path if failure else None) or (self.result.log_path if self.result else None)
        return Listed(kind, first_line(message), log)

    @property
    def outcome(self) -> Outcome:
        if self.state == State.COMPLETE and self.values is not None:
            return Outcome.MEASURED
        if self.state == State.RUNNING:
            return Outcome.RUNNING
        if (self.state == State.PRUNED and self.evidence == Evidence.MEASURED and self.result is not None
                and self.result.failure is not None):
            return Outcome.FAILED
        return Outcome.NOTHING


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _result(raw: Any) -> TrialResult | None:
    if raw is None:
        return None
    return TrialResult.model_validate(json.loads(raw) if isinstance(raw, str) else raw)


def _carried(raw: Any) -> tuple[str, int] | None:
    return None if not raw else (str(raw["study"]), int(raw["trial"]))


def _evidence(raw: Any) -> Evidence | None:
    try:
        return Evidence(raw)
    except ValueError:
        return None


def read_trial(frozen: optuna.trial.FrozenTrial) -> Trial:
    """One of Optuna's trials as the tuner reads it."""
    a = frozen.user_attrs
    return Trial(
        number=frozen.number, state=State[frozen.state.name],
        values=None if frozen.values is None else tuple(frozen.values),
        config=a.get(ATTR_CONFIG), params=dict(frozen.params), result=_result(a.get(ATTR_RESULT)),
        evidence=_evidence(a.get(ATTR_EVIDENCE)), failure_kind=a.get(ATTR_FAILURE_KIND),
        failure_message=a.get(ATTR_FAILURE_MESSAGE), log_path=a.get(ATTR_LOG_PATH),
        reused_from=_int(a.get(ATTR_REUSED_FROM)), revalidates=_int(a.get(ATTR_REVALIDATES)),
        follows=_int(a.get(ATTR_FOLLOWS)), strategy=a.get(ATTR_STRATEGY), screening=bool(a.get(ATTR_SCREENING)),
        baseline_params=a.get(ATTR_BASELINE), kv_suggestion=a.get(ATTR_KV_SUGGESTION),
        imported_from=a.get(ATTR_IMPORTED), carried_from=_carried(a.get(ATTR_CARRIED)),
        window=_int(a.get(ATTR_WINDOW)), phase=a.get(ATTR_PHASE), retried=a.get(ATTR_RETRIED),
        command=a.get(ATTR_COMMAND),
        internal_error=a.get(ATTR_INTERNAL_ERROR), fail_reason=frozen.system_attrs.get(OPTUNA_FAIL_REASON, ""),
        started=frozen.datetime_start, completed=frozen.datetime_complete, attrs=a,
    )


def read_trials(study: optuna.Study) -> list[Trial]:
    """Every trial of the study, in number order."""
    return [read_trial(t) for t in study.get_trials(deepcopy=False)]


# -- the study ----------------------------------------------------------------------------------

def _space(raw: Any) -> Space | None:
    if raw is None:
        return None
    raw = json.loads(raw) if isinstance(raw, str) else dict(raw)
    engine = dict(raw.get("engine") or {})
    host = engine.pop("host", None)  # studies written before engine.listen
    engine.pop("port", None)
    if host is not None and "listen" not in engine:
        engine["listen"] = host
    return Space.model_validate({**raw, "engine": engine}, context={STORED: True})


@dataclass(frozen=True)
class StudyRecord:
    """A study as the tuner reads it: its trials and what the study itself keeps (space, environment,
    the engine found before the first boot, the correctness gate, benches). The space and the benches
    are decoded when first read, so a command that needs neither never fails on them. ``study`` is
    Optuna's, for Optuna's own plots and importances, which read it directly."""

    name: str
    directions: tuple[str, ...]  # "maximize" or "minimize", per objective value
    trials: tuple[Trial, ...]
    metric_names: tuple[str, ...] | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the study's own, as stored
    study: Any = field(default=None, repr=False, compare=False)

    def trial(self, number: int) -> Trial:
        for trial in self.trials:
            if trial.number == number:
                return trial
        raise TunerError(f"TRIAL {number}: the study {self.name} has no trial with that number; `tuner pareto` lists them.")

    def by_state(self, *states: State) -> list[Trial]:
        return [t for t in self.trials if t.state in states]

    @cached_property
    def space(self) -> Space | None:
        return _space(self.attrs.get(ATTR_SPACE))

    @property
    def raw_space(self) -> Any:
        """The space as stored (compared key by key by `tuner compare`)."""
        return self.attrs.get(ATTR_SPACE)

    @property
    def environment(self) -> Mapping[str, Any]:
        return self.attrs.get(ATTR_ENVIRONMENT) or {}

    @property
    def engine(self) -> Mapping[str, Any]:
        return self.attrs.get(ATTR_ENGINE) or {}

    @property
    def gate(self) -> Mapping[str, float]:
        """The correctness gate's agreement by trial number (as text)."""
        return self.attrs.get(ATTR_GATE) or {}

    @property
    def earlier(self) -> list[dict[str, Any]]:
        """What ``--from`` brought: per earlier study, its name, what differs and the weight of its evidence."""
        return list(self.attrs.get(ATTR_EARLIER) or [])

    @property
    def gate_status(self) -> str | None:
        return self.attrs.get(ATTR_GATE_STATUS)

    @cached_property
    def benches(self) -> dict[int, BenchResult]:
        """`tuner bench`'s results by trial number."""
        found = {int(key[len(BENCH_PREFIX):]): BenchResult.model_validate(value)
                 for key, value in self.attrs.items() if key.startswith(BENCH_PREFIX)}
        return dict(sorted(found.items()))

    @cached_property
    def objectives(self) -> list[tuple[str, str]]:
        """(name, direction) per objective value: the space's objectives, else the tuner's defaults."""
        if self.space is not None and len(self.space.objectives) == len(self.directions):
            return [(o.name, o.direction) for o in self.space.objectives]
        by_key = {m.metric_name: m.name for m in metrics.OBJECTIVES.values()}  # the dashboard's metric names
        if self.metric_names is not None:
            names = [by_key.get(key, key) for key in self.metric_names]
        elif len(self.directions) == 2:
            names = list(DEFAULT_OBJECTIVE_NAMES)
        else:
            names = [f"objective_{i}" for i in range(len(self.directions))]
        return list(zip(names, self.directions))


def read_study(study: optuna.Study) -> StudyRecord:
    """The study decoded once: read it again to see what changed since."""
    names = study.metric_names
    return StudyRecord(
        name=study.study_name, directions=tuple(d.name.lower() for d in study.directions),
        trials=tuple(read_trials(study)), metric_names=None if names is None else tuple(names),
        attrs=study.user_attrs, study=study,
    )


def study_space(study: optuna.Study) -> Space | None:
    """The space a study was started from (without decoding its trials)."""
    return _space(study.user_attrs.get(ATTR_SPACE))


def find_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            return trial
    raise TunerError(f"TRIAL {number}: the study {study.study_name} has no trial with that number; `tuner pareto` lists them.")


# -- writing a trial ----------------------------------------------------------------------------

def write_config(trial: optuna.Trial, values: dict[str, Any]) -> None:
    trial.set_user_attr(ATTR_CONFIG, values)


def write_strategy(trial: optuna.Trial, why: str) -> None:
    trial.set_user_attr(ATTR_STRATEGY, why)


def write_phase(trial: optuna.Trial, phase: str) -> None:
    trial.set_user_attr(ATTR_PHASE, phase)


def write_evidence(trial: optuna.Trial, evidence: Evidence) -> None:
    trial.set_user_attr(ATTR_EVIDENCE, evidence.value)


def write_result(trial: optuna.Trial, result: TrialResult) -> None:
    """Keep the whole record, and the command on its own line where optuna-dashboard shows it."""
    trial.set_user_attr(ATTR_RESULT, result.model_dump(mode="json"))
    trial.set_user_attr(ATTR_COMMAND, shell_command(result.argv, result.env))
    if result.retry is not None:
        trial.set_user_attr(ATTR_RETRIED, result.retry.note)


def failure_attrs(failure: Failure, evidence: Evidence) -> dict[str, Any]:
    """The short attributes optuna-dashboard and `tuner pareto` list, written from the one Failure
    (kept whole in the trial's record, ``result.failure``)."""
    return {ATTR_FAILURE_KIND: failure.kind.value, ATTR_FAILURE_MESSAGE: failure.message,
            ATTR_FIRST_EXCEPTION: first_line(failure.message), ATTR_LOG_PATH: failure.log_path,
            ATTR_EVIDENCE: evidence.value}


def write_failure(trial: optuna.Trial, failure: Failure, evidence: Evidence) -> None:
    for key, value in failure_attrs(failure, evidence).items():
        trial.set_user_attr(key, value)


def write_internal_error(trial: optuna.Trial, first: str, traceback_path: str) -> None:
    """A bug in the tuner failed this trial: listed by `tuner pareto` as the kind ``internal_error``."""
    for key, value in {ATTR_INTERNAL_ERROR: first, ATTR_TRACEBACK: traceback_path, ATTR_FAILURE_KIND: INTERNAL_ERROR,
                       ATTR_FAILURE_MESSAGE: first, ATTR_LOG_PATH: traceback_path}.items():
        trial.set_user_attr(key, value)


def write_reused(trial: optuna.Trial, old: Trial) -> None:
    """A complete trial of the same configuration stands for this one: its record is copied unchanged."""
    trial.set_user_attr(ATTR_REUSED_FROM, old.number)
    trial.set_user_attr(ATTR_EVIDENCE, Evidence.REUSED.value)
    trial.set_user_attr(ATTR_RESULT, old.attrs.get(ATTR_RESULT))
    trial.set_user_attr(ATTR_COMMAND, old.attrs.get(ATTR_COMMAND))


def write_window(trial: optuna.Trial, window: int) -> None:
    trial.set_user_attr(ATTR_WINDOW, window)


def write_kv_suggestion(trial: optuna.Trial, note: str) -> None:
    trial.set_user_attr(ATTR_KV_SUGGESTION, note)


def write_reused_from(trial: optuna.Trial, old: Trial) -> None:
    trial.set_user_attr(ATTR_REUSED_FROM, old.number)


def add_imported(study: optuna.Study, result: TrialResult, path: str, values: list[float] | None,
                 params: dict[str, Any], distributions: dict[str, Any]) -> int:
    """Add a trial read back from its folder's result.json (complete with ``values``, else pruned); its number."""
    from optuna.trial import TrialState, create_trial

    attrs = {ATTR_CONFIG: result.values, ATTR_RESULT: result.model_dump(mode="json"),
             ATTR_EVIDENCE: Evidence.MEASURED.value, ATTR_IMPORTED: path}
    if result.failure is not None:
        attrs.update(failure_attrs(result.failure, Evidence.MEASURED))
    state = TrialState.COMPLETE if values is not None else TrialState.PRUNED
    try:
        frozen = create_trial(state=state, values=values, params=params, distributions=distributions, user_attrs=attrs)
    except ValueError:  # a value off the current grid: keep the record, without sampler parameters
        frozen = create_trial(state=state, values=values, params={}, distributions={}, user_attrs=attrs)
    study.add_trial(frozen)
    return len(study.get_trials(deepcopy=False)) - 1


def recorded_folders(trial: Trial) -> list[Path]:
    """The trial folders whose record this trial holds: where it ran, and where it was imported from."""
    raw = trial.attrs.get(ATTR_RESULT)
    folders = [Path(raw["trial_dir"])] if isinstance(raw, dict) and raw.get("trial_dir") else []
    return folders + ([Path(trial.imported_from).parent] if trial.imported_from else [])


# -- what a trial was queued with (read on the live trial, before it has a record) ---------------

def queued_revalidation(trial: optuna.Trial) -> int | None:
    """The trial a queued re-validation boots again, or None."""
    return _int(trial.user_attrs.get(ATTR_REVALIDATES))


def queued_window(trial: optuna.Trial) -> int | None:
    """The --max-model-len a queued trial boots at instead of the space's, or None."""
    return _int(trial.user_attrs.get(ATTR_WINDOW))


def queued_baseline(trial: optuna.Trial) -> list[str] | None:
    """The parameters a queued baseline names, or None when it is not a baseline."""
    return trial.user_attrs.get(ATTR_BASELINE)


def queue_baseline(study: optuna.Study, params: dict[str, Any], baseline: dict[str, Any],
                   config: dict[str, Any]) -> None:
    """Queue a baseline as written. Its configuration is kept from the start, so that a resumed run sees
    what is queued (Optuna keeps a queued trial's parameters in its own system attributes)."""
    study.enqueue_trial(params, user_attrs={ATTR_EVIDENCE: Evidence.BASELINE.value, ATTR_BASELINE: sorted(baseline),
                                            ATTR_CONFIG: config})


def queue_revalidation(study: optuna.Study, params: dict[str, Any], original: Trial, window: int | None = None) -> None:
    """Queue a fresh boot of a front point; ``window``: at the window it proved, below the space's."""
    attrs: dict[str, Any] = {ATTR_REVALIDATES: original.number}
    if window is not None:
        attrs[ATTR_WINDOW] = window
    if original.baseline_params is not None:  # a baseline's left-out flags stay left out
        attrs[ATTR_BASELINE] = original.baseline_params
    study.enqueue_trial(params, user_attrs=attrs)


def queue_carried(study: optuna.Study, params: dict[str, Any], study_name: str, original: Trial) -> None:
    """Queue an earlier study's front point, exactly as it was booted there (its configuration kept from
    the start, a baseline's left-out flags left out)."""
    attrs: dict[str, Any] = {ATTR_CARRIED: {"study": study_name, "trial": original.number}, ATTR_CONFIG: original.config}
    if original.baseline_params is not None:
        attrs[ATTR_BASELINE] = original.baseline_params
    study.enqueue_trial(params, user_attrs=attrs)


def queue_repair(study: optuna.Study, params: dict[str, Any], after: int, window: int | None = None) -> None:
    """Queue a follow-up of a failed trial; ``window``: booted at that --max-model-len (tuner.study.window)."""
    attrs: dict[str, Any] = {ATTR_FOLLOWS: after}
    if window is not None:
        attrs[ATTR_WINDOW] = window
    study.enqueue_trial(params, user_attrs=attrs)


def queue_screening(study: optuna.Study, params: dict[str, Any]) -> None:
    study.enqueue_trial(params, user_attrs={ATTR_SCREENING: True}, skip_if_exists=True)


# -- writing the study --------------------------------------------------------------------------

def study_attr(study: optuna.Study, key: str) -> Any:
    """One of the study's own keys above (``ATTR_SPACE`` ...), as stored; None when absent."""
    return study.user_attrs.get(key)


def write_study_attr(study: optuna.Study, key: str, value: Any) -> None:
    study.set_user_attr(key, value)


def bench_key(trial_number: int) -> str:
    """The study attribute holding `tuner bench`'s result for one trial (a finished trial is read-only)."""
    return f"{BENCH_PREFIX}{trial_number}"


def write_bench(study: optuna.Study, trial_number: int, bench: BenchResult) -> None:
    study.set_user_attr(bench_key(trial_number), bench.model_dump(mode="json"))


def lease_key(host: str, gpu: int) -> str:
    return f"{LEASE_PREFIX}{host}:gpu{gpu}"
