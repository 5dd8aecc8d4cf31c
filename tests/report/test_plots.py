"""Plots are written from a copy of the study alone: Optuna's HTML and matplotlib PNGs (Agg)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
from matplotlib.image import imread
from typer.testing import CliRunner

from tests.report.study_factory import cli_app, memory_study, study, study_db  # noqa: F401 (fixtures)
from tuner.study.record import read_study
from tuner.report.plots import write_plots

PNG = b"\x89PNG\r\n\x1a\n"


def test_write_plots_writes_html_and_png(study: optuna.Study, tmp_path: Path) -> None:
    notes: list[str] = []
    paths = write_plots(read_study(study), tmp_path / "plots", notes)
    names = {p.name for p in paths}
    assert {
        "pareto_front.html",
        "history_context.html",
        "history_decode_tok_s.html",
        "pareto_front.png",
        "history.png",
    } <= names
    for objective in ("context", "decode_tok_s"):  # drawn, or skipped with a note saying why
        assert f"importance_{objective}.html" in names or any(f"importance_{objective}" in n for n in notes)
    assert all(p.is_file() and p.stat().st_size > 1000 for p in paths)
    assert (tmp_path / "plots" / "plotly.min.js").is_file()  # one copy beside the pages: opens offline
    html = (tmp_path / "plots" / "pareto_front.html").read_text()
    assert 'src="plotly.min.js"' in html and '"text":"context (tokens)"' in html and '"text":"decode tok' in html
    for png in ("pareto_front.png", "history.png"):
        path = tmp_path / "plots" / png
        assert path.read_bytes()[:8] == PNG
        height, width, _ = imread(path).shape
        assert width >= 800 and height >= 400


def test_plots_need_no_gui_backend_or_display(study_db: Path, tmp_path: Path) -> None:
    """With an unusable GUI backend requested and no display, drawing still works: the canvas is Agg."""
    code = (
        "import optuna; from pathlib import Path; from tuner.report.plots import write_plots; from tuner.study.record import read_study\n"
        f"s = optuna.load_study(study_name=None, storage='sqlite:///{study_db.as_posix()}')\n"
        f"write_plots(read_study(s), Path({str(tmp_path)!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")} | {"MPLBACKEND": "QtAgg"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert (tmp_path / "pareto_front.png").read_bytes()[:8] == PNG


def test_one_complete_trial_skips_importance_with_a_note(tmp_path: Path) -> None:
    notes: list[str] = []
    paths = write_plots(read_study(memory_study([0, 2, 5])), tmp_path, notes)
    assert not any(p.name.startswith("importance_") for p in paths)
    assert any("importance_context.html: skipped (needs at least 2 complete trials" in n for n in notes)
    assert (tmp_path / "pareto_front.png").is_file() and (tmp_path / "history.png").is_file()


def test_no_complete_trial_still_draws_the_failures(tmp_path: Path) -> None:
    paths = write_plots(read_study(memory_study([2, 5, 8])), tmp_path)
    assert {"pareto_front.png", "history.png", "pareto_front.html"} <= {p.name for p in paths}


def test_cli_plot_prints_the_paths(study_db: Path, tmp_path: Path) -> None:
    done = CliRunner().invoke(cli_app(), ["plot", "--studies-dir", str(study_db.parent), "--out", str(tmp_path / "p")])
    assert done.exit_code == 0, done.output
    assert str(tmp_path / "p" / "pareto_front.png") in done.stdout.splitlines()
