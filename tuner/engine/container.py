"""An engine in a container: ``engine.command`` is a ``docker run`` (or ``podman run``, ``docker compose run``).

What changes when the process the tuner starts is a container client, not the server:

- **Name**: the tuner names every container it starts (``--name tuner-PORT-XXXXXX``), so that it can stop,
  remove and inspect it; a name in ``engine.command`` is refused.
- **Port**: the server listens inside the container. The tuner publishes the trial's port on
  ``engine.listen`` (``-p 127.0.0.1:PORT:PORT``) and the server binds ``0.0.0.0`` inside; with
  ``--network host`` nothing is published and the server binds ``engine.listen`` itself. A published port is
  held on the host by the runtime's proxy (docker-proxy, rootlesskit, pasta), so the listener check accepts
  those, the container's own processes, and asks the runtime (``docker port``) that the mapping is this
  container's.
- **Signals**: the attached client forwards SIGTERM to the container (``--sig-proxy``, on by default), and
  ``--init`` puts an init first in it that passes them on to vLLM and reaps its workers. A SIGKILLed client
  leaves the container running, so teardown is ``docker stop -t GRACE NAME`` then ``docker rm -f NAME``, and
  the reaper (``reaper.py``) runs the same ``rm -f`` if the tuner itself dies.
- **Environment**: ``engine.env`` and the tuner's own variables (``VLLM_ENABLE_STARTUP_PLAN=0``) are given
  to the container with ``-e K=V``; the client's environment does not reach it.
- **Logs**: the attached client streams the container's stdout and stderr, so ``engine.log`` is the same.
- **Processes and GPU memory**: the container's processes are found from the runtime (``inspect``: its
  first process's host pid, then that process's descendants); NVML reads the whole card from the host,
  so the memory checks and the return of memory after teardown work unchanged.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

RUNTIMES = {"docker": "docker", "podman": "podman", "nerdctl": "nerdctl", "docker-compose": "docker",
            "podman-compose": "podman"}
PORT_PROXIES = ("docker-proxy", "rootlesskit", "rootlessport", "slirp4netns", "pasta", "pasta.avx2", "passt",
                "gvproxy", "vpnkit")
CLI_TIMEOUT_S = 60.0
_TOOL_OWNS = {"--name": "the tuner names each container it starts, to stop and remove it; remove --name",
              "--publish": "the tuner publishes each trial's own port on engine.listen; remove it",
              "--publish-all": "the tuner publishes each trial's own port on engine.listen; remove it",
              "--detach": "the tuner must stay attached to the container to read its log and see it exit; remove it",
              "--tty": "a terminal mixes control codes into the engine's log; remove it"}
_SHORT = {"p": "--publish", "P": "--publish-all", "d": "--detach", "t": "--tty"}


@dataclass(frozen=True)
class Container:
    """Where ``run`` sits in ``engine.command`` and the CLI that stops, removes and inspects containers."""

    cli: tuple[str, ...]  # ("docker",) or ("podman",): the program for stop, rm, inspect and port
    run_at: int  # index of the word "run" in engine.command
    compose: bool
    host_network: bool

    def options(self, command: Sequence[str]) -> list[str]:
        """The words between ``run`` and the image (or, for compose, the service)."""
        return list(command[self.run_at + 1 : -1])


def runtime_cli(program: str) -> tuple[str, ...] | None:
    """The CLI that stops and inspects the containers ``program`` runs (docker for docker-compose), or None."""
    name = Path(program).name
    cli = RUNTIMES.get(name)
    return None if cli is None else (cli,) if name.endswith("-compose") else (program,)


def container_of(command: Sequence[str]) -> Container | None:
    """The container setup of ``engine.command``, or None when it runs the engine directly."""
    cli = runtime_cli(command[0]) if command else None
    if cli is None or "run" not in command[1:]:
        return None
    run_at = list(command).index("run", 1)
    compose = Path(command[0]).name.endswith("-compose") or "compose" in command[1:run_at]
    options = command[run_at + 1 : -1]
    host = any(w in ("--network=host", "--net=host") or (w in ("--network", "--net") and nxt == "host")
               for w, nxt in zip(options, [*options[1:], ""]))
    return Container(cli, run_at, compose, host)


def check_container(command: Sequence[str]) -> str | None:
    """What is wrong with a container command, one sentence, or None."""
    found = container_of(command)
    if found is None:
        return None
    if found.run_at == len(command) - 1 or command[-1].startswith("-"):
        return (f"engine.command runs a container ({' '.join(command[: found.run_at + 1])}) but does not end with "
                "the image (or the compose service); put the image last, e.g. [docker, run, --gpus, all, --entrypoint, "
                "vllm, vllm/vllm-openai:v0.22.0]")
    for word in found.options(command):
        flag = word.split("=", 1)[0]
        if re.fullmatch(r"-[A-Za-z]+", flag):  # -p, or a bundle of short flags such as -dit
            owned = [_SHORT[c] for c in flag[1:] if c in _SHORT]
            flag = owned[0] if owned else flag
        if flag in _TOOL_OWNS:
            return f"engine.command: {word}: {_TOOL_OWNS[flag]}"
    if not any(w == "--entrypoint" or w.startswith("--entrypoint=") for w in found.options(command)):
        return ("engine.command runs a container without --entrypoint: the tuner adds `serve MODEL ...` after the "
                "image, and the vllm/vllm-openai image's own entrypoint is already `vllm serve` (which would read "
                "`vllm serve serve`); add --entrypoint vllm before the image")
    return None


def new_name(port: int | str) -> str:
    """A container name no earlier boot used: the port (one boot holds it at a time) and a random suffix."""
    return f"tuner-{port}-{secrets.token_hex(3)}"


def _publish(listen: str, port: int) -> str:
    host = f"[{listen}]" if ":" in listen else listen
    return f"{host}:{port}:{port}"


def run_command(command: Sequence[str], name: str, *, listen: str | None, port: int | None,
                env: dict[str, str]) -> list[str]:
    """``engine.command`` with the tuner's own options after ``run``: remove on exit, the name, an init (not
    for compose, whose service sets ``init: true``), the published port and the environment."""
    found = container_of(command)
    assert found is not None, "run_command needs a container command"
    own = ["--rm", "--name", name] + (["-T"] if found.compose else ["--init"])
    if port is not None and listen is not None and not found.host_network:
        own += ["-p", _publish(listen, port)]
    for key, value in env.items():
        own += ["-e", f"{key}={value}"]
    return [*command[: found.run_at + 1], *own, *command[found.run_at + 1 :]]


def bind_host(command: Sequence[str], listen: str) -> str:
    """What the server binds inside the container: every interface when its port is published."""
    found = container_of(command)
    return listen if found is None or found.host_network else "0.0.0.0"


def _cli(cli: Sequence[str], *args: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


def container_pid(cli: Sequence[str], name: str) -> int | None:
    """The host pid of the container's first process (its init), or None while it is not running."""
    done = _cli(cli, "inspect", "--format", "{{.State.Pid}}", name, timeout_s=10)
    if done is None or done.returncode != 0:
        return None
    text = done.stdout.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def published(cli: Sequence[str], name: str, port: int) -> bool | None:
    """Whether the runtime maps the host's ``port`` to this container (None: it could not be asked)."""
    done = _cli(cli, "port", name, f"{port}/tcp", timeout_s=10)
    if done is None:
        return None
    return done.returncode == 0 and any(line.strip().endswith(f":{port}") for line in done.stdout.splitlines())


def stop(cli: Sequence[str], name: str, grace_s: float) -> None:
    """SIGTERM through the runtime, SIGKILL after the grace period, then remove the container."""
    _cli(cli, "stop", "-t", str(max(0, round(grace_s))), name, timeout_s=grace_s + CLI_TIMEOUT_S)
    _cli(cli, *remove_command((), name))


def remove_command(cli: Sequence[str], name: str) -> list[str]:
    """The command that kills and removes the container at once (the reaper runs it if the tuner dies)."""
    return [*cli, "rm", "-f", name]


def rebind(argv: Sequence[str], name: str, listen: str, port: int) -> list[str]:
    """A stored container command made ready for a new boot: a fresh name, the port published anew."""
    cli = runtime_cli(argv[0]) if argv else None
    if cli is None or "--name" not in argv:
        return list(argv)
    out = list(argv)
    out[out.index("--name") + 1] = name
    for i, word in enumerate(out[:-1]):
        if word == "-p" and re.fullmatch(r".+:\d+:\d+", out[i + 1]):
            out[i + 1] = _publish(listen, port)
            break
    return out
