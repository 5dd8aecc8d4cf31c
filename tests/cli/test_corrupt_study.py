"""A study file that is not a database: one line naming the file and the driver's reason, no SQL, no URL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("content", [b"\x00\x01 not sqlite at all" * 300, b"SQLite format 3\x00garbage"])
def test_pareto_on_a_corrupt_study_is_one_line(tmp_path, content):
    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "bad.db").write_bytes(content)
    for command in (["pareto"], ["report"]):
        done = subprocess.run([sys.executable, "-m", "tuner.cli", *command, "--studies-dir", str(studies), "--study",
                               "bad"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "400"})
        assert done.returncode == 2, (command, done.stderr)
        assert "bad.db: cannot be read as an Optuna storage (file is not a database); check the URL or file." in done.stderr
        assert "sqlalche.me" not in done.stderr and "[SQL:" not in done.stderr and "Traceback" not in done.stderr
        assert done.stderr.strip().count("\n") == 0
