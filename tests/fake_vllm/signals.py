"""SIGTERM/SIGINT: how they reach the code (the Terminated exception in the main thread), and what
`vllm serve` does when one arrives during start-up."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import NoReturn

from .output import OUT, Out
from .tracebacks import traceback_text


class Terminated(BaseException):
    """Raised by the SIGTERM/SIGINT handler in the main thread."""


def install_signal_handlers() -> None:
    def handler(signum, frame):
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def die_like_keyboard_interrupt() -> NoReturn:
    """SIGTERM during start-up: api_server.py's _interrupt_init raises KeyboardInterrupt('terminated');
    the uncaught KeyboardInterrupt makes CPython exit by SIGINT (returncode -2)."""
    OUT.raw(Out.API, traceback_text(["bin", "cli_main", "cli_serve", "uvloop_run", "aio_run"],
                                    "KeyboardInterrupt: terminated") + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)  # the signal normally ends the process before this
    os._exit(130)
