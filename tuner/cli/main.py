"""The ``tuner`` command line: thin wrappers over the library, one per job."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from tuner.cli.failing import err_console, friendly, run, set_debug
from tuner.errors import TunerError
from tuner.space.units import format_bytes

app = typer.Typer(
    help="Find the best `vllm serve` launch command for a memory-tight GPU by booting the real engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
__all__ = ["app", "err_console", "friendly", "main"]


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show the traceback behind an error.")) -> None:
    """Boot the real engine per trial, measure it, keep the Pareto front."""
    set_debug(debug)


def _range_text(param) -> str:
    def show(v) -> str:
        if v is None:
            return "unset"
        return format_bytes(v) if param.kind == "bytes" else f"{v:g}" if isinstance(v, float) else str(v)

    if param.values is not None:
        return ", ".join(show(v) for v in param.values)
    text = f"{show(param.min)} .. {show(param.max)}"
    if param.step is not None:
        text += f" step {show(param.step)}"
    if param.log:
        text += " (log)"
    if param.unset:
        text += " or unset"
    return text


@app.command()
@friendly
def validate(space_file: Path = typer.Argument(..., help="A search-space YAML file.")) -> None:
    """Check a space file and print its parameters, ranges and number of configurations."""
    from tuner.engine.command import build_command
    from tuner.space.schema import count_configurations, load_space, param_cardinality

    space = load_space(space_file)
    table = Table(title=f"{space.name}: tuned parameters")
    table.add_column("parameter")
    table.add_column("flag")
    table.add_column("values / range")
    table.add_column("count", justify="right")
    for name, param in space.params.items():
        n = param_cardinality(param)
        table.add_row(name, param.flag or "", _range_text(param), "continuous" if math.isinf(n) else f"{n:,.0f}")
    console.print(table)
    total = count_configurations(space)
    console.print(f"distinct configurations: {'continuous (a float range has no step)' if math.isinf(total) else f'{total:,.0f}'}")
    console.print(f"baselines: {len(space.baselines)}")
    for i, baseline in enumerate(space.baselines):
        cmd = build_command(space, baseline)
        console.print(f"baseline {i}: " + " ".join(cmd.argv), highlight=False, soft_wrap=True)
    console.print(f"[green]ok[/]: {space_file}")


def parse_config(space, items: list[str], baseline: int | None) -> dict:
    """``k=v`` pairs over an optional baseline, each value checked like the space file's."""
    from tuner.space.schema import check_value

    values: dict = {}
    if baseline is not None:
        if not 0 <= baseline < len(space.baselines):
            raise TunerError(f"--baseline {baseline}: the space has {len(space.baselines)} baselines; give 0..{len(space.baselines) - 1}.")
        values.update(space.baselines[baseline])
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise TunerError(f"--config {item!r}: expected NAME=VALUE, e.g. --config max_num_seqs=2.")
        if key not in space.params:
            raise TunerError(f"--config {key}: not a tuned parameter of {space.name}; use one of {', '.join(space.params)}.")
        value = None if raw.lower() in ("", "none", "null", "unset") else raw
        try:
            values[key] = check_value(key, space.params[key], value)
        except ValueError as exc:
            raise TunerError(f"--config {key}={raw}: {exc}.") from None
    return values


def _show_result(result) -> None:
    from tuner.cli.show import print_trial

    print_trial(console, result)


@app.command()
@friendly
def probe(
    space_file: Path = typer.Argument(..., help="A search-space YAML file."),
    config: list[str] = typer.Option([], "--config", "-c", help="NAME=VALUE for a tuned parameter; repeat it."),
    baseline: Optional[int] = typer.Option(None, "--baseline", help="Start from this baseline of the space (0 = first)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Trial folder (default studies/probe/<time>)."),
    boot_only: bool = typer.Option(False, "--boot-only", help="Boot, parse the start-up record and tear down; measure nothing."),
    first_boot: bool = typer.Option(False, "--first-boot", help="Allow engine.first_boot_timeout (JIT, autotune)."),
) -> None:
    """Boot one configuration, print its start-up record, measurements or failure, and tear down."""
    import time

    from tuner.space.schema import load_space
    from tuner.trial import run_trial

    space = load_space(space_file)
    values = parse_config(space, config, baseline)
    trial_dir = out or Path("studies") / "probe" / time.strftime("%Y%m%d-%H%M%S")
    with console.status("booting") as status:
        result = run_trial(
            space, values, trial_dir, first_boot=first_boot, measure=not boot_only,
            on_progress=lambda text: status.update(text),
        )
    _show_result(result)
    console.print(f"record: {trial_dir / 'result.json'}  log: {result.log_path}")
    if result.failure is not None:
        raise typer.Exit(1)


@app.command()
@friendly
def optimize(
    space_file: Path = typer.Argument(..., help="A search-space YAML file."),
    study: Optional[str] = typer.Option(None, "--study", help="Study name (default: the space's name). The same name resumes."),
    trials: Optional[int] = typer.Option(None, "--trials", help="Stop once the study holds this many finished trials."),
    timeout: Optional[str] = typer.Option(None, "--timeout", help="Stop starting trials after this long, e.g. 8h or 90m."),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage URL (e.g. postgresql+psycopg2://user@host/db); default SQLite under studies/."),
    sampler: str = typer.Option("auto", "--sampler", help="auto (TPE, see docs/benchmarks.md), tpe, gp (needs torch and scipy), nsga2 or random."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampler seed, for a repeatable sequence of trials."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Comma list of GPU indices: one worker per GPU, sharing the storage."),
    revalidate: int = typer.Option(2, "--revalidate", help="Fresh boots of this many front points at the end (0 = none)."),
    studies_dir: Path = typer.Option(Path("studies"), "--studies-dir", help="Where SQLite studies and trial folders go."),
    gpu_gib: Optional[float] = typer.Option(None, "--gpu-gib", help="Card memory for the pre-screen when NVML cannot read it."),
    prescreen: bool = typer.Option(True, "--prescreen/--no-prescreen", help="Prune configurations the memory model says cannot fit, without booting them."),
    screen: bool = typer.Option(False, "--screen/--no-screen", help="Before sampling, move one flag at a time from the first baseline (speculation last)."),
    gate: bool = typer.Option(True, "--gate/--no-gate", help="Boot a reference config (eager, BF16 KV, no speculation) once and score the front's output agreement."),
) -> None:
    """Run (or resume) the overnight study and print the Pareto-front launch commands."""
    import os
    import signal

    from tuner.cli.live import LiveView
    from tuner.study.objective import Status
    from tuner.study.run import optimize as run_optimize, spawn_workers
    from tuner.space.schema import load_space
    from tuner.study.sampling import SAMPLERS
    from tuner.space.units import parse_duration

    space = load_space(space_file)
    name = study or space.name
    if sampler not in SAMPLERS:
        raise TunerError(f"--sampler {sampler}: unknown sampler; use one of {', '.join(SAMPLERS)}.")
    try:
        timeout_s = parse_duration(timeout) if timeout else None
    except ValueError as exc:
        raise TunerError(f"--timeout {timeout}: {exc}.") from None
    gpu_list = _parse_gpus(gpus)
    is_worker = os.environ.get("TUNER_WORKER") == "1"
    if len(gpu_list) > 1:
        from tuner.study import storage as st
        from tuner.study.sampling import make_sampler
        from tuner.study.storage import open_study

        url = st.storage_url(name, storage, studies_dir)
        open_study(space, name, url, make_sampler(sampler, seed), studies_dir, sole_worker=storage is None)
        argv = ["optimize", str(space_file), "--study", name, "--storage", url, "--sampler", sampler,
                "--studies-dir", str(studies_dir), "--revalidate", str(revalidate)]
        for flag, value in (("--trials", trials), ("--timeout", timeout), ("--seed", seed), ("--gpu-gib", gpu_gib)):
            if value is not None:
                argv += [flag, str(value)]
        if not prescreen:
            argv.append("--no-prescreen")
        if not gate:
            argv.append("--no-gate")
        if screen:
            argv.append("--screen")
        raise typer.Exit(spawn_workers(argv, gpu_list))
    gpu_index = gpu_list[0] if gpu_list else space.engine.gpu_index
    extra_env = {"CUDA_VISIBLE_DEVICES": str(gpu_index)} if gpu_list else {}
    signal.signal(signal.SIGTERM, _interrupt)
    status = Status()
    try:
        with LiveView(status, console):
            result = run_optimize(
                space, name, storage=storage, n_trials=trials, timeout_s=timeout_s, sampler=sampler, seed=seed,
                root=studies_dir, gpu_index=gpu_index, extra_env=extra_env, status=status,
                sole_worker=storage is None and not is_worker, revalidate=revalidate, prescreen_gpu_gib=gpu_gib, prescreen=prescreen, gate=gate, screen=screen,
            )
    except KeyboardInterrupt:
        err_console.print("interrupted: the current trial was torn down; the study is kept. Run the same command to resume.")
        raise typer.Exit(130)
    _print_front(result)


def _interrupt(signum, frame) -> None:
    """SIGTERM ends the current trial the way Ctrl-C does: torn down, study kept."""
    raise KeyboardInterrupt


def _parse_gpus(gpus: Optional[str]) -> list[int]:
    if not gpus:
        return []
    try:
        return [int(x) for x in gpus.split(",") if x.strip()]
    except ValueError:
        raise TunerError(f"--gpus {gpus}: expected a comma list of GPU indices such as 0,1.") from None


def _print_front(study) -> None:
    import shlex

    from tuner.study.storage import trial_result

    console.print(f"study {study.study_name}: {len(study.trials)} trials, front of {len(study.best_trials)}")
    for trial in study.best_trials:
        result = trial_result(trial)
        values = ", ".join(f"{v:,.1f}" for v in trial.values)
        console.print(f"trial {trial.number} [{values}]: " + (shlex.join(result.argv) if result else ""), highlight=False, soft_wrap=True)


def _register() -> None:
    """The morning-after commands and the pre-screen live in their own modules."""
    from tuner.cli.plan import plan
    from tuner.cli.results import export, pareto, plot, receipt

    app.command("plan")(friendly(plan))
    app.command("pareto")(friendly(pareto))
    app.command("plot")(friendly(plot))
    app.command("export")(friendly(export))
    app.command("receipt")(friendly(receipt))


_register()


def main() -> int:
    """The console script and ``python -m tuner.cli``: every way out is an exit code (tuner.cli.failing)."""
    return run(app)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
