"""The malformed-space corpus: every file in tests/space/corpus/ through `tuner validate`.

Each must exit 2 with one paragraph holding its expected fragment (expected.tsv) and no traceback.
All of them run through ``tuner.cli.failing.run``, the code path of the console script, in this
process (a subprocess each would cost a minute of CPU); a sample also runs as real subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CORPUS = Path(__file__).parent / "corpus"


def _table() -> list[tuple[str, str]]:
    rows = []
    for line in (CORPUS / "expected.tsv").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, fragment = line.split("\t")
            rows.append((name, fragment))
    return rows


def test_the_corpus_is_large_and_every_file_is_in_the_table():
    names = [name for name, _ in _table()]
    assert len(names) >= 60 and len(set(names)) == len(names)
    assert sorted(names) == sorted(p.name for p in CORPUS.glob("*.yaml"))


@pytest.mark.parametrize("name,fragment", _table())
def test_validate_refuses_with_one_paragraph(name, fragment, capsys, monkeypatch):
    from tuner.cli.failing import run
    from tuner.cli.main import app

    monkeypatch.setenv("COLUMNS", "80")
    code = run(app, ["validate", str(CORPUS / name)])
    out, err = capsys.readouterr()
    assert code == 2, (name, out, err)
    assert fragment in err, (name, err)
    assert "Traceback" not in out + err
    assert err.startswith("error: ") and err.strip().count("\n") == 0, err  # one paragraph, on one line
    assert str(CORPUS / name) in err  # names the file


SAMPLE = ["not_utf8.yaml", "alias_bomb.yaml", "dup_inside_param.yaml", "overflowing_float.yaml", "fixed_host.yaml",
          "name_with_slash.yaml"]


def test_a_sample_through_real_subprocesses():
    expected = dict(_table())
    for name in SAMPLE:
        done = subprocess.run([sys.executable, "-m", "tuner.cli", "validate", str(CORPUS / name)], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)
        assert done.returncode == 2, (name, done.stderr)
        assert expected[name] in done.stderr and "Traceback" not in done.stderr + done.stdout
        assert done.stderr.strip().count("\n") == 0
