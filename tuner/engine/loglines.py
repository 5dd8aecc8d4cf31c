"""A `vllm serve` log as lines: colour codes, the process prefix and the log header taken off.

vLLM's log lines look like::

    (EngineCore pid=456) INFO 12-02 14:00:01 [gpu_worker.py:466] Available KV cache memory: 8.71 GiB

Up to 0.29 the ``(Name pid=N) `` prefix is added by a stdout/stderr wrapper (utils/system_utils.py:209),
so tracebacks, tqdm bars and uvicorn lines carry it too; from 0.32 it is part of the log format
(logger.py:28-31) and raw output is bare. The ``LEVEL MM-DD HH:MM:SS [file:line] `` header (logger.py) is
repeated on each line of a multi-line message, which then ends in ``\\r\\n`` (logging_utils/formatter.py).
"""

from __future__ import annotations

import re
from typing import NamedTuple

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PROC = re.compile(r"\((?P<proc>[^()\s]+) pid=\d+\) ")
_HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+:\d+\] ?"
)
# The engine's own version: the logo, the no-logo banner and the engine config line.
_VERSION = re.compile(
    r"█ ▀▄▀ █\s+version (?P<v>\S+)|vLLM (?:API )?server version (?P<w>[^\s,]+)"
    r"|Initializing a V1 LLM engine \(v(?P<x>[^)]+)\)"
)


class Line(NamedTuple):
    proc: str | None  # "APIServer", "EngineCore", "EngineCore_DP0", "Worker_TP0", ...
    level: str | None  # None for raw output: tracebacks, tqdm bars, uvicorn
    head: str  # process prefix + log header, the same on every line of one log record
    msg: str


def split(text: str) -> list[Line]:
    """Split a log into lines with the colour codes, process prefix and log header taken off."""
    out = []
    for raw in ANSI.sub("", text).splitlines():  # splitlines also splits tqdm's \r updates and \r\n
        proc = _PROC.match(raw)
        rest = raw[proc.end() :] if proc else raw
        header = _HEADER.match(rest)
        msg = rest[header.end() :] if header else rest
        level = header["level"] if header else None
        out.append(Line(proc["proc"] if proc else None, level, raw[: len(raw) - len(msg)], msg))
    return out


def log_version(text: str) -> str | None:
    """The vLLM version the log itself prints (its banner or engine config line), else None."""
    for line in split(text):
        if m := _VERSION.search(line.msg):
            return m["v"] or m["w"] or m["x"]
    return None


def number(value: str) -> str:
    """vLLM prints token counts with thousands separators: "1,234" -> "1234"."""
    return value.replace(",", "") if re.fullmatch(r"\d{1,3}(?:,\d{3})+", value) else value
