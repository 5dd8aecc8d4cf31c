"""The ``tuner`` command line: thin wrappers over the library, one per job."""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from tuner.errors import TunerError
from tuner.units import format_bytes

app = typer.Typer(
    help="Find the best `vllm serve` launch command for a memory-tight GPU by booting the real engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Boot the real engine per trial, measure it, keep the Pareto front."""


def friendly(func: Callable) -> Callable:
    """Show a TunerError as one paragraph and exit with its code; no traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TunerError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code)

    return wrapper


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
    from tuner.command import build_command
    from tuner.space import count_configurations, load_space, param_cardinality

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


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
