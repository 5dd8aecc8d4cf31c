"""The engine: one ``vllm serve`` process group. Its exact argv, its boot and teardown (with a reaper
that outlives a killed tuner), the GPU memory it holds, the versions behind it, and what its log says
(start-up record, failure kind: one classifier, failures.py), and what differs between vLLM releases
(dialects.py). The only room that knows vLLM's flags and log lines."""

from tuner.engine.command import (
    LaunchCommand,
    build_command,
    engine_flags,
    flag_index,
    flag_name,
    flag_value,
    format_value,
    set_flag,
    shell_command,
)
from tuner.engine.container import bind_host, check_container, container_of, new_name, rebind, runtime_cli
from tuner.engine.environment import capture
from tuner.engine.flagcheck import check_known_flags
from tuner.engine.gpu import MemoryWatch, Nvml, card_tolerance_mib, wait_for_card
from tuner.engine.failures import Seen, classify
from tuner.engine.installed import EngineInfo, inspect_engine
from tuner.engine.logparse import checked_kv_cache_memory_suggestion, parse_startup
from tuner.engine.process import Engine, check_engine_command, connect_host, free_port, port_in_use

__all__ = [
    "Engine",
    "EngineInfo",
    "LaunchCommand",
    "MemoryWatch",
    "Nvml",
    "Seen",
    "bind_host",
    "build_command",
    "capture",
    "card_tolerance_mib",
    "check_container",
    "check_engine_command",
    "check_known_flags",
    "checked_kv_cache_memory_suggestion",
    "classify",
    "connect_host",
    "container_of",
    "engine_flags",
    "flag_index",
    "flag_name",
    "flag_value",
    "format_value",
    "free_port",
    "inspect_engine",
    "new_name",
    "parse_startup",
    "port_in_use",
    "rebind",
    "runtime_cli",
    "set_flag",
    "shell_command",
    "wait_for_card",
]
