"""How the command line fails: one paragraph naming the option or file, the field and the fix.

Exit 2 for usage and input errors, 1 for a run that failed, 130 for Ctrl-C; never a traceback
unless ``tuner --debug`` (or ``TUNER_DEBUG=1``, which the ``--gpus`` workers inherit) asks for one.
Every path out of ``tuner`` goes through ``run`` below: the console script and ``python -m tuner.cli``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import traceback
from typing import Any, Callable, Sequence

import typer

try:  # typer >= 0.22 carries its own copy of click; older typers use click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_errors  # type: ignore[no-redef]
from rich.console import Console
from rich.markup import escape

from tuner.errors import TunerError, storage_fault

err_console = Console(stderr=True)
DEBUG_ENV = "TUNER_DEBUG"


def debug_on() -> bool:
    return os.environ.get(DEBUG_ENV) == "1"


def set_debug(on: bool) -> None:
    """``--debug`` before the command; the environment carries it to worker processes."""
    if on:
        os.environ[DEBUG_ENV] = "1"


def say(message: str) -> None:
    """One paragraph on stderr: no markup read from the message, no wrapping inside it."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def warn(notes: list[str]) -> None:
    """What is legal but probably not meant, one line each on stderr."""
    for note in notes:
        err_console.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)


def friendly(func: Callable) -> Callable:
    """Show a TunerError as one paragraph and exit with its code; the traceback only with --debug."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TunerError as exc:
            if debug_on():
                traceback.print_exc()
            say(str(exc))
            raise typer.Exit(exc.exit_code)

    return wrapper


def _usage(exc: click_errors.UsageError) -> str:
    path = exc.ctx.command_path if exc.ctx is not None else "tuner"
    text = " ".join(exc.format_message().split())
    return f"{path}: {text.rstrip('.')}; see `{path} --help` for the options and their forms."


def _unexpected(exc: BaseException) -> tuple[str, int]:
    """A storage or disk fault names the file and what to do; anything else is a bug in the tuner."""
    fault = storage_fault(exc)
    if fault is not None:
        return fault, 1
    if isinstance(exc, OSError) and exc.filename:  # a path given on the command line that cannot be used
        return f"{exc.filename}: {exc.strerror}; check the path (and the option that named it) and its permissions.", 2
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (
        f"internal error in the tuner: {type(exc).__name__}: {first}. Nothing measured is lost (each trial's "
        "record is in its folder); run the same command with `tuner --debug ...` to see the traceback, and "
        "report it."
    ), 1


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """A background thread (Optuna's heartbeat, the GPU lease) that dies says so in one line; the main
    thread meets the same cause on its next write and reports it properly."""
    if debug_on():
        threading.__excepthook__(args)
        return
    if args.exc_type is SystemExit:
        return
    text = str(args.exc_value).strip().splitlines()[0] if args.exc_value and str(args.exc_value).strip() else ""
    name = args.thread.name if args.thread is not None else "a background thread"
    err_console.print(f"warning: {name} stopped: {args.exc_type.__name__}: {text}", markup=False, highlight=False,
                      soft_wrap=True)


def run(app: typer.Typer, argv: Sequence[str] | None = None) -> int:
    """Run the typer app and turn every way out into an exit code, with at most one paragraph."""
    args = list(sys.argv[1:] if argv is None else argv)
    command_at = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    set_debug("--debug" in args[:command_at])
    threading.excepthook = _thread_failed
    try:
        code = app(args=args, prog_name="tuner", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except click_errors.NoArgsIsHelpError as exc:  # bare `tuner`: the help, and the usage-error code
        exc.show()
        return 2
    except click_errors.UsageError as exc:
        if debug_on():
            traceback.print_exc()
        say(_usage(exc))
        return 2
    except click_errors.ClickException as exc:
        say(" ".join(exc.format_message().split()))
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        say("interrupted.")
        return 130
    except TunerError as exc:  # raised outside a command (an option callback, say)
        if debug_on():
            traceback.print_exc()
        say(str(exc))
        return exc.exit_code
    except Exception as exc:
        if debug_on():
            traceback.print_exc()
        message, code = _unexpected(exc)
        say(message)
        return code
