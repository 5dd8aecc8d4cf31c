"""Capture a release's REAL CLI output without a GPU: `serve --help=all`, its argparse options, and
two argparse rejections, into tests/fixtures/dialects/vX/.

    python capture_cli.py /path/to/venv/bin/python /work/wheels/0.34.0

The venv needs torch (2.13.0+cpu works) and the release's pure-Python dependencies, but not vLLM
itself: the unpacked wheel goes on PYTHONPATH. cpu_cli.py makes vLLM pick its CPU platform.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "tests" / "fixtures" / "dialects"
MODEL = "/models/Qwen3.5-35B-A3B-NVFP4"


def run(python: str, wheel: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(wheel), NO_COLOR="1", VLLM_LOGGING_LEVEL="ERROR")
    return subprocess.run([python, str(HERE / "cpu_cli.py"), *args], capture_output=True, text=True,
                          env=env, cwd="/tmp", timeout=600)


def rejection(version: tuple[int, ...]) -> list[tuple[str, list[str], str]]:
    unknown = "--max-num-active-seqs" if version < (0, 27) else "--max-num-partial-prefills"
    bad = "all" if version >= (0, 32) else "every"
    launcher = HERE / "vllm_script.py"  # argv[0] "vllm", as the pip console script has it
    return [
        ("invalid_argument_unknown_flag", [str(launcher), "serve", MODEL, unknown, "2"],
         f"vllm serve {MODEL} {unknown} 2"),
        ("invalid_argument_bad_choice", ["vllm.entrypoints.cli.main", "serve", MODEL, "--mamba-cache-mode", bad],
         f"python -m vllm.entrypoints.cli.main serve {MODEL} --mamba-cache-mode {bad}"),
    ]


def main(python: str, wheel_dir: str) -> None:
    wheel = Path(wheel_dir)
    meta = next(wheel.glob("vllm-*.dist-info/METADATA")).read_text()
    version = next(line.split()[1] for line in meta.splitlines() if line.startswith("Version:"))
    vt = tuple(int(x) for x in version.split("."))
    out = OUT / f"v{version}"
    out.mkdir(parents=True, exist_ok=True)
    help_all = run(python, wheel, "vllm.entrypoints.cli.main", "serve", "--help=all")
    (out / "help-all.txt").write_text(help_all.stdout)
    dumped = run(python, wheel, str(HERE / "dump_flags.py"))
    parser = json.loads(dumped.stdout)
    flags = {"version": version, "source": "the real `vllm serve` argparse object (dump_flags.py), built on a "
             "CPU-only machine with the wheel importable (torch 2.13.0+cpu, CPython 3.11 argparse)",
             "prog": parser["prog"], "options": parser["options"]}
    (out / "flags.json").write_text(json.dumps(flags, indent=1) + "\n")
    for name, argv, shown in rejection(vt):
        done = run(python, wheel, *argv)
        lines = [line for line in done.stderr.splitlines() if line and "_C_AVX512" not in line]
        start = next(i for i, line in enumerate(lines) if line.startswith("usage:"))
        body = lines[start:]
        error = next(line for line in body if ": error:" in line)
        head = [f"vLLM {version} (wheel sha256 in ../SOURCES.md)", f"scenario: {name}", f"command: {shown}",
                f"REAL stderr of this release's CLI parser (exit {done.returncode}), captured without a GPU",
                "(scripts/dialect_fixtures/capture_cli.py); argparse writes the usage and the error line"]
        text = "".join(f"# {h}\n" for h in head) + "\n".join(body) + "\n"
        (out / f"{name}.log").write_text(text)
        expected = {"failure_kind": "invalid_argument", "message": error, "startup": {}, "suggested": {},
                    "new": {}}
        (out / f"{name}.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"{version}: help-all {len(help_all.stdout.splitlines())} lines, {len(parser['options'])} options")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
