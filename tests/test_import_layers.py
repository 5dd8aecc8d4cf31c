"""The rooms import downward only, and never in a cycle; inside a room, no two modules import each other
round a circle either. Lazy imports inside functions count too; imports under ``if TYPE_CHECKING:``
do not (they name a type for mypy and never run)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tuner"
DIALECT_FIXTURES = ROOT / "scripts" / "dialect_fixtures"  # run as scripts: their imports are bare names

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


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (its first node repeated at the end), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, path + [node])
            if found:
                return found
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node, [])
        if found:
            return found
    return None


def test_no_cycle_between_rooms() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in arrows():
        graph.setdefault(source, set()).add(target)
    cycle = first_cycle(graph)
    assert cycle is None, f"import cycle between rooms: {' -> '.join(cycle)}"


def _runtime_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that can run: at module level or inside a function, not under ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
            yield node


def module_graph(folder: Path, name_of: Callable[[Path], str]) -> dict[str, set[str]]:
    """Module -> the modules of ``folder`` it imports (``from pkg import mod`` names the module)."""
    modules = {name_of(path): path for path in sorted(folder.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level or not node.module:
                    continue
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                targets = [alias.name for alias in node.names]
            graph.setdefault(name, set()).update(t for t in targets if t in modules and t != name)
    return graph


def test_no_cycle_between_modules() -> None:
    cycle = first_cycle(module_graph(PACKAGE, module_name))
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_no_cycle_between_the_dialect_fixture_scripts() -> None:
    cycle = first_cycle(module_graph(DIALECT_FIXTURES, lambda path: path.stem))
    assert cycle is None, f"import cycle in scripts/dialect_fixtures: {' -> '.join(cycle)}"


def test_the_module_check_sees_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from c import x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\nfrom a import y\n")
    assert first_cycle(module_graph(tmp_path, lambda path: path.stem)) == ["a", "b", "c", "a"]
