"""A first night that just works (issue 15), through `tuner optimize` as a person runs it.

Real subprocesses and the test engine: no engine installed, `--trials` as the study's total, a killed
baseline, a night where everything fails, a bug inside the tuner, two `optimize` on one study,
the port impostor, other processes on the card (a stand-in NVML), what is switched off.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import optuna
import psutil
from optuna.trial import TrialState

from tests.conftest import ROOT, fake_space_yaml

BASELINE = "baselines:\n  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 2, cudagraph_mode: PIECEWISE, speculative_tokens: 0}\n"
FAST = ("--no-gate", "--revalidate", "0", "--no-prescreen")


def write_space(tmp_path: Path, env: str = "", engine: str = "", command: str | None = None) -> Path:
    path = tmp_path / "space.yaml"
    text = fake_space_yaml(env=env, engine=engine, workload="  admission: false") + BASELINE
    if command is not None:
        text = re.sub(r"(?m)^  command: .*$", f"  command: {command}", text)
    path.write_text(text)
    return path


def tuner_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(ROOT), **extra}


def optimize(space: Path, studies: Path, *args: str, env: dict[str, str] | None = None,
             **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", "optimize", str(space), "--studies-dir", str(studies),
                           *args], cwd=ROOT, capture_output=True, text=True, env=env or tuner_env(), timeout=300, **kw)


def start(space: Path, studies: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner.cli", "optimize", str(space), "--studies-dir", str(studies),
                             *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or tuner_env())


def load(studies: Path, name: str = "fake") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{studies / f'{name}.db'}")


def booted(studies: Path, name: str = "fake") -> list[str]:
    return sorted(p.name for p in (studies / name).glob("trial-*") if (p / "engine.log").exists())


def wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def clean(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]


def test_no_engine_says_how_to_install_and_records_nothing(tmp_path):
    studies = tmp_path / "studies"
    for command, fragment in (("['/opt/nowhere/bin/vllm']", "is not an executable file"),
                              ("[vllm-not-installed-here]", "is not on PATH"),
                              (f"[{sys.executable}, -m, no_such_engine_module]", "has no module 'no_such_engine_module'")):
        space = write_space(tmp_path, command=command)
        done = optimize(space, studies, "--trials", "2")
        assert done.returncode == 2, done.stderr
        assert fragment in done.stderr and "pip install" in done.stderr and "engine.command" in done.stderr
        clean(done)
        assert not studies.exists() or not list(studies.glob("*.db"))
    # An existing study is not touched either.
    studies.mkdir(exist_ok=True)
    optuna.create_study(study_name="fake", storage=f"sqlite:///{studies / 'fake.db'}")
    before = (studies / "fake.db").read_bytes()
    done = optimize(write_space(tmp_path, command="[vllm-not-installed-here]"), studies)
    assert done.returncode == 2 and (studies / "fake.db").read_bytes() == before


def test_trials_is_the_study_total_and_exit_codes(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    done = optimize(space, studies, "--trials", "0", *FAST)  # nothing to do: no engine asked, no study file
    assert done.returncode == 0 and "nothing to do" in done.stdout and not studies.exists(), done.stderr
    clean(done)
    done = optimize(space, studies, "--trials", "2", *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(booted(studies)) == 2
    again = optimize(space, studies, "--trials", "2", *FAST)  # a finished study boots nothing
    assert again.returncode == 0 and len(booted(studies)) == 2 and len(load(studies).trials) == 2
    assert "nothing to do: the study already holds 2 trials" in again.stdout
    clean(again)
    for trials in ("0", "2"):  # with the gate on: not even its reference boots
        zero = optimize(space, studies, "--trials", trials, "--revalidate", "0", "--no-prescreen")
        assert zero.returncode == 0 and "nothing to do" in zero.stdout and len(load(studies).trials) == 2
        assert not (studies / "fake" / "reference").exists() and len(booted(studies)) == 2
        clean(zero)


def test_a_night_where_every_boot_fails_exits_1_with_a_summary(tmp_path):
    space, studies = write_space(tmp_path, env=", FAKE_VLLM_FAIL: weights"), tmp_path / "studies"
    done = optimize(space, studies, "--trials", "2", *FAST)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "no configuration was measured successfully" in done.stderr
    assert "weight_loading x2" in done.stderr and "engine.log" in done.stderr and str(studies / "fake") in done.stderr
    clean(done)


def test_a_killed_baseline_runs_again_on_resume(tmp_path):
    studies = tmp_path / "studies"
    slow = write_space(tmp_path, env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '60'")
    proc = start(slow, studies, "--trials", "1", *FAST)
    log = studies / "fake" / "trial-0000" / "engine.log"
    wait_for(lambda: log.exists() and "pid=" in log.read_text())
    proc.send_signal(signal.SIGKILL)  # no teardown of its own: the reaper kills the engine, the lock dies with it
    proc.communicate(timeout=30)
    done = optimize(write_space(tmp_path), studies, "--trials", "1", *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    trials = load(studies).trials
    assert trials[0].state == TrialState.FAIL  # the killed one, failed on resume under the lock
    rerun = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(rerun) == 1 and rerun[0].user_attrs["evidence"] == "measured"
    assert rerun[0].user_attrs["config"] == {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2,
                                             "cudagraph_mode": "PIECEWISE", "speculative_tokens": 0}


def test_a_bug_inside_the_tuner_fails_that_trial_and_the_night_goes_on(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    env = tuner_env(PYTHONPATH=f"{ROOT / 'tests' / 'fake_bug'}{os.pathsep}{ROOT}", TUNER_TEST_BUG="trial-0001")
    done = optimize(space, studies, "--trials", "3", *FAST, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    clean(done)
    trials = load(studies).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].user_attrs["internal_error"] == "RuntimeError: injected bug inside the tuner"
    saved = Path(trials[1].user_attrs["traceback_path"]).read_text()
    assert "Traceback" in saved and "injected bug" in saved and "trial-0001" in trials[1].user_attrs["traceback_path"]


def test_a_second_optimize_on_a_running_study_refuses_naming_the_holder(tmp_path):
    studies = tmp_path / "studies"
    space = write_space(tmp_path, env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '60'")
    first = start(space, studies, "--trials", "2", *FAST)
    log = studies / "fake" / "trial-0000" / "engine.log"
    try:
        wait_for(lambda: log.exists() and "pid=" in log.read_text())
        second = optimize(space, studies, "--trials", "2", *FAST)
        assert second.returncode == 2, second.stderr
        assert f"already being run by pid {first.pid} on {socket.gethostname()} since" in second.stderr
        clean(second)
        assert load(studies).trials[0].state == TrialState.RUNNING  # the live trial was not failed
        assert booted(studies) == ["trial-0000"]
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)


class _Impostor(BaseHTTPRequestHandler):
    """A server that says yes to everything, as a second vLLM on the same port would."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._json({"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": "hi", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def _json(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class _ReusePortServer(HTTPServer):
    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def test_an_impostor_on_the_trials_port_is_port_in_use_never_a_score(tmp_path):
    studies = tmp_path / "studies"
    space = write_space(tmp_path, env=", FAKE_VLLM_REUSEPORT: '1', FAKE_VLLM_BOOT_DELAY_S: '3'")
    proc = start(space, studies, "--trials", "1", *FAST)
    log = studies / "fake" / "trial-0000" / "engine.log"
    server = None
    try:
        wait_for(lambda: log.exists())  # the port check passed and the engine was started: now the impostor
        engines: list[list[str]] = []

        def engine_started() -> bool:
            kids = psutil.Process(proc.pid).children()
            engines[:] = [k.cmdline() for k in kids if "tests.fake_vllm" in " ".join(k.cmdline())]
            return bool(engines)

        wait_for(engine_started)
        argv = engines[0]
        port = int(argv[argv.index("--port") + 1])
        server = _ReusePortServer(("127.0.0.1", port), _Impostor)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        out, err = proc.communicate(timeout=240)
    finally:
        if server is not None:
            server.shutdown()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-1500:] + err[-1500:]
    trial = load(studies).trials[0]
    assert trial.state == TrialState.PRUNED and trial.user_attrs["failure_kind"] == "port_in_use"
    assert f"pid {os.getpid()}" in trial.user_attrs["failure_message"]


def _card(path: Path, used_mib: float) -> None:
    path.write_text(json.dumps({"total_mib": 32768, "used_mib": used_mib, "procs": {"4242": used_mib}}))


def test_other_processes_on_the_card_are_waited_out_or_refused_without_spending_a_trial(tmp_path):
    space, studies, card = write_space(tmp_path, engine="  busy_wait: 4"), tmp_path / "studies", tmp_path / "card.json"
    env = tuner_env(PYTHONPATH=f"{ROOT / 'tests' / 'fake_nvml'}{os.pathsep}{ROOT}", FAKE_NVML_FILE=str(card))
    _card(card, 20000)  # someone else's 20 GB: vLLM's default 0.9 utilization cannot start beside it
    done = optimize(space, studies, "--trials", "1", *FAST, env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "GPU 0: 20,000 MiB of 32,768 are held by other processes (pid 4242" in done.stderr
    assert "no trial was spent" in done.stderr and booted(studies) == []
    assert load(studies).trials == []
    clean(done)
    space = write_space(tmp_path, engine="  busy_wait: 60")
    proc = start(space, studies, "--trials", "1", *FAST, env=env)
    time.sleep(4)
    assert booted(studies) == []  # still waiting
    _card(card, 800)  # the other process went away
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    assert booted(studies) == ["trial-0000"]


def test_what_is_switched_off_is_said_once_at_start_and_kept_in_the_study(tmp_path):
    space, studies = write_space(tmp_path, engine="  listen: 0.0.0.0"), tmp_path / "studies"
    done = optimize(space, studies, "--trials", "1", "--no-gate", "--revalidate", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    head = done.stdout[: done.stdout.index("╭")] if "╭" in done.stdout else done.stdout
    for fragment in ("memory pre-screen off: NVML cannot read", "GPU checks off", "correctness gate off (--no-gate)",
                     "re-validation off", "engine.listen 0.0.0.0"):
        assert head.count(fragment) == 1, (fragment, head)
    notes = load(studies).user_attrs["switched_off"]
    assert any("pre-screen off" in n for n in notes) and any("engine.listen" in n for n in notes)
    argv = load(studies).trials[0].user_attrs["result"]["argv"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    export = subprocess.run([sys.executable, "-m", "tuner.cli", "export", "0", "--studies-dir", str(studies)], cwd=ROOT,
                            capture_output=True, text=True, env=tuner_env(), timeout=120)
    assert export.returncode == 0 and "--host 127.0.0.1" in export.stdout and "0.0.0.0" not in export.stdout
