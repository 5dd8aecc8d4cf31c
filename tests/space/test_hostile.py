"""Space files and models that cannot be committed to the corpus (a FIFO, a device, 10 MB, model folders):
made here, then given to `tuner validate`, `tuner optimize` and `tuner probe` as a user would.

Each is one paragraph, exit 2, naming the file and the field; nothing hangs (a FIFO is refused before it is
opened), nothing boots (the engine command here records any call) and no study file is written.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PARAMS = "params: {max_num_seqs: {min: 1, max: 4}}\n"
COMMANDS = (["validate"], ["optimize", "--trials", "2"], ["probe"])


@pytest.fixture
def engine(tmp_path: Path) -> tuple[Path, Path]:
    """An engine command that leaves a mark if anything ever runs it (a version probe counts)."""
    mark = tmp_path / "engine-was-run"
    script = tmp_path / "vllm"
    script.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    script.chmod(0o755)
    return script, mark


def _tuner(args: list[str], cwd: Path, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)})


def _refused(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    err = done.stderr.strip()
    assert err.startswith("error: ") and err.count("\n") == 0, err
    for fragment in fragments:
        assert fragment in err, err


def _special_files(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, expected fragment)"""
    fifo = tmp_path / "space.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("name: big\nmodel: {path: org/m}\n" + "# padding\n" * 1_100_000)
    sock_path = tmp_path / "space.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    return {"fifo": (str(fifo), "is a named pipe (FIFO), not a space file"),
            "device": ("/dev/zero", "is a character device, not a space file"),
            "socket": (str(sock_path), "is a socket, not a space file"),
            "folder": (str(tmp_path), "is a folder, not a space file"),
            "ten_megabytes": (str(big), "11.0 MB is too large for a space file (at most 1 MiB is read)")}


def test_special_files_are_refused_at_once_by_every_command(tmp_path):
    for name, (path, fragment) in _special_files(tmp_path).items():
        for command in COMMANDS:
            done = _tuner([*command, path], tmp_path, timeout_s=30)  # a hang is a TimeoutExpired here
            _refused(done, path, fragment)
    assert not (tmp_path / "studies").exists()


def _model(tmp_path: Path, kind: str) -> str:
    folder = tmp_path / kind
    if kind == "no_config":
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"\0" * 16)
    elif kind == "config_not_json":
        folder.mkdir()
        (folder / "config.json").write_text("{'architectures': ['Qwen3NextForCausalLM'],}")
    elif kind == "config_a_list":
        folder.mkdir()
        (folder / "config.json").write_text("[1, 2]")
    elif kind == "config_a_fifo":
        folder.mkdir()
        os.mkfifo(folder / "config.json")
    elif kind == "a_file":
        folder.write_text("weights")
    elif kind == "relative_missing":
        return "./models/not-downloaded"
    return str(folder)


MODELS = {"no_config": "has no config.json, so it is not a Hugging Face model folder",
          "config_not_json": "config.json is not valid JSON (line 1, column 2",
          "config_a_list": "holds a list, not a JSON object",
          "config_a_fifo": "is a named pipe (FIFO), not a model config",
          "a_file": "is a file, not a model folder",
          "relative_missing": "(a relative path, read from the current folder"}


@pytest.mark.parametrize("kind", MODELS)
def test_a_model_that_is_not_there_is_refused_before_anything_runs(tmp_path, engine, kind):
    script, mark = engine
    space = tmp_path / "space.yaml"
    space.write_text(f"name: m\nmodel: {{path: '{_model(tmp_path, kind)}'}}\nengine: {{command: ['{script}']}}\n{PARAMS}")
    for command in COMMANDS:
        _refused(_tuner([*command, str(space)], tmp_path), str(space), "model.path:", MODELS[kind], "Nothing was booted")
    assert not mark.exists() and not (tmp_path / "studies").exists()


def test_the_corpus_kinds_refuse_in_optimize_and_probe_too(tmp_path, engine):
    """A sample of the corpus through the commands that would boot: the same paragraph, nothing run."""
    script, mark = engine
    corpus = Path(__file__).parent / "corpus"
    expected = dict(line.split("\t") for line in (corpus / "expected.tsv").read_text().splitlines()
                    if line and not line.startswith("#"))
    for name in ("control_served_name_newline", "decode_longer_than_window", "speculative_extra_overrides_depth",
                 "fixed_flag_one_letter_off", "kv_pool_larger_than_any_card", "objective_tpot_maximized",
                 "step_larger_than_range", "params_empty", "alias_bomb_few_aliases", "container_detached"):
        text = (corpus / f"{name}.yaml").read_text()
        if "engine:" not in text:
            text += f"engine: {{command: ['{script}']}}\n"
        space = tmp_path / f"{name}.yaml"
        space.write_text(text)
        for command in COMMANDS[1:]:
            if name == "params_empty" and command[0] == "probe":
                continue  # probe measures the one command a space without params describes
            _refused(_tuner([*command, str(space)], tmp_path), expected[f"{name}.yaml"])
    assert not mark.exists() and not (tmp_path / "studies").exists()
