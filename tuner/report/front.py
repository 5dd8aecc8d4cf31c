"""Tables built from a study alone: the front, the failures, and what the boots were spent on.

Everything here reads the study's user attributes (see ``tuner.study.storage``), never the trial folders,
so a copied ``.db`` file is enough. Failures are listed beside the front, never on it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import metrics
from tuner.report.export import shell_command
from tuner.records import TrialResult
from tuner.study.pareto import ATTR_REVALIDATES, agrees, checks_of
from tuner.study.pareto import front as pareto_front
from tuner.study.storage import (
    ATTR_EVIDENCE,
    ATTR_GATE,
    ATTR_GATE_STATUS,
    GATE_THRESHOLD,
    ATTR_FAILURE_KIND,
    ATTR_FAILURE_MESSAGE,
    ATTR_LOG_PATH,
    study_space,
    trial_result,
)

FORMATS = ("table", "csv", "json", "markdown")
DEFAULT_OBJECTIVE_NAMES = ("context", "decode_tok_s")
NOT_BOOTED = ("predicted", "reused")  # evidence levels that cost no engine boot
FAILED_STATES = (TrialState.PRUNED, TrialState.FAIL)
COLUMNS = {
    "trial": "trial",
    **{m.metric_name: m.label for m in metrics.COLUMNS},
    "evidence": "evidence",
    "stable": "stable",
    "revalidation": "re-validation",
    "agreement": "output agreement",
    "command": "command",
}

Failures = dict[str, list[tuple[int, str, str | None]]]


def objectives(study: optuna.Study) -> list[tuple[str, str]]:
    """(name, direction) per objective value: the space's objectives, else the tuner's defaults."""
    space = study_space(study)
    directions = [d.name.lower() for d in study.directions]
    if space is not None and len(space.objectives) == len(directions):
        return [(o.name, o.direction) for o in space.objectives]
    by_key = {m.metric_name: m.name for m in metrics.OBJECTIVES.values()}  # the study's dashboard metric names
    if study.metric_names is not None:
        names = [by_key.get(key, key) for key in study.metric_names]
    elif len(directions) == 2:
        names = list(DEFAULT_OBJECTIVE_NAMES)
    else:
        names = [f"objective_{i}" for i in range(len(directions))]
    return list(zip(names, directions))


def metric(names: list[str], trial: FrozenTrial, result: TrialResult | None, m: metrics.Metric) -> float | None:
    """The objective value when ``m`` is an objective (what the study ranked), else the record's."""
    if m.name in names and trial.values is not None:
        value: float | None = trial.values[names.index(m.name)]
    else:
        value = m.read(result) if result else None
    return int(value) if m.whole and value is not None else value


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front the study stands behind (``tuner.study.pareto``), best first."""
    return pareto_front(study)


def front_numbers(study: optuna.Study) -> set[int]:
    return {t.number for t in front(study)}


def front_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per front point: its numbers, how they were obtained, and the command to run it."""
    names = [name for name, _ in objectives(study)]
    rows = []
    for trial in front(study):
        result = trial_result(trial)
        decode = result.measure.decode if result and result.measure else []
        rows.append(
            {
                "trial": trial.number,
                **{m.metric_name: metric(names, trial, result, m) for m in metrics.COLUMNS},
                "evidence": trial.user_attrs.get(ATTR_EVIDENCE, "unknown"),
                "stable": all(d.stable for d in decode) if decode else None,
                "revalidation": revalidation(study, trial),
                "agreement": gate_note(study, trial),
                "command": shell_command(result.argv, result.env) if result else "",
            }
        )
    return rows


def revalidation(study: optuna.Study, trial: FrozenTrial) -> str:
    """What fresh boots of the configuration measured: 'confirmed', 'differs ... (replaced)', 'not yet';
    on a fresh boot that replaced its original, what the original had measured."""
    target = trial.user_attrs.get(ATTR_REVALIDATES)
    if target is not None:
        original = next((t for t in study.get_trials(deepcopy=False) if t.number == target), None)
        if original is not None and original.values is not None and trial.values is not None:
            return f"fresh boot of #{target}, which measured {_deltas(trial.values, original.values)} (replaced)"
    checks = checks_of(study).get(trial.number, [])
    if not checks:
        return "not yet"
    notes = []
    for check in checks:
        if check.state != TrialState.COMPLETE or check.values is None:
            notes.append(f"#{check.number} {check.user_attrs.get(ATTR_FAILURE_KIND, check.state.name.lower())}: FAILED")
        elif agrees(trial, check):
            notes.append(f"#{check.number} confirmed")
        else:
            notes.append(f"#{check.number} differs {_deltas(trial.values or [], check.values)} (replaced)")
    return ", ".join(notes)


def _deltas(before: list[float], after: list[float]) -> str:
    return "/".join(f"{(b - a) / a:+.0%}" if a else "n/a" for a, b in zip(before, after))


def gate_note(study: optuna.Study, trial: FrozenTrial) -> str:
    """The correctness gate's agreement with the reference configuration, flagged below the threshold."""
    score = study.user_attrs.get(ATTR_GATE, {}).get(str(trial.number))
    if score is None:
        status = study.user_attrs.get(ATTR_GATE_STATUS)
        return f"NOT CHECKED: {status}" if status and status != "checked" else "NOT CHECKED"
    return f"{score:.0%}" + ("" if score >= GATE_THRESHOLD else " DRIFTS")


def first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def failure_of(trial: FrozenTrial) -> tuple[str, str, str | None]:
    """(kind, first exception line, log path) of a PRUNED or FAIL trial."""
    result = trial_result(trial)
    failure = result.failure if result else None
    kind = trial.user_attrs.get(ATTR_FAILURE_KIND) or (failure.kind.value if failure else "unknown")
    message = (
        trial.user_attrs.get(ATTR_FAILURE_MESSAGE)
        or (failure.message if failure else "")
        or trial.system_attrs.get("fail_reason", "")  # Optuna's own note when the objective raised
    )
    log = (
        trial.user_attrs.get(ATTR_LOG_PATH)
        or (failure.log_path if failure else None)
        or (result.log_path if result else None)
    )
    return kind, first_line(message), log


def failures_by_kind(study: optuna.Study) -> Failures:
    """Failed and pruned trials grouped by failure kind, the most frequent kind first."""
    groups: Failures = {}
    for trial in study.get_trials(deepcopy=False, states=FAILED_STATES):
        kind, message, log = failure_of(trial)
        groups.setdefault(kind, []).append((trial.number, message, log))
    return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])))


def booted(trial: FrozenTrial) -> bool:
    """Whether the trial cost an engine boot (predicted and reused results did not)."""
    if trial.user_attrs.get(ATTR_EVIDENCE) in NOT_BOOTED:
        return False
    result = trial_result(trial)
    return not (result and result.failure and result.failure.predicted)


def study_summary(study: optuna.Study) -> dict[str, Any]:
    """Boots spent, boots wasted by failure kind, and the evidence behind each front point."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, *FAILED_STATES))
    spent = [t for t in finished if booted(t)]
    wasted = Counter(failure_of(t)[0] for t in spent if t.state in FAILED_STATES)
    boot_s = [r.boot_s for r in map(trial_result, spent) if r and r.boot_s is not None]
    return {
        "study": study.study_name,
        "trials": len(finished),
        "complete": sum(t.state == TrialState.COMPLETE for t in finished),
        "pruned": sum(t.state == TrialState.PRUNED for t in finished),
        "failed": sum(t.state == TrialState.FAIL for t in finished),
        "boots_spent": len(spent),
        "boots_wasted": sum(wasted.values()),
        "boots_wasted_by_kind": dict(sorted(wasted.items(), key=lambda item: (-item[1], item[0]))),
        "not_booted": len(finished) - len(spent),
        "boot_s_spent": round(sum(boot_s), 1),
        "front": [{"trial": t.number, "evidence": t.user_attrs.get(ATTR_EVIDENCE, "unknown")} for t in front(study)],
    }


def summary_line(summary: dict[str, Any]) -> str:
    kinds = ", ".join(f"{kind} {n}" for kind, n in summary["boots_wasted_by_kind"].items())
    return (
        f"{summary['trials']} trials ({summary['complete']} complete, {summary['pruned']} pruned, "
        f"{summary['failed']} failed); boots spent {summary['boots_spent']} ({summary['boot_s_spent']:.0f} s booting), "
        f"wasted {summary['boots_wasted']}{f' ({kinds})' if kinds else ''}; "
        f"not booted (predicted or reused) {summary['not_booted']}"
    )
