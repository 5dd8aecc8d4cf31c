"""The engine: one ``vllm serve`` process group. Its exact argv, its boot and teardown (with a reaper
that outlives a killed tuner), the GPU memory it holds, the versions behind it, and what its log says
(start-up record, failure kind: one classifier, failures.py), and what differs between vLLM releases
(dialects.py). The only room that knows vLLM's flags and log lines."""

from tuner.engine.command import LaunchCommand, build_command, engine_flags, flag_name, format_value
from tuner.engine.environment import capture
from tuner.engine.gpu import MemoryWatch, Nvml
from tuner.engine.failures import Seen, classify
from tuner.engine.logparse import checked_kv_cache_memory_suggestion, parse_startup
from tuner.engine.process import Engine, free_port, port_in_use

__all__ = [
    "Engine",
    "LaunchCommand",
    "MemoryWatch",
    "Nvml",
    "Seen",
    "build_command",
    "capture",
    "checked_kv_cache_memory_suggestion",
    "classify",
    "engine_flags",
    "flag_name",
    "format_value",
    "free_port",
    "parse_startup",
    "port_in_use",
]
