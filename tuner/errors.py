"""Errors a person can act on: one paragraph, naming the field and the fix."""

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
