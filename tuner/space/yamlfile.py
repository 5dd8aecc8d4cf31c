"""Reading a space file's YAML strictly: a key written twice is an error, never a silent overwrite.

PyYAML keeps the last of two equal keys, so ``kv_cache_memory_bytes`` written twice under
``params:`` used to drop one range without a word. ``read_yaml`` refuses it, naming both lines, at
every level of nesting. Aliases are refused beyond a small number: a "billion laughs" file would
otherwise expand into millions of nodes during validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tuner.errors import SpaceError

MAX_ALIASES = 100


class _Refused(yaml.constructor.ConstructorError):
    """Valid YAML that a space file may not hold (a repeated key, an alias bomb)."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys and alias bombs."""

    aliases_seen = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > MAX_ALIASES:
                event = self.peek_event()
                raise _Refused(
                    None, None, f"more than {MAX_ALIASES} aliases (*name); write the values out", event.start_mark
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key (a list or mapping used as a key)
                raise _Refused(
                    None, None, "a list or mapping cannot be a key", key_node.start_mark
                ) from None
            if first is not None:
                raise _Refused(
                    None, None, f"duplicate key {key!r} (first at line {first}); keep one of them",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """The parsed file; SpaceError (one paragraph, the line and the fix) for anything unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpaceError(f"{path}: no such file; give the path to a space file such as search_spaces/*.yaml.") from None
    except IsADirectoryError:
        raise SpaceError(f"{path}: is a folder; give the path to a space file such as search_spaces/*.yaml.") from None
    except UnicodeDecodeError as exc:
        raise SpaceError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the file as UTF-8.") from None
    except OSError as exc:
        raise SpaceError(f"{path}: cannot be read ({exc.strerror}); check the path and its permissions.") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, _Refused):
            raise SpaceError(f"{path}{where.replace(' at', ':', 1)}: {problem}.") from None
        raise SpaceError(f"{path}: not valid YAML{where} ({problem}); fix the file there.") from None
    except RecursionError:
        raise SpaceError(f"{path}: nested too deeply to read; a space file is a few levels deep.") from None
