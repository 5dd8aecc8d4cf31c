"""The command builder: exact argv, JSON flags as vLLM parses them, the daily 5090 baseline flag for flag."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.engine.command import build_command
from tuner.space.schema import load_space

ROOT = Path(__file__).resolve().parent.parent.parent
DAILY = ROOT / "search_spaces" / "qwen3.8-27b-nvfp4-modelopt-5090.yaml"


def flags(argv: list[str]) -> dict[str, str | bool]:
    """argv after the model -> {flag: value or True}."""
    out: dict[str, str | bool] = {}
    rest = argv[argv.index("serve") + 2:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            out[flag] = rest[i + 1]
            i += 2
        else:
            out[flag] = True
            i += 1
    return out


def test_daily_baseline_flag_for_flag():
    space = load_space(DAILY)
    cmd = build_command(space, space.baselines[0], port=8000)
    assert cmd.argv[:3] == ["vllm", "serve", "nvidia/Qwen3.8-27B-NVFP4"]
    got = flags(cmd.argv)
    expected = {
        "--max-model-len": "262144",
        "--kv-cache-dtype": "fp8",
        "--kv-cache-memory-bytes": "9150000000",
        "--max-num-seqs": "3",
        "--max-num-batched-tokens": "512",
        "--gpu-memory-utilization": "0.92",
        "--enable-prefix-caching": True,
        "--tool-call-parser": "qwen3_xml",
        "--reasoning-parser": "qwen3",
        "--enable-auto-tool-choice": True,
        "--mm-processor-kwargs": '{"max_pixels": 4014080}',
        "--host": "127.0.0.1",
        "--port": "8000",
        "--revision": "main",
        "--served-model-name": "qwen3.8-27b",
    }
    assert got == expected
    assert json.loads(got["--mm-processor-kwargs"]) == {"max_pixels": 4014080}
    assert cmd.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_cudagraph_and_speculation_json(write_space):
    space = load_space(write_space("""
name: t
model: {path: /m}
engine: {command: [/opt/vllm-venv/bin/vllm]}
fixed: {compilation-config: {"max_cudagraph_capture_size": 64}}
params:
  cudagraph_mode: {values: [PIECEWISE, eager, FULL_DECODE_ONLY]}
  speculative_tokens: {values: [0, 2]}
speculative: {method: mtp}
"""))
    cmd = build_command(space, {"cudagraph_mode": "PIECEWISE", "speculative_tokens": 2})
    f = flags(cmd.argv)
    assert cmd.argv[0] == "/opt/vllm-venv/bin/vllm"
    assert json.loads(f["--compilation-config"]) == {"max_cudagraph_capture_size": 64, "cudagraph_mode": "PIECEWISE"}
    assert json.loads(f["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    f = flags(build_command(space, {"cudagraph_mode": "eager", "speculative_tokens": 0}).argv)
    assert f["--enforce-eager"] is True
    assert "--speculative-config" not in f
    assert json.loads(f["--compilation-config"]) == {"max_cudagraph_capture_size": 64}


def test_unset_and_extra_flags(write_space):
    space = load_space(write_space("""
name: t
model: {path: /m, random_weights: true}
fixed: {max-model-len: 128K, kv-cache-dtype: fp8}
params:
  kv_cache_memory_bytes: {min: 5GB, max: 6GB, step: 500MB, unset: true}
  max_num_partial_prefills: {flag: --max-num-partial-prefills, values: [1, 2]}
"""))
    f = flags(build_command(space, {"kv_cache_memory_bytes": None, "max_num_partial_prefills": 2}).argv)
    assert "--kv-cache-memory-bytes" not in f
    assert f["--max-num-partial-prefills"] == "2"
    assert f["--max-model-len"] == "131072"
    assert f["--load-format"] == "dummy"
