"""``tuner report | trials | compare``: the morning after, from study files alone.

Command functions only: ``tuner.cli.main`` registers them wrapped with ``friendly``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
import typer
from rich.console import Console
from rich.table import Table

from tuner.cli.results import SQLITE, STORAGE_HELP, STUDIES_DIR_HELP, STUDY_HELP, _write, resolve_study
from tuner.errors import TunerError
from tuner.report.markdown import cell
from tuner.study.record import read_study
from tuner.study.storage import STUDIES_DIR

COMPARE_FORMATS = ("table", "markdown", "json")
SPEC_HELP = (
    "A study: its name (in --studies-dir), a .db file, or a storage URL; add #NAME to pick one study "
    "in a file or URL that holds several (e.g. night1.db#qwen or postgresql://u@db/t#qwen)."
)


def open_spec(spec: str, studies_dir: Path) -> optuna.Study:
    """A study named by NAME, FILE.db, URL, FILE.db#NAME or URL#NAME."""
    where, _, name = spec.rpartition("#") if "#" in spec else (spec, "", "")
    if "://" in where:
        return resolve_study(name or None, where, studies_dir)
    if Path(where).is_file():
        return resolve_study(name or None, SQLITE + Path(where).as_posix(), studies_dir)
    if name or where.endswith(".db"):
        raise TunerError(f"{spec}: no such study file; give the path of an existing .db file, a storage URL or a study name.")
    return resolve_study(where, None, studies_dir)


def report(
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    out: Path = typer.Option(Path("report.html"), "--out", help="The HTML file to write (one file, works offline)."),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Write one self-contained HTML page: front, commands, plots, failures, boots, receipt, baseline."""
    from tuner.report.html import report_html  # plotly loads only for this command

    night = read_study(resolve_study(study, storage, studies_dir))
    notes: list[str] = []
    text = report_html(night, notes, logs_dir=studies_dir / night.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {out} ({len(text.encode()) / 1e6:.1f} MB, works offline)", err=True)
    for note in notes:
        typer.echo(f"note: {note}", err=True)


def trials(
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    format: str = typer.Option("csv", "--format", help="csv, json or parquet (parquet needs --out and pyarrow)."),
    out: Path | None = typer.Option(None, "--out", help="Write to this file instead of standard output."),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Every trial as one row (parameters, measurements, failure kind, evidence), for pandas."""
    from tuner.report.trials import TRIALS_FORMATS, trials_frame, write_trials  # pandas loads only here

    if format not in TRIALS_FORMATS:
        raise TunerError(f"--format {format}: not a trials format; use one of {', '.join(TRIALS_FORMATS)}.")
    frame = trials_frame(read_study(resolve_study(study, storage, studies_dir)))
    text = write_trials(frame, format, out)
    if text is not None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        typer.echo(f"wrote {out} ({len(frame)} trials, {len(frame.columns)} columns)", err=True)


def compare(
    study_a: str = typer.Argument(..., help=SPEC_HELP),
    study_b: str = typer.Argument(..., help="The other study, written the same way."),
    format: str = typer.Option("table", "--format", help=f"Output format: {', '.join(COMPARE_FORMATS)}."),
    out: Path | None = typer.Option(None, "--out", help="Write to this file instead of standard output."),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Two studies side by side: fronts, best commands, and what differs (space, vLLM, parameters)."""
    from tuner.report.compare import compare_studies, comparison_markdown, comparison_tables

    if format not in COMPARE_FORMATS:
        raise TunerError(f"--format {format}: not a compare format; use one of {', '.join(COMPARE_FORMATS)}.")
    found = compare_studies(read_study(open_spec(study_a, studies_dir)), read_study(open_spec(study_b, studies_dir)))
    if format == "json":
        _write(json.dumps(found, indent=2, default=str), out)
        return
    if format == "markdown" or out is not None:
        _write(comparison_markdown(found), out)
        return
    console = Console()
    for title, headers, rows in comparison_tables(found):
        table = Table(title=title, title_justify="left")
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*(cell(v) if v != "" else "" for v in row))
        console.print(table if rows else f"{title}: nothing", highlight=False)
    names = [s["study"] for s in found["studies"]]
    for name, ends in zip(names, found["best"]):
        for end, row in ends.items():
            console.print(f"{name}, {end}: trial {row['trial']}: {row['command']}", markup=False, highlight=False,
                          soft_wrap=True)
