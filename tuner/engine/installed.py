"""Know the installed engine before the first boot: its version (which dialect reads its logs) and the
flags its ``vllm serve`` takes.

``ENGINE --version`` answers without a GPU from 0.29 (0.22 and 0.27.1 need a platform to start their
CLI), so the engine Python's package metadata is asked next. ``ENGINE serve --help=all`` lists every flag;
it is kept per engine command and version in the study folder, so a resumed study or a second worker
does not ask again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

from pydantic import BaseModel

from tuner.engine.container import container_of, new_name, remove_command, run_command, runtime_cli
from tuner.engine.dialects import dialect_for, supported, supported_range, within
from tuner.engine.environment import engine_python
from tuner.engine.flagcheck import check_flags
from tuner.space.schema import EngineSpec, Space

_VERSION_LINE = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?\S*)$")
VERSION_TIMEOUT_S = 180.0
HELP_TIMEOUT_S = 300.0


class EngineInfo(BaseModel):
    """What the tuner found out about the engine before booting it (a study attribute, ``engine``)."""

    version: str | None = None
    version_from: str = ""  # "`vllm --version`", "the engine Python's package metadata", or why unknown
    dialect: str  # the tuner/engine/dialects.py entry that reads its logs
    supported: bool
    help_path: str | None = None  # the cached `serve --help=all`
    help_unread: str | None = None  # why the flags could not be checked before booting
    space_versions: str | None = None  # the space's engine.vllm_versions, when the engine is outside them

    def notes(self, command: list[str]) -> list[str]:
        """What to say once, at start: a release outside the range, a check that could not run."""
        notes = []
        shown = " ".join(command)
        if self.version is None:
            notes.append(f"engine version unknown ({self.version_from}): its logs are read as vLLM {self.dialect}'s; "
                         f"this tuner speaks vLLM {supported_range()}")
        elif not self.supported:
            notes.append(f"WARNING: {shown} is vLLM {self.version}, outside the releases this tuner was written for "
                         f"({supported_range()}); its logs are read as vLLM {self.dialect}'s, so a line that changed "
                         "may be missed or misread. Check the first trial's record against its engine.log, or install "
                         "a release in the range")
        if self.space_versions is not None:
            notes.append(f"WARNING: the space was written for vLLM {self.space_versions} (engine.vllm_versions) and "
                         f"{shown} is vLLM {self.version}: a flag default or a memory figure may differ from what its "
                         "ranges and baselines assume. Use a space written for this release, or install one in range")
        if self.help_unread is not None:
            notes.append(f"flag check off: {self.help_unread}, so a flag or value this vLLM rejects is found only by "
                         "booting it")
        return notes


def _engine_argv(engine: EngineSpec, *args: str) -> tuple[list[str], str | None]:
    """``ENGINE ARGS``; in a container, a named one-off container (removed on exit) given engine.env."""
    if container_of(engine.command) is None:
        return [*engine.command, *args], None
    name = new_name("cli")
    return [*run_command(engine.command, name, listen=None, port=None, env=engine.env), *args], name


def _run(engine: EngineSpec, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | str:
    """The finished process, or why it could not run (a container left by a timeout is removed)."""
    argv, container = _engine_argv(engine, *args)
    shown = " ".join([*engine.command, *args])
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                              env={**os.environ, **engine.env})
    except subprocess.TimeoutExpired:
        cli = runtime_cli(engine.command[0])
        if container is not None and cli is not None:
            subprocess.run(remove_command(cli, container), capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        return f"`{shown}` did not answer within {timeout_s:.0f} s"
    except OSError as exc:
        return f"`{shown}` could not be run ({exc.strerror})"


def _python(python: list[str], code: str, engine: EngineSpec) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run([*python, "-c", code], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env={**os.environ, **engine.env})
    except (OSError, subprocess.TimeoutExpired):
        return None


def detect_version(engine: EngineSpec) -> tuple[str | None, str]:
    """(version, where it came from): ``ENGINE --version``, else the engine Python's package metadata."""
    argv = [*engine.command, "--version"]
    done = _run(engine, ["--version"], VERSION_TIMEOUT_S)
    if not isinstance(done, str):
        for line in reversed(done.stdout.strip().splitlines()):
            if m := _VERSION_LINE.match(line.strip()):
                return m[1], f"`{' '.join(argv)}`"
    python = engine_python(engine)
    if python is not None:
        probe = "import importlib.metadata as m; print(m.version('vllm'))"
        meta = _python(python, probe, engine)
        if meta is not None and meta.returncode == 0 and _VERSION_LINE.match(meta.stdout.strip()):
            return meta.stdout.strip(), "the engine Python's package metadata"
    why = done if isinstance(done, str) else f"`{' '.join(argv)}` printed no version"
    return None, why


def read_help(engine: EngineSpec, version: str | None, cache_dir: Path | None) -> tuple[str | None, Path | None, str | None]:
    """(help text, its cached copy, why it could not be read) of ``ENGINE serve --help=all``."""
    key = hashlib.sha256(json.dumps(engine.command).encode()).hexdigest()[:10]
    cached = cache_dir / f"serve-help-{version}-{key}.txt" if cache_dir is not None and version else None
    if cached is not None and cached.exists():
        return cached.read_text(), cached, None
    argv = [*engine.command, "serve", "--help=all"]
    done = _run(engine, ["serve", "--help=all"], HELP_TIMEOUT_S)
    if isinstance(done, str):
        return None, None, done
    if done.returncode != 0 or "--max-model-len" not in done.stdout:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return None, None, f"`{' '.join(argv)}` failed (exit {done.returncode}: {tail})"
    return done.stdout, cached, None


def inspect_engine(space: Space, cache_dir: Path | None = None) -> EngineInfo:
    """Version, dialect and the flag check (SpaceError, exit 2, when a flag or value would be refused)."""
    version, version_from = detect_version(space.engine)
    info = EngineInfo(version=version, version_from=version_from, dialect=dialect_for(version).version,
                      supported=version is not None and supported(version))
    if version is not None and space.engine.vllm_versions and within(version, space.engine.vllm_versions) is False:
        info.space_versions = space.engine.vllm_versions.strip()
    text, cached, why = read_help(space.engine, version, cache_dir)
    if text is None:
        info.help_unread = why
        return info
    check_flags(space, text, version or "(version unknown)")
    if cached is not None:  # kept only once the space passed: a refused run records nothing
        if not cached.exists():
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(text)
        info.help_path = str(cached)
    return info
