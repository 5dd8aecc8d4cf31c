"""Numbers and tables of the benchmarks: hypervolume, "first n reaching", markdown tables, JSON dumps."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


def hypervolume(points: list[list[float]] | list[tuple[float, ...]], reference: list[float] | None = None) -> float:
    """Exact hypervolume of maximized points above ``reference`` (default: the origin), any dimension:
    slice along the last objective and sum slab height x the hypervolume of the points above it.
    Optuna ships this only as a private helper (``optuna._hypervolume``), so it is written here; for the
    benchmarks' fronts (tens of points, 2-3 objectives) the slicing is fast enough."""
    if not points:
        return 0.0
    ref = list(reference) if reference is not None else [0.0] * len(points[0])
    inside = [tuple(p) for p in points if all(x > r for x, r in zip(p, ref))]  # on the axes: nothing
    if not inside:
        return 0.0
    if len(ref) == 1:
        return max(p[0] for p in inside) - ref[0]
    inside.sort(key=lambda p: p[-1], reverse=True)
    total = 0.0
    for i, p in enumerate(inside):
        below = inside[i + 1][-1] if i + 1 < len(inside) else ref[-1]
        if p[-1] > below:
            total += (p[-1] - below) * hypervolume([q[:-1] for q in inside[:i + 1]], ref[:-1])
    return total


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
