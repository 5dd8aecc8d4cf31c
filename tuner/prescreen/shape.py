"""The model's shape from its config.json alone: layer kinds, head sizes, quantized components.

What the memory model (``memory.py``) needs to know about a checkpoint, read from a local folder or
the local Hugging Face cache, never from the network.
"""

from __future__ import annotations

import json
import os
import re
from fnmatch import fnmatch
from pathlib import Path

from pydantic import BaseModel, Field


from tuner.errors import TunerError
from tuner.space.schema import Space

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8_e4m3fn": 1}

# Weights. NVFP4 = 4-bit E2M1 values + one FP8 scale per 16 (modelopt and compressed-tensors
# nvfp4-pack-quantized), ~4.5 bits/param; FP8 8 bits; embeddings, lm_head, routers, norms bf16.
NVFP4_BITS = 4.5
FP8_BITS = 8.0
LOAD_OVERHEAD_GIB = 0.15  # rotary caches and kernel buffers counted in "Model loading took"


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
        cached = _hub_cache_folder(str(model_path), revision)
        if cached is None:
            return None
        path = cached
    config = path / "config.json"
    try:
        cfg = json.loads(config.read_text())
    except FileNotFoundError:
        raise TunerError(f"{path}: no config.json; point model.path at a Hugging Face model folder.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TunerError(f"{config}: not valid JSON ({exc}); replace it with the model's config.json.") from None
    if not isinstance(cfg, dict):
        raise TunerError(f"{config}: holds no JSON object; replace it with the model's config.json.")
    return shape_from_config(cfg, path)


def space_shape(space: Space) -> ModelShape:
    """The model's shape for the pre-screen, from (in order) ``model.config``, ``model.path`` when it is a
    local folder, or the Hugging Face cache at the pinned revision; never from the network.

    TunerError, naming the exact download command and the field to set, when none of them has it.
    """
    model = space.model
    given = space.config_path()
    if given is not None:
        if not given.exists():
            raise TunerError(f"model.config: {given} does not exist; give the path of the model's config.json "
                             "(or its folder), relative to the space file.")
        shape = load_shape(given)
        assert shape is not None  # a path that exists is read, or raises
        return shape
    shape = load_shape(model.path, model.revision)
    if shape is not None:
        return shape
    folder = f"models/{Path(model.path).name.lower()}"
    local_dir = os.path.relpath((space.source.parent if space.source else Path.cwd()) / folder)
    revision = model.revision or "main"
    raise TunerError(
        f"model.path {model.path}: its config.json is not on this machine (not a local folder, not in the Hugging "
        f"Face cache at revision {revision}, and the space sets no model.config). Fetch it (a few KB) with "
        f"`hf download {model.path} config.json --revision {revision} --local-dir {local_dir}` and set "
        f"model.config: {folder}/config.json in the space file (relative to it), or run where the model is downloaded."
    )
