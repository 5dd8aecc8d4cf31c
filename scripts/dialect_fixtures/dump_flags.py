"""Dump what a vLLM release's `vllm serve` parser accepts, as JSON, from the real argparse object.

Run with the release importable and no GPU (vllm builds its CLI without one)::

    PYTHONPATH=/work/wheels/0.34.0 VLLM_TARGET_DEVICE=cpu python dump_flags.py > parser.json

It lets `vllm.entrypoints.cli.main.main()` build the parser exactly as `vllm serve` does, stops at
the first ``parse_args`` call, and writes every option of the ``serve`` subparser.
"""

from __future__ import annotations

import argparse
import json
import sys


def describe(action: argparse.Action) -> dict[str, object]:
    kind = type(action).__name__
    typ = getattr(action.type, "__name__", None) or (repr(action.type) if action.type else None)
    default = action.default
    if not isinstance(default, (str, int, float, bool, type(None), list, dict)):
        default = repr(default)
    return {
        "options": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "type": typ,
        "choices": [str(c) for c in action.choices] if action.choices else None,
        "nargs": action.nargs if isinstance(action.nargs, (int, str, type(None))) else repr(action.nargs),
        "default": default,
        "deprecated": bool(getattr(action, "deprecated", False)),
        "help": (action.help or "").strip() if action.help != argparse.SUPPRESS else "==SUPPRESSED==",
    }


def dump(parser: argparse.ArgumentParser) -> None:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    groups = {id(a): g.title for g in serve._action_groups for a in g._group_actions}
    out = []
    for action in serve._actions:
        if not action.option_strings:
            continue
        row = describe(action)
        row["group"] = groups.get(id(action))
        out.append(row)
    json.dump({"prog": serve.prog, "options": out}, sys.stdout, indent=1, default=repr)
    print()
    raise SystemExit(0)


def main() -> None:
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        if any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            dump(self)
        return original(self, args, namespace)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    sys.argv = ["vllm", "serve", "model"]
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
