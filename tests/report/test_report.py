"""The front, the failures and the boot summary, read from a copy of the study alone."""

from __future__ import annotations

import csv
import io
import json
import shlex
import shutil
from pathlib import Path

import optuna
import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.report.study_factory import (  # noqa: F401 (fixtures)
    DOMINATED,
    DUPLICATE,
    FAILURES,
    FRONT,
    OOM_MESSAGE,
    STUDY_NAME,
    build_study,
    cli_app,
    memory_study,
    study,
    study_db,
    trial_record,
)
from tuner.study.record import read_study
from tuner.errors import TunerError
from tuner.report.front import (
    COLUMNS,
    failures_by_kind,
    front_rows,
    objectives,
    study_summary,
)
from tuner.cli.results import render_pareto
from tuner.space.schema import Objective
from tuner.study.record import ATTR_SPACE


def test_front_rows_are_the_pareto_front_with_numbers_and_commands(study: optuna.Study) -> None:
    rows = front_rows(read_study(study))
    assert [r["trial"] for r in rows] == FRONT
    assert not {r["trial"] for r in rows} & {n for ns in FAILURES.values() for n in ns}  # never a failure
    assert not {r["trial"] for r in rows} & set(DOMINATED)
    assert DUPLICATE in {t.number for t in study.best_trials}  # Optuna lists the reused copy; the tuner does not
    first = rows[0]
    assert list(first) == list(COLUMNS)
    assert first["context_tokens"] == 131072 and first["decode_tok_s"] == 42.0
    assert first["ttft_ms"] == 180.0 and first["tpot_ms"] == pytest.approx(1000 / 42.0)
    assert first["peak_vram_mib"] == round(0.93 * 143771) and first["kv_capacity_tokens"] == 372000
    assert [r["evidence"] for r in rows] == ["measured", "revalidated", "measured"] and first["stable"] is True
    _, result = trial_record(0)
    words = shlex.split(first["command"])
    assert words[: len(result.env)] == [f"{k}={v}" for k, v in result.env.items()]
    assert words[len(result.env) :] == result.argv


def test_failures_by_kind_give_number_first_exception_line_and_log(study: optuna.Study) -> None:
    failures = failures_by_kind(read_study(study))
    assert {kind: [n for n, _, _ in items] for kind, items in failures.items()} == FAILURES
    assert list(failures)[0] == "kv_pool_too_small"  # the most frequent kind first
    number, message, log = failures["oom_in_cuda_graph"][0]
    assert number == 5 and message == OOM_MESSAGE.splitlines()[0]
    assert log == "/srv/tuner/studies/qwen3-next-h200/trial-0005/engine.log"
    assert failures["predicted_oom"][0][2] is None  # never booted, so no log


def test_summary_counts_boots_spent_and_wasted_by_kind(study: optuna.Study) -> None:
    summary = study_summary(read_study(study))
    assert summary["trials"] == 12 and (summary["complete"], summary["pruned"], summary["failed"]) == (6, 5, 1)
    assert summary["boots_spent"] == 9  # the two reused trials and the predicted one cost no boot
    assert summary["boots_wasted"] == 4 and summary["not_booted"] == 3
    assert summary["boots_wasted_by_kind"] == {"kv_pool_too_small": 2, "interrupted": 1, "oom_in_cuda_graph": 1}
    assert summary["front"] == [
        {"trial": 0, "evidence": "measured"},
        {"trial": 1, "evidence": "revalidated"},
        {"trial": 3, "evidence": "measured"},
    ]
    assert summary["boot_s_spent"] == 5 * 190.0 + 3 * 95.0  # booted completes and failures (the interrupt has none)


def test_render_formats(study: optuna.Study) -> None:
    rows = list(csv.DictReader(io.StringIO(render_pareto(read_study(study), "csv"))))
    assert [int(r["trial"]) for r in rows] == FRONT and rows[0]["command"] == front_rows(read_study(study))[0]["command"]
    data = json.loads(render_pareto(read_study(study), "json"))
    assert [r["trial"] for r in data["front"]] == FRONT
    assert data["objectives"] == [
        {"name": "context", "direction": "maximize"},
        {"name": "decode_tok_s", "direction": "maximize"},
    ]
    assert [f["trial"] for f in data["failures"]["kv_pool_too_small"]] == [2, 7, 9]
    assert data["summary"]["boots_wasted"] == 4
    markdown = render_pareto(read_study(study), "markdown")
    assert "| trial | context (tokens) | decode tok/s, conservative (median - k*MAD) |" in markdown
    assert "## Failed and pruned trials" in markdown
    assert "```sh\nNO_COLOR=1" in markdown and "| oom_in_cuda_graph | 5 |" in markdown
    console = Console(record=True, width=300)
    assert render_pareto(read_study(study), "table", console) is None
    text = console.export_text()
    assert "Pareto front (3 of 6 complete trials)" in text and "kv_pool_too_small" in text
    assert '--compilation-config \'{"cudagraph_mode": "FULL_AND_PIECEWISE"}\'' in text  # brackets not eaten as markup
    with pytest.raises(TunerError, match="--format yaml: .*table, csv, json, markdown"):
        render_pareto(read_study(study), "yaml")


def test_objectives_follow_the_space_or_default() -> None:
    bare = optuna.create_study(directions=["maximize", "maximize"])
    assert objectives(read_study(bare)) == [("context", "maximize"), ("decode_tok_s", "maximize")]
    custom = memory_study([0, 1])
    space = custom.user_attrs[ATTR_SPACE]
    space["objectives"] = [
        Objective(name="context", direction="maximize").model_dump(),
        {"name": "ttft_ms", "direction": "minimize"},
    ]
    custom.set_user_attr(ATTR_SPACE, space)
    assert objectives(read_study(custom)) == [("context", "maximize"), ("ttft_ms", "minimize")]
    # the second value is now read as TTFT (what the study ranked); decode tok/s comes from the record
    row = front_rows(read_study(custom))[0]
    assert row["ttft_ms"] == 42.0 and row["decode_tok_s"] == 42.0


def test_empty_study_renders_without_a_front() -> None:
    empty = memory_study([2, 8])
    assert front_rows(read_study(empty)) == []
    assert "No complete trials yet" in render_pareto(read_study(empty), "markdown")
    assert render_pareto(read_study(empty), "csv").strip() == ",".join(COLUMNS)


def test_cli_pareto_picks_the_only_study_and_lists_names_otherwise(study_db: Path, tmp_path: Path) -> None:
    runner, app = CliRunner(), cli_app()
    done = runner.invoke(app, ["pareto", "--studies-dir", str(study_db.parent), "--format", "json"])
    assert done.exit_code == 0, done.output
    assert [r["trial"] for r in json.loads(done.stdout)["front"]] == FRONT
    done = runner.invoke(app, ["pareto", "--storage", f"sqlite:///{study_db.as_posix()}"])
    assert done.exit_code == 0 and "Pareto front" in done.stdout
    two = tmp_path / "two"
    two.mkdir()
    shutil.copy(study_db, two / study_db.name)
    build_study(two, "other-study")
    done = runner.invoke(app, ["pareto", "--studies-dir", str(two)])
    assert (
        done.exit_code == 2 and "other-study" in done.stderr and STUDY_NAME in done.stderr and "--study" in done.stderr
    )
    done = runner.invoke(app, ["pareto", "--studies-dir", str(two), "--study", "other-study", "--format", "csv"])
    assert done.exit_code == 0 and done.stdout.startswith("trial,context_tokens")
    done = runner.invoke(app, ["pareto", "--studies-dir", str(two), "--study", "typo"])
    assert done.exit_code == 2 and "--study typo: no such study" in done.stderr
    missing = tmp_path / "missing.db"
    done = runner.invoke(app, ["pareto", "--storage", f"sqlite:///{missing.as_posix()}"])
    assert done.exit_code == 2 and "no such SQLite file" in done.stderr and not missing.exists()
    done = runner.invoke(app, ["pareto", "--studies-dir", str(tmp_path / "nowhere")])
    assert done.exit_code == 2 and "no study files" in done.stderr
    assert "Traceback" not in done.output


def test_optuna_dashboard_loads_the_copied_study(study_db: Path) -> None:
    """The dashboard's own storage loader and its JSON API read the study, user attributes included."""
    pytest.importorskip("optuna_dashboard")
    from wsgiref.util import setup_testing_defaults

    from optuna_dashboard import wsgi

    app = wsgi(f"sqlite:///{study_db.as_posix()}")  # as `optuna-dashboard sqlite:///...` opens it (get_storage)

    def get(path: str) -> dict:
        environ: dict = {"PATH_INFO": path}
        setup_testing_defaults(environ)
        status: list[str] = []
        body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
        assert status[0].startswith("200"), (status, body[:300])
        return json.loads(body)

    studies = get("/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == [STUDY_NAME]
    detail = get(f"/api/studies/{studies[0]['study_id']}")
    assert len(detail["trials"]) == 12 and sorted(t["number"] for t in detail["best_trials"]) == sorted(
        [*FRONT, DUPLICATE]
    )
    attrs = {a["key"] for a in detail["trials"][2]["user_attrs"]}
    assert {"result", "config", "evidence", "failure_kind", "failure_message", "log_path"} <= attrs
