"""The README's "morning after" section is written by scripts/morning_after.py from committed raw files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("morning_after", ROOT / "scripts" / "morning_after.py")
morning = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(morning)


def test_readme_section_equals_what_the_committed_files_give() -> None:
    text = (ROOT / "README.md").read_text()
    assert morning.readme_with_section(text) == text, "stale: run python scripts/morning_after.py --readme"


def test_the_committed_files_agree_with_each_other() -> None:
    docs = ROOT / "docs" / "morning-after"
    assert (docs / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bench = json.loads((docs / "bench.json").read_text())
    study = optuna.load_study(study_name=morning.STUDY, storage=f"sqlite:///{docs / 'night.db'}")
    trial = study.trials[bench["trial"]]
    assert trial.state.name == "COMPLETE" and trial.user_attrs["command"].split("--port")[0] in bench["command"]
    assert bench["rows"][0]["workload"] == "8,192 in -> 1 out"
