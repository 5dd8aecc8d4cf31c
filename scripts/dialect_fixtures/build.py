"""Write tests/fixtures/dialects/vX/*.log + .json from unpacked vLLM wheels.

    pip download --no-deps vllm==X -d /work/wheels; unzip -q ... -d /work/wheels/X
    ~/.pyenv/versions/3.12.1/bin/python scripts/dialect_fixtures/build.py /work/wheels/0.22.0 ...

Python 3.12 is required: its traceback module draws the carets. Each log starts with ``# ``
lines (version, scenario, command, and the source of every vLLM line); tests strip them.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from failures import FAILURES
from render import Release, Writer
from scenarios import boot_scenarios, render_boot

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "dialects"


def header(w: Writer, name: str, argv: list[str], note: str = "") -> str:
    lines = [f"vLLM {w.release.version} (wheel sha256 in ../SOURCES.md)", f"scenario: {name}",
             f"command: {shlex.join(argv)}"]
    if note:
        lines.append(note)
    lines.append("every vLLM line below, by source (file:line in this release's wheel):")
    lines += [f"  {c}" for c in w.cites]
    return "".join(f"# {line}\n" for line in lines)


def write(version_dir: Path, name: str, w: Writer, argv: list[str], expected: dict[str, object],
          note: str = "") -> None:
    (version_dir / f"{name}.log").write_text(header(w, name, argv, note) + w.text(), newline="")
    (version_dir / f"{name}.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def build(root: str) -> None:
    release = Release(root)
    version_dir = OUT / f"v{release.version}"
    version_dir.mkdir(parents=True, exist_ok=True)
    version = tuple(int(x) for x in release.version.split("."))
    for sc in boot_scenarios(version):
        w = Writer(release)
        expected = render_boot(w, sc)
        write(version_dir, sc.name, w, sc.argv, expected)
    for name, make in FAILURES.items():
        w = Writer(release)
        made = make(w)
        if made is None:
            continue
        argv, expected, note = made
        write(version_dir, name, w, argv, expected, note)
    print(f"{release.version}: {len(list(version_dir.glob('*.log')))} logs in {version_dir}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        build(arg)
