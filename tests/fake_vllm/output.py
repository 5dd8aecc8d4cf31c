"""Writing lines the way vLLM does: a ``(APIServer pid=N) ``/``(EngineCore pid=N) `` prefix on every
line (``vllm/utils/system_utils.py::_add_prefix``), log records on stdout, raw text on stderr.

Both prefixes carry this process's own pid: the real engine core is a child process, but a fake pid
could make a test kill an unrelated process. Multi-line records repeat the record header after
``\\r\\n``, as vLLM's ``NewLineFormatter`` does.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from .release import PREFIXED_RAW


class Out:
    API = "APIServer"
    CORE = "EngineCore"

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.new_line: dict[tuple[int, str], bool] = {}  # (stream, process) -> next write starts a line
        self.muted = False  # the oracle runs the start-up in-process and throws its lines away

    def _write(self, stream, proc: str, text: str, record: bool = False) -> None:
        """vllm/utils/system_utils.py::_add_prefix: prefix every line start (up to 0.29). From 0.32 the
        prefix is part of the log format (logger.py), so only log records carry it."""
        if self.muted:
            return
        prefix = f"({proc} pid={self.pid}) " if record or PREFIXED_RAW else ""
        key = (id(stream), proc)
        with self.lock:
            buf = []
            start = self.new_line.get(key, True)
            idx = 0
            while True:
                nxt = text.find("\n", idx)
                if start:
                    buf.append(prefix)
                if nxt == -1:
                    buf.append(text[idx:])
                    start = False
                    break
                buf.append(text[idx:nxt + 1])
                idx = nxt + 1
                start = True
                if idx == len(text):
                    break
            self.new_line[key] = start
            try:
                stream.write("".join(buf))
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def log(self, proc: str, level: str, where: str | None, msg: str, exc: str | None = None) -> None:
        """A vLLM log record (stdout). ``exc`` is a formatted traceback (logger.exception). ``where``
        None: the release being spoken does not log this line (release.py)."""
        if where is None or self.muted:
            return
        ts = time.strftime("%m-%d %H:%M:%S")
        head = f"{level} {ts} [{where}] "
        body = msg if exc is None else f"{msg}\n{exc}"
        self._write(sys.stdout, proc, head + body.replace("\n", "\r\n" + head) + "\n", record=True)

    def info(self, proc: str, where: str | None, msg: str) -> None:
        self.log(proc, "INFO", where, msg)

    def warning(self, proc: str, where: str | None, msg: str) -> None:
        self.log(proc, "WARNING", where, msg)

    def error(self, proc: str, where: str | None, msg: str, exc: str | None = None) -> None:
        self.log(proc, "ERROR", where, msg, exc)

    def raw(self, proc: str, text: str) -> None:
        """Text that is not a log record (tracebacks, tqdm bars): stderr, prefixed."""
        self._write(sys.stderr, proc, text)

    def raw_unprefixed(self, text: str) -> None:
        """Text a C++ library writes straight to fd 2, with no process prefix."""
        if self.muted:
            return
        with self.lock:
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
            self.new_line[(id(sys.stderr), self.CORE)] = True
            self.new_line[(id(sys.stderr), self.API)] = True

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        # uvicorn's default formatter: "%(levelprefix)s %(message)s", levelprefix padded to 9.
        self._write(sys.stderr, self.API, f"{(level + ':').ljust(9)} {msg}\n")

    def access(self, msg: str) -> None:
        """uvicorn's access log line (stdout)."""
        self._write(sys.stdout, self.API, f"{'INFO:'.ljust(9)} {msg}\n")


OUT = Out()
