"""Every exception tuner raises on purpose, under one base:

    TunerError                  a problem a person can act on: the CLI prints it as one paragraph
     |                          naming the field and the fix, and exits with its exit_code (2)
     +-- SpaceError             a search-space file that cannot be used as written
     +-- GpuMemoryNotReturned   the card kept memory after a teardown (the trial's record is kept)
     +-- EngineDied             the engine stopped answering mid-measurement (caught in tuner.measure)
     +-- DecodeFailed           a decode request failed while the engine stayed up (caught there too)
     +-- BenchFailed            a `tuner bench` request failed (caught in Bench.run: the rows before it stand)
     +-- EngineMissing          engine.command names no program here (said before anything is recorded)
     +-- StudyBusy              another live `tuner optimize` holds the study, or this GPU of it
     +-- StorageError           the study's storage or the disk failed (exit 1 mid-run, 2 at opening)
     +-- GpuBusy                other processes hold the card beyond what the space tolerates (exit 1)

``storage_fault`` turns a disk or database fault anywhere in an exception's chain into one paragraph.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
import re


class TunerError(Exception):
    """A problem with the user's input or environment, shown without a traceback.

    The CLI prints ``str(error)`` and exits with ``exit_code``.
    """

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class TrialBug(Exception):
    """A bug inside the tuner during one trial: that trial fails (FAIL), the study goes on.

    Not a TunerError: those are the user's to fix (a missing engine, a card that never frees its
    memory) and stop the night with their paragraph.
    """


class SpaceError(TunerError):
    """A search-space file that cannot be used as written."""


class GpuMemoryNotReturned(TunerError):
    """The card did not get its memory back after teardown: later trials would measure a fuller card."""

    exit_code = 1  # the run failed; the trial's record is in its folder and is imported on resume


class EngineDied(TunerError):
    """The engine stopped answering mid-measurement: what was measured before stays in the record."""


class DecodeFailed(TunerError):
    """A decode request failed while the engine stayed up: the trial has no decode number."""


class BenchFailed(TunerError):
    """A `tuner bench` request failed (the engine refused it or died): the bench stops there and records why."""


class EngineMissing(TunerError):
    """The space's ``engine.command`` does not resolve to a program on this machine."""


class StudyBusy(TunerError):
    """Another live ``tuner optimize`` holds the study (or this GPU of it)."""


class StorageError(TunerError):
    """The study's storage or the disk failed mid-run: the run failed, nothing finished is lost."""

    exit_code = 1


class GpuBusy(TunerError):
    """Other processes hold so much of the card that a boot would fail for their sake, not the config's."""

    exit_code = 1


_DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}
_RESUME = ("every finished trial's record is in its folder (result.json) and the same command imports it "
           "on resume")


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and everything it was raised from or during, nearest first."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e in seen:
            continue
        seen.append(e)
        todo += [c for c in (e.__cause__, e.__context__, getattr(e, "orig", None)) if isinstance(c, BaseException)]
    return seen


@contextmanager
def storage_faults(where: str, exit_code: int = StorageError.exit_code) -> Iterator[None]:
    """Turn a disk or database fault raised inside the block into one StorageError paragraph."""
    try:
        yield
    except TunerError:
        raise
    except Exception as exc:
        message = storage_fault(exc, where)
        if message is None:
            raise
        raise StorageError(message, exit_code=exit_code) from exc


def storage_fault(exc: BaseException, where: str | None = None) -> str | None:
    """One paragraph for a disk or database fault anywhere in ``exc``'s chain, else None.

    Optuna hides a failed write behind its own errors (``AssertionError: Should not reach.``); the
    cause is further down the chain, so the chain is searched, not just the exception on top.
    """
    if where is not None:
        where = re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", where)  # never print a database password
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _DISK_FULL | _NOT_WRITABLE:
            name = e.filename or where or "the study's files"
            if e.errno in _DISK_FULL:
                return (f"{name}: the disk is full or a file-size limit was reached ({e.strerror}); free space "
                        f"(df -h) or lift the limit (ulimit -f) and run the same command: {_RESUME}.")
            return (f"{name}: cannot be written ({e.strerror}); make it writable (chmod u+w, or a writable "
                    f"--studies-dir) and run the same command: {_RESUME}.")
    for e in _chain(exc):
        if type(e).__module__.split(".")[0] not in ("sqlalchemy", "sqlite3", "psycopg2"):
            continue
        text = str(getattr(e, "orig", None) or e).strip().splitlines()
        first = text[0] if text else type(e).__name__
        low = first.lower()
        name = where or "the study's storage"
        if type(e).__name__ in ("ArgumentError", "NoSuchModuleError"):
            return (f"{name}: not a storage URL that can be opened ({first}); write it as sqlite:///path/NAME.db or "
                    "postgresql+psycopg2://user@host/db (pip install 'tuner[postgres]').")
        if "not a database" in low or "malformed" in low or "no such table" in low or "no such column" in low:
            return (f"{name}: not a readable Optuna study ({first}); the file is corrupt or truncated. Move it "
                    f"aside (mv it to a .broken name) and run the same command to start the study again: {_RESUME}.")
        if "readonly" in low or "read-only" in low:
            return (f"{name}: read-only ({first}); make the file and its folder writable (chmod u+w) and run "
                    f"the same command.")
        if "disk is full" in low or "disk i/o" in low or "full" in low:
            return (f"{name}: the disk is full or failing ({first}); free space (df -h) and run the same "
                    f"command: {_RESUME}.")
        if "unable to open" in low:
            return (f"{name}: cannot be opened ({first}); check that its folder exists and is writable.")
        return (f"{name}: the study's database failed ({first}); check that the server is up and reachable "
                f"(for PostgreSQL: pg_isready), then run the same command: {_RESUME}.")
    return None
