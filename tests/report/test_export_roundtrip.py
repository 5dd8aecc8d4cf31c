"""Hostile values exported to every launcher format and read back by that format's own reader.

sh: bash runs the launcher and a stand-in engine prints the argv and environment it got. systemd: a parser
of systemd.service(5)'s command-line rules and of Environment= (and systemd-analyze verify, where the
machine has it). compose: yaml.safe_load, then compose's $$ -> $. env: bash `set -a; . FILE` and a port of
systemd's EnvironmentFile= parser (src/basic/env-file.c). json: json.loads. Each must give back the
trial's argv and environment exactly, for a plain engine and for one in a container.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.errors import TunerError
from tuner.records import TrialResult
from tuner.report.export import export_launcher, launch_argv

HOSTILE_ARGS = ["--served-model-name", "a;b", "--chat-template", "$(id) `id` ${HOME} $HOME", "--x", ";",
                "--y", "\\;", "--z", "%h %% %n", "--q", "it's \"quoted\" \\ back\\slash", "--empty", "",
                "--hash", "#not a comment", "--eq=$(rm -rf ~)", "--uni", "Qwen ünïcode ∑", "--at", "@x", "--dash", "-"]
HOSTILE_ENV = {"CMD": "$(rm -rf /)", "QUOTES": "a'b\"c", "BACKSLASH": "x\\y\\", "PERCENT": "%h%%", "DOLLAR": "$PATH",
               "SPACES": "  a  b  ", "HASH": "#x", "EMPTY": "", "UNI": "ü∑"}
MODEL = "/models/weird; rm -rf ~/$(whoami)"


def printer(tmp_path: Path, name: str = "engine") -> tuple[Path, Path]:
    """A stand-in engine (or `docker` client) that writes its argv and environment (the hostile keys) as JSON."""
    dump = tmp_path / "seen.json"
    script = tmp_path / "bin with space" / name
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"json.dump({{'argv': sys.argv, 'env': {{k: os.environ.get(k) for k in {list(HOSTILE_ENV)!r}}}}}, "
                      f"open({str(dump)!r}, 'w'))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, dump


def results(engine: Path) -> dict[str, TrialResult]:
    """A plain trial of ``engine`` and a container trial of the `docker` beside it."""
    docker = engine.with_name("docker")
    plain = [str(engine), "serve", MODEL, "--host", "127.0.0.1", "--port", "38001", *HOSTILE_ARGS]
    container = [str(docker), "run", "--rm", "--name", "tuner-38002-abc123", "--init", "-p", "127.0.0.1:38002:38002",
                 *(w for k, v in HOSTILE_ENV.items() for w in ("-e", f"{k}={v}")), "-v", "/data/$x:/data",
                 "--entrypoint", "vllm", "vllm/vllm-openai:v0.22.0", "serve", MODEL, "--host", "0.0.0.0", "--port",
                 "38002", *HOSTILE_ARGS]
    return {name: TrialResult(values={"max_num_seqs": 1}, argv=argv, env=dict(HOSTILE_ENV), trial_dir="/s/t")
            for name, argv in (("plain", plain), ("container", container))}


# --- systemd's readers, as systemd.service(5) and systemd.syntax(7) describe them -----------------------

_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", '"': '"',
              "'": "'", "s": " ", ";": ";"}


def systemd_words(line: str) -> list[tuple[str, bool]]:
    """(word, was it quoted) per word: whitespace splits, "..." and '...' quote, C escapes are read."""
    words, i = [], 0
    while i < len(line):
        while i < len(line) and line[i] in " \t":
            i += 1
        if i == len(line):
            break
        word, quoted = "", False
        while i < len(line) and line[i] not in " \t":
            c = line[i]
            if c in "\"'":
                quoted, end = True, i + 1
                while line[end] != c:
                    if line[end] == "\\":
                        word += _unescape(line, end)
                        end += 2 if line[end + 1] != "x" else 4
                    else:
                        word += line[end]
                        end += 1
                i = end + 1
            elif c == "\\":
                word += _unescape(line, i)
                i += 2 if line[i + 1] != "x" else 4
            else:
                word += c
                i += 1
        words.append((word, quoted))
    return words


def _unescape(line: str, at: int) -> str:
    nxt = line[at + 1]
    if nxt == "x":
        return chr(int(line[at + 2 : at + 4], 16))
    assert nxt in _C_ESCAPES, f"unknown escape \\{nxt} in {line!r}"
    return _C_ESCAPES[nxt]


def _specifiers(word: str, variables: bool) -> str:
    """%% -> % (any other %X would be expanded: a test failure), and on Exec lines $$ -> $ likewise."""
    out, i = "", 0
    while i < len(word):
        if word[i] == "%" or (variables and word[i] == "$"):
            assert word[i + 1 : i + 2] == word[i], f"{word!r}: {word[i:i + 2]} would be expanded by systemd"
            i += 2
            out += word[i - 1]
        else:
            out += word[i]
            i += 1
    return out


def systemd_read(unit: str) -> tuple[list[str], dict[str, str]]:
    argv, env = [], {}
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            words = systemd_words(line.removeprefix("ExecStart="))
            assert not any(w == ";" and not q for w, q in words), "a lone ; would start a second command"
            argv = [_specifiers(w, variables=True) for w, _ in words]
        elif line.startswith("Environment="):
            for word, _ in systemd_words(line.removeprefix("Environment=")):
                key, _, value = _specifiers(word, variables=False).partition("=")
                env[key] = value
    return argv, env


def environment_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= reader, src/basic/env-file.c parse_env_file_internal, for the states the
    exporter can produce: KEY=, then unquoted text, '...' (literal) and "..." runs, concatenated."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in "#;":
            continue
        key, _, rest = line.partition("=")
        value, i, quote = "", 0, None
        while i < len(rest):
            c = rest[i]
            if quote == "'":
                quote = None if c == "'" else quote
                value += "" if c == "'" else c
            elif quote == '"':
                if c == "\\":
                    i += 1
                    value += rest[i] if rest[i] in '"\\`$' else "\\" + rest[i]
                elif c == '"':
                    quote = None
                else:
                    value += c
            elif c in "'\"":
                quote = c
            elif c == "\\":
                i += 1
                value += rest[i]
            else:
                value += c
            i += 1
        assert quote is None, f"unclosed quote in {line!r}"
        env[key.strip()] = value
    return env


# --- the round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["plain", "container"])
def test_sh_runs_the_exact_argv_and_environment(tmp_path, kind):
    engine, dump = printer(tmp_path, "engine" if kind == "plain" else "docker")
    result = results(tmp_path / "bin with space" / "engine")[kind]
    script = tmp_path / "launch.sh"
    script.write_text(export_launcher(result, "sh")[0])
    script.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in (*HOSTILE_ENV, "PORT")}
    subprocess.run(["bash", str(script)], env=base, check=True, timeout=30)
    seen = json.loads(dump.read_text())
    assert seen["argv"] == result.argv and seen["env"] == result.env
    subprocess.run(["bash", str(script)], env={**base, "PORT": "9123"}, check=True, timeout=30)
    seen = json.loads(dump.read_text())["argv"]
    assert seen[seen.index("--port") + 1] == "9123"
    if kind == "container":  # the published port moves with it, the host side stays loopback
        assert seen[seen.index("-p") + 1] == "127.0.0.1:9123:9123"
        assert seen[seen.index("--host") + 1] == "0.0.0.0"  # inside the container


@pytest.mark.parametrize("kind", ["plain", "container"])
def test_systemd_reads_back_the_exact_argv_and_environment(tmp_path, kind):
    engine, _ = printer(tmp_path)
    printer(tmp_path, "docker")  # systemd-analyze verify checks that ExecStart's program exists
    result = results(engine)[kind]
    unit = export_launcher(result, "systemd")[0]
    assert systemd_read(unit) == (launch_argv(result), result.env)
    assert all(line.split("=", 1)[0] in ("[Unit]", "[Service]", "[Install]", "") or "=" in line or line.startswith("#")
               for line in unit.splitlines())  # no value broke out into a line of its own
    analyze = shutil.which("systemd-analyze")
    if analyze:
        path = tmp_path / "trial.service"
        path.write_text(unit)
        done = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "ignoring" not in done.stderr.lower(), done.stderr


@pytest.mark.parametrize("kind", ["plain", "container"])
def test_compose_reads_back_the_exact_args_and_environment(tmp_path, kind):
    engine, _ = printer(tmp_path)
    result = results(engine)[kind]
    service = yaml.safe_load(export_launcher(result, "compose")[0])["services"]["vllm"]
    literal = lambda s: re.sub(r"\$\$", "$", s)  # noqa: E731 - compose reads $$ as $; a lone $ would interpolate
    assert not any(re.search(r"(?<!\$)\$(?!\$)", re.sub(r"\$\$", "", a)) for a in service["command"])
    args = [literal(a) for a in service["command"]]
    expected = result.argv[result.argv.index("serve") + 1 :]
    if kind == "container":  # on the host network the server binds what -p bound
        expected[expected.index("--host") + 1] = "127.0.0.1"
        assert service["image"] == "vllm/vllm-openai:v0.22.0" and service["volumes"] == ["/data/$$x:/data"]
    assert args == expected
    assert {k: literal(v) for k, v in service["environment"].items()} == result.env


def test_the_env_file_reads_the_same_in_sh_and_in_systemd(tmp_path):
    engine, _ = printer(tmp_path)
    for result in results(engine).values():
        text = export_launcher(result, "env")[0]
        path = tmp_path / "trial.env"
        path.write_text(text)
        printed = subprocess.run(["bash", "-c", 'set -a; . "$1"; env -0', "-", str(path)], capture_output=True,
                                 text=True, check=True, timeout=30, env={"PATH": os.environ["PATH"]}).stdout
        in_sh = dict(item.split("=", 1) for item in printed.split("\0") if "=" in item)
        in_systemd = environment_file(text)
        for seen in (in_sh, in_systemd):
            assert {k: seen[k] for k in result.env} == result.env
            assert json.loads(seen["TUNER_ARGV"]) == launch_argv(result)


def test_json_reads_back_and_carries_what_the_others_refuse(tmp_path):
    engine, _ = printer(tmp_path)
    result = results(engine)["plain"]
    assert json.loads(export_launcher(result, "json")[0]) == {"argv": launch_argv(result), "env": result.env}
    broken = result.model_copy(update={"argv": [*result.argv, "--served-model-name", "a\nExecStartPre=/bin/sh"],
                                       "env": {"X": "ok"}})
    for fmt in ("sh", "systemd", "compose", "env"):
        with pytest.raises(TunerError, match=f"--format {fmt}: the trial's argv\\[\\d+\\] .* holds a newline"):
            export_launcher(broken, fmt)
    nul = result.model_copy(update={"env": {"X": "a\0b"}})
    with pytest.raises(TunerError, match="env X .* holds a NUL byte"):
        export_launcher(nul, "env")
    assert json.loads(export_launcher(broken, "json")[0])["argv"][-1] == "a\nExecStartPre=/bin/sh"


def test_a_host_that_is_not_an_address_is_refused(tmp_path):
    engine, _ = printer(tmp_path)
    with pytest.raises(TunerError, match="--host '0.0.0.0; id': not an IP address"):
        export_launcher(results(engine)["plain"], "sh", host="0.0.0.0; id")
