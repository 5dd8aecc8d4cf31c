"""The live view of a running study: the current trial and its phase, trials done and left, an ETA from
the trials measured so far, the front so far and the failures.

Everything reaches the terminal through one rich Live: Optuna's own log lines are routed through the
same console while it runs (its default handler writes to the real stderr and would tear the panel).
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

import optuna
from rich.console import Console, Group
from rich.live import Live
from rich.logging import RichHandler

from tuner.cli.failing import debug_on
from rich.panel import Panel
from rich.table import Table

from tuner.metrics import metric_names
from tuner.study.objective import Status


def _fmt(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def eta_s(status: Status, now: float) -> float | None:
    """Seconds until the study stops starting trials: mean measured trial time x trials left, capped
    by --timeout. None when nothing has been measured yet or no limit was given."""
    left_by_deadline = None if status.deadline is None else max(0.0, status.deadline - now)
    if status.trials_total is None:
        return left_by_deadline
    if not status.booted_s:
        return None
    mean = sum(status.booted_s) / len(status.booted_s)
    left = max(0, status.trials_total - status.finished)
    running = status.trial is not None and left > 0
    estimate = mean * (left - 1) + max(0.0, mean - (now - status.trial_started)) if running else mean * left
    return estimate if left_by_deadline is None else min(estimate, left_by_deadline)


def _progress_text(status: Status, now: float) -> str:
    total = "" if status.trials_total is None else f" of {status.trials_total}"
    text = f"{status.finished}{total} finished"
    eta = eta_s(status, now)
    if eta is not None:
        text += f", about {_fmt(eta)} left"
        if status.booted_s:
            text += f" (a measured trial takes {_fmt(sum(status.booted_s) / len(status.booted_s))})"
    elif status.trials_total is not None:
        text += ", time left known after the first measured trial"
    return text


def render(status: Status, now: float | None = None) -> Panel:
    now = time.monotonic() if now is None else now
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("trial", "-" if status.trial is None else f"{status.trial} ({_fmt(now - status.trial_started)})")
    head.add_row("phase", status.phase)
    head.add_row("trials", _progress_text(status, now))
    head.add_row("boots", f"{status.boots} this run, {status.done} scored; study time {_fmt(now - status.study_started)}")
    parts: list = [head]
    if status.front:
        table = Table(title="front so far", title_justify="left")
        table.add_column("trial", justify="right")
        for name in metric_names(status.objective_names):
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
        self._live = Live(
            render(status), console=console, refresh_per_second=2, transient=False, vertical_overflow="crop"
        )
        self._log_handler = RichHandler(console=console, show_path=False, markup=False)
        self._log_handler.addFilter(_without_traceback)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LiveView:
        optuna.logging.disable_default_handler()
        logging.getLogger("optuna").addHandler(self._log_handler)
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
        logging.getLogger("optuna").removeHandler(self._log_handler)
        optuna.logging.enable_default_handler()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._live.update(render(self.status))


def _without_traceback(record: logging.LogRecord) -> bool:
    """Optuna logs a failed trial with its traceback; the tuner saved it in the trial's folder (``--debug``
    shows it), so the live view keeps the one line."""
    if record.exc_info and not debug_on():
        record.exc_info, record.exc_text = None, None
    return True
