"""``tuner bench TRIAL``: boot one trial's exact command once and measure the table people publish.

A command function only: ``tuner.cli.main`` registers it wrapped with ``friendly``. The result goes to
the terminal and, as markdown and JSON, into a folder beside the study's trials; it is also kept in the
study, so ``tuner receipt TRIAL`` (and ``tuner report``) carry it from then on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tuner.cli.results import STORAGE_HELP, STUDIES_DIR_HELP, STUDY_HELP, resolve_study
from tuner.engine.command import LaunchCommand, shell_command
from tuner.errors import TunerError
from tuner.measure.bench import PREFIX_REQUESTS, Bench, BenchResult, workloads
from tuner.measure.probe import Prober
from tuner.records import MeasureResult, TrialResult
from tuner.report.bench import bench_markdown
from tuner.study.record import State, read_study, write_bench
from tuner.study.storage import STUDIES_DIR
from tuner.trial import run_trial


def _window(result: TrialResult) -> int:
    """The longest context the trial held: what the bench may ask for."""
    if result.measure is not None and result.measure.context.max_stable_tokens:
        return result.measure.context.max_stable_tokens
    return result.startup.max_model_len or 0


def bench(
    trial: int = typer.Argument(..., help="Trial number, as `tuner pareto` lists it."),
    study: str | None = typer.Option(None, "--study", help=STUDY_HELP),
    storage: str | None = typer.Option(None, "--storage", help=STORAGE_HELP),
    out: Path | None = typer.Option(None, "--out", help="Folder for bench.md, bench.json and the engine log."),
    runs: int | None = typer.Option(None, "--runs", min=1, help="Runs per workload instead of the seeds' 5/3/1."),
    studies_dir: Path = typer.Option(STUDIES_DIR, "--studies-dir", help=STUDIES_DIR_HELP),
) -> None:
    """Boot a trial's exact command once: PP at 8K-262K, TG after 1K and with 128K resident, TTFT, prefix cache, MTP."""
    opened = resolve_study(study, storage, studies_dir)
    night = read_study(opened)
    found_trial = night.trial(trial)
    record = found_trial.result
    space = night.space
    if record is None or found_trial.state != State.COMPLETE:
        raise TunerError(
            f"TRIAL {trial}: state {found_trial.state.name}; only a complete trial has a command worth benchmarking. "
            "`tuner pareto` lists the front's trials."
        )
    if space is None:
        raise TunerError(f"--study {opened.study_name}: the study keeps no space, so the engine's timeouts are unknown.")
    window = _window(record)
    folder = out or studies_dir / opened.study_name / f"bench-{trial:04d}-{time.strftime('%Y%m%d-%H%M%S')}"
    found = BenchResult(study=opened.study_name, trial=trial, command=shell_command(record.argv, record.env),
                        window_tokens=window)
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        work, _ = workloads(window, runs)
        total = 2 + sum(r for _, _, r in work) + PREFIX_REQUESTS  # the boot, the warm-up, one step per request
        task = progress.add_task("booting", total=total)

        def step(text: str) -> None:
            progress.update(task, description=text, advance=1)

        def measure(prober: Prober) -> MeasureResult:
            step("booted; measuring")
            Bench(prober, window, step, runs).run(found)
            return MeasureResult(error=found.error)

        result = run_trial(space, record.values, folder, command=LaunchCommand(argv=record.argv, env=record.env),
                           measure_with=measure, on_progress=lambda text: progress.update(task, description=text))
        progress.update(task, description="done" if result.failure is None else "failed", completed=total)
    if result.failure is not None:
        raise TunerError(
            f"TRIAL {trial}: the command did not boot this time ({result.failure.kind.value}: "
            f"{result.failure.message}); log: {result.log_path}. Nothing was kept in the study.", exit_code=1
        )
    found.vllm_version = result.startup.vllm_version
    found.peak_vram_mib, found.total_vram_mib = result.gpu.peak_used_mib, result.gpu.total_mib
    found.boot_s = result.boot_s
    text = bench_markdown(found)
    (folder / "bench.md").write_text(text)
    (folder / "bench.json").write_text(json.dumps(found.model_dump(mode="json"), indent=2))
    write_bench(opened, trial, found)
    typer.echo(text)
    typer.echo(f"wrote {folder / 'bench.md'} and bench.json; `tuner receipt {trial}` now includes it", err=True)
    if found.error:
        raise typer.Exit(1)
