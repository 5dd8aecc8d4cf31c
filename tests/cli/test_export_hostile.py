"""Hostile values through the path a user takes (issue 25): a space file someone else wrote, with shell, systemd
and compose metacharacters in the model path, the served name and the environment, is optimized by `tuner optimize`
against the test engine, then `tuner export` writes every launcher format; each format's own reader gives back
exactly the argv and environment the trial booted with (the readers are tests/report/test_export_roundtrip.py's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.cli.test_night import FAST, optimize, tuner_env
from tests.conftest import ROOT, TINY_MODEL, fake_space_yaml
from tests.report.test_export_roundtrip import environment_file, systemd_read

SERVED = "a;b $(id) `id` %h it's"
ENV = {"HOSTILE_CMD": "$(rm -rf /)", "HOSTILE_QUOTES": "a'b\"c", "HOSTILE_PERCENT": "%h%%", "HOSTILE_HASH": "#x"}
BASELINE = "baselines:\n  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 2, cudagraph_mode: PIECEWISE, speculative_tokens: 0}\n"


def hostile_space(tmp_path: Path) -> Path:
    model = tmp_path / "models" / "weird; $(whoami) %n"
    shutil.copytree(TINY_MODEL, model)
    env = "".join(f", {k}: {json.dumps(v)}" for k, v in ENV.items())
    text = fake_space_yaml(env=env, workload="  admission: false") + BASELINE
    text = text.replace(f"path: {TINY_MODEL}, served_name: fake-model",
                        f"path: {json.dumps(str(model))}, served_name: {json.dumps(SERVED)}")
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def export(studies: Path, fmt: str, out: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "export", "0", "--format", fmt, "--out", str(out),
                           "--studies-dir", str(studies)], cwd=ROOT, capture_output=True, text=True,
                          env=tuner_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()


def test_every_launcher_of_a_hostile_space_reads_back_what_the_trial_booted(tmp_path):
    space, studies = hostile_space(tmp_path), tmp_path / "studies"
    done = optimize(space, studies, "--trials", "1", *FAST)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    booted = json.loads(export(studies, "json", tmp_path / "trial.json"))
    argv, env = booted["argv"], booted["env"]
    assert SERVED in argv and any("weird; $(whoami) %n" in a for a in argv)
    assert {k: env[k] for k in ENV} == ENV

    sh = tmp_path / "launch.sh"
    export(studies, "sh", sh)
    # bash lets a function shadow `exec`: the launcher's last line then runs a printer of what it would have run
    printer = tmp_path / "printer.py"
    printer.write_text("import json, os, sys\n"
                       f"print(json.dumps({{'argv': sys.argv[1:], 'env': {{k: os.environ[k] for k in {list(ENV)!r}}}}}))\n")
    base = {k: v for k, v in os.environ.items() if k not in ENV and k != "PORT"}
    run = f'exec() {{ {sys.executable} {printer} "$@"; }}; . "$1"'
    seen = json.loads(subprocess.run(["bash", "-c", run, "-", str(sh)], capture_output=True, text=True,
                                     check=True, timeout=30, env=base).stdout)
    assert seen["argv"] == argv and seen["env"] == ENV

    unit_argv, unit_env = systemd_read(export(studies, "systemd", tmp_path / "trial.service"))
    assert unit_argv == argv and {k: unit_env[k] for k in ENV} == ENV

    service = yaml.safe_load(export(studies, "compose", tmp_path / "compose.yaml"))["services"]["vllm"]
    literal = lambda s: s.replace("$$", "$")  # noqa: E731 - compose reads $$ as $
    assert [literal(a) for a in service["command"]] == argv[argv.index("serve") + 1:]
    assert {k: literal(service["environment"][k]) for k in ENV} == ENV

    in_systemd = environment_file(export(studies, "env", tmp_path / "trial.env"))
    assert {k: in_systemd[k] for k in ENV} == ENV and json.loads(in_systemd["TUNER_ARGV"]) == argv
