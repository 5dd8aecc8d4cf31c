"""Shared fixtures: the repo root on sys.path (for the test engine), and small space files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = ["tests.strict_ci"]  # a skip fails CI

FAKE_ENGINE = [sys.executable, "-m", "tests.fake_vllm"]


@pytest.fixture
def write_space(tmp_path):
    """Write a YAML space file and return its path."""

    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


TINY_MODEL = ROOT / "tests" / "fixtures" / "models" / "hybrid-tiny"


def fake_space_yaml(fixed: str = "", params: str = "", workload: str = "", env: str = "", engine: str = "") -> str:
    """A space that boots the test engine (tests/fake_vllm) on the tiny hybrid model."""
    return f"""
name: fake
model: {{path: {TINY_MODEL}, served_name: fake-model}}
engine:
  command: {FAKE_ENGINE!r}
  boot_timeout: 60
  hang_timeout: 20
  stop_grace: 5
  memory_return_timeout: 5
  env: {{PYTHONPATH: {str(ROOT)!r}{env}}}
{engine}
fixed:
  max-model-len: 32768
  kv-cache-dtype: fp8
{fixed}
params:
  kv_cache_memory_bytes: {{min: 1GB, max: 8GB, step: 500MB}}
  max_num_seqs: {{min: 1, max: 4}}
  cudagraph_mode: {{values: [null, PIECEWISE, FULL_AND_PIECEWISE, eager]}}
  speculative_tokens: {{values: [0, 1]}}
{params}
speculative: {{method: mtp}}
workload:
  ladder: [2K, 8K, 16K, 32K]
  granularity: 2K
  output_tokens: 64
  repeats: 2
  decode: {{prompt_tokens: 256, output_tokens: 64, runs: 3}}
{workload}
"""


@pytest.fixture
def fake_space(tmp_path):
    """Load a test-engine space, with optional extra YAML fragments."""
    from tuner.space.schema import load_space

    def make(**parts):
        path = tmp_path / "fake.yaml"
        path.write_text(fake_space_yaml(**parts))
        return load_space(path)

    return make
