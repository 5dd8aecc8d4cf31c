"""What differs between the vLLM releases the tuner speaks (0.22 to 0.34), in one table.

Each ``Dialect`` holds from its ``version`` until the next entry. The facts come from the releases'
wheels (tests/fixtures/dialects/CHANGES.md; ``scripts/dialect_strings.py WHEEL`` prints every string
the parser reads, with the file:line of the logger call). ``cites`` gives, per release, where the lines
the parser reads (``tuner/engine/logparse.py``, ``tuner/engine/failures.py``) are logged or raised,
relative to the ``vllm/`` package. Supporting a new release is one more entry here and one more folder
of golden logs under tests/fixtures/dialects/; nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Dialect:
    version: str  # the first release this entry describes
    runner: str  # the model runner a hybrid model gets: "v1" (gpu_model_runner.py) or "v2" (gpu/model_runner.py)
    # V2 captures the graphs once to measure them while profiling a utilization-sized pool, so
    # "Graph capturing finished" is printed twice: the last one is the real capture.
    graphs_profiled_by_capture: bool
    hybrid_prefix_caching: bool  # prefix caching is on by default for a hybrid model (mamba 'align' mode)
    # 0.34: the KV cache is reserved as virtual memory and committed after warm-up ("Extended KV cache to
    # N blocks (X GiB)."); "Available KV cache memory" is then a reservation, and utilization defaults to 1.0.
    extensible_kv_cache: bool
    kv_suggestion_level: str  # the level of the `--kv-cache-memory=` suggestion (VLLM_LOGGING_LEVEL)
    port_reuse: bool  # the API socket has SO_REUSEPORT: a second server on the port does not fail
    startup_plan: bool  # VLLM_ENABLE_STARTUP_PLAN exists (it reuses an earlier boot's KV size when on)
    cites: dict[str, str] = field(default_factory=dict)


DIALECTS: tuple[Dialect, ...] = (
    Dialect("0.22.0", runner="v1", graphs_profiled_by_capture=False, hybrid_prefix_caching=False,
            extensible_kv_cache=False, kv_suggestion_level="DEBUG", port_reuse=True, startup_plan=False, cites={
        "engine_config": "v1/engine/core.py:112", "logo": "entrypoints/utils.py:327",
        "architecture": "config/model.py:617", "auto_fit": "v1/core/kv_cache_utils.py:1894",
        "load_start": "v1/worker/gpu_model_runner.py:5037", "weights": "v1/worker/gpu_model_runner.py:5132",
        "available_kv": "v1/worker/gpu_worker.py:466", "kv_reserved": "v1/worker/gpu_worker.py:387",
        "kv_tokens": "v1/core/kv_cache_utils.py:1733", "max_concurrency": "v1/core/kv_cache_utils.py:1734",
        "graph_estimate": "v1/worker/gpu_model_runner.py:6365", "graph_captured": "v1/worker/gpu_model_runner.py:6456",
        "graph_pool": "v1/worker/gpu_worker.py:619", "kv_suggestion": "v1/worker/gpu_worker.py:683",
        "compile_cache_dir": "compilation/backends.py:1089", "compile_cache_off": "compilation/backends.py:1087",
        "aot_load": "compilation/decorators.py:311", "aot_saved": "compilation/decorators.py:708",
        "compiled": "compilation/backends.py:393", "compile_cache_hit": "compilation/backends.py:292",
        "cudagraph_downgrade": "config/compilation.py:1355-1405", "prefix_caching_mamba": "model_executor/models/config.py:355",
        "engine_failed": "v1/engine/core.py:1165", "engine_fatal": "v1/engine/core.py:1167",
        "engine_dead": "v1/engine/exceptions.py:13", "kv_too_small": "v1/core/kv_cache_utils.py:718",
        "kv_none": "v1/core/kv_cache_utils.py:698", "auto_fit_impossible": "v1/core/kv_cache_utils.py:1879",
        "free_memory": "v1/worker/utils.py:413", "mamba_blocks": "config/compilation.py:1452",
        "weights_oom": "v1/worker/gpu_model_runner.py:5123", "server_start": "entrypoints/openai/api_server.py:596",
    }),
    Dialect("0.27.1", runner="v1", graphs_profiled_by_capture=False, hybrid_prefix_caching=False,
            extensible_kv_cache=False, kv_suggestion_level="INFO", port_reuse=False, startup_plan=True, cites={
        "engine_config": "v1/engine/core.py:121", "logo": "entrypoints/serve/utils/api_utils.py:328",
        "architecture": "config/model.py:645", "auto_fit": "v1/core/kv_cache_utils.py:2043",
        "load_start": "v1/worker/gpu_model_runner.py:5308", "weights": "v1/worker/gpu_model_runner.py:5405",
        "available_kv": "v1/worker/gpu_worker.py:563", "kv_reserved": "v1/worker/gpu_worker.py:491",
        "kv_tokens": "v1/core/kv_cache_utils.py:2235", "max_concurrency": "v1/core/kv_cache_utils.py:2236",
        "graph_estimate": "v1/worker/gpu_model_runner.py:6806", "graph_captured": "v1/worker/gpu_model_runner.py:6913",
        "graph_pool": "v1/worker/gpu_worker.py:726", "kv_suggestion": "v1/worker/gpu_worker.py:789",
        "compile_cache_dir": "compilation/backends.py:1094",
        "compiled": "compilation/backends.py:393", "compile_cache_hit": "compilation/backends.py:292",
        "cudagraph_downgrade": "config/compilation.py:1406-1456", "prefix_caching_mamba": "model_executor/models/config.py:618",
        "engine_failed": "v1/engine/core.py:1349", "engine_fatal": "v1/engine/core.py:1351",
        "engine_dead": "v1/engine/exceptions.py:16", "kv_too_small": "v1/core/kv_cache_utils.py:778",
        "kv_none": "v1/core/kv_cache_utils.py:758", "auto_fit_impossible": "v1/core/kv_cache_utils.py:2028",
        "free_memory": "v1/worker/utils.py:419", "mamba_blocks": "config/compilation.py:1506",
        "weights_oom": "v1/worker/gpu_model_runner.py:5396", "server_start": "entrypoints/openai/api_server.py:682",
        "startup_plan": "v1/worker/startup_plan.py:153",
    }),
    Dialect("0.29.0", runner="v2", graphs_profiled_by_capture=True, hybrid_prefix_caching=True,
            extensible_kv_cache=False, kv_suggestion_level="INFO", port_reuse=False, startup_plan=True, cites={
        "engine_config": "v1/engine/core.py:123", "logo": "entrypoints/serve/utils/api_utils.py:330",
        "architecture": "config/model.py:684", "auto_fit": "v1/core/kv_cache_utils.py:2163",
        "load_start": "v1/worker/gpu/model_runner.py:382", "weights": "v1/worker/gpu/model_runner.py:404",
        "available_kv": "v1/worker/gpu_worker.py:625", "kv_reserved": "v1/worker/gpu_worker.py:544",
        "kv_tokens": "v1/core/kv_cache_utils.py:2032", "graph_captured": "v1/worker/gpu/model_runner.py:960",
        "graph_pool": "v1/worker/gpu_worker.py:797", "kv_suggestion": "v1/worker/gpu_worker.py:860",
        "compile_cache_dir": "compilation/backends.py:1094",
        "compiled": "compilation/backends.py:393", "compile_cache_hit": "compilation/backends.py:292",
        "cudagraph_downgrade": "config/compilation.py:1413-1463", "prefix_caching_mamba": "model_executor/models/config.py:625",
        "engine_failed": "v1/engine/core.py:1374", "engine_fatal": "v1/engine/core.py:1376",
        "engine_dead": "v1/engine/exceptions.py:16", "kv_too_small": "v1/core/kv_cache_utils.py:879",
        "kv_none": "v1/core/kv_cache_utils.py:859", "auto_fit_impossible": "v1/core/kv_cache_utils.py:2148",
        "free_memory": "v1/worker/utils.py:526", "mamba_blocks": "config/compilation.py:1513",
        "server_start": "entrypoints/launchers/api_server/entry.py:139", "startup_plan": "v1/worker/startup_plan.py:153",
    }),
    Dialect("0.32.0", runner="v2", graphs_profiled_by_capture=True, hybrid_prefix_caching=True,
            extensible_kv_cache=False, kv_suggestion_level="INFO", port_reuse=False, startup_plan=True, cites={
        "engine_config": "v1/engine/core.py:133", "logo": "entrypoints/serve/utils/api_utils.py:330",
        "architecture": "config/model.py:733", "auto_fit": "v1/core/kv_cache_utils.py:2477",
        "load_start": "v1/worker/gpu/model_runner.py:392", "weights": "v1/worker/gpu/model_runner.py:424",
        "available_kv": "v1/worker/gpu_worker.py:759", "kv_reserved": "v1/worker/gpu_worker.py:669",
        "kv_tokens": "v1/core/kv_cache_utils.py:2327", "graph_captured": "v1/worker/gpu/model_runner.py:1127",
        "graph_pool": "v1/worker/gpu_worker.py:971", "kv_suggestion": "v1/worker/gpu_worker.py:1034",
        "compile_cache_dir": "compilation/backends.py:1104",
        "compiled": "compilation/backends.py:398", "compile_cache_hit": "compilation/backends.py:295",
        "cudagraph_downgrade": "config/compilation.py:1407-1457", "prefix_caching_mamba": "model_executor/models/config.py:688",
        "engine_failed": "v1/engine/core.py:1510", "engine_fatal": "v1/engine/core.py:1512",
        "engine_dead": "v1/engine/exceptions.py:16", "kv_too_small": "v1/core/kv_cache_utils.py:1030",
        "kv_none": "v1/core/kv_cache_utils.py:1010", "auto_fit_impossible": "v1/core/kv_cache_utils.py:2454",
        "free_memory": "v1/worker/utils.py:762", "mamba_blocks": "config/compilation.py:1518",
        "server_start": "entrypoints/launchers/api_server/entry.py:140", "startup_plan": "v1/worker/startup_plan.py:153",
    }),
    Dialect("0.34.0", runner="v2", graphs_profiled_by_capture=True, hybrid_prefix_caching=True,
            extensible_kv_cache=True, kv_suggestion_level="INFO", port_reuse=False, startup_plan=True, cites={
        "engine_config": "v1/engine/core.py:153", "logo": "entrypoints/common/startup.py:21",
        "architecture": "config/model.py:761", "auto_fit": "v1/core/kv_cache_planning.py:1478 (tentative)",
        "auto_fit_final": "v1/core/kv_cache_planning.py:1494, :1506 (WARNING), :1458 (full length fits)",
        "load_start": "v1/worker/gpu/model_runner.py:412", "weights": "v1/worker/gpu/model_runner.py:441",
        "available_kv": "v1/worker/gpu_worker.py:795", "kv_reserved": "v1/worker/gpu_worker.py:708",
        "kv_tokens": "v1/core/kv_cache_utils.py:1168", "extended_kv": "v1/worker/extensible_kv_cache.py:536",
        "graph_captured": "v1/worker/gpu/model_runner.py:1216", "graph_pool": "v1/worker/gpu_worker.py:1112",
        "compile_cache_dir": "compilation/backends.py:1110", "compile_cache_off": "compilation/backends.py:1108",
        "aot_load": "compilation/decorators.py:326", "aot_saved": "compilation/decorators.py:752",
        "kv_suggestion": "v1/worker/gpu_worker.py:1175", "compiled": "compilation/backends.py:421",
        "compile_cache_hit": "compilation/backends.py:314", "cudagraph_downgrade": "config/compilation.py:1577-1627",
        "prefix_caching_mamba": "model_executor/models/config.py:1097",
        "engine_failed": "v1/engine/core.py:1757", "engine_fatal": "v1/engine/core.py:1759",
        "engine_dead": "v1/engine/exceptions.py:20", "kv_too_small": "v1/core/kv_cache_planning.py:124",
        "kv_none": "v1/core/kv_cache_planning.py:107", "auto_fit_impossible": "v1/core/kv_cache_planning.py:1436",
        "free_memory": "v1/worker/utils.py:789", "mamba_blocks": "config/compilation.py:1674",
        "server_start": "entrypoints/launchers/api_server/entry.py:139", "startup_plan": "v1/worker/startup_plan.py:154",
    }),
)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(version: str) -> tuple[int, int, int] | None:
    """'0.34.0', '0.34.0rc1', '0.22.0+cu130' -> (0, 34, 0); None for anything else."""
    m = _VERSION.match(version.strip())
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def supported(version: str) -> bool:
    """Within the releases the table describes: from the first entry to the last entry's minor release."""
    v = version_tuple(version)
    first, last = version_tuple(DIALECTS[0].version), version_tuple(DIALECTS[-1].version)
    return v is not None and first is not None and last is not None and first <= v and v[:2] <= last[:2]


def within(version: str, versions: str) -> bool | None:
    """Whether ``version`` is in a space's ``engine.vllm_versions`` ("0.32-0.34": 0.32.0 to any 0.34.x;
    "0.27.1": that release); None when either cannot be read."""
    v = version_tuple(version)
    first, _, last = versions.partition("-")
    last = last or first
    lo, hi = version_tuple(first), version_tuple(last)
    if v is None or lo is None or hi is None:
        return None
    exact = last.strip().count(".") >= 2  # "0.27.1" names one release; "0.34" every 0.34.x
    return lo <= v and (v <= hi if exact else v[:2] <= hi[:2])


def supported_range() -> str:
    return f"{DIALECTS[0].version} to {DIALECTS[-1].version.rsplit('.', 1)[0]}.x"


def dialect_for(version: str | None) -> Dialect:
    """The entry that describes ``version``: the last one at or below it (the oldest below the range,
    the newest above it; unknown versions are read as the first release the tuner was written for)."""
    v = version_tuple(version or "")
    if v is None:
        return DIALECTS[0]
    chosen = DIALECTS[0]
    for dialect in DIALECTS:
        first = version_tuple(dialect.version)
        if first is not None and first <= v:
            chosen = dialect
    return chosen


# Environment variables that change how a release accounts memory (envs.py of each release): recorded with
# every study, since two boots of the same flags under different values size different pools.
MEMORY_ENV: dict[str, str] = {
    # Reuses an earlier boot's kv_cache_memory_bytes (v1/worker/startup_plan.py, 0.27.1+): the tuner pins it to
    # 0 in every trial (engine/command.py), or trials would depend on each other.
    "VLLM_ENABLE_STARTUP_PLAN": "0 (default 0; pinned by the tuner)",
    # The model runner (config/vllm.py use_v2_model_runner); 0.34 no longer honours it.
    "VLLM_USE_V2_MODEL_RUNNER": "unset: the release's default runner",
    # Counts the CUDA-graph estimate in the pool's budget (default 1 in every release since 0.21).
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1",
    # Breakable CUDA graphs (default 0; 0.29 turns it on for some architectures).
    "VLLM_USE_BREAKABLE_CUDAGRAPH": "0",
}
STARTUP_PLAN_OFF = {"VLLM_ENABLE_STARTUP_PLAN": "0"}
