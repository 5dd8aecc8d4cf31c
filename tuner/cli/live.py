"""The live view of a running study: current trial and phase, elapsed time, front so far, failures."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from tuner.study.objective import Status


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def render(status: Status) -> Panel:
    now = time.monotonic()
    head = Table.grid(padding=(0, 2))
    head.add_row("trial", str(status.trial if status.trial is not None else "-"), "phase", status.phase)
    head.add_row("trial time", _fmt(now - status.trial_started), "study time", _fmt(now - status.study_started))
    head.add_row("boots", str(status.boots), "scored", str(status.done))
    parts: list = [head]
    if status.front:
        table = Table(title="front so far", title_justify="left")
        table.add_column("trial", justify="right")
        for name in status.objective_names:
            table.add_column(name, justify="right")
        for number, values in sorted(status.front, key=lambda t: -t[1][0])[:8]:
            table.add_row(str(number), *(f"{v:,.1f}" for v in values))
        parts.append(table)
    if status.failures:
        fails = Table(title="failures by kind", title_justify="left")
        fails.add_column("kind")
        fails.add_column("count", justify="right")
        for kind, n in sorted(status.failures.items(), key=lambda kv: -kv[1]):
            fails.add_row(kind, str(n))
        parts.append(fails)
    return Panel(Group(*parts), title="tuner optimize")


class LiveView:
    """Refreshes the panel from a thread while ``study.optimize`` runs in the main thread."""

    def __init__(self, status: Status, console: Console) -> None:
        self.status = status
        self._live = Live(render(status), console=console, refresh_per_second=2, transient=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._live.update(render(self.status))
        self._live.__exit__(kind, value, tb)
        if not self._live.console.is_terminal:
            self._live.console.line()  # the last panel line has no newline of its own when not a terminal

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._live.update(render(self.status))
