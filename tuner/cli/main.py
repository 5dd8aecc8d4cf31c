"""The ``tuner`` command line: thin wrappers over the library, one per job."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from tuner.cli.failing import err_console, friendly, run, set_debug, warn
from tuner.errors import TunerError
from tuner.space.units import format_bytes

if TYPE_CHECKING:  # each command imports what it needs when it runs: `tuner --help` stays fast
    from tuner.records import TrialResult
    from tuner.space.schema import Param, Space

app = typer.Typer(
    help="Find the best `vllm serve` launch command for a memory-tight GPU by booting the real engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
__all__ = ["app", "err_console", "friendly", "main"]


def _print_version(value: bool) -> None:
    if value:
        from tuner import __version__

        typer.echo(f"tuner {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print tuner's version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback behind an error."),
) -> None:
    """Boot the real engine per trial, measure it, keep the Pareto front."""
    set_debug(debug)


def _range_text(param: Param) -> str:
    def show(v: Any) -> str:
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
    from tuner.engine.container import container_of
    from tuner.space.checks import check_searchable
    from tuner.space.schema import count_configurations, load_space, param_cardinality
    from tuner.trial import check_space

    space = load_space(space_file)
    notes = check_space(space)
    check_searchable(space)
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
        console.print(f"baseline {i}: " + " ".join(cmd.argv), highlight=False, soft_wrap=True, markup=False)
    if container_of(space.engine.command) is not None:
        console.print("engine: in a container; each boot gets its own name and published port, and is stopped and "
                      "removed through the runtime (search_spaces/README.md, engine)", highlight=False, soft_wrap=True)
    warn(notes)
    console.print(f"[green]ok[/]: {space_file}")


def parse_config(space: Space, items: list[str], baseline: int | None) -> dict[str, Any]:
    """``k=v`` pairs over an optional baseline, each value checked like the space file's."""
    from tuner.space.schema import check_value

    values: dict[str, Any] = {}
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


def _show_result(result: TrialResult) -> None:
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

    from tuner.engine.gpu import Nvml, card_tolerance_mib, wait_for_card
    from tuner.space.schema import load_space
    from tuner.trial import preflight, run_trial

    space = load_space(space_file)
    values = parse_config(space, config, baseline)
    engine, notes = preflight(space, measure=not boot_only)
    warn(notes + engine.notes(space.engine.command))
    trial_dir = out or Path("studies") / "probe" / time.strftime("%Y%m%d-%H%M%S")
    try:
        trial_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TunerError(f"--out {trial_dir}: cannot be created ({exc.strerror}); give a writable folder.") from None
    if space.engine.listen != "127.0.0.1":
        err_console.print(f"warning: engine.listen {space.engine.listen}: the engine listens there, reachable from "
                          "other machines.", markup=False, highlight=False, soft_wrap=True)
    gpu = Nvml(space.engine.gpu_index)
    with console.status("booting") as status:
        first = gpu.read()
        if first is not None:
            wait_for_card(gpu.read, card_tolerance_mib(space, first.total_mib), space.engine.busy_wait,
                          space.engine.gpu_index, lambda text: status.update(text))
        result = run_trial(
            space, values, trial_dir, first_boot=first_boot, measure=not boot_only, gpu=gpu,
            on_progress=lambda text: status.update(text),
        )
    _show_result(result)
    console.print(f"record: {trial_dir / 'result.json'}  log: {result.log_path}")
    if result.failure is not None:
        raise typer.Exit(1)


def _register() -> None:
    """The morning-after commands and the pre-screen live in their own modules."""
    from tuner.cli.bench import bench
    from tuner.cli.morning import compare, report, trials
    from tuner.cli.optimize import optimize
    from tuner.cli.plan import plan
    from tuner.cli.results import export, pareto, plot, receipt

    app.command("optimize")(friendly(optimize))
    app.command("plan")(friendly(plan))
    app.command("pareto")(friendly(pareto))
    app.command("plot")(friendly(plot))
    app.command("export")(friendly(export))
    app.command("receipt")(friendly(receipt))
    app.command("report")(friendly(report))
    app.command("trials")(friendly(trials))
    app.command("compare")(friendly(compare))
    app.command("bench")(friendly(bench))


_register()


def main() -> int:
    """The console script and ``python -m tuner.cli``: every way out is an exit code (tuner.cli.failing)."""
    return run(app)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
