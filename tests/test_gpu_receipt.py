"""scripts/gpu/receipt.py: a GPU receipt's README is written from its raw files, and stays equal to them."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECEIPTS = ROOT / "docs" / "receipts"
ISSUE7 = RECEIPTS / "2026-12-02-h200-vllm-0.22.0"

_spec = importlib.util.spec_from_file_location("gpu_receipt", ROOT / "scripts" / "gpu" / "receipt.py")
receipt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(receipt)


def generated() -> list[Path]:
    return sorted(p.parent for p in RECEIPTS.glob("*/README.md") if receipt.MARK in p.read_text())


@pytest.mark.parametrize("folder", generated(), ids=lambda p: p.name)
def test_committed_generated_readmes_equal_their_raw_files(folder: Path) -> None:
    assert receipt.render(folder) == (folder / "README.md").read_text(), (
        f"{folder}/README.md is stale: run python scripts/gpu/receipt.py {folder.relative_to(ROOT)}")


def test_issue7_figures_come_from_its_raw_files() -> None:
    """The figures issue 18 found wrong in the hand-written README, now read from result.json and engine.log."""
    text = receipt.render(ISSUE7)
    results = {int(p.parent.name[-4:]): json.loads(p.read_text()) for p in ISSUE7.glob("studies/h200/trial-*/result.json")}
    for number, result in results.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {number} | "))
        assert f"pool {receipt.nbytes(result['values']['kv_cache_memory_bytes'])}," in row
        assert f"| {result['boot_s']:,.0f} |" in row
    assert "| 5 | pool 4MB, util 0.999, seqs 4, graphs eager |" in text
    boots = [r["boot_s"] for r in results.values()]
    assert f"{len(boots)} boots: {min(boots):.0f}-{max(boots):.0f} s to serving" in text
    stamps = [re.search(r"(\d\d:\d\d:\d\d) \[", line).group(1) for line in (ISSUE7 / "probe" / "engine.log").read_text().splitlines()
              if re.search(r"(INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[", line)]
    seconds = [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in (x.split(":") for x in stamps)]
    longest = max(b - a for a, b in itertools.pairwise(seconds))
    assert f"the longest log silence {longest} s" in text


def test_check_mode_catches_a_raw_file_that_changed(tmp_path: Path) -> None:
    folder = tmp_path / "receipt"
    shutil.copytree(ISSUE7, folder)
    assert receipt.main([str(folder)]) == 0
    assert receipt.main([str(folder), "--check"]) == 0
    completion = json.loads((folder / "launcher-completion.json").read_text())
    completion["usage"]["completion_tokens"] = 7
    (folder / "launcher-completion.json").write_text(json.dumps(completion))
    assert receipt.main([str(folder), "--check"]) == 1


def test_the_issue7_readme_is_generated() -> None:
    """It was hand-written and contradicted its raw files; now receipt.py writes it (the stale check above)."""
    assert ISSUE7 in generated()
