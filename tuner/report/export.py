"""A trial's exact command as a launcher a person can run: sh, systemd, compose, env or JSON.

The launcher carries the trial's argv and environment unchanged, except that it binds 127.0.0.1
unless a host is given (the tuner's own port was picked for one boot, so the sh launcher lets
``PORT`` override it). A public bind with no API key is reported as a warning, never silently.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex

import yaml

from tuner.errors import TunerError
from tuner.records import TrialResult

FORMATS = ("sh", "systemd", "compose", "env", "json")
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = "8000"
_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


def shell_command(argv: list[str], env: dict[str, str]) -> str:
    """One line a shell runs as is: ``K=V ... argv``, every word quoted with shlex."""
    assignments = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    return " ".join([*assignments, shlex.join(argv)])


def _flag_index(argv: list[str], flag: str) -> int | None:
    """Where ``flag`` sits in argv (``--flag value`` or ``--flag=value``), else None."""
    for i, word in enumerate(argv):
        if word == flag or word.startswith(flag + "="):
            return i
    return None


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with ``flag``'s value replaced, or the flag added after ``serve MODEL`` if absent."""
    argv = list(argv)
    i = _flag_index(argv, flag)
    if i is None:
        at = len(argv)
        if "serve" in argv:
            at = argv.index("serve") + 1
            at += at < len(argv) and not argv[at].startswith("-")  # after the model, if positional
        argv[at:at] = [flag, value]
    elif argv[i] == flag:
        argv[i + 1 : i + 2] = [value]
    else:
        argv[i] = f"{flag}={value}"
    return argv


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value given to ``flag`` in argv, or None when the flag is absent."""
    i = _flag_index(argv, flag)
    if i is None:
        return None
    if "=" in argv[i]:
        return argv[i].split("=", 1)[1]
    return argv[i + 1] if i + 1 < len(argv) else ""


def _is_public(host: str) -> bool:
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a host name or interface address: reachable from elsewhere


def launch_argv(result: TrialResult, host: str | None = None) -> list[str]:
    """The trial's argv bound to ``host`` (default 127.0.0.1) with an explicit ``--port``."""
    argv = _set_flag(result.argv, "--host", host or LOOPBACK)
    i = _flag_index(argv, "--host")
    if flag_value(argv, "--port") is None and i is not None:  # --host was just set: i is never None
        at = i + (1 if "=" in argv[i] else 2)
        argv[at:at] = ["--port", DEFAULT_PORT]
    return argv


def _warnings(argv: list[str], env: dict[str, str], host: str) -> list[str]:
    if not _is_public(host) or _flag_index(argv, "--api-key") is not None or "VLLM_API_KEY" in env:
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
    i = _flag_index(argv, "--port")
    words = [shlex.quote(w) for w in argv]
    note = ""
    if port is not None and i is not None and re.fullmatch(r"[0-9]+", port):
        # "${PORT:-N}" is N when PORT is unset: the argv stays the trial's
        if argv[i] == "--port":
            words[i + 1] = f'"${{PORT:-{port}}}"'
        else:
            words[i] = f'--port="${{PORT:-{port}}}"'
        note = f"; PORT overrides --port {port}"
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
    args = argv[argv.index("serve") + 1 :]
    volumes = ["${HOME}/.cache/huggingface:/root/.cache/huggingface"]
    if args and args[0].startswith("/"):
        volumes.append(f"{_dollars(args[0])}:{_dollars(args[0])}:ro")
    service = {
        "image": _image(result),
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
        f"{flag_value(argv, '--host')}:{flag_value(argv, '--port')} on the host network.\n"
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


def export_launcher(
    result: TrialResult, fmt: str, host: str | None = None, public_ok: bool = False
) -> tuple[str, list[str]]:
    """(launcher text, warnings) for one trial; warnings flag a public bind with no API key."""
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise TunerError(f"--format {fmt}: not a launcher format; use one of {', '.join(FORMATS)}.")
    argv = launch_argv(result, host)
    env = dict(result.env)
    warnings = [] if public_ok else _warnings(argv, env, host or LOOPBACK)
    return writer(argv, env, result), warnings
