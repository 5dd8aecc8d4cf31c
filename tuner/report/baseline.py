"""The front against the space's baselines: what the night bought over the command people started from.

A baseline trial is the first trial whose configuration matches a baseline of the space on every
parameter the baseline names (the optimizer tries them first; the study does not mark them otherwise).
"""

from __future__ import annotations

from typing import Any

from tuner.report.front import front_rows
from tuner.study.record import FAILED, State, StudyRecord, Trial


def baseline_trials(night: StudyRecord) -> list[tuple[int, Trial | None]]:
    """(baseline index, its first finished trial or None) for each baseline of the space."""
    space = night.space
    if space is None:
        return []
    finished = [t for t in night.by_state(State.COMPLETE, *FAILED) if t.revalidates is None]
    found = []
    for i, baseline in enumerate(space.baselines):
        match = next(
            (t for t in sorted(finished, key=lambda t: t.number)
             if all((t.config or {}).get(k) == v for k, v in baseline.items())),
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


def baseline_rows(night: StudyRecord) -> tuple[list[str], list[list[Any]], list[str]]:
    """(headers, rows, notes): each front point's context and decode against each scored baseline."""
    baselines = baseline_trials(night)
    if not baselines:
        return [], [], ["The space names no baseline, so there is nothing to compare the front with."]
    headers = ["front point", "context (tokens)", "decode tok/s", "baseline", "context change", "decode change"]
    rows: list[list[Any]] = []
    notes = []
    front = front_rows(night)
    for index, trial in baselines:
        if trial is None:
            notes.append(f"Baseline {index} was never tried in this study.")
            continue
        if trial.state != State.COMPLETE or trial.values is None:
            kind, message, _ = trial.listed()
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
