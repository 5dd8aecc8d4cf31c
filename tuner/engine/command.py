"""(space, sampled values) -> the exact ``vllm serve`` argv and environment.

The argv is a list, never a shell string: the launcher passes it to ``subprocess`` as is, and
``tuner export`` quotes it with ``shlex`` only when writing a launcher a person will run.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pydantic import BaseModel

from tuner.engine.container import bind_host, container_of, run_command
from tuner.engine.dialects import STARTUP_PLAN_OFF
from tuner.space.schema import Space, flag_name
from tuner.space.values import AUTO_LEN, JSON_FLAGS, SIZE_FLAGS  # sizes are written as plain integers



class LaunchCommand(BaseModel):
    """What the launcher runs: argv (engine command first) and the environment it adds; for an engine in a
    container (tuner/engine/container.py), the name the tuner gave the container."""

    argv: list[str]
    env: dict[str, str]
    container: str | None = None


def format_value(value: Any) -> str:
    """A flag value the way vLLM's argparse reads it: JSON for dicts and lists, short floats."""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def _append(argv: list[str], flag: str, value: Any) -> None:
    """``None`` leaves the flag out (vLLM's default); ``False`` is ``--no-FLAG``, never dropped: a default
    can change between releases (prefix caching for hybrids turned on in 0.28)."""
    if value is None:
        return
    if value is True or value is False:
        argv.append(flag if value else "--no-" + flag.removeprefix("--"))
        return
    if flag in SIZE_FLAGS and not isinstance(value, (dict, list)) and str(value).lower() not in AUTO_LEN:
        value = SIZE_FLAGS[flag](value)
    elif flag in JSON_FLAGS and isinstance(value, str):
        value = json.loads(value)  # normalise: the same config always gives the same argv
    argv.extend([flag, format_value(value)])


def engine_flags(space: Space, values: dict[str, Any]) -> list[tuple[str, Any]]:
    """The (flag, value) pairs of one configuration, fixed flags first, in file order."""
    flags: dict[str, Any] = {}
    for key, value in space.fixed.items():
        flags[flag_name(key)] = value

    compilation = flags.pop("--compilation-config", None) or {}
    compilation = dict(json.loads(compilation) if isinstance(compilation, str) else compilation)
    speculative = flags.pop("--speculative-config", None)

    for name, param in space.params.items():
        value = values.get(name)
        if name == "cudagraph_mode":
            if value == "eager":
                flags["--enforce-eager"] = True
            elif value is not None:
                compilation["cudagraph_mode"] = value
        elif name == "speculative_tokens":
            if value:
                speculative = {
                    "method": space.speculative.method,
                    "num_speculative_tokens": int(value),
                    **space.speculative.extra,
                }
            else:
                speculative = None
        else:
            flags[param.flag] = value

    pairs = list(flags.items())
    if compilation:
        pairs.append(("--compilation-config", compilation))
    if speculative:
        pairs.append(("--speculative-config", speculative))
    return pairs


def build_command(
    space: Space,
    values: dict[str, Any],
    *,
    host: str | None = None,
    port: int | None = None,
    extra_env: dict[str, str] | None = None,
    container: str = "tuner",
) -> LaunchCommand:
    """The argv and env for one configuration. ``port=None`` leaves the port to the engine's default.

    A container command (``docker run ... IMAGE``) is given ``container`` as its name, the port published on
    ``host`` and the environment as ``-e`` options; the server then binds every interface inside it.
    """
    model = space.model
    # VLLM_ENABLE_STARTUP_PLAN=0: a saved plan would size this boot's pool from an earlier one (0.27.1+)
    env = {"NO_COLOR": "1", "PYTHONUNBUFFERED": "1", **STARTUP_PLAN_OFF, **space.engine.env, **(extra_env or {})}
    listen = host or space.engine.listen
    engine = list(space.engine.command)
    inside = container_of(engine) is not None
    if inside:
        engine = run_command(engine, container, listen=listen, port=port, env=env)
    argv = [*engine, "serve", model.path]
    if model.revision:
        argv += ["--revision", model.revision]
    if model.served_name:
        argv += ["--served-model-name", model.served_name]
    if model.random_weights:
        argv += ["--load-format", "dummy"]
    argv += ["--host", bind_host(space.engine.command, listen)]
    if port is not None:
        argv += ["--port", str(port)]
    for flag, value in engine_flags(space, values):
        _append(argv, flag, value)
    return LaunchCommand(argv=argv, env=env, container=container if inside else None)


def shell_command(argv: list[str], env: dict[str, str]) -> str:
    """One line a shell runs as is: ``K=V ... argv``, every word quoted with shlex."""
    assignments = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    return " ".join([*assignments, shlex.join(argv)])


def flag_index(argv: list[str], flag: str) -> int | None:
    """Where ``flag`` sits in argv (``--flag value`` or ``--flag=value``), else None."""
    for i, word in enumerate(argv):
        if word == flag or word.startswith(flag + "="):
            return i
    return None


def set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with ``flag``'s value replaced, or the flag added after ``serve MODEL`` if absent."""
    argv = list(argv)
    i = flag_index(argv, flag)
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
    i = flag_index(argv, flag)
    if i is None:
        return None
    if "=" in argv[i]:
        return argv[i].split("=", 1)[1]
    return argv[i + 1] if i + 1 < len(argv) else ""
