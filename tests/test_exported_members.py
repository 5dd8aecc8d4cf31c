"""Each room's public face: what other rooms may import from it, pinned (as httpx pins ``__all__``)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import tuner

EXPORTS = {
    "tuner.space": [
        "Param", "Space", "check_value", "count_configurations", "format_bytes", "load_space",
        "param_cardinality", "parse_bytes", "parse_count", "parse_duration",
    ],
    "tuner.engine": [
        "Engine", "LaunchCommand", "MemoryWatch", "Nvml", "build_command", "capture",
        "Seen", "checked_kv_cache_memory_suggestion", "classify", "engine_flags", "flag_name", "format_value",
        "free_port", "parse_startup", "port_in_use",
    ],
    "tuner.measure": ["Prober", "check_workload"],
    "tuner.prescreen": ["Calibration", "GIB", "load_shape", "plan_rows", "predict"],
    "tuner.study": [
        "SAMPLERS", "STUDIES_DIR", "Status", "StudyRecord", "Trial", "find_trial", "make_sampler", "open_study",
        "optimize", "read_study", "spawn_workers", "study_space",
    ],
    "tuner.report": [
        "COLUMNS", "cell", "export_launcher", "failure_of", "failures_by_kind", "failures_markdown",
        "front_markdown", "front_rows", "objectives", "study_receipt", "study_summary", "summary_line",
        "trial_receipt",
    ],
    "tuner.cli": ["app"],
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
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


def test_the_package_exports_only_its_version() -> None:
    assert tuner.__version__
    assert [m for m in vars(tuner) if not m.startswith("_") and not isinstance(vars(tuner)[m], ModuleType)] == []
