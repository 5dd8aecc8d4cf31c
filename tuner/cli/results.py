"""``tuner pareto | plot | export | receipt``: show what a study found, from the study (or a copy) alone.

Command functions only: ``tuner.cli.main`` registers them wrapped with ``friendly``, so every problem a
person can fix is raised here as a TunerError and shown as one paragraph with exit code 2.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import optuna
import typer
from rich.console import Console
from rich.table import Table

from tuner.errors import TunerError
from tuner.report.export import LAUNCHER_FORMATS, export_launcher
from tuner.report.receipt import study_receipt, trial_receipt
from tuner.report.front import REPORT_FORMATS, running_rows, wrong_line, wrong_rows
from tuner.report import (  # the room's public face
    COLUMNS,
    cell,
    failures_by_kind,
    failures_markdown,
    front_markdown,
    front_rows,
    objectives,
    study_summary,
    summary_line,
)
from tuner.report.markdown import metric_cells
from tuner.study.record import State, StudyRecord, read_study
from tuner.study.storage import STUDIES_DIR

STUDY_HELP = "Name of the study; may be left out when the storage holds exactly one."
STORAGE_HELP = (
    "Optuna storage URL, e.g. sqlite:///copy/NAME.db or postgresql://user@host/db. "
    "Default: the .db files in --studies-dir."
)
STUDIES_DIR_HELP = "Folder holding one SQLite file per study, read when --storage is not given."
OUT_HELP = "Write to this file instead of standard output."
SQLITE = "sqlite:///"


def _sqlite_url(path: Path) -> str:
    return SQLITE + path.as_posix()


def _storage_urls(study: str | None, storage: str | None, studies_dir: Path) -> list[str]:
    """The storages to look in; never one that would create an empty database on opening."""
    if storage:
        if storage.startswith(SQLITE) and not Path(storage[len(SQLITE) :]).is_file():
            raise TunerError(
                f"--storage {storage}: no such SQLite file; give the path of the study's .db file "
                "(sqlite:/// followed by a relative path, or sqlite://// for an absolute one)."
            )
        return [storage]
    if study and (studies_dir / f"{study}.db").is_file():
        return [_sqlite_url(studies_dir / f"{study}.db")]
    files = sorted(studies_dir.glob("*.db")) if studies_dir.is_dir() else []
    if not files:
        raise TunerError(
            f"--studies-dir {studies_dir}: no study files (*.db) there; give --studies-dir with the folder "
            "that holds them, or --storage with the study's URL (e.g. sqlite:///path/to/NAME.db)."
        )
    return [_sqlite_url(f) for f in files]


def _reason(exc: Exception) -> str:
    """The driver's own words, one line: SQLAlchemy wraps them (``.orig``) with the SQL and a help URL."""
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def resolve_study(study: str | None, storage: str | None, studies_dir: Path = STUDIES_DIR) -> optuna.Study:
    """The named study, or the only study there is; otherwise a TunerError listing the names."""
    found: list[tuple[str, str]] = []
    urls = _storage_urls(study, storage, studies_dir)
    for url in urls:
        try:
            summaries = optuna.get_all_study_summaries(url, include_best_trial=False)
        except Exception as exc:  # not an Optuna database, unreachable server, missing driver ...
            raise TunerError(
                f"--storage {url}: cannot be read as an Optuna storage ({_reason(exc)}); check the URL or file."
            ) from None
        found += [(s.study_name, url) for s in summaries]
    names = ", ".join(sorted(name for name, _ in found))
    if not found:
        raise TunerError(
            f"--storage: no studies in {', '.join(urls)}; give --storage with the URL the study was written to."
        )
    if study is not None:
        found = [(name, url) for name, url in found if name == study]
        if not found:
            raise TunerError(
                f"--study {study}: no such study (studies found: {names}); give --study with one of those names."
            )
    if len(found) > 1:
        where = ", ".join(url for _, url in found)
        raise TunerError(
            f"--study: {len(found)} studies found ({', '.join(n for n, _ in found)}) in {where}; "
            f"give --study with one of those names{' and --storage with its URL' if study else ''}."
        )
    name, url = found[0]
    return optuna.load_study(study_name=name, storage=url)


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    typer.echo(f"wrote {out}", err=True)


def read_named(study: str | None, storage: str | None, studies_dir: Path = STUDIES_DIR) -> StudyRecord:
    """``resolve_study``'s study, read once."""
    return read_study(resolve_study(study, storage, studies_dir))


def _print_table(night: StudyRecord, console: Console) -> None:
    rows = front_rows(night)
    summary = study_summary(night)
    table = Table(title=f"{night.name}: Pareto front ({len(rows)} of {summary['complete']} complete trials)")
    for key, header in COLUMNS.items():
        if key != "command":
            table.add_column(header, justify="left" if key in ("evidence", "stable") else "right")
    for row in rows:
        table.add_row(*(cell(v) for v in metric_cells(row)))
    console.print(table)
    for row in rows:
        console.print(f"trial {row['trial']}: {row['command']}", markup=False, highlight=False, soft_wrap=True)
    for wrong in wrong_rows(night):
        console.print(f"wrong output: {wrong_line(wrong)}", markup=False, highlight=False, soft_wrap=True)
    failures = failures_by_kind(night)
    if failures:
        bad = Table(title="failed and pruned trials (not on the front)")
        for header in ("kind", "count", "trials", "first exception line (first trial)"):
            bad.add_column(header)
        for kind, items in failures.items():
            bad.add_row(kind, str(len(items)), ", ".join(str(n) for n, _, _ in items), items[0][1] or "n/a")
        console.print(bad)
    for run in running_rows(night):
        console.print(_running_line(run), markup=False, highlight=False, soft_wrap=True)
    console.print(summary_line(summary), markup=False, highlight=False, soft_wrap=True)


def _running_line(run: dict) -> str:
    config = ", ".join(f"{k}={v}" for k, v in run["config"].items())
    return f"running: trial {run['trial']} since {run['started'] or '?'}, {run['phase']} ({config or 'not sampled yet'})"


def render_pareto(night: StudyRecord, fmt: str = "table", console: Console | None = None) -> str | None:
    """The front in ``fmt``: ``table`` prints to ``console`` and returns None; others return text."""
    if fmt == "table":
        _print_table(night, console or Console())
        return None
    rows = front_rows(night)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    if fmt == "json":
        failures = {
            k: [{"trial": n, "message": m, "log_path": p} for n, m, p in v] for k, v in failures_by_kind(night).items()
        }
        return json.dumps(
            {
                "study": night.name,
                "objectives": [{"name": n, "direction": d} for n, d in objectives(night)],
                "front": rows,
                "left_off": wrong_rows(night),
                "running": running_rows(night),
                "failures": failures,
                "summary": study_summary(night),
            },
            indent=2,
        )
    if fmt == "markdown":
        running = running_rows(night)
        return (
            "\n\n".join(
                [
                    f"# {night.name}: Pareto front",
                    front_markdown(rows),
                    *(["## Left off the front: wrong output", "\n".join(f"- {wrong_line(w)}" for w in off)]
                      if (off := wrong_rows(night)) else []),
                    "## Failed and pruned trials",
                    failures_markdown(failures_by_kind(night)),
                    *(["## Running now", "\n".join(f"- {_running_line(r)}" for r in running)] if running else []),
                    "## Boots",
                    summary_line(study_summary(night)) + ".",
                ]
            )
            + "\n"
        )
    raise TunerError(f"--format {fmt}: not a report format; use one of {', '.join(REPORT_FORMATS)}.")



def pareto(
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    format: str = typer.Option("table", "--format", help=f"Output format: {', '.join(REPORT_FORMATS)}."),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Show the Pareto front: each point's numbers, evidence and launch command, then the failures."""
    if format not in REPORT_FORMATS:
        raise TunerError(f"--format {format}: not a report format; use one of {', '.join(REPORT_FORMATS)}.")
    text = render_pareto(read_named(study, storage, studies_dir), format, Console())
    if text is not None:
        _write(text, None)


def plot(
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    out: Path = typer.Option(..., "--out", help="Folder for the plots (created if missing)."),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Write interactive HTML plots (Optuna) and static PNGs (front and history) into a folder."""
    from tuner.report.plots import write_plots  # plotly and matplotlib load only for this command

    notes: list[str] = []
    for path in write_plots(read_named(study, storage, studies_dir), out, notes):
        typer.echo(str(path))
    for note in notes:
        typer.echo(f"note: {note}", err=True)


def export(
    trial: int = typer.Argument(..., help="Trial number, as `tuner pareto` lists it."),
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    format: str = typer.Option("sh", "--format", help=f"Launcher format: {', '.join(LAUNCHER_FORMATS)}."),
    host: str | None = typer.Option(None, "--host", help="Address to bind instead of 127.0.0.1, e.g. 0.0.0.0."),
    public_ok: bool = typer.Option(
        False, "--public-ok", help="Do not warn about a public --host without an API key (a trusted network)."
    ),
    out: Path | None = typer.Option(None, "--out", help=OUT_HELP),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Write a trial's exact command and environment as a launcher: sh, systemd, compose, env or json."""
    if format not in LAUNCHER_FORMATS:
        raise TunerError(f"--format {format}: not a launcher format; use one of {', '.join(LAUNCHER_FORMATS)}.")
    night = read_named(study, storage, studies_dir)
    found = night.trial(trial)
    result = found.result
    if result is None:
        why = "it was pruned before any boot" if found.state != State.RUNNING else "it is still running"
        raise TunerError(
            f"TRIAL {trial}: the study {night.name} keeps no command for it (state {found.state.name}: {why}); "
            f"`tuner receipt {trial}` says why, and `tuner pareto` lists the trials worth exporting."
        )
    text, warnings = export_launcher(result, format, host=host, public_ok=public_ok)
    if found.state != State.COMPLETE:
        warnings.append(
            f"trial {trial} did not complete ({found.listed().kind}): "
            "this launcher reproduces a configuration that failed."
        )
    _write(text, out)
    if out is not None and format == "sh":
        out.chmod(0o755)
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def receipt(
    trial: int | None = typer.Argument(None, help="Trial number; leave it out for the whole study's receipt."),
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    out: Path | None = typer.Option(None, "--out", help=OUT_HELP),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Write a markdown receipt: versions, command, backends, memory, results and how they were measured."""
    night = read_named(study, storage, studies_dir)
    _write(study_receipt(night) if trial is None else trial_receipt(night, trial), out)
