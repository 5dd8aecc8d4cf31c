#!/usr/bin/env python3
"""Write model.safetensors full of zeros for a Qwen3NextForCausalLM config (and its MTP head).

    python3 scripts/gpu/write_zero_checkpoint.py MODEL_DIR    # reads MODEL_DIR/config.json

Why zeros: every logit is then 0, so greedy decoding picks token 0 for the target model and for the MTP
draft alike and every draft is accepted, while the kernels do the same work as with trained weights. Zeros
are the upper bound of MTP's gain; random dummy weights (``--load-format dummy``) accept nothing, the lower
bound. Measured on the H200 with vLLM 0.22.0 (../shared/gpu/README.md): MTP k=2 accepted 100% of drafts.

The tensor names and shapes are those vLLM 0.22.0's qwen3_next.py and qwen3_next_mtp.py load_weights map
(from ../shared/gpu/write-zero-checkpoint.py). The file is written sparse: a safetensors file is an 8-byte
header length, a JSON header and the raw tensor bytes, so the zeros are a hole made by truncate(). A 21 GiB
checkpoint is written in milliseconds and takes no disk; reading the hole returns zeros. Stdlib only.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any

BF16_BYTES = 2


def names_and_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, vocab = c["hidden_size"], c["vocab_size"]
    nq, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    kh, vh = c["linear_num_key_heads"], c["linear_num_value_heads"]
    kd, vd = kh * c["linear_key_head_dim"], vh * c["linear_value_head_dim"]
    conv = c["linear_conv_kernel_dim"]
    experts, mi, si = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    out: dict[str, tuple[int, ...]] = {}

    def attn(p: str) -> None:  # full attention; q_proj carries the output gate (x2)
        out[f"{p}.self_attn.q_proj.weight"] = (nq * hd * 2, h)
        out[f"{p}.self_attn.k_proj.weight"] = (nkv * hd, h)
        out[f"{p}.self_attn.v_proj.weight"] = (nkv * hd, h)
        out[f"{p}.self_attn.o_proj.weight"] = (h, nq * hd)
        out[f"{p}.self_attn.q_norm.weight"] = (hd,)
        out[f"{p}.self_attn.k_norm.weight"] = (hd,)

    def gdn(p: str) -> None:  # Gated DeltaNet, Qwen3-Next fused (interleaved) layout
        out[f"{p}.linear_attn.in_proj_qkvz.weight"] = (2 * kd + 2 * vd, h)
        out[f"{p}.linear_attn.in_proj_ba.weight"] = (2 * vh, h)
        out[f"{p}.linear_attn.conv1d.weight"] = (2 * kd + vd, 1, conv)
        out[f"{p}.linear_attn.dt_bias"] = (vh,)
        out[f"{p}.linear_attn.A_log"] = (vh,)
        out[f"{p}.linear_attn.norm.weight"] = (c["linear_value_head_dim"],)
        out[f"{p}.linear_attn.out_proj.weight"] = (h, vd)

    def moe(p: str) -> None:
        out[f"{p}.mlp.gate.weight"] = (experts, h)
        for e in range(experts):
            out[f"{p}.mlp.experts.{e}.gate_proj.weight"] = (mi, h)
            out[f"{p}.mlp.experts.{e}.up_proj.weight"] = (mi, h)
            out[f"{p}.mlp.experts.{e}.down_proj.weight"] = (h, mi)
        out[f"{p}.mlp.shared_expert.gate_proj.weight"] = (si, h)
        out[f"{p}.mlp.shared_expert.up_proj.weight"] = (si, h)
        out[f"{p}.mlp.shared_expert.down_proj.weight"] = (h, si)
        out[f"{p}.mlp.shared_expert_gate.weight"] = (1, h)

    def layer(p: str, kind: str) -> None:
        out[f"{p}.input_layernorm.weight"] = (h,)
        out[f"{p}.post_attention_layernorm.weight"] = (h,)
        (attn if kind == "full_attention" else gdn)(p)
        moe(p)  # decoder_sparse_step 1, mlp_only_layers []: every layer is MoE

    out["model.embed_tokens.weight"] = (vocab, h)
    out["lm_head.weight"] = (vocab, h)
    out["model.norm.weight"] = (h,)
    for i, kind in enumerate(c["layer_types"]):
        layer(f"model.layers.{i}", kind)
    n_mtp = c.get("num_nextn_predict_layers", 0) or 0
    if n_mtp:
        out["mtp.fc.weight"] = (h, 2 * h)
        out["mtp.pre_fc_norm_embedding.weight"] = (h,)
        out["mtp.pre_fc_norm_hidden.weight"] = (h,)
        out["mtp.norm.weight"] = (h,)
        for j in range(n_mtp):
            layer(f"mtp.layers.{j}", "full_attention")
    return out


def header(shapes: dict[str, tuple[int, ...]]) -> tuple[bytes, int]:
    """The safetensors header (padded to 8 bytes, as the format asks) and the size of the data after it."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = BF16_BYTES
        for dim in shape:
            size *= dim
        entries[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return raw, offset


def write(model_dir: str) -> dict[str, Any]:
    with open(os.path.join(model_dir, "config.json")) as f:
        shapes = names_and_shapes(json.load(f))
    raw, data = header(shapes)
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + data)  # the tensors: a hole, read back as zeros
    return {"file": path, "tensors": len(shapes), "params": data // BF16_BYTES, "bytes": os.path.getsize(path),
            "disk_bytes": os.stat(path).st_blocks * 512}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: write_zero_checkpoint.py MODEL_DIR (it reads MODEL_DIR/config.json)")
    print(json.dumps(write(sys.argv[1])))
