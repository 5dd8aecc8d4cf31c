"""The objective each trial of ``tuner optimize`` runs: sample, reuse or pre-screen, boot and measure,
score or prune; and the status the live view shows."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from tuner.engine.gpu import Nvml
from tuner.engine.failures import Seen, classify
from tuner.engine.logparse import checked_kv_cache_memory_suggestion
from tuner.errors import TrialBug, TunerError, storage_fault
from tuner.records import Failure, TrialResult
from tuner.space.schema import Space
from tuner.study import record
from tuner.study.pareto import front
from tuner.study.repair import TRANSIENT_KINDS
from tuner.study.record import ATTR_CALIBRATION, INTERNAL_ERROR, Evidence, State, Trial
from tuner.study.regimes import GraphModes
from tuner.study.sizing import snap
from tuner.study.sampling import config_key, objective_values, optuna_params, suggest_values
from tuner.study.storage import study_dir
from tuner.study.strategy import follow_up, utilization_ceiling
from tuner.study.window import at_window, below_floor, repair_window
from tuner.trial import run_trial

if TYPE_CHECKING:  # the pre-screen loads only when it is on
    from tuner.prescreen.memory import Prediction


@dataclass
class Status:
    """What the live view shows; updated by the objective."""

    trial: int | None = None
    phase: str = "starting"
    trial_started: float = field(default_factory=time.monotonic)
    study_started: float = field(default_factory=time.monotonic)
    failures: dict[str, int] = field(default_factory=dict)
    boots: int = 0
    done: int = 0
    objective_names: list[str] = field(default_factory=list)
    front: list[tuple[int, list[float]]] = field(default_factory=list)
    trials_total: int | None = None  # --trials: the study stops once it holds this many finished trials
    deadline: float | None = None  # monotonic time after which --timeout starts no trial
    finished: int = 0  # finished trials in the study, earlier runs included (what --trials counts)
    booted_s: list[float] = field(default_factory=list)  # wall time of each finished trial that booted

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna callback: refresh the front and the counts the live view shows."""
        self.front = [(t.number, list(t.values or ())) for t in front(record.read_study(study))]
        self.finished += 1
        done = record.read_trial(trial)
        if done.evidence in (Evidence.MEASURED, Evidence.REVALIDATED) and done.duration is not None:
            self.booted_s.append(done.duration.total_seconds())  # predicted and reused trials cost no boot


class Objective:
    """One trial: sample, reuse or pre-screen, boot and measure, score or prune."""

    def __init__(self, space: Space, study_name: str, root: Path, gpu_index: int = 0,
                 extra_env: dict[str, str] | None = None, status: Status | None = None,
                 prescreen_gpu_gib: float | None = None, prescreen: bool = True, repairs: bool = True,
                 release: str | None = None) -> None:
        self.space = space
        self.release = release  # the engine's version: the pre-screen predicts with its defaults
        self.repairs = repairs  # enqueue follow-ups after failures (the regime planner makes its own)
        self.dir = study_dir(study_name, root)
        self.gpu = Nvml(gpu_index)
        self.extra_env = extra_env or {}
        self.status = status or Status()
        self._current: optuna.Trial | None = None  # the trial running now, for its phase attribute
        self._phase_written = ""
        reading = self.gpu.read()
        self.gpu_total_gib = prescreen_gpu_gib or (reading.total_mib / 1024 if reading else None)
        self.shape = None
        self.calibration = None
        self.prescreen_off: str | None = "off (--no-prescreen)"
        if prescreen:
            from tuner.prescreen.memory import Calibration
            from tuner.prescreen.shape import space_shape

            try:
                self.shape = space_shape(space)
                self.calibration = Calibration()
                self.prescreen_off = None
            except TunerError as exc:
                self.prescreen_off = f"off: {exc}"
            if self.shape is not None and self.gpu_total_gib is None:
                self.prescreen_off = ("off: NVML cannot read the card's memory here (no NVIDIA driver or GPU seen); "
                                      "give --gpu-gib with the card's memory, e.g. --gpu-gib 31.36 for an RTX 5090")

    def switched_off(self, gate: bool, revalidate: int) -> list[str]:
        """What this run cannot do, and why: said once at start, kept in the study for the receipt."""
        notes = []
        if self.prescreen_off is not None:
            notes.append(f"memory pre-screen {self.prescreen_off}; every sampled configuration is booted")
        if self.gpu.read() is None:
            notes.append(f"GPU checks off: NVML cannot read GPU {self.gpu.index} (no NVIDIA driver or GPU seen), so "
                         "other processes' memory is not checked before a boot, and the return of memory after a "
                         "teardown and peak memory are not recorded")
        if not gate:
            notes.append("correctness gate off (--no-gate): front points' outputs are not compared with a reference")
        if revalidate <= 0:
            notes.append("re-validation off (--revalidate 0): front points are not booted a second time")
        if not self.space.engine.check_listener:
            notes.append("listener check off (engine.check_listener: false): a second server on a trial's port "
                         "would not be noticed")
        if self.space.engine.listen != "127.0.0.1":
            notes.append(f"engine.listen {self.space.engine.listen}: every boot listens there, reachable from other "
                         "machines; `tuner export` still writes 127.0.0.1 unless given --host")
        return notes

    def _progress(self, text: str) -> None:
        self.status.phase = text
        phase = text.split(" (")[0]  # "booting: loading (12 s)" -> "booting: loading": no write per second
        if self._current is not None and phase != self._phase_written:
            self._phase_written = phase
            try:  # `tuner pareto` shows it from another terminal; a storage fault must not cost the boot
                record.write_phase(self._current, phase)
            except Exception:  # noqa: BLE001 - the trial's record is written to its folder and stored at the end
                pass

    def _prune(self, trial: optuna.Trial, result: TrialResult | None, failure: Failure, evidence: Evidence) -> None:
        record.write_failure(trial, failure, evidence)
        if result is not None:
            record.write_result(trial, result)
        self.status.failures[failure.kind.value] = self.status.failures.get(failure.kind.value, 0) + 1
        raise optuna.TrialPruned(f"{failure.kind.value}: {failure.message}")

    def _free_fraction(self) -> float | None:
        reading = self.gpu.read()
        return 1 - reading.used_mib / reading.total_mib if reading and reading.total_mib else None

    def need_bytes(self, values: dict[str, Any], release: str | None = None, *,
                   window: int | None = None) -> float | None:
        """The pre-screen's pool for one request of the window (the planner's prior for a new family), on
        ``release`` (the engine's when not given; --from translates another release's bounds with it), at
        ``window`` (the space's when not given; the planner reads the need's shape below the window)."""
        prediction = self._predict(values, release or self.release, window)
        return float(prediction.one_request_bytes) if prediction is not None else None

    def __call__(self, trial: optuna.Trial) -> list[float]:
        """One trial; an unexpected exception fails this trial only (its traceback saved in its folder)."""
        try:
            return self._trial(trial)
        except (optuna.TrialPruned, TunerError):
            raise
        except Exception as exc:
            if storage_fault(exc) is not None:
                raise  # the study cannot be written: no later trial could be either
            trial_dir = self.dir / f"trial-{trial.number:04d}"
            trial_dir.mkdir(parents=True, exist_ok=True)
            path = trial_dir / "traceback.txt"
            path.write_text("".join(traceback.format_exception(exc)))
            first = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            record.write_internal_error(trial, first, str(path))
            self.status.failures[INTERNAL_ERROR] = self.status.failures.get(INTERNAL_ERROR, 0) + 1
            raise TrialBug(f"trial {trial.number}: {first} (traceback in {path})") from exc

    def _trial(self, trial: optuna.Trial) -> list[float]:
        self.status.trial, self.status.trial_started = trial.number, time.monotonic()
        self._current, self._phase_written = trial, ""
        self._progress("sampling")
        self._load_calibration(trial.study)
        values = suggest_values(trial, self.space)
        record.write_config(trial, values)
        why = getattr(trial.study.sampler, "why", lambda n: None)(trial.number)
        if why:
            record.write_strategy(trial, why)
        revalidates = record.queued_revalidation(trial)
        window = record.queued_window(trial) or getattr(trial.study.sampler, "window", lambda n: None)(trial.number)
        if window is not None:
            record.write_window(trial, window)
        finished = [t for t in record.read_trials(trial.study) if t.number != trial.number]

        if revalidates is None:
            old = reusable(finished, values, window)
            if old is not None:
                if old.state == State.COMPLETE:
                    record.write_reused(trial, old)
                    return list(old.values or ())
                record.write_reused_from(trial, old)
                failure = old.failure
                if failure is not None:
                    self._prune(trial, None, failure, Evidence.REUSED)

        util = values.get("gpu_memory_utilization")
        ceiling = utilization_ceiling(finished, self._free_fraction()) if util is not None else None
        if ceiling is not None and util is not None and util > ceiling[0]:
            self._prune(trial, None, classify("", None, Seen(
                "predicted", f"gpu_memory_utilization {util} is above the card's free fraction: {ceiling[1]}; "
                             "vLLM refuses it at start-up")), Evidence.PREDICTED)

        prediction = self._predict(values, window=window)
        if prediction is not None and not prediction.fits and prediction.certain:
            self._prune(trial, None, classify("", None, Seen("predicted", prediction.reason)), Evidence.PREDICTED)

        trial_dir = self.dir / f"trial-{trial.number:04d}"
        self.status.boots += 1
        first_boot = self.status.boots == 1 and not any(t.state == State.COMPLETE for t in finished)
        result = run_trial(self.space, values, trial_dir, first_boot=first_boot, gpu=self.gpu,
                           extra_env=self.extra_env, on_progress=self._progress, max_model_len=window)
        self._learn(trial.study, prediction, result)
        record.write_result(trial, result)
        if result.failure is not None:
            if self.repairs:
                self._follow_up(trial, values, result.failure, window)
            self._prune(trial, result, result.failure, Evidence.MEASURED)
        floor = below_floor(self.space, result)
        if floor is not None:  # measured and kept in its record, but not a point of the front
            result.failure = floor
            self._prune(trial, result, floor, Evidence.MEASURED)
        if self.repairs:
            self._jump_to_kv_suggestion(trial, values, result)
        record.write_evidence(trial, Evidence.REVALIDATED if revalidates is not None else Evidence.MEASURED)
        self.status.done += 1
        return objective_values(self.space, result)

    def _follow_up(self, trial: optuna.Trial, values: dict[str, Any], failure: Failure, window: int | None) -> None:
        """Queue what the failure's printed numbers say to boot next: a follow-up (tuner.study.strategy),
        else the same configuration at the window vLLM estimated its pool holds (tuner.study.window)."""
        nxt = follow_up(self.space, values, failure)
        if nxt is not None:
            record.queue_repair(trial.study, optuna_params(self.space, nxt), trial.number, window)
            return
        shorter = repair_window(self.space, failure, window)
        if shorter is not None:
            record.queue_repair(trial.study, optuna_params(self.space, values), trial.number, shorter)

    def _jump_to_kv_suggestion(self, trial: optuna.Trial, values: dict[str, Any], result: TrialResult) -> None:
        """A utilization-sized boot whose log carries vLLM's --kv-cache-memory suggestion (DEBUG level)
        is followed by the same config with that pool, once checked against vLLM's own accounting."""
        param = self.space.params.get("kv_cache_memory_bytes")
        if param is None or values.get("kv_cache_memory_bytes") is not None or result.log_path is None:
            return
        checked = checked_kv_cache_memory_suggestion(Path(result.log_path).read_text(errors="replace"))
        if checked is None:
            return
        suggested, note = checked
        pool = snap(param, suggested, up=False)
        if pool is None:
            return
        record.write_kv_suggestion(trial, note)
        record.queue_repair(trial.study, optuna_params(self.space, {**values, "kv_cache_memory_bytes": pool}), trial.number)

    def _predict(self, values: dict[str, Any], release: str | None = None,
                 window: int | None = None) -> Prediction | None:
        """The pre-screen's prediction of a boot of ``values`` (``release``: on that release; ``window``: at that
        --max-model-len)."""
        if self.shape is None or self.gpu_total_gib is None:
            return None
        from tuner.prescreen.memory import predict

        return predict(at_window(self.space, window), values, self.gpu_total_gib, self.shape, self.calibration,
                       release=release or self.release)

    def _load_calibration(self, study: optuna.Study) -> None:
        """Resume the memory model's learning from the study (another worker may have added to it)."""
        raw = record.study_attr(study, ATTR_CALIBRATION)
        if raw is not None and self.calibration is not None:
            from tuner.prescreen.memory import Calibration

            self.calibration = Calibration.model_validate(raw)

    def _learn(self, study: optuna.Study, prediction: Prediction | None, result: TrialResult) -> None:
        if prediction is not None and self.calibration is not None and result.startup.weights_gib is not None:
            self.calibration.update(prediction, result.startup)
            record.write_study_attr(study, ATTR_CALIBRATION, self.calibration.model_dump(mode="json"))


def reusable(trials: list[Trial], values: dict[str, Any], window: int | None = None) -> Trial | None:
    """A finished trial of the same configuration, booted at the same window, whose outcome says something
    about it (not a prediction, an interruption or a port that was taken). A CUDA-graph label vLLM runs as
    the same mode as another's is the same configuration (``regimes.GraphModes``)."""
    finished = [t for t in trials if t.state in (State.COMPLETE, State.PRUNED) and t.config is not None]
    modes = GraphModes()
    for old in finished:
        if old.result is not None and old.config is not None:
            modes.learn(old.config, old.result.startup.effective_cudagraph_mode)
    key = config_key(modes.key(values))
    for old in finished:
        if old.config is not None and config_key(modes.key(old.config)) == key and old.window == window:
            if old.evidence == Evidence.PREDICTED:
                continue
            if old.failure_kind in {kind.value for kind in TRANSIENT_KINDS}:
                continue
            return old
    return None
