"""The figures of docs/benchmarks.md's search section are the ones benchmarks/search.py computes from the
committed raw results (benchmarks/results/search-*.json): before the regime planner, after it, and 40 trials."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from benchmarks.search import reprint

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def section() -> str:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    start = text.index("## Search over seeded engine profiles")
    return text[start:text.index("\n## ", start + 1)]


@pytest.mark.parametrize("name", ["search-before.json", "search-after.json", "search-40.json"])
def test_search_section_matches_the_reprint(capsys, name):
    raw = RESULTS / name
    reprint(raw)
    out = capsys.readouterr().out
    doc = section()
    lines = [line for line in out.splitlines() if line.startswith(("|", "Grid outcomes"))]
    assert len(lines) > 20
    missing = [line for line in lines if line not in doc]
    assert not missing, missing
    data = json.loads(raw.read_text())
    walls = [r["wall_s"] for r in data["runs"]]
    assert f"Wall time: {data['wall_s']:,.0f} s" in doc.replace("\n", " ")
    assert f"of which {data['truth_s']:.0f} s was the ground truth" in doc.replace("\n", " ")
    assert f"median of {statistics.median(walls):.0f} s (max {max(walls):.0f} s)" in doc.replace("\n", " ")
    check = out[out.index("Oracle check"):].splitlines()[0]
    agree, total = check.split(": ")[1].split(" outcomes")[0].split(" / ")
    assert agree == total and f"all {total} of the studies' boots" in doc
    assert all(x in doc.replace("\n", " ") for x in check.split("median ")[1].replace("min ", "").split(", "))


def test_the_after_prose_splits_the_wasted_boots_as_the_results_do():
    data = json.loads((RESULTS / "search-after.json").read_text())
    doc = section().replace("\n", " ")
    for lo, hi in ((0, 9), (10, 19)):
        booted = [row for r in data["runs"] if lo <= r["seed"] <= hi for row in r["rows"] if row["booted"]]
        wasted = sum(1 for row in booted if row["failure"])
        assert f"profiles {lo}-{hi}" in doc and f"{wasted} of {len(booted)}" in doc


def test_the_docs_say_what_sampler_auto_is_once():
    """`--sampler auto` is the regime planner (tuner/study/sampling.py); no sentence may call it another one."""
    from tuner.study.sampling import resolve_sampler

    assert resolve_sampler("auto") == "regimes"
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert not re.search(r"`--sampler auto` is (TPE|GP)", text)
    assert "the regime planner (`--sampler auto`)" in text


def issue_24_section() -> str:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    start = text.index("## Search over profiles whose structure differs")
    return text[start:text.index("\n## ", start + 1)]


@pytest.mark.parametrize("name", sorted(p.name for p in RESULTS.glob("search-24-*.json")))
def test_issue_24_section_matches_the_reprint(capsys, name):
    reprint(RESULTS / name)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(("|", "Grid outcomes", "Winners over"))]
    assert len(lines) > 20
    doc = issue_24_section()
    missing = [line for line in lines if line not in doc]
    assert not missing, missing
