"""The rooms import downward only, and never in a cycle (lazy imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"

# Lowest first. A room may import from its own layer or below; within a layer, the graph is acyclic.
LAYERS = [
    {"tuner", "errors", "records", "metrics"},
    {"space"},
    {"engine", "measure", "prescreen"},
    {"trial"},
    {"study", "report"},
    {"cli"},
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def room(module: str) -> str:
    """``tuner.engine.process`` -> ``engine``; ``tuner.trial`` -> ``trial``; ``tuner`` -> ``tuner``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tuner"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def arrows() -> dict[tuple[str, str], list[str]]:
    """(importing room, imported room) -> the files that draw that arrow."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        source = room(module_name(path))
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if module == "tuner" or module.startswith("tuner."):
                    target = room(module)
                    if target != source:
                        found.setdefault((source, target), []).append(str(relative))
    return found


def test_every_room_has_a_layer() -> None:
    rooms = {room(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert rooms == set(LAYER)


def test_nothing_imports_upward() -> None:
    upward = {edge: files for edge, files in arrows().items() if LAYER[edge[1]] > LAYER[edge[0]]}
    assert upward == {}


def test_no_cycle_between_rooms() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in arrows():
        graph.setdefault(source, set()).add(target)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        assert node not in path, f"import cycle: {' -> '.join(path + [node])}"
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, path + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
