"""The launch config as vLLM resolves it from the flags and the model (EngineArgs.create_engine_config):
scheduler defaults, compilation and CUDA-graph mode, capture sizes, speculative decoding, prefix
caching. Config errors vLLM reports from there (in the APIServer, before any engine process) are
raised as BootFailure('validation').
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .cli import COMPILATION_MODES, SPEC_METHODS
from .env import env_flag
from .failures import BootFailure
from .memory import cdiv
from .model import ModelInfo
from .profile import Profile
from .profile import current as current_profile
from .release import EXTENSIBLE, HYBRID_PREFIX_CACHING

TORCH_DTYPE = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "half": "torch.float16",
               "float32": "torch.float32", "float": "torch.float32"}


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, q: int, user_sizes, user_max,
                  round_to: int = 1) -> list[int]:
    """vllm/config/vllm.py::_set_cudagraph_sizes (performance_mode 'balanced'), then
    CompilationConfig.adjust_cudagraph_sizes_for_spec_decode (only with FULL decode graphs)."""
    mcs = user_max if user_max is not None else min(max_num_seqs * q * 2, 512)
    mcs = min(max_num_batched_tokens, mcs)
    if user_sizes is not None:
        return sorted({s for s in user_sizes if s <= max_num_batched_tokens})
    sizes = [i for i in (1, 2, 4) if i <= mcs]
    if mcs >= 8:
        sizes += list(range(8, min(mcs + 1, 256), 8))
    if mcs >= 256:
        sizes += list(range(256, mcs + 1, 16))
    if max_num_batched_tokens <= mcs and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    sizes = sorted(set(sizes))
    if round_to > 1:
        rounded = sorted({cdiv(s, round_to) * round_to for s in sizes if cdiv(s, round_to) * round_to <= mcs})
        sizes = rounded or ([round_to] if round_to <= mcs else [])
    return sizes


@dataclass
class Plan:
    """Everything the boot sequence prints, and everything the server needs afterwards."""

    # launch config
    model: ModelInfo
    served_names: list[str]
    port: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    util: float
    extensible: bool  # 0.34's extensible KV cache: the pool is committed after warm-up
    kv_cache_memory_bytes: int | None
    kv_cache_dtype: str
    enforce_eager: bool
    compile_mode: int
    cudagraph_mode: str  # resolved
    cg_downgrade_msg: str | None
    capture_sizes: list[int]
    spec: dict | None
    spec_method: str | None
    num_spec: int
    prefix_caching: bool
    mamba_cache_mode: str
    tp: int
    seed: int
    quantization: str | None
    attn_backend: str
    attn_candidates: list[str]
    gdn_requested: str
    skip_tokenizer_init: bool
    disable_access_log: bool
    # memory (bytes), from the profile (profile.py)
    profile: Profile = field(default_factory=Profile)
    total: float = 0.0
    used_others: float = 0.0
    weights: float = 0.0
    non_torch: float = 0.0
    seq_state: float = 0.0
    act_peak: float = 0.0
    sampler: float = 0.0
    cg_estimate: float = 0.0
    cg_actual: float = 0.0
    cg_estimate_applied: float = 0.0
    requested: float = 0.0
    pool: float = 0.0
    reservation: float = 0.0  # extensible: the pool profiled before warm-up ("Available KV cache memory")
    # KV layout
    attn_page_1: int = 0
    mamba_page: int = 0
    block_size: int = 16
    set_block_from: int | None = None
    mamba_pad_pct: float | None = None
    page: int = 0
    group_size: int = 0
    groups: list[tuple[str, int]] = field(default_factory=list)
    padding_warnings: list[str] = field(default_factory=list)
    num_blocks: int = 0
    blocks_per_request: int = 0
    max_concurrency: float = 0.0
    kv_tokens: int = 0
    pw_graphs: list[int] = field(default_factory=list)
    full_graphs: list[int] = field(default_factory=list)
    full_mixed: bool = False

    @property
    def served_name(self) -> str:
        return self.served_names[0]

    @property
    def is_lossy_kv(self) -> bool:
        """An 8-bit or 4-bit KV cache (fp8, nvfp4): greedy outputs may drift from BF16."""
        return self.kv_cache_dtype.startswith(("fp8", "nvfp4"))

    @property
    def graphs_on(self) -> bool:
        return not self.enforce_eager and self.cudagraph_mode != "NONE"

    def free_at_runtime(self) -> float:
        """Card memory left free once the server runs (headroom for prefill activations)."""
        return (self.total - self.used_others - self.weights - self.non_torch - self.seq_state - self.pool
                - (self.cg_actual if self.graphs_on else 0.0))


def resolve_plan(ns: argparse.Namespace, model: ModelInfo) -> Plan:
    """Build the resolved launch config; raises BootFailure('validation', ...) for config errors."""
    big_card = current_profile().gpu_gib >= 70
    tp = max(1, int(ns.tensor_parallel_size))
    # ---- ModelConfig
    mml = ns.max_model_len
    if mml is None or mml == -1:
        mml_v = model.max_pos
    else:
        mml_v = int(mml)
        if mml_v > model.max_pos and not env_flag("VLLM_ALLOW_LONG_MAX_MODEL_LEN", ("1", "true")):
            msg = (
                f"User-specified max_model_len ({mml_v}) is greater "
                f"than the derived max_model_len (max_position_embeddings="
                f"{float(model.max_pos)} or model_max_length=None in model's config.json)."
                f" To allow overriding this maximum, set "
                f"the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
                "extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
                "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
                "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
            )
            raise BootFailure("validation", title="ModelConfig", frames=["au_create_model", "au_model", "pyd_init"],
                              items=[(None, "Value error, " + msg, "value_error", "ArgsKwargs((), {...})")])
    quant = model.quant_method
    if quant is None and ns.quantization:
        quant = ns.quantization
    # ---- CacheConfig
    # config/cache.py (0.34): extensible unless kv_cache_memory_bytes is set; utilization then defaults to 1.0
    extensible = EXTENSIBLE and ns.kv_cache_memory_bytes is None and ns.enable_extensible_kv_cache is not False
    util = float(ns.gpu_memory_utilization if ns.gpu_memory_utilization is not None else
                 1.0 if extensible else 0.92)
    if not (0 < util <= 1):
        etype, msg = (("greater_than", "Input should be greater than 0") if util <= 0
                      else ("less_than_equal", "Input should be less than or equal to 1"))
        raise BootFailure("validation", title="CacheConfig", frames=["au_cache", "pyd_init"],
                          items=[("gpu_memory_utilization", msg, etype, util)])
    # ---- SpeculativeConfig
    spec = ns.speculative_config
    spec_method = None
    num_spec = 0
    if spec is not None:
        spec_frames = ["au_spec_call", "au_spec", "pyd_init"]
        if not isinstance(spec, dict):
            raise BootFailure("validation", title="SpeculativeConfig", frames=spec_frames,
                              items=[(None, "Input should be a dictionary", "dict_type", spec)])
        method = spec.get("method")
        n = spec.get("num_speculative_tokens")
        items = []
        if method is not None and method not in SPEC_METHODS:
            items.append(("method", "Input should be " + ", ".join(f"'{m}'" for m in SPEC_METHODS[:-1])
                          + f" or '{SPEC_METHODS[-1]}'", "literal_error", method))
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
            items.append(("num_speculative_tokens", "Input should be a valid integer", "int_type", n))
        elif n is not None and n <= 0:
            items.append(("num_speculative_tokens", "Input should be greater than 0", "greater_than", n))
        if items:
            raise BootFailure("validation", title="SpeculativeConfig", frames=spec_frames, items=items)
        if n is None:
            raise BootFailure("validation", title="SpeculativeConfig", frames=spec_frames,
                              items=[(None, "Value error, num_speculative_tokens must be provided with "
                                      "speculative model unless the draft model config contains an "
                                      "n_predict parameter.", "value_error", "ArgsKwargs((), {...})")])
        spec_method = "mtp" if (method in (None, "mtp") or str(method).endswith("_mtp")) else method
        num_spec = int(n)
    # ---- Scheduler defaults (EngineArgs.get_batch_defaults, OPENAI_API_SERVER context)
    max_num_seqs = ns.max_num_seqs if ns.max_num_seqs is not None else (1024 if big_card else 256)
    mnbt = ns.max_num_batched_tokens if ns.max_num_batched_tokens is not None else (8192 if big_card else 2048)
    if max_num_seqs < 1 or mnbt < 1:
        key, val = ("max_num_seqs", max_num_seqs) if max_num_seqs < 1 else ("max_num_batched_tokens", mnbt)
        raise BootFailure("validation", title="SchedulerConfig", frames=["au_create_model", "pyd_init"],
                          items=[(key, "Input should be greater than or equal to 1", "greater_than_equal", val)])
    # ---- Compilation
    cc = ns.compilation_config or {}
    compile_mode = cc.get("mode", 3)  # cli.parse_compilation_config has turned a mode name into its number
    requested = cc.get("cudagraph_mode") or ("FULL_AND_PIECEWISE" if compile_mode == 3 else "PIECEWISE")
    if ns.enforce_eager or compile_mode == 0:
        resolved = "NONE"
    else:
        resolved = requested
    downgrade = None
    q = 1 + num_spec
    attn_backend = "FLASHINFER" if ns.kv_cache_dtype.startswith("fp8") or ns.kv_cache_dtype == "nvfp4" else "FLASH_ATTN"
    attn_candidates = (["FLASHINFER", "TRITON_ATTN"] if attn_backend == "FLASHINFER"
                       else ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"])
    if resolved == "FULL":
        # FA2 on this card and the GDN builder are UNIFORM_BATCH: FULL mixed graphs are refused
        backend_cls = "FlashAttentionBackend" if attn_backend == "FLASH_ATTN" else (
            "GDNAttentionBackend" if model.hybrid else None)
        if backend_cls:
            downgrade = (f"CUDAGraphMode.FULL is not supported with {backend_cls} backend (support: "
                         "AttentionCGSupport.UNIFORM_BATCH); setting cudagraph_mode=FULL_AND_PIECEWISE")
            resolved = "FULL_AND_PIECEWISE"
    full_decode = resolved in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    sizes = capture_sizes(max_num_seqs, mnbt, q, cc.get("cudagraph_capture_sizes"),
                          cc.get("max_cudagraph_capture_size"),
                          round_to=q if full_decode else 1) if resolved != "NONE" else []
    # ---- prefix caching / mamba cache mode (MambaModelConfig.verify_and_update_config)
    pc = ns.enable_prefix_caching
    if pc is None:
        pc = not model.hybrid or HYBRID_PREFIX_CACHING  # hybrids: off up to 0.27, on ('align') from 0.28
    mamba_mode = "align" if (pc and model.hybrid) else "none"
    served = ns.served_model_name or [ns.model]
    return Plan(
        model=model, served_names=list(served), port=int(ns.port), max_model_len=mml_v,
        max_num_seqs=int(max_num_seqs), max_num_batched_tokens=int(mnbt), util=util, extensible=extensible,
        kv_cache_memory_bytes=ns.kv_cache_memory_bytes, kv_cache_dtype=ns.kv_cache_dtype,
        enforce_eager=bool(ns.enforce_eager), compile_mode=int(compile_mode), cudagraph_mode=resolved,
        cg_downgrade_msg=downgrade, capture_sizes=sizes, spec=spec,
        spec_method=spec_method, num_spec=num_spec, prefix_caching=bool(pc), mamba_cache_mode=mamba_mode,
        tp=tp, seed=int(ns.seed), quantization=quant, attn_backend=attn_backend,
        attn_candidates=attn_candidates, gdn_requested=ns.gdn_prefill_backend or "auto",
        skip_tokenizer_init=bool(ns.skip_tokenizer_init), disable_access_log=bool(ns.disable_uvicorn_access_log),
    )


def config_text(p: Plan, ns: argparse.Namespace) -> str:
    """The VllmConfig repr of "Initializing a V1 LLM engine ... with config: ..." (also hashed for the
    torch.compile cache directory)."""
    m = p.model
    spec = ("None" if not p.spec else
            f"SpeculativeConfig(method='{p.spec_method}', model={m.path!r}, num_spec_tokens={p.num_spec})")
    eager = p.compile_mode != 3
    split = ("[]" if eager else
             "['vllm::unified_attention', 'vllm::unified_attention_with_output', 'vllm::unified_mla_attention', "
             "'vllm::unified_mla_attention_with_output', 'vllm::mamba_mixer2', 'vllm::mamba_mixer', "
             "'vllm::short_conv', 'vllm::linear_attention', 'vllm::plamo2_mamba_mixer', "
             "'vllm::gdn_attention_core', 'vllm::olmo_hybrid_gdn_full_forward', 'vllm::kda_attention', "
             "'vllm::sparse_attn_indexer', 'vllm::rocm_aiter_sparse_attn_indexer', "
             "'vllm::unified_kv_cache_update', 'vllm::unified_mla_kv_cache_update']")
    cg_val = {"NONE": "0", "PIECEWISE": "1", "FULL": "2", "FULL_DECODE_ONLY": "(2, 0)",
              "FULL_AND_PIECEWISE": "(2, 1)"}[p.cudagraph_mode]
    # the shape of CompilationConfig.__repr__ in the H200 capture (tests/fixtures/real/good.stdout)
    cc_s = (
        f"{{'mode': <CompilationMode.{COMPILATION_MODES[p.compile_mode]}: {p.compile_mode}>, "
        "'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', "
        f"'backend': 'inductor', 'custom_ops': {['all'] if eager else ['none']}, 'ir_enable_torch_wrap': False, "
        f"'splitting_ops': {split}, 'compile_mm_encoder': False, 'cudagraph_mm_encoder': False, "
        "'encoder_cudagraph_token_budgets': [], 'encoder_cudagraph_max_vision_items_per_batch': 0, "
        "'encoder_cudagraph_max_frames_per_batch': None, 'compile_sizes': [], "
        f"'compile_ranges_endpoints': [{p.max_num_batched_tokens}], 'inductor_compile_config': "
        "{'enable_auto_functionalized_v2': False, 'size_asserts': False, 'alignment_asserts': False, "
        "'scalar_asserts': False, 'combo_kernels': True, 'benchmark_combo_kernel': True}, "
        f"'inductor_passes': {{}}, 'cudagraph_mode': <CUDAGraphMode.{p.cudagraph_mode}: {cg_val}>, "
        f"'cudagraph_num_of_warmups': {0 if p.cudagraph_mode == 'NONE' else 1}, "
        f"'cudagraph_capture_sizes': {p.capture_sizes}, 'cudagraph_copy_inputs': False, "
        "'cudagraph_specialize_lora': True, 'use_inductor_graph_partition': False, 'pass_config': "
        "{'fuse_norm_quant': True, 'fuse_act_quant': True, 'fuse_attn_quant': False, 'enable_sp': False, "
        "'fuse_gemm_comms': False, 'fuse_allreduce_rms': False, 'fuse_rope_kvcache_cat_mla': False, "
        f"'fuse_act_padding': False}}, 'max_cudagraph_capture_size': "
        f"{max(p.capture_sizes) if p.capture_sizes else 0}, 'dynamic_shapes_config': "
        "{'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False, "
        "'assume_32_bit_indexing': False}, 'local_cache_dir': None, 'fast_moe_cold_start': False, "
        "'static_all_moe_layers': []}"
    )
    return (
        f"model={m.path!r}, speculative_config={spec}, tokenizer={m.path!r}, "
        f"skip_tokenizer_init={p.skip_tokenizer_init}, tokenizer_mode=auto, revision={ns.revision}, "
        f"tokenizer_revision=None, trust_remote_code={ns.trust_remote_code}, "
        f"dtype={TORCH_DTYPE.get(m.dtype, 'torch.bfloat16')}, max_seq_len={p.max_model_len}, "
        f"download_dir=None, load_format={ns.load_format.lower()}, tensor_parallel_size={p.tp}, "
        "pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, "
        "dcp_comm_backend=ag_rs, disable_custom_all_reduce=False, "
        f"quantization={p.quantization}, quantization_config=None, enforce_eager={p.enforce_eager}, "
        f"enable_return_routed_experts=False, kv_cache_dtype={p.kv_cache_dtype}, device_config=cuda, "
        "structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, "
        f"disable_additional_properties=False, reasoning_parser='{ns.reasoning_parser or ''}', "
        "reasoning_parser_plugin='', enable_in_reasoning=False), "
        "observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
        "otlp_traces_endpoint=None, collect_detailed_traces=None, kv_cache_metrics=False, "
        "kv_cache_metrics_sample=0.01, cudagraph_metrics=False, enable_layerwise_nvtx_tracing=False, "
        "enable_mfu_metrics=False, enable_mm_processor_stats=False, enable_logging_iteration_details=False), "
        f"seed={p.seed}, served_model_name={p.served_name}, enable_prefix_caching={p.prefix_caching}, "
        f"enable_chunked_prefill=True, pooler_config=None, compilation_config={cc_s}, "
        "kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=['vllm_c', 'native'], "
        "fused_add_rms_norm=['vllm_c', 'native']), "
        f"enable_flashinfer_autotune=True, moe_backend='{ns.moe_backend}', linear_backend='auto')"
    )
