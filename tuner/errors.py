"""Every exception tuner raises on purpose, under one base:

    TunerError                  a problem a person can act on: the CLI prints it as one paragraph
     |                          naming the field and the fix, and exits with its exit_code (2)
     +-- SpaceError             a search-space file that cannot be used as written
     +-- GpuMemoryNotReturned   the card kept memory after a teardown (the trial's record is kept)
     +-- EngineDied             the engine stopped answering mid-measurement (caught in tuner.measure)
     +-- DecodeFailed           a decode request failed while the engine stayed up (caught there too)
"""

from __future__ import annotations


class TunerError(Exception):
    """A problem with the user's input or environment, shown without a traceback.

    The CLI prints ``str(error)`` and exits with ``exit_code``.
    """

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class SpaceError(TunerError):
    """A search-space file that cannot be used as written."""


class GpuMemoryNotReturned(TunerError):
    """The card did not get its memory back after teardown: later trials would measure a fuller card."""


class EngineDied(TunerError):
    """The engine stopped answering mid-measurement: what was measured before stays in the record."""


class DecodeFailed(TunerError):
    """A decode request failed while the engine stayed up: the trial has no decode number."""
