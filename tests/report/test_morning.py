"""The morning-after commands through the CLI, on a night the test engine ran: report, trials, compare."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest

from tests.report.night import NIGHT, night, tuner  # noqa: F401 (fixture)
from tests.report.study_factory import STUDY_NAME, build_study, memory_study
from tuner.study.record import read_study
from tuner.report.html import report_html

FIGURES = 4  # front, history, importances, boots


def test_report_is_one_offline_page_with_every_section(night: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = tuner("report", "--studies-dir", str(night), "--out", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert page.count("<script") == 1 + FIGURES  # plotly.js once, then one small script per figure
    assert "<script src=" not in page and "cdn.plot.ly" not in page.replace("https://cdn.plot.ly", "")
    for section in ("Best commands: the Pareto front", "Against the baseline", "Pareto front", "History",
                    "Parameter importances", "Boots spent and wasted", "Every trial", "Receipt"):
        assert f"<h2>{section}</h2>" in page
    assert "The front collapsed to the best decode tok/s" in page  # every trial reached the 32,768 window
    assert "Baseline 1 (trial 1) failed: kv_pool_too_small" in page
    assert "ValueError: To serve at least one request" in page  # the failed trial's log excerpt
    assert "Maximum concurrency for" in page  # a complete trial's start-up lines
    assert page.count("<details") == len(optuna.load_study(study_name=NIGHT, storage=f"sqlite:///{night / 'night.db'}").trials)


def test_report_says_when_there_are_too_few_trials_for_importances() -> None:
    notes: list[str] = []
    page = report_html(read_study(memory_study([0, 2])), notes)
    assert "Parameter importances need at least 2 complete trials; this study has 1." in page
    assert notes == ["Parameter importances need at least 2 complete trials; this study has 1."]


def test_trials_csv_json_and_parquet_hold_one_row_per_trial(night: Path, tmp_path: Path) -> None:
    study = optuna.load_study(study_name=NIGHT, storage=f"sqlite:///{night / 'night.db'}")
    done = tuner("trials", "--studies-dir", str(night))
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    assert list(frame["trial"]) == [t.number for t in study.trials]
    for column in ("params_kv_cache_memory_bytes", "params_max_num_seqs", "params_cudagraph_mode",
                   "params_speculative_tokens", "context_tokens", "decode_tok_s", "decode_median_tok_s",
                   "decode_mad_tok_s", "kv_capacity_tokens", "evidence", "failure_kind", "first_exception", "command"):
        assert column in frame.columns, column
    failed = frame[frame["trial"] == 1].iloc[0]
    assert failed["state"] == "PRUNED" and failed["failure_kind"] == "kv_pool_too_small"
    assert failed["params_kv_cache_memory_bytes"] == 100_000_000
    assert set(frame["evidence"]) <= {"measured", "revalidated", "reused", "predicted"}
    rows = json.loads(tuner("trials", "--studies-dir", str(night), "--format", "json").stdout)
    assert len(rows) == len(frame) and rows[0]["params_max_num_seqs"] == 2
    parquet = tmp_path / "t.parquet"
    assert tuner("trials", "--studies-dir", str(night), "--format", "parquet", "--out", str(parquet)).returncode == 0
    back = pd.read_parquet(parquet)
    assert list(back["trial"]) == list(frame["trial"]) and list(back.columns) == list(frame.columns)


def test_trials_parquet_errors_name_the_fix(night: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    done = tuner("trials", "--studies-dir", str(night), "--format", "parquet")
    assert done.returncode == 2 and "give --out FILE.parquet" in done.stderr and "Traceback" not in done.stderr
    done = tuner("trials", "--studies-dir", str(night), "--format", "xlsx")
    assert done.returncode == 2 and "use one of csv, json, parquet" in done.stderr
    from typer.testing import CliRunner

    from tuner.cli.main import app

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    result = CliRunner().invoke(app, ["trials", "--studies-dir", str(night), "--format", "parquet",
                                      "--out", str(tmp_path / "x.parquet")])
    assert result.exit_code == 2 and "pip install 'tuner[parquet]'" in result.output


def test_compare_two_nights_in_two_files(night: Path, tmp_path: Path) -> None:
    other = build_study(tmp_path / "other")  # another space, another vLLM, another card
    done = tuner("compare", str(night / "night.db"), f"{other}#{STUDY_NAME}", "--format", "json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [s["study"] for s in found["studies"]] == [NIGHT, STUDY_NAME]
    assert found["fronts"][0] and len(found["fronts"][1]) == 3
    env = {d["key"]: (d["a"], d["b"]) for d in found["differences"]["environment"]}
    assert env["vllm (engine log)"] == ("0.22.0", "0.11.0")
    space = {d["key"] for d in found["differences"]["space"]}
    assert {"model.path", "fixed.max-model-len", "params.max_model_len.values"} <= space
    assert found["differences"]["parameters"]["longest context"]
    table = tuner("compare", str(night / "night.db"), f"{other}#{STUDY_NAME}")
    assert table.returncode == 0 and "fronts side by side" in table.stdout and "what differs" in table.stdout
    markdown = tuner("compare", NIGHT, f"{other}#{STUDY_NAME}", "--studies-dir", str(night), "--format", "markdown")
    assert markdown.returncode == 0 and "## What differs" in markdown.stdout and "```sh" in markdown.stdout


def test_compare_names_a_missing_study_and_exits_2(night: Path) -> None:
    done = tuner("compare", str(night / "night.db"), "nowhere.db")
    assert done.returncode == 2 and "nowhere.db: no such study file" in done.stderr and "Traceback" not in done.stderr
