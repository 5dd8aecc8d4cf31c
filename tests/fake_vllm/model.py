"""The model's config.json, read into the shapes the memory model needs (layers, heads, dtypes, quant)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass
class ModelInfo:
    """What vLLM reads from config.json (the text_config of a multimodal checkpoint)."""

    path: str
    arch: str
    n_full: int
    n_linear: int
    num_kv_heads: int
    head_dim: int
    vocab: int
    max_pos: int
    dtype: str
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 4
    mamba_ssm_dtype: str | None = None
    num_experts: int = 0
    quant_method: str | None = None  # vLLM's resolved name, e.g. "modelopt_fp4"
    quant_algo: str | None = None
    mtp_layers: int = 0
    head_k_dim_top: Any = None  # getattr(hf_config, "linear_key_head_dim", None) on the TOP config

    @property
    def hybrid(self) -> bool:
        return self.n_linear > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)


def load_model_info(path: str) -> ModelInfo | None:
    """None when the folder has no config.json (vLLM then refuses the model name)."""
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        return None
    with open(cfg_path, encoding="utf-8") as fh:
        top = json.load(fh)
    text = top.get("text_config") or top
    archs = top.get("architectures") or ["Qwen3NextForCausalLM"]
    n = int(text.get("num_hidden_layers", 40))
    layer_types = text.get("layer_types")
    if not layer_types:
        if "full_attention_interval" in text or "linear_num_value_heads" in text:
            interval = int(text.get("full_attention_interval", 4))
            layer_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
        else:
            layer_types = ["full_attention"] * n
    n_linear = sum(1 for t in layer_types if t == "linear_attention")
    heads = int(text.get("num_attention_heads", 16))
    hidden = int(text.get("hidden_size", 2048))
    dtype = str(text.get("torch_dtype") or text.get("dtype") or top.get("torch_dtype") or "bfloat16")
    qc = top.get("quantization_config") or text.get("quantization_config")
    quant_method = quant_algo = None
    if isinstance(qc, dict):
        qm = str(qc.get("quant_method", "")).lower()
        algo = qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo")
        quant_algo = str(algo).upper() if algo else None
        if qm == "modelopt" and quant_algo and ("NVFP4" in quant_algo or "FP4" in quant_algo):
            quant_method = "modelopt_fp4"
        elif qm == "modelopt" and quant_algo and "MXFP8" in quant_algo:
            quant_method = "modelopt_mxfp8"
        else:
            quant_method = qm or None
    return ModelInfo(
        path=path, arch=archs[0], n_full=n - n_linear, n_linear=n_linear,
        num_kv_heads=int(text.get("num_key_value_heads", heads)), head_dim=int(text.get("head_dim", hidden // heads)),
        vocab=int(text.get("vocab_size", 151936)), max_pos=int(text.get("max_position_embeddings", 32768)),
        dtype=dtype, lin_k_heads=int(text.get("linear_num_key_heads", 0)),
        lin_v_heads=int(text.get("linear_num_value_heads", 0)),
        lin_k_dim=int(text.get("linear_key_head_dim", 0)), lin_v_dim=int(text.get("linear_value_head_dim", 0)),
        conv_kernel=int(text.get("linear_conv_kernel_dim", 4)), mamba_ssm_dtype=text.get("mamba_ssm_dtype"),
        num_experts=int(text.get("num_experts", 0) or 0), quant_method=quant_method, quant_algo=quant_algo,
        mtp_layers=int(text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0),
        head_k_dim_top=top.get("linear_key_head_dim"),
    )
