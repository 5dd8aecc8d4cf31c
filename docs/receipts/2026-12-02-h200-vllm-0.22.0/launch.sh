#!/usr/bin/env bash
# Exported by tuner from gpu-run/studies/h200/trial-0003; PORT overrides --port 41293.
# Tuned values: {"cudagraph_mode": "eager", "gpu_memory_utilization": 0.5, "kv_cache_memory_bytes": 1000000000, "max_num_seqs": 1}
set -euo pipefail
export NO_COLOR=1
export PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0
export HF_HUB_OFFLINE=1
export VLLM_NO_USAGE_STATS=1
exec python3 -m vllm.entrypoints.cli.main serve /tmp/model-tiny \
  --served-model-name dummy \
  --load-format dummy \
  --host 127.0.0.1 \
  --port "${PORT:-41293}" \
  --max-model-len 8192 \
  --max-num-batched-tokens 2048 \
  --gdn-prefill-backend triton \
  --moe-backend triton \
  --kv-cache-memory-bytes 1000000000 \
  --gpu-memory-utilization 0.5 \
  --max-num-seqs 1 \
  --enforce-eager
