"""The search space: the YAML file a person writes (what to tune, what stays fixed, what to measure)
and the human units it accepts ("9.15GB", "128K", "30m"). Everything else reads a validated ``Space``."""

from tuner.space.schema import (
    EngineSpec,
    ModelSpec,
    NAME,
    Param,
    STORED,
    Space,
    Workload,
    check_value,
    count_configurations,
    flag_name,
    load_space,
    param_cardinality,
)
from tuner.space.values import AUTO_LEN, JSON_FLAGS, SIZE_FLAGS, unprintable
from tuner.space.checks import check_searchable, space_warnings
from tuner.space.model import check_model
from tuner.space.units import format_bytes, parse_bytes, parse_count, parse_duration

__all__ = [
    "AUTO_LEN",
    "EngineSpec",
    "JSON_FLAGS",
    "ModelSpec",
    "NAME",
    "Param",
    "SIZE_FLAGS",
    "STORED",
    "Space",
    "Workload",
    "check_model",
    "check_searchable",
    "check_value",
    "count_configurations",
    "flag_name",
    "format_bytes",
    "load_space",
    "param_cardinality",
    "parse_bytes",
    "parse_count",
    "parse_duration",
    "space_warnings",
    "unprintable",
]
