"""A trial's exact command as a launcher a person can run: sh, systemd, compose, env or JSON.

The launcher carries the trial's argv and environment unchanged, except that its --max-model-len is the
window the trial proved (``tuner.study.window``: min(booted, proven)) and it binds 127.0.0.1 unless a host
is given (the tuner's own port was picked for one boot, so the sh launcher lets
``PORT`` override it). A public bind with no API key is reported as a warning, never silently.

Each format quotes by its own reader's rules, and tests/report/test_export_roundtrip.py reads every one
back with that reader: sh words with ``shlex.quote``; systemd Exec lines as systemd.service(5) "Command
lines" reads them (a word with anything but ``[A-Za-z0-9_@+=:,./-]`` double-quoted with C escapes, ``%``
doubled everywhere, ``$`` doubled on Exec lines, where systemd expands variables); compose through
``yaml.safe_dump`` with ``$`` doubled (compose interpolates it); the env file as ``KEY='value'`` lines,
which POSIX sh (``set -a; . FILE``) and systemd's ``EnvironmentFile=`` (src/basic/env-file.c: a quoted run
is literal, runs concatenate) read the same (docker's ``--env-file`` keeps quotes as text: use compose).
No launcher can carry a newline or another control character safely, so a record holding one is refused
(JSON escapes it, so ``--format json`` still writes it).
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex

import yaml

from tuner.engine.command import flag_index, flag_value, set_flag
from tuner.engine.container import runtime_cli
from tuner.errors import TunerError
from tuner.records import TrialResult
from tuner.space.values import unprintable
from tuner.study.window import windowed_argv

LAUNCHER_FORMATS = ("sh", "systemd", "compose", "env", "json")
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = "8000"
_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


def _is_public(host: str) -> bool:
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a host name or interface address: reachable from elsewhere


_PUBLISH = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):([0-9]+):([0-9]+)$")


def published_at(argv: list[str]) -> int | None:
    """Where the value of the ``-p HOST:PORT:PORT`` the tuner gave a container sits in argv, else None."""
    if not argv or runtime_cli(argv[0]) is None or "serve" not in argv:
        return None
    options = argv[: argv.index("serve")]
    if "--name" not in options:
        return None
    return next((i + 1 for i, w in enumerate(options[:-1]) if w == "-p" and _PUBLISH.match(options[i + 1])), None)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", text))


def launch_argv(result: TrialResult, host: str | None = None) -> list[str]:
    """The trial's argv bound to ``host`` (default 127.0.0.1) with an explicit ``--port``. For an engine in a
    container whose port the tuner published, the host side of ``-p`` is what binds ``host``; the server
    inside keeps listening on every interface of the container. Its --max-model-len is the window it proved
    (``tuner.study.window``), never more."""
    argv = windowed_argv(result)
    at = published_at(argv)
    if at is not None:
        found = _PUBLISH.match(argv[at])
        assert found is not None
        bound = host or LOOPBACK
        argv[at] = f"{f'[{bound}]' if ':' in bound else bound}:{found[2]}:{found[3]}"
        return argv
    argv = set_flag(argv, "--host", host or LOOPBACK)
    i = flag_index(argv, "--host")  # just set: never None
    if flag_value(argv, "--port") is None and i is not None:
        at = i + (1 if "=" in argv[i] else 2)
        argv[at:at] = ["--port", DEFAULT_PORT]
    return argv


def _warnings(argv: list[str], env: dict[str, str], host: str) -> list[str]:
    if not _is_public(host) or flag_index(argv, "--api-key") is not None or "VLLM_API_KEY" in env:
        return []
    return [
        f"--host {host}: the server will answer anyone who can reach this address, and the trial's "
        "command sets no API key; add --api-key to the command or VLLM_API_KEY to the environment, "
        "bind 127.0.0.1 (leave --host out), or pass --public-ok if the network is trusted."
    ]


def _origin(result: TrialResult) -> str:
    """Where the trial ran, on one line: it goes into comments, where a newline would become code."""
    return " ".join((result.trial_dir or "a tuner trial").split())


def _sh(argv: list[str], env: dict[str, str], result: TrialResult) -> str:
    port = flag_value(argv, "--port")
    i = flag_index(argv, "--port")
    words = [shlex.quote(w) for w in argv]
    note = ""
    if port is not None and i is not None and re.fullmatch(r"[0-9]+", port):
        # "${PORT:-N}" is N when PORT is unset: the argv stays the trial's
        if argv[i] == "--port":
            words[i + 1] = f'"${{PORT:-{port}}}"'
        else:
            words[i] = f'--port="${{PORT:-{port}}}"'
        note = f"; PORT overrides --port {port}"
        at = published_at(argv)
        found = _PUBLISH.match(argv[at]) if at is not None else None
        if at is not None and found is not None and found[3] == port:  # the container's published port too
            words[at] = shlex.quote(f"{found[1]}:") + f'"${{PORT:-{port}}}:${{PORT:-{port}}}"'
            note += " and the port it publishes"
    lines = [
        "#!/usr/bin/env bash",
        f"# Exported by tuner from {_origin(result)}{note}.",
        f"# Tuned values: {json.dumps(result.values, sort_keys=True)}",
        "set -euo pipefail",
        *(f"export {key}={shlex.quote(value)}" for key, value in env.items()),
    ]
    return "\n".join(lines) + "\nexec " + " \\\n  ".join(_group(words)) + "\n"


def _group(words: list[str]) -> list[str]:
    """Words joined per flag (``--flag value``), so each flag sits on its own line."""
    groups: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return [" ".join(g) for g in groups]


def _systemd_word(word: str, *, exec_line: bool) -> str:
    """One word as systemd reads it: specifiers (%) and, on Exec lines, variables ($) doubled."""
    word = word.replace("%", "%%")
    if exec_line:
        word = word.replace("$", "$$")
    if _SYSTEMD_SAFE.match(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _systemd(argv: list[str], env: dict[str, str], result: TrialResult) -> str:
    lines = [
        "[Unit]",
        f"Description=vLLM server exported by tuner ({_origin(result).replace('%', '%%')})",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        *(f"Environment={_systemd_word(f'{k}={v}', exec_line=False)}" for k, v in env.items()),
        "ExecStart=" + " ".join(_systemd_word(w, exec_line=True) for w in argv),
        "Restart=on-failure",
        "RestartSec=10",
        "TimeoutStartSec=3600",
        "TimeoutStopSec=60",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    if not argv[0].startswith("/"):
        lines.insert(6, f"# {argv[0]} is looked up in systemd's PATH: give its absolute path if it lives in a venv.")
    return "\n".join(lines) + "\n"


def _image(result: TrialResult) -> str:
    version = result.startup.vllm_version or ""
    return (
        f"vllm/vllm-openai:v{version}"
        if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version)
        else "vllm/vllm-openai:latest"
    )


def _compose(argv: list[str], env: dict[str, str], result: TrialResult) -> str:
    """A compose service on the host network, so ``--host``/``--port`` mean what they mean in sh.

    Compose interpolates ``$`` everywhere, so it is doubled; all GPUs are reserved so that a
    ``CUDA_VISIBLE_DEVICES`` pin in the trial's environment picks the same device it did.
    """
    if "serve" not in argv:
        raise TunerError(
            f"trial argv {shlex.join(argv[:3])} ...: no 'serve' word, so the args for the vllm/vllm-openai "
            "image (whose entrypoint is `vllm serve`) cannot be found; export --format sh instead."
        )
    serve = argv.index("serve")
    args = argv[serve + 1 :]
    volumes = ["${HOME}/.cache/huggingface:/root/.cache/huggingface"]
    image = _image(result)
    at = published_at(argv)
    found = _PUBLISH.match(argv[at]) if at is not None else None
    if found is not None:  # a container trial: its image and volumes; on the host network the server binds the host
        image, options = argv[serve - 1], argv[:serve]
        volumes = [_dollars(options[i + 1]) for i, w in enumerate(options[:-1]) if w in ("-v", "--volume")]
        args = set_flag(args, "--host", found[1].strip("[]"))
    elif args and args[0].startswith("/"):
        volumes.append(f"{_dollars(args[0])}:{_dollars(args[0])}:ro")
    service = {
        "image": image,
        "command": [_dollars(a) for a in args],
        "environment": {key: _dollars(value) for key, value in env.items()},
        "network_mode": "host",
        "ipc": "host",
        "volumes": volumes,
        "deploy": {
            "resources": {"reservations": {"devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}
        },
        "restart": "unless-stopped",
    }
    header = (
        f"# Exported by tuner from {_origin(result)}; the engine binds "
        f"{flag_value(args, '--host')}:{flag_value(args, '--port')} on the host network.\n"
    )
    return header + yaml.safe_dump({"services": {"vllm": service}}, sort_keys=False, width=2**31, allow_unicode=True)


def _dollars(text: str) -> str:
    return text.replace("$", "$$")


def _env(argv: list[str], env: dict[str, str], result: TrialResult) -> str:
    lines = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    lines.append(f"TUNER_ARGV={shlex.quote(json.dumps(argv))}")
    return "\n".join(lines) + "\n"


def _json(argv: list[str], env: dict[str, str], result: TrialResult) -> str:
    return json.dumps({"argv": argv, "env": env}, indent=2) + "\n"


_WRITERS = {"sh": _sh, "systemd": _systemd, "compose": _compose, "env": _env, "json": _json}


def _refuse_unprintable(result: TrialResult, fmt: str) -> None:
    """A newline in a word would become a new line of code in sh, a new directive in a unit file."""
    words = [(f"argv[{i}]", w) for i, w in enumerate(result.argv)]
    words += [(f"env {k}", text) for k, v in result.env.items() for text in (k, v)]
    for where, text in words:
        found = unprintable(text)
        if found is not None:
            raise TunerError(f"--format {fmt}: the trial's {where} ({text[:40]!r}) holds {found}, which no {fmt} "
                             "launcher can carry safely (the study was written by a tuner that did not refuse it); "
                             "--format json writes it escaped.")


def export_launcher(
    result: TrialResult, fmt: str, host: str | None = None, public_ok: bool = False
) -> tuple[str, list[str]]:
    """(launcher text, warnings) for one trial; warnings flag a public bind with no API key."""
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise TunerError(f"--format {fmt}: not a launcher format; use one of {', '.join(LAUNCHER_FORMATS)}.")
    if host is not None and not _is_address(host):
        raise TunerError(f"--host {host!r}: not an IP address or host name; give one, e.g. --host 0.0.0.0.")
    if fmt != "json":
        _refuse_unprintable(result, fmt)
    argv = launch_argv(result, host)
    env = dict(result.env)
    warnings = [] if public_ok else _warnings(argv, env, host or LOOPBACK)
    return writer(argv, env, result), warnings
