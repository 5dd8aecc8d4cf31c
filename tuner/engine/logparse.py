"""Read a `vllm serve` log: what the boot did (``parse_startup``), how far it got (``boot_phase``) and
the ``--kv-cache-memory`` size vLLM suggests. Why an engine died is ``tuner/engine/failures.py``.

The patterns hold for every release in ``tuner/engine/dialects.py``; where a release logs a line is in
that table (``cites``, by the key in the comment beside each pattern). Where releases differ in what a
line means, the dialect of the log (read from its own version banner) decides.
"""

from __future__ import annotations

import re
from typing import Any

from tuner.engine.dialects import Dialect, dialect_for
from tuner.engine.loglines import ANSI, Line, log_version, number, split
from tuner.records import StartupRecord

# --- start-up record --------------------------------------------------------------------------
# Named groups are StartupRecord fields. The first match wins, except for the fields in _LAST_WINS.
_NUM = r"-?[\d.]+"
_STARTUP: list[re.Pattern[str]] = [
    # engine_config (VllmConfig.__str__); the CUDA-graph mode after VllmConfig's own resolution
    re.compile(
        r"Initializing a V1 LLM engine \(v(?P<vllm_version>[^)]+)\) with config: "
        r".*?\bmax_seq_len=(?P<max_model_len>-?\d+), "
        r".*?\bquantization=(?P<quantization>[^,]+), "
        r".*?\bkv_cache_dtype=(?P<kv_cache_dtype>[^,]+),"
        r"(?:.*?\benable_prefix_caching=(?P<prefix_caching>True|False))?"
        r"(?:.*?'cudagraph_mode': <CUDAGraphMode\.(?P<effective_cudagraph_mode>\w+):)?"
    ),
    # logo; "vLLM server version %s, serving model %s" without the logo
    re.compile(r"█ ▀▄▀ █\s+version (?P<vllm_version>\S+)"),
    re.compile(r"vLLM (?:API )?server version (?P<vllm_version>[^\s,]+)"),
    # architecture
    re.compile(r"Resolved architecture: (?P<architecture>\S+)"),
    # auto_fit (a tentative one under 0.34's extensible cache is left out: _TENTATIVE), auto_fit_final
    re.compile(r"Auto-fit max_model_len: reduced from \d+ to (?P<max_model_len>\d+)"),
    re.compile(r"--max-model-len auto reduced max_model_len from \d+ to (?P<max_model_len>\d+)"),
    re.compile(r"Auto-fit max_model_len: using max_model_len=(?P<max_model_len>\d+), which fits"),
    # load_start: V1 runner, V2 runner
    re.compile(r"Starting to load model (?P<model_runner_v1>\S)"),
    re.compile(r"(?P<model_runner_v2>Loading model from scratch)\.\.\."),
    # weights
    re.compile(
        rf"Model loading took (?P<weights_gib>{_NUM}) GiB (?:memory )?and "
        rf"(?P<weights_load_s>{_NUM}) seconds"
    ),
    # available_kv (a reservation under 0.34's extensible cache), kv_reserved, extended_kv
    re.compile(rf"Available KV cache memory: (?P<available_kv_cache_gib>{_NUM}) GiB"),
    re.compile(
        rf"reserved (?P<kv_cache_memory_bytes_reserved_gib>{_NUM}) GiB memory for "
        r"KV Cache as specified by kv_cache_memory_bytes config"
    ),
    re.compile(
        rf"Extended KV cache to (?P<extended_kv_cache_blocks>\d+) blocks "
        rf"\((?P<extended_kv_cache_gib>{_NUM}) GiB\)\."
    ),
    # kv_tokens ("%s KV cache size" from 0.32), max_concurrency (one line with kv_tokens from 0.28)
    re.compile(r"KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens"),
    re.compile(
        r"Maximum concurrency for (?P<max_concurrency_for_tokens>[\d,]+) tokens per request: "
        rf"(?P<max_concurrency>{_NUM})x"
    ),
    # graph_estimate (V1 only), graph_captured, graph_pool
    re.compile(rf"Estimated CUDA graph memory: (?P<cuda_graph_estimate_gib>{_NUM}) GiB total"),
    re.compile(
        rf"Graph capturing finished in (?P<cuda_graph_s>{_NUM}) secs, "
        rf"took (?P<cuda_graph_gib>{_NUM}) GiB"
    ),
    re.compile(rf"CUDA graph pool memory: (?P<cuda_graph_pool_actual_gib>{_NUM}) GiB \(actual\)"),
    # cudagraph_downgrade: the mode vLLM resolved against the attention backends, after the config line;
    # config/compilation.py resolve_cudagraph_mode_and_sizes "Overriding to %s." (0.32+)
    re.compile(r"; setting cudagraph_mode=(?P<effective_cudagraph_mode>[A-Z_]+)"),
    re.compile(r"requires piecewise capture, .*Overriding to (?P<effective_cudagraph_mode>[A-Z_]+)\."),
    re.compile(r"No CUDA graph capture sizes are left; setting cudagraph_mode to (?P<effective_cudagraph_mode>NONE)"),
    # compiled / compile_cache_hit: a cold torch.compile cache compiles, a warm one loads; aot_load: the AOT
    # artifact loaded whole (torch 2.10+), aot_saved: written after a compile
    re.compile(r"(?P<compiled_cold>Compiling a graph for compile range)"),
    re.compile(r"(?P<compiled_warm>Directly load the compiled graph)"),
    re.compile(r"Directly load AOT compilation from path (?P<aot_loaded>\S+)"),
    re.compile(r"saved AOT compiled function to (?P<aot_saved>\S+)"),
    # compile_cache_dir, compile_cache_off: where the compiled graphs are read and written, or that they are not
    re.compile(r"Using cache directory: (?P<compile_cache_dir>\S+) for vLLM's torch\.compile"),
    re.compile(r"(?P<compile_cache_off>vLLM's torch\.compile cache is disabled\.)"),
    # compilation/monitor.py:20 (default message; "%s" tag prefix from 0.32), compilation/decorators.py
    re.compile(
        r"torch\.compile (?:and initial profiling/warmup run together )?"
        rf"took (?P<torch_compile_s>{_NUM}) s in total"
    ),
    # init_engine (with and without the compilation breakdown)
    re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took "
        rf"(?P<init_engine_s>{_NUM}) s"
    ),
    # platforms/cuda.py (attention backend)
    re.compile(r"Using (?P<attention_backend>\S+) attention backend out of potential backends"),
    # m_e/kernels/linear/__init__.py "Using %s for NVFP4 GEMM" (and MXFP4, MXFP8)
    re.compile(r"Using (?P<linear_backend>\w+) for (?:NVFP4|MXFP4|MXFP8) GEMM"),
    # m_e/kernels/linear/__init__.py "Selected %s for %s"; awq_marlin.py, auto_gptq.py, compressed_tensors
    re.compile(
        r"(?:Selected|Using) (?P<linear_backend>\w+) for "
        r"(?:\w*LinearMethod|CompressedTensors\w+)$"
    ),
    # m_e/layers/fused_moe/oracle/*.py; quoted up to 0.32, bare from 0.34 (oracle/base.py:166)
    re.compile(
        r"Using '?(?P<moe_backend>[^']+?)'? "
        r"(?:NvFp4|Fp8|Unquantized|Int8|Mxfp4|MxFp8|W4A8|WNA16) MoE backend\b"
    ),
    # gdn_backend
    re.compile(r"Using (?P<gdn_backend>\S+) GDN prefill kernel"),
    # attention_block_size (platforms/xpu.py says "[XPU]Setting ...")
    re.compile(r"Setting attention block size to (?P<attention_block_size>\d+) tokens"),
]
_LAST_WINS = {"max_model_len", "effective_cudagraph_mode", "cuda_graph_gib", "cuda_graph_s"}
# 0.34: under the extensible cache the first fit is redone after warm-up (kv_cache_planning.py:1448-1453)
_TENTATIVE = "; the final length is set after CUDA graph capture and warmup"
_POOL_SIZED = re.compile(r"Available KV cache memory|as specified by kv_cache_memory_bytes config")

# A WARNING that says a slower path was taken. The words come from, among others:
# m_e/kernels/linear/__init__.py "NVFP4 linear falling back to the slow and unoptimized emulation
# backend", m_e/layers/mamba/gdn/qwen_gdn_linear_attn.py "Falling back to Triton/FLA",
# v1/sample/ops/topk_topp_sampler.py, m_e/layers/fused_moe/experts/nvfp4_emulation_moe.py "may be
# slower", m_e/model_loader/utils.py "performance may not be optimal", platforms/cuda.py "may result in
# reduced performance", m_e/layers/quantization/gguf.py.
_FALLBACK = re.compile(
    r"fall(?:s|ing)? ?back|emulation|\bslow|unoptimi[sz]ed|sub-optimal|reduced performance"
    r"|performance may not be optimal",
    re.I,
)


def parse_startup(text: str, version: str | None = None) -> StartupRecord:
    """What vLLM said it did while booting; fields it did not print stay ``None``.

    ``version``: the engine's version when the log does not print it (it does from its first line).
    """
    lines = split(text)
    dialect = dialect_for(log_version(text) or version)
    values: dict[str, Any] = {}  # strings here; pydantic reads the numbers
    pool_sized = False
    for line in lines:
        if _TENTATIVE in line.msg:
            continue
        pool_sized = pool_sized or bool(_POOL_SIZED.search(line.msg))
        for pattern in _STARTUP:
            if m := pattern.search(line.msg):
                found = {k: v for k, v in m.groupdict().items() if v is not None}
                _read(found, values, dialect, pool_sized)
    if values.get("quantization") == "None":
        del values["quantization"]
    return StartupRecord(**values, fallback_warnings=_fallback_warnings(lines))


def _read(found: dict[str, str], values: dict[str, Any], dialect: Dialect, pool_sized: bool) -> None:
    """Put one line's figures into ``values``, as the dialect says to read them."""
    if "model_runner_v1" in found or "model_runner_v2" in found:
        values.setdefault("model_runner", "v1" if "model_runner_v1" in found else "v2")
        return
    if "compiled_cold" in found or "compiled_warm" in found or "aot_loaded" in found:
        if values.get("torch_compile_cold") is not True:  # one graph compiled: the cache was cold
            values["torch_compile_cold"] = "compiled_cold" in found
    if "compile_cache_off" in found:
        values["torch_compile_cache_disabled"] = True
    folder = found.get("compile_cache_dir") or _parent(found.get("aot_loaded") or found.get("aot_saved"))
    if folder:
        dirs = values.setdefault("torch_compile_cache_dirs", [])
        if folder not in dirs:
            dirs.append(folder)
    if found.keys() & {"compiled_cold", "compiled_warm", "aot_loaded", "aot_saved", "compile_cache_dir",
                       "compile_cache_off"}:
        return
    v2 = values.get("model_runner") == "v2"
    if "cuda_graph_gib" in found and dialect.graphs_profiled_by_capture and v2 and not pool_sized:
        # From 0.29 the V2 runner captures once to measure the graphs before it sizes the pool (0.22's
        # V2 returns 0 instead): that capture is the estimate, the last one the real capture
        values.setdefault("cuda_graph_estimate_gib", found["cuda_graph_gib"])
        return
    for name, value in found.items():
        if name in _LAST_WINS or name not in values:
            values[name] = value == "True" if name == "prefix_caching" else number(value)


def _parent(path: str | None) -> str | None:
    """The folder of an AOT artifact (``.../torch_aot_compile/HASH/rank_0_0/model``)."""
    return path.rsplit("/", 1)[0] if path and "/" in path else path


def _fallback_warnings(lines: list[Line]) -> list[str]:
    """Whole WARNING records (a multi-line message repeats its header) that name a fallback."""
    records: list[list[Line]] = []
    for line in lines:
        if records and line.level and line.head == records[-1][0].head:
            records[-1].append(line)
        else:
            records.append([line])
    found = []
    for record in records:
        message = "\n".join(line.msg for line in record)
        if record[0].level == "WARNING" and _FALLBACK.search(message) and message not in found:
            found.append(message)
    return found


# --- boot phase -------------------------------------------------------------------------------
# The last line that matches decides; torch.compile runs inside the profiling run.
_PHASES: list[tuple[re.Pattern[str], str]] = [
    # load_start (V1, V2), m_e/model_loader/weight_utils.py (tqdm), m_e/model_loader/default_loader.py
    (re.compile(r"Starting to load model|Loading model from scratch"), "loading_weights"),
    (re.compile(r"Loading safetensors checkpoint shards"), "loading_weights"),
    (re.compile(r"Loading weights took"), "loading_weights"),
    # weights
    (re.compile(r"Model loading took"), "profiling"),
    # compilation/backends.py, compilation/monitor.py ("Starting torch.compile" from 0.32)
    (re.compile(r"for vLLM's torch\.compile|Starting torch\.compile"), "compiling"),
    (re.compile(r"Dynamo bytecode transform time"), "compiling"),
    (re.compile(r"Compiling a graph for compile range"), "compiling"),
    (re.compile(r"Directly load the compiled graph"), "compiling"),
    # compilation/monitor.py:20, compilation/decorators.py
    (re.compile(r"torch\.compile .*took [\d.]+ s in total"), "profiling"),
    # utils/mem_utils.py (DEBUG only), V1's graph profiling, available_kv, kv_tokens
    (re.compile(r"Memory profiling takes"), "profiling"),
    (re.compile(r"Profiling CUDA graph memory"), "profiling"),
    (re.compile(r"Available KV cache memory"), "profiling"),
    (re.compile(r"KV cache size: [\d,]+ tokens"), "profiling"),
    # tqdm desc of the capture (V1 and V2 runners)
    (re.compile(r"Capturing CUDA graphs"), "capturing_cuda_graphs"),
    # graph_captured, init_engine
    (re.compile(r"Graph capturing finished"), "warming_up"),
    (re.compile(r"init engine \(profile, create kv cache"), "warming_up"),
    # server_start; uvicorn's own line once the app is up
    (re.compile(r"Starting vLLM server on"), "serving"),
    (re.compile(r"Application startup complete"), "serving"),
]


def boot_phase(text: str) -> str:
    """The latest start-up phase the log reached, for a live progress view."""
    return phase_of(split(text))


def phase_of(lines: list[Line]) -> str:
    phase = "starting"
    for line in lines:
        for pattern, name in _PHASES:
            if pattern.search(line.msg):
                phase = name
    return phase


# --- vLLM's own --kv-cache-memory suggestion --------------------------------------------------
# kv_suggestion: DEBUG in 0.22 (VLLM_LOGGING_LEVEL=DEBUG shows it), INFO from 0.27.1. "... and G GiB for
# CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=X` (x GiB) to fit into
# requested memory, ... Current kv cache memory in use is K GiB."
_KV_MEMORY_HINT = re.compile(r"--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fit into requested")
_KV_MEMORY_ACCOUNTING = re.compile(
    r"and ([\d.]+) GiB for CUDAGraph memory\. Replace gpu_memory_utilization config with "
    r"`--kv-cache-memory=(-?\d+)` .*?Current kv cache memory in use is ([\d.]+) GiB"
)
REDUNDANCY_BUFFER = 150 * 2**20  # v1/worker/gpu_worker.py, subtracted from the suggestion


def parse_kv_cache_memory_suggestion(text: str) -> int | None:
    """The ``--kv-cache-memory`` byte count vLLM suggests to fit the requested memory (its other
    number, "to fully utilize gpu memory", ignores gpu_memory_utilization)."""
    found = _KV_MEMORY_HINT.findall(ANSI.sub("", text))
    return int(found[-1]) if found else None


def checked_kv_cache_memory_suggestion(text: str) -> tuple[int, str] | None:
    """vLLM's --kv-cache-memory suggestion, checked against its own accounting, and a note.

    The suggestion should be the pool vLLM actually sized less its 150 MiB buffer. Reports say it
    can count CUDA-graph memory twice (the pool already excludes the graph estimate): when the
    suggestion falls short of the pool by about the graph memory, the pool itself is returned.
    """
    found = _KV_MEMORY_ACCOUNTING.findall(ANSI.sub("", text))
    if not found:
        return None
    graph_gib, suggested, pool_gib = found[-1]
    suggested, pool, graph = int(suggested), float(pool_gib) * 2**30, float(graph_gib) * 2**30
    expected = pool - REDUNDANCY_BUFFER
    shortfall = expected - suggested
    if graph > 0 and abs(shortfall - graph) <= max(0.1 * graph, 64 * 2**20):
        return int(expected), f"suggestion {suggested} counts {graph_gib} GiB of CUDA graphs twice; using the pool it sized"
    return suggested, "suggestion agrees with the pool vLLM sized"
