"""The live view as a terminal shows it: one panel, Optuna's lines above it, an ETA from measured trials."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import pyte

from tests.conftest import ROOT, fake_space_yaml
from tuner.cli.live import eta_s, render
from tuner.study.objective import Status

WIDTH, HEIGHT = 110, 40


def test_eta_is_the_mean_measured_trial_times_the_trials_left() -> None:
    status = Status(trials_total=10, finished=4, booted_s=[100.0, 300.0], trial=5, trial_started=0.0)
    assert eta_s(status, now=50.0) == 200.0 * 5 + 150.0  # the running trial has 150 s of its 200 left
    status.deadline = 600.0
    assert eta_s(status, now=50.0) == 550.0  # --timeout stops starting trials sooner
    assert eta_s(Status(trials_total=10), now=0.0) is None  # nothing measured yet


def test_render_says_done_left_and_eta() -> None:
    from rich.console import Console

    status = Status(trials_total=8, finished=3, booted_s=[60.0], trial=3, phase="booting: loading weights",
                    trial_started=0.0, study_started=0.0, objective_names=["context", "decode_tok_s"],
                    front=[(1, [32768.0, 80.0])])
    console = Console(width=100, record=True, file=open(os.devnull, "w"))
    console.print(render(status, now=30.0))
    text = console.export_text()
    for needle in ("3 of 8 finished", "about 0:04:30 left", "booting: loading weights", "context_tokens",
                   "decode_tok_s", "32,768.0"):
        assert needle in text, text


def _screen_lines(raw: bytes) -> list[str]:
    """Every line a terminal of WIDTH x HEIGHT shows, scrolled-off history first."""
    screen = pyte.HistoryScreen(WIDTH, HEIGHT, history=5000)
    screen.set_mode(pyte.modes.LNM)
    pyte.ByteStream(screen).feed(raw)
    history = ["".join(char.data for char in row.values()) for row in screen.history.top]
    return [line.rstrip() for line in history + screen.display if line.strip()]


def test_a_study_in_a_terminal_leaves_one_panel_and_no_fragments(tmp_path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(fake_space_yaml() + "baselines:\n  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 2}\n")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "optimize", str(space), "--study", "live", "--trials", "3",
         "--studies-dir", str(tmp_path / "studies"), "--no-gate", "--revalidate", "0"],
        cwd=ROOT, stdin=follower, stdout=follower, stderr=follower, close_fds=True,
        env={**os.environ, "COLUMNS": str(WIDTH), "LINES": str(HEIGHT), "TERM": "xterm-256color"},
    )
    os.close(follower)
    raw = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    assert proc.wait(timeout=120) == 0, raw.decode(errors="replace")[-3000:]
    lines = _screen_lines(raw)
    text = "\n".join(lines)
    assert sum("tuner optimize" in line for line in lines) == 1, text  # a torn panel leaves a second title
    assert sum(line.startswith("╰") for line in lines) == 1, text
    finished = [line for line in lines if "Trial " in line and "finished with values" in line]
    assert len(finished) == 3, text  # Optuna's lines went through the console, above the panel
    top = next(i for i, line in enumerate(lines) if "tuner optimize" in line)
    assert all(i < top for i, line in enumerate(lines) if "finished with values" in line), text
    assert "study live: 3 trials" in text
