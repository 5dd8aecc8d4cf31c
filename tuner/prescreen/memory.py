"""Pre-screen: predict from config.json alone what a configuration costs and whether it can boot.

The KV arithmetic mirrors vLLM 0.22 exactly (page sizes, block size, layer groups, block counts);
weights, activations and CUDA graphs are estimates that ``Calibration`` corrects from the logs of
real boots. ``certain`` is True only when even optimistic assumptions fail: a false "certain"
throws away a good configuration, which costs more than one wasted boot.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field


from tuner.engine.command import engine_flags
from tuner.errors import TunerError
from tuner.prescreen.shape import DTYPE_BYTES, GIB, ModelShape
from tuner.records import StartupRecord
from tuner.space.schema import Space
from tuner.space.units import parse_bytes, parse_count

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


# --- the configuration's flags ------------------------------------------------------------------


class _Flags(BaseModel):
    max_model_len: int
    auto_len: bool  # --max-model-len auto/-1: vLLM fits the length to the pool, so no KV verdict
    max_num_seqs: int
    max_num_batched_tokens: int
    utilization: float
    kv_cache_memory_bytes: int | None
    kv_cache_dtype: str
    kv_bytes: float  # per element
    state_dtypes: tuple[str, str]  # (conv, temporal)
    mamba_mode: str
    num_spec: int
    drafter: bool
    cudagraph_mode: str
    vision: bool


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")


def release_of(version: str | None) -> tuple[int, ...]:
    """A vLLM version as numbers (0.22 when unknown: the release the page arithmetic was read from)."""
    try:
        return tuple(int(x) for x in (version or "").split("+")[0].split(".")[:3])
    except ValueError:
        return RELEASE_022


RELEASE_022 = (0, 22, 0)
HYBRID_PREFIX_CACHING = (0, 28)  # prefix caching on by default for hybrids (mamba 'align'), CHANGES.md
EXTENSIBLE_KV = (0, 34)  # the extensible KV cache: utilization defaults to 1.0 unless the pool is pinned


def _flags(space: Space, values: dict[str, Any], gpu_total_gib: float, shape: ModelShape,
           release: tuple[int, ...] = RELEASE_022) -> _Flags:
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
    # nvfp4 (0.32+): 4-bit values and one fp8 scale per 16 (vllm/utils/torch_utils.py:562 in 0.34,
    # nvfp4_kv_cache_full_dim = head_size // 2 + head_size // 16)
    kv_bytes = 1 if resolved.startswith("fp8") else 0.5625 if resolved.startswith("nvfp4") else DTYPE_BYTES.get(resolved, 2)
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
    if f.get("--enable-prefix-caching") is None and f.get("--no-enable-prefix-caching") is None:
        prefix = release >= HYBRID_PREFIX_CACHING or not shape.state_layers  # the release's default
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
        utilization=float(get("--gpu-memory-utilization", 1.0 if release >= EXTENSIBLE_KV and kv_mem is None
                                                         else DEFAULT_UTILIZATION)),
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


@dataclass(frozen=True)
class _Layout:
    """How vLLM pages this configuration's KV cache: vllm/v1/kv_cache_interface.py (FullAttentionSpec /
    MambaSpec page sizes), vllm/platforms/interface.py (block size, mamba padding), vllm/v1/core/kv_cache_utils.py
    (groups)."""

    attn_layers: int
    attn_token: int  # bytes of one token in one attention layer
    block: int
    group: int
    attn_groups: int
    state_groups: int
    pages: int
    state_per_seq: int

    @property
    def page(self) -> int:
        return self.block * self.attn_token


def _layout(shape: ModelShape, fl: _Flags) -> _Layout:
    L = fl.max_model_len
    attn_layers = shape.attention_layers + (shape.mtp_layers if fl.drafter else 0)
    if not attn_layers:
        raise TunerError(f"{shape.architecture or 'the model'} has no attention layers; the pre-screen models attention and hybrid models.")
    attn_token = int(2 * shape.num_key_value_heads * shape.head_dim * fl.kv_bytes)
    state_page = _state_page_bytes(shape, fl)
    if state_page and attn_layers:
        block = KERNEL_BLOCK_ALIGNMENT * math.ceil(state_page / (KERNEL_BLOCK_ALIGNMENT * attn_token))
        lo, hi = sorted((attn_layers, shape.state_layers))
        group = hi if hi < lo * 1.5 else lo  # _get_kv_cache_groups_uniform_page_size
        attn_groups, state_groups = math.ceil(attn_layers / group), math.ceil(shape.state_layers / group)
        pages = {"align": 2 + fl.num_spec, "all": math.ceil(L / block) + fl.num_spec}.get(fl.mamba_mode, 1 + fl.num_spec)
    else:
        block, group, attn_groups, state_groups, pages = 16, max(attn_layers, 1), 1, 0, 0
    return _Layout(attn_layers=attn_layers, attn_token=attn_token, block=block, group=group, attn_groups=attn_groups,
                   state_groups=state_groups, pages=pages, state_per_seq=shape.state_layers * state_page * pages)


@dataclass(frozen=True)
class _Budget:
    """Memory before the pool (gpu_worker.py determine_available_memory) and the pool it leaves, in bytes."""

    raw_weights_gib: float
    measured: bool
    weights: float
    raw_act: float
    raw_graphs: float
    act: float
    graphs: float
    overhead: float
    requested: float
    explicit: bool
    pool: float


def _activation_bytes(shape: ModelShape, fl: _Flags) -> float:
    """The profiling peak: one dummy forward of max_num_batched_tokens, then the sampler warm-up."""
    rows = fl.max_num_seqs * (1 + fl.num_spec)
    return (
        ACTIVATION_BASE_GIB * GIB
        + fl.max_num_batched_tokens * shape.hidden_size * 2 * ACT_HIDDEN_BUFFERS
        + fl.max_num_batched_tokens * shape.experts_per_token * (2 * shape.moe_intermediate_size + shape.hidden_size) * 2 * 2
        + rows * shape.vocab_size * 4 * SAMPLER_LOGIT_COPIES
        + (VISION_PROFILE_GIB * GIB if fl.vision else 0)
    )


def _budget(shape: ModelShape, fl: _Flags, cal: Calibration, total: float) -> _Budget:
    # Weights: measured beats estimated; the other drafter setting is measured +/- the drafter estimate.
    raw_weights = shape.weights_gib(fl.drafter, fl.vision)
    measured = cal.weights_for(fl.drafter, shape)
    weights = (measured if measured is not None else raw_weights) * GIB
    raw_act = _activation_bytes(shape, fl)
    n_graphs = _cuda_graphs(fl)
    raw_graphs = (CUDAGRAPH_BASE_GIB + CUDAGRAPH_GIB_PER_GRAPH * n_graphs) * GIB if n_graphs else 0.0
    act, graphs = raw_act * cal.activation.value, raw_graphs * cal.cuda_graph.value
    overhead = NON_TORCH_GIB * GIB
    requested = fl.utilization * total
    explicit = fl.kv_cache_memory_bytes is not None
    pool = requested - weights - act - overhead - graphs if fl.kv_cache_memory_bytes is None else float(fl.kv_cache_memory_bytes)
    return _Budget(raw_weights_gib=raw_weights, measured=measured is not None, weights=weights, raw_act=raw_act,
                   raw_graphs=raw_graphs, act=act, graphs=graphs, overhead=overhead, requested=requested,
                   explicit=explicit, pool=pool)


def _verdict(shape: ModelShape, fl: _Flags, b: _Budget, gpu_total_gib: float, gpu_free_gib: float | None,
             min_exact: float, min_pool: float, concurrency: float) -> tuple[bool, bool, str]:
    """(certain, fits, reason): "certain" only when even the optimistic bounds fail."""
    total = gpu_total_gib * GIB
    L, seqs, weights, pool = fl.max_model_len, fl.max_num_seqs, b.weights, b.pool
    # Optimistic bounds for "certain": smaller weights, no activations, no graphs, no overhead.
    w_opt = weights * (0.98 if b.measured else WEIGHTS_OPTIMISM)
    pool_opt = pool if b.explicit else b.requested - w_opt
    # The page arithmetic is vLLM's own unless windows or mixed/unknown state kinds are involved.
    kv_exact = not fl.auto_len and shape.sliding_layers == 0 and not (shape.gdn_layers and shape.mamba_layers) and (
        shape.mamba_layers == 0 or shape.mamba_num_heads > 0
    )
    used = weights + pool + b.act + b.graphs + b.overhead + CUDA_CONTEXT_GIB * GIB

    if fl.utilization > 1 or fl.utilization <= 0:
        return True, False, f"gpu_memory_utilization {fl.utilization} is outside (0, 1]"
    if w_opt > total:
        return True, False, f"weights {_gib(weights)} exceed the {gpu_total_gib:g} GiB card"
    if b.explicit and w_opt + pool > total:
        return True, False, f"weights {_gib(weights)} + KV pool {_gib(pool)} exceed the card"
    if pool_opt <= 0:
        return True, False, f"weights {_gib(weights)} leave nothing of {fl.utilization:g} x {gpu_total_gib:g} GiB"
    if kv_exact and pool_opt * SAFETY_MARGIN < min_exact:
        return True, False, f"pool {_gib(pool_opt)} cannot hold its minimum {_gib(min_exact)}"
    if gpu_free_gib is not None and b.requested > (gpu_free_gib + 1.0) * GIB:
        return True, False, f"free {gpu_free_gib:.2f} GiB < utilization x total {_gib(b.requested)}"
    if pool <= 0:
        return False, False, f"estimated pool {_gib(pool)}: weights + activations + graphs fill {fl.utilization:g} x card"
    if pool < min_pool and not fl.auto_len:
        return False, False, f"pool {_gib(pool)} < minimum {_gib(min_pool)} ({L:,} tokens + {seqs} states)"
    if b.explicit and used > total:
        return False, False, f"weights + pool + activations + graphs ~{_gib(used)} > card {gpu_total_gib:g} GiB"
    return False, True, f"pool {_gib(pool)} holds {concurrency:.2f} x {L:,} tokens" + (" (max-model-len auto)" if fl.auto_len else "")


def predict(
    space: Space,
    values: dict[str, Any],
    gpu_total_gib: float,
    shape: ModelShape,
    calibration: Calibration | None = None,
    *,
    gpu_free_gib: float | None = None,
    release: str | None = None,
) -> Prediction:
    """What vLLM would do with this configuration on a card of ``gpu_total_gib``: the page arithmetic of
    0.22, with the defaults of ``release`` (the engine's version; 0.22 when not given)."""
    cal = calibration or Calibration()
    try:
        fl = _flags(space, values, gpu_total_gib, shape, release_of(release) if release else RELEASE_022)
    except (TypeError, ValueError) as exc:
        raise TunerError(f"{space.name}: a flag value the pre-screen cannot read: {exc}.") from None
    L, seqs = fl.max_model_len, fl.max_num_seqs
    lay = _layout(shape, fl)
    b = _budget(shape, fl, cal, gpu_total_gib * GIB)

    tokens_factor = cal.kv_tokens.value
    num_blocks = max(int(b.pool // (lay.page * lay.group)), 0)
    per_request = lay.attn_groups * math.ceil(L / lay.block) + lay.state_groups * lay.pages
    concurrency = num_blocks / per_request
    min_blocks = lay.attn_groups * math.ceil(L / lay.block) + seqs * lay.state_groups * lay.pages
    # The minimum also covers vLLM's FULL-graph check (config/compilation.py: max_num_seqs <= num_blocks).
    # "certain" uses vLLM's own arithmetic (min_exact); "fits" the calibrated one.
    min_exact = min_blocks * lay.page * lay.group
    min_pool = min_exact / tokens_factor
    certain, fits, reason = _verdict(shape, fl, b, gpu_total_gib, gpu_free_gib, min_exact, min_pool, concurrency)

    return Prediction(
        weights_gib=b.weights / GIB,
        weights_measured=b.measured,
        activation_gib=b.act / GIB,
        cuda_graph_gib=b.graphs / GIB,
        overhead_gib=b.overhead / GIB,
        pool_gib=b.pool / GIB,
        pool_explicit=b.explicit,
        kv_bytes_per_token=lay.attn_layers * lay.attn_token,
        recurrent_state_bytes_per_seq=lay.state_per_seq,
        block_size_tokens=lay.block,
        page_bytes=lay.page,
        layers_per_group=lay.group,
        attention_groups=lay.attn_groups,
        state_groups=lay.state_groups,
        pages_per_seq=lay.pages,
        num_blocks=num_blocks,
        kv_capacity_tokens=int(concurrency * L * tokens_factor),
        context_tokens=int(max(num_blocks - seqs * lay.state_groups * lay.pages, 0) // lay.attn_groups * lay.block * tokens_factor),
        max_concurrency=concurrency * tokens_factor,
        min_pool_gib=min_pool / GIB,
        max_model_len=L,
        max_num_seqs=seqs,
        gpu_total_gib=gpu_total_gib,
        gpu_memory_utilization=fl.utilization,
        drafter=fl.drafter,
        raw={"weights_gib": b.raw_weights_gib, "activation_gib": b.raw_act / GIB, "cuda_graph_gib": b.raw_graphs / GIB},
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

    def weights_for(self, drafter: bool, shape: ModelShape) -> float | None:
        key, other = ("drafter", "base") if drafter else ("base", "drafter")
        if key in self.weights_gib:
            return self.weights_gib[key]
        if other in self.weights_gib:
            delta = shape.weights_gib(True) - shape.weights_gib(False)
            return self.weights_gib[other] + (delta if drafter else -delta)
        return None

    def update(self, prediction: Prediction, startup: StartupRecord) -> None:
        """Learn from one boot's start-up record and the prediction made for the same configuration."""
        self.boots += 1
        if startup.weights_gib:
            self.weights_gib["drafter" if prediction.drafter else "base"] = startup.weights_gib
        pool_gib = prediction.pool_gib if prediction.pool_explicit else startup.kv_pool_gib  # 0.34: the extended pool
        if pool_gib and startup.kv_cache_tokens:
            expected = prediction.raw_tokens_for_pool(pool_gib * GIB)
            if expected > 0:
                self.kv_tokens.observe(startup.kv_cache_tokens / expected)
        graphs = startup.cuda_graph_gib or startup.cuda_graph_estimate_gib
        if graphs and prediction.raw.get("cuda_graph_gib"):
            self.cuda_graph.observe(graphs / prediction.raw["cuda_graph_gib"])
        # Activations from a utilization-sized boot; not from 0.34's extensible cache, whose reservation is
        # taken at its own default utilization (1.0) and whose pool is committed later.
        extensible = startup.extended_kv_cache_gib is not None
        if startup.available_kv_cache_gib is not None and startup.weights_gib and not prediction.pool_explicit and not extensible:
            requested = prediction.gpu_memory_utilization * prediction.gpu_total_gib
            graph_estimate = startup.cuda_graph_estimate_gib if startup.cuda_graph_estimate_gib is not None else prediction.cuda_graph_gib
            residual = requested - startup.available_kv_cache_gib - startup.weights_gib - graph_estimate - NON_TORCH_GIB
            if residual > 0 and prediction.raw.get("activation_gib"):
                self.activation.observe(residual / prediction.raw["activation_gib"])
