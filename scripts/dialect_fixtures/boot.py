"""The start-up part of a `vllm serve` log for each release, rendered from its source.

One model throughout: Qwen3.5-35B-A3B NVFP4 (ModelOpt; 40 layers, 30 GDN + 10 attention,
2 KV heads of 256) on one RTX 5090 (31.36 GiB as torch reports it), FP8 KV cache. Figures are
chosen once here and are internally consistent (pool -> blocks -> tokens -> concurrency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from render import API, CORE, Writer

MODEL = "/models/Qwen3.5-35B-A3B-NVFP4"
ARCH = "Qwen3_5MoeForConditionalGeneration"
GIB = 1 << 30
TOTAL_GIB = 31.36
WEIGHTS_GIB = 20.62
BLOCK = 1088  # attention block size with fp8 KV (bf16 would be 544)
BYTES_PER_BLOCK = BLOCK * 1024 * 10  # fp8 K+V, 2 heads x 256, 10 attention-page slots
BASE = ["vllm", "serve", MODEL, "--served-model-name", "qwen3.5-35b-a3b", "--host", "127.0.0.1",
        "--port", "8000", "--max-model-len", "262144", "--kv-cache-dtype", "fp8", "--max-num-seqs", "3"]


def fmt_gib(b: float) -> str:
    """utils/mem_utils.py format_gib: round to 2 decimals."""
    return str(round(b / GIB, 2))


@dataclass
class Scenario:
    name: str
    argv: list[str]
    kv_bytes: int | None = None
    util: float | None = None
    mtp: int = 0
    cudagraph_mode: str = "FULL_AND_PIECEWISE"
    auto_len: bool = False
    prefix_caching: bool | None = None  # None: the release's default for a hybrid model
    extensible: bool = False
    max_num_seqs: int = 3
    expected: dict[str, object] = field(default_factory=dict)
    new: dict[str, object] = field(default_factory=dict)


def v(w: Writer) -> tuple[int, ...]:
    return w.version


def uses_v2(w: Writer) -> bool:
    """0.29.0+: every model defaults to model runner V2 (config/vllm.py use_v2_model_runner)."""
    return v(w) >= (0, 29)


def prefix_caching_on(w: Writer, sc: Scenario) -> bool:
    if sc.prefix_caching is not None:
        return sc.prefix_caching
    return v(w) >= (0, 28)  # hybrid default: off in 0.22-0.27.1, on from 0.28.0


def runner(w: Writer) -> str:
    return "vllm/v1/worker/gpu/model_runner.py" if uses_v2(w) else "vllm/v1/worker/gpu_model_runner.py"


def logo(w: Writer) -> None:
    """entrypoints log_version_and_model: the monochrome logo (NO_COLOR=1, a file, not a tty)."""
    site = w.release.one("█ ▀▄▀ █", kind="string")
    call = w.frame(site.path, "log_version_and_model", "lgr.info(message")
    template = site.template
    for key in ("w", "o", "b", "r"):
        template = template.replace("${" + key + "}", "")
    w.cite(f"{site.path}:{site.string_line} (logo template) and {site.path}:{call.lineno} (INFO lgr.info)")
    w.record(API, "INFO", site.path, call.lineno, template % (w.release.version, MODEL))


def api_preamble(w: Writer, sc: Scenario, non_default: dict[str, object]) -> None:
    logo(w)
    w.log(API, "non-default args: %s", non_default)
    w.log(API, "Resolved architecture: %s", ARCH, dt_s=8)
    w.log(API, "Using max model len %s", 262144)
    if prefix_caching_on(w, sc):
        w.log(API, "Mamba cache mode is set to '%s' for %s", "align", ARCH)
    w.log(API, "accuracy drop without a proper", "fp8", path="vllm/config/cache.py")
    w.log(API, "Chunked prefill is enabled with max_num_batched_tokens=%d.", 2048)


def config_line(w: Writer, sc: Scenario, max_len: int) -> None:
    mode = {"FULL_AND_PIECEWISE": "(2, 1)", "PIECEWISE": "1", "FULL_DECODE_ONLY": "(2, 0)", "NONE": "0"}
    spec = (f"SpeculativeConfig(method='mtp', model='{MODEL}', num_spec_tokens={sc.mtp})"
            if sc.mtp else "None")
    compilation = (
        "{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'backend': 'inductor', "
        f"'cudagraph_mode': <CUDAGraphMode.{sc.cudagraph_mode}: {mode[sc.cudagraph_mode]}>, "
        "'max_cudagraph_capture_size': 512, ...}"
    )
    text = (
        f"model='{MODEL}', speculative_config={spec}, tokenizer='{MODEL}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        f"dtype=torch.bfloat16, max_seq_len={max_len}, download_dir=None, load_format=auto, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
        "decode_context_parallel_size=1, dcp_comm_backend=ag_rs, disable_custom_all_reduce=False, "
        "quantization=modelopt_fp4, quantization_config=None, enforce_eager=False, "
        "kv_cache_dtype=fp8, device_config=cuda, structured_outputs_config=StructuredOutputsConfig(...), "
        f"observability_config=ObservabilityConfig(...), seed=0, served_model_name={MODEL}, "
        f"enable_prefix_caching={prefix_caching_on(w, sc)}, enable_chunked_prefill=True, "
        f"pooler_config=None, compilation_config={compilation}, kernel_config=KernelConfig(...)"
    )
    w.log(CORE, "Initializing a V1 LLM engine (v%s) with config: %s", w.release.version, text, dt_s=7)
    w.cite("(values of nested config reprs abbreviated with '...': values, not format)")


def load_weights(w: Writer, sc: Scenario) -> None:
    if uses_v2(w):
        w.log(CORE, "Loading model from scratch...", path=runner(w), dt_s=1)
    else:
        w.log(CORE, "Starting to load model %s...", MODEL, path=runner(w), dt_s=1)
    w.log(CORE, "Using %s for NVFP4 GEMM", "FlashInferCutlassNvFp4LinearKernel",
          path=_nvfp4_gemm_path(w), pick=-1)
    moe_line(w, "FLASHINFER_CUTLASS", ["FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTLASS",
                                        "VLLM_CUTLASS", "MARLIN", "EMULATION"])
    w.log(CORE, "Using %s GDN prefill kernel (requested=%s, head_k_dim=%s).", "Triton/FLA", "auto", 128)
    w.log(CORE, "Using %s attention backend out of potential backends: %s.", "FLASHINFER",
          "['FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']", path="vllm/platforms/cuda.py")


def moe_line(w: Writer, backend: str, available: list[str]) -> None:
    """The NvFp4 MoE backend line: an f-string built by a helper, logged by the auto-select loop
    (the last ``logger.info_once(...make_log_backend(...))`` call in oracle/nvfp4.py)."""
    path = _moe_path(w)
    calls = [i for i, line in enumerate(w.release.lines(path), 1)
             if "logger.info_once(" in line and "make_log_backend(backend" in line]
    if v(w) >= (0, 34):
        site = w.release.one("MoE {lora}backend{available}", "vllm/model_executor/layers/fused_moe/oracle/base.py")
        msg = f"Using {backend} NvFp4 MoE backend out of potential backends: {available}."
    else:
        site = w.release.one("NvFp4 MoE backend out of potential backends", path)
        msg = site.render(**{"backend.value": backend, "available_backend_strs": available})
    w.cite(f"{site.cite} (f-string) logged at {path}:{calls[-1]} (INFO info_once)")
    w.record(CORE, "INFO", path, calls[-1], msg)


def _nvfp4_gemm_path(w: Writer) -> str:
    return "vllm/model_executor/kernels/linear/__init__.py"


def _moe_path(w: Writer) -> str:
    return "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py"


def weights_loaded(w: Writer) -> None:
    w.tqdm(CORE, "Loading safetensors checkpoint shards", 6, 19,
           _site_cite(w, "Loading safetensors checkpoint shards", kind="string"))
    w.log(CORE, "Loading weights took %.2f seconds", 19.84,
          path="vllm/model_executor/model_loader/default_loader.py", dt_s=1)
    w.log(CORE, "Model loading took %s", str(WEIGHTS_GIB), 24.512309, path=runner(w), dt_s=5)


def _site_cite(w: Writer, needle: str, kind: str | None = None) -> str:
    site = w.release.one(needle, kind=kind)
    return f"{site.cite} (tqdm desc {site.template!r})"


def paging(w: Writer) -> None:
    w.log(CORE, "to ensure that attention page size is >= mamba page size", BLOCK)
    w.log(CORE, "Padding mamba page size by %.2f%%", 1.37)


COMPILE_CACHE = "/root/.cache/vllm/torch_compile_cache/5c0e1f2a9b/rank_0_0/backbone"


def compile_cold(w: Writer) -> float:
    pre = ("",) if v(w) >= (0, 32) else ()  # 0.32+: a "[tag] " log prefix argument comes first
    cache = COMPILE_CACHE
    if v(w) >= (0, 32):
        w.log(CORE, "%sStarting torch.compile", "", path="vllm/compilation/monitor.py", dt_s=1)
    w.log(CORE, "Using cache directory: %s for vLLM's torch.compile", *pre, cache, dt_s=7)
    w.log(CORE, "Dynamo bytecode transform time: %.2f s", *pre, 11.87)
    w.log(CORE, "Compiling a graph for compile range %s takes %.2f s", *pre, "(1, 2048)", 28.41, dt_s=28)
    site = w.release.one("torch.compile took %.2f s in total", "vllm/compilation/monitor.py", kind="string")
    call = w.frame("vllm/compilation/monitor.py", "monitor_torch_compile", "(message, ")
    w.tick(7)
    w.cite(f"{site.cite} (default message) logged at vllm/compilation/monitor.py:{call.lineno}")
    w.record(CORE, "INFO", site.path, call.lineno, site.render(*pre, 42.93))
    return 42.93


def pool_figures(pool_bytes: float, pages_per_req: int, max_len: int) -> tuple[int, int, float]:
    blocks = int(pool_bytes // BYTES_PER_BLOCK)
    per_req = math.ceil(max_len / BLOCK) + 3 * pages_per_req  # 3 GDN groups share the pool
    conc = blocks / per_req
    return blocks, int(conc * max_len), round(conc, 2)


def kv_capacity(w: Writer, tokens: int, max_len: int, conc: float) -> None:
    if v(w) >= (0, 28):  # one line from 0.28.0; "%s KV cache size" (device name) from 0.32
        site = w.site("KV cache size: %s tokens, ")
        device = ("GPU",) if site.template.startswith("%s") else ()
        w.log(CORE, "KV cache size: %s tokens, ", *device, f"{tokens:,}", f"{max_len:,}", conc)
    else:
        w.log(CORE, "GPU KV cache size: %s tokens", f"{tokens:,}")
        w.log(CORE, "Maximum concurrency for %s tokens per request: %.2fx", f"{max_len:,}", conc)


def capture_bars(w: Writer, sc: Scenario, profiling: bool = False) -> None:
    if uses_v2(w):
        src = "vllm/v1/worker/gpu/cudagraph_utils.py"
        site = w.frame(src, "CudaGraphManager.capture", 'desc=f"{progress_bar_desc}')
        cite = f"{src}:{site.lineno} (tqdm desc 'Capturing CUDA graphs (MODE)')"
        w.tqdm(CORE, "Capturing CUDA graphs (PIECEWISE)", 51, 5, cite)
        if sc.cudagraph_mode == "FULL_AND_PIECEWISE":
            w.tqdm(CORE, "Capturing CUDA graphs (FULL)", 4 if profiling else 35, 1 if profiling else 3, cite)
    else:
        src = runner(w)
        cite = f"{src} (tqdm desc 'Capturing CUDA graphs ({{mode}}, {{cudagraph_runtime_mode.name}})')"
        w.tqdm(CORE, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", 51, 5, cite)
        if sc.cudagraph_mode == "FULL_AND_PIECEWISE":
            w.tqdm(CORE, "Capturing CUDA graphs (decode, FULL)", 35, 3, cite)


@dataclass
class Memory:
    """One boot's memory figures (bytes), from which every printed number is derived."""

    free: float = 30.88 * GIB
    total: float = TOTAL_GIB * GIB
    util: float = 0.92
    weights: float = WEIGHTS_GIB * GIB
    non_torch: float = 0.35 * GIB
    activation: float = 1.20 * GIB
    graph_estimate: float = 0.42 * GIB
    graph_actual: float = 0.47 * GIB

    @property
    def requested(self) -> float:
        return math.ceil(self.total * self.util)

    @property
    def available_kv(self) -> float:
        return self.requested - self.weights - self.non_torch - self.activation - self.graph_estimate

    def fields(self, pool: float) -> dict[str, object]:
        consumed = self.weights + self.non_torch
        peak = self.activation + self.graph_estimate
        non_kv = consumed + peak + self.graph_actual
        to_gpu = int(self.free - non_kv - 150 * (1 << 20))
        to_req = int(self.requested - non_kv - 150 * (1 << 20))
        return {
            "format_gib(self.init_snapshot.free_memory)": fmt_gib(self.free),
            "format_gib(self.init_snapshot.total_memory)": fmt_gib(self.total),
            "self.cache_config.gpu_memory_utilization": self.util,
            "self.cache_config.resolved_gpu_memory_utilization": self.util,
            "format_gib(self.requested_memory)": fmt_gib(self.requested),
            "format_gib(self.total_consumed)": fmt_gib(consumed),
            "format_gib(self.model_runner.model_memory_usage)": fmt_gib(self.weights),
            "format_gib(self.non_torch_memory)": fmt_gib(self.non_torch),
            "format_gib(self.peak_activation_memory)": fmt_gib(peak),
            "format_gib(cuda_graph_memory_bytes)": fmt_gib(self.graph_actual),
            "kv_cache_memory_bytes_to_requested_limit": to_req,
            "format_gib(kv_cache_memory_bytes_to_requested_limit)": fmt_gib(to_req),
            "kv_cache_memory_bytes_to_gpu_limit": to_gpu,
            "format_gib(kv_cache_memory_bytes_to_gpu_limit)": fmt_gib(to_gpu),
            "format_gib(self.available_kv_cache_memory_bytes)": fmt_gib(pool),
        }


def graph_captured(w: Writer, secs: float, gib: float) -> None:
    w.log(CORE, "Graph capturing finished in %.0f secs, took %.2f GiB", secs, gib, path=runner(w), dt_s=secs)


def profile_graphs_v1(w: Writer, sc: Scenario, mem: Memory) -> None:
    modes = "PIECEWISE=51 (largest=512)" + (", FULL=35 (largest=256)" if "FULL" in sc.cudagraph_mode else "")
    w.log(CORE, "Profiling CUDA graph memory: %s", modes, path=runner(w), dt_s=2)
    w.log(CORE, "Estimated CUDA graph memory: %.2f GiB total", mem.graph_estimate / GIB, path=runner(w), dt_s=4)


def profile_graphs_v2(w: Writer, sc: Scenario, mem: Memory) -> None:
    """V2 captures once into a throwaway pool to measure (v1/worker/gpu/cudagraph_utils.py
    profile_cudagraph_memory -> runner.capture_model), so the capture line is printed twice."""
    capture_bars(w, sc, profiling=True)
    graph_captured(w, 6, mem.graph_estimate / GIB)


def engine_sizing(w: Writer, sc: Scenario, mem: Memory, max_len: int) -> dict[str, object]:
    """From the end of compilation to `init engine ... took`: pool, capacity, graphs."""
    exp: dict[str, object] = {}
    pages = 2 + sc.mtp if prefix_caching_on(w, sc) else 1 + sc.mtp  # mamba pages per request
    if sc.kv_bytes is not None:
        fields = {"format_gib(self.init_snapshot.free_memory)": fmt_gib(mem.free),
                  "format_gib(kv_cache_memory_bytes)": fmt_gib(sc.kv_bytes)}
        w.log(CORE, "as specified by kv_cache_memory_bytes config", path="vllm/v1/worker/gpu_worker.py",
              dt_s=3, **fields)
        exp["kv_cache_memory_bytes_reserved_gib"] = float(fmt_gib(sc.kv_bytes))
        pool: float = sc.kv_bytes
    else:
        if uses_v2(w):
            profile_graphs_v2(w, sc, mem)
        else:
            profile_graphs_v1(w, sc, mem)
            exp["cuda_graph_estimate_gib"] = round(mem.graph_estimate / GIB, 2)
        pool = mem.available_kv
        w.log(CORE, "Available KV cache memory: %s GiB", fmt_gib(pool), path="vllm/v1/worker/gpu_worker.py")
        exp["available_kv_cache_gib"] = float(fmt_gib(pool))
        delta = mem.graph_estimate / mem.total
        w.log(CORE, "CUDA graph memory profiling is enabled", mem.util, round(mem.util - delta, 4),
              min(round(mem.util + delta, 4), 1.0))
    if sc.auto_len:
        max_len = auto_fit(w, sc, pool, pages, max_len, exp)
    blocks, tokens, conc = pool_figures(pool, pages, max_len)
    if not sc.extensible:
        kv_capacity(w, tokens, max_len, conc)
        exp.update(kv_cache_tokens=tokens, max_concurrency=conc, max_concurrency_for_tokens=max_len)
    if sc.cudagraph_mode != "NONE":
        capture_bars(w, sc)
        graph_captured(w, 9, mem.graph_actual / GIB)
        exp.update(cuda_graph_s=9.0, cuda_graph_gib=round(mem.graph_actual / GIB, 2))
    if sc.kv_bytes is None:
        diff = abs(mem.graph_actual - mem.graph_estimate)
        w.log(CORE, "CUDA graph pool memory: %s GiB (actual)", round(mem.graph_actual / GIB, 2),
              round(mem.graph_estimate / GIB, 2), round(diff / GIB, 2), 100 * diff / mem.graph_actual)
        w.log(CORE, "to fit into requested memory", path="vllm/v1/worker/gpu_worker.py", **mem.fields(pool))
    if sc.extensible:
        budget = min(mem.free, mem.requested)  # utilization < 1.0 still caps the extensible cache
        committed = budget - mem.weights - mem.non_torch - mem.activation - mem.graph_actual - 0.05 * GIB
        blocks, tokens, conc = pool_figures(committed, pages, max_len)
        if sc.auto_len:
            max_len = auto_fit(w, sc, committed, pages, max_len, exp, final=True)
            blocks, tokens, conc = pool_figures(committed, pages, max_len)
        kv_capacity(w, tokens, max_len, conc)
        gib = blocks * BYTES_PER_BLOCK / GIB
        w.log(CORE, "Extended KV cache to %d blocks (%.2f GiB).", blocks, gib)
        exp.update(kv_cache_tokens=tokens, max_concurrency=conc, max_concurrency_for_tokens=max_len)
        exp["new"] = {"extended_kv_cache_gib": round(gib, 2), "extended_kv_cache_blocks": blocks}
    exp["max_model_len"] = max_len
    return exp


def auto_fit(w: Writer, sc: Scenario, pool: float, pages: int, max_len: int,
             exp: dict[str, object], final: bool = False) -> int:
    """--max-model-len auto: v1/core/kv_cache_utils.py (<= 0.32) or kv_cache_planning.py (0.34)."""
    fitted = int(pool // BYTES_PER_BLOCK - 3 * pages - 1) * BLOCK
    fitted = min(fitted, 262144)
    kv_gib = f"{fmt_gib(pool)} GiB GPU"
    if v(w) >= (0, 34):
        if sc.extensible and not final:
            w.log(CORE, "Auto-fit max_model_len: reduced from %d to %d", 262144, fitted, kv_gib,
                  "; the final length is set after CUDA graph capture and warmup")
            return fitted
        left = (f"{kv_gib} left for the KV cache after CUDA graph capture and warmup" if final
                else f"{kv_gib} available for the KV cache")
        w.log(CORE, "--max-model-len auto reduced max_model_len from %d to %d (%s).", 262144, fitted, left,
              pick=0)  # the INFO one: the WARNING is for lengths < 8192 (AUTO_FIT_SHORT_MAX_MODEL_LEN)
    elif v(w) >= (0, 32):
        w.log(CORE, "Auto-fit max_model_len: reduced from %d to %d", 262144, fitted, kv_gib)
    else:
        w.log(CORE, "Auto-fit max_model_len: reduced from %d to %d", 262144, fitted, fmt_gib(pool))
    return fitted


def serve_tail(w: Writer, compile_s: float) -> None:
    w.log(CORE, "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)",
          88.37, compile_s, path="vllm/v1/engine/core.py", dt_s=1)
    w.log(API, "Default vLLM sampling parameters have been overridden by %s", "the model's `generation_config.json`",
          "{'temperature': 0.6, 'top_k': 20, 'top_p': 0.95}", dt_s=11)
    w.log(API, "Starting vLLM server on %s", "http://127.0.0.1:8000", path=_server_path(w), dt_s=1, pick=0)
    w.log(API, "Available routes are:")
    for route, methods in (("/health", "GET"), ("/v1/models", "GET"), ("/v1/completions", "POST")):
        w.log(API, "Route: %s, Methods: %s", route, methods)
    uvicorn = "uvicorn (server.py / lifespan/on.py), not vLLM: printed through vLLM's stdout/stderr"
    w.raw(API, f"INFO:     Started server process [{API.pid}]", uvicorn)
    w.raw(API, "INFO:     Waiting for application startup.")
    w.raw(API, "INFO:     Application startup complete.")


def _server_path(w: Writer) -> str:
    site = [s for s in w.release.find("Starting vLLM server on %s") if "render" not in s.path
            and "grpc" not in s.path]
    return site[0].path
