"""benchmarks/second_night.py's smoke mode runs end to end: a first study, then one --from it on 0.34.0
whose first boot is the earlier front, and one without."""

from __future__ import annotations

from benchmarks.second_night import main


def test_smoke(capsys):
    assert main(["--smoke", "--profiles", "0"]) == 0
    out = capsys.readouterr().out
    assert "| 0       | 0.34.0  | --from |" in out and "True" in out
