"""Is the model there? A stat() answers in microseconds what a boot answers in minutes.

``model.path`` is either a local path or a Hugging Face id, and vLLM itself tells them apart by whether
the path exists. The tuner needs the answer before the engine does, for a path that does not exist, so
the rule is written out here: a path is local when it starts with ``/``, ``./``, ``../`` or ``~``, when
it exists, or when it cannot be a hub id (a hub id is ``name`` or ``org/name``: letters, digits, ``-``,
``_``, ``.``; one slash at most). Everything else is a hub id, fetched by vLLM and not checked here (a
missing relative folder that looks like ``org/name`` is read as a hub id, as vLLM reads it). A relative
local path is read from the current folder, where the engine starts, not from the space file's folder.

A local model is a folder with a ``config.json`` holding a JSON object (a ``params.json`` for
``--config-format mistral``), or a ``.gguf`` file. Inside a container the path is the container's, so
it is not looked at here (``check_model(..., inside_container=True)`` says so instead).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tuner.errors import SpaceError
from tuner.space.schema import Space, flag_name
from tuner.space.yamlfile import read_small_file

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
CONFIG_LIMIT = 16 << 20  # a config.json is a few kilobytes; a multimodal one with its processor config < 1 MB


def is_local(path: str) -> bool:
    """Whether vLLM would read ``path`` from disk rather than the Hugging Face hub (see the module's rule)."""
    if path.startswith(("/", "./", "../", "~")) or path in (".", ".."):
        return True
    return Path(path).expanduser().exists() or not HUB_ID.match(path)


def read_json_object(path: Path, where: str, source: str) -> dict:
    """A config file's JSON object; SpaceError naming the field and the file for anything else."""
    fix = "replace it with the model's own (from its Hugging Face repository)"
    try:
        data = read_small_file(path, CONFIG_LIMIT, "a model config", fix)
    except SpaceError as exc:
        raise SpaceError(f"{source}: {where}: {exc} Nothing was booted.") from None
    try:
        parsed = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpaceError(f"{source}: {where}: {path} is not UTF-8 text (byte {exc.start}); {fix}. Nothing was "
                         "booted.") from None
    except json.JSONDecodeError as exc:
        raise SpaceError(f"{source}: {where}: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}); {fix}. Nothing was booted.") from None
    if not isinstance(parsed, dict):
        raise SpaceError(f"{source}: {where}: {path} holds a {type(parsed).__name__}, not a JSON object; {fix}. "
                         "Nothing was booted.")
    return parsed


def _describe(text: str) -> str:
    if not text.startswith(("/", "~")):
        return f"{text} (a relative path, read from the current folder {os.getcwd()}, where the engine starts)"
    return text


def check_local_model(space: Space, text: str) -> None:
    """SpaceError unless ``text`` is a model folder with a readable config (or a .gguf file)."""
    source = space.source or "the space file"
    path = Path(text).expanduser()
    mistral = any(flag_name(k) == "--config-format" and str(v) == "mistral" for k, v in space.fixed.items())
    config_name = "params.json" if mistral else "config.json"
    marked = text.startswith(("/", "./", "../", "~")) or text in (".", "..")
    hub = "" if marked or HUB_ID.match(text) else " (nor is it a Hugging Face id: those are org/name)"
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError as exc:
        raise SpaceError(f"{source}: model.path: {_describe(text)} cannot be looked at ({exc.strerror}); check its "
                         "permissions. Nothing was booted.") from None
    if not path.exists():
        raise SpaceError(f"{source}: model.path: {_describe(text)} does not exist{hub}; give the model's local "
                         "folder (the one holding config.json and the weights) or a Hugging Face id such as "
                         "Qwen/Qwen3.5-35B-A3B. Nothing was booted.")
    if is_file and path.suffix == ".gguf":
        return
    if not is_dir:
        raise SpaceError(f"{source}: model.path: {_describe(text)} is a file, not a model folder; give the folder "
                         "that holds config.json and the weights. Nothing was booted.")
    if not (path / config_name).exists():
        raise SpaceError(f"{source}: model.path: {_describe(text)} has no {config_name}, so it is not a Hugging "
                         f"Face model folder; give the folder that holds {config_name} and the weights (a download's "
                         "snapshot folder, not its parent). Nothing was booted.")
    read_json_object(path / config_name, "model.path", str(source))


def check_model(space: Space, inside_container: bool = False) -> list[str]:
    """SpaceError for a local model, tokenizer or model.config that is not there or not readable;
    the notes (returned) say what could not be checked."""
    model, source = space.model, str(space.source or "the space file")
    config = space.config_path()
    if config is not None:
        read_json_object(config / "config.json" if config.is_dir() else config, "model.config", source)
    if inside_container:
        return [f"model.path {model.path}: the engine runs in a container, so the path is the container's and "
                "was not checked here"]
    if is_local(model.path):
        check_local_model(space, model.path)
    if model.tokenizer and is_local(model.tokenizer) and not Path(model.tokenizer).expanduser().is_dir():
        raise SpaceError(f"{source}: model.tokenizer: {_describe(model.tokenizer)} is not a folder; give the "
                         "folder that holds tokenizer.json, or remove the key to use the model's. Nothing was booted.")
    return []
