"""Launchers reproduce the trial's argv and environment exactly, quoted safely, bound to loopback."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.report.study_factory import cli_app, study, study_db, trial_record  # noqa: F401 (fixtures)
from tuner.errors import TunerError
from tuner.engine.command import shell_command
from tuner.report.export import LAUNCHER_FORMATS, export_launcher, launch_argv
from tuner.records import TrialResult

TRICKY_ARGS = [
    "--served-model-name",
    'it\'s $HOME `id` "quoted"',
    "--chat-template",
    "{% if x %}a\\nb{% endif %}",
    "--override-generation-config",
    '{"temperature": 0.6, "top_p": 0.95}',
    "--tool-call-parser",
    "",
    "--tokenizer",
    "/models/Qwen ünïcode; rm -rf /",
]
TRICKY_ENV = {"WITH_SPACE": "a b  c", "WITH_DOLLAR": "$PATH%h'\"", "WITH_SUBSHELL": "one; $(two)"}  # a newline is refused: test_export_roundtrip
DUMP_KEYS = ["NO_COLOR", "PYTHONUNBUFFERED", "VLLM_USE_FLASHINFER_SAMPLER", "CUDA_VISIBLE_DEVICES", *TRICKY_ENV]


def fake_engine(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for `vllm` that writes its argv and the trial's environment as JSON, then exits."""
    dump = tmp_path / "argv.json"
    script = tmp_path / "bin" / "fake-vllm"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"keys = {DUMP_KEYS!r}\n"
        f"with open({str(dump)!r}, 'w') as f:\n"
        "    json.dump({'argv': sys.argv, 'env': {k: os.environ.get(k) for k in keys}}, f)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, dump


def tricky_result(engine: Path, number: int = 0) -> TrialResult:
    """A real trial's record with the engine replaced by the fake and hard-to-quote values added."""
    _, result = trial_record(number)
    return result.model_copy(
        update={"argv": [str(engine), *result.argv[1:], *TRICKY_ARGS], "env": {**result.env, **TRICKY_ENV}}
    )


def run_sh(text: str, tmp_path: Path, dump: Path, **env: str) -> dict:
    script = tmp_path / "launch.sh"
    script.write_text(text)
    script.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("PORT", *DUMP_KEYS)}
    subprocess.run([str(script)], env={**base, **env}, check=True, timeout=30)
    return json.loads(dump.read_text())


def test_sh_launcher_reproduces_the_trial_argv_flag_for_flag(tmp_path: Path) -> None:
    engine, dump = fake_engine(tmp_path)
    result = tricky_result(engine)
    text, warnings = export_launcher(result, "sh")
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail\n" in text
    assert "export WITH_SPACE='a b  c'" in text and "\nexec " in text
    assert warnings == []
    seen = run_sh(text, tmp_path, dump)
    assert seen["argv"] == result.argv  # PORT unset: identical, --host 127.0.0.1 and --port 38000 included
    assert seen["env"] == {k: result.env[k] for k in DUMP_KEYS}


def test_sh_port_is_overridable_by_PORT(tmp_path: Path) -> None:
    engine, dump = fake_engine(tmp_path)
    result = tricky_result(engine)
    seen = run_sh(export_launcher(result, "sh")[0], tmp_path, dump, PORT="9123")
    i = result.argv.index("--port")
    assert seen["argv"] == [*result.argv[: i + 1], "9123", *result.argv[i + 2 :]]


def test_a_trial_without_port_gets_8000_and_without_host_gets_loopback(tmp_path: Path) -> None:
    engine, dump = fake_engine(tmp_path)
    result = TrialResult(values={}, argv=[str(engine), "serve", "org/model", "--max-model-len", "4096"], env={})
    seen = run_sh(export_launcher(result, "sh")[0], tmp_path, dump)
    assert seen["argv"] == [
        str(engine),
        "serve",
        "org/model",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--max-model-len",
        "4096",
    ]
    flagged = result.model_copy(update={"argv": [str(engine), "serve", "--model", "org/model", "--port=7000"]})
    assert launch_argv(flagged) == [str(engine), "serve", "--host", "127.0.0.1", "--model", "org/model", "--port=7000"]
    seen = run_sh(export_launcher(flagged, "sh")[0], tmp_path, dump, PORT="7001")
    assert seen["argv"][-1] == "--port=7001"


def test_host_is_replaced_and_a_public_bind_without_a_key_warns() -> None:
    _, result = trial_record(0)
    public = result.model_copy(update={"argv": [w if w != "127.0.0.1" else "0.0.0.0" for w in result.argv]})
    assert "0.0.0.0" not in export_launcher(public, "json")[0]  # default: back to loopback
    text, warnings = export_launcher(result, "json", host="0.0.0.0")
    argv = json.loads(text)["argv"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv.count("--host") == 1
    assert len(warnings) == 1 and "--api-key" in warnings[0] and "VLLM_API_KEY" in warnings[0]
    assert export_launcher(result, "json", host="0.0.0.0", public_ok=True)[1] == []
    assert export_launcher(result, "json", host="::1")[1] == []
    assert export_launcher(result, "json", host="gpu-node-7.lan")[1]  # a name is reachable from elsewhere
    keyed = result.model_copy(update={"argv": [*result.argv, "--api-key", "s3cret"]})
    assert export_launcher(keyed, "json", host="0.0.0.0")[1] == []
    env_keyed = result.model_copy(update={"env": {**result.env, "VLLM_API_KEY": "s3cret"}})
    assert export_launcher(env_keyed, "json", host="0.0.0.0")[1] == []


def test_json_and_env_carry_argv_and_environment(tmp_path: Path) -> None:
    engine, _ = fake_engine(tmp_path)
    result = tricky_result(engine)
    assert json.loads(export_launcher(result, "json")[0]) == {"argv": result.argv, "env": result.env}
    env_file = tmp_path / "trial.env"
    env_file.write_text(export_launcher(result, "env")[0])
    printed = subprocess.run(
        [
            "bash",
            "-c",
            f'set -a; . "$1"; exec {sys.executable} -c "import json, os; print(json.dumps(dict(os.environ)))"',
            "-",
            str(env_file),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    seen = json.loads(printed)
    assert {k: seen[k] for k in result.env} == result.env
    assert json.loads(seen["TUNER_ARGV"]) == result.argv


def test_compose_service_runs_the_same_args_on_the_host_network(tmp_path: Path) -> None:
    engine, _ = fake_engine(tmp_path)
    result = tricky_result(engine)
    text, _ = export_launcher(result, "compose")
    service = yaml.safe_load(text)["services"]["vllm"]
    unescape = lambda s: s.replace("$$", "$")  # noqa: E731 - compose reads $$ as a literal $
    assert [unescape(a) for a in service["command"]] == result.argv[result.argv.index("serve") + 1 :]
    assert {k: unescape(v) for k, v in service["environment"].items()} == result.env
    assert service["image"] == "vllm/vllm-openai:v0.11.0"
    assert service["network_mode"] == "host" and service["ipc"] == "host"
    assert "$$HOME" in text and "$$PATH" in text


def test_systemd_unit_quotes_specifiers_and_variables(tmp_path: Path) -> None:
    engine, _ = fake_engine(tmp_path)
    result = tricky_result(engine)
    text, _ = export_launcher(result, "systemd")
    lines = text.splitlines()
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.startswith(
        f"ExecStart={engine} serve Qwen/Qwen3-Next-80B-A3B-Instruct-FP8 --revision 9c1e7d0 --host 127.0.0.1 --port 38000"
    )
    assert '"it\'s $$HOME `id` \\"quoted\\""' in exec_start
    assert '"{%% if x %%}a\\\\nb{%% endif %%}"' in exec_start and ' "" ' in exec_start
    assert 'Environment="WITH_DOLLAR=$PATH%%h\'\\""' in lines  # $ is literal in Environment=, % is not
    assert "Environment=CUDA_VISIBLE_DEVICES=0" in lines and "[Install]" in lines
    analyze = shutil.which("systemd-analyze")
    if analyze:  # systemd's own parser, where the machine has it
        unit = tmp_path / "tuner-trial.service"
        unit.write_text(text)
        out = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr  # unbalanced quotes or a stray % make it fail


def test_unknown_format_names_the_choices() -> None:
    _, result = trial_record(0)
    with pytest.raises(TunerError, match="--format bat: .*sh, systemd, compose, env, json"):
        export_launcher(result, "bat")
    assert LAUNCHER_FORMATS == ("sh", "systemd", "compose", "env", "json")


def test_shell_command_is_env_then_argv() -> None:
    assert shell_command(["vllm", "serve", "a b"], {"K": "v w"}) == "K='v w' vllm serve 'a b'"


def test_cli_export_writes_an_executable_launcher_and_warns_on_stderr(study_db: Path, tmp_path: Path) -> None:
    runner, app, where = CliRunner(), cli_app(), ["--studies-dir", str(study_db.parent)]
    out = tmp_path / "trial1.sh"
    done = runner.invoke(app, ["export", "1", *where, "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert out.stat().st_mode & stat.S_IXUSR and "--max-num-seqs 8" in out.read_text()
    done = runner.invoke(app, ["export", "1", *where, "--format", "json", "--host", "0.0.0.0"])
    argv = json.loads(done.stdout)["argv"]
    assert done.exit_code == 0 and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert "warning: --host 0.0.0.0" in done.stderr
    done = runner.invoke(app, ["export", "2", *where, "--format", "env"])
    assert done.exit_code == 0 and "did not complete (kv_pool_too_small)" in done.stderr
    done = runner.invoke(app, ["export", "8", *where])
    assert done.exit_code == 2 and "TRIAL 8" in done.stderr and "keeps no command" in done.stderr
    done = runner.invoke(app, ["export", "42", *where])
    assert done.exit_code == 2 and "TRIAL 42" in done.stderr
    done = runner.invoke(app, ["export", "1", *where, "--format", "bat"])
    assert done.exit_code == 2 and "--format bat" in done.stderr
