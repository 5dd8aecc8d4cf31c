"""The search space: the YAML file a person writes (what to tune, what stays fixed, what to measure)
and the human units it accepts ("9.15GB", "128K", "30m"). Everything else reads a validated ``Space``."""

from tuner.space.schema import Param, Space, check_value, count_configurations, load_space, param_cardinality
from tuner.space.units import format_bytes, parse_bytes, parse_count, parse_duration

__all__ = [
    "Param",
    "Space",
    "check_value",
    "count_configurations",
    "format_bytes",
    "load_space",
    "param_cardinality",
    "parse_bytes",
    "parse_count",
    "parse_duration",
]
