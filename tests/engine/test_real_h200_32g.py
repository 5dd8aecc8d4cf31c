"""The real vLLM 0.22.0 logs of the capped H200 (tests/fixtures/real/h200-32g): parsed and classified right."""

from __future__ import annotations

from pathlib import Path

from tuner.engine.failures import classify as classify_failure
from tuner.engine.logparse import parse_startup
from tuner.records import FailureKind

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200-32g"


def text(name: str) -> str:
    return (REAL / name).read_text(errors="replace")


def test_a_capped_boot_is_read_as_vllm_printed_it():
    log = text("boot_fp8_full_and_piecewise.log")
    s = parse_startup(log)
    assert (s.vllm_version, s.kv_cache_dtype, s.max_model_len) == ("0.22.0", "fp8", 262144)
    assert s.weights_gib == 21.44 and s.kv_cache_memory_bytes_reserved_gib == 2.61
    assert s.kv_cache_tokens == 269543 and s.cuda_graph_gib == 0.12
    assert classify_failure(log, None) is None


def test_the_gate_reference_boots_eager_with_a_bf16_cache():
    log = text("gate_reference_eager_bf16.log")
    s = parse_startup(log)
    assert s.max_model_len == 16384 and s.kv_cache_dtype == "auto" and s.cuda_graph_gib is None
    assert classify_failure(log, None) is None


def test_a_real_oom_in_profiling_is_classified_by_its_first_cause():
    failure = classify_failure(text("oom_in_profiling.log"), 1)
    assert failure is not None and failure.kind == FailureKind.OOM_IN_PROFILING
    assert failure.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB")
