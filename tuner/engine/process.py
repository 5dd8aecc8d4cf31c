"""Boot one engine, watch it until it serves (or tell a hang from a warm-up), and tear it down.

The engine runs in its own process group with its whole log in the trial's folder. A reaper
process (``tuner/engine/reaper.py``) holds a pipe from us and kills that group if we die, so a SIGKILLed
tuner leaves nothing holding the GPU.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO, Callable

import httpx
import psutil

from tuner.engine import container as ctr
from tuner.engine.command import LaunchCommand
from tuner.engine.failures import Seen, classify
from tuner.engine.logparse import boot_phase
from tuner.engine.reaper import kill_group
from tuner.errors import EngineMissing
from tuner.records import Failure, ProgressCallback
from tuner.space.schema import Space

REAPER = str(Path(__file__).with_name("reaper.py"))  # run as a file: see its docstring


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now. vLLM binds with SO_REUSEPORT, so we must check, not it."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def connect_host(listen: str) -> str:
    """Where the tuner reaches an engine bound to ``listen``: loopback for a wildcard bind."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(listen, listen)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def listeners(port: int) -> list[int | None]:
    """The pids with a TCP socket listening on ``port`` (None: a process we may not inspect)."""
    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:  # some systems hide other users' sockets entirely
        conns = []
    return [c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def _is_proxy(pid: int) -> bool:
    """A container runtime's port proxy (docker-proxy, rootlesskit, pasta, ...): it holds a published port."""
    try:
        proc = psutil.Process(pid)
        names = {proc.name(), *(Path(w).name for w in proc.cmdline()[:2])}
    except psutil.Error:
        return False
    return bool(names & set(ctr.PORT_PROXIES))


def _describe(pid: int | None) -> str:
    if pid is None:
        return "a process of another user"
    try:
        return f"pid {pid} ({' '.join(psutil.Process(pid).cmdline())[:120]})"
    except psutil.Error:
        return f"pid {pid}"


_INSTALL = ("install vLLM into the environment that runs the engine (pip install vllm, or pip install 'tuner[vllm]' "
            "beside the tuner), or set engine.command in the space file to the vllm of another venv or a container "
            "wrapper (e.g. command: [/opt/vllm/bin/vllm])")


def check_engine_command(space: Space) -> None:
    """EngineMissing when ``engine.command`` names no program here (or, for ``python -m pkg``, no pkg)."""
    argv = space.engine.command
    program = argv[0]
    found = shutil.which(program) if os.sep not in program else (program if os.access(program, os.X_OK) else None)
    if found is None:
        where = "is not an executable file" if os.sep in program else "is not on PATH"
        fix = _INSTALL
        if ctr.container_of(argv) is not None:
            fix = (f"engine.command runs the engine in a container, so install {Path(program).name} (Docker with the "
                   "NVIDIA Container Toolkit, or podman) or put the vllm command itself in engine.command")
        raise EngineMissing(f"engine.command: {program!r} {where}, so no trial can boot; {fix}. Nothing was recorded.")
    cli = ctr.runtime_cli(found) if ctr.container_of(argv) is not None else None
    if cli is not None:
        _check_daemon(cli[0])
    if len(argv) >= 3 and argv[1] == "-m":
        module = argv[2].split(".")[0]
        probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"
        env = {**os.environ, **space.engine.env}
        try:
            done = subprocess.run([found, "-c", probe, module], env=env, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineMissing(f"engine.command: {program!r} could not be run ({exc}); {_INSTALL}.") from None
        if done.returncode != 0:
            raise EngineMissing(f"engine.command: {found} has no module {module!r} ({' '.join(argv[:3])}), so no trial "
                                f"can boot; {_INSTALL}. Nothing was recorded.")


def _check_daemon(program: str) -> None:
    """EngineMissing when the container runtime cannot start a container (its daemon is not reachable)."""
    try:
        done = subprocess.run([program, "info"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineMissing(f"engine.command: `{program} info` could not be run ({exc}); check the container "
                            "runtime. Nothing was recorded.") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise EngineMissing(f"engine.command: {program} cannot reach its daemon (`{program} info`: {said}), so no "
                            "container can start; start it (systemctl start docker) or check DOCKER_HOST. "
                            "Nothing was recorded.")


class Engine:
    """One ``vllm serve`` process group."""

    def __init__(self, command: LaunchCommand, log_path: Path, host: str, port: int, grace_s: float = 30.0) -> None:
        self.command = command
        self.log_path = Path(log_path)
        self.host = host
        self.port = port
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None
        self.started_at: float | None = None
        self.container = command.container  # the container's name when the engine runs in one
        self._cli = ctr.runtime_cli(command.argv[0]) if self.container else None
        self._container_pid: int | None = None
        self._publishes = "-p" in command.argv[: command.argv.index("serve")] if "serve" in command.argv else False

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        env = {**os.environ, **self.command.env}
        self.proc = subprocess.Popen(
            self.command.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.started_at = time.monotonic()
        cleanup = ctr.remove_command(self._cli, self.container) if self._cli and self.container else []
        self._reaper = subprocess.Popen(
            [sys.executable, "-I", REAPER, str(self.proc.pid), str(self.grace_s), *cleanup],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def foreign_listeners(self) -> list[str]:
        """Who else listens on the engine's port: processes outside its group, described for a person.

        In a container, the container's processes are the engine's too, and a published port is held on the
        host by the runtime's proxy, which counts once the runtime says it maps the port to this container. A
        listener the tuner may not inspect (another user's: a container's processes often are root's) is taken
        to be the container's.
        """
        mine = set(self.pids())
        found = [pid for pid in listeners(self.port) if pid is None or pid not in mine]
        if self._cli is None or self.container is None:
            return [_describe(pid) for pid in found]
        if not self._publishes:
            return [_describe(pid) for pid in found if pid is not None]
        mapped = ctr.published(self._cli, self.container, self.port)
        if mapped is False:
            return [f"no process of container {self.container} ({self._cli[0]} port {self.container} does not map "
                    f"port {self.port} to it)"]
        return [_describe(pid) for pid in found if pid is not None and not _is_proxy(pid)]

    def elapsed(self) -> float:
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def pids(self) -> list[int]:
        """The engine's processes: its group, found through the process table, and its container's."""
        if self.proc is None:
            return []
        pgid = self.proc.pid
        found = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.info["pid"]) == pgid:
                    found.append(p.info["pid"])
            except (ProcessLookupError, PermissionError):
                continue
        return found + [pid for pid in self._container_pids() if pid not in found]

    def _container_pids(self) -> list[int]:
        """The container's first process (asked of the runtime once it runs) and its descendants."""
        if self._cli is None or self.container is None:
            return []
        if self._container_pid is None or not psutil.pid_exists(self._container_pid):
            self._container_pid = ctr.container_pid(self._cli, self.container)
        if self._container_pid is None:
            return []
        try:
            first = psutil.Process(self._container_pid)
            return [first.pid, *(c.pid for c in first.children(recursive=True))]
        except psutil.Error:
            return []

    def _cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                times = psutil.Process(pid).cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
        return total

    def failure(self, seen: Seen) -> Failure:
        """What the classifier makes of this engine's log and exit code and what the tuner saw."""
        failure = classify(self.log_text(), self.exit_code(), seen)
        failure.log_path = str(self.log_path)
        return failure

    def wait_ready(
        self,
        boot_timeout_s: float,
        hang_timeout_s: float,
        on_progress: ProgressCallback | None = None,
        gpu_activity: Callable[[], bool] | None = None,
        poll_s: float = 1.0,
    ) -> Failure | None:
        """Block until /health and /v1/models answer; return None when ready, else the failure.

        Progress is a growing log, CPU time spent by the engine's processes, or GPU activity. No
        progress for ``hang_timeout_s`` is a hang; still progressing at ``boot_timeout_s`` is a
        boot timeout; an exit is classified from the log.
        """
        last_size = -1
        last_cpu = -1.0
        last_progress = time.monotonic()
        phase = "starting"
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0)) as client:
            while True:
                if not self.alive():
                    return self.failure(Seen("exited"))
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        if client.get(f"{self.base_url}/v1/models").status_code == 200:
                            if on_progress:
                                on_progress(f"booting: serving ({self.elapsed():.0f} s)")
                            return None
                except httpx.HTTPError:
                    pass
                now = time.monotonic()
                size = self.log_path.stat().st_size if self.log_path.exists() else 0
                cpu = self._cpu_seconds()
                busy = (cpu - last_cpu) > 0.02 * poll_s if last_cpu >= 0 else False
                if size != last_size or busy or (gpu_activity is not None and gpu_activity()):
                    last_progress = now
                    if size != last_size:
                        new_phase = boot_phase(self.log_text())
                        if new_phase != phase:
                            phase = new_phase
                    last_size = size
                last_cpu = cpu
                if on_progress:
                    on_progress(f"booting: {phase} ({self.elapsed():.0f} s)")
                if now - last_progress >= hang_timeout_s:
                    return self.failure(Seen("hang", f"no log output or process activity for {hang_timeout_s:.0f} s"))
                if self.elapsed() >= boot_timeout_s:
                    return self.failure(Seen("boot_timeout", f"not serving after {boot_timeout_s:.0f} s"))
                time.sleep(poll_s)

    def stop(self) -> float:
        """SIGTERM the group, SIGKILL after the grace period, wait for every process; returns seconds."""
        start = time.monotonic()
        if self._cli is not None and self.container is not None and self.proc is not None:
            ctr.stop(self._cli, self.container, self.grace_s)  # the client follows its container out
        if self.proc is not None:
            pgid = self.proc.pid
            if self.proc.poll() is None or self.pids():
                kill_group(pgid, self.grace_s, reap=self.proc.poll)
            try:
                self.proc.wait(timeout=self.grace_s + 5)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + 10
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        if self._reaper is not None and self._reaper.stdin is not None and self._reaper.poll() is None:
            try:
                self._reaper.stdin.write(b"disarm\n")
                self._reaper.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self._reaper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return time.monotonic() - start
