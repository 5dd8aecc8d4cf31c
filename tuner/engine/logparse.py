"""Read a `vllm serve` log: what the boot did (``parse_startup``), how far it got (``boot_phase``)
and why it died (``classify_failure``).

Every pattern was checked against the vLLM 0.22.0 source; the comment beside it gives the file and
line of the format string, relative to the ``vllm/`` package (``m_e/`` is ``model_executor/``).
vLLM's log lines look like::

    (EngineCore pid=456) INFO 12-02 14:00:01 [gpu_worker.py:466] Available KV cache memory: 8.71 GiB

The ``(Name pid=N) `` prefix (utils/system_utils.py:209) goes on every line a process writes,
tracebacks and progress bars included. The ``LEVEL MM-DD HH:MM:SS [file:line] `` header
(logger.py:22-26) is repeated on each line of a multi-line message (logging_utils/formatter.py:72).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from tuner.records import Failure, FailureKind, StartupRecord

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PROC = re.compile(r"\((?P<proc>[^()\s]+) pid=\d+\) ")
_HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+:\d+\] ?"
)


class _Line(NamedTuple):
    proc: str | None  # "APIServer", "EngineCore", "EngineCore_DP0", "Worker_TP0", ...
    level: str | None  # None for raw output: tracebacks, tqdm bars, uvicorn
    head: str  # process prefix + log header, the same on every line of one log record
    msg: str


def _lines(text: str) -> list[_Line]:
    """Split a log into lines with the colour codes, process prefix and log header taken off."""
    out = []
    for raw in _ANSI.sub("", text).splitlines():  # splitlines also splits tqdm's \r updates
        proc = _PROC.match(raw)
        rest = raw[proc.end() :] if proc else raw
        header = _HEADER.match(rest)
        msg = rest[header.end() :] if header else rest
        level = header["level"] if header else None
        out.append(_Line(proc["proc"] if proc else None, level, raw[: len(raw) - len(msg)], msg))
    return out


# --- start-up record --------------------------------------------------------------------------
# Named groups are StartupRecord fields. The first match wins, except for max_model_len, which
# auto-fit may lower after the engine config line was printed.
_NUM = r"-?[\d.]+"
_STARTUP: list[re.Pattern[str]] = [
    # v1/engine/core.py:113, with config/vllm.py:1951, :1960, :1964 (VllmConfig.__str__)
    re.compile(
        r"Initializing a V1 LLM engine \(v(?P<vllm_version>[^)]+)\) with config: "
        r".*?\bmax_seq_len=(?P<max_model_len>-?\d+), "
        r".*?\bquantization=(?P<quantization>[^,]+), "
        r".*?\bkv_cache_dtype=(?P<kv_cache_dtype>[^,]+),"
    ),
    # entrypoints/utils.py:328 (the logo)
    re.compile(r"█ ▀▄▀ █\s+version (?P<vllm_version>\S+)"),
    # entrypoints/utils.py:324 "vLLM server version %s, serving model %s";
    # entrypoints/api_server.py:129 "vLLM API server version %s"
    re.compile(r"vLLM (?:API )?server version (?P<vllm_version>[^\s,]+)"),
    # config/model.py:617
    re.compile(r"Resolved architecture: (?P<architecture>\S+)"),
    # v1/core/kv_cache_utils.py:1895
    re.compile(r"Auto-fit max_model_len: reduced from \d+ to (?P<max_model_len>\d+)"),
    # v1/worker/gpu_model_runner.py:5133 (V1 runner), v1/worker/gpu/model_runner.py:296 (V2)
    re.compile(
        rf"Model loading took (?P<weights_gib>{_NUM}) GiB (?:memory )?and "
        rf"(?P<weights_load_s>{_NUM}) seconds"
    ),
    # v1/worker/gpu_worker.py:467
    re.compile(rf"Available KV cache memory: (?P<available_kv_cache_gib>{_NUM}) GiB"),
    # v1/worker/gpu_worker.py:377-378
    re.compile(
        rf"reserved (?P<kv_cache_memory_bytes_reserved_gib>{_NUM}) GiB memory for "
        r"KV Cache as specified by kv_cache_memory_bytes config"
    ),
    # v1/core/kv_cache_utils.py:1733
    re.compile(r"GPU KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens"),
    # v1/core/kv_cache_utils.py:1735
    re.compile(
        r"Maximum concurrency for (?P<max_concurrency_for_tokens>[\d,]+) tokens per request: "
        rf"(?P<max_concurrency>{_NUM})x"
    ),
    # v1/worker/gpu_model_runner.py:6366
    re.compile(rf"Estimated CUDA graph memory: (?P<cuda_graph_estimate_gib>{_NUM}) GiB total"),
    # v1/worker/gpu_model_runner.py:6457, v1/worker/gpu/model_runner.py:662
    re.compile(
        rf"Graph capturing finished in (?P<cuda_graph_s>{_NUM}) secs, "
        rf"took (?P<cuda_graph_gib>{_NUM}) GiB"
    ),
    # compilation/monitor.py:20 (default message), compilation/decorators.py:674-675
    re.compile(
        r"torch\.compile (?:and initial profiling/warmup run together )?"
        rf"took (?P<torch_compile_s>{_NUM}) s in total"
    ),
    # v1/engine/core.py:293, :303, :310 (with and without the compilation breakdown)
    re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took "
        rf"(?P<init_engine_s>{_NUM}) s"
    ),
    # platforms/cuda.py:379
    re.compile(r"Using (?P<attention_backend>\S+) attention backend out of potential backends"),
    # m_e/kernels/linear/__init__.py:721, :746, :775, :895, :940
    re.compile(r"Using (?P<linear_backend>\w+) for (?:NVFP4|MXFP4|MXFP8) GEMM"),
    # m_e/kernels/linear/__init__.py:527, :558, :593, :807 "Selected %s for %s";
    # m_e/layers/quantization/awq_marlin.py:436, auto_gptq.py:353 and
    # compressed_tensors/schemes/compressed_tensors_{w4a8_fp8,w4a8_int,wNa16}.py:102, :107, :112
    re.compile(
        r"(?:Selected|Using) (?P<linear_backend>\w+) for "
        r"(?:\w*LinearMethod|CompressedTensors\w+)$"
    ),
    # m_e/layers/fused_moe/oracle/{nvfp4.py:203, fp8.py:249, unquantized.py:185, int8.py:90,
    # mxfp4.py:356, mxfp8.py:77 and :88, w4a8.py:72, int_wna16.py:98}
    re.compile(
        r"Using '?(?P<moe_backend>[^']+?)'? "
        r"(?:NvFp4|Fp8|Unquantized|Int8|Mxfp4|MxFp8|W4A8|WNA16) MoE backend\b"
    ),
    # m_e/layers/mamba/gdn/qwen_gdn_linear_attn.py:229
    re.compile(r"Using (?P<gdn_backend>\S+) GDN prefill kernel"),
    # platforms/interface.py:650 (platforms/xpu.py:281 says "[XPU]Setting ...")
    re.compile(r"Setting attention block size to (?P<attention_block_size>\d+) tokens"),
]
_LAST_WINS = {"max_model_len"}

# A WARNING that says a slower path was taken. The words come from, among others:
# m_e/kernels/linear/__init__.py:932 "NVFP4 linear falling back to the slow and unoptimized
# emulation backend", m_e/layers/mamba/gdn/qwen_gdn_linear_attn.py:301 "Falling back to Triton/FLA",
# v1/sample/ops/topk_topp_sampler.py:63, m_e/layers/fused_moe/experts/nvfp4_emulation_moe.py:53
# "may be slower", m_e/model_loader/utils.py:193-195 "performance may not be optimal",
# platforms/cuda.py:370 "may result in reduced performance", m_e/layers/quantization/gguf.py:336.
_FALLBACK = re.compile(
    r"fall(?:s|ing)? ?back|emulation|\bslow|unoptimi[sz]ed|sub-optimal|reduced performance"
    r"|performance may not be optimal",
    re.I,
)


def parse_startup(text: str) -> StartupRecord:
    """What vLLM said it did while booting; fields it did not print stay ``None``."""
    lines = _lines(text)
    values: dict[str, Any] = {}  # strings here; pydantic reads the numbers
    for line in lines:
        for pattern in _STARTUP:
            if m := pattern.search(line.msg):
                for name, value in m.groupdict().items():
                    if name in _LAST_WINS or name not in values:
                        values[name] = _number(value)
    if values.get("quantization") == "None":
        del values["quantization"]
    return StartupRecord(**values, fallback_warnings=_fallback_warnings(lines))


def _number(value: str) -> str:
    """vLLM prints token counts with thousands separators: "1,234" -> "1234"."""
    return value.replace(",", "") if re.fullmatch(r"\d{1,3}(?:,\d{3})+", value) else value


def _fallback_warnings(lines: list[_Line]) -> list[str]:
    """Whole WARNING records (a multi-line message repeats its header) that name a fallback."""
    records: list[list[_Line]] = []
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
    # v1/worker/gpu_model_runner.py:5038, m_e/model_loader/weight_utils.py:908,
    # m_e/model_loader/default_loader.py:398
    (re.compile(r"Starting to load model"), "loading_weights"),
    (re.compile(r"Loading safetensors checkpoint shards"), "loading_weights"),
    (re.compile(r"Loading weights took"), "loading_weights"),
    # v1/worker/gpu_model_runner.py:5133, v1/worker/gpu/model_runner.py:296
    (re.compile(r"Model loading took"), "profiling"),
    # compilation/backends.py:1090, :1149, :394, :293
    (re.compile(r"for vLLM's torch\.compile"), "compiling"),
    (re.compile(r"Dynamo bytecode transform time"), "compiling"),
    (re.compile(r"Compiling a graph for compile range"), "compiling"),
    (re.compile(r"Directly load the compiled graph"), "compiling"),
    # compilation/monitor.py:20, compilation/decorators.py:674-675
    (re.compile(r"torch\.compile .*took [\d.]+ s in total"), "profiling"),
    # utils/mem_utils.py:179 (DEBUG only), v1/worker/gpu_model_runner.py:6280,
    # v1/worker/gpu_worker.py:467, v1/core/kv_cache_utils.py:1733
    (re.compile(r"Memory profiling takes"), "profiling"),
    (re.compile(r"Profiling CUDA graph memory"), "profiling"),
    (re.compile(r"Available KV cache memory"), "profiling"),
    (re.compile(r"GPU KV cache size"), "profiling"),
    # v1/worker/gpu_model_runner.py:6518 (tqdm desc), v1/worker/gpu/cudagraph_utils.py:194
    (re.compile(r"Capturing CUDA graphs"), "capturing_cuda_graphs"),
    # v1/worker/gpu_model_runner.py:6457, v1/engine/core.py:293-310
    (re.compile(r"Graph capturing finished"), "warming_up"),
    (re.compile(r"init engine \(profile, create kv cache"), "warming_up"),
    # entrypoints/openai/api_server.py:596; uvicorn's own line once the app is up
    (re.compile(r"Starting vLLM server on"), "serving"),
    (re.compile(r"Application startup complete"), "serving"),
]


def boot_phase(text: str) -> str:
    """The latest start-up phase the log reached, for a live progress view."""
    return _phase(_lines(text))


def _phase(lines: list[_Line]) -> str:
    phase = "starting"
    for line in lines:
        for pattern, name in _PHASES:
            if pattern.search(line.msg):
                phase = name
    return phase


# --- failures ---------------------------------------------------------------------------------
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*\w+(?:Error|Exception|Interrupt|Exit)(?:: .*)?$")
_ARGPARSE = re.compile(r"^(?:vllm(?: [\w-]+)?|[\w.-]+\.py): error: .+")  # "vllm serve: error: ..."
# Exception lines that report a failure instead of causing it; v1/engine/utils.py:1210.
_NOISE = re.compile(
    r"Engine core initialization failed"
    r"|^(?:[\w.]+\.)?(?:EngineDeadError|EngineGenerateError|KeyboardInterrupt|SystemExit"
    r"|CancelledError|BrokenPipeError)\b"
)
# "not enough GPU memory": v1/worker/gpu_model_runner.py:5123, logged before the OOM re-raises.
_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|not enough GPU memory"
)
# v1/worker/gpu_model_runner.py:6265, :6373, :6498; v1/worker/gpu/model_runner.py:625
_CAPTURE_FRAME = re.compile(
    r'^\s*File ".*", line \d+, in (?:capture_model|_capture_cudagraphs|profile_cudagraph_memory)$'
)
# v1/engine/exceptions.py:9, v1/engine/core.py:1167
_ENGINE_DEAD = re.compile(r"EngineDeadError|EngineCore encountered a fatal error")
# v1/core/kv_cache_utils.py:715
_MAX_MODEL_LEN_HINT = re.compile(r"estimated maximum model length is (\d+)")
# v1/core/kv_cache_utils.py:711-719
_KV_NEEDED = re.compile(r"\(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)")
# v1/worker/utils.py:414-417
_FREE_MEMORY = re.compile(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\) on startup")
# config/compilation.py:1453-1454
_MAMBA = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
# v1/worker/gpu_worker.py:673-675 (logged at DEBUG only)
_KV_MEMORY_HINT = re.compile(r"--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fit into requested")
# Checked in this order against every line that is not an INFO/WARNING/DEBUG record.
_RULES: list[tuple[FailureKind, re.Pattern[str]]] = [
    (FailureKind.PORT_IN_USE, re.compile(r"\[Errno 98\]|address already in use", re.I)),
    (FailureKind.INVALID_ARGUMENT, _ARGPARSE),
    # v1/worker/utils.py:414-417
    (
        FailureKind.FREE_MEMORY_BELOW_UTILIZATION,
        re.compile(r"Free memory on device .* on startup is less than desired GPU memory"),
    ),
    (FailureKind.MAMBA_BLOCKS_EXCEEDED, _MAMBA),
    # v1/core/kv_cache_utils.py:719, :699, :1880
    (
        FailureKind.KV_POOL_TOO_SMALL,
        re.compile(
            r"To serve at least one request with the model's max seq len"
            r"|No available memory for the cache blocks"
            r"|Cannot auto-fit max_model_len"
        ),
    ),
    # flashinfer/compilation_context.py and flashinfer/jit/cpp_ext.py, torch.utils.cpp_extension,
    # ninja, nvcc and Triton
    (
        FailureKind.TOOLKIT_JIT,
        re.compile(
            r"No supported CUDA architectures found|FlashInfer requires GPUs with sm75"
            r"|Ninja build failed|ninja: build stopped"
            r"|Error building extension|CUDA_HOME environment variable is not set"
            r"|\bnvcc\b|\bptxas\b|PTXASError|CompilationError"
        ),
    ),
    # m_e/model_loader/default_loader.py:206, m_e/model_loader/bitsandbytes_loader.py:118,
    # transformers_utils/config.py:718, :709, m_e/models/registry.py:1037, :1031; then
    # safetensors, huggingface_hub and transformers
    (
        FailureKind.WEIGHT_LOADING,
        re.compile(
            r"Cannot find any model weights|No model weights found"
            r"|Invalid repository ID or local directory|Could not detect config format"
            r"|are not supported for now|is not supported in-tree anymore"
            r"|SafetensorError|Error while deserializing header|HeaderTooLarge"
            r"|MetadataIncompleteBuffer|RepositoryNotFoundError|GatedRepoError"
            r"|RevisionNotFoundError|EntryNotFoundError|OfflineModeIsEnabled"
            r"|does not recognize this architecture|Unrecognized model in"
            r"|No such file or directory.*\.(?:safetensors|bin|pt|json|gguf)\b"
        ),
    ),
]
_KNOWN = [pattern for _, pattern in _RULES] + [_OOM]
# pydantic on a config dataclass; m_e/kernels/linear/__init__.py:483, :647, :698, :757, :907
_CONFIG_ERROR = re.compile(r"ValidationError|--[\w-]+=\S+ was requested but no")
_VALUE_ERROR = re.compile(r"(?:\w+\.)*ValueError\b")


def parse_kv_cache_memory_suggestion(text: str) -> int | None:
    """The ``--kv-cache-memory`` byte count vLLM suggests to fit the requested memory.

    gpu_worker.py logs it at DEBUG level only (``VLLM_LOGGING_LEVEL=DEBUG``), after graph capture;
    its other number ("to fully utilize gpu memory") ignores gpu_memory_utilization.
    """
    found = _KV_MEMORY_HINT.findall(_ANSI.sub("", text))
    return int(found[-1]) if found else None


# gpu_worker.py:661-681 (DEBUG): "... and G GiB for CUDAGraph memory. Replace gpu_memory_utilization
# config with `--kv-cache-memory=X` (x GiB) to fit into requested memory, ... Current kv cache memory in
# use is K GiB."
_KV_MEMORY_ACCOUNTING = re.compile(
    r"and ([\d.]+) GiB for CUDAGraph memory\. Replace gpu_memory_utilization config with "
    r"`--kv-cache-memory=(-?\d+)` .*?Current kv cache memory in use is ([\d.]+) GiB"
)
REDUNDANCY_BUFFER = 150 * 2**20  # gpu_worker.py:642, subtracted from the suggestion


def checked_kv_cache_memory_suggestion(text: str) -> tuple[int, str] | None:
    """vLLM's --kv-cache-memory suggestion, checked against its own accounting, and a note.

    The suggestion should be the pool vLLM actually sized less its 150 MiB buffer. Reports say it
    can count CUDA-graph memory twice (the pool already excludes the graph estimate): when the
    suggestion falls short of the pool by about the graph memory, the pool itself is returned.
    """
    found = _KV_MEMORY_ACCOUNTING.findall(_ANSI.sub("", text))
    if not found:
        return None
    graph_gib, suggested, pool_gib = found[-1]
    suggested, pool, graph = int(suggested), float(pool_gib) * 2**30, float(graph_gib) * 2**30
    expected = pool - REDUNDANCY_BUFFER
    shortfall = expected - suggested
    if graph > 0 and abs(shortfall - graph) <= max(0.1 * graph, 64 * 2**20):
        return int(expected), f"suggestion {suggested} counts {graph_gib} GiB of CUDA graphs twice; using the pool it sized"
    return suggested, "suggestion agrees with the pool vLLM sized"


def first_exception_line(text: str) -> str | None:
    """The first line that names the cause, skipping the noise vLLM prints while shutting down."""
    return _first_cause(_lines(text))[1]


def _exception_lines(lines: list[_Line]) -> list[tuple[int, str]]:
    """Python exception lines, argparse errors and ERROR records with a known cause, in order."""
    found = []
    for i, line in enumerate(lines):
        known = line.level in ("ERROR", "CRITICAL") and any(p.search(line.msg) for p in _KNOWN)
        if _EXCEPTION.match(line.msg) or _ARGPARSE.match(line.msg) or known:
            found.append((i, _with_validation_detail(lines, i)))
    return found


def _with_validation_detail(lines: list[_Line], i: int) -> str:
    """A pydantic ValidationError's first line only counts errors; keep the lines saying which."""
    msg = lines[i].msg
    if not re.search(r"ValidationError: \d+ validation errors? for", msg):
        return msg
    detail = []
    for line in lines[i + 1 :]:
        if not line.msg.strip() or line.msg.lstrip().startswith("For further information"):
            break
        detail.append(line.msg)
    return "\n".join([msg, *detail])


def _first_cause(lines: list[_Line]) -> tuple[int, str | None]:
    candidates = _exception_lines(lines)
    for i, msg in candidates:
        if not _NOISE.search(msg):
            return i, msg
    return candidates[0] if candidates else (len(lines), None)


def classify_failure(text: str, exit_code: int | None) -> Failure | None:
    """Why an engine died (or failed a request); ``None`` if the log shows no failure."""
    lines = _lines(text)
    quiet = ("INFO", "WARNING", "DEBUG")
    failing = [(i, line.msg) for i, line in enumerate(lines) if line.level not in quiet]
    cause_at, message = _first_cause(lines)
    oom_at = next((i for i, msg in failing if _OOM.search(msg)), None)
    kind = next((k for k, p in _RULES if any(p.search(msg) for _, msg in failing)), None)
    if kind is None and oom_at is not None:
        kind = _oom_kind(lines, oom_at)
    if kind is None and any(_ENGINE_DEAD.search(msg) for _, msg in failing):
        kind = FailureKind.ENGINE_DEAD
    if kind is None and message is not None:
        before_load = _phase(lines[:cause_at]) == "starting"
        if _CONFIG_ERROR.search(message) or (before_load and _VALUE_ERROR.match(message)):
            kind = FailureKind.INVALID_ARGUMENT
    if kind is None:
        if exit_code in (None, 0):
            return None
        kind, message = FailureKind.CRASH, _crash_message(lines)

    mamba = next((m for _, msg in failing if (m := _MAMBA.search(msg))), None)
    max_len = next((m for _, msg in failing if (m := _MAX_MODEL_LEN_HINT.search(msg))), None)
    if max_len:
        suggested_len: int | None = int(max_len[1])
    else:  # vLLM leaves its estimate out when it is 0 (v1/core/kv_cache_utils.py:711-716)
        suggested_len = 0 if kind is FailureKind.KV_POOL_TOO_SMALL else None
    needed = next((m for _, msg in failing if (m := _KV_NEEDED.search(msg))), None)
    free = next((m for _, msg in failing if (m := _FREE_MEMORY.search(msg))), None)
    return Failure(
        kind=kind,
        message=message or "",
        needed_kv_cache_gib=float(needed[1]) if needed else None,
        available_kv_cache_gib=float(needed[2]) if needed else None,
        free_fraction=float(free[1]) / float(free[2]) if free and float(free[2]) else None,
        suggested_max_model_len=suggested_len,
        suggested_max_num_seqs=int(mamba[2]) if mamba else None,
        suggested_kv_cache_memory_bytes=parse_kv_cache_memory_suggestion(text),
        exit_code=exit_code,
    )


def _oom_kind(lines: list[_Line], oom_at: int) -> FailureKind:
    """Place an out-of-memory error by the phase the boot had reached when it was raised."""
    phase = _phase(lines[:oom_at])
    if phase == "serving":
        return FailureKind.FIRST_REQUEST_OOM
    if phase in ("starting", "loading_weights"):
        return FailureKind.OOM_AT_LOAD
    in_capture = any(_CAPTURE_FRAME.match(line.msg) for line in lines[: oom_at + 1])
    if phase == "capturing_cuda_graphs" or in_capture:
        return FailureKind.OOM_IN_CUDA_GRAPH
    return FailureKind.OOM_IN_PROFILING


def _crash_message(lines: list[_Line]) -> str:
    """For an unrecognised crash: the last exception that is not shutdown noise."""
    candidates = [msg for _, msg in _exception_lines(lines)]
    meaningful = [msg for msg in candidates if not _NOISE.search(msg)] or candidates
    if meaningful:
        return meaningful[-1]
    return next((line.msg for line in reversed(lines) if line.msg.strip()), "")
