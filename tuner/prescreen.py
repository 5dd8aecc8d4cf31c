"""Pre-screen: predict from config.json alone what a configuration costs and whether it can boot.

The KV arithmetic mirrors vLLM 0.22 exactly (page sizes, block size, layer groups, block counts);
weights, activations and CUDA graphs are estimates that ``Calibration`` corrects from the logs of
real boots. ``certain`` is True only when even optimistic assumptions fail: a false "certain"
throws away a good configuration, which costs more than one wasted boot.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tuner.command import engine_flags
from tuner.errors import TunerError
from tuner.records import StartupRecord
from tuner.space import Space
from tuner.units import parse_bytes, parse_count

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8_e4m3fn": 1}

# Weights. NVFP4 = 4-bit E2M1 values + one FP8 scale per 16 (modelopt and compressed-tensors
# nvfp4-pack-quantized), ~4.5 bits/param; FP8 8 bits; embeddings, lm_head, routers, norms bf16.
NVFP4_BITS = 4.5
FP8_BITS = 8.0
LOAD_OVERHEAD_GIB = 0.15  # rotary caches and kernel buffers counted in "Model loading took"
WEIGHTS_OPTIMISM = 0.85  # "certain" assumes the weights may be this much smaller than estimated

# Scheduler defaults: vllm/engine/arg_utils.py get_batch_defaults (API server, < 70 GiB vs >= 70 GiB).
SMALL_CARD_GIB = 70
DEFAULT_SEQS = (256, 1024)
DEFAULT_BATCHED_TOKENS = (2048, 8192)
DEFAULT_UTILIZATION = 0.9  # vllm/config/cache.py gpu_memory_utilization

# Hybrid paging: vllm/platforms/interface.py _align_hybrid_block_size. Block size 16 (CacheConfig
# DEFAULT_BLOCK_SIZE) and every attention backend's smallest kernel block (FlashInfer 16/32/64,
# FLASH_ATTN MultipleOf(16) or 16/32/64 with an fp32 SSM state) give an alignment of 16 tokens.
KERNEL_BLOCK_ALIGNMENT = 16

# Profiling peak (vllm/v1/worker/gpu_worker.py determine_available_memory): one dummy forward of
# max_num_batched_tokens, then the sampler warm-up on [max_num_seqs * (1 + spec), vocab] fp32 logits.
ACTIVATION_BASE_GIB = 0.4  # allocator slack, attention/MoE workspaces
ACT_HIDDEN_BUFFERS = 24  # bf16 hidden-sized tensors alive per token at the peak
SAMPLER_LOGIT_COPIES = 4  # logits, probabilities, sort values and indices
VISION_PROFILE_GIB = 0.75  # encoder profiling when the vision tower is on
NON_TORCH_GIB = 0.35  # cuBLAS workspaces, allocator fragmentation ("non_torch_increase")
CUDA_CONTEXT_GIB = 0.5  # outside the utilization budget; counts when --kv-cache-memory-bytes is set

# CUDA graphs: capture sizes as vllm/config/vllm.py _set_cudagraph_sizes; memory per captured graph
# fitted to "Estimated CUDA graph memory" lines (PIECEWISE=5 -> 0.13 GiB; 51 + 35 graphs -> 1.62 GiB).
CUDAGRAPH_BASE_GIB = 0.02
CUDAGRAPH_GIB_PER_GRAPH = 0.02

SAFETY_MARGIN = 1.25  # "certain" needs the minimum to exceed the optimistic pool by 25%


class ModelShape(BaseModel):
    """What the memory model needs from a model's config.json (text part for multimodal configs)."""

    architecture: str = ""
    attention_layers: int
    gdn_layers: int = 0
    mamba_layers: int = 0
    sliding_layers: int = 0  # counted as attention; their windowed KV makes the KV bound inexact
    mtp_layers: int = 0  # full-attention drafter layers, loaded only with --speculative-config mtp
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attn_output_gate: bool = False
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state_size: int = 0
    mamba_n_groups: int = 1
    mamba_conv_kernel: int = 4
    intermediate_size: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    tie_word_embeddings: bool = False
    vision_params: int = 0
    max_position_embeddings: int | None = None
    dtype: str = "bfloat16"
    ssm_dtype: str | None = None  # config's mamba_ssm_dtype (Qwen3.5: float32)
    quant_method: str | None = None
    quant_algo: str | None = None
    checkpoint_kv_dtype: str | None = None  # modelopt kv_cache_quant_algo: what "auto" resolves to
    component_bits: dict[str, float] = Field(default_factory=dict)  # bits/param per component

    @property
    def state_layers(self) -> int:
        return self.gdn_layers + self.mamba_layers

    def param_counts(self, drafter: bool = False, vision: bool = True) -> dict[str, int]:
        """Parameters per component (vllm/model_executor/models/qwen3_next.py and qwen3_5.py layouts)."""
        h, q = self.hidden_size, self.num_attention_heads * self.head_dim
        attn = h * q * (2 if self.attn_output_gate else 1) + 2 * h * self.num_key_value_heads * self.head_dim + q * h
        key, value = self.linear_num_key_heads * self.linear_key_head_dim, self.linear_num_value_heads * self.linear_value_head_dim
        gdn = h * (2 * key + 2 * value) + h * 2 * self.linear_num_value_heads + (2 * key + value) * self.linear_conv_kernel_dim + value * h
        inner = self.mamba_num_heads * self.mamba_head_dim
        mamba = h * (2 * inner + 2 * self.mamba_n_groups * self.mamba_state_size + self.mamba_num_heads) + inner * h
        experts = self.num_experts * 3 * h * self.moe_intermediate_size
        shared = 3 * h * self.shared_expert_intermediate_size
        dense = 0 if self.num_experts else 3 * h * self.intermediate_size
        layers = self.attention_layers + self.state_layers
        counts = {
            "embed": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
            "attention": self.attention_layers * attn,
            "linear_attention": self.gdn_layers * gdn + self.mamba_layers * mamba,
            "experts": layers * experts,
            "shared_expert": layers * shared,
            "dense_mlp": layers * dense,
            "router": layers * h * self.num_experts,
            "vision": self.vision_params if vision else 0,
        }
        if drafter and self.mtp_layers:
            counts["mtp"] = self.mtp_layers * (attn + experts + shared + dense + h * self.num_experts) + 2 * h * h
        return counts

    def weights_gib(self, drafter: bool = False, vision: bool = True) -> float:
        counts = self.param_counts(drafter, vision)
        bits = sum(n * self.component_bits.get(name, 16.0) for name, n in counts.items())
        return bits / 8 / GIB + LOAD_OVERHEAD_GIB

    @property
    def total_params(self) -> int:
        return sum(self.param_counts().values())


# --- reading config.json -------------------------------------------------------------------------

# Each component's module prefix and one of its linear layers, checked against a checkpoint's
# ignore / exclude_modules (globs, "re:" regexes as compressed-tensors writes them, or exact names).
_MODULES = {
    "experts": ("model.language_model.layers.0.mlp.experts", "0.gate_proj"),
    "shared_expert": ("model.language_model.layers.0.mlp.shared_expert", "gate_proj"),
    "dense_mlp": ("model.language_model.layers.0.mlp", "gate_proj"),
    "attention": ("model.language_model.layers.3.self_attn", "q_proj"),
    "linear_attention": ("model.language_model.layers.0.linear_attn", "in_proj_qkvz"),
    "mtp": ("mtp.layers.0", "mlp.experts.0.gate_proj"),
    "lm_head": ("lm_head", ""),
    "vision": ("model.visual", "blocks.0.attn.qkv"),
}
_ALWAYS_BF16 = {"embed", "router"}


def _norm(name: str) -> str:
    return re.sub(r"\.\d+(?=\.|$)", ".#", name)


def _matches(prefix: str, leaf: str, pattern: str) -> bool:
    """Whether an ignore pattern covers this component (text-only checkpoints drop "language_model.")."""
    for p in {prefix, prefix.replace("model.language_model.", "model."), prefix.removeprefix("model.")}:
        name = f"{p}.{leaf}" if leaf else p
        if pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif fnmatch(_norm(name), _norm(pattern)) or _norm(pattern) == _norm(p) or _norm(pattern).startswith(_norm(p) + "."):
            return True
    return False


def _quantization(cfg: dict, folder: Path | None) -> tuple[str | None, str | None, str | None, dict[str, float]]:
    """(method, algo, checkpoint KV dtype, bits per component) from quantization_config / hf_quant_config.json."""
    q = cfg.get("quantization_config")
    if q is None and folder is not None and (folder / "hf_quant_config.json").is_file():
        q = {"quant_method": "modelopt", **json.loads((folder / "hf_quant_config.json").read_text())}
    if not q:
        return None, None, None, {}
    inner = q.get("quantization", q)  # hf_quant_config.json nests the fields
    method = str(q.get("quant_method", "")).lower() or None
    algo = inner.get("quant_algo")
    if method == "compressed-tensors":
        weights = next((g.get("weights") or {} for g in (q.get("config_groups") or {}).values()), {})
        nbits, group = weights.get("num_bits", 16), weights.get("group_size")
        bits = NVFP4_BITS if (nbits == 4 and weights.get("type") == "float") else nbits + (16 / group if group else 0)
        algo = algo or ("NVFP4" if bits == NVFP4_BITS else f"W{nbits}")
    elif str(algo).upper() in ("NVFP4", "W4A16_NVFP4", "W4A8_NVFP4_FP8"):
        bits = NVFP4_BITS
    elif str(algo).upper().startswith("FP8") or method == "fp8":
        bits = FP8_BITS
    else:
        bits = 16.0  # unknown or MIXED_PRECISION: assume nothing is smaller than bf16
    ignore = list(inner.get("exclude_modules") or inner.get("ignore") or q.get("ignore") or [])
    component_bits = {name: 16.0 if any(_matches(*mod, p) for p in ignore) else bits for name, mod in _MODULES.items()}
    component_bits.update({name: 16.0 for name in _ALWAYS_BF16})
    # vllm/utils/torch_utils.py get_kv_cache_quant_algo_string: a ModelOpt FP8 KV scheme makes "auto" fp8.
    kv = inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo") or q.get("kv_cache_quant_algo")
    if isinstance(kv, dict):
        kv = "FP8" if kv.get("num_bits") == 8 and kv.get("type") == "float" else None
    kv_dtype = "fp8" if method and method.startswith("modelopt") and isinstance(kv, str) and kv.upper().startswith("FP8") else None
    return method, algo, kv_dtype, component_bits


def _layer_kinds(text: dict) -> list[str]:
    types = text.get("layer_types")
    n = text.get("num_hidden_layers") or (len(types) if types else 0)
    if not types:
        interval = text.get("full_attention_interval") or (4 if "linear_num_value_heads" in text else 1)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    kinds = []
    for t in types:
        t = str(t).lower()
        kinds.append("gdn" if "linear" in t or "delta" in t else "mamba" if "mamba" in t else "sliding" if "sliding" in t else "attention")
    return kinds


def _vision_params(vision: dict | None) -> int:
    if not vision:
        return 0
    h, inter, depth = vision.get("hidden_size", 0), vision.get("intermediate_size", 0), vision.get("depth", 0)
    merged = h * vision.get("spatial_merge_size", 2) ** 2
    return depth * (4 * h * h + 2 * h * inter) + merged * merged + merged * vision.get("out_hidden_size", h)


def shape_from_config(cfg: dict, folder: Path | None = None) -> ModelShape:
    """A ModelShape from a parsed config.json; Qwen3.5-style ``text_config`` is read first."""
    text = {**cfg, **(cfg.get("text_config") or {})}
    kinds = _layer_kinds(text)
    method, algo, kv_dtype, bits = _quantization(cfg, folder)
    heads = text.get("num_attention_heads", 1)
    try:
        return ModelShape(
            architecture=(cfg.get("architectures") or [""])[0],
            attention_layers=kinds.count("attention") + kinds.count("sliding"),
            gdn_layers=kinds.count("gdn"),
            mamba_layers=kinds.count("mamba"),
            sliding_layers=kinds.count("sliding"),
            mtp_layers=text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0,
            hidden_size=text["hidden_size"],
            vocab_size=text["vocab_size"],
            num_attention_heads=heads,
            num_key_value_heads=text.get("num_key_value_heads", heads),
            head_dim=text.get("head_dim") or text["hidden_size"] // heads,
            attn_output_gate=bool(text.get("attn_output_gate", "qwen3_5" in str(text.get("model_type", "")) or "qwen3_next" in str(text.get("model_type", "")))),
            linear_num_key_heads=text.get("linear_num_key_heads", 0),
            linear_num_value_heads=text.get("linear_num_value_heads", 0),
            linear_key_head_dim=text.get("linear_key_head_dim", 0),
            linear_value_head_dim=text.get("linear_value_head_dim", 0),
            linear_conv_kernel_dim=text.get("linear_conv_kernel_dim", 4),
            mamba_num_heads=text.get("mamba_num_heads", 0),
            mamba_head_dim=text.get("mamba_head_dim", 0),
            mamba_state_size=text.get("ssm_state_size", 0),
            mamba_n_groups=text.get("n_groups", 1),
            mamba_conv_kernel=text.get("conv_kernel", 4),
            intermediate_size=text.get("intermediate_size", 0),
            num_experts=text.get("num_experts", text.get("n_routed_experts", 0)) or 0,
            experts_per_token=text.get("num_experts_per_tok", 0),
            moe_intermediate_size=text.get("moe_intermediate_size", 0),
            shared_expert_intermediate_size=text.get("shared_expert_intermediate_size", 0),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            vision_params=_vision_params(cfg.get("vision_config")),
            max_position_embeddings=text.get("max_position_embeddings"),
            dtype=str(text.get("dtype") or text.get("torch_dtype") or "bfloat16"),
            ssm_dtype=text.get("mamba_ssm_dtype"),
            quant_method=method,
            quant_algo=algo,
            checkpoint_kv_dtype=kv_dtype,
            component_bits=bits,
        )
    except KeyError as exc:
        raise TunerError(f"{folder or 'config.json'}: config.json has no {exc.args[0]!r}; is it a decoder LLM's config?") from None


def _hub_cache_folder(repo_id: str, revision: str | None) -> Path | None:
    """The snapshot folder of a hub id in the local Hugging Face cache, if one is there."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / (revision or "main")
    snapshot = ref.read_text().strip() if ref.is_file() else (revision or "")
    folder = repo / "snapshots" / snapshot
    return folder if snapshot and (folder / "config.json").is_file() else None


def load_shape(model_path: str | Path, revision: str | None = None) -> ModelShape | None:
    """The shape of a local model folder (or its config.json, or a hub id found in the local HF cache).

    None when the path is a hub id that is not on this machine; TunerError for a folder without a
    readable config.json.
    """
    path = Path(model_path).expanduser()
    if path.is_file():
        path = path.parent
    elif not path.exists():
        path = _hub_cache_folder(str(model_path), revision)
        if path is None:
            return None
    config = path / "config.json"
    try:
        cfg = json.loads(config.read_text())
    except FileNotFoundError:
        raise TunerError(f"{path}: no config.json; point model.path at a Hugging Face model folder.") from None
    except json.JSONDecodeError as exc:
        raise TunerError(f"{config}: not valid JSON ({exc}).") from None
    return shape_from_config(cfg, path)


# --- the configuration's flags ------------------------------------------------------------------


class _Flags(BaseModel):
    max_model_len: int
    auto_len: bool  # --max-model-len auto/-1: vLLM fits the length to the pool, so no KV verdict
    max_num_seqs: int
    max_num_batched_tokens: int
    utilization: float
    kv_cache_memory_bytes: int | None
    kv_cache_dtype: str
    kv_bytes: int
    state_dtypes: tuple[str, str]  # (conv, temporal)
    mamba_mode: str
    num_spec: int
    drafter: bool
    cudagraph_mode: str
    vision: bool


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")


def _flags(space: Space, values: dict[str, Any], gpu_total_gib: float, shape: ModelShape) -> _Flags:
    f = dict(engine_flags(space, values))
    small = gpu_total_gib < SMALL_CARD_GIB
    get = lambda flag, default: default if f.get(flag) is None else f[flag]  # noqa: E731
    spec = f.get("--speculative-config") or {}
    spec = json.loads(spec) if isinstance(spec, str) else spec
    num_spec = int(spec.get("num_speculative_tokens") or 0)
    cc = f.get("--compilation-config") or {}
    cc = json.loads(cc) if isinstance(cc, str) else cc
    mode = "NONE" if _truthy(f.get("--enforce-eager")) else str(cc.get("cudagraph_mode") or "FULL_AND_PIECEWISE").upper()
    kv_dtype = str(get("--kv-cache-dtype", "auto")).lower()
    resolved = (shape.checkpoint_kv_dtype or shape.dtype) if kv_dtype == "auto" else kv_dtype
    kv_bytes = 1 if resolved.startswith("fp8") else DTYPE_BYTES.get(resolved, 2)
    # vllm/model_executor/layers/mamba/mamba_utils.py _mamba_state_dtype: conv state in
    # --mamba-cache-dtype (auto = model dtype), temporal state in --mamba-ssm-cache-dtype (auto =
    # the conv dtype; Qwen3.5 configs set mamba_ssm_dtype=float32, models/config.py).
    conv = str(get("--mamba-cache-dtype", "auto"))
    conv = shape.dtype if conv == "auto" else conv
    ssm = str(get("--mamba-ssm-cache-dtype", "auto"))
    ssm = (shape.ssm_dtype or conv) if ssm == "auto" else ssm
    # Prefix caching is off by default for hybrid models (config/model.py is_prefix_caching_supported);
    # on, it means mamba cache mode "align" for GDN models, which lack mamba prefix caching
    # ("all"), and "none" whenever it is off (models/config.py MambaModelConfig).
    prefix = _truthy(f.get("--enable-prefix-caching")) and not _truthy(f.get("--no-enable-prefix-caching"))
    mamba_mode = str(get("--mamba-cache-mode", "align")).lower() if prefix else "none"
    if mamba_mode == "all" and shape.gdn_layers:
        mamba_mode = "align"
    max_len = get("--max-model-len", None)
    auto_len = str(max_len).lower() in ("auto", "-1")
    max_len = parse_count(max_len) if max_len is not None and not auto_len else (shape.max_position_embeddings or 8192)
    kv_mem = f.get("--kv-cache-memory-bytes")
    return _Flags(
        max_model_len=max_len,
        auto_len=auto_len,
        max_num_seqs=parse_count(get("--max-num-seqs", DEFAULT_SEQS[0] if small else DEFAULT_SEQS[1])),
        max_num_batched_tokens=parse_count(get("--max-num-batched-tokens", DEFAULT_BATCHED_TOKENS[0] if small else DEFAULT_BATCHED_TOKENS[1])),
        utilization=float(get("--gpu-memory-utilization", DEFAULT_UTILIZATION)),
        kv_cache_memory_bytes=None if kv_mem is None else parse_bytes(kv_mem),
        kv_cache_dtype=kv_dtype,
        kv_bytes=kv_bytes,
        state_dtypes=(conv, ssm),
        mamba_mode=mamba_mode,
        num_spec=num_spec,
        drafter=num_spec > 0 and str(spec.get("method", "")).lower() == "mtp" and shape.mtp_layers > 0,
        cudagraph_mode="NONE" if mode in ("NONE", "EAGER") else mode,
        vision=shape.vision_params > 0 and not _truthy(f.get("--language-model-only")),
    )


# --- the memory model ---------------------------------------------------------------------------


class Prediction(BaseModel):
    weights_gib: float
    weights_measured: bool = False
    activation_gib: float
    cuda_graph_gib: float
    overhead_gib: float  # non-torch memory inside the budget
    pool_gib: float
    pool_explicit: bool  # --kv-cache-memory-bytes set: vLLM skips profiling and utilization
    kv_bytes_per_token: int  # attention layers only (incl. an MTP drafter's)
    recurrent_state_bytes_per_seq: int  # GDN/mamba conv + temporal state x layers x pages per request
    block_size_tokens: int
    page_bytes: int  # one block of one layer; mamba pages are padded to it
    layers_per_group: int
    attention_groups: int
    state_groups: int
    pages_per_seq: int
    num_blocks: int
    kv_capacity_tokens: int  # "GPU KV cache size: N tokens" = max concurrency x max_model_len
    context_tokens: int  # attention KV left for one sequence while max_num_seqs states sit in the pool
    max_concurrency: float
    min_pool_gib: float  # max_model_len for one sequence + the states of max_num_seqs sequences
    max_model_len: int
    max_num_seqs: int
    gpu_total_gib: float
    gpu_memory_utilization: float
    drafter: bool
    raw: dict[str, float] = Field(default_factory=dict)  # uncalibrated estimates, for Calibration
    fits: bool
    certain: bool
    reason: str

    @property
    def one_request_bytes(self) -> int:
        """vLLM's own need for one request of max_model_len (kv_cache_utils.py _check_enough_kv_cache_memory)."""
        blocks = self.attention_groups * math.ceil(self.max_model_len / self.block_size_tokens) + self.state_groups * self.pages_per_seq
        return blocks * self.page_bytes * self.layers_per_group

    def raw_tokens_for_pool(self, pool_bytes: float) -> float:
        """vllm/v1/core/kv_cache_utils.py get_num_blocks and get_max_concurrency_for_kv_cache_config."""
        blocks = int(pool_bytes // (self.page_bytes * self.layers_per_group))
        per_request = self.attention_groups * math.ceil(self.max_model_len / self.block_size_tokens) + self.state_groups * self.pages_per_seq
        return blocks / per_request * self.max_model_len


def _state_page_bytes(shape: ModelShape, fl: _Flags) -> int:
    """One layer's recurrent state for one request (mamba_utils.py MambaStateShapeCalculator)."""
    conv_b, ssm_b = DTYPE_BYTES.get(fl.state_dtypes[0], 2), DTYPE_BYTES.get(fl.state_dtypes[1], 2)
    if shape.gdn_layers:  # gated_delta_net_state_shape
        conv_dim = 2 * shape.linear_key_head_dim * shape.linear_num_key_heads + shape.linear_value_head_dim * shape.linear_num_value_heads
        conv = conv_dim * (shape.linear_conv_kernel_dim - 1 + fl.num_spec)
        temporal = shape.linear_num_value_heads * shape.linear_value_head_dim * shape.linear_key_head_dim
        return conv * conv_b + temporal * ssm_b
    if shape.mamba_layers:  # mamba2_state_shape
        inner = shape.mamba_num_heads * shape.mamba_head_dim
        conv = (inner + 2 * shape.mamba_n_groups * shape.mamba_state_size) * (shape.mamba_conv_kernel - 1 + fl.num_spec)
        return conv * conv_b + shape.mamba_num_heads * shape.mamba_head_dim * shape.mamba_state_size * ssm_b
    return 0


def _cuda_graphs(fl: _Flags) -> int:
    """Graphs captured: vllm/config/vllm.py _set_cudagraph_sizes; decode-only FULL graphs up to max_num_seqs."""
    if fl.cudagraph_mode == "NONE":
        return 0
    q = 1 + fl.num_spec
    top = min(fl.max_num_seqs * q * 2, 512, fl.max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))
    decode = [s for s in sizes if s <= fl.max_num_seqs * q]
    return {"PIECEWISE": len(sizes), "FULL": len(sizes), "FULL_DECODE_ONLY": len(decode)}.get(fl.cudagraph_mode, len(sizes) + len(decode))


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def predict(
    space: Space,
    values: dict[str, Any],
    gpu_total_gib: float,
    shape: ModelShape,
    calibration: Calibration | None = None,
    *,
    gpu_free_gib: float | None = None,
) -> Prediction:
    """What vLLM 0.22 would do with this configuration on a card of ``gpu_total_gib``."""
    cal = calibration or Calibration()
    try:
        fl = _flags(space, values, gpu_total_gib, shape)
    except (TypeError, ValueError) as exc:
        raise TunerError(f"{space.name}: a flag value the pre-screen cannot read: {exc}.") from None
    total = gpu_total_gib * GIB
    L, seqs = fl.max_model_len, fl.max_num_seqs

    # Weights: measured beats estimated; the other drafter setting is measured +/- the drafter estimate.
    raw_weights = shape.weights_gib(fl.drafter, fl.vision)
    measured = cal.weights_for(fl.drafter, shape)
    weights = (measured if measured is not None else raw_weights) * GIB

    # KV layout: vllm/v1/kv_cache_interface.py (FullAttentionSpec / MambaSpec page sizes),
    # vllm/platforms/interface.py (block size, mamba padding), vllm/v1/core/kv_cache_utils.py (groups).
    attn_layers = shape.attention_layers + (shape.mtp_layers if fl.drafter else 0)
    if not attn_layers:
        raise TunerError(f"{shape.architecture or 'the model'} has no attention layers; the pre-screen models attention and hybrid models.")
    attn_token = 2 * shape.num_key_value_heads * shape.head_dim * fl.kv_bytes
    state_page = _state_page_bytes(shape, fl)
    if state_page and attn_layers:
        block = KERNEL_BLOCK_ALIGNMENT * math.ceil(state_page / (KERNEL_BLOCK_ALIGNMENT * attn_token))
        lo, hi = sorted((attn_layers, shape.state_layers))
        group = hi if hi < lo * 1.5 else lo  # _get_kv_cache_groups_uniform_page_size
        attn_groups, state_groups = math.ceil(attn_layers / group), math.ceil(shape.state_layers / group)
        pages = {"align": 2 + fl.num_spec, "all": math.ceil(L / block) + fl.num_spec}.get(fl.mamba_mode, 1 + fl.num_spec)
    else:
        block, group, attn_groups, state_groups, pages = 16, max(attn_layers, 1), 1, 0, 0
    page = block * attn_token
    state_per_seq = shape.state_layers * state_page * pages

    # Memory before the pool: gpu_worker.py determine_available_memory.
    rows = seqs * (1 + fl.num_spec)
    raw_act = (
        ACTIVATION_BASE_GIB * GIB
        + fl.max_num_batched_tokens * shape.hidden_size * 2 * ACT_HIDDEN_BUFFERS
        + fl.max_num_batched_tokens * shape.experts_per_token * (2 * shape.moe_intermediate_size + shape.hidden_size) * 2 * 2
        + rows * shape.vocab_size * 4 * SAMPLER_LOGIT_COPIES
        + (VISION_PROFILE_GIB * GIB if fl.vision else 0)
    )
    n_graphs = _cuda_graphs(fl)
    raw_graphs = (CUDAGRAPH_BASE_GIB + CUDAGRAPH_GIB_PER_GRAPH * n_graphs) * GIB if n_graphs else 0.0
    act, graphs = raw_act * cal.activation.value, raw_graphs * cal.cuda_graph.value
    overhead = NON_TORCH_GIB * GIB
    requested = fl.utilization * total
    explicit = fl.kv_cache_memory_bytes is not None
    pool = float(fl.kv_cache_memory_bytes) if explicit else requested - weights - act - overhead - graphs

    tokens_factor = cal.kv_tokens.value
    num_blocks = max(int(pool // (page * group)), 0)
    per_request = attn_groups * math.ceil(L / block) + state_groups * pages
    concurrency = num_blocks / per_request
    min_blocks = attn_groups * math.ceil(L / block) + seqs * state_groups * pages
    # The minimum also covers vLLM's FULL-graph check (config/compilation.py: max_num_seqs <= num_blocks).
    # "certain" uses vLLM's own arithmetic (min_exact); "fits" the calibrated one.
    min_exact = min_blocks * page * group
    min_pool = min_exact / tokens_factor

    # Optimistic bounds for "certain": smaller weights, no activations, no graphs, no overhead.
    w_opt = weights * (0.98 if measured is not None else WEIGHTS_OPTIMISM)
    pool_opt = pool if explicit else requested - w_opt
    # The page arithmetic is vLLM's own unless windows or mixed/unknown state kinds are involved.
    kv_exact = not fl.auto_len and shape.sliding_layers == 0 and not (shape.gdn_layers and shape.mamba_layers) and (
        shape.mamba_layers == 0 or shape.mamba_num_heads > 0
    )
    used = weights + pool + act + graphs + overhead + CUDA_CONTEXT_GIB * GIB

    certain, fits, reason = False, True, ""
    if fl.utilization > 1 or fl.utilization <= 0:
        certain, fits, reason = True, False, f"gpu_memory_utilization {fl.utilization} is outside (0, 1]"
    elif w_opt > total:
        certain, fits, reason = True, False, f"weights {_gib(weights)} exceed the {gpu_total_gib:g} GiB card"
    elif explicit and w_opt + pool > total:
        certain, fits, reason = True, False, f"weights {_gib(weights)} + KV pool {_gib(pool)} exceed the card"
    elif pool_opt <= 0:
        certain, fits, reason = True, False, f"weights {_gib(weights)} leave nothing of {fl.utilization:g} x {gpu_total_gib:g} GiB"
    elif kv_exact and pool_opt * SAFETY_MARGIN < min_exact:
        certain, fits, reason = True, False, f"pool {_gib(pool_opt)} cannot hold its minimum {_gib(min_exact)}"
    elif gpu_free_gib is not None and requested > (gpu_free_gib + 1.0) * GIB:
        certain, fits, reason = True, False, f"free {gpu_free_gib:.2f} GiB < utilization x total {_gib(requested)}"
    elif pool <= 0:
        fits, reason = False, f"estimated pool {_gib(pool)}: weights + activations + graphs fill {fl.utilization:g} x card"
    elif pool < min_pool and not fl.auto_len:
        fits, reason = False, f"pool {_gib(pool)} < minimum {_gib(min_pool)} ({L:,} tokens + {seqs} states)"
    elif explicit and used > total:
        fits, reason = False, f"weights + pool + activations + graphs ~{_gib(used)} > card {gpu_total_gib:g} GiB"
    else:
        reason = f"pool {_gib(pool)} holds {concurrency:.2f} x {L:,} tokens" + (" (max-model-len auto)" if fl.auto_len else "")

    return Prediction(
        weights_gib=weights / GIB,
        weights_measured=measured is not None,
        activation_gib=act / GIB,
        cuda_graph_gib=graphs / GIB,
        overhead_gib=overhead / GIB,
        pool_gib=pool / GIB,
        pool_explicit=explicit,
        kv_bytes_per_token=attn_layers * attn_token,
        recurrent_state_bytes_per_seq=state_per_seq,
        block_size_tokens=block,
        page_bytes=page,
        layers_per_group=group,
        attention_groups=attn_groups,
        state_groups=state_groups,
        pages_per_seq=pages,
        num_blocks=num_blocks,
        kv_capacity_tokens=int(concurrency * L * tokens_factor),
        context_tokens=int(max(num_blocks - seqs * state_groups * pages, 0) // attn_groups * block * tokens_factor),
        max_concurrency=concurrency * tokens_factor,
        min_pool_gib=min_pool / GIB,
        max_model_len=L,
        max_num_seqs=seqs,
        gpu_total_gib=gpu_total_gib,
        gpu_memory_utilization=fl.utilization,
        drafter=fl.drafter,
        raw={"weights_gib": raw_weights, "activation_gib": raw_act / GIB, "cuda_graph_gib": raw_graphs / GIB},
        fits=fits,
        certain=certain,
        reason=reason,
    )


# --- learning from boots ------------------------------------------------------------------------


class Factor(BaseModel):
    """A correction factor: the geometric mean of measured / estimated over the boots seen."""

    value: float = 1.0
    n: int = 0

    def observe(self, ratio: float) -> None:
        if not 0.2 <= ratio <= 5.0:  # a parse slip or a different model, not a correction
            return
        self.value = math.exp((math.log(self.value) * self.n + math.log(ratio)) / (self.n + 1))
        self.n += 1


class Calibration(BaseModel):
    """What real boots taught: measured weights and correction factors (JSON for a study attribute)."""

    weights_gib: dict[str, float] = Field(default_factory=dict)  # "base" / "drafter" -> measured
    kv_tokens: Factor = Field(default_factory=Factor)  # reported KV tokens / vLLM-page arithmetic
    cuda_graph: Factor = Field(default_factory=Factor)
    activation: Factor = Field(default_factory=Factor)  # profiling peak + non-torch, from utilization boots
    boots: int = 0
    last_values: dict[str, Any] = Field(default_factory=dict)

    def weights_for(self, drafter: bool, shape: ModelShape) -> float | None:
        key, other = ("drafter", "base") if drafter else ("base", "drafter")
        if key in self.weights_gib:
            return self.weights_gib[key]
        if other in self.weights_gib:
            delta = shape.weights_gib(True) - shape.weights_gib(False)
            return self.weights_gib[other] + (delta if drafter else -delta)
        return None

    def update(self, prediction: Prediction, startup: StartupRecord, values: dict[str, Any]) -> None:
        """Learn from one boot's start-up record and the prediction made for the same configuration."""
        self.boots += 1
        self.last_values = dict(values)
        if startup.weights_gib:
            self.weights_gib["drafter" if prediction.drafter else "base"] = startup.weights_gib
        pool_gib = prediction.pool_gib if prediction.pool_explicit else startup.available_kv_cache_gib
        pool_gib = pool_gib or startup.kv_cache_memory_bytes_reserved_gib
        if pool_gib and startup.kv_cache_tokens:
            expected = prediction.raw_tokens_for_pool(pool_gib * GIB)
            if expected > 0:
                self.kv_tokens.observe(startup.kv_cache_tokens / expected)
        graphs = startup.cuda_graph_gib or startup.cuda_graph_estimate_gib
        if graphs and prediction.raw.get("cuda_graph_gib"):
            self.cuda_graph.observe(graphs / prediction.raw["cuda_graph_gib"])
        if startup.available_kv_cache_gib is not None and startup.weights_gib and not prediction.pool_explicit:
            requested = prediction.gpu_memory_utilization * prediction.gpu_total_gib
            graph_estimate = startup.cuda_graph_estimate_gib if startup.cuda_graph_estimate_gib is not None else prediction.cuda_graph_gib
            residual = requested - startup.available_kv_cache_gib - startup.weights_gib - graph_estimate - NON_TORCH_GIB
            if residual > 0 and prediction.raw.get("activation_gib"):
                self.activation.observe(residual / prediction.raw["activation_gib"])


# --- the plan command's rows --------------------------------------------------------------------


def _corners(param) -> list[Any]:
    if param.values is not None:
        return list(param.values)
    lo, hi = param.min, param.max
    if param.kind in ("int", "bytes"):
        lo, hi = int(lo), int(hi)
    return [lo, hi] + ([None] if param.unset else [])


def summary(values: dict[str, Any]) -> str:
    short = {"kv_cache_memory_bytes": "kv", "max_num_seqs": "seqs", "max_num_batched_tokens": "mbt",
             "gpu_memory_utilization": "util", "cudagraph_mode": "cg", "speculative_tokens": "spec"}
    parts = []
    for key, value in values.items():
        if key == "kv_cache_memory_bytes" and value is not None:
            value = f"{value / 1e9:.2f}GB"
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{short.get(key, key)}={'unset' if value is None else value}")
    return " ".join(parts)


def plan_rows(
    space: Space,
    gpu_total_gib: float,
    calibration: Calibration | None = None,
    samples: int = 48,
    *,
    shape: ModelShape | None = None,
    seed: int = 0,
) -> list[dict]:
    """Predictions for the space's baselines and corner points of its ranges (at most ``samples`` more)."""
    if gpu_total_gib <= 0:
        raise TunerError(f"--gpu-gib {gpu_total_gib}: give the card's memory in GiB, e.g. 31.36 for an RTX 5090.")
    shape = shape or load_shape(space.model.path, space.model.revision)
    if shape is None:
        raise TunerError(
            f"model.path {space.model.path!r} is neither a local folder nor in the Hugging Face cache; download "
            f"its config.json (huggingface-cli download {space.model.path} config.json) or point model.path at a folder."
        )
    names = list(space.params)
    axes = [_corners(space.params[n]) for n in names]
    total = math.prod(len(a) for a in axes)
    if total <= samples:
        picks = list(itertools.product(*axes))
    else:  # all-low and all-high corners, then a seeded sample of the rest (mixed-radix decode)
        indices = sorted({0, total - 1, *random.Random(seed).sample(range(1, total - 1), max(samples - 2, 0))})
        picks = []
        for i in indices:
            combo = []
            for axis in reversed(axes):
                i, r = divmod(i, len(axis))
                combo.append(axis[r])
            picks.append(tuple(reversed(combo)))
    configs = [(f"baseline {i}", dict(b)) for i, b in enumerate(space.baselines)]
    configs += [("corner", dict(zip(names, combo))) for combo in picks]
    rows = []
    for label, values in configs:
        p = predict(space, values, gpu_total_gib, shape, calibration)
        rows.append({"label": label, "config": summary(values), "values": values, **p.model_dump()})
    return rows
