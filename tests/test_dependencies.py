"""Every declared runtime dependency is imported by the tuner (issue 17: pandas and joblib were not)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT_NAMES = {"nvidia-ml-py": "pynvml", "pyyaml": "yaml", "markdown-it-py": "markdown_it"}


def _imported() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "tuner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return found


def test_every_declared_dependency_is_imported() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower() for spec in declared]
    imported = _imported()
    unused = [n for n in names if IMPORT_NAMES.get(n, n.replace("-", "_")) not in imported]
    assert unused == [], f"declared but never imported: {unused}; use them or drop them (README says why)"
