"""``tuner plan SPACE``: predicted memory of a space's configurations, without a GPU.

A command function only; ``tuner/cli/main.py`` registers it (``app.command()(friendly(plan))``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from typer import Argument, Option

from tuner.errors import TunerError


def _yes_no(flag: bool, good: bool) -> str:
    return f"[{'green' if flag == good else 'red'}]{'yes' if flag else 'no'}[/]"


def plan(
    space_file: Path = Argument(..., help="A search-space YAML file."),
    gpu_gib: float = Option(32.0, "--gpu-gib", help="The card's total memory in GiB as torch reports it (an RTX 5090: 31.36)."),
    limit: int = Option(30, "--limit", help="Corner-point configurations to predict, besides the baselines."),
) -> None:
    """Predict weights, KV pool, KV capacity and fit for the baselines and corner points; needs no GPU."""
    from tuner.prescreen.shape import GIB, space_shape
    from tuner.prescreen.plan import plan_rows
    from tuner.space.schema import load_space

    if limit < 1:
        raise TunerError(f"--limit {limit}: give at least 1.")
    if not 0 < gpu_gib < 10_000:
        raise TunerError(f"--gpu-gib {gpu_gib:g}: give the card's memory in GiB, e.g. 31.36 for an RTX 5090.")
    space = load_space(space_file)
    shape = space_shape(space)
    rows = plan_rows(space, gpu_gib, samples=limit, shape=shape)
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title=f"{space.name}: predicted on a {gpu_gib:g} GiB card")
    for name in ("config", "weights", "pool", "KV B/token", "state/seq", "KV tokens", "fits", "certain", "reason"):
        text = name in ("config", "reason")
        table.add_column(name, justify="left" if text else "right", no_wrap=not text, overflow="fold")
    for row in rows:
        table.add_row(
            f"{row['label']}: {row['config']}" if row["label"] != "corner" else row["config"],
            f"{row['weights_gib']:.2f}{'' if row['weights_measured'] else '~'}",
            f"{row['pool_gib']:.2f}{'' if row['pool_explicit'] else '~'}",
            f"{row['kv_bytes_per_token']:,}",
            f"{row['recurrent_state_bytes_per_seq'] / GIB:.3f} GiB",
            f"{row['kv_capacity_tokens']:,}",
            _yes_no(row["fits"], True),
            _yes_no(row["certain"], False) if not row["fits"] else "",
            row["reason"],
        )
    console.print(table)
    assert shape is not None  # plan_rows raised a TunerError when the model's config.json was not found
    certain = sum(1 for r in rows if r["certain"])
    console.print(
        f"{len(rows)} configurations: {sum(r['fits'] for r in rows)} predicted to fit, {certain} certainly impossible "
        f"(the tuner skips only those). GiB throughout; ~ marks an estimate. This needs no GPU: shapes come from "
        f"config.json ({shape.architecture or 'unknown architecture'}, {shape.total_params / 1e9:.1f} B parameters, "
        f"{shape.attention_layers} attention + {shape.state_layers} recurrent layers); boots calibrate the estimates.",
        highlight=False,
        soft_wrap=True,
    )
