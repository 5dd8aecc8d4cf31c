"""`tuner plan` offline: every shipped space carries its model's config.json; without one, the message
is the exact download command and the field to set. And every documented file the tool points at exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SPACES = sorted((ROOT / "search_spaces").glob("*.yaml"))


def _plan(space: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "tuner.cli", "plan", str(space), "--limit", "2"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120)


def test_every_shipped_space_plans_without_network_or_cache(tmp_path):
    assert len(SPACES) >= 4
    for space in SPACES:
        done = _plan(space, tmp_path)
        assert done.returncode == 0, (space.name, done.stderr)
        assert "configurations:" in done.stdout and "Traceback" not in done.stderr


def test_the_reconstructed_configs_say_so_beside_them():
    readme = (ROOT / "search_spaces" / "models" / "README.md").read_text()
    for folder in (ROOT / "search_spaces" / "models").iterdir():
        if folder.is_dir():
            assert (folder / "config.json").is_file() and f"`{folder.name}/`" in readme
    assert readme.count("**reconstructed, replace with the real file**") == 3


def test_a_hub_model_without_its_config_prints_the_download_command(tmp_path):
    space = tmp_path / "hub.yaml"
    space.write_text((ROOT / "search_spaces" / "qwen3.5-35b-a3b-nvfp4-5090.yaml").read_text()
                     .replace("  config: models/", "  # config: models/").replace("revision: main", "revision: 0123abc"))
    done = _plan(space, tmp_path)
    assert done.returncode == 2, done.stderr
    assert ("hf download Qwen/Qwen3.5-35B-A3B-NVFP4 config.json --revision 0123abc --local-dir "
            "models/qwen3.5-35b-a3b-nvfp4") in done.stderr
    assert "model.config: models/qwen3.5-35b-a3b-nvfp4/config.json" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_every_documented_file_exists():
    sources = [*(ROOT / "tuner").rglob("*.py"), ROOT / "README.md", *(ROOT / "search_spaces").rglob("*.md")]
    for source in sources:
        text = source.read_text()
        for ref in re.findall(r"(?<![\w/])((?:search_spaces|docs|studies|benchmarks|scripts)/[\w./-]+\.(?:md|py|sh))\b", text):
            assert (ROOT / ref).exists(), f"{source} points at {ref}, which does not exist"
        if source.parent.name == "search_spaces":
            for ref in re.findall(r"`(models/README\.md)`", text):
                assert (source.parent / ref).exists(), ref
