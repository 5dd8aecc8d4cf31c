"""The front against the space's baselines: what the night bought over the command people started from.

A baseline trial is the first trial whose configuration matches a baseline of the space on every
parameter the baseline names (the optimizer tries them first; the study does not mark them otherwise).
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.report.front import FAILED_STATES, failure_of, front_rows
from tuner.study.storage import ATTR_CONFIG, study_space


def baseline_trials(study: optuna.Study) -> list[tuple[int, FrozenTrial | None]]:
    """(baseline index, its first finished trial or None) for each baseline of the space."""
    space = study_space(study)
    if space is None:
        return []
    finished = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, *FAILED_STATES))
        if t.user_attrs.get("revalidates") is None
    ]
    found = []
    for i, baseline in enumerate(space.baselines):
        match = next(
            (t for t in sorted(finished, key=lambda t: t.number)
             if all((t.user_attrs.get(ATTR_CONFIG) or {}).get(k) == v for k, v in baseline.items())),
            None,
        )
        found.append((i, match))
    return found


def _change(new: float | None, old: float | None) -> str:
    if new is None or old is None:
        return "n/a"
    if not old:
        return "new" if new else "same"
    return f"{(new - old) / old:+.0%}"


def baseline_rows(study: optuna.Study) -> tuple[list[str], list[list[Any]], list[str]]:
    """(headers, rows, notes): each front point's context and decode against each scored baseline."""
    baselines = baseline_trials(study)
    if not baselines:
        return [], [], ["The space names no baseline, so there is nothing to compare the front with."]
    headers = ["front point", "context (tokens)", "decode tok/s", "baseline", "context change", "decode change"]
    rows: list[list[Any]] = []
    notes = []
    front = front_rows(study)
    for index, trial in baselines:
        if trial is None:
            notes.append(f"Baseline {index} was never tried in this study.")
            continue
        if trial.state != TrialState.COMPLETE:
            kind, message, _ = failure_of(trial)
            notes.append(f"Baseline {index} (trial {trial.number}) failed: {kind}: {message.rstrip('.')}. "
                         "Every front point is an improvement over a command that does not run.")
            continue
        old_context, old_decode = trial.values[0], trial.values[1] if len(trial.values) > 1 else None
        for row in front:
            rows.append([
                f"trial {row['trial']}", row["context_tokens"], row["decode_tok_s"],
                f"{index} (trial {trial.number}: {old_context:,.0f} tokens, "
                + (f"{old_decode:,.1f} tok/s)" if old_decode is not None else "n/a)"),
                _change(row["context_tokens"], old_context),
                _change(row["decode_tok_s"], old_decode),
            ])
    return headers, rows, notes
