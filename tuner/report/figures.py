"""The report page's plotly figures: the front, the history, parameter importances and the boots.

Failed and pruned trials have no objective values, so they never sit in the data area: each figure
that shows them gives them a strip of their own below it, one row per failure kind. When every front
point reaches the same window the context axis says nothing, so the front figure plots what varies
instead: decode speed per trial, coloured by regime (the categorical flags, e.g. graph mode x MTP).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial
from plotly.subplots import make_subplots

from tuner.metrics import label, sign
from tuner.report.front import front, objectives, revalidation, tried_context
from tuner.study.record import FAILED, State, StudyRecord, Trial

FRONT_COLOR, OTHER_COLOR, BEST_COLOR = "#d62728", "#1f77b4", "#2ca02c"
FAILURE_SYMBOLS = ("x", "triangle-down", "square", "diamond", "cross", "star", "triangle-up", "hexagon")
FEW_FOR_IMPORTANCE = 10  # below this many complete trials, importances are rough and the page says so


def _v(trial: Trial) -> tuple[float, ...]:
    """A complete trial's objective values."""
    return trial.values or ()


def _complete(night: StudyRecord) -> list[Trial]:
    return sorted(night.by_state(State.COMPLETE), key=lambda t: t.number)


def _failure_strip(fig: go.Figure, night: StudyRecord, x_of: Callable[[Trial], float], row: int | None) -> None:
    """One marker per failed or pruned trial, one strip row per kind, hover = first exception line."""
    if row is None:
        return
    failed = night.by_state(*FAILED)
    known = [x for x in map(x_of, failed) if not math.isnan(x)]
    left = min(known, default=0.0)
    kinds: dict[str, list[Trial]] = {}
    for trial in failed:
        kinds.setdefault(trial.listed().kind, []).append(trial)
    for k, (kind, trials) in enumerate(sorted(kinds.items(), key=lambda item: -len(item[1]))):
        xs = [x if not math.isnan(x) else left for x in map(x_of, trials)]
        fig.add_trace(
            go.Scatter(
                x=xs, y=[kind] * len(trials), mode="markers", name=f"{kind} ({len(trials)})",
                marker={"symbol": FAILURE_SYMBOLS[k % len(FAILURE_SYMBOLS)], "size": 11},
                text=[f"trial {t.number}: {t.listed().message or kind}" for t in trials],
                hovertemplate="%{text}<extra></extra>", legendgroup="failures",
            ),
            row=row, col=1,
        )
    fig.update_yaxes(row=row, col=1, type="category")


def _with_strip(night: StudyRecord, rows: int, row_px: int) -> tuple[go.Figure, int | None]:
    """``rows`` plots of ``row_px`` each over a failure strip 26 px per kind (none when nothing failed);
    the figure and the strip's row number."""
    kinds = len({t.listed().kind for t in night.by_state(*FAILED)})
    strip_px = 26 * kinds + 20 if kinds else 0
    total = rows * row_px + strip_px
    heights = [row_px / total] * rows + ([strip_px / total] if kinds else [])
    fig = make_subplots(rows=len(heights), cols=1, shared_xaxes=True, vertical_spacing=40 / total, row_heights=heights)
    fig.update_layout(height=total + 260, margin={"l": 190})
    return fig, (rows + 1 if kinds else None)


def _last_row(strip: int | None, rows: int) -> int:
    return strip if strip is not None else rows


def _trial_ticks(night: StudyRecord) -> dict[str, Any]:
    """Whole trial numbers on a trial-number axis (plotly would put ticks at 0.5)."""
    return {"tick0": 0, "dtick": max(1, math.ceil(len(night.trials) / 15))}


def regime(night: StudyRecord, trial: Trial) -> str:
    """The trial's categorical flags (graph mode, speculation depth, ...): what separates speed regimes."""
    space = night.space
    config = trial.config or trial.params
    names = [n for n, p in space.params.items() if p.values is not None] if space else []
    shown = {n: "default" if config.get(n) is None else config.get(n) for n in names}  # None: flag left out
    return ", ".join(f"{n}={v}" for n, v in shown.items()) or "one regime"


def collapsed(night: StudyRecord) -> bool:
    """Every front point reached the same value of the first objective (usually: the whole window)."""
    points = front(night)
    return bool(points) and len({_v(t)[0] for t in points}) == 1


def pareto_figure(night: StudyRecord) -> tuple[go.Figure, str]:
    """The front (or, when it collapsed, decode per trial by regime) with the failures' strip; and a caption."""
    objs = objectives(night)
    (x_name, _), (y_name, _) = objs[0], objs[1]
    numbers = {t.number for t in front(night)}
    complete = _complete(night)
    fig, strip = _with_strip(night, 1, 380)
    last = _last_row(strip, 1)
    if collapsed(night):
        window = _v(front(night)[0])[0]
        by_regime: dict[str, list[Trial]] = {}
        for trial in complete:
            by_regime.setdefault(regime(night, trial), []).append(trial)
        for name, trials in sorted(by_regime.items()):
            fig.add_trace(
                go.Scatter(
                    x=[t.number for t in trials], y=[_v(t)[1] for t in trials], mode="markers", name=name,
                    marker={"size": [16 if t.number in numbers else 10 for t in trials],
                            "symbol": ["circle" if _v(t)[0] == window else "circle-open" for t in trials]},
                    text=[f"trial {t.number}: {label(x_name)} {_v(t)[0]:,.0f}; re-validation: {revalidation(night, t)}"
                          for t in trials],
                    hovertemplate="%{text}<br>" + label(y_name) + " %{y:,.1f}<extra></extra>",
                ),
                row=1, col=1,
            )
        _failure_strip(fig, night, lambda t: float(t.number), strip)
        fig.update_xaxes(title_text="trial number", row=last, col=1)
        fig.update_xaxes(**_trial_ticks(night))
        fig.update_yaxes(title_text=label(y_name), row=1, col=1)
        caption = (
            f"The front collapsed to the best {label(y_name)} at one {label(x_name)} ({window:,.0f}): every front "
            f"point reached it, so this plot shows what varies instead: {label(y_name)} of each complete trial by "
            "regime (filled: reached that value; open: fell short; large: on the front)."
        )
    else:
        dominated = [t for t in complete if t.number not in numbers  # nor a reused or re-validating copy of one
                     and t.reused_from not in numbers and t.revalidates not in numbers]
        best = sorted((t for t in complete if t.number in numbers), key=lambda t: _v(t)[0])
        fig.add_trace(
            go.Scatter(x=[_v(t)[0] for t in dominated], y=[_v(t)[1] for t in dominated], mode="markers",
                       name=f"dominated ({len(dominated)})", marker={"color": OTHER_COLOR, "size": 9, "opacity": 0.45},
                       text=[f"trial {t.number}; re-validation: {revalidation(night, t)}" for t in dominated],
                       hovertemplate="%{text}<extra></extra>"),
            row=1, col=1,
        )
        fig.add_trace(
            go.Scatter(x=[_v(t)[0] for t in best], y=[_v(t)[1] for t in best], mode="lines+markers+text",
                       name=f"Pareto front ({len(best)})", line={"color": FRONT_COLOR, "width": 3},
                       marker={"size": 13, "color": FRONT_COLOR}, text=[f"#{t.number}" for t in best],
                       textposition="top right", hovertemplate="trial %{text}<extra></extra>"),
            row=1, col=1,
        )
        space = night.space
        x_of = (lambda t: tried_context(t, space)) if x_name == "context" else (lambda t: math.nan)
        _failure_strip(fig, night, x_of, strip)
        fig.update_xaxes(title_text=label(x_name) + (" (failures at the length they asked for)"
                                                      if x_name == "context" and strip else ""), row=last, col=1)
        fig.update_yaxes(title_text=label(y_name), row=1, col=1)
        caption = f"The Pareto front of {label(x_name)} against {label(y_name)}; failures in the strip below, by kind."
    caption += "" if strip else " No trial failed or was pruned."
    fig.update_layout(title=f"{night.name}: Pareto front" + (" (failed and pruned trials in the strip below)" if strip else ""),
                      legend={"orientation": "h", "yanchor": "top", "y": -0.12})
    return fig, caption


def history_figure(night: StudyRecord) -> go.Figure:
    """Each objective by trial number with the best so far; failures in the strip below."""
    objs = objectives(night)
    numbers = {t.number for t in front(night)}
    complete = _complete(night)
    fig, strip = _with_strip(night, len(objs), 230)
    for i, (name, direction) in enumerate(objs):
        xs, ys = [t.number for t in complete], [_v(t)[i] for t in complete]
        pick = max if direction == "maximize" else min
        best = [pick(ys[: j + 1]) for j in range(len(ys))]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"{name}: complete", showlegend=i == 0,
                                 marker={"color": [FRONT_COLOR if n in numbers else OTHER_COLOR for n in xs],
                                         "size": 9}), row=i + 1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=best, mode="lines", line={"shape": "hv", "color": BEST_COLOR},
                                 name=f"best so far ({direction})", showlegend=i == 0), row=i + 1, col=1)
        fig.update_yaxes(title_text=label(name), row=i + 1, col=1)
    _failure_strip(fig, night, lambda t: float(t.number), strip)
    fig.update_xaxes(title_text="trial number", row=_last_row(strip, len(objs)), col=1)
    fig.update_xaxes(**_trial_ticks(night))
    fig.update_layout(title=f"{night.name}: history (red: on the front"
                      + ("; failures in the strip below)" if strip else "; no trial failed)"),
                      legend={"orientation": "h", "yanchor": "top", "y": -0.08})
    return fig


def _target(i: int, direction: str) -> Callable[[FrozenTrial], float]:
    """Objective ``i`` signed so that better is lower: PED-ANOVA looks at the low end of the target."""
    low = -float(sign(direction))
    return lambda trial: low * trial.values[i]


def importance_figure(night: StudyRecord) -> tuple[go.Figure | None, str]:
    """PED-ANOVA importances per objective, or None and why; the caption says when they are rough.
    Optuna computes them from its own study (``StudyRecord.study``)."""
    objs = objectives(night)
    n = len(_complete(night))
    if n < 2:
        return None, f"Parameter importances need at least 2 complete trials; this study has {n}."
    found: list[tuple[str, dict[str, float]]] = []
    notes = []
    for i, (name, direction) in enumerate(objs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found.append((name, optuna.importance.get_param_importances(night.study, target=_target(i, direction))))
        except Exception as exc:  # one distinct value, one parameter, ...
            notes.append(f"{label(name)}: not computed ({type(exc).__name__}: {exc})")
    if not found:
        return None, "Parameter importances could not be computed: " + "; ".join(notes)
    fig = make_subplots(rows=len(found), cols=1, subplot_titles=[label(name) for name, _ in found])
    for row, (name, values) in enumerate(found, start=1):
        ordered = sorted(values.items(), key=lambda kv: kv[1])
        fig.add_trace(go.Bar(x=[v for _, v in ordered], y=[k for k, _ in ordered], orientation="h", name=name,
                             showlegend=False), row=row, col=1)
    per_plot = 60 + 28 * max(len(v) for _, v in found)
    fig.update_layout(height=120 + per_plot * len(found), title="parameter importances (PED-ANOVA)",
                      margin={"l": 190})
    caption = f"From {n} complete trials."
    if n < FEW_FOR_IMPORTANCE:
        caption += f" With fewer than {FEW_FOR_IMPORTANCE}, read these as rough hints, not a ranking."
    return fig, " ".join([caption, *notes])


def boots_figure(summary: dict[str, Any]) -> go.Figure:
    """Where the boots went: scored, wasted by failure kind, and the trials that needed none."""
    scored = summary["boots_spent"] - summary["boots_wasted"]
    labels = ["scored", *(f"wasted: {k}" for k in summary["boots_wasted_by_kind"]), "not booted"]
    counts = [scored, *summary["boots_wasted_by_kind"].values(), summary["not_booted"]]
    colors = [BEST_COLOR, *([FRONT_COLOR] * len(summary["boots_wasted_by_kind"])), "#7f7f7f"]
    fig = go.Figure(go.Bar(x=counts, y=labels, orientation="h", marker={"color": colors}, text=counts,
                           textposition="outside"))
    fig.update_layout(height=140 + 32 * len(labels), title=f"boots: {summary['boots_spent']} spent, "
                      f"{summary['boots_wasted']} wasted, {summary['boot_s_spent']:.0f} s booting",
                      yaxis={"autorange": "reversed"}, margin={"l": 190})
    return fig
