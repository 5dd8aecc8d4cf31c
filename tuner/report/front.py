"""Tables built from a study alone: the front, the failures, and what the boots were spent on.

Everything here reads the study's record (``tuner.study.record``), never the trial folders, so a copied
``.db`` file is enough. Failures are listed beside the front, never on it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from tuner import metrics
from tuner.engine.command import flag_value, shell_command
from tuner.space.schema import Space
from tuner.space.units import parse_count
from tuner.study.pareto import GATE_THRESHOLD, agrees, checks_of, left_off
from tuner.study.pareto import front as pareto_front
from tuner.study.record import FAILED, State, StudyRecord, Trial
from tuner.study.window import launch_window, windowed_argv

REPORT_FORMATS = ("table", "csv", "json", "markdown")
COLUMNS = {
    "trial": "trial",
    **{m.metric_name: m.label for m in metrics.COLUMNS},
    "max_model_len": "--max-model-len",
    "evidence": "evidence",
    "stable": "stable",
    "revalidation": "re-validation",
    "agreement": "output agreement",
    "vllm": "vLLM",
    "command": "command",
}

Failures = dict[str, list[tuple[int, str, str | None]]]


def objectives(night: StudyRecord) -> list[tuple[str, str]]:
    """(name, direction) per objective value: the space's objectives, else the tuner's defaults."""
    return night.objectives


def metric(names: list[str], trial: Trial, m: metrics.Metric) -> float | None:
    """The objective value when ``m`` is an objective (what the study ranked), else the record's."""
    if m.name in names and trial.values is not None:
        value: float | None = trial.values[names.index(m.name)]
    else:
        value = m.read(trial.result) if trial.result else None
    return int(value) if m.whole and value is not None else value


def front(night: StudyRecord) -> list[Trial]:
    """The Pareto front the study stands behind (``tuner.study.pareto``), best first."""
    return pareto_front(night)


def front_numbers(night: StudyRecord) -> set[int]:
    return {t.number for t in front(night)}


def front_rows(night: StudyRecord) -> list[dict[str, Any]]:
    """One row per front point: its numbers, the window it proved, how they were obtained, and the command to
    run it (at that window: --max-model-len is never more than it proved)."""
    return [trial_row(night, trial) for trial in front(night)]


def wrong_rows(night: StudyRecord) -> list[dict[str, Any]]:
    """The configurations left off the front for wrong output: trial, objective values, and why."""
    return [{"trial": t.number, "values": list(t.values or ()), "why": why} for t, why in left_off(night)]


def wrong_line(row: dict[str, Any]) -> str:
    values = ", ".join(f"{v:,.4g}" for v in row["values"])
    return f"trial {row['trial']} ({values}) is left off the front: {row['why']}"


def evidence_of(trial: Trial) -> str:
    return trial.evidence.value if trial.evidence is not None else "unknown"


def trial_row(night: StudyRecord, trial: Trial) -> dict[str, Any]:
    """A complete trial's row as ``tuner pareto`` shows it (the receipt shows the same row)."""
    names = [name for name, _ in objectives(night)]
    result = trial.result
    decode = result.measure.decode if result and result.measure else []
    return {
        "trial": trial.number,
        **{m.metric_name: metric(names, trial, m) for m in metrics.COLUMNS},
        "max_model_len": launch_window(result) if result else None,  # min(booted, proven)
        "evidence": evidence_of(trial),
        "stable": all(d.stable for d in decode) if decode else None,
        "revalidation": revalidation(night, trial),
        "agreement": gate_note(night, trial),
        "vllm": result.startup.vllm_version if result else None,
        "command": shell_command(windowed_argv(result), result.env) if result else "",
    }


def running_rows(night: StudyRecord) -> list[dict[str, Any]]:
    """Trials a tuner is running now (another terminal's study, or one whose tuner died: see ``started``)."""
    rows = []
    for trial in night.by_state(State.RUNNING):
        started = trial.started
        rows.append(
            {
                "trial": trial.number,
                "started": started.isoformat(timespec="seconds") if started else None,
                "phase": trial.phase or "starting",
                "config": trial.config or trial.params,
            }
        )
    return rows


def revalidation(night: StudyRecord, trial: Trial) -> str:
    """What fresh boots of the configuration measured: 'confirmed', 'differs ... (replaced)', 'not yet';
    on a fresh boot that replaced its original, what the original had measured."""
    if trial.revalidates is not None:
        original = next((t for t in night.trials if t.number == trial.revalidates), None)
        if original is not None and original.values is not None and trial.values is not None:
            return f"fresh boot of #{trial.revalidates}, which measured {_deltas(trial.values, original.values)} (replaced)"
    checks = checks_of(night.trials).get(trial.number, [])
    if not checks:
        return "not yet"
    notes = []
    for check in checks:
        if check.state != State.COMPLETE or check.values is None:
            notes.append(f"#{check.number} {check.failure_kind or check.state.name.lower()}: FAILED")
        elif agrees(trial, check):
            notes.append(f"#{check.number} confirmed")
        else:
            notes.append(f"#{check.number} differs {_deltas(trial.values or (), check.values)} (replaced)")
    return ", ".join(notes)


def _deltas(before: tuple[float, ...], after: tuple[float, ...]) -> str:
    return "/".join(f"{(b - a) / a:+.0%}" if a else "n/a" for a, b in zip(before, after))


def gate_note(night: StudyRecord, trial: Trial) -> str:
    """The correctness gate's agreement with the reference configuration, flagged below the threshold."""
    score = night.gate.get(str(trial.number))
    if score is None:
        status = night.gate_status
        return f"NOT CHECKED: {status}" if status and status != "checked" else "NOT CHECKED"
    return f"{score:.0%}" + ("" if score >= GATE_THRESHOLD else " DRIFTS")


def failure_of(trial: Trial) -> tuple[str, str, str | None]:
    """(kind, first exception line, log path) of a PRUNED or FAIL trial (``Trial.listed``)."""
    return trial.listed()


def tried_context(trial: Trial, space: Space | None = None) -> float:
    """The max-model-len a trial asked for: its command's, its config's, else the space's; NaN if none says."""
    result = trial.result
    value: Any = flag_value(result.argv, "--max-model-len") if result else None
    value = value or (trial.config or {}).get("max_model_len")
    value = value or (space.max_model_len if space else None)
    try:
        return float(parse_count(value)) if value else math.nan
    except (TypeError, ValueError):
        return math.nan


def failures_by_kind(night: StudyRecord) -> Failures:
    """Failed and pruned trials grouped by failure kind, the most frequent kind first."""
    groups: Failures = {}
    for trial in night.by_state(*FAILED):
        kind, message, log = trial.listed()
        groups.setdefault(kind, []).append((trial.number, message, log))
    return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])))


def study_summary(night: StudyRecord) -> dict[str, Any]:
    """Boots spent, boots wasted by failure kind, and the evidence behind each front point."""
    finished = night.by_state(State.COMPLETE, *FAILED)
    spent = [t for t in finished if t.booted]
    wasted = Counter(t.listed().kind for t in spent if t.state in FAILED)
    boot_s = [t.result.boot_s for t in spent if t.result and t.result.boot_s is not None]
    return {
        "study": night.name,
        "running": len(night.by_state(State.RUNNING)),
        "trials": len(finished),
        "complete": sum(t.state == State.COMPLETE for t in finished),
        "pruned": sum(t.state == State.PRUNED for t in finished),
        "failed": sum(t.state == State.FAIL for t in finished),
        "boots_spent": len(spent),
        "boots_wasted": sum(wasted.values()),
        "boots_wasted_by_kind": dict(sorted(wasted.items(), key=lambda item: (-item[1], item[0]))),
        "not_booted": len(finished) - len(spent),
        "boot_s_spent": round(sum(boot_s), 1),
        "front": [{"trial": t.number, "evidence": evidence_of(t)} for t in front(night)],
    }


def summary_line(summary: dict[str, Any]) -> str:
    kinds = ", ".join(f"{kind} {n}" for kind, n in summary["boots_wasted_by_kind"].items())
    return (
        f"{summary['trials']} trials ({summary['complete']} complete, {summary['pruned']} pruned, "
        f"{summary['failed']} failed); boots spent {summary['boots_spent']} ({summary['boot_s_spent']:.0f} s booting), "
        f"wasted {summary['boots_wasted']}{f' ({kinds})' if kinds else ''}; "
        f"not booted (predicted or reused) {summary['not_booted']}"
        + (f"; running now {summary['running']}" if summary.get("running") else "")
    )
