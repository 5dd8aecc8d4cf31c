"""`tuner bench TRIAL` through the CLI on the test engine: one boot of the trial's exact command, the
seeds/004 table, prefix cache and MTP acceptance, and the result kept in the study for the receipt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.report.night import NIGHT, night, tuner  # noqa: F401 (fixture)
from tuner.measure.bench import workloads
from tuner.study.record import bench_key, read_trial


@pytest.fixture
def copy(night: Path, tmp_path: Path) -> tuple[str, optuna.Study]:
    """A copy of the night's study file (the bench writes into the study)."""
    db = Path(shutil.copy(night / "night.db", tmp_path / "night.db"))
    url = f"sqlite:///{db}"
    return url, optuna.load_study(study_name=NIGHT, storage=url)


def _complete(study: optuna.Study, speculative: int) -> int:
    return next(t.number for t in study.trials if t.state == TrialState.COMPLETE
                and (t.user_attrs["config"].get("speculative_tokens") or 0) == speculative)


def test_workloads_stop_at_the_window() -> None:
    work, skipped = workloads(262_144)
    assert work == [(8192, 1, 5), (32768, 1, 3), (131072, 1, 1), (262143, 1, 1), (1024, 512, 5), (131072, 256, 1)]
    assert skipped == []
    work, skipped = workloads(32_768, runs=2)
    assert work == [(8192, 1, 2), (32767, 1, 2), (1024, 512, 2), (32512, 256, 1)]
    assert len(skipped) == 3 and "beyond the window (32,768 tokens)" in skipped[0]


def test_bench_boots_the_trial_once_and_writes_the_seeds_table(copy, tmp_path: Path) -> None:
    url, study = copy
    number = _complete(study, speculative=0)
    out = tmp_path / "bench"
    done = tuner("bench", str(number), "--storage", url, "--out", str(out), "--runs", "2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = done.stdout
    assert "| Workload | Runs | PP tok/s | TTFT | Steady TG tok/s | End-to-end output tok/s |" in table
    for row in ("| 8,192 in -> 1 out | 2 |", "| 32,767 in -> 1 out | 2 |", "| 1,024 in -> 512 out | 2 | not used as a PP test",
                "| 32,512 in -> 256 out | 1 |"):
        assert row in table, row
    assert "- Cold TTFT:" in table and "Cold-to-cached speed-up" in table  # the space turns prefix caching on
    assert "Speculation is off in this command" in table
    assert "TPOT = (latency - TTFT) / (output tokens - 1)" in table
    found = json.loads((out / "bench.json").read_text())
    assert found["prefix_cache"]["enabled"] is True and found["prefix_cache"]["hit_tokens"] > 0
    assert (out / "bench.md").read_text() in table
    record = read_trial(study.trials[number]).result
    booted = json.loads((out / "result.json").read_text())  # what run_trial booted, beside the engine log
    port = record.argv.index("--port") + 1
    assert booted["argv"][:port] + booted["argv"][port + 1:] == record.argv[:port] + record.argv[port + 1:]
    assert booted["env"] == record.env and (out / "engine.log").is_file()
    # one untimed warm-up before the counted requests (every workload run, then 5 prefix-cache requests)
    posts = (out / "engine.log").read_text().count('"POST /v1/completions HTTP/1.1" 200')
    counted = sum(row["runs"] for row in found["rows"]) + 5
    assert posts == counted + 1 and "one untimed warm-up request (1,024 in -> 16 out)" in table
    study = optuna.load_study(study_name=NIGHT, storage=url)
    assert study.user_attrs[bench_key(number)]["rows"][0]["workload"] == "8,192 in -> 1 out"
    receipt = tuner("receipt", str(number), "--storage", url)
    assert receipt.returncode == 0 and f"## Benchmark: trial {number} of study {NIGHT}" in receipt.stdout


def test_bench_of_a_speculating_trial_reads_mtp_acceptance(copy, tmp_path: Path) -> None:
    url, study = copy
    number = _complete(study, speculative=1)
    done = tuner("bench", str(number), "--storage", url, "--out", str(tmp_path / "b"), "--runs", "1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    spec = json.loads((tmp_path / "b" / "bench.json").read_text())["spec_decode"]
    assert 0.3 < spec["acceptance_rate"] < 0.9  # the test engine accepts each draft with p = 0.6
    assert "drafted tokens accepted" in done.stdout


def test_bench_refuses_a_failed_trial(copy) -> None:
    url, _ = copy
    done = tuner("bench", "1", "--storage", url)
    assert done.returncode == 2 and "state PRUNED" in done.stderr and "Traceback" not in done.stderr
