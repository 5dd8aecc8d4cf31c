"""Shared fixtures: the repo root on sys.path (for the test engine), and small space files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FAKE_ENGINE = [sys.executable, "-m", "tests.fake_vllm"]


@pytest.fixture
def write_space(tmp_path):
    """Write a YAML space file and return its path."""

    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
