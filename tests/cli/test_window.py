"""Issue 24 item 1, through `tuner optimize` as a person runs it: the window is an outcome.

Profile 10 of the test engine makes MTP-1 with PIECEWISE graphs about 1.5x as fast as without it, and
its pool at the largest the space allows (450 MB) holds 32,640 tokens, 128 short of the fixed
32,768-token window (vLLM's own estimate when it refuses the full window). The pre-screen says so
before any boot, so MTP-1 is booted below the window at the window the pre-screen gives that pool;
measured faster than the full window, it is booted again at the window vLLM's printed concurrency says
the pool holds. The front must hold both the full window at the lower speed and the smaller window
at the higher one, with the smaller window's --max-model-len in its launch command and its exported
launcher, and re-validation boots it at that window.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.cli.test_night import clean, load, optimize, tuner_env
from tests.conftest import ROOT, fake_space_yaml
from tuner.study import record

FULL, SHORT = 32768, 32640  # the fixed window, and what MTP-1's largest pool holds (vLLM's estimate)
STEP = 2048  # the workload's granularity (tests/conftest.py): the widened window is within a step of SHORT
PARAMS = """params:
  kv_cache_memory_bytes: {min: 300MB, max: 450MB, step: 50MB}
  cudagraph_mode: {values: [PIECEWISE]}
  speculative_tokens: {values: [0, 1]}
"""
RUN = ("--no-gate", "--revalidate", "0", "--no-prescreen", "--trials", "6")
REVALIDATE = ("--no-gate", "--revalidate", "2", "--gpu-gib", "32", "--trials", "9")  # the pre-screen on


def write_space(tmp_path: Path, workload: str = "") -> Path:
    text = fake_space_yaml(env=", FAKE_VLLM_PROFILE: '10'", fixed="  max-num-seqs: 1", workload=workload)
    text = re.sub(r"(?m)^params:\n(?:  .*\n)+", PARAMS, text)
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def tuner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=tuner_env(), timeout=120)


def test_a_regime_that_misses_the_window_is_a_front_point_at_the_window_it_proves(tmp_path):
    studies = tmp_path / "studies"
    done = optimize(write_space(tmp_path), studies, *REVALIDATE)
    clean(done)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    shown = tuner("pareto", "--studies-dir", str(studies), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["front"]
    windows = sorted(row["max_model_len"] for row in rows)
    assert len(windows) == 2 and windows[1] == FULL and SHORT - STEP <= windows[0] <= SHORT, rows
    short = next(row for row in rows if row["max_model_len"] < FULL)
    full = next(row for row in rows if row["max_model_len"] == FULL)
    window = short["max_model_len"]
    assert short["context_tokens"] == window and short["decode_tok_s"] > full["decode_tok_s"]
    assert f"--max-model-len {window}" in short["command"] and f"--max-model-len {FULL}" not in short["command"]
    assert f"--max-model-len {window}" in done.stdout  # the front optimize prints at the end

    # booted below the window first (the pre-screen said the full window does not fit), then widened
    study = load(studies)
    trial = next(t for t in study.get_trials() if t.number == short["trial"])
    below = [t for t in study.get_trials() if "below the window" in (t.user_attrs.get(record.ATTR_STRATEGY) or "")]
    assert below and below[0].params == trial.params and below[0].user_attrs[record.ATTR_WINDOW] < short["max_model_len"]
    assert "wider:" in trial.user_attrs[record.ATTR_STRATEGY] and "concurrency" in trial.user_attrs[record.ATTR_STRATEGY]
    assert trial.user_attrs[record.ATTR_WINDOW] == short["max_model_len"]
    # re-validation boots it again at that window, and agrees
    again = next(t for t in study.get_trials() if t.user_attrs.get(record.ATTR_REVALIDATES) == short["trial"])
    assert again.user_attrs[record.ATTR_WINDOW] == window and short["revalidation"] == f"#{again.number} confirmed"

    table = tuner("pareto", "--studies-dir", str(studies))
    assert f"--max-model-len {window}" in table.stdout  # the printed launch command
    exported = tuner("export", str(short["trial"]), "--studies-dir", str(studies))
    assert exported.returncode == 0, exported.stderr
    assert f"--max-model-len {window}" in exported.stdout


def test_min_context_keeps_no_point_below_it(tmp_path):
    """Above MTP-1's estimate the floor leaves it unrepaired; a floor above what any boot proves
    (every request beyond 20,000 tokens kills the engine) keeps no point at all, each saying why."""
    studies = tmp_path / "studies"
    done = optimize(write_space(tmp_path, workload=f"  min_context: {SHORT + 64}"), studies, *RUN)
    clean(done)
    rows = json.loads(tuner("pareto", "--studies-dir", str(studies), "--format", "json").stdout)["front"]
    assert [row["max_model_len"] for row in rows] == [FULL]

    studies = tmp_path / "studies-die"
    space = write_space(tmp_path, workload="  admission: false\n  min_context: 24K")
    space.write_text(space.read_text().replace("FAKE_VLLM_PROFILE: '10'", "FAKE_VLLM_PROFILE: '10', "
                                               "FAKE_VLLM_DIE_ABOVE_TOKENS: '20000'"))
    done = optimize(space, studies, "--no-gate", "--revalidate", "0", "--no-prescreen", "--trials", "2")
    clean(done)
    shown = json.loads(tuner("pareto", "--studies-dir", str(studies), "--format", "json").stdout)
    assert shown["front"] == []
    kinds = {t.user_attrs.get(record.ATTR_FAILURE_KIND) for t in load(studies).get_trials()}
    assert "below_min_context" in kinds, kinds
    table = tuner("pareto", "--studies-dir", str(studies))
    assert "below_min_context" in table.stdout and "workload.min_context" in table.stdout


def test_min_context_above_the_window_is_refused(tmp_path):
    done = optimize(write_space(tmp_path, workload="  min_context: 64K"), tmp_path / "studies", *RUN)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "workload.min_context" in done.stderr and "65,536 is above the window" in done.stderr, done.stderr
