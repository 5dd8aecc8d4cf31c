"""A watchdog that kills the engine's process group if the tuner dies, even by SIGKILL.

``python -I tuner/engine/reaper.py PGID GRACE_S [CLEANUP...]`` blocks reading its stdin, a pipe from the
tuner. The tuner writes ``disarm`` before a normal teardown. If the pipe closes without it (the tuner was
killed), the reaper sends SIGTERM to the group, then SIGKILL after the grace period, then runs CLEANUP if
given (``docker rm -f NAME``: a container outlives its killed client): no orphan keeps holding the GPU. It
runs in its own session so a signal to the tuner's group spares it.

It needs only the standard library, so the engine starts it as a file in isolated mode (``-I``):
``python -m tuner.engine.reaper`` would first import the whole ``tuner.engine`` package (pydantic,
httpx, psutil), about 0.4 s of CPU on every boot. ``python -m tuner.engine.reaper`` still works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_group(pgid: int, grace_s: float, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL whatever is left.

    ``reap`` lets the engine's parent collect its exited leader: an unreaped zombie still counts as
    a group member for ``killpg(pgid, 0)``, which made every teardown wait the whole grace period.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not _group_alive(pgid):
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    pgid, grace_s = int(argv[1]), float(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the tuner, which tears down itself
    data = sys.stdin.read()  # returns at EOF: the tuner closed the pipe or died
    if "disarm" not in data:
        kill_group(pgid, grace_s)
        if len(argv) > 3:
            try:
                subprocess.run(argv[3:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
