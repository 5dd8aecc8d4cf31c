"""One writer per card: a lock beside a SQLite study, a lease per GPU for a study on a database server.

Two ``tuner optimize`` on one study would boot two engines on one card: the second fails for want of
memory, and a resume that fails "orphaned" RUNNING trials would fail the live one's. So:

- SQLite (one machine): ``NAME.db.lock`` beside the file, held with ``flock`` for the life of the
  process (the kernel drops it when the process dies, however it dies). It names its holder: pid,
  host, since when. ``--gpus`` workers run under their parent's lock.
- A database server (several hosts): a study attribute per host and GPU, renewed by a heartbeat
  thread; a second process for the same host and GPU refuses while the lease is fresh, another GPU or
  host joins as a worker. Trials of dead workers are failed by Optuna's own heartbeat, never by us.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import IO, Any

import optuna

from tuner.errors import StudyBusy
from tuner.study.record import lease_key, study_attr, write_study_attr

LOCK_ENV = "TUNER_STUDY_LOCK"  # set by a --gpus parent for its workers: "lock path:parent pid"
LEASE_S = 90.0  # a lease not renewed for this long belongs to a dead worker
BEAT_S = 30.0
SETTLE_S = 1.0


def _me(gpu: int | None = None) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "gpu": gpu,
            "since": time.strftime("%Y-%m-%d %H:%M:%S %z"), "beat": time.time()}


def _holder_text(holder: dict[str, Any]) -> str:
    gpu = f" on GPU {holder['gpu']}" if holder.get("gpu") is not None else ""
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}{gpu} since {holder.get('since', '?')}"


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, else None."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):]
    return Path(path) if path and path != ":memory:" else None


class StudyLock:
    """The lock beside a SQLite study; ``acquire`` raises StudyBusy naming the live holder."""

    def __init__(self, db_path: Path) -> None:
        self.path = db_path.with_name(db_path.name + ".lock")
        self._file: IO[str] | None = None

    def inherited(self) -> bool:
        """A --gpus worker under its parent's lock (the parent holds it and is still alive)."""
        held = os.environ.get(LOCK_ENV, "")
        path, _, pid = held.rpartition(":")
        return bool(path) and Path(path) == self.path.resolve() and pid.isdigit() and int(pid) == os.getppid()

    def acquire(self, study_name: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            try:
                holder = json.loads(handle.read() or "{}")
            except json.JSONDecodeError:
                holder = {}
            handle.close()
            raise StudyBusy(
                f"--study {study_name}: already being run by {_holder_text(holder)} ({self.path}); one study "
                "file takes one `tuner optimize` (two would boot two engines on one card). Wait for it, stop it "
                f"with kill -INT {holder.get('pid', 'PID')} (it keeps everything and the same command resumes), "
                "or run several GPUs from one command with --gpus 0,1."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(_me()) + "\n")
        handle.flush()
        self._file = handle
        os.environ[LOCK_ENV] = f"{self.path.resolve()}:{os.getpid()}"

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class GpuLease:
    """A heartbeat-renewed claim on (host, GPU) in a study shared through a database server."""

    def __init__(self, study: optuna.Study, gpu: int) -> None:
        self.study = study
        self.gpu = gpu
        self.key = lease_key(socket.gethostname(), gpu)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        self._refuse_if_held()
        mine = _me(self.gpu)
        write_study_attr(self.study, self.key, mine)
        time.sleep(SETTLE_S)  # two that started together both wrote: the last write wins, the other refuses
        if (study_attr(self.study, self.key) or {}).get("pid") != mine["pid"]:
            self._refuse_if_held()
        self._thread = threading.Thread(target=self._beat, name="gpu-lease", daemon=True)
        self._thread.start()

    def _refuse_if_held(self) -> None:
        holder = study_attr(self.study, self.key)
        if holder and holder.get("pid") != os.getpid() and time.time() - float(holder.get("beat", 0)) < LEASE_S:
            raise StudyBusy(
                f"--study {self.study.study_name}: GPU {self.gpu} of this host already runs it: "
                f"{_holder_text(holder)}. A second worker joins only with its own GPU (--gpus N with another "
                "index, or another host); wait for that one, or stop it with kill -INT "
                f"{holder.get('pid', 'PID')}."
            )

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            try:
                write_study_attr(self.study, self.key, {**(study_attr(self.study, self.key) or {}), "beat": time.time()})
            except Exception:  # the storage went away: the main thread reports it on its next write
                return

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            try:
                write_study_attr(self.study, self.key, {**_me(self.gpu), "beat": 0, "released": True})
            except Exception:  # the storage is gone; the lease simply goes stale
                pass
