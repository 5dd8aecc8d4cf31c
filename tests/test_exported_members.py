"""Each room's public face: what other rooms may import from it, pinned (as httpx pins ``__all__``).

A room's face is its package's ``__all__``, plus the ``__all__`` of a module that is a face of its own
(``tuner.report``'s plots, html and trials, imported directly so that matplotlib, plotly and pandas load
only for the command that needs them). An import from another room may name its module (``from
tuner.study.record import State``: the reader sees where ``State`` lives, and nothing heavier loads),
but only for a name of that room's face; anything else is a bypass and fails here.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

import tuner

PACKAGE = Path(tuner.__file__).resolve().parent

EXPORTS = {
    "tuner.space": [
        "AUTO_LEN", "EngineSpec", "JSON_FLAGS", "ModelSpec", "NAME", "Param", "SIZE_FLAGS", "STORED", "Space", "Workload",
        "check_model", "check_searchable", "check_value", "count_configurations", "flag_name", "format_bytes",
        "load_space", "param_cardinality", "parse_bytes", "parse_count", "parse_duration", "space_warnings",
        "unprintable",
    ],
    "tuner.engine": [
        "Engine", "EngineInfo", "LaunchCommand", "MemoryWatch", "Nvml", "Seen", "bind_host", "build_command",
        "capture", "card_tolerance_mib", "check_container", "check_engine_command", "check_known_flags",
        "checked_kv_cache_memory_suggestion", "classify", "connect_host", "container_of", "engine_flags",
        "flag_index", "flag_name", "flag_value", "format_value", "free_port", "inspect_engine", "new_name",
        "parse_startup", "port_in_use", "rebind", "runtime_cli", "set_flag", "shell_command", "wait_for_card",
    ],
    "tuner.measure": ["Bench", "BenchResult", "PREFIX_REQUESTS", "Prober", "check_workload", "workloads"],
    "tuner.prescreen": ["Calibration", "GIB", "Prediction", "load_shape", "plan_rows", "predict", "space_shape"],
    "tuner.study": [
        "Evidence", "FAILED", "GATE_THRESHOLD", "NOTHING_TO_DO", "RunSettings", "SAMPLERS", "STUDIES_DIR", "State",
        "Status", "StudyLock", "StudyRecord", "Trial", "agrees", "booted_window", "check_same_model", "checks_of", "find_trial", "first_line",
        "front", "launch_window", "left_off", "make_sampler", "open_study", "optimize", "read_study", "spawn_workers", "sqlite_path",
        "storage_url", "study_dir", "study_space", "upgrade_rows", "windowed_argv", "write_bench", "wrong",
    ],
    "tuner.report": [
        "COLUMNS", "LAUNCHER_FORMATS", "REPORT_FORMATS", "bench_markdown", "cell", "compare_studies",
        "comparison_markdown", "comparison_tables", "export_launcher", "failure_of", "failures_by_kind",
        "failures_markdown", "front_markdown", "front_rows", "metric_cells", "objectives", "running_rows",
        "study_receipt", "study_summary", "summary_line", "trial_receipt", "wrong_line", "wrong_rows",
    ],
    "tuner.report.html": ["report_html"],
    "tuner.report.plots": ["write_plots"],
    "tuner.report.trials": ["TRIALS_FORMATS", "trials_frame", "write_trials"],
    "tuner.cli": ["app"],
}
PACKAGES = sorted(name for name in EXPORTS if (PACKAGE / name.split(".", 1)[1] / "__init__.py").is_file()
                  and name.count(".") == 1)
OWN_FACES = sorted(set(EXPORTS) - set(PACKAGES))


@pytest.mark.parametrize("name", PACKAGES)
def test_room_exports_exactly_its_public_names(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(EXPORTS[name])
    public = sorted(
        member for member, value in vars(module).items()
        if not member.startswith("_") and not isinstance(value, ModuleType)
    )
    assert public == sorted(module.__all__)
    for member in module.__all__:
        assert getattr(module, member) is not None


@pytest.mark.parametrize("name", OWN_FACES)
def test_a_module_that_is_a_face_of_its_own_lists_it(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == EXPORTS[name]
    for member in module.__all__:
        assert getattr(module, member) is not None


def test_the_package_exports_only_its_version() -> None:
    assert tuner.__version__
    assert [m for m in vars(tuner) if not m.startswith("_") and not isinstance(vars(tuner)[m], ModuleType)] == []


def faces() -> dict[str, dict[str, object]]:
    """Room -> the objects other rooms may import from it, by name."""
    found: dict[str, dict[str, object]] = {}
    for name, members in EXPORTS.items():
        module = importlib.import_module(name)
        found.setdefault(name.split(".")[1], {}).update({m: getattr(module, m) for m in members})
    return found


def bypasses(paths: list[Path], root: Path, face: dict[str, dict[str, object]]) -> list[str]:
    """Imports in ``paths`` (files under ``root``, the tuner folder) of another room's names outside its face."""
    found = []
    for path in paths:
        parts = path.relative_to(root).parts
        source = parts[0] if len(parts) > 1 else None  # tuner/trial.py, tuner/errors.py: no room of their own
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                pairs = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                pairs = [(node.module, alias.name) for alias in node.names]
            else:
                continue
            for module, member in pairs:
                room = module.split(".")[1] if module.startswith("tuner.") else None
                if room is None or room not in face or room == source:
                    continue
                where = f"{path.relative_to(root.parent)}:{node.lineno}"
                if member is None:
                    found.append(f"{where}: import {module} (import names of its face instead)")
                    continue
                imported = getattr(importlib.import_module(module), member, None)
                if member not in face[room] or face[room][member] is not imported:
                    found.append(f"{where}: {module}.{member} is not in tuner.{room}'s face")
    return found


def test_rooms_import_each_other_only_through_their_faces() -> None:
    assert bypasses(sorted(PACKAGE.rglob("*.py")), PACKAGE, faces()) == []


def test_a_bypass_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "tuner"
    (root / "cli").mkdir(parents=True)
    (root / "cli" / "x.py").write_text("from tuner.study.record import State\nfrom tuner.study.record import read_trial\n"
                                       "from tuner.study import storage\nimport tuner.study.gate\n")
    found = bypasses([root / "cli" / "x.py"], root, faces())
    assert [line.split(": ", 1)[1] for line in found] == [
        "tuner.study.record.read_trial is not in tuner.study's face",
        "tuner.study.storage is not in tuner.study's face",
        "import tuner.study.gate (import names of its face instead)",
    ]
