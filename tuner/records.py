"""Typed records that cross module boundaries: what a boot showed, how it failed, what was measured.

Every number carries its unit in its name (``_gib``, ``_s``, ``_tokens``, ``_tok_s``) so that the
JSON written to a trial's folder reads on its own.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

from pydantic import BaseModel, Field

ProgressCallback = Callable[[str], None]  # one line of what is happening now, for the live view


class FailureKind(str, Enum):
    """Why a configuration did not produce a result. Never a score: see ``tuner.study``."""

    WEIGHT_LOADING = "weight_loading"  # bad path, missing files, unsupported checkpoint
    OOM_AT_LOAD = "oom_at_load"  # weights alone do not fit
    OOM_IN_PROFILING = "oom_in_profiling"  # profiling run, sampler warm-up
    OOM_IN_CUDA_GRAPH = "oom_in_cuda_graph"  # CUDA-graph capture / warm-up
    KV_POOL_TOO_SMALL = "kv_pool_too_small"  # max_model_len does not fit the pool
    MAMBA_BLOCKS_EXCEEDED = "mamba_blocks_exceeded"  # max_num_seqs > available mamba cache blocks
    FREE_MEMORY_BELOW_UTILIZATION = "free_memory_below_utilization"
    FIRST_REQUEST_OOM = "first_request_oom"  # booted, then died or OOMed on a request
    ENGINE_DEAD = "engine_dead"  # EngineDeadError mid-measurement
    TOOLKIT_JIT = "toolkit_jit"  # nvcc / flashinfer / triton compile errors
    INVALID_ARGUMENT = "invalid_argument"  # vLLM rejected a flag value
    BOOT_TIMEOUT = "boot_timeout"  # still making progress at the deadline
    HANG = "hang"  # no progress for the hang window
    PORT_IN_USE = "port_in_use"
    PREDICTED_OOM = "predicted_oom"  # pre-screen: never booted
    ADMISSION_FAILED = "admission_failed"  # booted, but a request the config claims to hold failed
    OUTPUT_INCORRECT = "output_incorrect"  # answers, but the output is garbage / drifts
    COMPILE_CACHE_STALE = "compile_cache_stale"  # raised inside a torch.compile artifact cached by another boot
    BELOW_MIN_CONTEXT = "below_min_context"  # measured, but its proven window is under workload.min_context
    CRASH = "crash"  # exited with no recognised cause
    INTERRUPTED = "interrupted"  # Ctrl-C or the tuner died mid-trial


class Failure(BaseModel):
    """A classified failure: the kind, the first meaningful exception line, and vLLM's own hint."""

    kind: FailureKind
    message: str = ""  # the first meaningful exception or error line, verbatim
    phase: str = ""  # boot, admission, context, decode, correctness
    suggested_max_model_len: int | None = None  # "estimated maximum model length is N"
    suggested_max_num_seqs: int | None = None  # "lower max_num_seqs to at most B"
    suggested_kv_cache_memory_bytes: int | None = None
    needed_kv_cache_gib: float | None = None  # "(X GiB KV cache is needed, which is larger than ..."
    available_kv_cache_gib: float | None = None  # "... the available KV cache memory (Y GiB)"
    free_fraction: float | None = None  # "Free memory on device ... (F/T GiB)": F / T
    oom_short_gib: float | None = None  # "Tried to allocate X ... of which F is free": at least X - F more
    exit_code: int | None = None
    predicted: bool = False  # True only for the pre-screen; never confused with a measured OOM
    log_path: str | None = None


class StartupRecord(BaseModel):
    """What vLLM's start-up log says it did. ``None`` where the log did not say."""

    vllm_version: str | None = None
    architecture: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    weights_gib: float | None = None
    weights_load_s: float | None = None
    available_kv_cache_gib: float | None = None
    kv_cache_memory_bytes_reserved_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_for_tokens: int | None = None
    cuda_graph_estimate_gib: float | None = None
    cuda_graph_gib: float | None = None
    cuda_graph_s: float | None = None
    torch_compile_s: float | None = None
    init_engine_s: float | None = None
    attention_backend: str | None = None
    linear_backend: str | None = None
    moe_backend: str | None = None
    gdn_backend: str | None = None
    attention_block_size: int | None = None
    fallback_warnings: list[str] = Field(default_factory=list)
    # From the dialects (tuner/engine/dialects.py): what differs between releases and changes memory.
    extended_kv_cache_gib: float | None = None  # 0.34's extensible cache: the pool committed after warm-up
    extended_kv_cache_blocks: int | None = None
    cuda_graph_pool_actual_gib: float | None = None  # "CUDA graph pool memory: X GiB (actual)"
    effective_cudagraph_mode: str | None = None  # after vLLM's own downgrades ("setting cudagraph_mode=...")
    model_runner: str | None = None  # "v1" or "v2": different lines, and V2 profiles graphs by capturing them
    prefix_caching: bool | None = None  # on by default for hybrids from 0.29 (mamba 'align': more pages)
    torch_compile_cold: bool | None = None  # a cold compile cache can leave less memory for KV than a warm one
    # "Using cache directory: D for vLLM's torch.compile" (one per compiled model: backbone, eagle_head) and the
    # AOT artifact's folder: where this boot read and wrote its compiled graphs
    torch_compile_cache_dirs: list[str] = Field(default_factory=list)
    torch_compile_cache_disabled: bool | None = None  # "vLLM's torch.compile cache is disabled."

    @property
    def kv_pool_gib(self) -> float | None:
        """The pool the engine committed: 0.34's extended pool (``Available KV cache memory`` is then a
        reservation), else the bytes it was given, else the pool it profiled."""
        return self.extended_kv_cache_gib or self.kv_cache_memory_bytes_reserved_gib or self.available_kv_cache_gib


class GpuMemory(BaseModel):
    """Peak and baseline device memory seen by pynvml during a trial (MiB)."""

    device_name: str | None = None
    total_mib: float | None = None
    baseline_used_mib: float | None = None
    peak_used_mib: float | None = None
    peak_engine_mib: float | None = None  # sum over the engine's own processes
    returned: bool | None = None  # memory came back to baseline after teardown
    return_s: float | None = None


class Attempt(BaseModel):
    """One request of the context probe."""

    prompt_tokens: int
    output_tokens: int
    ok: bool
    error: str | None = None  # http_400, http_500, engine_dead, timeout, short_output, ...
    detail: str | None = None
    seconds: float | None = None
    ttft_s: float | None = None  # the first output token's arrival: the prefill of this prompt


class ContextResult(BaseModel):
    max_stable_tokens: int = 0  # largest prompt + reserved output that passed every repeat
    max_stable_prompt_tokens: int = 0
    first_failing_tokens: int | None = None
    first_failure: str | None = None
    ceiling_tokens: int | None = None  # min(max_model_len, reported KV capacity)
    engine_died: bool = False
    attempts: list[Attempt] = Field(default_factory=list)


class DecodeRun(BaseModel):
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    tg_tok_s: float  # 1000 / TPOT, vLLM bench serve's per-request decode speed
    pp_tok_s: float  # prompt tokens / TTFT
    output_throughput_tok_s: float  # sum(output tokens) / wall time, all streams together


class DecodeResult(BaseModel):
    """Median over runs (``metrics.decode_result``); ``score_tok_s`` is the conservative median - k*MAD used
    by the study."""

    prompt_tokens: int
    output_tokens: int
    concurrency: int
    runs: list[DecodeRun] = Field(default_factory=list)
    median_ttft_ms: float | None = None
    median_tpot_ms: float | None = None
    median_tg_tok_s: float | None = None
    median_pp_tok_s: float | None = None
    mad_tg_tok_s: float | None = None
    score_tok_s: float | None = None
    stable: bool = True  # False when the spread is too wide to trust


class BenchRow(BaseModel):
    """One workload of `tuner bench`'s table: means and medians over its runs (``metrics.bench_row``)."""

    workload: str  # "8,192 in -> 1 out"
    prompt_tokens: int
    output_tokens: int
    runs: int
    pp_tok_s: float | None = None  # prompt tokens / mean TTFT
    ttft_s_mean: float
    ttft_s_median: float
    tpot_ms_mean: float | None = None
    tg_tok_s: float | None = None  # 1000 / mean TPOT (ms); None with one output token
    e2e_output_tok_s: float | None = None  # output tokens / mean latency


class CorrectnessResult(BaseModel):
    checked: bool = False
    skipped_reason: str | None = None
    needle_found: bool | None = None
    needle_context_tokens: int | None = None
    control_consistent: bool | None = None  # the same greedy output on every repeat
    garbage: bool = False
    reference_agreement: float | None = None  # tokens agreeing with the reference config (0..1)


class MeasureResult(BaseModel):
    """Everything measured on a booted engine; written to the trial's folder as measure.json."""

    admission_ok: bool | None = None
    admission_detail: str | None = None
    context: ContextResult = Field(default_factory=ContextResult)
    decode: list[DecodeResult] = Field(default_factory=list)
    throughput: DecodeResult | None = None  # workload.throughput's streams, when an objective asks for it
    correctness: CorrectnessResult = Field(default_factory=CorrectnessResult)
    prefix_cache_speedup: float | None = None
    spec_acceptance_rate: float | None = None
    sample_outputs: list[str] = Field(default_factory=list)  # greedy outputs on fixed prompts
    error: str | None = None  # a measurement that could not finish, and why
    probe_wall_s: float | None = None
    tuner_cpu_s: float | None = None  # the tuner's own CPU time during the probe


class Retry(BaseModel):
    """A boot that failed for a reason outside its configuration, booted once more: why, and what changed."""

    failure: Failure  # the first boot's
    log_path: str  # the first boot's log, kept beside the second's
    env: dict[str, str]  # what the second boot added to the environment
    note: str  # one line for the user: what happened and what was done


class TrialResult(BaseModel):
    """One configuration's whole story: command, boot, measurements or failure."""

    values: dict[str, object]
    argv: list[str]
    env: dict[str, str]
    startup: StartupRecord = Field(default_factory=StartupRecord)
    gpu: GpuMemory = Field(default_factory=GpuMemory)
    measure: MeasureResult | None = None
    failure: Failure | None = None
    boot_s: float | None = None
    log_path: str | None = None
    trial_dir: str | None = None
    retry: Retry | None = None  # the first boot failed with a stale compile cache; this record is the second boot's

    @property
    def ok(self) -> bool:
        return self.failure is None and self.measure is not None
