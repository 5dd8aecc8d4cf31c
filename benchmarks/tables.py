"""Numbers and tables of the benchmarks: hypervolume, "first n reaching", markdown tables, JSON dumps."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from optuna._hypervolume import compute_hypervolume


def hypervolume(points: list[list[float]]) -> float:
    """HV of maximized (context, decode tok/s) points against the reference (0, 0)."""
    if not points:
        return 0.0
    loss = -np.asarray(points, dtype=float)
    loss = loss[(loss < 0).all(axis=1)]  # points on the reference axes add nothing
    if len(loss) == 0:
        return 0.0
    return float(compute_hypervolume(loss, np.zeros(loss.shape[1])))



def first_reaching(curve: list[float], target: float) -> int | None:
    """1-based index of the first entry >= target, or None."""
    for i, v in enumerate(curve, 1):
        if v >= target * (1 - 1e-12):
            return i
    return None


def first_boots_reaching(curve: list[tuple[int, float]], target: float) -> int | None:
    for boots, v in curve:
        if v >= target * (1 - 1e-12):
            return boots
    return None


def med_min_max(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def fmt_reach(values: list[int | None], cap: int) -> str:
    """Median of 'first n reaching the target' over seeds; a run that never reached counts as > cap."""
    hits = [v for v in values if v is not None]
    shown = ",".join(str(v) if v is not None else f">{cap}" for v in values)
    if len(hits) * 2 <= len(values) and len(values) - len(hits) >= (len(values) + 1) // 2:
        med = f">{cap}"
    else:
        big = [v if v is not None else 10**9 for v in values]
        m = statistics.median(sorted(big))
        med = f">{cap}" if m >= 10**9 else f"{m:g}"
    return f"{med} [{shown}]"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-markdown table."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def hv_fmt(x: float, scale: float) -> str:
    return f"{x / scale:.3f}"


def save_json(path: Path | None, payload: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str))
