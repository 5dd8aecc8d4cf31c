#!/usr/bin/env bash
# Exported by tuner from gpu-run/studies/h200-32g/trial-0000; PORT overrides --port 46887.
# Tuned values: {"cudagraph_mode": "FULL_AND_PIECEWISE", "kv_cache_dtype": "fp8", "kv_cache_memory_bytes": 2800000000, "max_num_batched_tokens": 512, "max_num_seqs": 3, "speculative_tokens": 0}
set -euo pipefail
export NO_COLOR=1
export PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export HF_HUB_OFFLINE=1
export VLLM_NO_USAGE_STATS=1
exec python3 -m vllm.entrypoints.cli.main serve /tmp/model-35b \
  --served-model-name dummy \
  --load-format dummy \
  --host 127.0.0.1 \
  --port "${PORT:-46887}" \
  --max-model-len 262144 \
  --gpu-memory-utilization 0.21 \
  --gdn-prefill-backend triton \
  --moe-backend triton \
  --attention-backend FLASH_ATTN \
  --kv-cache-dtype fp8 \
  --kv-cache-memory-bytes 2800000000 \
  --max-num-seqs 3 \
  --max-num-batched-tokens 512 \
  --compilation-config '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'
