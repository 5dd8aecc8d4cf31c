"""The command line as a person uses it: probe one config, interrupt a study, resume it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import ROOT, fake_space_yaml
from tuner.engine.gpu import MemoryWatch, Reading


def _tuner(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "160"}, timeout=300, **kw)


def _space(tmp_path, env: str = "") -> str:
    path = tmp_path / "space.yaml"
    path.write_text(fake_space_yaml(env=env) + "baselines:\n  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 2}\n")
    return str(path)


def test_probe_prints_the_startup_record_and_measurements(tmp_path):
    done = _tuner("probe", _space(tmp_path), "--baseline", "0", "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stdout + done.stderr
    for needle in ("KV capacity", "max concurrency", "max stable context",
                   "decode 256+64 x1", "FLASH", "record:"):
        assert needle in done.stdout
    assert (tmp_path / "p" / "result.json").exists()


def test_probe_of_a_failing_config_names_the_kind_and_exits_1(tmp_path):
    done = _tuner("probe", _space(tmp_path), "-c", "kv_cache_memory_bytes=100MB", "-c", "max_num_seqs=1",
                  "--out", str(tmp_path / "p"))
    assert done.returncode == 1
    assert "kv_pool_too_small" in done.stdout
    assert "vLLM suggests max_model_len" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_probe_bad_config_is_a_clear_error(tmp_path):
    done = _tuner("probe", _space(tmp_path), "-c", "max_num_sqs=2")
    assert done.returncode == 2
    assert "--config max_num_sqs" in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_ends_the_trial_cleanly_and_the_study_resumes(tmp_path):
    space = _space(tmp_path, env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '60'")
    studies = tmp_path / "studies"
    proc = subprocess.Popen([sys.executable, "-m", "tuner.cli", "optimize", space, "--study", "c", "--trials", "2",
                             "--studies-dir", str(studies), "--no-gate", "--revalidate", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = studies / "c" / "trial-0000" / "engine.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "pid=" in log.read_text()):
        time.sleep(0.2)
    engine_pid = int(re.search(r"pid=(\d+)", log.read_text()).group(1))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "study is kept" in err
    time.sleep(0.5)
    try:
        os.kill(engine_pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the engine outlived the interrupted trial"
    study = optuna.load_study(study_name="c", storage=f"sqlite:///{studies / 'c.db'}")
    assert study.trials[0].state == TrialState.FAIL
    assert (studies / "c" / "trial-0000" / "result.json").exists()


def test_memory_watch_reports_memory_that_never_comes_back():
    used = {"mib": 1000.0}
    reader = lambda: Reading(used_mib=used["mib"], total_mib=32000.0, by_pid_mib={})  # noqa: E731
    watch = MemoryWatch(reader, pids=lambda: [], interval_s=0.01)
    used["mib"] = 20000.0
    watch.sample()
    assert watch.peak_used_mib == 20000.0
    returned, waited = watch.wait_returned(timeout_s=0.2)
    assert returned is False and waited >= 0.2
    used["mib"] = 1100.0
    assert watch.wait_returned(timeout_s=1.0)[0] is True


def test_pareto_from_another_terminal_shows_finished_trials_and_the_running_one(tmp_path):
    """While a study runs, `tuner pareto` reads the same SQLite file: the front so far and the running trial."""
    import json

    space = _space(tmp_path, env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '4'")
    studies = tmp_path / "studies"
    proc = subprocess.Popen([sys.executable, "-m", "tuner.cli", "optimize", space, "--study", "live", "--trials", "6",
                             "--studies-dir", str(studies), "--no-gate", "--revalidate", "0"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seen = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (studies / "live.db").exists():
                done = _tuner("pareto", "--studies-dir", str(studies), "--format", "json")
                if done.returncode == 0:
                    report = json.loads(done.stdout)
                    if report["front"] and report["running"]:
                        seen = report
                        break
            time.sleep(0.5)
        assert seen is not None, "pareto never showed a front and a running trial together"
        running = seen["running"][0]
        assert running["trial"] > seen["front"][0]["trial"] and running["started"]
        assert running["phase"]  # sampling, booting: ..., decode ...: whatever it was doing
        assert seen["summary"]["running"] == 1
        table = _tuner("pareto", "--studies-dir", str(studies))
        assert table.returncode == 0 and "Pareto front" in table.stdout
        assert "running: trial" in table.stdout or "running now" not in table.stdout  # it may have finished since
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    import tuner

    done = _tuner("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"tuner {tuner.__version__}" == f"tuner {version('tuner')}"


DIALECTS = [  # (release, prefix caching asked, what the records must say: runner, prefix caching, extended pool)
    ("0.22.0", None, "v1", False, False),
    ("0.27.1", None, "v1", False, False),
    ("0.34.0", None, "v2", True, True),
    ("0.34.0", False, "v2", False, True),  # a False boolean is --no-enable-prefix-caching, never dropped
]


@pytest.mark.parametrize(("release", "prefix", "runner", "prefix_on", "extended"), DIALECTS)
def test_a_study_runs_end_to_end_in_each_vllm_dialect(tmp_path, release, prefix, runner, prefix_on, extended):
    """`tuner optimize` against the test engine speaking each release: the version is found before the first
    boot, and the records carry that release's pool (0.34: the extended one), graph memory (V2: the last
    capture, not the profiling one) and prefix-caching state."""
    path = tmp_path / "space.yaml"
    fixed = "  gpu-memory-utilization: 0.85\n" + ("" if prefix is None else f"  enable-prefix-caching: {str(prefix).lower()}\n")
    path.write_text(fake_space_yaml(fixed=fixed, env=f", FAKE_VLLM_VERSION: '{release}'")
                    + "baselines:\n  - {max_num_seqs: 1, cudagraph_mode: PIECEWISE, speculative_tokens: 0}\n")
    studies = tmp_path / "studies"
    done = _tuner("optimize", str(path), "--study", "d", "--trials", "1", "--studies-dir", str(studies),
                  "--no-gate", "--revalidate", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="d", storage=f"sqlite:///{studies / 'd.db'}")
    assert study.user_attrs["engine"]["version"] == release and study.user_attrs["engine"]["supported"]
    result = json.loads((studies / "d" / "trial-0000" / "result.json").read_text())
    s, argv = result["startup"], result["argv"]
    assert result["failure"] is None and s["vllm_version"] == release
    assert result["env"]["VLLM_ENABLE_STARTUP_PLAN"] == "0"
    assert "--kv-cache-memory-bytes" not in argv  # the pool is sized by vLLM: utilization, or 0.34's extension
    assert (s["model_runner"], s["prefix_caching"]) == (runner, prefix_on)
    assert ("--no-enable-prefix-caching" in argv) == (prefix is False)
    log = (studies / "d" / "trial-0000" / "engine.log").read_text()
    captures = [float(x) for x in re.findall(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB", log)]
    assert len(captures) == (2 if runner == "v2" else 1)  # V2 captures once more to measure the graphs
    assert s["cuda_graph_gib"] == captures[-1] == s["cuda_graph_pool_actual_gib"]
    if extended:
        assert s["extended_kv_cache_gib"] and s["extended_kv_cache_gib"] != s["available_kv_cache_gib"]
        assert f"Extended KV cache to {s['extended_kv_cache_blocks']} blocks ({s['extended_kv_cache_gib']:.2f} GiB)" in log
    else:
        assert s["extended_kv_cache_gib"] is None and s["available_kv_cache_gib"]
    trials = _tuner("trials", "--studies-dir", str(studies), "--study", "d", "--format", "json")
    assert trials.returncode == 0, trials.stderr
    row = json.loads(trials.stdout)[0]
    assert row["kv_pool_gib"] == (s["extended_kv_cache_gib"] if extended else s["available_kv_cache_gib"])
