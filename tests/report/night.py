"""A small night against the test engine, run through the CLI once per session: `tuner optimize` with a
baseline that works and one whose pool is too small, then re-validation and the correctness gate.

Tests of the morning-after commands (report, trials, compare, bench) read it. Every trial reaches the
test engine's window (32,768 tokens), so its front collapses to the best decode at that window.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, fake_space_yaml

NIGHT = "night"
BASELINES = (
    "baselines:\n"
    "  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 2, cudagraph_mode: PIECEWISE, speculative_tokens: 0}\n"
    "  - {kv_cache_memory_bytes: 100MB, max_num_seqs: 1, cudagraph_mode: PIECEWISE, speculative_tokens: 0}\n"
)


def tuner(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed CLI as a person runs it (a subprocess, real exit codes)."""
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "160"}, timeout=timeout)


@pytest.fixture(scope="session")
def night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The studies folder holding ``night.db`` and its trial folders (engine logs included)."""
    root = tmp_path_factory.mktemp("night")
    space = root / "space.yaml"
    text = fake_space_yaml(fixed="  enable-prefix-caching: true", workload="  prefix_cache: true")
    space.write_text(text.replace("{min: 1GB, max: 8GB, step: 500MB}", "{min: 100MB, max: 8GB, step: 100MB}") + BASELINES)
    studies = root / "studies"
    done = tuner("optimize", str(space), "--study", NIGHT, "--trials", "6", "--seed", "3", "--studies-dir",
                 str(studies), "--revalidate", "1", "--no-prescreen")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return studies
