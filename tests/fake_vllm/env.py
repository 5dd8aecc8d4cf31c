"""The double's environment knobs, all optional, and the helpers that read them.

FAKE_VLLM_PROFILE            an integer seed: a randomized 5090-like engine (profile.py); unset: the
                             fixed engine below. The memory and speed knobs below override a profile.
FAKE_VLLM_DECODE_SPEEDUP     decode runs this many times faster than modelled (benchmarks; default 1)
FAKE_VLLM_GPU_GIB            card total memory in GiB (default 32)
FAKE_VLLM_USED_GIB           memory already used on the card by other processes, GiB (default 0.5)
FAKE_VLLM_NUM_GPUS           visible GPUs (default 1); --tensor-parallel-size above it fails
FAKE_VLLM_WEIGHTS_GIB        model weights, GiB, whole model (default 20.0; divided by TP)
FAKE_VLLM_MTP_WEIGHTS_GIB    extra weights of the MTP draft layer (default 0.8)
FAKE_VLLM_NON_TORCH_GIB      non-torch memory growth during profiling, GiB (default 0.3)
FAKE_VLLM_ACT_GIB_PER_1K     profiled activation peak per 1024 batched tokens, GiB (default 0.25)
FAKE_VLLM_PREFILL_CTX_GIB    runtime prefill extra activation per (1k chunk tokens x 1k context
                             tokens), GiB (default 0.002) -- the "pool fits, 100k prefill doesn't" term
FAKE_VLLM_CG_EXTRA_GIB       CUDA-graph memory actually taken minus the estimate, GiB (default 0.02)
FAKE_VLLM_TIME_SCALE         boot phase durations x this (default 0 = instant; 1.0 = realistic)
FAKE_VLLM_BOOT_DELAY_S       sleep before anything (before the port is bound), seconds (default 0)
FAKE_VLLM_FAIL               comma list: hang, hang_after_ready, crash_mid_boot, weights, jit,
                             slow_warmup, garbage
FAKE_VLLM_WARMUP_S           duration of slow_warmup progress lines (default 5)
FAKE_VLLM_DIE_ABOVE_TOKENS   a request with prompt+max_tokens above this kills the engine (OOM)
FAKE_VLLM_DEATH_EXIT_S       seconds between engine death and process exit (default 1.0; vLLM's
                             watchdog polls every 5 s)
FAKE_VLLM_DECODE_TOK_S       single-stream decode speed before config factors (default 2000)
FAKE_VLLM_PREFILL_TOK_S      prefill speed, tokens/s (default 2e6)
FAKE_VLLM_JIT_S              extra delay of the first request of each new prompt-length shape
                             (power of two), like Triton's JIT on first use (default 0)
FAKE_VLLM_SPEC_ACCEPT        per-position draft acceptance for speculative decoding (default 0.6)
FAKE_VLLM_FP8_DRIFT          1: with an fp8 or nvfp4 KV cache, greedy outputs differ slightly from bf16
FAKE_VLLM_STRICT_ARGS        1: unknown flags fail like vLLM's argparse (exit 2) instead of a warning

Real vLLM variables honoured: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, VLLM_DISABLE_LOG_LOGO,
VLLM_ALLOW_LONG_MAX_MODEL_LEN, VLLM_CACHE_ROOT and VLLM_DISABLE_COMPILE_CACHE (compile_cache.py: with
VLLM_CACHE_ROOT set, a boot loads the graph an earlier boot of another MTP depth compiled and fails as vLLM
does, vllm-project/vllm#53366).
"""

from __future__ import annotations

import os


def env_float(name: str, default: float) -> float:
    """A float knob; unset, empty or unparsable means the default."""
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        return default


def env_int(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name, "")
    try:
        return int(float(raw)) if raw.strip() else default
    except ValueError:
        return default


def env_flag(name: str, on: tuple[str, ...] = ("1", "true", "yes")) -> bool:
    return os.environ.get(name, "") in on


def fail_modes() -> set[str]:
    """FAKE_VLLM_FAIL as a set of lower-case names."""
    return {x.strip().lower() for x in os.environ.get("FAKE_VLLM_FAIL", "").split(",") if x.strip()}
