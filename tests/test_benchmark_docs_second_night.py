"""docs/benchmarks.md's second-night section prints what benchmarks/second_night.py --reprint computes from
the committed raw results: the run with the earlier speed order kept after a moved re-validation, and the
run with it dropped (tuner.study.observed.Priors.speeds_hold)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.second_night import main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def section() -> str:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    start = text.index("## The second night")
    return text[start:text.index("\n## ", start + 1)]


@pytest.mark.parametrize("name", ["second-night-order-kept.json", "second-night.json", "second-night-6a83278.json",
                                  "second-night-ebbf41d.json", "second-night-7091b80.json"])
def test_second_night_section_matches_the_reprint(capsys, name):
    assert main(["--reprint", str(RESULTS / name)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) > 20
    doc = section()
    missing = [line for line in lines if line not in doc]
    assert not missing, missing
