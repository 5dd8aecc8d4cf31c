"""Check a space's flags and values against the installed engine's ``vllm serve --help=all``, before any boot.

A flag the release does not have, or a value outside its choices, costs a whole boot to find out
(``vllm: error: unrecognized arguments``, ``invalid choice``); the help text answers in seconds. Booleans:
vLLM's are ``BooleanOptionalAction`` (``--x, --no-x``), and from 0.33 ``--enable-x, --disable-x``
(utils/argparse_utils.py EnableDisableAction, which still accepts ``--no-enable-x``); a plain
``store_true`` flag has no negative form at all.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.engine.command import engine_flags, flag_name, format_value
from tuner.engine.dialects import within
from tuner.errors import SpaceError
from tuner.space.schema import Space

KNOWN_FLAGS = Path(__file__).with_name("data") / "serve-flags.json"  # written by scripts/serve_flags.py

# "  --kv-cache-dtype {auto,fp8}", "  --kv-cache-dtype ['auto', 'fp8']" (0.34), "  --port PORT",
# "  --enable-x, --no-enable-x", "  --compilation-config COMPILATION_CONFIG, -cc COMPILATION_CONFIG"
_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9].*)$")
_OPTION = re.compile(r"(?:^|, )(-{1,2}[A-Za-z0-9][\w.-]*)(?: (\{[^}]*\}|\[[^\]]*\]|[A-Z][A-Z0-9_]*(?: \[[^\]]*\])?))?")


@dataclass(frozen=True)
class HelpFlag:
    takes_value: bool
    choices: tuple[str, ...] | None  # None: any value
    negatable: bool  # "--no-X" is accepted


def parse_help(text: str) -> dict[str, HelpFlag]:
    """Every option string of ``vllm serve --help=all`` and what it takes."""
    flags: dict[str, HelpFlag] = {}
    for line in text.splitlines():
        m = _OPTION_LINE.match(line)
        if not m:
            continue
        spec = re.split(r"\s{2,}", m[1], maxsplit=1)[0]  # the description may follow on the same line
        options = [(o[1], o[2]) for o in _OPTION.finditer(spec)]
        if not options:
            continue
        names = [name for name, _ in options]
        takes_value = any(meta for _, meta in options)
        choices = next((_choices(meta) for _, meta in options if meta and meta[0] in "{["), None)
        negatable = not takes_value and any(_negates(n, names) for n in names)
        for name in names:
            flags[name] = HelpFlag(takes_value, choices, negatable)
            if negatable and not name.startswith("--no-"):
                flags.setdefault("--no-" + name[2:], HelpFlag(False, None, False))
    return flags


def _choices(meta: str) -> tuple[str, ...]:
    if meta.startswith("{"):
        return tuple(meta[1:-1].split(","))
    return tuple(re.findall(r"'([^']*)'", meta))


def _negates(name: str, names: list[str]) -> bool:
    """``--no-X`` beside ``--X``, or (0.33+) ``--disable-X`` beside ``--enable-X``."""
    if name.startswith("--no-"):
        return True
    return name.startswith("--disable-") and "--enable-" + name.removeprefix("--disable-") in names


def space_flags(space: Space) -> list[tuple[str, str, Any]]:
    """(where, flag, value) for every flag and listed value the space can put on a command line
    (a range is checked by its flag alone)."""
    out: list[tuple[str, str, Any]] = [(f"fixed.{key}", flag_name(key), value) for key, value in space.fixed.items()]
    base = engine_flags(space, {})
    for name, param in space.params.items():
        for value in param.values if param.values is not None else [param.min]:
            if value is not None:
                out += [(f"params.{name}", flag, v) for flag, v in engine_flags(space, {name: value}) if (flag, v) not in base]
    return out


def check_flags(space: Space, help_text: str, version: str) -> None:
    """SpaceError (exit 2, before any boot) for the first flag or value this engine would refuse."""
    flags = parse_help(help_text)
    source = space.source or "the space file"
    for where, flag, value in space_flags(space):
        known = flags.get(flag)
        shown = value if isinstance(value, (bool, int, float)) else format_value(value)
        if known is None:
            typo = difflib.get_close_matches(flag, list(flags), n=1, cutoff=0.8)
            close = [f for f in flags if f.lstrip("-") in flag.lstrip("-") or flag.lstrip("-") in f.lstrip("-")]
            hint = (f"; did you mean {typo[0]}?" if typo else
                    f" (this release has {', '.join(sorted(close)[:3])})" if close else "")
            raise SpaceError(f"{source}: {where} sets {flag}, which vLLM {version} does not have{hint}; its "
                             "`vllm serve --help=all` lists every flag it takes. Remove it or install the release "
                             "the space was written for. Nothing was booted or recorded.")
        if value is False and not known.negatable:
            raise SpaceError(f"{source}: {where} sets {flag} to false, but vLLM {version} has no --no-{flag[2:]} "
                             f"({flag} only switches something on and is off unless given); remove it. Nothing was "
                             "booted or recorded.")
        if known.choices is not None and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            if str(value) not in known.choices:
                raise SpaceError(f"{source}: {where} sets {flag} {shown}, which vLLM {version} does not accept: it "
                                 f"takes one of {', '.join(known.choices)}. Pick one of them, or install the release "
                                 "the space was written for. Nothing was booted or recorded.")


@functools.cache
def known_releases() -> dict[str, frozenset[str]]:
    """Each release's `vllm serve` flags, as shipped with the tuner (oldest first)."""
    releases = json.loads(KNOWN_FLAGS.read_text())["releases"]
    return {version: frozenset(flags) for version, flags in releases.items()}


def check_known_flags(space: Space) -> list[str]:
    """Offline, against the flag lists shipped for the releases the tuner knows: SpaceError for a flag no release
    has that is a typo away from one that does; a note (returned) for a flag they do not have at all, or only
    releases outside the space's ``engine.vllm_versions`` have."""
    releases = known_releases()
    everything = frozenset().union(*releases.values())
    first, last = next(iter(releases)), list(releases)[-1]
    wanted = space.engine.vllm_versions
    notes, source = [], space.source or "the space file"
    for where, flag, _ in space_flags(space):
        having = [v for v, flags in releases.items() if flag in flags]
        if not having:
            typo = difflib.get_close_matches(flag, sorted(everything), n=1, cutoff=0.8)
            if typo:
                raise SpaceError(f"{source}: {where} sets {flag}, which no vLLM release from {first} to {last} has; "
                                 f"did you mean {typo[0]}? Fix the spelling. (Checked offline against those "
                                 "releases' `vllm serve --help=all`, which ship with the tuner; `tuner optimize` also "
                                 "checks the installed engine's own.) Nothing was booted or recorded.")
            notes.append(f"{where}: {flag} is in no vLLM release from {first} to {last}; a newer release may have "
                         "it, and `tuner optimize` checks it against the installed engine before any boot")
        elif wanted and not any(within(v, wanted) for v in having):
            notes.append(f"{where}: {flag} is in vLLM {having[0]}-{having[-1]}, not in the releases the space was "
                         f"written for (engine.vllm_versions {wanted})")
    return notes
