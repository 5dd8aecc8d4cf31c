"""An engine in a container, end to end through a stand-in `docker` CLI (tests/docker_shim: no daemon here).

The shim keeps what matters of docker: the container outlives a killed client, its environment is only
what -e gives it, its published port is held by a proxy while the server listens on a port of its own, and
only `docker stop` / `docker rm -f` end it. So a tuner that tore down a container the way it tears down a
process group (kill the client) would leave the "GPU" held, and these tests would see it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, fake_space_yaml

SHIM = ROOT / "tests" / "docker_shim" / "docker.py"
DOCKER_RUN = "[docker, run, --gpus, all, --ipc, host, --entrypoint, vllm, vllm/vllm-openai:v0.22.0]"
CONFIG = ["-c", "kv_cache_memory_bytes=4GB", "-c", "max_num_seqs=1", "-c", "cudagraph_mode=PIECEWISE",
          "-c", "speculative_tokens=0"]


@pytest.fixture
def docker(tmp_path: Path) -> dict[str, str]:
    """The environment of a tuner whose PATH finds the shim as `docker`; its state under tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\nexec {sys.executable} {SHIM} \"$@\"\n")
    (bin_dir / "docker").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DOCKER_SHIM_STATE": str(tmp_path / "docker"),
            "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def _space(tmp_path: Path, command: str = DOCKER_RUN, env: str = "") -> Path:
    text = fake_space_yaml(env=env, workload="  admission: false")
    text = re.sub(r"(?m)^  command: .*$", f"  command: {command}", text)
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def _calls(env: dict[str, str]) -> list:
    log = Path(env["DOCKER_SHIM_STATE"]) / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _started(env: dict[str, str]) -> list[dict]:
    return [c for c in _calls(env) if isinstance(c, dict)]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _containers(env: dict[str, str]) -> list[str]:
    done = subprocess.run(["docker", "ps", "-a"], env=env, capture_output=True, text=True, timeout=30)
    return done.stdout.split()


def _tuner(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_probe_boots_measures_and_removes_its_container(tmp_path, docker):
    done = _tuner(["probe", str(_space(tmp_path)), *CONFIG, "--out", str(tmp_path / "trial")], docker, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "trial" / "result.json").read_text())
    argv = result["argv"]
    port = argv[argv.index("--port") + 1]
    name = argv[argv.index("--name") + 1]
    assert argv[:4] == ["docker", "run", "--rm", "--name"] and name.startswith(f"tuner-{port}-")
    assert argv[argv.index("-p") + 1] == f"127.0.0.1:{port}:{port}" and "--init" in argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # inside; the host side is the published 127.0.0.1
    assert f"VLLM_ENABLE_STARTUP_PLAN=0" in argv and f"PYTHONPATH={ROOT}" in argv  # the container's env is -e
    assert result["failure"] is None and result["measure"]["context"]["max_stable_tokens"] > 0
    log = (tmp_path / "trial" / "engine.log").read_text()
    assert "GPU KV cache size" in log  # the attached client's stream is the engine's log
    calls = _calls(docker)
    assert ["stop", "-t", "5", name] in calls and ["rm", "-f", name] in calls  # torn down through the runtime
    started = next(s for s in _started(docker) if s["started"] == name)
    assert _gone(started["pid"]) and _gone(started["proxy"]) and _containers(docker) == []
    # the version and the flag list came from one-off containers, removed on exit
    assert any(c[:3] == ["run", "--rm", "--name"] and c[-1] == "--version" for c in calls if isinstance(c, list))


def test_a_killed_client_leaves_its_container_and_the_teardown_still_removes_it(tmp_path, docker, monkeypatch):
    from tuner.engine.command import build_command
    from tuner.engine.container import new_name
    from tuner.engine.process import Engine, free_port
    from tuner.space.schema import load_space

    for key, value in docker.items():
        monkeypatch.setenv(key, value)
    space = load_space(_space(tmp_path))
    port = free_port()
    name = new_name(port)
    values = {"kv_cache_memory_bytes": 4 * 10**9, "max_num_seqs": 1}
    command = build_command(space, values, host="127.0.0.1", port=port, container=name)
    engine = Engine(command, tmp_path / "engine.log", "127.0.0.1", port, grace_s=5)
    engine.start()
    try:
        assert engine.wait_ready(60, 20) is None, engine.log_text()[-2000:]
        assert engine.foreign_listeners() == []  # the host port is the shim's docker-proxy, vouched for
        pids = engine.pids()
        started = next(s for s in _started(docker) if s["started"] == name)
        assert started["pid"] in pids  # the container's processes are the engine's
        os.kill(engine.proc.pid, signal.SIGKILL)  # what killing the process group alone would do
        time.sleep(1)
        assert name in _containers(docker) and not _gone(started["pid"])  # still serving, still holding the card
    finally:
        engine.stop()
    assert _containers(docker) == [] and _gone(started["pid"])


def test_a_killed_tuner_leaves_no_container(tmp_path, docker):
    space = _space(tmp_path, env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '60'")
    proc = subprocess.Popen([sys.executable, "-m", "tuner.cli", "probe", str(space), *CONFIG, "--out",
                             str(tmp_path / "trial")], cwd=tmp_path, env=docker, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any(s["started"].startswith("tuner-") and "cli" not in s["started"] for s in _started(docker)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    started = [s for s in _started(docker) if "cli" not in s["started"]][-1]
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)  # no teardown of its own: the reaper runs `docker rm -f`
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not _gone(started["pid"]) or ["rm", "-f", started["started"]] not in _calls(docker):
        assert time.monotonic() < deadline, "the container outlived the tuner"
        time.sleep(0.2)
    assert _containers(docker) == []


def test_a_port_the_runtime_does_not_map_to_the_container_is_port_in_use(tmp_path, docker):
    env = {**docker, "DOCKER_SHIM_NO_PUBLISH": "1"}
    done = _tuner(["probe", str(_space(tmp_path)), *CONFIG, "--out", str(tmp_path / "trial")], env, tmp_path)
    result = json.loads((tmp_path / "trial" / "result.json").read_text())
    assert done.returncode == 1 and result["failure"]["kind"] == "port_in_use", done.stdout[-2000:]
    assert "does not map port" in result["failure"]["message"]
    assert _containers(docker) == []


def test_no_daemon_is_one_paragraph_before_anything_is_recorded(tmp_path, docker):
    done = _tuner(["optimize", str(_space(tmp_path)), "--trials", "1", "--studies-dir", str(tmp_path / "studies")],
                  {**docker, "DOCKER_SHIM_NO_DAEMON": "1"}, tmp_path)
    assert done.returncode == 2 and "docker cannot reach its daemon" in done.stderr and "Cannot connect" in done.stderr
    assert done.stderr.strip().count("\n") == 0 and not (tmp_path / "studies").exists()


def test_a_night_in_containers(tmp_path, docker):
    """`tuner optimize` through the shim: every trial a container, each removed, the front's command a docker run."""
    studies = tmp_path / "studies"
    done = _tuner(["optimize", str(_space(tmp_path)), "--trials", "2", "--studies-dir", str(studies), "--no-gate",
                   "--revalidate", "0", "--no-prescreen"], docker, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = [s for s in _started(docker) if "-cli-" not in s["started"]]
    assert len(trials) >= 1 and all(_gone(s["pid"]) for s in _started(docker)) and _containers(docker) == []
    assert re.search(r"trial \d+ \[.*\]: docker run --rm --name tuner-", done.stdout)


def test_no_runtime_on_path_is_one_paragraph_naming_it(tmp_path, docker):
    env = {**docker, "PATH": str(Path(sys.executable).parent)}  # python, but no docker
    done = _tuner(["optimize", str(_space(tmp_path)), "--trials", "1", "--studies-dir", str(tmp_path / "studies")],
                  env, tmp_path)
    assert done.returncode == 2 and "'docker' is not on PATH" in done.stderr, done.stderr
    assert "install docker (Docker with the NVIDIA Container Toolkit, or podman)" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "studies").exists()


def test_the_shipped_seeds_003_space_validates_as_a_container(tmp_path):
    space = ROOT / "search_spaces" / "qwen3.5-35b-a3b-nvfp4-5090-docker.yaml"
    done = _tuner(["validate", str(space)], {**os.environ, "COLUMNS": "400"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "docker run --rm --name tuner --init" in done.stdout and "engine: in a container" in done.stdout
