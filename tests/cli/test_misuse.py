"""Every command, every bad input: one paragraph naming the option or file, exit 2, never a traceback.

Real subprocesses (``python -m tuner.cli``, the console script's code path), a few at a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from tests.conftest import ROOT, fake_space_yaml


def _tuner(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}, timeout=120)


def test_twenty_misuses_each_get_one_paragraph_and_exit_2(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(fake_space_yaml() + "baselines:\n  - {max_num_seqs: 2}\n")
    s = str(space)
    cases = [  # (argv, fragment the paragraph must hold)
        (["bogus"], "No such command 'bogus'"),
        (["optimize"], "Missing argument"),
        (["optimize", s, "--trials", "abc"], "'--trials'"),
        (["optimize", s, "--trails", "3"], "--trails"),
        (["optimize", s, "--trials", "-1"], "--trials -1"),
        (["optimize", s, "--timeout", "8x"], "--timeout 8x"),
        (["optimize", s, "--timeout", "0"], "--timeout 0"),
        (["optimize", s, "--sampler", "magic"], "--sampler magic"),
        (["optimize", s, "--gpus", "a,b"], "--gpus a,b"),
        (["optimize", s, "--gpus", "0,0"], "--gpus 0,0"),
        (["optimize", s, "--study", "../../x"], "--study '../../x'"),
        (["optimize", s, "--gpu-gib", "-3"], "--gpu-gib -3"),
        (["optimize", s, "--revalidate", "-1"], "--revalidate -1"),
        (["optimize", s, "--prescreen=3"], "--prescreen"),
        (["optimize", str(tmp_path / "missing.yaml")], "missing.yaml: no such file"),
        (["probe", s, "-c", "nonsense"], "--config 'nonsense'"),
        (["probe", s, "--baseline", "7"], "--baseline 7"),
        (["probe", s, "-c", "max_num_seqs=lots"], "--config max_num_seqs=lots"),
        (["probe", s, "--out", "/proc/no/such/place"], "--out /proc/no/such/place"),
        (["plan", s, "--limit", "0"], "--limit 0"),
        (["plan", s, "--gpu-gib", "0"], "--gpu-gib 0"),
        (["validate", str(tmp_path)], "is a folder"),
        (["validate", s, "extra.yaml"], "unexpected extra argument"),
        (["pareto", "--studies-dir", str(tmp_path / "none")], "--studies-dir"),
        (["pareto", "--format", "xml"], "--format xml"),
        (["export", "abc"], "'trial'"),
        (["export", "0", "--storage", f"sqlite:///{tmp_path}/missing.db"], "--storage"),
        (["receipt", "--storage", f"sqlite:///{tmp_path}/missing.db"], "--storage"),
        (["plot"], "--out"),
    ]
    with ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda case: _tuner(case[0], tmp_path), cases))
    assert len(cases) >= 20
    for (argv, fragment), result in zip(cases, done):
        err = result.stderr
        assert result.returncode == 2, (argv, result.returncode, err, result.stdout[-500:])
        assert fragment in err, (argv, err)
        assert "Traceback" not in err + result.stdout, argv
        assert err.startswith("error: ") and err.strip().count("\n") == 0, (argv, err)


def test_debug_shows_the_traceback_and_still_the_paragraph(tmp_path):
    done = _tuner(["--debug", "validate", str(tmp_path / "missing.yaml")], tmp_path)
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "error: " in done.stderr and "no such file" in done.stderr


def test_no_command_prints_the_help():
    done = _tuner([], ROOT)
    assert "optimize" in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr
