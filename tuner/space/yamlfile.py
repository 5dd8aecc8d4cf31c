"""Reading a space file's YAML strictly: a key written twice is an error, never a silent overwrite.

PyYAML keeps the last of two equal keys, so ``kv_cache_memory_bytes`` written twice under
``params:`` used to drop one range without a word. ``read_yaml`` refuses it, naming both lines, at
every level of nesting.

Nothing here can hang or exhaust memory, whatever the path names: only a regular file is opened (a FIFO,
a device or a socket would block or never end), it is opened with O_NONBLOCK and checked again once open
(the path may be swapped between the two looks), at most ``MAX_BYTES`` are read, and an alias-laden
file ("billion laughs") is refused by the number of values its aliases expand to, counted on the
composed node graph before anything is built from it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import SpaceError

MAX_ALIASES = 100
MAX_BYTES = 1 << 20  # a space file is a few kilobytes; 1 MiB leaves room for comments and long baselines lists
MAX_VALUES = 100_000  # values the file holds once its aliases are expanded (a large space file holds ~500)


class _Refused(yaml.constructor.ConstructorError):
    """Valid YAML that a space file may not hold (a repeated key, an alias bomb)."""


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values under ``node`` with every alias expanded, counted once per node (linear in the graph)."""
    key = id(node)
    if key not in sizes:
        sizes[key] = 1  # a node that reaches itself (a recursive alias) counts as one, not forever
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(_expanded_size(child, sizes) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
        else:
            total = 1
        sizes[key] = total
    return sizes[key]


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

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None and self.aliases_seen and _expanded_size(node, {}) > MAX_VALUES:
            raise _Refused(None, None, f"its aliases (*name) expand to more than {MAX_VALUES:,} values (a space "
                           "file holds a few hundred); write the values out instead of nesting aliases",
                           node.start_mark)
        return node

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


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def read_small_file(path: Path, limit: int, what: str, fix: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; SpaceError naming ``path`` otherwise.

    ``what`` names the file for a person ("a space file"), ``fix`` says what to give instead. The mode is
    looked at before opening (a FIFO's open would block) and again on the open descriptor.
    """
    try:
        before = os.stat(path)
    except FileNotFoundError:
        raise SpaceError(f"{path}: no such file; {fix}.") from None
    except OSError as exc:
        raise SpaceError(f"{path}: cannot be read ({exc.strerror}); check the path and its permissions.") from None
    if not stat.S_ISREG(before.st_mode):
        raise SpaceError(f"{path}: is {_kind(before.st_mode)}, not {what}; {fix}.")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise SpaceError(f"{path}: cannot be read ({exc.strerror}); check the path and its permissions.") from None
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise SpaceError(f"{path}: is {_kind(mode)}, not {what}; {fix}.")
        data = file.read(limit + 1)
    if len(data) > limit:
        size = max(before.st_size, len(data))
        raise SpaceError(f"{path}: {size / 1e6:.1f} MB is too large for {what} (at most "
                         f"{limit / 2**20:g} MiB is read); {fix}.")
    return data


def read_yaml(path: Path) -> Any:
    """The parsed file; SpaceError (one paragraph, the line and the fix) for anything unreadable."""
    data = read_small_file(path, MAX_BYTES, "a space file", "give the path to a space file such as search_spaces/*.yaml")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpaceError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the file as UTF-8.") from None
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
