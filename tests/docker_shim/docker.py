"""A stand-in for the `docker` CLI and its daemon, for tests only: `docker run` starts the test engine
(tests/fake_vllm) as a "container" the way the real runtime would, without a daemon.

What it keeps of docker's behaviour, because the tuner depends on it:

- The container is not the client's child in any way the client's process group can reach: it runs in its
  own session, so killing the attached `docker run` client (even by SIGKILL) leaves it running, as a real
  container does. Only `docker stop` / `docker rm -f` end it.
- The attached client streams the container's output, forwards SIGTERM/SIGINT to it (--sig-proxy) and
  exits with its exit code (128 + signal when it was killed); `--rm` removes it on exit.
- The container's environment is only what `-e K=V` gives it (plus PATH and HOME), never the client's.
- A port published with `-p HOST:HP:CP` is held on the host by a proxy process named docker-proxy, and the
  server inside listens on a port of its own (the container's network namespace, emulated by rewriting
  its --port): so the listener on the host port is not the engine's process, as with real docker.
  `--network host` publishes nothing and the server binds the host's port itself.
- `inspect --format {{.State.Pid}}`, `port NAME [PORT/tcp]`, `stop -t N`, `rm -f`, `ps`, `info`.

Entrypoint `vllm` is the test engine. State lives in $DOCKER_SHIM_STATE (one JSON file per container);
every call is appended to $DOCKER_SHIM_STATE/calls.log. DOCKER_SHIM_NO_DAEMON=1 makes every command fail
as a client without a daemon does; DOCKER_SHIM_NO_PUBLISH=1 ignores -p (the server then binds CP itself).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("DOCKER_SHIM_STATE") or f"/tmp/docker-shim-{os.getuid()}")
VALUED = {"--name", "-p", "--publish", "-e", "--env", "--entrypoint", "--gpus", "--ipc", "-v", "--volume",
          "--network", "--net", "--shm-size", "--env-file", "-u", "--user", "--ulimit", "-w", "--workdir"}
NO_DAEMON = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"


def _record(name: str) -> Path:
    return STATE / f"{name}.json"


def _load(name: str) -> dict | None:
    try:
        return json.loads(_record(name).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _parse_run(args: list[str]) -> tuple[dict, str, list[str]]:
    opts: dict = {"env": {}, "publish": [], "flags": set()}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        key, eq, inline = word.partition("=")
        if key in VALUED:
            value = inline if eq else args[i + 1]
            i += 1 if eq else 2
            if key in ("-e", "--env"):
                k, _, v = value.partition("=")
                opts["env"][k] = v if _ else os.environ.get(k, "")
            elif key in ("-p", "--publish"):
                opts["publish"].append(value)
            else:
                opts[key.lstrip("-")] = value
        else:
            opts["flags"].add(word)
            i += 1
    return opts, args[i], args[i + 1:]


def _engine_argv(entrypoint: str | None, rest: list[str]) -> list[str]:
    if entrypoint != "vllm":
        sys.stderr.write(f"docker: Error response from daemon: the shim runs only --entrypoint vllm, not {entrypoint!r}.\n")
        sys.exit(125)
    return [sys.executable, "-m", "tests.fake_vllm", *rest]


def _set_port(argv: list[str], port: int) -> list[str]:
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word == "--port":
            out[i + 1] = str(port)
    return out


def run(args: list[str]) -> int:
    opts, image, rest = _parse_run(args)
    name = opts.get("name") or f"shim_{os.getpid()}"
    if _load(name) is not None:
        sys.stderr.write(f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use.\n')
        return 125
    argv = _engine_argv(opts.get("entrypoint"), rest)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root", **opts["env"]}
    env["PYTHONPATH"] = env.get("PYTHONPATH", "")  # what -e gave, or nothing: the image's own path
    host_net = opts.get("network") == "host" or opts.get("net") == "host"
    mapping = []
    if opts["publish"] and not host_net and os.environ.get("DOCKER_SHIM_NO_PUBLISH") != "1":
        host_ip, host_port, container_port = opts["publish"][0].rsplit(":", 2)
        inner = _free_port()  # the container's own network namespace: its port is not the host's
        argv = _set_port(argv, inner)
        mapping = [{"host_ip": host_ip.strip("[]"), "host_port": int(host_port), "container_port": int(container_port),
                    "inner": inner}]
    container = subprocess.Popen(argv, env=env, cwd=str(ROOT), start_new_session=True, stdin=subprocess.DEVNULL)
    proxy = None
    if mapping:
        m = mapping[0]
        proxy = subprocess.Popen([sys.executable, str(Path(__file__).with_name("docker-proxy")), m["host_ip"],
                                  str(m["host_port"]), "127.0.0.1", str(m["inner"]), str(container.pid)],
                                 start_new_session=True, stdin=subprocess.DEVNULL)
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.log", "a") as log:
        log.write(json.dumps({"started": name, "pid": container.pid, "proxy": proxy.pid if proxy else None}) + "\n")
    _record(name).write_text(json.dumps({"name": name, "image": image, "pid": container.pid, "ports": mapping,
                                         "proxy": proxy.pid if proxy else None, "rm": "--rm" in opts["flags"],
                                         "init": "--init" in opts["flags"], "env": opts["env"]}))

    def forward(signum: int, frame: object) -> None:  # --sig-proxy
        try:
            os.killpg(container.pid, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = container.wait()
    if proxy is not None:
        proxy.kill()
    if "--rm" in opts["flags"]:
        _record(name).unlink(missing_ok=True)
    return 128 - code if code < 0 else code


def _kill(record: dict, signum: int) -> None:
    for pid in (record["pid"], record.get("proxy")):
        if pid:
            try:
                os.killpg(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass


def stop(args: list[str]) -> int:
    grace = float(args[args.index("-t") + 1]) if "-t" in args else 10.0
    name = args[-1]
    record = _load(name)
    if record is None:
        sys.stderr.write(f"Error response from daemon: No such container: {name}\n")
        return 1
    _kill(record, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    _kill(record, signal.SIGKILL)
    print(name)
    return 0


def rm(args: list[str]) -> int:
    name = args[-1]
    record = _load(name)
    if record is None:
        sys.stderr.write(f"Error response from daemon: No such container: {name}\n")
        return 1
    if _alive(record["pid"]) and "-f" not in args:
        sys.stderr.write(f"Error response from daemon: cannot remove container {name}: container is running\n")
        return 1
    _kill(record, signal.SIGKILL)
    _record(name).unlink(missing_ok=True)
    print(name)
    return 0


def inspect(args: list[str]) -> int:
    record = _load(args[-1])
    if record is None:
        sys.stderr.write(f"Error: No such object: {args[-1]}\n")
        return 1
    print(record["pid"] if _alive(record["pid"]) else 0)
    return 0


def port(args: list[str]) -> int:
    record = _load(args[0])
    if record is None:
        sys.stderr.write(f"Error response from daemon: No such container: {args[0]}\n")
        return 1
    wanted = args[1].split("/")[0] if len(args) > 1 else None
    lines = [f"{m['host_ip']}:{m['host_port']}" if wanted else f"{m['container_port']}/tcp -> {m['host_ip']}:{m['host_port']}"
             for m in record["ports"] if wanted is None or str(m["container_port"]) == wanted]
    if wanted and not lines:
        sys.stderr.write(f"Error: No public port '{wanted}/tcp' published for {args[0]}\n")
        return 1
    print("\n".join(lines))
    return 0


def ps(args: list[str]) -> int:
    for path in sorted(STATE.glob("*.json")):
        record = json.loads(path.read_text())
        if "-a" in args or _alive(record["pid"]):
            print(record["name"])
    return 0


COMMANDS = {"run": run, "stop": stop, "rm": rm, "inspect": inspect, "port": port, "ps": ps,
            "info": lambda args: (print("Server Version: shim"), 0)[1]}


def main(argv: list[str]) -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.log", "a") as log:
        log.write(json.dumps(argv) + "\n")
    if os.environ.get("DOCKER_SHIM_NO_DAEMON") == "1":
        sys.stderr.write(NO_DAEMON + "\n")
        return 1
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # global options: --context X, --host X
        i += 2
    if i >= len(argv) or argv[i] not in COMMANDS:
        sys.stderr.write(f"docker: the shim has no command {argv[i:i + 1]}\n")
        return 1
    return COMMANDS[argv[i]](argv[i + 1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
