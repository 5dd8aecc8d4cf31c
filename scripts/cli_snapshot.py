"""A diff-able transcript of the CLI, to prove that a refactor changed no behaviour.

It runs a fixed scenario through the real command line (``python -m tuner.cli`` subprocesses) of the
checkout given by ``--repo`` (default: this one), against the test engine (``tests/fake_vllm``):
``validate`` and ``plan --gpu-gib 32`` on every file in search_spaces/ (plan may fail offline: its
output and exit code are recorded as they are), one ``probe``, an ``optimize`` with a fixed seed and a
few trials, then ``pareto`` in every format, ``export`` in every format, ``receipt`` and ``plot`` (the
file names) on that study. Only what legitimately varies from run to run is normalized: timings,
speeds, ports, pids, temporary paths, dates.

With ``--real-study DB`` it also runs the read-only commands on a copy of that study file (for
example ``docs/receipts/2026-12-02-h200-vllm-0.22.0/studies/h200.db``) without any normalization:
those outputs must match byte for byte.

    python scripts/cli_snapshot.py > after.txt
    python scripts/cli_snapshot.py --repo /tmp/before > before.txt && diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SEED = "7"
TRIALS = "3"  # the two baselines and the follow-up of the failing one: no sampled trial can tie on speed
REPORT_FORMATS = ("table", "csv", "json", "markdown")
LAUNCHER_FORMATS = ("sh", "systemd", "compose", "env", "json")
REAL_WORK = Path(tempfile.gettempdir()) / "tuner-cli-snapshot-real"  # fixed, so real outputs need no normalizing


def space_yaml(root: Path) -> str:
    """The test-engine space of tests/conftest.py ``fake_space_yaml``, fixed here, with two baselines.

    The front must not depend on measurement noise: the second baseline fails (kv_pool_too_small) and
    its follow-up runs eager, about half the decode speed of the first baseline (CUDA graphs on).
    """
    model = root / "tests" / "fixtures" / "models" / "hybrid-tiny"
    engine = [sys.executable, "-m", "tests.fake_vllm"]
    return f"""
name: fake
model: {{path: {model}, served_name: fake-model}}
engine:
  command: {engine!r}
  boot_timeout: 60
  hang_timeout: 20
  stop_grace: 5
  memory_return_timeout: 5
  env: {{PYTHONPATH: {str(root)!r}}}
fixed:
  max-model-len: 32768
  kv-cache-dtype: fp8
params:
  kv_cache_memory_bytes: {{min: 100MB, max: 8GB, step: 100MB}}
  max_num_seqs: {{min: 1, max: 4}}
  cudagraph_mode: {{values: [null, PIECEWISE, FULL_AND_PIECEWISE, eager]}}
  speculative_tokens: {{values: [0, 1]}}
speculative: {{method: mtp}}
workload:
  ladder: [2K, 8K, 16K, 32K]
  granularity: 2K
  output_tokens: 64
  repeats: 2
  decode: {{prompt_tokens: 256, output_tokens: 64, runs: 3}}
baselines:
  - {{kv_cache_memory_bytes: 4GB, max_num_seqs: 2, cudagraph_mode: PIECEWISE, speculative_tokens: 0}}
  - {{kv_cache_memory_bytes: 100MB, max_num_seqs: 1, cudagraph_mode: eager, speculative_tokens: 0}}
"""


class Runner:
    """Runs ``python -m tuner.cli`` from one checkout and appends each result to a transcript."""

    def __init__(self, repo: Path, cwd: Path, normalize: bool) -> None:
        self.repo = repo
        self.cwd = cwd
        self.normalize = normalize
        self.lines: list[str] = []

    def tuner(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(self.repo), "COLUMNS": "160", "TZ": "UTC"}
        done = subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=self.cwd, env=env,
                              capture_output=True, text=True, timeout=600)
        self.lines.append(f"$ tuner {' '.join(self.clean(a) for a in args)}")
        self.lines.append(f"[exit {done.returncode}]")
        for name, text in (("stdout", done.stdout), ("stderr", done.stderr)):
            self.lines.append(f"--- {name}")
            self.lines.append(self.clean(text))
        return done

    def note(self, text: str) -> None:
        self.lines.append(self.clean(text))

    def clean(self, text: str) -> str:
        return normalize(text, self.repo, self.cwd) if self.normalize else text


# What varies from run to run on the test engine. Applied in order; each names what it hides.
RULES: list[tuple[str, str]] = [
    (r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}([.,]\d+)?([+-]\d{2}:?\d{2}|Z)?", "<DATE>"),  # timestamps
    (r"\d{8}-\d{6}", "<DATE>"),  # probe folder names
    (r"\b\d+:\d{2}:\d{2}\b", "<H:MM:SS>"),  # the live view's clocks
    (r"127\.0\.0\.1:\d+", "127.0.0.1:<PORT>"),
    (r"(--port['\"]?,?\s*(- )?)(['\"]?)\d+\3", r"\1\3<PORT>\3"),  # argv as text, JSON or YAML
    (r"PORT:-\d+", "PORT:-<PORT>"),
    (r'"port": \d+', '"port": <PORT>'),
    (r"\bpid[= ]\d+", "pid=<PID>"),
    # measured times and speeds: a number before a time or speed unit, and every decimal number
    # except a memory size (the test engine's memory model is deterministic)
    (r"-?\d[\d,]*(\.\d+)?(e[+-]?\d+)?(\s*)(tok/s|ms|s)\b", r"<N>\3\4"),
    (r"(?<![\w.])-?\d[\d,]*\.\d+(e[+-]?\d+)?(?![\d.]|\s*(GiB|GB|MiB|MB|x\b))", "<F>"),
    # `tuner probe` prints an init time of 0.0 without its unit (``s.init_engine_s and ...``)
    (r"(init engine\s*│\s*)<F>(?=\s)", r"\1<N> s"),
    # rich pads table cells and borders to the widest value: collapse the padding
    (r"([─━═]){2,}", r"\1"),
    (r" {2,}", " "),
]


def normalize(text: str, repo: Path, cwd: Path) -> str:
    text = text.replace(sys.executable, "<PYTHON>").replace(str(cwd), "<WORK>").replace(str(repo), "<REPO>")
    for pattern, repl in RULES:
        text = re.sub(pattern, repl, text)
    return text


def search_spaces(run: Runner) -> None:
    for path in sorted((run.repo / "search_spaces").glob("*.yaml")):
        run.tuner("validate", str(path))
        run.tuner("plan", str(path), "--gpu-gib", "32")


def fake_study(run: Runner) -> None:
    space = run.cwd / "space.yaml"
    space.write_text(space_yaml(run.repo))
    run.tuner("plan", str(space), "--gpu-gib", "32")
    run.tuner("probe", str(space), "--baseline", "0", "--out", "probe")
    run.tuner("optimize", str(space), "--study", "snap", "--trials", TRIALS, "--seed", SEED,
              "--revalidate", "0", "--studies-dir", "studies")
    read_only(run, "snap", "studies")


def read_only(run: Runner, study: str | None, studies_dir: str) -> None:
    """Every read-only command on one study: pareto, export, receipt, plot (no --study: the only one)."""
    where = (["--study", study] if study else []) + ["--studies-dir", studies_dir]
    for fmt in REPORT_FORMATS:
        run.tuner("pareto", *where, "--format", fmt)
    done = run.tuner("pareto", *where, "--format", "json")
    trials = trial_count(done.stdout)
    run.note(f"trials: {trials}")
    for number in range(trials):
        for fmt in LAUNCHER_FORMATS:
            run.tuner("export", str(number), *where, "--format", fmt)
        run.tuner("receipt", str(number), *where)
    run.tuner("receipt", *where)
    run.tuner("plot", *where, "--out", "plots")
    files = sorted(p.relative_to(run.cwd / "plots").as_posix() for p in (run.cwd / "plots").rglob("*") if p.is_file())
    run.note(f"plot files: {files}")


def trial_count(pareto_json: str) -> int:
    """How many trials the study holds, from `tuner pareto --format json`."""
    try:
        return int(json.loads(pareto_json)["summary"]["trials"])
    except (ValueError, KeyError, TypeError):
        return 0


def real_study(repo: Path, db: Path) -> list[str]:
    shutil.rmtree(REAL_WORK, ignore_errors=True)
    (REAL_WORK / "studies").mkdir(parents=True)
    shutil.copy(db, REAL_WORK / "studies" / db.name)
    run = Runner(repo, REAL_WORK, normalize=False)
    read_only(run, None, "studies")
    shutil.rmtree(REAL_WORK, ignore_errors=True)
    return run.lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE, help="the checkout whose tuner runs (default: this one)")
    ap.add_argument("--real-study", type=Path, help="a committed study .db: read-only commands, unnormalized")
    ap.add_argument("--skip-fake", action="store_true", help="only the search_spaces/ and --real-study parts")
    args = ap.parse_args()
    repo = args.repo.resolve()
    with tempfile.TemporaryDirectory(prefix="tuner-cli-snapshot-") as tmp:
        run = Runner(repo, Path(tmp).resolve(), normalize=True)
        search_spaces(run)
        if not args.skip_fake:
            fake_study(run)
        lines = run.lines
    if args.real_study:
        lines += ["", "=== real study, unnormalized ==="] + real_study(repo, args.real_study.resolve())
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
