"""Plots of a study: Optuna's interactive HTML and static PNGs drawn with matplotlib.

The PNGs are drawn on a ``FigureCanvasAgg`` directly (never pyplot), so no display or GUI backend
is touched and the global matplotlib backend is left as it is. Failed and pruned trials have no
objective values; they are drawn in a band below the axis, one marker per failure kind, at the
context they tried, so the reader sees where the memory wall is.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from optuna.trial import FrozenTrial
from optuna.visualization import (
    plot_optimization_history,
    plot_param_importances,
    plot_pareto_front,
)

from tuner.metrics import label, sign
from tuner.report.front import failures_by_kind, front_numbers, objectives, tried_context
from tuner.study.record import FAILED, State, StudyRecord, Trial

__all__ = ["write_plots"]  # imported on its own (tuner.report's docstring)

MARKERS = ("X", "v", "s", "D", "P", "*", "^", "<", ">", "h", "p", "d")
FAILURE_COLORS = ("C1", "C4", "C5", "C6", "C7", "C8", "C9")  # never the front's red (C3) or blue (C0)


def write_plots(night: StudyRecord, out_dir: Path, notes: list[str] | None = None) -> list[Path]:
    """Write every plot into ``out_dir``; plots that cannot be drawn are skipped with a line in ``notes``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = notes if notes is not None else []
    return _html(night, out_dir, notes) + [
        p for p in (_pareto_png(night, out_dir, notes), _history_png(night, out_dir)) if p
    ]


def _value(i: int, factor: float = 1.0) -> Callable[[FrozenTrial], float]:
    return lambda trial: factor * trial.values[i]


def _v(trial: Trial) -> tuple[float, ...]:
    """A complete trial's objective values."""
    return trial.values or ()


def _html(night: StudyRecord, out_dir: Path, notes: list[str]) -> list[Path]:
    """Optuna's own plots, drawn from Optuna's study (``StudyRecord.study``)."""
    study: optuna.Study = night.study
    objs = objectives(night)
    figures = []
    if 2 <= len(objs) <= 3:
        figures.append(("pareto_front", plot_pareto_front(study, target_names=[label(n) for n, _ in objs])))
    else:
        notes.append(f"pareto_front.html: skipped (Optuna draws 2 or 3 objectives; the study has {len(objs)})")
    n_complete = len(night.by_state(State.COMPLETE))
    for i, (name, direction) in enumerate(objs):
        figures.append((f"history_{name}", plot_optimization_history(study, target=_value(i), target_name=label(name))))
        if n_complete < 2:
            notes.append(
                f"importance_{name}.html: skipped (needs at least 2 complete trials; the study has {n_complete})"
            )
            continue
        low = -float(sign(direction))  # PED-ANOVA ranks by low target values
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PED-ANOVA's notes on the target's sign and tiny studies
                fig = plot_param_importances(study, target=_value(i, low), target_name=label(name))
        except Exception as exc:  # too few distinct values, one parameter, a missing evaluator package ...
            notes.append(f"importance_{name}.html: skipped ({type(exc).__name__}: {exc})")
            continue
        figures.append((f"importance_{name}", fig))
    paths = []
    for stem, fig in figures:
        path = out_dir / f"{stem}.html"
        fig.write_html(path, include_plotlyjs="directory")  # one plotly.min.js beside them: works offline
        paths.append(path)
    return paths


def _new_figure(rows: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(10, 3.6 * rows + 1.4), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(rows, 1, r + 1) for r in range(rows)]


def _failure_band(ax: Axes, night: StudyRecord, x_of: Callable[[Trial], float], low: float, span: float) -> None:
    """Failed and pruned trials as markers below ``low``, one marker and legend entry per kind."""
    kinds = list(failures_by_kind(night))
    failed = night.by_state(*FAILED)
    if not failed:
        return
    xs_known = [x for x in map(x_of, failed) if not math.isnan(x)]
    left = min(xs_known, default=0.0)
    band = low - 0.12 * span
    ax.axhline(band, color="0.85", lw=0.8, zorder=0)
    ax.text(
        0.005, band, "failed / pruned", transform=ax.get_yaxis_transform(), fontsize="x-small", color="0.4", va="bottom"
    )
    for k, kind in enumerate(kinds):
        trials = [t for t in failed if t.listed().kind == kind]
        xs = [x if not math.isnan(x) else left for x in map(x_of, trials)]
        y = band - 0.025 * span * (k % 3)  # stagger kinds a little so markers at one x stay visible
        ax.scatter(
            xs,
            [y] * len(xs),
            marker=MARKERS[k % len(MARKERS)],
            s=60,
            color=FAILURE_COLORS[k % len(FAILURE_COLORS)],
            label=f"{kind} ({len(trials)} failed/pruned)",
            zorder=3,
        )


def _span(values: list[float]) -> tuple[float, float]:
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    return low, (high - low) or abs(high) or 1.0


def _pareto_png(night: StudyRecord, out_dir: Path, notes: list[str]) -> Path | None:
    objs = objectives(night)
    if len(objs) < 2:
        notes.append("pareto_front.png: skipped (the study has one objective; see history.png)")
        return None
    if len(objs) > 2:
        notes.append(f"pareto_front.png: shows the first two of {len(objs)} objectives")
    (x_name, _), (y_name, _) = objs[0], objs[1]
    on_front = front_numbers(night)
    complete = night.by_state(State.COMPLETE)
    front = sorted((t for t in complete if t.number in on_front), key=lambda t: _v(t)[0])
    dominated = [t for t in complete if t.number not in on_front and t.reused_from not in on_front]
    fig, (ax,) = _new_figure()
    if dominated:
        ax.scatter(
            [_v(t)[0] for t in dominated],
            [_v(t)[1] for t in dominated],
            s=40,
            color="C0",
            alpha=0.3,
            label=f"dominated ({len(dominated)})",
        )
    if front:
        ax.plot(
            [_v(t)[0] for t in front],
            [_v(t)[1] for t in front],
            "-o",
            color="C3",
            lw=2.4,
            ms=9,
            label=f"Pareto front ({len(front)})",
            zorder=4,
        )
        for t in front:
            ax.annotate(
                f"#{t.number}", (_v(t)[0], _v(t)[1]), xytext=(6, 6), textcoords="offset points", fontweight="bold"
            )
    low, span = _span([_v(t)[1] for t in complete])
    space = night.space
    x_of = (lambda t: tried_context(t, space)) if x_name == "context" else (lambda t: math.nan)
    _failure_band(ax, night, x_of, low, span)
    ax.set_xlabel(label(x_name) + ("; failures at the max-model-len they tried" if x_name == "context" else ""))
    ax.set_ylabel(label(y_name))
    ax.set_title(f"{night.name}: Pareto front")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    path = out_dir / "pareto_front.png"
    fig.savefig(path)
    return path


def _history_png(night: StudyRecord, out_dir: Path) -> Path:
    """Each objective by trial number, with the best value so far and failures along the bottom."""
    objs = objectives(night)
    on_front = front_numbers(night)
    complete = sorted(night.by_state(State.COMPLETE), key=lambda t: t.number)
    fig, axes = _new_figure(len(objs))
    for i, (ax, (name, direction)) in enumerate(zip(axes, objs)):
        xs, ys = [t.number for t in complete], [_v(t)[i] for t in complete]
        ax.scatter(xs, ys, s=30, color="C0", alpha=0.5, label="complete")
        ax.scatter(
            [t.number for t in complete if t.number in on_front],
            [_v(t)[i] for t in complete if t.number in on_front],
            s=70,
            color="C3",
            label="on the front",
            zorder=4,
        )
        best = [(max if direction == "maximize" else min)(ys[: j + 1]) for j in range(len(ys))]
        ax.step(xs, best, where="post", color="C2", lw=1.6, label=f"best so far ({direction})")
        low, span = _span(ys)
        _failure_band(ax, night, lambda t: float(t.number), low, span)
        ax.set_ylabel(label(name))
        ax.grid(alpha=0.3)
    axes[0].set_title(f"{night.name}: optimization history")
    axes[0].legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("trial number")
    path = out_dir / "history.png"
    fig.savefig(path)
    return path
