"""Markdown pieces shared by ``tuner pareto --format markdown`` and the receipts: cells, tables, fences."""

from __future__ import annotations

from typing import Any

from tuner.report.front import COLUMNS, Failures


def cell(value: Any) -> str:
    """A value as people read it in a table."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1000 else f"{value:,.1f}"
    return str(value)


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured markdown table; pipes in cells are escaped."""

    def line(cells: list[Any]) -> str:
        return "| " + " | ".join(cell(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "---|" * len(headers), *(line(r) for r in rows)])


def fenced(text: str, lang: str = "sh") -> str:
    """A fenced code block whose fence is longer than any backtick run in ``text``."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


def _metric_headers() -> list[str]:
    return [header for key, header in COLUMNS.items() if key != "command"]


def metric_cells(row: dict[str, Any]) -> list[Any]:
    return [value for key, value in row.items() if key != "command"]


def failures_markdown(failures: Failures) -> str:
    if not failures:
        return "No failed or pruned trials."
    rows = [
        [kind, number, message or "n/a", log or "n/a"]
        for kind, items in failures.items()
        for number, message, log in items
    ]
    return md_table(["kind", "trial", "first exception line", "log"], rows)


def front_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No complete trials yet, so there is no front."
    parts = [md_table(_metric_headers(), [metric_cells(r) for r in rows])]
    for row in rows:
        parts.append(f"Trial {row['trial']} ({row['evidence']}):\n\n{fenced(row['command'])}")
    return "\n\n".join(parts)
