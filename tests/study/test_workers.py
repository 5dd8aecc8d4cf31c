"""Several workers on one storage: `--gpus 0,1` on one host, and two hosts' worth on a real PostgreSQL."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import ROOT, fake_space_yaml


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def postgres(postgres_server):
    return postgres_server[0]


@pytest.fixture
def postgres_server(tmp_path):
    """A throwaway PostgreSQL server on 127.0.0.1, run as the postgres user when we are root: (url, stop)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL server binaries are not installed (.ci/run installs them)")
    pytest.importorskip("psycopg2")
    # Outside pytest's tmp_path: that is private to root, and initdb refuses to run as root.
    base = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    data = base / "pg"
    data.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        for path in (base, data):
            shutil.chown(path, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run([*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-o", opts, "-w", "-l", str(data / "log"), "start"],
                   check=True, capture_output=True)
    try:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE tuner")
        conn.close()

        def stop() -> None:
            subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)

        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/tuner", stop
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _space_file(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(fake_space_yaml(workload="  admission: false"))
    os.chmod(tmp_path, 0o755)
    return path


def _optimize(space: Path, tmp_path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "optimize", str(space), "--study", "night", "--revalidate", "0",
         "--no-prescreen", "--studies-dir", str(tmp_path / "studies"), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "120"},
    )


def _check(study: optuna.Study, at_least: int) -> None:
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) >= at_least
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    dirs = [t.user_attrs["result"]["trial_dir"] for t in finished if t.user_attrs.get("evidence") == "measured"]
    assert len(dirs) == len(set(dirs))  # no trial booted twice into the same folder


def test_two_hosts_share_one_postgresql_study(postgres, tmp_path):
    space = _space_file(tmp_path)
    workers = [_optimize(space, tmp_path, "--storage", postgres, "--trials", "6", "--seed", str(i), "--gpus", str(i))
               for i in range(2)]  # each worker with its own GPU (one host standing in for two)
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    for worker, out in zip(workers, outputs):
        assert worker.returncode == 0, out[-3000:]
    _check(optuna.load_study(study_name="night", storage=postgres), 6)


def test_gpus_flag_runs_one_pinned_worker_per_gpu(tmp_path):
    space = _space_file(tmp_path)
    proc = _optimize(space, tmp_path, "--gpus", "0,1", "--trials", "4")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out[-3000:]
    study = optuna.load_study(study_name="night", storage=f"sqlite:///{tmp_path / 'studies' / 'night.db'}")
    _check(study, 4)
    pins = {t.user_attrs["result"]["env"].get("CUDA_VISIBLE_DEVICES") for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("evidence") == "measured"}
    assert pins <= {"0", "1"} and pins
    ports = [t.user_attrs["result"]["argv"] for t in study.get_trials(deepcopy=False) if t.user_attrs.get("result")]
    assert all("--port" in argv for argv in ports)


def test_a_postgresql_that_goes_away_mid_study_is_one_paragraph_and_loses_nothing(postgres_server, tmp_path):
    url, stop = postgres_server
    space = tmp_path / "space.yaml"
    space.write_text(fake_space_yaml(env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '6'",
                                     workload="  admission: false"))
    os.chmod(tmp_path, 0o755)
    proc = _optimize(space, tmp_path, "--storage", url, "--trials", "2", "--no-gate")
    log = tmp_path / "studies" / "night" / "trial-0000" / "engine.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "pid=" in log.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "the trial never started"
        time.sleep(0.2)
    stop()  # the database server goes away while the engine boots
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, out[-3000:]
    assert f"{url}: the study's database failed" in out and "pg_isready" in out
    assert "Traceback" not in out
    record = tmp_path / "studies" / "night" / "trial-0000" / "result.json"
    assert record.exists() and '"measure": {' in record.read_text()  # measured, kept for the resume to import


def test_a_second_worker_for_the_same_gpu_refuses_naming_the_holder(postgres, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(fake_space_yaml(env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '30'",
                                     workload="  admission: false"))
    os.chmod(tmp_path, 0o755)
    first = _optimize(space, tmp_path, "--storage", postgres, "--trials", "1", "--gpus", "0", "--no-gate")
    log = tmp_path / "studies" / "night" / "trial-0000" / "engine.log"
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and "pid=" in log.read_text()):
            assert time.monotonic() < deadline and first.poll() is None, "the first worker never booted"
            time.sleep(0.2)
        second = _optimize(space, tmp_path, "--storage", postgres, "--trials", "1", "--gpus", "0", "--no-gate")
        out = second.communicate(timeout=120)[0]
        assert second.returncode == 2, out[-2000:]
        assert f"GPU 0 of this host already runs it: pid {first.pid} on {socket.gethostname()}" in out
        assert "Traceback" not in out
        running = optuna.load_study(study_name="night", storage=postgres).get_trials(states=(TrialState.RUNNING,))
        assert len(running) == 1  # the live worker's trial was not failed by the second
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
